//! CPython 3.11's `json` and `repr`/`str`, as far as upstream laya-serve 0.4.15 depends on
//! them: the request body is `json.loads(bytes)`, responses are `json.dumps(...,
//! ensure_ascii=False, allow_nan=False, separators=(",", ":"))`, model input text is
//! `json.dumps(..., ensure_ascii=False)`, error details quote values with `%r`, option texts
//! use `str()`, and numbers are `round(x, 4)`.
//!
//! * [`loads`] gives a [`Value`] tree with Python's types (ints of any size, insertion-ordered
//!   dicts with Python's duplicate-key rule) and accepts exactly what `json.loads` accepts,
//!   including `NaN`/`Infinity`, BOMs, UTF-16/32 and lone surrogates (flagged in [`Parsed`]),
//!   with an explicit nesting limit instead of `RecursionError`.
//! * [`dumps`] / [`write_str`] / [`write_json_float`] write JSON text byte for byte as
//!   CPython's encoder does; [`float_repr`] is `repr(float)`.
//! * [`py_repr`], [`py_str`], [`repr_str`] are Python's `repr()` / `str()`.
//! * [`round4`] / [`round_ndigits`] are Python's `round(x, n)`; [`py_equal`] is `==`.
//!
//! Known difference: Rust strings cannot hold surrogate code points, so a lone surrogate is
//! U+FFFD in a [`Value`] (same code point count, so `len()` and the size limits agree). Its
//! `repr` therefore shows `'\ufffd'`'s glyph where Python shows `'\ud800'`; upstream refuses
//! such bodies anyway (api.md §5.1 step 10), after the steps that might quote them.
//!
//! All walks over values are iterative, so the parser's depth limit, not the thread's stack,
//! bounds nesting.

mod decode;
mod float;
mod parse;
mod printable_table;
mod render;
mod repr;
mod value;

pub use float::{float_repr, round4, round_ndigits, write_float, RoundOverflowError};
pub use parse::{
    loads, loads_with_max_depth, JsonError, Parsed, DEFAULT_MAX_DEPTH, MAX_INT_DIGITS,
};
pub use render::{
    dumps, dumps_into, dumps_spaced, write_json_float, write_str, NonFiniteError, Style,
};
pub use repr::{is_printable, py_repr, py_str, repr_str, write_py_repr, write_repr_str};
pub use value::{py_equal, py_same_or_equal, Int, Iter, Object, Value};

#[cfg(test)]
mod python_vectors;
