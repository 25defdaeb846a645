//! Answers and usage as upstream's response JSON: `json.dumps(..., ensure_ascii=False,
//! allow_nan=False, separators=(",", ":"))` with upstream's key order.
//!
//! The text is written directly instead of through a generic value tree because key order,
//! Python float spelling and duplicate keys (`{"1": .., "1": ..}` for labels `"1"` and `1`) are
//! part of the wire contract.

use crate::decode::{Answer, AnswerBody};
use crate::engine_api::{StateResult, Truncated, Usage};
use crate::pyjson::{self, Style, Value};

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

/// One answer object, keys in upstream's order.
pub fn write_answer(out: &mut String, a: &Answer) -> Result<(), NonFinite> {
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
    if let Some(x) = a.x_jev_confidence {
        out.push(',');
        key(out, "x_jev_confidence");
        float(out, x)?;
    }
    out.push('}');
    Ok(())
}

/// `{"qid": answer, ...}` in request order.
pub fn write_answers(out: &mut String, answers: &[(String, Answer)]) -> Result<(), NonFinite> {
    out.push('{');
    for (i, (qid, a)) in answers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        key(out, qid);
        write_answer(out, a)?;
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

/// `{"model":"laya-rl-agent","answers":...,"usage":...}` without the closing brace, so the
/// server can append `routing`.
pub fn write_result_open(out: &mut String, r: &StateResult) -> Result<(), NonFinite> {
    out.push_str("{\"model\":\"laya-rl-agent\",\"answers\":");
    write_answers(out, &r.answers)?;
    out.push_str(",\"usage\":");
    write_usage(out, &r.usage);
    Ok(())
}

/// The whole result object as `predict_batch`/`predict_long` return it.
pub fn result_json(r: &StateResult) -> Result<String, NonFinite> {
    let mut out = String::new();
    write_result_open(&mut out, r)?;
    out.push('}');
    Ok(out)
}

/// Strict Jev mode (`LAYA_JEV_STRICT`): only the contracted keys, in Jev's order
/// (choice: `type, choice, confidence, probabilities`; score: `type, score, confidence,
/// probabilities, legend`; noul: `type, noul`; usage: the two token counts), no `routing`.
pub fn write_result_strict(out: &mut String, r: &StateResult) -> Result<(), NonFinite> {
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
                float(out, *confidence)?;
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
                float(out, *confidence)?;
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
