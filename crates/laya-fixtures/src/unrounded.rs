//! Upstream's own answers before rounding, recomputed from its recorded raw logits, for the
//! rounding-boundary rule of [`crate::check_f32`].

use laya_core::agent::{Agent, BatchOptions, LongOptions, StateResult};
use laya_core::confidence;
use laya_core::config::AgentConfig;
use laya_core::decode;
use laya_core::decode::Answer;
use laya_core::engine::{Forward, RowLogits};
use laya_core::question::parse_questions;
use laya_core::question::Question;
use laya_core::render;
use pyjson::Value;

use crate::{Reference, Replay};

/// Upstream's `{"model":...,"answers":...,"usage":...` of each state in a response body,
/// without `routing` (one for the single route, one per state for the batch route).
pub fn upstream_results(body: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(start) = rest.find("{\"model\":\"laya-rl-agent\"") {
        let tail = &rest[start..];
        let Some(end) = tail.find(",\"routing\":") else {
            break;
        };
        out.push(&tail[..end]);
        rest = &tail[end..];
    }
    out
}

/// The result text up to `usage` (what [`upstream_results`] cuts from a body).
pub fn open_text(r: &StateResult) -> String {
    let mut s = String::from("{");
    // Non-finite answers cannot come from a 200 reference.
    let _ = render::write_result_members(&mut s, r, &[]);
    s
}

/// `answer` recomputed from `out` without rounding, keeping what decoding does not produce
/// (the gate's verdict, `x_jev_confidence` from the rounded probabilities, the window).
pub fn unrounded_like(answer: &Answer, q: &Question, out: &RowLogits, cfg: &AgentConfig) -> Answer {
    Answer {
        gate: answer.gate,
        x_jev_confidence: answer.x_jev_confidence,
        window: answer.window,
        ..decode::decode_unrounded(q, out, cfg)
    }
}

/// `mine` (a `predict_long` result on `engine`) with each answer recomputed unrounded from its
/// deciding window, scanned again the same way: upstream recorded no logits for the windows,
/// so the rounding-boundary rule of [`crate::check_f32`] judges by our own unrounded values.
pub fn long_unrounded<F: Forward>(
    engine: &mut Agent<F>,
    state: &Value,
    questions: &[Question],
    opts: &LongOptions,
    mine: &StateResult,
) -> StateResult {
    let scan = engine.long_scan(state, questions, opts).expect("scan");
    let states: Vec<Value> = if scan.windows.is_empty() {
        vec![state.clone()]
    } else {
        scan.windows.iter().map(|w| Value::Str(w.clone())).collect()
    };
    let budget = BatchOptions {
        max_len: opts.max_len,
        head_max_len: opts.head_max_len,
        batch_size: None,
    };
    let mut out = mine.clone();
    for (qi, (q, (_, a))) in questions.iter().zip(out.answers.iter_mut()).enumerate() {
        let index = a.window.map(|w| w.index).unwrap_or(0);
        let rows = engine
            .layout(std::slice::from_ref(&states[index]), questions, &budget)
            .expect("layout");
        let outs = engine
            .forward
            .forward(&[rows[0][qi].row.clone()])
            .expect("forward");
        *a = unrounded_like(a, q, &outs[0], &engine.config);
    }
    out
}

/// Upstream's response body with every result's answers unrounded (decoded from upstream's
/// raw logits with the same gate and `x_jev_confidence`), or `None` when upstream recorded
/// no rows for this request (raw-body requests).
pub fn unrounded_body(engine: &mut Agent<Replay>, reference: &Reference) -> Option<String> {
    unrounded_body_routed(engine, reference)
}

/// The agents whose configs decode a router's answers, by the name `routing.model` gives.
pub trait ReplayAgents {
    fn agent(&mut self, name: &str) -> Option<&mut Agent<Replay>>;
}

/// One agent for every name.
impl ReplayAgents for Agent<Replay> {
    fn agent(&mut self, _: &str) -> Option<&mut Agent<Replay>> {
        Some(self)
    }
}

impl ReplayAgents for std::collections::HashMap<String, Agent<Replay>> {
    fn agent(&mut self, name: &str) -> Option<&mut Agent<Replay>> {
        self.get_mut(name)
    }
}

/// [`unrounded_body`] for a router's answer, each state decoded with the configs of the
/// checkpoint its `routing.model` names.
pub fn unrounded_body_routed(
    agents: &mut impl ReplayAgents,
    reference: &Reference,
) -> Option<String> {
    let call = reference.decision_call()?;
    if reference.passes.is_empty() {
        return None;
    }
    let questions = parse_questions(&call.questions).ok()?;
    let upstream: Vec<Value> = match pyjson::loads(reference.body.as_bytes()).ok()?.value {
        Value::Object(o) if call.batch => o.get("results")?.as_array()?.to_vec(),
        other => vec![other],
    };
    let mut body = reference.body.clone();
    for (s, state) in call.states.iter().enumerate() {
        let model = upstream
            .get(s)?
            .as_object()?
            .get("routing")?
            .as_object()?
            .get("model")?
            .as_str()?;
        let engine = agents.agent(model)?;
        engine.forward = Replay::new(&reference.passes);
        let mut results = engine
            .predict_batch(std::slice::from_ref(state), &questions, &call.opts)
            .ok()?;
        if let Some(min) = &call.min_confidence {
            confidence::apply_gate(&mut results, min);
        }
        confidence::add_jev_confidence(&mut results);
        let r = results.first_mut()?;
        for (q, (_, a)) in questions.iter().zip(r.answers.iter_mut()) {
            let row = reference.row(s, &q.id)?;
            *a = unrounded_like(a, q, &row.output(), &engine.config);
        }
        let up = upstream_results(&reference.body).get(s).copied()?;
        // Splice the unrounded rendering where upstream's text stands, keeping `routing`.
        body = body.replacen(up, &open_text(r), 1);
    }
    Some(body)
}
