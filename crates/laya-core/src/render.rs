//! Decisions as upstream's response JSON: `json.dumps(..., ensure_ascii=False,
//! allow_nan=False, separators=(",", ":"))` with upstream's key order, in full (spec api.md §6)
//! or in strict Jev mode (§6.7), for one state ([`single_body`]) or a batch ([`batch_body`]).
//!
//! The text is written directly instead of through a generic value tree because key order,
//! Python float spelling and duplicate keys (`{"1": .., "1": ..}` for labels `"1"` and `1`) are
//! part of the wire contract.

use pyjson::{Style, Value};

use crate::agent::{StateResult, Truncated, Usage};
use crate::decide::{Decided, StateDecision};
use crate::decode::{Answer, AnswerBody};
use crate::tournament::Report;

/// A non-finite float reached the response (a `NaN`/`Infinity` choice label). Upstream's
/// `json.dumps(allow_nan=False)` raises here and the server answers 422 with this text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("Out of range float values are not JSON compliant")]
pub struct NonFinite;

fn float(out: &mut String, x: f64) -> Result<(), NonFinite> {
    if !x.is_finite() {
        return Err(NonFinite);
    }
    pyjson::write_float(out, x);
    Ok(())
}

fn key(out: &mut String, k: &str) {
    pyjson::write_str(out, k);
    out.push(':');
}

/// The JSON object key Python's encoder writes for a dict key of this value.
pub fn label_key(label: &Value) -> Result<String, NonFinite> {
    Ok(match label {
        Value::Str(s) => s.clone(),
        Value::Bool(true) => "true".to_owned(),
        Value::Bool(false) => "false".to_owned(),
        Value::Null => "null".to_owned(),
        Value::Float(x) if !x.is_finite() => return Err(NonFinite),
        other => pyjson::dumps(other, Style::Compact).map_err(|_| NonFinite)?,
    })
}

/// `{"<label key>": p, ...}` of a choice answer.
fn write_choice_probabilities(
    out: &mut String,
    probabilities: &[(Value, f64)],
) -> Result<(), NonFinite> {
    out.push('{');
    for (i, (label, p)) in probabilities.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        key(out, &label_key(label)?);
        float(out, *p)?;
    }
    out.push('}');
    Ok(())
}

/// `{"0": p0, "1": p1, ...}` of a score answer.
fn write_level_probabilities(out: &mut String, probabilities: &[f64]) -> Result<(), NonFinite> {
    out.push('{');
    for (i, p) in probabilities.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        key(out, &i.to_string());
        float(out, *p)?;
    }
    out.push('}');
    Ok(())
}

/// `{"0": "level text", ...}`: a score answer's legend (always strings).
fn write_legend(out: &mut String, legend: &[String]) {
    out.push('{');
    for (i, text) in legend.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        key(out, &i.to_string());
        pyjson::write_str(out, text);
    }
    out.push('}');
}

/// Which of upstream's two renderings (`LAYA_JEV_STRICT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Output {
    /// Every key upstream sends, `routing` and `x_jev_confidence` included.
    #[default]
    Full,
    /// Only the keys of Jev's contract, in Jev's order.
    JevStrict,
}

