//! The engine worker: one thread that owns every loaded checkpoint and runs the decisions
//! ([`laya_core::decide`]) in arrival order, upstream's FIFO inference gate.
//!
//! Handlers never touch an engine; they send a [`Job`] down a bounded channel, with their
//! tracing span, and await the reply. The thread builds its engines itself, so no device value
//! crosses threads, and inference never runs on the I/O threads.
//!
//! On an engine whose answers do not depend on their batch mates, the queued requests that
//! one forward pass holds are taken together, in arrival order, and share it
//! ([`laya_core::decide::decide_prepared_each`]), each still getting the answer it would get
//! alone; the next pass takes the next ones. Each answer leaves as soon as its own passes
//! are done. Nothing waits for more requests to arrive. On any other engine (MLX's) the worker
//! takes one request at a time, so that each answer leaves as soon as it is done, with its
//! own inference time.
//!
//! On such an engine a request is also prepared (routed, checked, tokenized and laid out,
//! [`laya_core::decide::prepare`]) on a blocking thread of its own before it is queued, from
//! the worker's last published [`Layouts`]: the worker thread then spends its time on
//! forward passes, and the preparation of the next requests overlaps the current pass.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use laya_core::checkpoints::Resident;
use laya_core::decide::{
    self, Checkpoints, DecideError, Decided, Decision, Layouts, Preparation, Settings,
};
use laya_core::engine::EngineInfo;
use laya_core::routing::Checkpoint;
use tokio::sync::oneshot;

/// A finished decision and upstream's `X-Inference-Time-Ms`: the time spent on it (its
/// preparation ahead, when it was prepared ahead, plus the worker's time from starting on it
/// to its answer: routing, tokenization, forward passes, decoding, gate). Taken with others,
/// a request counts from the end of the last pass before its own, not the passes of requests
/// answered before it ([`decide::Answered::since`]).
#[derive(Debug)]
pub struct Answer {
    pub decided: Decided,
    pub inference_ms: f64,
}

/// Why the worker gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Decide(#[from] DecideError),
    /// The engine panicked while deciding (the worker keeps running).
    #[error("the engine panicked")]
    Panicked,
    /// The worker thread is gone.
    #[error("the inference worker is not running")]
    Stopped,
}

struct Job {
    decision: Decision,
    /// What [`WorkerHandle::prepare`] did ahead, and how long it took.
    prepared: Option<Preparation>,
    prepare_ms: f64,
    span: tracing::Span,
    /// The request's admission slot: held until its decision is done, even when the client
    /// has gone, as upstream's handler holds it.
    _ticket: Box<dyn Send>,
    /// What counts the job in its worker's load (the pool's in-flight count): dropped when
    /// the worker answers the job or drops it, not when its client goes, and when the job
    /// comes back unrun.
    _load: Box<dyn Send>,
    reply: oneshot::Sender<Outcome>,
}

/// What a queued decision gets back.
pub(crate) enum Outcome {
    /// The worker ran it.
    Done(Result<Answer, WorkerError>),
    /// The worker's engines failed to load: the decision comes back unrun, with its ticket,
    /// for another worker to take.
    Refused(Box<Unsent>),
}

/// A taken job's way back to its client.
struct Waiting {
    reply: oneshot::Sender<Outcome>,
    ticket: Box<dyn Send>,
    load: Box<dyn Send>,
    prepare_ms: f64,
}

impl Waiting {
    fn send(self, outcome: Result<Answer, WorkerError>) {
        // The slot is freed before the answer leaves, as upstream's handler leaves its
        // semaphore before responding: a client that sends its next request on reading
        // this answer must find the slot free, and this worker no longer busy with it.
        drop(self.ticket);
        drop(self.load);
        // The client may have gone; its answer is discarded like upstream's.
        let _ = self.reply.send(Outcome::Done(outcome));
    }
}

/// What the worker reports once its engines are built (the ready line, `/health`).
#[derive(Debug, Clone)]
pub struct Started {
    /// The engine of the checkpoints (what a first load would use when none is preloaded).
    pub info: EngineInfo,
    pub load_ms: f64,
    pub warmup_ms: f64,
}

