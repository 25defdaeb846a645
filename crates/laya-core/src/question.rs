//! Question validation and normalisation: upstream `Agent._check_question`, `_to_internal`
//! and `render_options`, with their exact error texts (the server returns them as 422s).

use std::fmt;

use crate::config::QType;
use pyjson::{Object, Value};

/// A question that passed upstream's checks, normalised for the layout and the decoder.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub id: String,
    pub qtype: QType,
    /// The instruction text the model reads (non-strings already rendered as JSON).
    pub instructions: String,
    /// One text per option, in option (label-index) order, before the leading space is added.
    pub options: Vec<String>,
    /// Slot `s` shows option `option_order[s]`; `None` is the identity order.
    pub option_order: Option<Vec<usize>>,
    pub kind: Kind,
}

/// What the decoder needs per type to name the answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// The labels with their original JSON values (a label may be a number or a bool).
    Choice {
        labels: Vec<Value>,
    },
    /// The rendered level texts (`legend`).
    Score {
        legend: Vec<String>,
    },
    Noul,
}

impl Question {
    pub fn option_count(&self) -> usize {
        self.options.len()
    }
}

/// Upstream's `ValueError` for a malformed question; `Display` is the exact text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QuestionError(pub String);

const NOUL_LABELS_ERROR: &str =
    "noul labels must map exactly 'false' and 'true' to distinct non-empty strings";
const NOUL_FALSE_DEFAULT: &str = "no, the statement does not hold";
const NOUL_TRUE_DEFAULT: &str = "yes, the statement holds";

/// Python `str.isspace()` (it also counts U+001C..U+001F, which Rust's `is_whitespace` does not).
pub fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python `str.strip()` with no argument.
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(py_isspace)
}

struct Id<'a>(&'a str);

impl fmt::Display for Id<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&pyjson::repr_str(self.0))
    }
}

fn err(text: String) -> QuestionError {
    QuestionError(text)
}

/// Options a question renders to, as upstream `_option_count` (used to check `option_order`).
fn option_count(qtype: QType, criteria: Option<&Value>) -> usize {
    match (qtype, criteria) {
        (QType::Noul, _) => 2,
        (_, Some(Value::Array(a))) => a.len(),
        (_, Some(Value::Object(o))) => o.len(),
        _ => 0,
    }
}

/// Upstream `render_criterion`: strings pass through, anything else is one-line JSON text.
pub fn render_criterion(v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        other => pyjson::dumps_spaced(other),
    }
}

/// Upstream `_resolve_noul_labels`: the (false, true) texts, stripped.
fn noul_labels(labels: Option<&Value>) -> Result<(String, String), String> {
    let Some(labels) = labels else {
        return Ok(("false".to_owned(), "true".to_owned()));
    };
    let Value::Object(o) = labels else {
        return Err(NOUL_LABELS_ERROR.to_owned());
    };
    let keys_ok = o.len() == 2 && o.contains_key("false") && o.contains_key("true");
    if !keys_ok {
        return Err(NOUL_LABELS_ERROR.to_owned());
    }
    match (o.get("false"), o.get("true")) {
        (Some(Value::Str(f)), Some(Value::Str(t))) => {
            let (f, t) = (py_strip(f), py_strip(t));
            if f.is_empty() || t.is_empty() || f == t {
                Err(NOUL_LABELS_ERROR.to_owned())
            } else {
                Ok((f.to_owned(), t.to_owned()))
            }
        }
        _ => Err(NOUL_LABELS_ERROR.to_owned()),
    }
}

