//! Validation of a decision request body once it has been read: upstream laya-serve 0.4.15's
//! `_systemone_inner` / `_systemone_batch_inner` from `json.loads` up to (not including) the
//! inference gate — spec api.md §5.1 steps 6-14 and the batch route's checks (§7), in
//! upstream's order, with upstream's exact `detail` texts.
//!
//! What is *not* here: auth, admission and body reading (steps 1-5, HTTP layer); `model`
//! resolution (step 11, §4.5) which the caller supplies as a callback so it runs in its place
//! in the order; `task` resolution and per-question validation (step 16, inside inference).
//!
//! Every walk over request values is iterative: a body may nest up to the parser's depth limit
//! (10 000), far beyond what recursion on a worker thread's stack should be trusted with.

use std::cmp::{max, min};
use std::fmt;

use crate::confidence::{bucket_keys, MinConfidence};
use crate::engine_api::BatchOptions;
use crate::pyjson::{self, Int, Object, Value};

/// `MAX_CHOICE_OPTIONS`: options per choice question on the one-pass path.
pub const MAX_CHOICE_OPTIONS: usize = 100;
/// `MAX_TOURNAMENT_CHOICE_OPTIONS`: the per-choice cap while `LAYA_TOURNAMENT_GROUP` is on.
pub const MAX_TOURNAMENT_CHOICE_OPTIONS: usize = 255;
/// `DEFAULT_MAX_TOKEN_BUDGET` (`LAYA_MAX_TOKEN_BUDGET`'s default).
pub const DEFAULT_MAX_TOKEN_BUDGET: usize = 8192;
/// `DEFAULT_MAX_BATCH_TOKENS` (`LAYA_MAX_BATCH_TOKENS`'s default).
pub const DEFAULT_MAX_BATCH_TOKENS: usize = 131_072;
/// `_BATCH_ROW_TOKENS_ASSUMED`: row width the batch chunking assumes without a `max_len`.
const BATCH_ROW_TOKENS_ASSUMED: usize = 512;
/// `_STATE_PROBE_VALUES`: values the state-size pre-scan may pop (§5.4).
const STATE_PROBE_VALUES: usize = 64;

/// Step 6 (`json.loads` failed: syntax, encoding, >4300-digit int, nesting).
pub const INVALID_JSON: &str = "request body must be valid JSON";
/// Step 10; the same text on both routes.
pub const LONE_SURROGATE: &str =
    "request body contains an unpaired surrogate escape; those cannot be encoded as UTF-8";
/// Body of Starlette's response to an exception the app did not turn into an HTTP error.
pub const INTERNAL_SERVER_ERROR: &str = "Internal Server Error";

/// The five controls a body may not carry (`BODY_REFUSALS`), pre-sorted the way upstream sorts
/// them for the detail text.
const BODY_REFUSALS: [&str; 5] = [
    "hooks",
    "hooks_raise",
    "hooks_timeout",
    "on_predict_end",
    "on_predict_start",
];

/// The request limits, some of them configurable through the environment (§5.2, §12.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Questions per request (`MAX_QUESTIONS`).
    pub max_questions: usize,
    /// Options per choice question: 100, or 255 with `LAYA_TOURNAMENT_GROUP` on.
    pub max_choice_options: usize,
    /// Levels per score question (`MAX_SCORE_LEVELS`).
    pub max_score_levels: usize,
    /// Choice + score options across all questions (`MAX_TOTAL_OPTIONS`).
    pub max_total_options: usize,
    /// Code points of the serialized state (`MAX_STATE_CHARS`, measured per §5.4).
    pub max_state_chars: usize,
    /// States per batch (`MAX_BATCH_STATES`).
    pub max_states: usize,
    /// Cap on `max_len` / `head_max_len` (`LAYA_MAX_TOKEN_BUDGET`, read per request upstream).
    pub max_token_budget: usize,
    /// Tokens one batch forward pass may collate (`LAYA_MAX_BATCH_TOKENS`, per request); sizes
    /// the batch route's chunks, never refuses.
    pub max_batch_tokens: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_questions: 64,
            max_choice_options: MAX_CHOICE_OPTIONS,
            max_score_levels: 32,
            max_total_options: 512,
            max_state_chars: 50_000,
            max_states: 64,
            max_token_budget: DEFAULT_MAX_TOKEN_BUDGET,
            max_batch_tokens: DEFAULT_MAX_BATCH_TOKENS,
        }
    }
}