/// The checkpoints the worker owns, as it builds them: how to unload them after idling.
pub trait Owned: Checkpoints {
    /// Unload everything resident (upstream's idle unload); a no-op where nothing can be
    /// loaded again.
    fn unload_all(&mut self) {}
}

impl<F: laya_core::engine::Forward> Owned for laya_core::checkpoints::Single<F> {}

impl<F: laya_core::engine::Forward> Owned for laya_core::checkpoints::Router<F> {
    fn unload_all(&mut self) {
        laya_core::checkpoints::Router::unload_all(self);
    }
}

/// What the worker publishes after each decision.
struct Published {
    resident: Vec<Resident>,
    /// Upstream's `last_request`: when the worker's checkpoints finished loading, the last
    /// decision finished (upstream marks it after every inference) or the last request was
    /// admitted ([`WorkerHandle::mark_request`]), whichever came last. The idle clock.
    last_request: Instant,
    /// Jobs dropped before they ran because their client had gone (or timed out).
    cancelled: u64,
    /// What requests can be laid out with ahead of the queue (empty on an engine whose
    /// requests do not share passes).
    layouts: Arc<Layouts>,
}

/// Counts a decision dropped while it was being prepared (see [`WorkerHandle::prepare`]).
struct Cancelled<'a> {
    published: &'a Mutex<Published>,
    armed: bool,
}

impl Drop for Cancelled<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.published
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .cancelled += 1;
        }
    }
}

/// A decision with what was prepared of it ahead of the queue.
pub(crate) struct Prepped {
    pub decision: Decision,
    prepared: Option<Preparation>,
    prepare_ms: f64,
}

impl From<Decision> for Prepped {
    fn from(decision: Decision) -> Prepped {
        Prepped {
            decision,
            prepared: None,
            prepare_ms: 0.0,
        }
    }
}

/// Where a queued decision's outcome arrives.
pub(crate) type Reply = oneshot::Receiver<Outcome>;
/// A decision a worker could not take (its thread stopped, or its engines failed to load),
/// with its admission ticket.
pub(crate) type Unsent = (Decision, Box<dyn Send>);

/// Where the worker thread is in its life ([`WorkerHandle::is_running`]).
const LOADING: u8 = 0;
const RUNNING: u8 = 1;
/// Its engines failed to load: it only gives back what is queued on it.
const FAILED: u8 = 2;
/// Its thread has ended (it panicked, or every handle is gone).
const STOPPED: u8 = 3;

/// Marks the worker stopped when its thread ends, however it ends (a panic included).
struct Exit(Arc<AtomicU8>);

impl Drop for Exit {
    fn drop(&mut self) {
        self.0.store(STOPPED, Ordering::SeqCst);
    }
}

/// The sending side of the worker's queue, and what it publishes.
#[derive(Clone)]
pub struct WorkerHandle {
    tx: mpsc::Sender<Job>,
    published: Arc<Mutex<Published>>,
    settings: Arc<Settings>,
    life: Arc<AtomicU8>,
}

impl WorkerHandle {
    /// Whether the worker can still answer: loading or loaded, not failed to load and its
    /// thread not ended.
    pub fn is_running(&self) -> bool {
        matches!(self.life.load(Ordering::SeqCst), LOADING | RUNNING)
    }

    /// Upstream's `_mark_request()` on a request's arrival: restarts the idle clock, so that
    /// an idle unload waits for the request (the worker checks the clock again right before
    /// it unloads) and `/health`'s `idle_seconds` counts from it.
    pub fn mark_request(&self) {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last_request = Instant::now();
    }

    /// The resident checkpoints after the last finished decision, least recently used first.
    pub fn resident(&self) -> Vec<Resident> {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .resident
            .clone()
    }

    /// Queued decisions dropped unrun because nobody waited for them any more.
    pub fn cancelled(&self) -> u64 {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cancelled
    }

    /// How long ago the idle clock last restarted: the last decision finished, the last
    /// request arrived, or the checkpoints finished loading (the time since the worker
    /// started while they load).
    pub fn idle_for(&self) -> Duration {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last_request
            .elapsed()
    }

