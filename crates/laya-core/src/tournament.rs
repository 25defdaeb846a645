//! Tournament mode (`LAYA_TOURNAMENT_GROUP`, spec api.md §12.3): a choice with more options
//! than the group size is narrowed by elimination, as upstream's `serve._tournament_plan`,
//! `serve._predict_with_tournament` and `shortlist.predict_tournament` do it.
//!
//! One pass reads every option of a question inside one option budget, so past a few dozen
//! options they stop getting token spans of their own, and past about 200 their markers no
//! longer fit a row. A tournament cuts such a choice into groups of at most `group` labels,
//! answers every group as its own question (one call per round, every group in it), keeps each
//! group's winner, and repeats until no choice has more than `group` labels; a final call then
//! answers the request with each narrowed choice cut to its finalists. The answer keeps every
//! option: finalists carry the final call's probabilities, eliminated options `0.0`, and
//! `x_tournament` says which were finalists and how many rounds ran.
//!
//! A "call" is upstream's `Router.predict`: routing, loading, question checks and the forward
//! pass. [`run`] takes it as a closure so the elimination logic is independent of the engine.

//!
//! Rounds are question *objects*, not parsed questions: upstream rewrites the request's
//! question dicts and sends each round through the whole call, validation included, so a
//! round's question errors name the round's ids (`'0'`, `'1'`, ...) as upstream's do.

use pyjson::{py_repr, py_same_or_equal, repr_str, Object, Value};

use crate::agent::StateResult;
use crate::decode::AnswerBody;
use crate::request::MAX_CHOICE_OPTIONS;
use crate::routing::Routing;

/// Why a tournament could not be played; upstream raises each of these inside inference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TournamentError {
    #[error("choice criteria must contain at least one option")]
    EmptyCriteria,
    /// `label` is Python's `repr` of the repeated label.
    #[error("choice criteria label {label} is duplicated")]
    DuplicateLabel { label: String },
    #[error("question {}: a choice is narrowed by elimination once a request has one over {MAX_CHOICE_OPTIONS} options, and that needs every label to be a string", repr_str(.qid))]
    NonStringLabel { qid: String },
    #[error("question {} is a choice but has no criteria", repr_str(.qid))]
    NoCriteria { qid: String },
    /// What upstream hits as a `TypeError` or `KeyError` (an unhashable label, criteria of
    /// another type), or a round that answered no choice.
    #[error("{0}")]
    Internal(String),
}

impl TournamentError {
    /// Whether upstream raises this as a `ValueError` (the caller's mistake, 422).
    pub fn is_caller_error(&self) -> bool {
        !matches!(self, TournamentError::Internal(_))
    }
}

/// What `x_tournament` reports for a narrowed choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The labels the final call chose among, in criteria order.
    pub finalists: Vec<String>,
    /// Elimination rounds played.
    pub rounds: usize,
    /// The question carried an `option_order`, which narrowing drops.
    pub option_order_dropped: bool,
}

impl Report {
    /// `{"finalists":[...],"rounds":n}` plus `"option_order_dropped":true` when set.
    pub fn write_json(&self, out: &mut String) {
        out.push_str("{\"finalists\":[");
        for (i, label) in self.finalists.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            pyjson::write_str(out, label);
        }
        out.push_str(&format!("],\"rounds\":{}", self.rounds));
        if self.option_order_dropped {
            out.push_str(",\"option_order_dropped\":true");
        }
        out.push('}');
    }
}

/// The choices to narrow, `(qid, labels)` in request order.
pub type Plan = Vec<(String, Vec<Value>)>;

/// One state's answer after a tournament: the result, its routing (the final call's) and the
/// `x_tournament` report of each narrowed choice.
pub type Narrowed = (StateResult, Routing, Vec<(String, Report)>);

fn choice_question(q: &Value) -> Option<&Object> {
    match q {
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("choice") => Some(o),
        _ => None,
    }
}

