//! Validation of a decision request body once it has been read: upstream laya-serve 0.4.15's
//! `_systemone_inner` / `_systemone_batch_inner` from `json.loads` up to (not including) the
//! inference gate — spec api.md §5.1 steps 6-14 and the batch route's checks (§7), in
//! upstream's order, with upstream's exact `detail` texts.
//!
//! What is *not* here: auth, admission and body reading (steps 1-5, the server's); `task`
//! resolution and per-question validation (step 16, inside inference: [`crate::decide`]).
//! Errors are [`RequestError`]s: `Display` is upstream's `detail`, the kind its class.
//!
//! Every walk over request values is iterative: a body may nest up to the parser's depth limit
//! (10 000), far beyond what recursion on a worker thread's stack should be trusted with.

use std::cmp::{max, min};
mod error;
pub mod jev;
mod limits;
mod overflow;

pub use error::{BudgetProblem, Field, RequestError, RequestErrorKind};
pub use limits::{laya_port, positive_int_or, tournament_group, Limits, DEFAULT_PORT};
pub use overflow::{Overflow, Windows};

use crate::agent::BatchOptions;
use crate::confidence::{bucket_keys, MinConfidence};
use crate::routing::{self, Checkpoint, RoutingConfig};
use pyjson::{Int, Object, Value};

/// `MAX_CHOICE_OPTIONS`: options per choice question on the one-pass path.
pub const MAX_CHOICE_OPTIONS: usize = 100;
/// `MAX_TOURNAMENT_CHOICE_OPTIONS`: the per-choice cap while `LAYA_TOURNAMENT_GROUP` is on.
pub const MAX_TOURNAMENT_CHOICE_OPTIONS: usize = 255;
/// `DEFAULT_MAX_TOKEN_BUDGET` (`LAYA_MAX_TOKEN_BUDGET`'s default).
pub const DEFAULT_MAX_TOKEN_BUDGET: usize = 8192;
/// `DEFAULT_MAX_BATCH_TOKENS` (`LAYA_MAX_BATCH_TOKENS`'s default).
pub const DEFAULT_MAX_BATCH_TOKENS: usize = 131_072;
/// The server's default cap on `max_windows` (`--max-windows`).
pub const DEFAULT_MAX_WINDOWS: usize = 16;
/// `_BATCH_ROW_TOKENS_ASSUMED`: row width the batch chunking assumes without a `max_len`.
const BATCH_ROW_TOKENS_ASSUMED: usize = 512;
/// `_STATE_PROBE_VALUES`: values the state-size pre-scan may pop (§5.4).
const STATE_PROBE_VALUES: usize = 64;

/// The five controls a body may not carry (`BODY_REFUSALS`), pre-sorted the way upstream sorts
/// them for the detail text.
const BODY_REFUSALS: [&str; 5] = [
    "hooks",
    "hooks_raise",
    "hooks_timeout",
    "on_predict_end",
    "on_predict_start",
];

/// A `POST /v1/systemone` body that passed steps 6-14.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRequest {
    /// Non-null; a string or any other JSON value (serialized for the model later).
    pub state: Value,
    /// Question id -> definition, request order; the definitions are not validated yet (step 16).
    pub questions: Object,
    /// Raw `model`; `None` when absent or null (upstream reads both as `None`).
    pub model: Option<Value>,
    /// The checkpoint `model` pins (§4.5), `None` to let the router choose (falsy values, Jev
    /// ids and the bundle repo id pin nothing).
    pub pin: Option<Checkpoint>,
    /// Raw `task`; `None` when absent or null. Resolved (and possibly refused) at step 16.
    pub task: Option<Value>,
    pub lang: Option<String>,
    pub lang_guess: Option<String>,
    /// `max_len` / `head_max_len` as sent (`None` = checkpoint default); `batch_size` is `None`.
    pub opts: BatchOptions,
    pub min_confidence: Option<MinConfidence>,
    /// sys1rust's opt-in `overflow` (checked after step 14).
    pub overflow: Overflow,
}

