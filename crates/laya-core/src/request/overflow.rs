//! sys1rust's opt-in reading of a state longer than one row: `"overflow": "windows"` answers
//! with upstream's `predict_long` (overlapping token windows) instead of cutting the state.
//! Upstream's server ignores these fields (unknown fields are ignored, spec §13 case 87), so a
//! client may send them to both; without `overflow` nothing here is read.

use pyjson::{py_repr, Object, Value};

use super::{check_budget, RequestError};

/// How a state that does not fit one row is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Upstream's one pass: the middle of the state is dropped (`usage.truncated`).
    #[default]
    Truncate,
    /// Upstream's `predict_long` over overlapping windows.
    Windows(Windows),
}

/// The window plan a request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    /// Tokens per window (`None`: what the row budget leaves the state).
    pub window: Option<usize>,
    /// Tokens between window starts (`None`: half a window).
    pub stride: Option<usize>,
    /// The most windows one state may need; never above the server's cap.
    pub max_windows: usize,
    /// The server's cap, for the refusal's text.
    pub cap: usize,
}

/// `overflow`, then (only for `"windows"`) `window`, `stride` and `max_windows`, each absent or
/// `null` for its default. `window` and `stride` are bounded like `max_len`, `max_windows` by
/// the server's cap.
pub(super) fn check_overflow(
    obj: &Object,
    max_token_budget: usize,
    max_windows: usize,
) -> Result<Overflow, RequestError> {
    match obj.get("overflow") {
        None | Some(Value::Null) => return Ok(Overflow::Truncate),
        Some(Value::Str(s)) if s == "truncate" => return Ok(Overflow::Truncate),
        Some(Value::Str(s)) if s == "windows" => {}
        Some(other) => {
            return Err(RequestError::Overflow {
                repr: py_repr(other),
            })
        }
    }
    let window = check_budget(obj, "window", max_token_budget)?;
    let stride = check_budget(obj, "stride", max_token_budget)?;
    let asked = check_budget(obj, "max_windows", max_windows)?;
    Ok(Overflow::Windows(Windows {
        window,
        stride,
        max_windows: asked.unwrap_or(max_windows),
        cap: max_windows,
    }))
}
