//! Why a request body was refused before inference: one variant per rule of spec api.md §5.1
//! steps 6-14 and §7, carrying the numbers and names the rule quotes. `Display` is upstream's
//! exact `detail`; [`RequestError::kind`] is the class of refusal, which the server turns into a
//! status (this crate knows no HTTP).

use std::fmt;

use pyjson::{py_repr, repr_str, Int, Value};

/// The class of a refusal, as upstream distinguishes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestErrorKind {
    /// The body is not a request at all: invalid JSON, wrong shape, a lone surrogate.
    Malformed,
    /// Within the shape, but over a size limit.
    TooLarge,
    /// Well-formed and within limits, but a control's value is not acceptable.
    Invalid,
    /// An exception upstream never catches on the way to inference (Starlette's plain-text
    /// `Internal Server Error`).
    Uncaught,
}

/// A refused request body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Step 6: `json.loads` failed (syntax, encoding, >4300-digit int, nesting).
    #[error("request body must be valid JSON")]
    InvalidJson,
    /// Step 7: not an object, or no `questions` key (`batch`: no `states` either).
    #[error("{}", if *.batch { "request body must be an object with 'states' and 'questions' fields" } else { "request body must be an object with a 'questions' field" })]
    NotARequest { batch: bool },
    /// §7: `states` empty or not a list.
    #[error("'states' must be a non-empty list")]
    StatesNotAList,
    /// §7: more states than the cap.
    #[error("too many states in batch ({count} > {cap})")]
    TooManyStates { count: usize, cap: usize },
    /// Step 8a.
    #[error("'state' is required")]
    StateRequired,
    /// Step 8b.
    #[error("'questions' must be an object")]
    QuestionsNotAnObject,
    /// Step 8c.
    #[error("too many questions ({count} > {cap})")]
    TooManyQuestions { count: usize, cap: usize },
    /// Step 8d.
    #[error("too many choice options for {} ({count} > {cap})", repr_str(qid))]
    TooManyChoiceOptions {
        qid: String,
        count: usize,
        cap: usize,
    },
    /// Step 8e.
    #[error("too many score levels for {} ({count} > {cap})", repr_str(qid))]
    TooManyScoreLevels {
        qid: String,
        count: usize,
        cap: usize,
    },
    /// Step 8f: a 422 raised among the size checks.
    #[error(
        "score question {} has a null level at index {index}; give every level a description",
        repr_str(qid)
    )]
    NullScoreLevel { qid: String, index: usize },
    /// Step 8g.
    #[error("too many answer options across questions ({count} > {cap})")]
    TooManyOptions { count: usize, cap: usize },
    /// Step 8h; `chars` as measured by [`super::state_length`].
    #[error("state too large ({chars} > {cap} chars)")]
    StateTooLarge { chars: usize, cap: usize },
    /// Step 9: the hook controls given, sorted.
    #[error("{} run inside the server process and cannot be sent to this endpoint; install them where laya-serve runs, or drop them", .names.join(", "))]
    HooksRefused { names: Vec<&'static str> },
    /// §7: `diagnostics` on the batch route.
    #[error("diagnostics is filled in place for an in-process caller and cannot be returned over HTTP; read the per-group report from the CLI or a local Router")]
    Diagnostics,
    /// Step 10.
    #[error(
        "request body contains an unpaired surrogate escape; those cannot be encoded as UTF-8"
    )]
    LoneSurrogate,
    /// Step 11: a `model` naming a path or a Hub id this server does not serve; the text is
    /// the router's (it lists the registry).
    #[error("{0}")]
    UnknownModel(String),
    /// Step 12: `max_len` / `head_max_len` (and sys1rust's `window`, `stride`, `max_windows`).
    #[error("{key} {problem}")]
    Budget {
        key: &'static str,
        problem: BudgetProblem,
    },
    /// Step 13: `lang` / `lang_guess` not a string.
    #[error("{key} must be a language code string such as \"de\", or null")]
    Lang { key: &'static str },
    /// Step 14: an empty `min_confidence` map.
    #[error("a min_confidence map must be a non-empty dict of bucket -> float, got {{}}")]
    EmptyConfidenceMap,
    /// Step 14: a map key that is no bucket.
    #[error(
        "min_confidence map keys must be a bucket like 'choice:3-5' or 'default', got {}",
        repr_str(key)
    )]
    ConfidenceBucket { key: String },
    /// Step 14: a threshold that is not a number in [0, 1]; `repr` is Python's of the value.
    #[error("min_confidence must be a float in [0.0, 1.0], got {repr}")]
    ConfidenceThreshold { repr: String },
    /// Step 14: an int past the float range (`math.isfinite` raises `OverflowError`).
    #[error("Internal Server Error")]
    ConfidenceOverflow,
    /// §7: `batch_size` not an integer.
    #[error("batch_size must be an integer")]
    BatchSizeType,
    /// §7: `batch_size` below 1.
    #[error("batch_size must be a positive integer, got {value}")]
    BatchSizeValue { value: Int },
    /// §7: `sort_by_length` not a boolean.
    #[error("sort_by_length must be a boolean")]
    SortByLength,
    /// Strict Jev mode only: Jev asks at least one question per request.
    #[error("questions must hold at least one question")]
    NoQuestions,
    /// sys1rust's `overflow`: neither `"truncate"` nor `"windows"`; `repr` is Python's.
    #[error("overflow must be 'truncate' or 'windows', got {repr}")]
    Overflow { repr: String },
}