/// A `POST /v1/systemone/batch` body that passed the route's checks.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRequest {
    /// 1..=64 non-null states, request order.
    pub states: Vec<Value>,
    pub questions: Object,
    /// As [`DecisionRequest::model`] and [`DecisionRequest::pin`].
    pub model: Option<Value>,
    pub pin: Option<Checkpoint>,
    pub task: Option<Value>,
    pub lang: Option<String>,
    pub lang_guess: Option<String>,
    /// `max_len` / `head_max_len` as sent; `batch_size` is the *effective* states per forward
    /// pass: the client's `batch_size` capped by the token-budget chunking
    /// (`_batch_chunk_size`), or that chunking alone, or `None` (one pass) when neither applies.
    /// A client value beyond `usize` saturates (same meaning: everything in one pass).
    pub opts: BatchOptions,
    pub min_confidence: Option<MinConfidence>,
    /// True only when the body sent `sort_by_length: true` (upstream forwards nothing else).
    pub sort_by_length: bool,
    /// As [`DecisionRequest::overflow`], for every state (checked after `sort_by_length`).
    pub overflow: Overflow,
}

/// Validates a `POST /v1/systemone` body (§5.1 steps 6-14). The `model` field (step 11) is
/// resolved against `routing`'s registry after the surrogate scan and before `max_len`, so the
/// first failure wins as upstream.
pub fn parse_decision(
    body: &[u8],
    limits: &Limits,
    routing: &RoutingConfig,
) -> Result<DecisionRequest, RequestError> {
    let (obj, has_lone_surrogate) = load_object(body)?;
    // Step 7.
    let Some(mut obj) = obj.filter(|o| o.contains_key("questions")) else {
        return Err(RequestError::NotARequest { batch: false });
    };
    // Step 8 (`_check_request_limits`); `body.get("state")` reads an absent key as None.
    check_request_limits(
        obj.get("state").unwrap_or(&Value::Null),
        get(&obj, "questions"),
        limits,
    )?;
    refuse_hooks(&obj)?; // step 9
    if has_lone_surrogate {
        return Err(RequestError::LoneSurrogate); // step 10
    }
    let controls = check_controls(&obj, limits, routing)?; // steps 11-14
    let overflow = overflow::check_overflow(&obj, limits.max_token_budget, limits.max_windows)?;

    let state = take(&mut obj, "state");
    let questions = take_object(&mut obj, "questions")?;
    Ok(DecisionRequest {
        state,
        questions,
        model: take_non_null(&mut obj, "model"),
        pin: controls.pin,
        task: take_non_null(&mut obj, "task"),
        lang: controls.lang,
        lang_guess: controls.lang_guess,
        opts: BatchOptions {
            max_len: controls.max_len,
            head_max_len: controls.head_max_len,
            batch_size: None,
        },
        min_confidence: controls.min_confidence,
        overflow,
    })
}

/// Validates a `POST /v1/systemone/batch` body (§7), in `_systemone_batch_inner`'s order:
/// JSON → `states`+`questions` keys → states list → state count → steps 8a-8h per state →
/// hooks → `diagnostics` → surrogate → `check_model` → `max_len` → `head_max_len` → `lang` →
/// `lang_guess` → `min_confidence` → `batch_size` → `sort_by_length`.
pub fn parse_batch(
    body: &[u8],
    limits: &Limits,
    routing: &RoutingConfig,
) -> Result<BatchRequest, RequestError> {
    let (obj, has_lone_surrogate) = load_object(body)?;
    let Some(mut obj) = obj.filter(|o| o.contains_key("questions") && o.contains_key("states"))
    else {
        return Err(RequestError::NotARequest { batch: true });
    };
    // `_check_batch_limits`.
    let states = match get(&obj, "states") {
        Value::Array(states) if !states.is_empty() => states,
        _ => return Err(RequestError::StatesNotAList),
    };
    if states.len() > limits.max_states {
        return Err(RequestError::TooManyStates {
            count: states.len(),
            cap: limits.max_states,
        });
    }
    let questions = get(&obj, "questions");
    for state in states {
        // The whole single-request check per state, questions included, as upstream repeats
        // it: the question checks give the same verdict every time, so only the first state's
        // question failure can surface, after that state's null check.
        check_request_limits(state, questions, limits)?;
    }
    refuse_hooks(&obj)?;
    if obj.get("diagnostics").is_some_and(|v| !v.is_null()) {
        return Err(RequestError::Diagnostics);
    }
    if has_lone_surrogate {
        return Err(RequestError::LoneSurrogate);
    }
    let controls = check_controls(&obj, limits, routing)?;
    let batch_size = match obj.get("batch_size") {
        None | Some(Value::Null) => None,
        Some(Value::Int(i)) => {
            if int_to_u128(i).is_none_or(|n| n < 1) {
                return Err(RequestError::BatchSizeValue { value: i.clone() });
            }
            Some(int_to_usize_saturating(i))
        }
        Some(_) => return Err(RequestError::BatchSizeType),
    };
    let sort_by_length = match obj.get("sort_by_length") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(RequestError::SortByLength),
    };
    let overflow = overflow::check_overflow(&obj, limits.max_token_budget, limits.max_windows)?;

    let n_states = states.len();
    let n_questions = match questions {
        Value::Object(q) => q.len(),
        _ => 0,
    };
    let planned = batch_chunk_size(
        n_states,
        n_questions,
        controls.max_len,
        limits.max_batch_tokens,
    );
    let batch_size = match (batch_size, planned) {
        (Some(b), Some(p)) => Some(min(b, p)),
        (b, p) => b.or(p),
    };

    // Shape checked above; the errors repeat those checks' verdicts.
    let states = match take(&mut obj, "states") {
        Value::Array(states) => states,
        _ => return Err(RequestError::StatesNotAList),
    };
    let questions = take_object(&mut obj, "questions")?;
    Ok(BatchRequest {
        states,
        questions,
        model: take_non_null(&mut obj, "model"),
        pin: controls.pin,
        task: take_non_null(&mut obj, "task"),
        lang: controls.lang,
        lang_guess: controls.lang_guess,
        opts: BatchOptions {
            max_len: controls.max_len,
            head_max_len: controls.head_max_len,
            batch_size,
        },
        min_confidence: controls.min_confidence,
        sort_by_length,
        overflow,
    })
}