/// One answer object, keys in upstream's order; a narrowed choice's `x_tournament` report
/// comes after the gate keys and before `x_jev_confidence`.
pub fn write_answer(
    out: &mut String,
    a: &Answer,
    tournament: Option<&Report>,
) -> Result<(), NonFinite> {
    out.push('{');
    key(out, "type");
    pyjson::write_str(out, a.body.type_name());
    match &a.body {
        AnswerBody::Choice {
            choice,
            probabilities,
            confidence,
        } => {
            out.push(',');
            key(out, "choice");
            out.push_str(&pyjson::dumps(choice, Style::Compact).map_err(|_| NonFinite)?);
            out.push(',');
            key(out, "probabilities");
            write_choice_probabilities(out, probabilities)?;
            out.push(',');
            key(out, "confidence");
            float(out, *confidence)?;
        }
        AnswerBody::Score {
            score,
            legend,
            probabilities,
            confidence,
        } => {
            out.push(',');
            key(out, "score");
            float(out, *score)?;
            out.push(',');
            key(out, "legend");
            write_legend(out, legend);
            out.push(',');
            key(out, "probabilities");
            write_level_probabilities(out, probabilities)?;
            out.push(',');
            key(out, "confidence");
            float(out, *confidence)?;
        }
        AnswerBody::Noul { noul, confidence } => {
            out.push(',');
            key(out, "noul");
            float(out, *noul)?;
            out.push(',');
            key(out, "confidence");
            float(out, *confidence)?;
        }
    }
    out.push(',');
    key(out, "answer_confidence");
    float(out, a.answer_confidence)?;
    out.push(',');
    key(out, "action");
    out.push('{');
    key(out, "act_probability");
    float(out, a.act_probability)?;
    out.push('}');
    if let Some(w) = &a.window {
        out.push_str(&format!(
            ",\"window\":{{\"index\":{},\"token_start\":{},\"token_end\":{},\"count\":{}}}",
            w.index, w.token_start, w.token_end, w.count
        ));
    }
    if let Some(g) = &a.gate {
        if g.low_confidence {
            out.push_str(",\"low_confidence\":true");
        }
        out.push(',');
        key(out, "abstention");
        pyjson::write_str(out, g.abstention);
        out.push(',');
        key(out, "abstention_threshold");
        float(out, g.threshold)?;
    }
    if let Some(report) = tournament {
        out.push(',');
        key(out, "x_tournament");
        report.write_json(out);
    }
    if let Some(x) = a.x_jev_confidence {
        out.push(',');
        key(out, "x_jev_confidence");
        float(out, x)?;
    }
    out.push('}');
    Ok(())
}

/// `{"qid": answer, ...}` in request order.
pub fn write_answers(
    out: &mut String,
    answers: &[(String, Answer)],
    tournament: &[(String, Report)],
) -> Result<(), NonFinite> {
    out.push('{');
    for (i, (qid, a)) in answers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        key(out, qid);
        let report = tournament.iter().find(|(id, _)| id == qid).map(|(_, r)| r);
        write_answer(out, a, report)?;
    }
    out.push('}');
    Ok(())
}

pub fn write_usage(out: &mut String, u: &Usage) {
    out.push_str(&format!(
        "{{\"input_tokens\":{},\"output_tokens\":{}",
        u.input_tokens, u.output_tokens
    ));
    if let Some(s) = &u.state {
        out.push_str(&format!(
            ",\"state_tokens\":{},\"state_tokens_dropped\":{}",
            s.state_tokens, s.state_tokens_dropped
        ));
        match s.truncated {
            Truncated::Flag(b) => out.push_str(if b {
                ",\"truncated\":true"
            } else {
                ",\"truncated\":false"
            }),
            Truncated::Windows(n) => out.push_str(&format!(",\"truncated\":{n}")),
        }
        out.push_str(",\"truncated_questions\":[");
        for (i, q) in s.truncated_questions.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            pyjson::write_str(out, q);
        }
        out.push(']');
        if !s.options.is_empty() {
            out.push_str(",\"options\":{");
            for (i, o) in s.options.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                key(out, &o.qid);
                out.push_str(&format!(
                    "{{\"total\":{},\"distinct\":{},\"tokens_per_option\":",
                    o.total, o.distinct
                ));
                match o.tokens_per_option {
                    Some(n) => out.push_str(&n.to_string()),
                    None => out.push_str("null"),
                }
                out.push('}');
            }
            out.push('}');
        }
    }
    if let Some(w) = u.windows {
        out.push_str(&format!(",\"windows\":{w}"));
    }
    out.push('}');
}

/// `"model":"laya-rl-agent","answers":...,"usage":...`: the members of a result object
/// that `predict_batch` / `predict_long` return too (the server adds `routing`).
pub fn write_result_members(
    out: &mut String,
    r: &StateResult,
    tournament: &[(String, Report)],
) -> Result<(), NonFinite> {
    out.push_str("\"model\":\"laya-rl-agent\",\"answers\":");
    write_answers(out, &r.answers, tournament)?;
    out.push_str(",\"usage\":");
    write_usage(out, &r.usage);
    Ok(())
}