impl Limits {
    /// The limits the process environment asks for: `LAYA_MAX_TOKEN_BUDGET`,
    /// `LAYA_MAX_BATCH_TOKENS` (upstream re-reads these on every request, so call this per
    /// request to match) and `LAYA_TOURNAMENT_GROUP` (read once at startup upstream).
    pub fn from_env() -> Limits {
        // A value that is not valid Unicode fails Python's `int()` and falls back to the
        // default, which is what treating it as unset gives too.
        Limits::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`Limits::from_env`] over any variable lookup (for tests and embedding).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Limits {
        let positive_or = |name: &str, default: usize| match get(name).as_deref() {
            // `if not raw: return DEFAULT`, then `int(str(raw).strip())`, then `n <= 0 -> DEFAULT`.
            Some(raw) if !raw.is_empty() => match py_int(raw) {
                Some(n) if n > 0 => usize::try_from(n).unwrap_or(usize::MAX),
                _ => default,
            },
            _ => default,
        };
        let tournament = tournament_group(get("LAYA_TOURNAMENT_GROUP").as_deref()) != 0;
        Limits {
            max_choice_options: if tournament {
                MAX_TOURNAMENT_CHOICE_OPTIONS
            } else {
                MAX_CHOICE_OPTIONS
            },
            max_token_budget: positive_or("LAYA_MAX_TOKEN_BUDGET", DEFAULT_MAX_TOKEN_BUDGET),
            max_batch_tokens: positive_or("LAYA_MAX_BATCH_TOKENS", DEFAULT_MAX_BATCH_TOKENS),
            ..Limits::default()
        }
    }
}

/// Upstream `_resolve_tournament_group` on the raw `LAYA_TOURNAMENT_GROUP`: the group size when
/// it is an integer in 2..=100, else 0 (off).
pub fn tournament_group(raw: Option<&str>) -> usize {
    match raw.filter(|r| !r.is_empty()).and_then(py_int) {
        Some(n) if (2..=MAX_CHOICE_OPTIONS as i128).contains(&n) => n as usize,
        _ => 0,
    }
}

/// Python `int(text)` for the decimal forms an environment variable realistically holds:
/// surrounding whitespace, an optional sign, ASCII digits with single `_` between digits.
/// Saturates at the `i128` range (only ever compared against small bounds). Non-ASCII decimal
/// digits, which Python also accepts, are refused (falls back to the default).
fn py_int(text: &str) -> Option<i128> {
    let t = crate::question::py_strip(text);
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
    {
        return None;
    }
    let mut n: i128 = 0;
    for b in digits.bytes() {
        match b {
            b'_' => {}
            b'0'..=b'9' => n = n.saturating_mul(10).saturating_add(i128::from(b - b'0')),
            _ => return None,
        }
    }
    Some(if negative { -n } else { n })
}

/// An HTTP error answer: `status` with body `{"detail": detail}` — except the one case
/// [`ApiError::is_unhandled`] names, which upstream answers as Starlette's plain-text 500.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    /// The exact upstream detail text.
    pub detail: String,
}

impl ApiError {
    pub fn new(status: u16, detail: impl Into<String>) -> ApiError {
        ApiError {
            status,
            detail: detail.into(),
        }
    }

    /// An exception upstream does not catch on the way to the gate (an `OverflowError`, see
    /// [`check_min_confidence`]): Starlette answers 500 with the plain-text body
    /// `Internal Server Error` (`content-type: text/plain; charset=utf-8`), not JSON.
    pub fn unhandled() -> ApiError {
        ApiError::new(500, INTERNAL_SERVER_ERROR)
    }

    pub fn is_unhandled(&self) -> bool {
        self.status == 500 && self.detail == INTERNAL_SERVER_ERROR
    }

    /// The response body: `{"detail":"..."}` in FastAPI's compact encoding, or the plain text
    /// for [`ApiError::unhandled`].
    pub fn body(&self) -> String {
        if self.is_unhandled() {
            return INTERNAL_SERVER_ERROR.to_owned();
        }
        let mut out = String::with_capacity(self.detail.len() + 14);
        out.push_str("{\"detail\":");
        pyjson::write_str(&mut out, &self.detail);
        out.push('}');
        out
    }

