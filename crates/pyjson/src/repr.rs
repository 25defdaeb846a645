//! Python `repr()` and `str()` of parsed JSON values, as upstream puts them in `detail`
//! messages (`%r`) and option texts (`str(label)`), spec api.md §6.8 and model.md §2.2.

use super::float::write_float;
use super::printable_table::NON_PRINTABLE;
use super::render::{walk, Dialect};
use super::value::Value;

/// Python `str(v)`: a string is itself; `True`, `None`, `1.5`, `nan`, `inf`; lists and dicts
/// are their `repr`.
pub fn py_str(v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        other => py_repr(other),
    }
}

/// Python `repr(v)`: `None`, `True`, `1.5`, `'text'`, `[1, 'a']`, `{'k': None}`.
pub fn py_repr(v: &Value) -> String {
    let mut out = String::new();
    write_py_repr(&mut out, v);
    out
}

/// [`py_repr`], appending to `out`.
pub fn write_py_repr(out: &mut String, v: &Value) {
    let Ok(()) = walk(&Repr, out, v);
}

/// Python `repr(s)` of a `str` (CPython's `unicode_repr`).
pub fn repr_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_repr_str(&mut out, s);
    out
}

/// Appends Python `repr(s)`: single quotes unless `s` contains `'` and no `"`; backslash, the
/// quote, `\t`, `\n`, `\r` escaped; other characters that are not printable (see
/// [`is_printable`]) as `\xNN`, `\uNNNN` or `\UNNNNNNNN` (lower-case hex, shortest form that
/// fits); everything else raw.
pub fn write_repr_str(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if is_printable(c) => out.push(c),
            c => {
                use std::fmt::Write as _;
                let cp = u32::from(c);
                let _ = if cp <= 0xff {
                    write!(out, "\\x{cp:02x}")
                } else if cp <= 0xffff {
                    write!(out, "\\u{cp:04x}")
                } else {
                    write!(out, "\\U{cp:08x}")
                };
            }
        }
    }
    out.push(quote);
}

/// Python's `str.isprintable()` for one character (CPython 3.11, Unicode 14.0.0): false for
/// general categories Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs other than U+0020 SPACE.
pub fn is_printable(c: char) -> bool {
    let cp = u32::from(c);
    if cp < 0x7f {
        return cp >= 0x20;
    }
    // Binary search over sorted, disjoint inclusive ranges: is `cp` inside one?
    let after = NON_PRINTABLE.partition_point(|&(start, _)| start <= cp);
    match after.checked_sub(1).map(|i| NON_PRINTABLE[i]) {
        Some((_, end)) => cp > end,
        None => true,
    }
}

/// Python `repr` of values: the dialect [`walk`] lays out as lists and dicts.
struct Repr;

impl Dialect for Repr {
    type Error = std::convert::Infallible;

    fn item_sep(&self) -> &'static str {
        ", "
    }

    fn key_sep(&self) -> &'static str {
        ": "
    }

    fn scalar(&self, out: &mut String, value: &Value) -> Result<(), Self::Error> {
        match value {
            Value::Null => out.push_str("None"),
            Value::Bool(true) => out.push_str("True"),
            Value::Bool(false) => out.push_str("False"),
            Value::Int(i) => {
                use std::fmt::Write as _;
                let _ = write!(out, "{i}");
            }
            Value::Float(x) => write_float(out, *x),
            Value::Str(s) => write_repr_str(out, s),
            // `walk` never passes containers here.
            Value::Array(_) | Value::Object(_) => {}
        }
        Ok(())
    }

    fn key(&self, out: &mut String, key: &str) {
        write_repr_str(out, key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loads;

    #[test]
    fn string_repr() {
        // repr(s) in python3.11
        let cases: &[(&str, &str)] = &[
            ("a", "'a'"),
            ("it's", "\"it's\""),
            ("say \"hi\"", "'say \"hi\"'"),
            ("both ' and \"", "'both \\' and \"'"),
            ("back\\slash", "'back\\\\slash'"),
            ("tab\tnl\ncr\r", "'tab\\tnl\\ncr\\r'"),
            ("\u{0}\u{7}\u{1b}\u{7f}", "'\\x00\\x07\\x1b\\x7f'"),
            ("\u{85}\u{a0}\u{ad}", "'\\x85\\xa0\\xad'"),
            ("é😀\u{301}", "'é😀\u{301}'"),
            (
                "\u{2028}\u{2029}\u{200b}\u{feff}",
                "'\\u2028\\u2029\\u200b\\ufeff'",
            ),
            (
                "\u{e0001}\u{10ffff}\u{e000}",
                "'\\U000e0001\\U0010ffff\\ue000'",
            ),
            ("\u{3000} \u{a0}", "'\\u3000 \\xa0'"),
            ("\u{378}", "'\\u0378'"),
            ("", "''"),
        ];
        for (s, want) in cases {
            assert_eq!(repr_str(s), *want, "{s:?}");
        }
    }

    #[test]
    fn printable_table_edges() {
        // [chr(c).isprintable() for c in (...)] in python3.11 (Unicode 14.0)
        let cases: &[(u32, bool)] = &[
            (0x20, true),
            (0x7e, true),
            (0x7f, false),
            (0xa0, false),
            (0xa1, true),
            (0xad, false),
            (0x377, true),
            (0x378, false),
            (0x1680, false),
            (0x2028, false),
            (0x3000, false),
            (0xe000, false),
            (0xfffd, true),
            (0xffff, false),
            (0x1f600, true),
            (0x2b739, false),
            (0x2b738, true),
            (0x3134a, true),
            (0x3134b, false),
            (0xe0100, true),
            (0x10ffff, false),
            // U+1F6DD was assigned in Unicode 14.0, U+1FAE8 only in 15.0.
            (0x1f6dd, true),
            (0x1fae8, false),
        ];
        for &(cp, want) in cases {
            let c = char::from_u32(cp).expect("scalar value");
            assert_eq!(is_printable(c), want, "U+{cp:04X}");
        }
    }

    #[test]
    fn value_repr_and_str() {
        let v = loads(br#"{"a": [1, 2.0, -0.0, 1e16, 1e-05, null, true, false, "x\ny"], "b": {"c": NaN, "d": -Infinity}, "e": 123456789012345678901234567890}"#)
            .expect("valid")
            .value;
        // repr(v) and str(v)
        let want = "{'a': [1, 2.0, -0.0, 1e+16, 1e-05, None, True, False, 'x\\ny'], 'b': {'c': nan, 'd': -inf}, 'e': 123456789012345678901234567890}";
        assert_eq!(py_repr(&v), want);
        assert_eq!(py_str(&v), want);
        // [str(x) for x in [True, None, 1.5, nan, inf, -inf, 10**20, "s", [1, 'a'], {'k': None}]]
        let items = loads(br#"[true, null, 1.5, NaN, Infinity, -Infinity, 100000000000000000000, "s", [1, "a"], {"k": null}]"#)
            .expect("valid")
            .value;
        let strs: Vec<String> = items
            .as_array()
            .expect("array")
            .iter()
            .map(py_str)
            .collect();
        assert_eq!(
            strs,
            [
                "True",
                "None",
                "1.5",
                "nan",
                "inf",
                "-inf",
                "100000000000000000000",
                "s",
                "[1, 'a']",
                "{'k': None}"
            ]
        );
    }
}