/// Where a refused value sits in the request body, below the body itself, and the kind of
/// refusal (see [`RequestError::field`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub path: Vec<String>,
    pub kind: &'static str,
}

/// What is wrong with a token budget value (§4.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetProblem {
    NotAnInteger,
    NotPositive,
    /// The value as sent, and the cap.
    OverCap {
        value: Int,
        cap: usize,
    },
}

impl fmt::Display for BudgetProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetProblem::NotAnInteger => f.write_str("must be an integer"),
            BudgetProblem::NotPositive => f.write_str("must be a positive integer"),
            BudgetProblem::OverCap { value, cap } => {
                write!(f, "exceeds server limit ({value} > {cap})")
            }
        }
    }
}

impl RequestError {
    /// The class of refusal (the server's status follows from it).
    pub fn kind(&self) -> RequestErrorKind {
        use RequestError::*;
        match self {
            InvalidJson
            | NotARequest { .. }
            | StatesNotAList
            | StateRequired
            | QuestionsNotAnObject
            | LoneSurrogate => RequestErrorKind::Malformed,
            TooManyStates { .. }
            | TooManyQuestions { .. }
            | TooManyChoiceOptions { .. }
            | TooManyScoreLevels { .. }
            | TooManyOptions { .. }
            | StateTooLarge { .. } => RequestErrorKind::TooLarge,
            ConfidenceOverflow => RequestErrorKind::Uncaught,
            NullScoreLevel { .. }
            | HooksRefused { .. }
            | Diagnostics
            | UnknownModel(_)
            | Budget { .. }
            | Lang { .. }
            | EmptyConfidenceMap
            | ConfidenceBucket { .. }
            | ConfidenceThreshold { .. }
            | BatchSizeType
            | BatchSizeValue { .. }
            | SortByLength
            | NoQuestions
            | Overflow { .. } => RequestErrorKind::Invalid,
        }
    }

    /// Where in the body the refused value is and what kind of refusal it is, in the
    /// vocabulary of Jev's validation errors (`{"loc": ["body", ...], "type": ...}`).
    pub fn field(&self) -> Field {
        use RequestError::*;
        let at = |path: &[&str], kind: &'static str| Field {
            path: path.iter().map(|p| (*p).to_owned()).collect(),
            kind,
        };
        match self {
            InvalidJson => at(&[], "json_invalid"),
            NotARequest { batch: false } => at(&["questions"], "missing"),
            NotARequest { batch: true } => at(&["states"], "missing"),
            StatesNotAList => at(&["states"], "list_type"),
            TooManyStates { .. } => at(&["states"], "too_long"),
            StateRequired => at(&["state"], "missing"),
            QuestionsNotAnObject => at(&["questions"], "dict_type"),
            TooManyQuestions { .. } | TooManyOptions { .. } => at(&["questions"], "too_long"),
            NoQuestions => at(&["questions"], "too_short"),
            TooManyChoiceOptions { qid, .. } | TooManyScoreLevels { qid, .. } => Field {
                path: vec!["questions".into(), qid.clone(), "criteria".into()],
                kind: "too_long",
            },
            NullScoreLevel { qid, index } => Field {
                path: vec![
                    "questions".into(),
                    qid.clone(),
                    "criteria".into(),
                    index.to_string(),
                ],
                kind: "string_type",
            },
            StateTooLarge { .. } => at(&["state"], "too_long"),
            HooksRefused { names } => Field {
                path: names
                    .first()
                    .map(|n| vec![(*n).to_owned()])
                    .unwrap_or_default(),
                kind: "extra_forbidden",
            },
            Diagnostics => at(&["diagnostics"], "extra_forbidden"),
            LoneSurrogate => at(&[], "string_unicode"),
            UnknownModel(_) => at(&["model"], "value_error"),
            Budget { key, .. } => at(&[key], "value_error"),
            Lang { key } => at(&[key], "string_type"),
            EmptyConfidenceMap
            | ConfidenceBucket { .. }
            | ConfidenceThreshold { .. }
            | ConfidenceOverflow => at(&["min_confidence"], "value_error"),
            BatchSizeType | BatchSizeValue { .. } => at(&["batch_size"], "value_error"),
            SortByLength => at(&["sort_by_length"], "bool_type"),
            Overflow { .. } => at(&["overflow"], "value_error"),
        }
    }

    pub(crate) fn threshold(v: &Value) -> RequestError {
        RequestError::ConfidenceThreshold { repr: py_repr(v) }
    }
}