/// `shortlist._criteria_items`: the labels of a choice's criteria, in criteria order. A label
/// repeated under Python equality is a `ValueError` (422); a list or dict label is unhashable,
/// a `TypeError` upstream, hence 500.
fn criteria_items(criteria: &Value) -> Result<Vec<Value>, TournamentError> {
    let items: Vec<Value> = match criteria {
        Value::Object(o) => o.keys().map(|k| Value::Str(k.to_owned())).collect(),
        Value::Array(a) => a.clone(),
        other => {
            return Err(TournamentError::Internal(format!(
                "choice criteria must be a dict or list, got {}",
                other.type_name()
            )))
        }
    };
    if items.is_empty() {
        return Err(TournamentError::EmptyCriteria);
    }
    for (i, label) in items.iter().enumerate() {
        if matches!(label, Value::Array(_) | Value::Object(_)) {
            return Err(TournamentError::Internal(format!(
                "unhashable type: '{}'",
                label.type_name()
            )));
        }
        // Set membership: Python `is` or `==` (1, 1.0 and True are one label; every JSON NaN
        // is the same object).
        if items[..i].iter().any(|seen| py_same_or_equal(seen, label)) {
            return Err(TournamentError::DuplicateLabel {
                label: py_repr(label),
            });
        }
    }
    Ok(items)
}

/// `serve._tournament_plan`: the choices to narrow, or `None` to answer in one pass.
///
/// Every choice over `group` options is narrowed. While every choice fits one pass (at most
/// 100 options), a choice with an `option_order` or a non-string label keeps the one-pass
/// path for the whole request; once one is over 100, the request is narrowed (orders dropped)
/// and a non-string label on a narrowed choice is refused.
pub fn plan(questions: &Object, group: usize) -> Result<Option<Plan>, TournamentError> {
    let mut large: Plan = Vec::new();
    for (qid, q) in questions.iter() {
        let Some(q) = choice_question(q) else {
            continue;
        };
        match q.get("criteria") {
            Some(c @ Value::Object(o)) if o.len() > group => {
                large.push((qid.to_owned(), criteria_items(c)?))
            }
            Some(c @ Value::Array(a)) if a.len() > group => {
                large.push((qid.to_owned(), criteria_items(c)?))
            }
            _ => {}
        }
    }
    if large.is_empty() {
        return Ok(None);
    }
    let unmappable = large
        .iter()
        .find(|(_, labels)| !labels.iter().all(|l| matches!(l, Value::Str(_))));
    let ordered = large.iter().any(|(qid, _)| {
        questions
            .get(qid)
            .and_then(Value::as_object)
            .and_then(|q| q.get("option_order"))
            .is_some_and(|v| !v.is_null())
    });
    if large
        .iter()
        .any(|(_, labels)| labels.len() > MAX_CHOICE_OPTIONS)
    {
        if let Some((qid, _)) = unmappable {
            return Err(TournamentError::NonStringLabel { qid: qid.clone() });
        }
        return Ok(Some(large));
    }
    Ok(if unmappable.is_some() || ordered {
        None
    } else {
        Some(large)
    })
}

/// `dict(question, criteria=<labels' subset>)` without its `option_order`
/// (`shortlist._subset_criteria` and `_drop_stale_order`).
fn cut(question: &Object, labels: &[Value]) -> Result<Value, TournamentError> {
    let criteria = match question.get("criteria") {
        Some(Value::Object(c)) => {
            let mut subset = Object::new();
            for label in labels {
                let Value::Str(key) = label else {
                    return Err(TournamentError::Internal(format!(
                        "tournament label {} is not a criteria key",
                        py_repr(label)
                    )));
                };
                let value = c.get(key).cloned().ok_or_else(|| {
                    TournamentError::Internal(format!("KeyError: {}", repr_str(key)))
                })?;
                subset.insert(key.clone(), value);
            }
            Value::Object(subset)
        }
        _ => Value::Array(labels.to_vec()),
    };
    let mut out = Object::new();
    for (key, value) in question.iter() {
        match key {
            "option_order" => {}
            "criteria" => {
                out.insert(key.to_owned(), criteria.clone());
            }
            _ => {
                out.insert(key.to_owned(), value.clone());
            }
        }
    }
    Ok(Value::Object(out))
}

struct Entry {
    qid: String,
    labels: Vec<Value>,
    rounds: usize,
}