/// The result object as `predict_batch` / `predict_long` return it (no `routing`).
pub fn result_json(r: &StateResult) -> Result<String, NonFinite> {
    let mut out = String::from("{");
    write_result_members(&mut out, r, &[])?;
    out.push('}');
    Ok(out)
}

/// One state's payload as the server sends it.
pub fn write_state(out: &mut String, s: &StateDecision, output: Output) -> Result<(), NonFinite> {
    match output {
        Output::Full => {
            out.push('{');
            write_result_members(out, &s.result, &s.tournament)?;
            out.push_str(",\"routing\":");
            s.routing.write_json(out);
            out.push('}');
            Ok(())
        }
        Output::JevStrict => write_result_strict(out, &s.result),
    }
}

/// The body of a `POST /v1/systemone` answer (the decision's one state).
pub fn single_body(d: &Decided, output: Output) -> Result<String, NonFinite> {
    let mut out = String::with_capacity(1024);
    for s in d.states.iter().take(1) {
        write_state(&mut out, s, output)?;
    }
    Ok(out)
}

/// The body of a `POST /v1/systemone/batch` answer: `results` in state order, then
/// `total_usage` (§7).
pub fn batch_body(d: &Decided, output: Output) -> Result<String, NonFinite> {
    let mut out = String::with_capacity(1024 * d.states.len().max(1));
    out.push_str("{\"results\":[");
    let (mut input_tokens, mut output_tokens) = (0, 0);
    for (i, s) in d.states.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        input_tokens += s.result.usage.input_tokens;
        output_tokens += s.result.usage.output_tokens;
        write_state(&mut out, s, output)?;
    }
    out.push_str(&format!(
        "],\"total_usage\":{{\"input_tokens\":{input_tokens},\"output_tokens\":{output_tokens}}}}}"
    ));
    Ok(out)
}

/// Strict Jev mode (`LAYA_JEV_STRICT`): only the contracted keys, in Jev's order
/// (choice: `type, choice, confidence, probabilities`; score: `type, score, confidence,
/// probabilities, legend`; noul: `type, noul`; usage: the two token counts), no `routing`.
/// `confidence` is Jev's (what full mode sends as `x_jev_confidence`), not upstream's
/// normalised entropy: a Jev client compares it against Jev's thresholds.
fn write_result_strict(out: &mut String, r: &StateResult) -> Result<(), NonFinite> {
    out.push_str("{\"model\":\"laya-rl-agent\",\"answers\":{");
    for (i, (qid, a)) in r.answers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        key(out, qid);
        out.push('{');
        key(out, "type");
        pyjson::write_str(out, a.body.type_name());
        match &a.body {
            AnswerBody::Choice {
                choice,
                probabilities,
                confidence,
            } => {
                out.push(',');
                key(out, "choice");
                out.push_str(&pyjson::dumps(choice, Style::Compact).map_err(|_| NonFinite)?);
                out.push(',');
                key(out, "confidence");
                float(out, a.x_jev_confidence.unwrap_or(*confidence))?;
                out.push(',');
                key(out, "probabilities");
                write_choice_probabilities(out, probabilities)?;
            }
            AnswerBody::Score {
                score,
                legend,
                probabilities,
                confidence,
            } => {
                out.push(',');
                key(out, "score");
                float(out, *score)?;
                out.push(',');
                key(out, "confidence");
                float(out, a.x_jev_confidence.unwrap_or(*confidence))?;
                out.push(',');
                key(out, "probabilities");
                write_level_probabilities(out, probabilities)?;
                out.push(',');
                key(out, "legend");
                write_legend(out, legend);
            }
            AnswerBody::Noul { noul, .. } => {
                out.push(',');
                key(out, "noul");
                float(out, *noul)?;
            }
        }
        out.push('}');
    }
    out.push_str(&format!(
        "}},\"usage\":{{\"input_tokens\":{},\"output_tokens\":{}}}}}",
        r.usage.input_tokens, r.usage.output_tokens
    ));
    Ok(())
}
