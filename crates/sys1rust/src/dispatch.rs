//! Several engine workers, one per GPU (`--gpus`), each with its own checkpoints, and every
//! admitted request sent to the one with the fewest decisions in flight (equals take turns,
//! so an idle server still spreads its requests). Replicas share
//! nothing, so a request's answer does not depend on which one runs it (the CUDA engine is
//! batch-invariant and every worker runs the same kernels).
//!
//! A worker whose thread has stopped (it died), or whose engines failed to load, is skipped
//! from then on (known as soon as it happens, not only when a request finds it); a request
//! it refused, queued before the failure or sent after it, goes to the next one. One worker
//! is the plain case: the pool is then exactly that worker.
//!
//! A decision counts in its worker's load from the moment it is sent there until the worker
//! is done with it: a client that leaves (or a `--request-timeout` that answers 504) does
//! not make a worker still running its decision look free.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use laya_core::checkpoints::Resident;
use laya_core::decide::Decision;

use crate::worker::{Answer, Outcome, WorkerError, WorkerHandle};

struct Member {
    ordinal: usize,
    handle: WorkerHandle,
    in_flight: AtomicUsize,
    answered: AtomicU64,
    alive: AtomicBool,
}

/// What `/health` and `/metrics` report of one worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerView {
    /// Position in `--gpus`.
    pub index: usize,
    /// The GPU it runs on.
    pub ordinal: usize,
    /// Decisions sent to it that it is not done with yet (answered, or dropped unrun), their
    /// clients gone or not.
    pub in_flight: usize,
    /// Decisions it answered.
    pub answered: u64,
    /// False once its engines failed to load or its thread stopped.
    pub alive: bool,
}

/// The engine workers of a server.
#[derive(Clone)]
pub struct Pool {
    members: Arc<Vec<Member>>,
    /// Where the turn among equally loaded workers starts next.
    turn: Arc<AtomicUsize>,
}

/// Counts a decision in its worker's load while it is in flight: held by the request while
/// it is prepared, then by its queued job until the worker is done with it.
struct InFlight {
    members: Arc<Vec<Member>>,
    index: usize,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.members[self.index]
            .in_flight
            .fetch_sub(1, Ordering::SeqCst);
    }
}

impl Pool {
    /// `(GPU ordinal, worker)` in `--gpus` order; at least one.
    pub fn new(workers: Vec<(usize, WorkerHandle)>) -> Pool {
        Pool {
            members: Arc::new(
                workers
                    .into_iter()
                    .map(|(ordinal, handle)| Member {
                        ordinal,
                        handle,
                        in_flight: AtomicUsize::new(0),
                        answered: AtomicU64::new(0),
                        alive: AtomicBool::new(true),
                    })
                    .collect(),
            ),
            turn: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// How many workers the pool has (alive or not).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Whether a member can take decisions: its thread runs and its engines did not fail to
    /// load (as the worker says), and no request found it stopped.
    fn live(m: &Member) -> bool {
        m.alive.load(Ordering::SeqCst) && m.handle.is_running()
    }

    /// Whether any worker can still answer (`/ready`).
    pub fn any_alive(&self) -> bool {
        self.members.iter().any(Pool::live)
    }

    /// Upstream's `_mark_request()`, on an admitted request: restarts every worker's idle
    /// clock (upstream has one; which worker will run the request is not known yet).
    pub fn mark_request(&self) {
        for m in self.members.iter() {
            m.handle.mark_request();
        }
    }

    /// The live worker with the fewest decisions in flight (of equals, the next in turn),
    /// counted in from now on.
    fn pick(&self) -> Option<InFlight> {
        let n = self.members.len();
        let start = self.turn.fetch_add(1, Ordering::SeqCst) % n.max(1);
        let index = (0..n)
            .map(|k| (start + k) % n)
            .filter(|&i| Pool::live(&self.members[i]))
            .min_by_key(|&i| self.members[i].in_flight.load(Ordering::SeqCst))?;
        self.members[index].in_flight.fetch_add(1, Ordering::SeqCst);
        Some(InFlight {
            members: self.members.clone(),
            index,
        })
    }

    /// Runs a decision on the least loaded worker, holding `ticket` (its admission slot) until
    /// it is done.
    pub async fn decide(
        &self,
        decision: Decision,
        ticket: impl Send + 'static,
    ) -> Result<Answer, WorkerError> {
        let mut job: (Decision, Box<dyn Send>) = (decision, Box::new(ticket));
        loop {
            let Some(slot) = self.pick() else {
                return Err(WorkerError::Stopped);
            };
            let index = slot.index;
            let member = &self.members[index];
            // Prepared for this worker's checkpoints: one given back is prepared again.
            let (prepped, ticket) = member.handle.prepare(job.0, job.1).await?;
            // The count goes with the job: it lasts as long as the worker has the job, not
            // as long as this future, which a client that leaves drops.
            let refused = match member.handle.enqueue(prepped, ticket, Box::new(slot)) {
                Ok(reply) => match reply.await {
                    Ok(Outcome::Done(outcome)) => {
                        if outcome.is_ok() {
                            member.answered.fetch_add(1, Ordering::SeqCst);
                        }
                        return outcome;
                    }
                    Ok(Outcome::Refused(unsent)) => unsent,
                    Err(_) => {
                        member.alive.store(false, Ordering::SeqCst);
                        return Err(WorkerError::Stopped);
                    }
                },
                Err(unsent) => unsent,
            };
            // Its thread has stopped, or its engines failed to load.
            tracing::warn!(
                worker = index,
                gpu = member.ordinal,
                "engine worker not running; sending its requests to the others"
            );
            member.alive.store(false, Ordering::SeqCst);
            job = *refused;
        }
    }

    /// The resident checkpoints (every worker holds the same ones): the first worker's that
    /// has any, least recently used first.
    pub fn resident(&self) -> Vec<Resident> {
        let mut first = None;
        for m in self.members.iter() {
            let r = m.handle.resident();
            if !r.is_empty() {
                return r;
            }
            first.get_or_insert(r);
        }
        first.unwrap_or_default()
    }

    /// Queued decisions dropped unrun, over all workers.
    pub fn cancelled(&self) -> u64 {
        self.members.iter().map(|m| m.handle.cancelled()).sum()
    }

    /// Since the last decision finished on any worker.
    pub fn idle_for(&self) -> Duration {
        self.members
            .iter()
            .map(|m| m.handle.idle_for())
            .min()
            .unwrap_or_default()
    }

    /// Each worker's load and state.
    pub fn workers(&self) -> Vec<WorkerView> {
        self.members
            .iter()
            .enumerate()
            .map(|(index, m)| WorkerView {
                index,
                ordinal: m.ordinal,
                in_flight: m.in_flight.load(Ordering::SeqCst),
                answered: m.answered.load(Ordering::SeqCst),
                alive: Pool::live(m),
            })
            .collect()
    }
}