    /// Prepares a decision on a blocking thread from the worker's published layouts; as it
    /// is when the worker's requests do not share passes (nothing to lay out ahead). The
    /// request's admission slot (`ticket`) goes with the work and comes back with it.
    pub(crate) async fn prepare(
        &self,
        decision: Decision,
        ticket: Box<dyn Send>,
    ) -> Result<(Prepped, Box<dyn Send>), WorkerError> {
        let layouts = self
            .published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .layouts
            .clone();
        if layouts.is_empty() {
            return Ok((decision.into(), ticket));
        }
        let settings = self.settings.clone();
        let span = tracing::Span::current();
        // A client that leaves while its request is prepared drops this future: that request
        // is a queued decision dropped unrun, counted as the worker counts the others. The
        // preparation runs on, and holds the slot until it ends: a client that leaves at
        // once, again and again, would otherwise pile up work that admission never sees.
        let mut left = Cancelled {
            published: &self.published,
            armed: true,
        };
        let work = tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let started = Instant::now();
            let prepared = decide::prepare(&settings, &layouts, &decision);
            let prepped = Prepped {
                decision,
                prepared: Some(prepared),
                prepare_ms: started.elapsed().as_secs_f64() * 1e3,
            };
            (prepped, ticket)
        });
        let done = work.await;
        left.armed = false;
        joined(done)
    }

    /// Queues a decision; gives it back, with its ticket, when the worker thread is gone.
    /// `load` goes with the job, for as long as the worker has it: dropped once the worker
    /// answers it or drops it unrun, or at once when the job comes back.
    pub(crate) fn enqueue(
        &self,
        prepped: Prepped,
        ticket: Box<dyn Send>,
        load: Box<dyn Send>,
    ) -> Result<Reply, Box<Unsent>> {
        let (reply, rx) = oneshot::channel();
        let job = Job {
            decision: prepped.decision,
            prepared: prepped.prepared,
            prepare_ms: prepped.prepare_ms,
            span: tracing::Span::current(),
            _ticket: ticket,
            _load: load,
            reply,
        };
        // The channel refuses only once the worker has stopped.
        match self.tx.send(job) {
            Ok(()) => Ok(rx),
            Err(mpsc::SendError(job)) => Err(Box::new((job.decision, job._ticket))),
        }
    }
}

/// How the worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub settings: Settings,
    /// Upstream's `LAYA_IDLE_UNLOAD_SECONDS`: everything resident is unloaded once no
    /// decision has finished, and no request arrived, for that long since the checkpoints
    /// were loaded.
    pub idle_unload: Option<Duration>,
}