/// Validates and normalises one question (`_check_question` then `_to_internal`).
pub fn parse_question(id: &str, def: &Value) -> Result<Question, QuestionError> {
    if py_strip(id).is_empty() {
        return Err(err(format!(
            "question id must be a non-empty string, got {}",
            pyjson::repr_str(id)
        )));
    }
    let qid = Id(id);
    let Value::Object(def) = def else {
        return Err(err(format!(
            "question {qid}: definition must be a dict, got {}",
            def.type_name()
        )));
    };
    let qtype = match def.get("type") {
        Some(Value::Str(t)) if QType::from_name(t).is_some() => QType::from_name(t),
        _ => None,
    };
    let Some(qtype) = qtype else {
        let shown = def
            .get("type")
            .map(pyjson::py_repr)
            .unwrap_or_else(|| "None".to_owned());
        return Err(err(format!(
            "question {qid}: unknown type {shown}; use one of ['choice', 'noul', 'score']"
        )));
    };
    let Some(ins) = def.get("instructions") else {
        return Err(err(format!(
            "question {qid}: no 'instructions'; add the text the model should answer"
        )));
    };
    let empty = match ins {
        Value::Null => {
            return Err(err(format!(
            "question {qid}: 'instructions' must not be None; add the text the model should answer"
        )))
        }
        Value::Str(s) => py_strip(s).is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    };
    if empty {
        return Err(err(format!(
            "question {qid}: 'instructions' must not be empty; add the text the model should answer"
        )));
    }
    let criteria = def.get("criteria");
    match qtype {
        QType::Choice => check_choice(&qid, criteria)?,
        QType::Score => match criteria {
            Some(Value::Array(levels)) => {
                if levels.is_empty() {
                    return Err(err(format!("question {qid}: a score question needs at least one level")));
                }
                if let Some(i) = levels.iter().position(|l| matches!(l, Value::Null)) {
                    return Err(err(format!(
                        "question {qid}: score level {i} is null; give every level a description, index 0 first"
                    )));
                }
            }
            _ => {
                return Err(err(format!(
                    "question {qid}: a score question takes 'criteria' as a list of level descriptions, index 0 first"
                )))
            }
        },
        QType::Noul => match criteria {
            None | Some(Value::Null) => {}
            Some(Value::Object(o)) => {
                let mut keys: Vec<String> = o.keys().map(|k| k.to_lowercase()).collect();
                keys.sort();
                keys.dedup();
                if keys.iter().any(|k| k != "true" && k != "false") {
                    let shown = pyjson::py_repr(&Value::Array(keys.into_iter().map(Value::Str).collect()));
                    return Err(err(format!(
                        "question {qid}: a noul question takes 'criteria' keyed only 'true'/'false' (either or both, \
                         and omitted is fine), got {shown}. Those keys are the option texts the model reads; any \
                         other key was silently dropped and replaced with the defaults. If you want the answer \
                         worded differently, keep 'criteria' keyed 'true'/'false' and set 'labels' instead."
                    )));
                }
            }
            Some(_) => {
                return Err(err(format!(
                    "question {qid}: a noul question takes 'criteria' as a dict with optional 'true'/'false' \
                     descriptions, or omits it"
                )))
            }
        },
    }
    let option_order = match def.get("option_order") {
        None => None,
        Some(order) => {
            let n = option_count(qtype, criteria);
            Some(check_option_order(&qid, order, n)?)
        }
    };
    if let Some(labels) = def.get("labels") {
        if qtype != QType::Noul {
            return Err(err(format!(
                "question {qid}: 'labels' is only supported for noul questions"
            )));
        }
        noul_labels(Some(labels)).map_err(|e| err(format!("question {qid}: {e}")))?;
    }

    let instructions = match ins {
        Value::Str(s) => s.clone(),
        other => pyjson::dumps_spaced(other),
    };
    let (options, kind) = render_options(qtype, criteria, def.get("labels"));
    Ok(Question {
        id: id.to_owned(),
        qtype,
        instructions,
        options,
        option_order,
        kind,
    })
}

fn check_choice(qid: &Id<'_>, criteria: Option<&Value>) -> Result<(), QuestionError> {
    let labels: Vec<Value> = match criteria {
        Some(Value::Array(a)) => a.clone(),
        Some(Value::Object(o)) => o.keys().map(|k| Value::Str(k.to_owned())).collect(),
        _ => {
            return Err(err(format!(
                "question {qid}: a choice question takes 'criteria' as a dict of label -> description, or a list of labels"
            )))
        }
    };
    if labels.is_empty() {
        return Err(err(format!(
            "question {qid}: a choice question needs at least one criterion"
        )));
    }
    for (i, label) in labels.iter().enumerate() {
        match label {
            Value::Array(_) | Value::Object(_) => {
                return Err(err(format!(
                    "question {qid}: choice label {i} is a {}; a label is rendered as option text and used as the \
                     answer key, so it must be a scalar (a string, number or bool), got {}",
                    label.type_name(),
                    pyjson::py_repr(label)
                )))
            }
            Value::Null => {
                return Err(err(format!(
                    "question {qid}: choice label {i} is null; a label is rendered as option text and used as the \
                     answer key, so it must be a string, number or bool -- a null label renders as the text \"None\" \
                     while its answer key is \"null\""
                )))
            }
            _ => {}
        }
    }
    if matches!(criteria, Some(Value::Array(_))) {
        for (i, label) in labels.iter().enumerate() {
            if let Some(first) = labels[..i]
                .iter()
                .position(|earlier| pyjson::py_same_or_equal(earlier, label))
            {
                return Err(err(format!(
                    "question {qid}: choice label {i} ({}) repeats label {first}; the labels are the answer keys, \
                     so every option needs its own (1, 1.0 and True are one key)",
                    pyjson::py_repr(label)
                )));
            }
        }
    }
    Ok(())
}

