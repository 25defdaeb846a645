//! Upstream's own answers before rounding, recomputed from its recorded raw logits, for the
//! rounding-boundary rule of [`crate::check_f32`].

use laya_core::agent::{Agent, StateResult};
use laya_core::confidence;
use laya_core::config::AgentConfig;
use laya_core::decode;
use laya_core::decode::Answer;
use laya_core::engine::RowLogits;
use laya_core::question::parse_questions;
use laya_core::question::Question;
use laya_core::render;

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

/// Upstream's response body with every result's answers unrounded (decoded from upstream's
/// raw logits with the same gate and `x_jev_confidence`), or `None` when upstream recorded
/// no rows for this request (raw-body requests).
pub fn unrounded_body(engine: &mut Agent<Replay>, reference: &Reference) -> Option<String> {
    let call = reference.decision_call()?;
    if reference.passes.is_empty() {
        return None;
    }
    let questions = parse_questions(&call.questions).ok()?;
    engine.forward = Replay::new(&reference.passes);
    let mut results = engine
        .predict_batch(&call.states, &questions, &call.opts)
        .ok()?;
    if let Some(min) = &call.min_confidence {
        confidence::apply_gate(&mut results, min);
    }
    confidence::add_jev_confidence(&mut results);
    let mut body = reference.body.clone();
    for (s, r) in results.iter_mut().enumerate() {
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