    /// The response's `content-type`.
    pub fn content_type(&self) -> &'static str {
        if self.is_unhandled() {
            "text/plain; charset=utf-8"
        } else {
            "application/json"
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status, self.detail)
    }
}

impl std::error::Error for ApiError {}

fn e400(detail: impl Into<String>) -> ApiError {
    ApiError::new(400, detail)
}
fn e413(detail: impl Into<String>) -> ApiError {
    ApiError::new(413, detail)
}
fn e422(detail: impl Into<String>) -> ApiError {
    ApiError::new(422, detail)
}

/// A `POST /v1/systemone` body that passed steps 6-14.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRequest {
    /// Non-null; a string or any other JSON value (serialized for the model later).
    pub state: Value,
    /// Question id -> definition, request order; the definitions are not validated yet (step 16).
    pub questions: Object,
    /// Raw `model`; `None` when absent or null (upstream reads both as `None`). Resolution is the
    /// caller's (§4.5): falsy values, Jev ids etc. still mean "no pin".
    pub model: Option<Value>,
    /// Raw `task`; `None` when absent or null. Resolved (and possibly refused) at step 16.
    pub task: Option<Value>,
    pub lang: Option<String>,
    pub lang_guess: Option<String>,
    /// `max_len` / `head_max_len` as sent (`None` = checkpoint default); `batch_size` is `None`.
    pub opts: BatchOptions,
    pub min_confidence: Option<MinConfidence>,
}

/// A `POST /v1/systemone/batch` body that passed the route's checks.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRequest {
    /// 1..=64 non-null states, request order.
    pub states: Vec<Value>,
    pub questions: Object,
    /// As [`DecisionRequest::model`].
    pub model: Option<Value>,
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
}

/// Validates a `POST /v1/systemone` body (§5.1 steps 6-14). `check_model` is step 11: it gets
/// the body's `model` (`Value::Null` when absent, as Python's `body.get("model")`) and runs
/// after the surrogate scan and before `max_len`, so the first failure wins as upstream.
pub fn parse_decision(
    body: &[u8],
    limits: &Limits,
    check_model: impl FnOnce(&Value) -> Result<(), ApiError>,
) -> Result<DecisionRequest, ApiError> {
    let (obj, has_lone_surrogate) = load_object(body)?;
    // Step 7.
    let Some(mut obj) = obj.filter(|o| o.contains_key("questions")) else {
        return Err(e400(
            "request body must be an object with a 'questions' field",
        ));
    };
    // Step 8 (`_check_request_limits`); `body.get("state")` reads an absent key as None.
    check_request_limits(
        obj.get("state").unwrap_or(&Value::Null),
        get(&obj, "questions"),
        limits,
    )?;
    refuse_hooks(&obj)?; // step 9
    if has_lone_surrogate {
        return Err(e400(LONE_SURROGATE)); // step 10
    }
    let controls = check_controls(&obj, limits, check_model)?; // steps 11-14

    let state = take(&mut obj, "state");
    let questions = take_object(&mut obj, "questions")?;
    Ok(DecisionRequest {
        state,
        questions,
        model: take_non_null(&mut obj, "model"),
        task: take_non_null(&mut obj, "task"),
        lang: controls.lang,
        lang_guess: controls.lang_guess,
        opts: BatchOptions {
            max_len: controls.max_len,
            head_max_len: controls.head_max_len,
            batch_size: None,
        },
        min_confidence: controls.min_confidence,
    })
}