/// Upstream `_batch_chunk_size`: states per forward pass so that `states × questions × width`
/// tokens stay within `budget`, or `None` when everything already fits in one pass. `width` is
/// the request's `max_len`, else 512.
pub fn batch_chunk_size(
    n_states: usize,
    n_questions: usize,
    max_len: Option<usize>,
    budget: usize,
) -> Option<usize> {
    if n_states == 0 || n_questions == 0 {
        return None;
    }
    let width = max_len
        .filter(|&w| w > 0)
        .unwrap_or(BATCH_ROW_TOKENS_ASSUMED);
    // u128: 64 × 64 × usize cannot overflow it (Python's ints never overflow).
    if n_states as u128 * n_questions as u128 * width as u128 <= budget as u128 {
        return None;
    }
    let rows_per_pass = max(1, budget / width);
    Some(max(1, min(n_states, rows_per_pass / n_questions)))
}

/// Step 6: `json.loads`. Returns the body if it is an object (`None` for any other JSON value,
/// which both routes refuse with their "must be an object" text) and whether some string in it
/// held a lone surrogate.
fn load_object(body: &[u8]) -> Result<(Option<Object>, bool), RequestError> {
    let parsed = pyjson::loads(body).map_err(|_| RequestError::InvalidJson)?;
    let obj = match parsed.value {
        Value::Object(obj) => Some(obj),
        _ => None,
    };
    Ok((obj, parsed.has_lone_surrogate))
}

const NULL: Value = Value::Null;

/// `body[key]` for a key known to be present (`Null` otherwise, never reached).
fn get<'a>(obj: &'a Object, key: &str) -> &'a Value {
    obj.get(key).unwrap_or(&NULL)
}

fn take(obj: &mut Object, key: &str) -> Value {
    obj.get_mut(key)
        .map(|v| std::mem::replace(v, Value::Null))
        .unwrap_or(Value::Null)
}

fn take_non_null(obj: &mut Object, key: &str) -> Option<Value> {
    Some(take(obj, key)).filter(|v| !v.is_null())
}

/// `questions`, which step 8b has already checked to be an object.
fn take_object(obj: &mut Object, key: &str) -> Result<Object, RequestError> {
    match take(obj, key) {
        Value::Object(o) => Ok(o),
        _ => Err(RequestError::QuestionsNotAnObject),
    }
}

