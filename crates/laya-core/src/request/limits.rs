//! The request limits of spec api.md §5.2 and the rules upstream reads its configurable ones
//! with (§12.1). The values come from the caller: this crate reads no environment.

use super::{
    DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_TOKEN_BUDGET, DEFAULT_MAX_WINDOWS, MAX_CHOICE_OPTIONS,
    MAX_TOURNAMENT_CHOICE_OPTIONS,
};

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
    /// sys1rust's cap on the windows one state may need with `overflow: "windows"`.
    pub max_windows: usize,
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
            max_windows: DEFAULT_MAX_WINDOWS,
        }
    }
}

impl Limits {
    /// The limits upstream derives from its environment variables, read from `get` (the
    /// caller's lookup: this crate reads no environment): `LAYA_MAX_TOKEN_BUDGET`,
    /// `LAYA_MAX_BATCH_TOKENS` and `LAYA_TOURNAMENT_GROUP`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Limits {
        let positive_or =
            |name: &str, default: usize| positive_int_or(get(name).as_deref(), default);
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

/// Upstream's rule for its positive integer variables (`LAYA_MAX_TOKEN_BUDGET`,
/// `LAYA_MAX_BATCH_TOKENS`, `LAYA_MAX_CONCURRENT`): unset or empty gives `default`, else
/// `int(str(raw).strip())`, and anything unparsable or `<= 0` gives `default` too.
pub fn positive_int_or(raw: Option<&str>, default: usize) -> usize {
    match raw.filter(|r| !r.is_empty()).and_then(py_int) {
        Some(n) if n > 0 => usize::try_from(n).unwrap_or(usize::MAX),
        _ => default,
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

/// The port an unset or blank `LAYA_PORT` binds (upstream's `DEFAULT_PORT`).
pub const DEFAULT_PORT: u16 = 8000;

/// Upstream `_resolve_port` on the raw `LAYA_PORT` (§12.1): unset or blank is
/// [`DEFAULT_PORT`]; anything else must be an integer in 1..=65535, or it is upstream's
/// start-up refusal, which names the value as given.
pub fn laya_port(raw: Option<&str>) -> Result<u16, String> {
    let Some(raw) = raw.filter(|r| !crate::question::py_strip(r).is_empty()) else {
        return Ok(DEFAULT_PORT);
    };
    match py_int(raw) {
        Some(port) if (1..=i128::from(u16::MAX)).contains(&port) => Ok(port as u16),
        _ => Err(format!(
            "invalid LAYA_PORT {}: must be an integer 1-65535",
            pyjson::repr_str(raw)
        )),
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