/// Validates a `POST /v1/systemone/batch` body (§7), in `_systemone_batch_inner`'s order:
/// JSON → `states`+`questions` keys → states list → state count → steps 8a-8h per state →
/// hooks → `diagnostics` → surrogate → `check_model` → `max_len` → `head_max_len` → `lang` →
/// `lang_guess` → `min_confidence` → `batch_size` → `sort_by_length`.
pub fn parse_batch(
    body: &[u8],
    limits: &Limits,
    check_model: impl FnOnce(&Value) -> Result<(), ApiError>,
) -> Result<BatchRequest, ApiError> {
    let (obj, has_lone_surrogate) = load_object(body)?;
    let Some(mut obj) = obj.filter(|o| o.contains_key("questions") && o.contains_key("states"))
    else {
        return Err(e400(
            "request body must be an object with 'states' and 'questions' fields",
        ));
    };
    // `_check_batch_limits`.
    let states = match get(&obj, "states") {
        Value::Array(states) if !states.is_empty() => states,
        _ => return Err(e400("'states' must be a non-empty list")),
    };
    if states.len() > limits.max_states {
        return Err(e413(format!(
            "too many states in batch ({} > {})",
            states.len(),
            limits.max_states
        )));
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
        return Err(e422(
            "diagnostics is filled in place for an in-process caller and cannot be returned over HTTP; \
             read the per-group report from the CLI or a local Router",
        ));
    }
    if has_lone_surrogate {
        return Err(e400(LONE_SURROGATE));
    }
    let controls = check_controls(&obj, limits, check_model)?;
    let batch_size = match obj.get("batch_size") {
        None | Some(Value::Null) => None,
        Some(Value::Int(i)) => {
            if int_to_u128(i).is_none_or(|n| n < 1) {
                return Err(e422(format!(
                    "batch_size must be a positive integer, got {i}"
                )));
            }
            Some(int_to_usize_saturating(i))
        }
        Some(_) => return Err(e422("batch_size must be an integer")),
    };
    let sort_by_length = match obj.get("sort_by_length") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(e422("sort_by_length must be a boolean")),
    };

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

    let states = match take(&mut obj, "states") {
        Value::Array(states) => states,
        _ => return Err(internal()),
    };
    let questions = take_object(&mut obj, "questions")?;
    Ok(BatchRequest {
        states,
        questions,
        model: take_non_null(&mut obj, "model"),
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
fn load_object(body: &[u8]) -> Result<(Option<Object>, bool), ApiError> {
    let parsed = pyjson::loads(body).map_err(|_| e400(INVALID_JSON))?;
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

fn take_object(obj: &mut Object, key: &str) -> Result<Object, ApiError> {
    match take(obj, key) {
        Value::Object(o) => Ok(o),
        // Checked at step 8b before any caller gets here.
        _ => Err(internal()),
    }
}

/// A broken invariant of this module (never expected); reported like any internal failure.
fn internal() -> ApiError {
    debug_assert!(false, "request validation invariant broken");
    ApiError::new(500, "inference failed")
}

/// Step 8 (`_check_request_limits`): 8a state present, 8b questions an object, 8c question
/// count, 8d-8f per question in order, 8g options across questions, 8h state size.
pub fn check_request_limits(
    state: &Value,
    questions: &Value,
    limits: &Limits,
) -> Result<(), ApiError> {
    if state.is_null() {
        return Err(e400("'state' is required"));
    }
    let Value::Object(questions) = questions else {
        return Err(e400("'questions' must be an object"));
    };
    if questions.len() > limits.max_questions {
        return Err(e413(format!(
            "too many questions ({} > {})",
            questions.len(),
            limits.max_questions
        )));
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
                    return Err(e413(format!(
                        "too many choice options for {} ({count} > {})",
                        pyjson::repr_str(qid),
                        limits.max_choice_options
                    )));
                }
            }
            (Some(Value::Str(t)), Some(Value::Array(levels))) if t == "score" => {
                let count = levels.len();
                total_options += count;
                if count > limits.max_score_levels {
                    return Err(e413(format!(
                        "too many score levels for {} ({count} > {})",
                        pyjson::repr_str(qid),
                        limits.max_score_levels
                    )));
                }
                // `None in crit`: only `null` equals `None` in Python.
                if let Some(i) = levels.iter().position(Value::is_null) {
                    return Err(e422(format!(
                        "score question {} has a null level at index {i}; give every level a description",
                        pyjson::repr_str(qid)
                    )));
                }
            }
            _ => {}
        }
    }
    if total_options > limits.max_total_options {
        return Err(e413(format!(
            "too many answer options across questions ({total_options} > {})",
            limits.max_total_options
        )));
    }
    let state_len = state_length(state, limits.max_state_chars);
    if state_len > limits.max_state_chars {
        return Err(e413(format!(
            "state too large ({state_len} > {} chars)",
            limits.max_state_chars
        )));
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
fn refuse_hooks(obj: &Object) -> Result<(), ApiError> {
    let given: Vec<&str> = BODY_REFUSALS
        .iter()
        .copied()
        .filter(|k| obj.get(k).is_some_and(|v| !v.is_null()))
        .collect();
    if given.is_empty() {
        return Ok(());
    }
    Err(e422(format!(
        "{} run inside the server process and cannot be sent to this endpoint; install them where \
         laya-serve runs, or drop them",
        given.join(", ")
    )))
}

/// Steps 11-14, validated.
struct Controls {
    max_len: Option<usize>,
    head_max_len: Option<usize>,
    lang: Option<String>,
    lang_guess: Option<String>,
    min_confidence: Option<MinConfidence>,
}

/// Steps 11-14 in order: model (callback), `max_len`, `head_max_len`, `lang`, `lang_guess`,
/// `min_confidence`. (`task` is read between them upstream but not checked until step 16.)
fn check_controls(
    obj: &Object,
    limits: &Limits,
    check_model: impl FnOnce(&Value) -> Result<(), ApiError>,
) -> Result<Controls, ApiError> {
    check_model(obj.get("model").unwrap_or(&NULL))?;
    let max_len = check_budget(obj, "max_len", limits.max_token_budget)?;
    let head_max_len = check_budget(obj, "head_max_len", limits.max_token_budget)?;
    let lang = check_lang(obj, "lang")?;
    let lang_guess = check_lang(obj, "lang_guess")?;
    let min_confidence = match obj.get("min_confidence") {
        None | Some(Value::Null) => None,
        Some(v) => Some(check_min_confidence(v)?),
    };
    Ok(Controls {
        max_len,
        head_max_len,
        lang,
        lang_guess,
        min_confidence,
    })
}

/// `_validate_budget_param` (§4.7): absent/null → `None`; a JSON integer in `1..=cap`.
fn check_budget(obj: &Object, key: &str, cap: usize) -> Result<Option<usize>, ApiError> {
    let i = match obj.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Int(i)) => i,
        Some(_) => return Err(e422(format!("{key} must be an integer"))),
    };
    let n = match int_to_u128(i) {
        Some(n) if n > 0 => n,
        _ => return Err(e422(format!("{key} must be a positive integer"))),
    };
    // `int_to_u128` saturates far above any usize cap, so the comparison stays right.
    if n > cap as u128 {
        return Err(e422(format!("{key} exceeds server limit ({i} > {cap})")));
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
fn check_lang(obj: &Object, key: &str) -> Result<Option<String>, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Str(s)) => Ok(Some(s.clone())),
        Some(_) => Err(e422(format!(
            "{key} must be a language code string such as \"de\", or null"
        ))),
    }
}