/// Step 8 (`_check_request_limits`): 8a state present, 8b questions an object, 8c question
/// count, 8d-8f per question in order, 8g options across questions, 8h state size.
pub fn check_request_limits(
    state: &Value,
    questions: &Value,
    limits: &Limits,
) -> Result<(), RequestError> {
    if state.is_null() {
        return Err(RequestError::StateRequired);
    }
    let Value::Object(questions) = questions else {
        return Err(RequestError::QuestionsNotAnObject);
    };
    if questions.len() > limits.max_questions {
        return Err(RequestError::TooManyQuestions {
            count: questions.len(),
            cap: limits.max_questions,
        });
    }
    let mut total_options = 0usize;
    for (qid, question) in questions {
        // Questions that are not objects, or lack a recognised type/criteria shape, are left to
        // step 16 and count nothing here.
        let Value::Object(question) = question else {
            continue;
        };
        let crit = question.get("criteria");
        match (question.get("type"), crit) {
            (Some(Value::Str(t)), Some(crit @ (Value::Object(_) | Value::Array(_))))
                if t == "choice" =>
            {
                let count = match crit {
                    Value::Object(o) => o.len(),
                    Value::Array(a) => a.len(),
                    _ => 0,
                };
                total_options += count;
                if count > limits.max_choice_options {
                    return Err(RequestError::TooManyChoiceOptions {
                        qid: qid.to_owned(),
                        count,
                        cap: limits.max_choice_options,
                    });
                }
            }
            (Some(Value::Str(t)), Some(Value::Array(levels))) if t == "score" => {
                let count = levels.len();
                total_options += count;
                if count > limits.max_score_levels {
                    return Err(RequestError::TooManyScoreLevels {
                        qid: qid.to_owned(),
                        count,
                        cap: limits.max_score_levels,
                    });
                }
                // `None in crit`: only `null` equals `None` in Python.
                if let Some(index) = levels.iter().position(Value::is_null) {
                    return Err(RequestError::NullScoreLevel {
                        qid: qid.to_owned(),
                        index,
                    });
                }
            }
            _ => {}
        }
    }
    if total_options > limits.max_total_options {
        return Err(RequestError::TooManyOptions {
            count: total_options,
            cap: limits.max_total_options,
        });
    }
    let state_len = state_length(state, limits.max_state_chars);
    if state_len > limits.max_state_chars {
        return Err(RequestError::StateTooLarge {
            chars: state_len,
            cap: limits.max_state_chars,
        });
    }
    Ok(())
}

/// The number the state-size check compares (§5.4, upstream `_state_length`):
///
/// * a string: its code points;
/// * anything else: first a pre-scan (`_state_length_lower_bound_over`) that pops at most 64
///   values off a LIFO stack seeded with the state — an object pushes its values in order, an
///   array its items, a string adds its code points to a running total, and the first total
///   over `cap` is returned as is; it gives up (no verdict) on the first number, boolean or
///   null it pops (upstream's `else: return 0` branch: only exact str/dict/list are walked);
/// * otherwise the code points of `json.dumps(state, ensure_ascii=False)`.
///
/// A lone surrogate is one U+FFFD code point in a parsed [`Value`], so counts match Python's.
pub fn state_length(state: &Value, cap: usize) -> usize {
    if let Value::Str(s) = state {
        return s.chars().count();
    }
    let over = state_length_lower_bound_over(state, cap);
    if over > 0 {
        return over;
    }
    pyjson::dumps_spaced(state).chars().count()
}

/// `_state_length_lower_bound_over`: a string-length total already over `cap`, else 0.
fn state_length_lower_bound_over(state: &Value, cap: usize) -> usize {
    let mut total = 0usize;
    let mut stack: Vec<&Value> = vec![state];
    let mut budget = STATE_PROBE_VALUES;
    while budget > 0 {
        let Some(item) = stack.pop() else { break };
        budget -= 1;
        match item {
            Value::Str(s) => {
                total += s.chars().count();
                if total > cap {
                    return total;
                }
            }
            Value::Object(o) => stack.extend(o.values()),
            Value::Array(a) => stack.extend(a.iter()),
            Value::Null | Value::Bool(_) | Value::Int(_) | Value::Float(_) => return 0,
        }
    }
    0
}

/// Step 9 (`_refuse_body_refusals`): any hook control present and non-null.
fn refuse_hooks(obj: &Object) -> Result<(), RequestError> {
    let names: Vec<&'static str> = BODY_REFUSALS
        .iter()
        .copied()
        .filter(|k| obj.get(k).is_some_and(|v| !v.is_null()))
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    Err(RequestError::HooksRefused { names })
}

/// Steps 11-14, validated.
struct Controls {
    pin: Option<Checkpoint>,
    max_len: Option<usize>,
    head_max_len: Option<usize>,
    lang: Option<String>,
    lang_guess: Option<String>,
    min_confidence: Option<MinConfidence>,
}

