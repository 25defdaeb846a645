//! `json.dumps(value, ensure_ascii=False, ...)` of CPython 3.11 (the C encoder), and the one
//! iterative walk over nested values that both JSON text and Python `repr` are built on.

use super::float::write_float;
use super::value::{Iter, Value};

/// The two `json.dumps` configurations upstream uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `separators=(",", ":")`, `allow_nan=False`: HTTP response bodies (spec api.md §3.2).
    Compact,
    /// Default separators `(", ", ": ")`, `allow_nan=True`: text fed to the model and the
    /// state size measure (spec model.md §2.2-2.3, api.md §5.4). Non-finite floats are written
    /// `NaN`, `Infinity`, `-Infinity`.
    Spaced,
}

impl Style {
    fn allow_nan(self) -> bool {
        matches!(self, Style::Spaced)
    }
}

/// `json.dumps(..., allow_nan=False)` met a non-finite float.
///
/// `Display` is CPython 3.11's message, which the Docker image of upstream 0.4.15 sends;
/// [`NonFiniteError::message_py312`] is the message of CPython 3.12 and later.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("Out of range float values are not JSON compliant")]
pub struct NonFiniteError {
    pub value: f64,
}

impl NonFiniteError {
    /// CPython >= 3.12: `Out of range float values are not JSON compliant: nan` (`: inf`,
    /// `: -inf`; the float's repr).
    pub fn message_py312(&self) -> String {
        format!("{self}: {}", super::float::float_repr(self.value))
    }
}

/// `json.dumps(value, ensure_ascii=False, ...)` in the given style.
pub fn dumps(value: &Value, style: Style) -> Result<String, NonFiniteError> {
    let mut out = String::new();
    dumps_into(&mut out, value, style)?;
    Ok(out)
}

/// `json.dumps(value, ensure_ascii=False)` with default separators, the text the model reads
/// for a structured state, instruction or criterion. Never fails: NaN and infinities are
/// allowed in this style.
pub fn dumps_spaced(value: &Value) -> String {
    let mut out = String::new();
    // `Style::Spaced` allows non-finite floats, so the walk cannot fail.
    let _ = dumps_into(&mut out, value, Style::Spaced);
    out
}

/// [`dumps`], appending to `out`. On error `out` holds a partial text.
pub fn dumps_into(out: &mut String, value: &Value, style: Style) -> Result<(), NonFiniteError> {
    walk(&Json(style), out, value)
}

/// Appends `s` as a JSON string literal the way `json.dumps(s, ensure_ascii=False)` writes it:
/// `"` and `\` escaped, `\n` `\r` `\t` `\b` `\f` in short form, other U+0000..U+001F as
/// `\u00XX` (lower-case hex), everything else raw (U+007F, U+2028 and astral characters
/// included).
pub fn write_str(out: &mut String, s: &str) {
    out.push('"');
    let mut run_start = 0;
    for (i, b) in s.bytes().enumerate() {
        let short = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        // Escaped bytes are ASCII, so `i` is a char boundary.
        out.push_str(&s[run_start..i]);
        if short.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        } else {
            out.push_str(short);
        }
        run_start = i + 1;
    }
    out.push_str(&s[run_start..]);
    out.push('"');
}

/// Appends a float as `json.dumps` writes it: Python's `repr` when finite; when not,
/// `NaN` / `Infinity` / `-Infinity` if `allow_nan`, else an error.
pub fn write_json_float(out: &mut String, x: f64, allow_nan: bool) -> Result<(), NonFiniteError> {
    if x.is_finite() {
        write_float(out, x);
        return Ok(());
    }
    if !allow_nan {
        return Err(NonFiniteError { value: x });
    }
    out.push_str(if x.is_nan() {
        "NaN"
    } else if x > 0.0 {
        "Infinity"
    } else {
        "-Infinity"
    });
    Ok(())
}

/// How one text format spells scalars, keys and separators; containers are laid out by
/// [`walk`].
pub(super) trait Dialect {
    type Error;
    /// Between list items and between dict entries.
    fn item_sep(&self) -> &'static str;
    /// Between a key and its value.
    fn key_sep(&self) -> &'static str;
    /// Writes a value that is neither an array nor an object.
    fn scalar(&self, out: &mut String, value: &Value) -> Result<(), Self::Error>;
    fn key(&self, out: &mut String, key: &str);
}

/// JSON text in one [`Style`].
struct Json(Style);

impl Dialect for Json {
    type Error = NonFiniteError;

    fn item_sep(&self) -> &'static str {
        match self.0 {
            Style::Compact => ",",
            Style::Spaced => ", ",
        }
    }

    fn key_sep(&self) -> &'static str {
        match self.0 {
            Style::Compact => ":",
            Style::Spaced => ": ",
        }
    }

    fn scalar(&self, out: &mut String, value: &Value) -> Result<(), NonFiniteError> {
        match value {
            Value::Null => out.push_str("null"),
            Value::Bool(true) => out.push_str("true"),
            Value::Bool(false) => out.push_str("false"),
            Value::Int(i) => {
                use std::fmt::Write as _;
                let _ = write!(out, "{i}");
            }
            Value::Float(x) => write_json_float(out, *x, self.0.allow_nan())?,
            Value::Str(s) => write_str(out, s),
            // `walk` never passes containers here.
            Value::Array(_) | Value::Object(_) => {}
        }
        Ok(())
    }

    fn key(&self, out: &mut String, key: &str) {
        write_str(out, key);
    }
}

