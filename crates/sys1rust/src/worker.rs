//! The engine worker: one thread that owns the model and runs every decision in arrival order.
//!
//! Handlers never touch the engine; they send a [`Job`] down a bounded channel and await the
//! reply. The thread builds its engine itself, so no device value crosses threads, and
//! inference never runs on the I/O threads.

use std::sync::mpsc;
use std::time::Instant;

use laya_core::confidence::{self, MinConfidence};
use laya_core::engine::Forward;
use laya_core::engine_api::{BatchOptions, DecideError, Engine, StateResult};
use laya_core::pyjson::{Object, Value};
use laya_core::question::parse_questions;
use laya_core::routing::{self, Routing, RoutingConfig};
use tokio::sync::oneshot;

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
}

/// What the worker answers: one result and routing per state, and the inference time.
#[derive(Debug)]
pub struct Decided {
    pub results: Vec<(StateResult, Routing)>,
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

/// Runs one decision on the engine (upstream's work inside the inference gate).
pub fn decide<F: Forward>(engine: &mut Engine<F>, routing_cfg: &RoutingConfig, d: Decision) -> Result<Decided, Failure> {
    let started = Instant::now();
    let qids: Vec<&str> = d.questions.keys().collect();
    let mut routes = Vec::with_capacity(d.states.len());
    for state in &d.states {
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
    let questions = parse_questions(&d.questions).map_err(|e| Failure::Invalid(e.to_string()))?;
    let mut results = engine.predict_batch(&d.states, &questions, &d.opts).map_err(|e| match e {
        DecideError::MarkersDoNotFit(m) => Failure::Invalid(m.to_string()),
        DecideError::Invalid(text) => Failure::Invalid(text),
        other => Failure::Internal(other.to_string()),
    })?;
    if let Some(min) = &d.min_confidence {
        confidence::apply_gate(&mut results, min);
    }
    let inference_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(Decided { results: results.into_iter().zip(routes).collect(), inference_ms })
}

/// The sending side of the worker's queue.
#[derive(Clone)]
pub struct WorkerHandle {
    tx: mpsc::SyncSender<Job>,
}

impl WorkerHandle {
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
        rx.await.map_err(|_| Failure::Internal("the inference worker stopped".into()))?
    }
}

/// Starts the worker thread. `build` runs on that thread and makes the engine; its result is
/// reported through the returned receiver before any job is taken.
pub fn spawn<F, B>(
    capacity: usize,
    routing_cfg: RoutingConfig,
    build: B,
) -> std::io::Result<(WorkerHandle, mpsc::Receiver<anyhow::Result<WorkerInfo>>, std::thread::JoinHandle<()>)>
where
    F: Forward + 'static,
    B: FnOnce() -> anyhow::Result<(Engine<F>, WorkerInfo)> + Send + 'static,
{
    let (tx, rx) = mpsc::sync_channel::<Job>(capacity.max(1));
    let (ready_tx, ready_rx) = mpsc::channel();
    let thread = std::thread::Builder::new().name("sys1-engine".into()).spawn(move || {
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
                decide(&mut engine, &routing_cfg, job.decision)
            }))
            .unwrap_or_else(|_| Err(Failure::Internal("the engine panicked".into())));
            // The client may have gone; its answer is discarded like upstream's.
            let _ = job.reply.send(outcome);
        }
    })?;
    Ok((WorkerHandle { tx }, ready_rx, thread))
}

/// What the worker reports once its engine is built (for the ready line and `/health`).
#[derive(Debug, Clone)]
pub struct WorkerInfo {
    pub device: String,
    pub precision: String,
    pub load_ms: f64,
    pub warmup_ms: f64,
}