/// Starts the worker thread. `build` runs on that thread and makes the checkpoints; its
/// outcome is reported through the returned receiver before any job is taken.
pub fn spawn<C, B>(
    cfg: WorkerConfig,
    build: B,
) -> std::io::Result<(
    WorkerHandle,
    mpsc::Receiver<anyhow::Result<Started>>,
    std::thread::JoinHandle<()>,
)>
where
    C: Owned + 'static,
    B: FnOnce() -> anyhow::Result<(C, Started)> + Send + 'static,
{
    let WorkerConfig {
        settings,
        idle_unload,
    } = cfg;
    // Tokens a forward pass shared by queued requests may hold; 0 runs each alone.
    let pass_tokens = settings.pass_tokens;
    // Unbounded: every job holds an admission slot (its ticket), so the slots bound the
    // queue. A channel sized to them would allocate every slot up front (~0.5 KB each),
    // whatever `LAYA_MAX_CONCURRENT` says, and abort on a large one.
    let (tx, rx) = mpsc::channel::<Job>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let published = Arc::new(Mutex::new(Published {
        resident: Vec::new(),
        last_request: Instant::now(),
        cancelled: 0,
        layouts: Arc::new(Layouts::default()),
    }));
    let shared_settings = Arc::new(settings.clone());
    let shared = published.clone();
    let life = Arc::new(AtomicU8::new(LOADING));
    let exit = Exit(life.clone());
    let thread = std::thread::Builder::new()
        .name("sys1-engine".into())
        .spawn(move || {
            let exit = exit;
            let mut checkpoints = match build() {
                Ok((mut checkpoints, started)) => {
                    publish(&shared, &checkpoints, false);
                    if pass_tokens > 0 {
                        let names = checkpoints.resident().into_iter().map(|r| r.name);
                        let layouts = Layouts::of(&mut checkpoints, names);
                        publish_layouts(&shared, layouts);
                    }
                    // The idle clock starts once the checkpoints are loaded and warmed, as
                    // upstream's starts after its preload: a load longer than the idle
                    // timeout must not unload them the moment it ends.
                    publish(&shared, &checkpoints, true);
                    exit.0.store(RUNNING, Ordering::SeqCst);
                    let _ = ready_tx.send(Ok(started));
                    checkpoints
                }
                Err(e) => {
                    // Known at once, before any request is sent to it.
                    exit.0.store(FAILED, Ordering::SeqCst);
                    let _ = ready_tx.send(Err(e));
                    // Requests wait for the load in this queue, and more may come before the
                    // pool learns of the failure: each goes back, unrun, to be sent to
                    // another worker, until every handle is gone. Stopping here would drop
                    // them, and a request queued as the thread ended would be lost whatever
                    // it was drained with.
                    for job in rx.iter() {
                        let _ = job
                            .reply
                            .send(Outcome::Refused(Box::new((job.decision, job._ticket))));
                    }
                    return;
                }
            };
            // Jobs taken off the channel and not yet run, in arrival order.
            let mut backlog: VecDeque<Job> = VecDeque::new();
            loop {
                let job = match backlog.pop_front() {
                    Some(job) => job,
                    None => match receive(&rx, idle_unload, &shared, &mut checkpoints) {
                        Some(job) => job,
                        None => return,
                    },
                };
                // Only where requests can share passes (resident agents with layouts, on an
                // engine whose rows do not depend on their batch mates) are queued requests
                // taken together: elsewhere each request runs alone anyway. And only as many
                // as fit one pass, in arrival order; the rest stay queued, with what arrives
                // meanwhile behind them, for the next pass. Each pass is then as full as the
                // queue allows, where a group taken whole ended in a pass of its leftovers
                // while newer requests waited for the whole group.
                let jobs = if pass_tokens > 0 && shares_passes(&shared) {
                    backlog.push_front(job);
                    backlog.extend(rx.try_iter());
                    // Gone from anywhere in the backlog, not only its front: each still holds
                    // an admission slot.
                    drop_gone(&shared, &mut backlog);
                    take_pass(&mut backlog, pass_tokens)
                } else {
                    let mut one = VecDeque::from([job]);
                    drop_gone(&shared, &mut one);
                    one.into()
                };
                if jobs.is_empty() {
                    continue;
                }
                let started = Instant::now();
                let mut waiting: Vec<Option<Waiting>> = Vec::with_capacity(jobs.len());
                let mut decisions: Vec<Decision> = Vec::with_capacity(jobs.len());
                let mut preps: Vec<Option<Preparation>> = Vec::with_capacity(jobs.len());
                let mut spans: Vec<tracing::Span> = Vec::with_capacity(jobs.len());
                for job in jobs {
                    decisions.push(job.decision);
                    preps.push(job.prepared);
                    spans.push(job.span);
                    waiting.push(Some(Waiting {
                        reply: job.reply,
                        ticket: job._ticket,
                        load: job._load,
                        prepare_ms: job.prepare_ms,
                    }));
                }
                // The checkpoints the answers were routed to, for the layouts below.
                let mut routed: Vec<Checkpoint> = Vec::new();
                let mut answer = |checkpoints: &C, a: decide::Answered| {
                    // What /health reports is current before the answer leaves.
                    publish(&shared, checkpoints, true);
                    if let Ok(d) = &a.result {
                        routed.extend(d.states.iter().map(|s| s.routing.model.clone()));
                    }
                    if let Some(w) = waiting.get_mut(a.index).and_then(Option::take) {
                        let inference_ms = w.prepare_ms + a.since.elapsed().as_secs_f64() * 1e3;
                        w.send(
                            a.result
                                .map(|decided| Answer {
                                    decided,
                                    inference_ms,
                                })
                                .map_err(WorkerError::Decide),
                        );
                    }
                };
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    if let ([decision], [None], [span]) = (&decisions[..], &preps[..], &spans[..]) {
                        let _entered = span.enter();
                        let result = decide::decide(&mut checkpoints, &settings, decision);
                        answer(
                            &checkpoints,
                            decide::Answered {
                                index: 0,
                                result,
                                since: started,
                            },
                        );
                        return;
                    }
                    let _span =
                        tracing::debug_span!("shared", requests = decisions.len()).entered();
                    let ds: Vec<&Decision> = decisions.iter().collect();
                    decide::decide_prepared_each(
                        &mut checkpoints,
                        &settings,
                        &ds,
                        std::mem::take(&mut preps),
                        &mut answer,
                    );
                }));
                if ran.is_err() {
                    publish(&shared, &checkpoints, true);
                }
                if pass_tokens > 0 {
                    // Published once the group is done, though its first answers left
                    // earlier: a client's next request prepared meanwhile may be laid out on
                    // the worker thread instead, which costs time, never its answer.
                    // What the next requests are laid out with: the names routed so far and
                    // those resident (a request that failed after its checkpoint loaded routed
                    // nothing here), on the agents resident now. The worker also reads it to
                    // know whether requests can share passes at all.
                    let resident = checkpoints.resident().into_iter().map(|r| r.name);
                    let known: Vec<_> = {
                        let p = shared.lock().unwrap_or_else(|e| e.into_inner());
                        p.layouts.names().cloned().collect()
                    };
                    let names = known.into_iter().chain(resident).chain(routed);
                    let layouts = Layouts::of(&mut checkpoints, names);
                    publish_layouts(&shared, layouts);
                }
                // Whatever the engine's panic left unanswered.
                for w in waiting.into_iter().flatten() {
                    w.send(Err(WorkerError::Panicked));
                }
            }
        })?;
    Ok((
        WorkerHandle {
            tx,
            published,
            settings: shared_settings,
            life,
        },
        ready_rx,
        thread,
    ))
}