/// Upstream `laya.confidence.check_min_confidence` on a non-null `min_confidence` (§4.8): an
/// object is a bucket map, anything else must be a scalar threshold.
///
/// An integer too large for a float (over ~1.8e308, i.e. 309+ digits) makes upstream's
/// `math.isfinite` raise `OverflowError`, which no handler catches: that answer is
/// [`ApiError::unhandled`].
pub fn check_min_confidence(v: &Value) -> Result<MinConfidence, ApiError> {
    let Value::Object(map) = v else {
        return check_threshold(v).map(MinConfidence::Scalar);
    };
    if map.is_empty() {
        return Err(e422(
            "a min_confidence map must be a non-empty dict of bucket -> float, got {}",
        ));
    }
    let allowed = bucket_keys();
    let mut out = Vec::with_capacity(map.len());
    // Key and value are checked together, entry by entry, as upstream's loop does.
    for (key, val) in map {
        if key != "default" && !allowed.iter().any(|k| k == key) {
            return Err(e422(format!(
                "min_confidence map keys must be a bucket like 'choice:3-5' or 'default', got {}",
                pyjson::repr_str(key)
            )));
        }
        out.push((key.to_owned(), check_threshold(val)?));
    }
    Ok(MinConfidence::Buckets(out))
}

/// `_check_one_threshold`: a non-bool number, finite, in [0, 1]; returned as `float(v)`.
fn check_threshold(v: &Value) -> Result<f64, ApiError> {
    let bad = || {
        e422(format!(
            "min_confidence must be a float in [0.0, 1.0], got {}",
            pyjson::py_repr(v)
        ))
    };
    let x = match v {
        Value::Float(x) => *x,
        // `math.isfinite(int)` converts to float first and raises OverflowError past the float
        // range; a representable int converts exactly enough that the bound checks agree.
        Value::Int(i) => match i.to_f64() {
            Some(x) => x,
            None => return Err(ApiError::unhandled()),
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