/// A container whose remaining children are still to be written.
enum Open<'a> {
    Array(std::slice::Iter<'a, Value>),
    Object(Iter<'a>),
}

/// Writes `value` with `[a, b]` / `{k: v}` layout, iteratively (no recursion, so nesting
/// depth is bounded by memory, not by the thread's stack).
pub(super) fn walk<D: Dialect>(
    dialect: &D,
    out: &mut String,
    value: &Value,
) -> Result<(), D::Error> {
    let (item_sep, key_sep) = (dialect.item_sep(), dialect.key_sep());
    let mut stack: Vec<Open<'_>> = Vec::new();
    let mut current = value;
    loop {
        // Write `current`, or open it and descend into its first child.
        match current {
            Value::Array(items) => {
                out.push('[');
                let mut rest = items.iter();
                if let Some(first) = rest.next() {
                    stack.push(Open::Array(rest));
                    current = first;
                    continue;
                }
                out.push(']');
            }
            Value::Object(object) => {
                out.push('{');
                let mut rest = object.iter();
                if let Some((k, v)) = rest.next() {
                    dialect.key(out, k);
                    out.push_str(key_sep);
                    stack.push(Open::Object(rest));
                    current = v;
                    continue;
                }
                out.push('}');
            }
            scalar => dialect.scalar(out, scalar)?,
        }
        // `current` is complete: move to the next sibling, closing finished containers.
        loop {
            match stack.last_mut() {
                None => return Ok(()),
                Some(Open::Array(rest)) => match rest.next() {
                    Some(v) => {
                        out.push_str(item_sep);
                        current = v;
                        break;
                    }
                    None => {
                        out.push(']');
                        stack.pop();
                    }
                },
                Some(Open::Object(rest)) => match rest.next() {
                    Some((k, v)) => {
                        out.push_str(item_sep);
                        dialect.key(out, k);
                        out.push_str(key_sep);
                        current = v;
                        break;
                    }
                    None => {
                        out.push('}');
                        stack.pop();
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loads;

    fn parse(text: &str) -> Value {
        loads(text.as_bytes()).expect("valid JSON").value
    }

    fn json_str(s: &str) -> String {
        let mut out = String::new();
        write_str(&mut out, s);
        out
    }

    #[test]
    fn string_escapes() {
        // json.dumps(s, ensure_ascii=False) in python3.11
        let cases: &[(&str, &str)] = &[
            ("a", r#""a""#),
            ("say \"hi\"", r#""say \"hi\"""#),
            ("back\\slash", r#""back\\slash""#),
            ("tab\tnl\ncr\r\u{8}\u{c}", r#""tab\tnl\ncr\r\b\f""#),
            ("\u{0}\u{7}\u{1b}\u{7f}", "\"\\u0000\\u0007\\u001b\u{7f}\""),
            ("\u{85}\u{a0}\u{ad}/", "\"\u{85}\u{a0}\u{ad}/\""),
            (
                "é😀\u{301}\u{2028}\u{2029}\u{feff}",
                "\"é😀\u{301}\u{2028}\u{2029}\u{feff}\"",
            ),
        ];
        for (s, want) in cases {
            assert_eq!(json_str(s), *want, "{s:?}");
        }
    }

    #[test]
    fn documents() {
        let v = parse(
            r#"{"a": [1, 2.0, -0.0, 1e16, 1e-05, null, true, false, "x\ny"], "b": {"c": NaN, "d": -Infinity}, "e": 123456789012345678901234567890}"#,
        );
        // json.dumps(v, ensure_ascii=False)
        assert_eq!(
            dumps(&v, Style::Spaced).expect("allow_nan"),
            r#"{"a": [1, 2.0, -0.0, 1e+16, 1e-05, null, true, false, "x\ny"], "b": {"c": NaN, "d": -Infinity}, "e": 123456789012345678901234567890}"#
        );
        // json.dumps(v, allow_nan=False) -> ValueError: Out of range float values are not JSON compliant
        let err = dumps(&v, Style::Compact).expect_err("NaN refused");
        assert_eq!(
            err.to_string(),
            "Out of range float values are not JSON compliant"
        );
        assert_eq!(
            err.message_py312(),
            "Out of range float values are not JSON compliant: nan"
        );
        let w = parse(r#"{"a": [1, 2.5, {"k": "v"}], "t": true}"#);
        // json.dumps(w, ensure_ascii=False, allow_nan=False, separators=(',', ':'))
        assert_eq!(
            dumps(&w, Style::Compact).expect("finite"),
            r#"{"a":[1,2.5,{"k":"v"}],"t":true}"#
        );
        // json.dumps([1, [], {}], separators=(',', ':')) and json.dumps([[], {}])
        assert_eq!(
            dumps(&parse("[1,[],{}]"), Style::Compact).expect("finite"),
            "[1,[],{}]"
        );
        assert_eq!(
            dumps(&parse("[[],{}]"), Style::Spaced).expect("finite"),
            "[[], {}]"
        );
        let mut out = String::new();
        assert!(write_json_float(&mut out, f64::NEG_INFINITY, false).is_err());
        write_json_float(&mut out, f64::NEG_INFINITY, true).expect("allowed");
        write_json_float(&mut out, 0.1, false).expect("finite");
        assert_eq!(out, "-Infinity0.1");
    }

    #[test]
    fn deep_values_render_without_recursion() {
        let depth = crate::DEFAULT_MAX_DEPTH;
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let v = parse(&text);
        assert_eq!(dumps(&v, Style::Compact).expect("finite"), text);
        assert_eq!(crate::py_repr(&v), text);
        assert!(crate::py_equal(&v, &v));
    }
}