/// The next job off the channel, however long it takes to come. With `idle_unload`,
/// everything resident is unloaded once the idle clock ([`Published::last_request`]) has run
/// that long, and the wait goes on. `None`: the channel has closed.
fn receive<C: Owned>(
    rx: &mpsc::Receiver<Job>,
    idle_unload: Option<Duration>,
    shared: &Mutex<Published>,
    checkpoints: &mut C,
) -> Option<Job> {
    let Some(idle) = idle_unload else {
        return rx.recv().ok();
    };
    loop {
        // Read again after every wait, as upstream's worker reads it right before it
        // unloads: a request that arrived meanwhile (marked, not yet queued: its body is
        // still coming, or it is being validated) restarts the wait instead.
        let since = shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last_request
            .elapsed();
        if since < idle {
            match rx.recv_timeout(idle - since) {
                Ok(job) => return Some(job),
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
            }
        }
        if !checkpoints.resident().is_empty() {
            checkpoints.unload_all();
            tracing::info!(
                idle_s = since.as_secs_f64(),
                "idle: unloaded the resident checkpoints"
            );
            publish(shared, checkpoints, false);
        }
        // Wait for the next request before counting idleness again.
        return rx.recv().ok();
    }
}

/// Drops the queued decisions whose client disconnected, or whose deadline passed, while they
/// were queued (nobody would read the answer), and counts them.
/// A preparation's end. Preparation is pure: a panic in it is a bug, answered like the
/// engine's own (500 `inference failed`, the panic in the log by the hook) rather than
/// unwinding the connection's task, which would close it with no response.
fn joined<T>(done: Result<T, tokio::task::JoinError>) -> Result<T, WorkerError> {
    done.map_err(|e| {
        tracing::error!(error = %e, "preparing a request panicked");
        WorkerError::Panicked
    })
}

fn drop_gone(published: &Mutex<Published>, jobs: &mut VecDeque<Job>) {
    let before = jobs.len();
    jobs.retain(|j| !j.reply.is_closed());
    let gone = before - jobs.len();
    if gone > 0 {
        tracing::debug!(
            dropped = gone,
            "dropped queued decisions: their clients have gone"
        );
        published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cancelled += gone as u64;
    }
}

