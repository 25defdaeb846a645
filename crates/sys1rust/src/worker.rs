//! The engine worker: one thread that owns the model and runs every decision in arrival order.
//!
//! Handlers never touch the engine; they send a [`Job`] down a bounded channel and await the
//! reply. The thread builds its engine itself, so no device value crosses threads, and
//! inference never runs on the I/O threads.

use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

use laya_core::confidence::{self, MinConfidence};
use laya_core::engine::Forward;
use laya_core::engine_api::{BatchOptions, DecideError, Engine, StateResult};
use laya_core::pyjson::{Object, Value};
use laya_core::question::parse_questions;
use laya_core::routing::{self, Routing, RoutingConfig};
use tokio::sync::oneshot;

use crate::tournament;

/// A decision to make: one or more states against one question set (upstream's step 16 on).
#[derive(Debug)]
pub struct Decision {
    pub states: Vec<Value>,
    pub questions: Object,
    pub opts: BatchOptions,
    pub min_confidence: Option<MinConfidence>,
    /// Routing inputs, as sent.
    pub pin: Option<routing::Checkpoint>,
    pub task: Option<Value>,
    pub lang: Option<String>,
    pub lang_guess: Option<String>,
    /// `LAYA_TOURNAMENT_GROUP`: narrow choices over this many options by elimination; 0 is off.
    pub tournament_group: usize,
}

/// What the worker answers: one result and routing per state, and the inference time.
#[derive(Debug)]
pub struct Decided {
    pub results: Vec<(StateResult, Routing)>,
    /// Per state, the `x_tournament` report of each narrowed choice (empty without a tournament).
    pub tournaments: Vec<Vec<(String, tournament::Report)>>,
    /// Upstream's `X-Inference-Time-Ms`: routing, tokenization, forward and decoding.
    pub inference_ms: f64,
}

/// How a decision failed, in upstream's two classes.
#[derive(Debug)]
pub enum Failure {
    /// A caller error raised inside inference: 422 with this exact text.
    Invalid(String),
    /// Anything else: 500 `inference failed`; the cause goes to the log only.
    Internal(String),
}

pub struct Job {
    pub decision: Decision,
    pub reply: oneshot::Sender<Result<Decided, Failure>>,
}

/// Upstream's resident checkpoints (`Router._order`, `/health` `loaded`), least recently used
/// first. One checkpoint serves every name here, but the order still follows upstream's: all
/// three preloaded in registry order, and a name moves to the end whenever a request routed to
/// it loads it.
#[derive(Clone)]
pub struct Resident(Arc<Mutex<Vec<String>>>);

impl Resident {
    /// Upstream's order after `LAYA_PRELOAD`: english, multilingual, typed-decisions.
    pub fn preloaded() -> Resident {
        Resident(Arc::new(Mutex::new(
            routing::Checkpoint::ALL
                .iter()
                .map(|c| c.name().to_owned())
                .collect(),
        )))
    }