/// Steps 11-14 in order: `model` (§4.5; `body.get("model")` reads an absent key as `None`),
/// `max_len`, `head_max_len`, `lang`, `lang_guess`, `min_confidence`. (`task` is read between
/// them upstream but not checked until step 16.)
fn check_controls(
    obj: &Object,
    limits: &Limits,
    routing: &RoutingConfig,
) -> Result<Controls, RequestError> {
    let pin = routing::resolve_model_field(obj.get("model").unwrap_or(&NULL), routing)
        .map_err(RequestError::UnknownModel)?;
    let max_len = check_budget(obj, "max_len", limits.max_token_budget)?;
    let head_max_len = check_budget(obj, "head_max_len", limits.max_token_budget)?;
    let lang = check_lang(obj, "lang")?;
    let lang_guess = check_lang(obj, "lang_guess")?;
    let min_confidence = match obj.get("min_confidence") {
        None | Some(Value::Null) => None,
        Some(v) => Some(check_min_confidence(v)?),
    };
    Ok(Controls {
        pin,
        max_len,
        head_max_len,
        lang,
        lang_guess,
        min_confidence,
    })
}

/// `_validate_budget_param` (§4.7): absent/null → `None`; a JSON integer in `1..=cap`.
fn check_budget(
    obj: &Object,
    key: &'static str,
    cap: usize,
) -> Result<Option<usize>, RequestError> {
    let refuse = |problem| Err(RequestError::Budget { key, problem });
    let i = match obj.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Int(i)) => i,
        Some(_) => return refuse(BudgetProblem::NotAnInteger),
    };
    let n = match int_to_u128(i) {
        Some(n) if n > 0 => n,
        _ => return refuse(BudgetProblem::NotPositive),
    };
    // `int_to_u128` saturates far above any usize cap, so the comparison stays right.
    if n > cap as u128 {
        return refuse(BudgetProblem::OverCap {
            value: i.clone(),
            cap,
        });
    }
    Ok(Some(n as usize))
}

/// A non-negative Python int as `u128`, saturating at `u128::MAX`; `None` when negative.
fn int_to_u128(i: &Int) -> Option<u128> {
    if i.is_negative() {
        return None;
    }
    match i.as_i64() {
        Some(n) => Some(n as u128),
        // Canonical decimal digits, so a parse failure can only be overflow.
        None => Some(i.to_string().parse::<u128>().unwrap_or(u128::MAX)),
    }
}

fn int_to_usize_saturating(i: &Int) -> usize {
    int_to_u128(i).map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX))
}

/// `_validate_language_param`: null/absent → `None`, a string, else 422.
fn check_lang(obj: &Object, key: &'static str) -> Result<Option<String>, RequestError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Str(s)) => Ok(Some(s.clone())),
        Some(_) => Err(RequestError::Lang { key }),
    }
}

/// Upstream `laya.confidence.check_min_confidence` on a non-null `min_confidence` (§4.8): an
/// object is a bucket map, anything else must be a scalar threshold.
///
/// An integer too large for a float (over ~1.8e308, i.e. 309+ digits) makes upstream's
/// `math.isfinite` raise `OverflowError`, which no handler catches:
/// [`RequestError::ConfidenceOverflow`].
pub fn check_min_confidence(v: &Value) -> Result<MinConfidence, RequestError> {
    let Value::Object(map) = v else {
        return check_threshold(v).map(MinConfidence::Scalar);
    };
    if map.is_empty() {
        return Err(RequestError::EmptyConfidenceMap);
    }
    let allowed = bucket_keys();
    let mut out = Vec::with_capacity(map.len());
    // Key and value are checked together, entry by entry, as upstream's loop does.
    for (key, val) in map {
        if key != "default" && !allowed.iter().any(|k| k == key) {
            return Err(RequestError::ConfidenceBucket {
                key: key.to_owned(),
            });
        }
        out.push((key.to_owned(), check_threshold(val)?));
    }
    Ok(MinConfidence::Buckets(out))
}

/// `_check_one_threshold`: a non-bool number, finite, in [0, 1]; returned as `float(v)`.
fn check_threshold(v: &Value) -> Result<f64, RequestError> {
    let bad = || RequestError::threshold(v);
    let x = match v {
        Value::Float(x) => *x,
        // `math.isfinite(int)` converts to float first and raises OverflowError past the float
        // range; a representable int converts exactly enough that the bound checks agree.
        Value::Int(i) => match i.to_f64() {
            Some(x) => x,
            None => return Err(RequestError::ConfidenceOverflow),
        },
        _ => return Err(bad()),
    };
    // `v < 0.0 or v > 1.0` on the int itself is exact; on its float image it can only differ
    // for ints that round to 0.0 or 1.0, and no int other than 0 and 1 does.
    if x.is_finite() && (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(bad())
    }
}