/// The jobs at the front of `backlog` that one shared pass of `pass_tokens` tokens holds:
/// requests while their rows fit ([`Preparation::tokens`]; the first one whatever its
/// size), or a request that runs alone on its own. A request not prepared ahead counts no
/// tokens here: it is laid out, or run alone, when its turn comes.
fn take_pass(backlog: &mut VecDeque<Job>, pass_tokens: usize) -> Vec<Job> {
    let mut taken = Vec::new();
    let mut tokens = 0;
    while let Some(front) = backlog.front() {
        match front.prepared.as_ref().map(Preparation::tokens) {
            None => {}
            Some(Some(t)) if taken.is_empty() || tokens + t <= pass_tokens => tokens += t,
            Some(None) if taken.is_empty() => {
                taken.extend(backlog.pop_front());
                break;
            }
            Some(_) => break,
        }
        taken.extend(backlog.pop_front());
    }
    taken
}

/// Whether queued requests can share forward passes: some resident agent has a layout
/// ([`Layouts::of`] lays out only batch-invariant ones), as [`WorkerHandle::prepare`] asks.
fn shares_passes(published: &Mutex<Published>) -> bool {
    !published
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .layouts
        .is_empty()
}

fn publish_layouts(to: &Mutex<Published>, layouts: Layouts) {
    to.lock().unwrap_or_else(|e| e.into_inner()).layouts = Arc::new(layouts);
}

fn publish(to: &Mutex<Published>, checkpoints: &impl Checkpoints, decided: bool) {
    let mut p = to.lock().unwrap_or_else(|e| e.into_inner());
    p.resident = checkpoints.resident();
    if decided {
        p.last_request = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::atomic::{AtomicBool, Ordering};

    use laya_core::agent::Agent;
    use laya_core::checkpoints::Single;
    use laya_core::engine::Forward;
    use laya_core::request::{parse_decision, Limits};
    use laya_core::routing::RoutingConfig;
    use laya_fixtures::Recorded;

    use super::*;

    /// Stands for an admission slot: says when it is given back.
    struct Slot(Arc<AtomicBool>);

    impl Drop for Slot {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// A client that leaves while its request is prepared ahead does not take the request's
    /// admission slot with it: the slot stays held while the preparation runs, and is given
    /// back when it ends.
    #[tokio::test]
    async fn a_panic_while_preparing_is_answered_as_the_engines_panic() {
        let done = tokio::task::spawn_blocking(|| -> u8 { panic!("a bug in preparation") }).await;
        assert!(matches!(joined(done), Err(WorkerError::Panicked)));
        let done = tokio::task::spawn_blocking(|| 7u8).await;
        assert!(matches!(joined(done), Ok(7)));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_prepared_after_its_client_left_keeps_its_slot() {
        let routing = RoutingConfig::single("tiny".to_owned(), Checkpoint::multilingual(), false);
        let settings = Settings {
            routing: routing.clone(),
            tournament_group: 0,
            pass_tokens: 4096,
        };
        let dir = laya_fixtures::fixtures_dir()
            .join("checkpoints")
            .join("tiny");
        let (handle, ready, _thread) = spawn(
            WorkerConfig {
                settings,
                idle_unload: None,
            },
            move || {
                let engine = Recorded::for_checkpoint("tiny");
                let info = engine.info();
                let checkpoints = Single::new(Agent::load(&dir, engine)?, None);
                Ok((
                    checkpoints,
                    Started {
                        info,
                        load_ms: 0.0,
                        warmup_ms: 0.0,
                    },
                ))
            },
        )
        .expect("the worker starts");
        ready.recv().expect("a report").expect("the worker loads");
        // A state at the size limit, so that its preparation takes a while.
        let state = "The parcel left the depot on Monday. ".repeat(1_400);
        let body = format!(
            r#"{{"state":"{}","questions":{{"q":{{"type":"choice","instructions":"Which queue?","criteria":["Billing","Shipping"]}}}}}}"#,
            &state[..49_000]
        );
        let decision = parse_decision(body.as_bytes(), &Limits::default(), &routing)
            .expect("a valid request")
            .into();
        let given_back = Arc::new(AtomicBool::new(false));
        let mut preparing = Box::pin(handle.prepare(decision, Box::new(Slot(given_back.clone()))));
        // One poll hands the preparation to a blocking thread; then the client leaves.
        let pending = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(preparing.as_mut().poll(cx).is_pending())
        })
        .await;
        assert!(pending, "prepared within one poll");
        drop(preparing);
        assert!(
            !given_back.load(Ordering::SeqCst),
            "the slot left with the client while the preparation ran on"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while !given_back.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "the slot was never given back");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