    fn touch(&self, c: routing::Checkpoint) {
        let mut order = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pos) = order.iter().position(|n| n == c.name()) {
            let name = order.remove(pos);
            order.push(name);
        }
    }

    pub fn snapshot(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Runs one decision on the engine (upstream's work inside the inference gate): one call of
/// [`predict_call`], or with a tournament plan, [`tournament::run`] per state.
pub fn decide<F: Forward>(
    engine: &mut Engine<F>,
    routing_cfg: &RoutingConfig,
    resident: &Resident,
    d: Decision,
) -> Result<Decided, Failure> {
    let started = Instant::now();
    // Upstream decides whether to narrow before routing anything, once per request.
    let plan = match d.tournament_group {
        0 => None,
        group => tournament::plan(&d.questions, group)?,
    };
    let (mut results, routes, tournaments) = match plan {
        None => {
            let (results, routes) = predict_call(
                engine,
                routing_cfg,
                resident,
                &d,
                &d.states,
                &d.questions,
                &d.opts,
            )?;
            let n = results.len();
            (results, routes, vec![Vec::new(); n])
        }
        Some(plan) => {
            // Each state plays its own rounds; `batch_size` shapes nothing on this path.
            let opts = BatchOptions {
                batch_size: None,
                ..d.opts
            };
            let (mut results, mut routes, mut reports) = (Vec::new(), Vec::new(), Vec::new());
            for state in &d.states {
                let (result, routing, report) =
                    tournament::run(&d.questions, d.tournament_group, &plan, |questions| {
                        let (mut r, mut routing) = predict_call(
                            engine,
                            routing_cfg,
                            resident,
                            &d,
                            std::slice::from_ref(state),
                            questions,
                            &opts,
                        )?;
                        match (r.pop(), routing.pop()) {
                            (Some(r), Some(routing)) => Ok((r, routing)),
                            _ => Err(Failure::Internal("a call answered no state".into())),
                        }
                    })?;
                results.push(result);
                routes.push(routing);
                reports.push(report);
            }
            (results, routes, reports)
        }
    };
    if let Some(min) = &d.min_confidence {
        confidence::apply_gate(&mut results, min);
    }
    let inference_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(Decided {
        results: results.into_iter().zip(routes).collect(),
        tournaments,
        inference_ms,
    })
}

/// One call of upstream's router (`Router.predict`, or `predict_batch` for several states):
/// route every state, then answer `questions` for all of them in one batch.
///
/// Checkpoints are "loaded" (moved to the end of `resident`) where upstream's router loads
/// them: after routing every state, one group per routed name in order of first appearance,
/// each just before its states are predicted. Question validation runs inside the first
/// group's prediction, so a question error still counts the first group's load, and only it.
fn predict_call<F: Forward>(
    engine: &mut Engine<F>,
    routing_cfg: &RoutingConfig,
    resident: &Resident,
    d: &Decision,
    states: &[Value],
    questions: &Object,
    opts: &BatchOptions,
) -> Result<(Vec<StateResult>, Vec<Routing>), Failure> {
    let qids: Vec<&str> = questions.keys().collect();
    let mut routes = Vec::with_capacity(states.len());
    for state in states {
        let r = routing::route(
            state,
            &qids,
            d.pin,
            d.task.as_ref(),
            d.lang.as_deref(),
            d.lang_guess.as_deref(),
            routing_cfg,
        )
        .map_err(Failure::Invalid)?;
        routes.push(r);
    }
    let mut groups: Vec<routing::Checkpoint> = Vec::new();
    for r in &routes {
        if !groups.contains(&r.model) {
            groups.push(r.model);
        }
    }
    let mut groups = groups.into_iter();
    if let Some(first) = groups.next() {
        resident.touch(first);
    }
    let questions = parse_questions(questions).map_err(|e| Failure::Invalid(e.to_string()))?;
    let results = engine
        .predict_batch(states, &questions, opts)
        .map_err(|e| match e {
            DecideError::MarkersDoNotFit(m) => Failure::Invalid(m.to_string()),
            DecideError::Invalid(text) => Failure::Invalid(text),
            other => Failure::Internal(other.to_string()),
        })?;
    for later in groups {
        resident.touch(later);
    }
    Ok((results, routes))
}

/// The sending side of the worker's queue.
#[derive(Clone)]
pub struct WorkerHandle {
    tx: mpsc::SyncSender<Job>,
    resident: Resident,
}

impl WorkerHandle {
    /// The resident-checkpoint order the worker keeps (for `/health`).
    pub fn resident(&self) -> &Resident {
        &self.resident
    }

    /// Queues a decision; the reply arrives when the worker has run it (FIFO).
    pub async fn decide(&self, decision: Decision) -> Result<Decided, Failure> {
        let (reply, rx) = oneshot::channel();
        let job = Job { decision, reply };
        // The channel holds as many jobs as admission lets in, so this never blocks long;
        // still, keep the blocking send off the async threads.
        let tx = self.tx.clone();
        tokio::task::spawn_blocking(move || tx.send(job))
            .await
            .map_err(|e| Failure::Internal(format!("queueing failed: {e}")))?
            .map_err(|_| Failure::Internal("the inference worker is not running".into()))?;
        rx.await
            .map_err(|_| Failure::Internal("the inference worker stopped".into()))?
    }
}

/// Starts the worker thread. `build` runs on that thread and makes the engine; its result is
/// reported through the returned receiver before any job is taken.
pub fn spawn<F, B>(
    capacity: usize,
    routing_cfg: RoutingConfig,
    build: B,
) -> std::io::Result<(
    WorkerHandle,
    mpsc::Receiver<anyhow::Result<WorkerInfo>>,
    std::thread::JoinHandle<()>,
)>
where
    F: Forward + 'static,
    B: FnOnce() -> anyhow::Result<(Engine<F>, WorkerInfo)> + Send + 'static,
{
    let (tx, rx) = mpsc::sync_channel::<Job>(capacity.max(1));
    let (ready_tx, ready_rx) = mpsc::channel();
    let resident = Resident::preloaded();
    let worker_resident = resident.clone();
    let thread = std::thread::Builder::new()
        .name("sys1-engine".into())
        .spawn(move || {
            let mut engine = match build() {
                Ok((engine, info)) => {
                    let _ = ready_tx.send(Ok(info));
                    engine
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            while let Ok(job) = rx.recv() {
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    decide(&mut engine, &routing_cfg, &worker_resident, job.decision)
                }))
                .unwrap_or_else(|_| Err(Failure::Internal("the engine panicked".into())));
                // The client may have gone; its answer is discarded like upstream's.
                let _ = job.reply.send(outcome);
            }
        })?;
    Ok((WorkerHandle { tx, resident }, ready_rx, thread))
}

/// What the worker reports once its engine is built (for the ready line and `/health`).
#[derive(Debug, Clone)]
pub struct WorkerInfo {
    /// `mlx` or `cuda`.
    pub engine: &'static str,
    pub device: String,
    pub precision: String,
    pub load_ms: f64,
    pub warmup_ms: f64,
}