/// `serve._predict_with_tournament` for one state: the elimination rounds, the final call,
/// then the answer reshaped as upstream does (every label in `probabilities`, `x_tournament`).
/// `usage.input_tokens` sums every call; everything else is the final call's.
pub fn run<E>(
    questions: &Object,
    group: usize,
    plan: &Plan,
    mut call: impl FnMut(&Object) -> Result<(StateResult, Routing), E>,
) -> Result<Narrowed, E>
where
    E: From<TournamentError>,
{
    // predict_tournament: every choice question takes part (those within `group` play no round).
    let mut meta: Vec<Entry> = Vec::new();
    for (qid, q) in questions.iter() {
        let Some(q) = choice_question(q) else {
            continue;
        };
        let Some(criteria) = q.get("criteria") else {
            return Err(TournamentError::NoCriteria {
                qid: qid.to_owned(),
            }
            .into());
        };
        meta.push(Entry {
            qid: qid.to_owned(),
            labels: criteria_items(criteria)?,
            rounds: 0,
        });
    }
    let question = |qid: &str| {
        questions
            .get(qid)
            .and_then(Value::as_object)
            .ok_or_else(|| TournamentError::Internal(format!("no question {qid}")))
    };
    let mut input_tokens = 0;
    loop {
        // Groups of near-equal size, in criteria order, for every choice still over `group`.
        let mut groups: Vec<(usize, Vec<Value>)> = Vec::new();
        for (m, entry) in meta.iter().enumerate() {
            let n = entry.labels.len();
            let parts = n.div_ceil(group);
            if parts > 1 {
                groups.extend(
                    (0..parts)
                        .map(|i| (m, entry.labels[i * n / parts..(i + 1) * n / parts].to_vec())),
                );
            }
        }
        if groups.is_empty() {
            break;
        }
        let mut round = Object::new();
        for (i, (m, labels)) in groups.iter().enumerate() {
            round.insert(i.to_string(), cut(question(&meta[*m].qid)?, labels)?);
        }
        let (result, _) = call(&round)?;
        input_tokens += result.usage.input_tokens;
        let mut winners: Vec<(usize, Vec<Value>)> = Vec::new();
        for (i, (m, _)) in groups.iter().enumerate() {
            let id = i.to_string();
            let choice = result
                .answers
                .iter()
                .find(|(qid, _)| *qid == id)
                .and_then(|(_, a)| match &a.body {
                    AnswerBody::Choice { choice, .. } => Some(choice.clone()),
                    _ => None,
                })
                .ok_or_else(|| {
                    TournamentError::Internal(format!("round answer {id} is missing"))
                })?;
            match winners.iter_mut().find(|(w, _)| w == m) {
                Some((_, labels)) => labels.push(choice),
                None => winners.push((*m, vec![choice])),
            }
        }
        for (m, labels) in winners {
            meta[m].labels = labels;
            meta[m].rounds += 1;
        }
    }
    let mut last = Object::new();
    for (qid, q) in questions.iter() {
        let narrowed = meta.iter().find(|e| e.qid == qid && e.rounds > 0);
        let value = match narrowed {
            Some(entry) => cut(question(qid)?, &entry.labels)?,
            None => q.clone(),
        };
        last.insert(qid.to_owned(), value);
    }
    let (mut result, routing) = call(&last)?;
    input_tokens += result.usage.input_tokens;
    result.usage.input_tokens = input_tokens;

    let mut reports = Vec::new();
    for (qid, labels) in plan {
        let Some(entry) = meta.iter().find(|e| &e.qid == qid).filter(|e| e.rounds > 0) else {
            continue;
        };
        let Some((_, answer)) = result.answers.iter_mut().find(|(id, _)| id == qid) else {
            continue;
        };
        let AnswerBody::Choice { probabilities, .. } = &mut answer.body else {
            continue;
        };
        let full: Vec<(Value, f64)> = labels
            .iter()
            .map(|label| {
                let p = probabilities
                    .iter()
                    .find(|(l, _)| l == label)
                    .map_or(0.0, |(_, p)| *p);
                (label.clone(), p)
            })
            .collect();
        *probabilities = full;
        let order = question(qid)?
            .get("option_order")
            .is_some_and(|v| !v.is_null());
        let finalists = entry
            .labels
            .iter()
            .map(|l| l.as_str().map(str::to_owned).unwrap_or_else(|| py_repr(l)))
            .collect();
        reports.push((
            qid.clone(),
            Report {
                finalists,
                rounds: entry.rounds,
                option_order_dropped: order,
            },
        ));
    }
    Ok((result, routing, reports))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pyjson::loads;

    fn object(text: &str) -> Object {
        match loads(text.as_bytes()).expect("json").value {
            Value::Object(o) => o,
            _ => panic!("not an object"),
        }
    }

    fn labels(n: usize) -> String {
        (0..n)
            .map(|i| format!("\"o{i}\""))
            .collect::<Vec<_>>()
            .join(",")
    }

    #[test]
    fn plan_follows_upstream() {
        let q = |criteria: &str, extra: &str| {
            object(&format!(
                r#"{{"q":{{"type":"choice","instructions":"x","criteria":{criteria}{extra}}}}}"#
            ))
        };
        // Within the group: one pass.
        assert!(plan(&q(&format!("[{}]", labels(16)), ""), 16)
            .unwrap()
            .is_none());
        // Over it: narrowed.
        let p = plan(&q(&format!("[{}]", labels(17)), ""), 16)
            .unwrap()
            .unwrap();
        assert_eq!(p[0].1.len(), 17);
        // A non-string label or an option_order keeps one pass while it fits one pass...
        assert!(plan(&q(&format!("[{},1]", labels(20)), ""), 16)
            .unwrap()
            .is_none());
        assert!(plan(
            &q(&format!("[{}]", labels(20)), r#","option_order":[0]"#),
            16
        )
        .unwrap()
        .is_none());
        // ... but not once a choice is over 100 options.
        assert!(plan(
            &q(&format!("[{}]", labels(101)), r#","option_order":[0]"#),
            16
        )
        .unwrap()
        .is_some());
        match plan(&q(&format!("[{},1]", labels(101)), ""), 16) {
            Err(e) => assert_eq!(
                e.to_string(),
                "question 'q': a choice is narrowed by elimination once a request has one over 100 options, and that needs every label to be a string"
            ),
            other => panic!("{other:?}"),
        }
        match plan(&q(&format!("[{},\"o3\"]", labels(20)), ""), 16) {
            Err(e) => assert_eq!(e.to_string(), "choice criteria label 'o3' is duplicated"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            plan(&q(&format!("[{},[1]]", labels(20)), ""), 16),
            Err(TournamentError::Internal(_))
        ));
    }

    #[test]
    fn groups_are_near_equal_and_cut_keeps_keys() {
        let qs = object(&format!(
            r#"{{"q":{{"type":"choice","instructions":"x","criteria":[{}],"option_order":null,"weight":2}}}}"#,
            labels(35)
        ));
        let plan = plan(&qs, 16).unwrap().unwrap();
        let mut calls: Vec<Object> = Vec::new();
        let fake = |round: &Object| -> Result<(StateResult, Routing), TournamentError> {
            calls.push(round.clone());
            Err(TournamentError::Internal("stop".into()))
        };
        assert!(run(&qs, 16, &plan, fake).is_err());
        let round = &calls[0];
        // 35 labels in ceil(35/16) = 3 groups of 11, 12, 12 (upstream's i*n//parts cuts).
        let sizes: Vec<usize> = round
            .values()
            .map(|q| {
                q.as_object()
                    .unwrap()
                    .get("criteria")
                    .unwrap()
                    .as_array()
                    .unwrap()
                    .len()
            })
            .collect();
        assert_eq!(sizes, [11, 12, 12]);
        assert_eq!(round.keys().collect::<Vec<_>>(), ["0", "1", "2"]);
        let first = round.get("0").unwrap().as_object().unwrap();
        assert_eq!(
            first.keys().collect::<Vec<_>>(),
            ["type", "instructions", "criteria", "weight"],
            "option_order dropped"
        );
    }
}