fn check_option_order(qid: &Id<'_>, order: &Value, n: usize) -> Result<Vec<usize>, QuestionError> {
    let bad = || {
        err(format!(
            "question {qid}: 'option_order' must be a permutation of range({n}) -- one slot per option, each option \
             once -- got {}",
            pyjson::py_repr(order)
        ))
    };
    let Value::Array(items) = order else {
        return Err(bad());
    };
    if items.len() != n {
        return Err(bad());
    }
    // Only JSON integers count (bools and floats are dropped, as upstream's isinstance filter
    // does), so any such entry leaves the sorted list short of range(n).
    let mut ints: Vec<usize> = Vec::with_capacity(n);
    for item in items {
        match item {
            Value::Int(i) => match i.as_i64() {
                Some(v) if v >= 0 && (v as u64) < n as u64 => ints.push(v as usize),
                _ => return Err(bad()),
            },
            _ => return Err(bad()),
        }
    }
    let mut sorted = ints.clone();
    sorted.sort_unstable();
    if sorted.iter().enumerate().any(|(i, &v)| i != v) {
        return Err(bad());
    }
    Ok(ints)
}

/// Upstream `render_options` on an already validated definition.
fn render_options(
    qtype: QType,
    criteria: Option<&Value>,
    labels: Option<&Value>,
) -> (Vec<String>, Kind) {
    match qtype {
        QType::Choice => {
            let pairs: Vec<(Value, Option<&Value>)> = match criteria {
                Some(Value::Array(a)) => a.iter().map(|l| (l.clone(), None)).collect(),
                Some(Value::Object(o)) => o
                    .iter()
                    .map(|(k, v)| (Value::Str(k.to_owned()), Some(v)))
                    .collect(),
                _ => Vec::new(),
            };
            let options = pairs
                .iter()
                .map(|(label, desc)| match desc {
                    None | Some(Value::Null) => pyjson::py_str(label),
                    Some(Value::Str(s)) if s.is_empty() => pyjson::py_str(label),
                    Some(d) => format!("{}: {}", pyjson::py_str(label), render_criterion(d)),
                })
                .collect();
            (
                options,
                Kind::Choice {
                    labels: pairs.into_iter().map(|(l, _)| l).collect(),
                },
            )
        }
        QType::Score => {
            let levels: &[Value] = match criteria {
                Some(Value::Array(a)) => a,
                _ => &[],
            };
            let legend: Vec<String> = levels.iter().map(render_criterion).collect();
            let options = legend
                .iter()
                .enumerate()
                .map(|(i, text)| format!("level {i}: {text}"))
                .collect();
            (options, Kind::Score { legend })
        }
        QType::Noul => {
            let lowered = match criteria {
                Some(Value::Object(o)) => lower_keys(o),
                _ => Object::default(),
            };
            // Validated above, so the fallback never applies.
            let (false_label, true_label) =
                noul_labels(labels).unwrap_or_else(|_| ("false".to_owned(), "true".to_owned()));
            let text = |key: &str, default: &str| match lowered.get(key) {
                None | Some(Value::Null) => default.to_owned(),
                Some(Value::Str(s)) if s.is_empty() => default.to_owned(),
                Some(v) => render_criterion(v),
            };
            let options = vec![
                format!("{false_label}: {}", text("false", NOUL_FALSE_DEFAULT)),
                format!("{true_label}: {}", text("true", NOUL_TRUE_DEFAULT)),
            ];
            (options, Kind::Noul)
        }
    }
}

/// `{str(k).lower(): v for k, v in crit.items()}` with dict semantics for keys that collide.
fn lower_keys(o: &Object) -> Object {
    let mut out = Object::default();
    for (k, v) in o.iter() {
        out.insert(k.to_lowercase(), v.clone());
    }
    out
}

/// Validates every question of a request in order, stopping at the first error like upstream.
pub fn parse_questions(questions: &Object) -> Result<Vec<Question>, QuestionError> {
    questions
        .iter()
        .map(|(id, def)| parse_question(id, def))
        .collect()
}
