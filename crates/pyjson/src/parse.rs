//! `json.loads(bytes)` of CPython 3.11 (`Lib/json/decoder.py` and the C scanner in
//! `Modules/_json.c`, `strict=True`), as an iterative parser.
//!
//! What it accepts beyond RFC 8259, like Python: `NaN`, `Infinity`, `-Infinity`; UTF-8 with a
//! BOM, UTF-16 and UTF-32 bodies; duplicate keys (last value wins, first position kept);
//! unpaired surrogates (from `\uD800`-style escapes, or raw through `surrogatepass`).
//! What it refuses, like Python: anything else RFC 8259 refuses (control characters inside
//! strings, trailing commas, single quotes, comments, leading zeros, `+1`, `.5`, `1.`,
//! trailing data), whitespace other than space, tab, LF and CR, and integer literals with
//! more than 4300 digits (`sys.int_info.default_max_str_digits`).
//!
//! Nesting: Python raises `RecursionError` once nesting reaches the interpreter's recursion
//! limit (994 levels for a top-level call in a bare python3.11, fewer inside a server's call
//! stack). This parser keeps its own stack on the heap and refuses documents nested deeper
//! than an explicit limit ([`DEFAULT_MAX_DEPTH`] unless given), so no input can overflow the
//! thread's stack.

use super::decode::{self, is_surrogate_form};
use super::value::{Int, Object, Value};

/// Containers (arrays and objects, empty ones included) that may enclose one another before
/// [`loads`] refuses the document with [`JsonError::TooDeep`].
pub const DEFAULT_MAX_DEPTH: usize = 10_000;

/// CPython's `sys.int_info.default_max_str_digits`: `int()` of a longer digit string raises
/// `ValueError`, which `json.loads` lets through.
pub const MAX_INT_DIGITS: usize = 4300;

/// A parsed document.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub value: Value,
    /// Some string (a key or a value) held a surrogate code point that Python would keep as
    /// a lone surrogate (an unpaired `\uD800`-style escape, or a raw one let through by
    /// `surrogatepass`). Each such code point is U+FFFD in [`Parsed::value`], so code point
    /// counts match Python's. Upstream refuses these bodies later (spec api.md §5.1 step 10).
    pub has_lone_surrogate: bool,
}

/// Why `json.loads` would raise. Upstream answers every one of them with the same 400 text,
/// so the variants only serve logs and tests. Positions are byte offsets into the decoded
/// text (for UTF-8 bodies without a BOM, into the body itself).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// `UnicodeDecodeError` from `bytes.decode(detect_encoding(b), 'surrogatepass')`.
    #[error("body is not valid {encoding}")]
    Decode { encoding: &'static str },
    /// `JSONDecodeError`; `message` is Python's message.
    #[error("{message} at byte {pos}")]
    Syntax { message: &'static str, pos: usize },
    /// `ValueError: Exceeds the limit (4300 digits) for integer string conversion`.
    #[error("integer literal at byte {pos} has more than 4300 digits")]
    IntTooLong { pos: usize },
    /// Python's `RecursionError`, here an explicit limit.
    #[error("nesting deeper than {limit} levels at byte {pos}")]
    TooDeep { limit: usize, pos: usize },
}

/// `json.loads(bytes)` with [`DEFAULT_MAX_DEPTH`].
pub fn loads(bytes: &[u8]) -> Result<Parsed, JsonError> {
    loads_with_max_depth(bytes, DEFAULT_MAX_DEPTH)
}

/// `json.loads(bytes)`, refusing nesting deeper than `max_depth` containers.
pub fn loads_with_max_depth(bytes: &[u8], max_depth: usize) -> Result<Parsed, JsonError> {
    let text = decode::decode(bytes).map_err(|e| JsonError::Decode {
        encoding: e.encoding.name(),
    })?;
    let mut parser = Parser {
        text: &text,
        pos: 0,
        lone_surrogate: false,
        max_depth,
    };
    let value = parser.document()?;
    Ok(Parsed {
        value,
        has_lone_surrogate: parser.lone_surrogate,
    })
}

/// A container being filled.
enum Frame {
    Array(Vec<Value>),
    /// The object so far and the key whose value is being parsed.
    Object(Object, String),
}

/// What to do after a value has been attached to the innermost open container.
enum Next {
    /// Parse another value (an array item, or the value of a freshly read key).
    Value,
    /// The innermost container is complete.
    Close,
}

struct Parser<'a> {
    /// Generalized UTF-8 (see `decode`).
    text: &'a [u8],
    pos: usize,
    lone_surrogate: bool,
    max_depth: usize,
}

impl Parser<'_> {
    fn syntax(&self, message: &'static str) -> JsonError {
        JsonError::Syntax {
            message,
            pos: self.pos,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    /// Python's `WHITESPACE = r'[ \t\n\r]*'`.
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// `JSONDecoder.decode`: whitespace, one value, whitespace, end.
    fn document(&mut self) -> Result<Value, JsonError> {
        self.skip_ws();
        let value = self.value()?;
        self.skip_ws();
        if self.pos != self.text.len() {
            return Err(self.syntax("Extra data"));
        }
        Ok(value)
    }

    /// One value, containers included, with an explicit stack of open containers.
    fn value(&mut self) -> Result<Value, JsonError> {
        let mut stack: Vec<Frame> = Vec::new();
        'value: loop {
            // Read the start of a value; containers with content are pushed and we go on to
            // read their first value.
            let mut value = match self.peek() {
                Some(b'[') => {
                    self.enter(stack.len())?;
                    self.pos += 1;
                    self.skip_ws();
                    if self.peek() == Some(b']') {
                        self.pos += 1;
                        Value::Array(Vec::new())
                    } else {
                        stack.push(Frame::Array(Vec::new()));
                        continue 'value;
                    }
                }
                Some(b'{') => {
                    self.enter(stack.len())?;
                    self.pos += 1;
                    self.skip_ws();
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                        Value::Object(Object::new())
                    } else {
                        let key = self.key()?;
                        stack.push(Frame::Object(Object::new(), key));
                        continue 'value;
                    }
                }
                _ => self.scalar()?,
            };
            // Attach the finished value to its container; close containers as they end.
            loop {
                let next = match stack.last_mut() {
                    None => return Ok(value),
                    Some(Frame::Array(items)) => {
                        items.push(value);
                        self.skip_ws();
                        match self.peek() {
                            Some(b',') => {
                                self.pos += 1;
                                self.skip_ws();
                                Next::Value
                            }
                            Some(b']') => {
                                self.pos += 1;
                                Next::Close
                            }
                            _ => return Err(self.syntax("Expecting ',' delimiter")),
                        }
                    }
                    Some(Frame::Object(object, key)) => {
                        object.insert(std::mem::take(key), value);
                        self.skip_ws();
                        match self.peek() {
                            Some(b',') => {
                                self.pos += 1;
                                self.skip_ws();
                                *key = self.key()?;
                                Next::Value
                            }
                            Some(b'}') => {
                                self.pos += 1;
                                Next::Close
                            }
                            _ => return Err(self.syntax("Expecting ',' delimiter")),
                        }
                    }
                };
                match next {
                    Next::Value => continue 'value,
                    Next::Close => {
                        value = match stack.pop() {
                            Some(Frame::Array(items)) => Value::Array(items),
                            Some(Frame::Object(object, _)) => Value::Object(object),
                            // `last_mut` just returned a frame.
                            None => return Err(self.syntax("Expecting value")),
                        };
                    }
                }
            }
        }
    }

    /// Opening one more container inside `open` open ones; Python enters a recursion level
    /// for every `[` and `{`, empty containers included.
    fn enter(&self, open: usize) -> Result<(), JsonError> {
        if open >= self.max_depth {
            return Err(JsonError::TooDeep {
                limit: self.max_depth,
                pos: self.pos,
            });
        }
        Ok(())
    }

    /// An object key and its colon, leaving `pos` at the value (whitespace skipped).
    fn key(&mut self) -> Result<String, JsonError> {
        if self.peek() != Some(b'"') {
            return Err(self.syntax("Expecting property name enclosed in double quotes"));
        }
        let key = self.string()?;
        self.skip_ws();
        if self.peek() != Some(b':') {
            return Err(self.syntax("Expecting ':' delimiter"));
        }
        self.pos += 1;
        self.skip_ws();
        Ok(key)
    }

    fn literal(&mut self, word: &[u8], value: Value) -> Result<Value, JsonError> {
        if self.text[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(self.syntax("Expecting value"))
        }
    }

    /// Anything but a container (`scan_once` in `_json.c`).
    fn scalar(&mut self) -> Result<Value, JsonError> {
        match self.peek() {
            Some(b'"') => self.string().map(Value::Str),
            Some(b'n') => self.literal(b"null", Value::Null),
            Some(b't') => self.literal(b"true", Value::Bool(true)),
            Some(b'f') => self.literal(b"false", Value::Bool(false)),
            Some(b'N') => self.literal(b"NaN", Value::Float(f64::NAN)),
            Some(b'I') => self.literal(b"Infinity", Value::Float(f64::INFINITY)),
            Some(b'-') if self.text.get(self.pos + 1) == Some(&b'I') => {
                self.literal(b"-Infinity", Value::Float(f64::NEG_INFINITY))
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.syntax("Expecting value")),
        }
    }

    fn skip_digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    /// `_match_number_unicode`: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`. A `.` or
    /// exponent without digits is left unread (Python backtracks), so it fails as whatever
    /// follows the number.
    fn number(&mut self) -> Result<Value, JsonError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.skip_digits();
            }
            _ => {
                self.pos = start;
                return Err(self.syntax("Expecting value"));
            }
        }
        let mut is_float = false;
        if self.peek() == Some(b'.') && matches!(self.text.get(self.pos + 1), Some(b'0'..=b'9')) {
            self.pos += 1;
            self.skip_digits();
            is_float = true;
        }
        if let Some(b'e' | b'E') = self.peek() {
            let e_start = self.pos;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.skip_digits() > 0 {
                is_float = true;
            } else {
                self.pos = e_start;
            }
        }
        // The slice is ASCII by construction.
        let text =
            std::str::from_utf8(&self.text[start..self.pos]).map_err(|_| JsonError::Syntax {
                message: "Expecting value",
                pos: start,
            })?;
        if is_float {
            // Rust's parser is correctly rounded for any number of digits and saturates to
            // infinity like `float()` (`1e400` -> inf).
            return text
                .parse::<f64>()
                .map(Value::Float)
                .map_err(|_| JsonError::Syntax {
                    message: "Expecting value",
                    pos: start,
                });
        }
        let digits = text.len() - usize::from(text.starts_with('-'));
        if digits > MAX_INT_DIGITS {
            return Err(JsonError::IntTooLong { pos: start });
        }
        Int::from_decimal(text)
            .map(Value::Int)
            .ok_or(JsonError::Syntax {
                message: "Expecting value",
                pos: start,
            })
    }

    /// Four hex digits at `pos` (either case), as `\u` escapes need.
    fn hex4(&self, at: usize) -> Option<u32> {
        let digits = self.text.get(at..at + 4)?;
        let mut v = 0u32;
        for &d in digits {
            v = v * 16 + char::from(d).to_digit(16)?;
        }
        Some(v)
    }

    /// A string starting at the opening quote (`scanstring_unicode`, strict).
    fn string(&mut self) -> Result<String, JsonError> {
        let open = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let run_start = self.pos;
            let run_len = self.text[run_start..]
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .ok_or(JsonError::Syntax {
                    message: "Unterminated string starting at",
                    pos: open,
                })?;
            self.pos += run_len;
            self.push_raw(&mut out, run_start);
            match self.text[self.pos] {
                b'"' => {
                    self.pos += 1;
                    return Ok(out);
                }
                b'\\' => self.escape(&mut out, open)?,
                _ => return Err(self.syntax("Invalid control character at")),
            }
        }
    }

    /// Copies `text[from..pos]` (no quotes, backslashes or controls) into `out`, replacing
    /// surrogate code points with U+FFFD.
    fn push_raw(&mut self, out: &mut String, from: usize) {
        let mut rest = &self.text[from..self.pos];
        while !rest.is_empty() {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(good).unwrap_or_default());
                    // The decoder only lets surrogate forms through; anything else cannot
                    // occur, but skipping one byte keeps this loop finite regardless.
                    let skip = if is_surrogate_form(bad) { 3 } else { 1 };
                    out.push(char::REPLACEMENT_CHARACTER);
                    self.lone_surrogate = true;
                    rest = &bad[skip.min(bad.len())..];
                }
            }
        }
    }

    /// One escape sequence at `pos` (the backslash).
    fn escape(&mut self, out: &mut String, open: usize) -> Result<(), JsonError> {
        let Some(&c) = self.text.get(self.pos + 1) else {
            return Err(JsonError::Syntax {
                message: "Unterminated string starting at",
                pos: open,
            });
        };
        let simple = match c {
            b'"' => Some('"'),
            b'\\' => Some('\\'),
            b'/' => Some('/'),
            b'b' => Some('\u{8}'),
            b'f' => Some('\u{c}'),
            b'n' => Some('\n'),
            b'r' => Some('\r'),
            b't' => Some('\t'),
            b'u' => None,
            _ => return Err(self.syntax("Invalid \\escape")),
        };
        if let Some(ch) = simple {
            out.push(ch);
            self.pos += 2;
            return Ok(());
        }
        let Some(mut cp) = self.hex4(self.pos + 2) else {
            return Err(self.syntax("Invalid \\uXXXX escape"));
        };
        self.pos += 6;
        // A high surrogate followed by another `\u` escape: Python reads that escape too (an
        // invalid one is an error), combines it if it is a low surrogate, and otherwise leaves
        // it to be read on its own.
        if (0xD800..0xDC00).contains(&cp) && self.text[self.pos..].starts_with(b"\\u") {
            let Some(low) = self.hex4(self.pos + 2) else {
                return Err(self.syntax("Invalid \\uXXXX escape"));
            };
            if (0xDC00..0xE000).contains(&low) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                self.pos += 6;
            }
        }
        match char::from_u32(cp) {
            Some(ch) => out.push(ch),
            None => {
                // A lone surrogate: Python keeps it; we record it and keep its place.
                out.push(char::REPLACEMENT_CHARACTER);
                self.lone_surrogate = true;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(b: &[u8]) -> Value {
        match loads(b) {
            Ok(p) => {
                assert!(!p.has_lone_surrogate, "{b:?}");
                p.value
            }
            Err(e) => panic!("{b:?}: {e}"),
        }
    }

    fn int(s: &str) -> Value {
        Value::Int(Int::from_decimal(s).expect("valid"))
    }

    fn arr(items: Vec<Value>) -> Value {
        Value::Array(items)
    }

    #[test]
    fn scalars() {
        // json.loads(b) in python3.11
        assert_eq!(ok(b"null"), Value::Null);
        assert_eq!(ok(b" \t\r\ntrue \n"), Value::Bool(true));
        assert_eq!(ok(b"false"), Value::Bool(false));
        assert_eq!(ok(b"-0"), int("0")); // -> 0 (int)
        assert_eq!(ok(b"-0.0"), Value::Float(-0.0));
        assert!(matches!(ok(b"-0.0"), Value::Float(x) if x.is_sign_negative()));
        assert_eq!(ok(b"1E+2"), Value::Float(100.0));
        assert_eq!(ok(b"0e0"), Value::Float(0.0));
        assert_eq!(ok(b"1e400"), Value::Float(f64::INFINITY));
        assert_eq!(ok(b"-1e400"), Value::Float(f64::NEG_INFINITY));
        assert_eq!(ok(b"1e-400"), Value::Float(0.0));
        assert_eq!(ok(b"Infinity"), Value::Float(f64::INFINITY));
        assert_eq!(ok(b"-Infinity"), Value::Float(f64::NEG_INFINITY));
        assert!(matches!(ok(b"NaN"), Value::Float(x) if x.is_nan()));
        // 2**63 -> 9223372036854775808 (exact int)
        assert_eq!(ok(b"9223372036854775808"), int("9223372036854775808"));
        assert_eq!(
            ok(b"-9223372036854775808").to_owned(),
            Value::from(i64::MIN)
        );
        // float('0.1000000000000000055511151231257827021181583404541015625000001') == 0.1
        assert_eq!(
            ok(b"0.1000000000000000055511151231257827021181583404541015625000001"),
            Value::Float(0.1)
        );
        // 2.2250738585072011e-308 (the old PHP/Java hang value) == 2.225073858507201e-308
        assert_eq!(
            ok(b"2.2250738585072011e-308"),
            Value::Float(2.225073858507201e-308)
        );
    }

    #[test]
    fn int_digit_limit() {
        // json.loads('1'*4300) is an int; json.loads('1'*4301) raises ValueError;
        // json.loads('-' + '1'*4300) is an int; '1'*4301 + '.0' is inf (floats have no limit).
        let d4300 = "1".repeat(4300);
        assert_eq!(ok(d4300.as_bytes()), int(&d4300));
        assert_eq!(
            ok(format!("-{d4300}").as_bytes()),
            int(&format!("-{d4300}"))
        );
        assert!(matches!(
            loads(format!("{d4300}1").as_bytes()),
            Err(JsonError::IntTooLong { .. })
        ));
        assert_eq!(
            ok(format!("{d4300}1.0").as_bytes()),
            Value::Float(f64::INFINITY)
        );
    }

    #[test]
    fn strings_and_escapes() {
        // json.loads(r'"\"\\\/\b\f\n\r\t\u00e9\u00E9\ud83d\ude00\u0000"')
        assert_eq!(
            ok(br#""\"\\\/\b\f\n\r\t\u00e9\u00E9\ud83d\ude00\u0000""#),
            Value::from("\"\\/\u{8}\u{c}\n\r\t\u{e9}\u{e9}\u{1F600}\u{0}")
        );
        // '\x7f' and U+2028 are fine raw
        assert_eq!(
            ok("\"\u{7f}\u{2028}é\"".as_bytes()),
            Value::from("\u{7f}\u{2028}é")
        );
        // json.loads(r'"\ud800\ud800\udc00"') == '\ud800\U00010000'
        let p = loads(br#""\ud800\ud800\udc00""#).expect("parses");
        assert!(p.has_lone_surrogate);
        assert_eq!(p.value, Value::from("\u{FFFD}\u{10000}"));
        // json.loads(r'"\ud800\u0041"') == '\ud800A'
        let p = loads(br#""\ud800\u0041""#).expect("parses");
        assert_eq!(
            (p.value, p.has_lone_surrogate),
            (Value::from("\u{FFFD}A"), true)
        );
        // json.loads(r'"\udc00\ud800"') == '\udc00\ud800' (wrong order: two lone surrogates)
        let p = loads(br#""\udc00\ud800""#).expect("parses");
        assert_eq!(p.value, Value::from("\u{FFFD}\u{FFFD}"));
        // A lone surrogate in a key counts too.
        let p = loads(br#"{"\udfff": 1}"#).expect("parses");
        assert!(p.has_lone_surrogate);
        // b'"\xed\xa0\xbd\xed\xb8\x80"' decodes (surrogatepass) to '\ud83d\ude00': two code points
        let p = loads(b"\"\xed\xa0\xbd\xed\xb8\x80\"").expect("parses");
        assert_eq!(
            (p.value, p.has_lone_surrogate),
            (Value::from("\u{FFFD}\u{FFFD}"), true)
        );
        // UTF-16-LE body with a raw lone surrogate: '"\ud800"'.encode('utf-16-le', 'surrogatepass')
        let p = loads(b"\"\x00\x00\xd8\"\x00").expect("parses");
        assert_eq!(
            (p.value, p.has_lone_surrogate),
            (Value::from("\u{FFFD}"), true)
        );
    }

    #[test]
    fn encodings() {
        let doc = r#"{"state": "x", "q": ["é", 1]}"#;
        let want = ok(doc.as_bytes());
        let utf16le: Vec<u8> = doc.encode_utf16().flat_map(u16::to_le_bytes).collect();
        let utf16be: Vec<u8> = doc.encode_utf16().flat_map(u16::to_be_bytes).collect();
        let utf32le: Vec<u8> = doc
            .chars()
            .flat_map(|c| u32::from(c).to_le_bytes())
            .collect();
        let utf32be: Vec<u8> = doc
            .chars()
            .flat_map(|c| u32::from(c).to_be_bytes())
            .collect();
        for (bom, body) in [
            (&b""[..], &utf16le),
            (b"\xff\xfe", &utf16le),
            (b"", &utf16be),
            (b"\xfe\xff", &utf16be),
            (b"", &utf32le),
            (b"\xff\xfe\x00\x00", &utf32le),
            (b"", &utf32be),
            (b"\x00\x00\xfe\xff", &utf32be),
        ] {
            let mut bytes = bom.to_vec();
            bytes.extend_from_slice(body);
            assert_eq!(ok(&bytes), want);
        }
        assert_eq!(ok(format!("\u{feff}{doc}").as_bytes()), want);
        // json.loads(b'1\x00') == 1 (utf-16-le), json.loads(b'\x001') == 1 (utf-16-be)
        assert_eq!(ok(b"1\x00"), Value::from(1));
        assert_eq!(ok(b"\x001"), Value::from(1));
    }

    #[test]
    fn objects() {
        // json.loads('{"a":1,"b":2,"a":3}') == {'a': 3, 'b': 2}
        let v = ok(br#"{"a":1,"b":2,"a":3}"#);
        let o = v.as_object().expect("object");
        assert_eq!(o.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(o.get("a"), Some(&Value::from(3)));
        assert_eq!(ok(b" { } "), Value::Object(Object::new()));
        assert_eq!(
            ok(b"[ [ ] , { } , [ 1 ] ]"),
            arr(vec![
                arr(vec![]),
                Value::Object(Object::new()),
                arr(vec![Value::from(1)])
            ])
        );
    }

    #[test]
    fn rejects_what_python_rejects() {
        // Each raises in json.loads (JSONDecodeError, UnicodeDecodeError or ValueError).
        let bad: &[&[u8]] = &[
            b"",
            b" ",
            b"nul",
            b"nulll",
            b"[1,]",
            b"{\"a\":1,}",
            b"{'a':1}",
            b"[1.]",
            b"1e",
            b"1.e5",
            b".5",
            b"+1",
            b"01",
            b"-",
            b"-NaN",
            b"nan",
            b"-Infinityx",
            b"[1 2]",
            b"{\"a\" 1}",
            b"{1:2}",
            b"\"a\"\x00",
            b"\"\x1f\"",
            b"\"\n\"",
            b"\x0c1",
            b"1 \x0b",
            b"\xc2\xa01",
            b"\xe2\x80\xa81",
            b"\xef\xbb\xbf\xef\xbb\xbf1",
            b"\"\\x\"",
            b"\"\\u12\"",
            b"\"\\ud800\\uzzzz\"",
            b"\"\\ud800\\",
            b"\"\\ud800\\udc00",
            b"\"abc",
            b"[",
            b"{",
            b"{\"a\"",
            b"{\"a\":",
            b"[1",
            b"\xff",
            b"\"\xff\"",
            b"\xff\xfe1",
            b"// c\n1",
            b"1 /* c */",
            b"[1]]",
            b"\xed\xa0\x80",
            b"truex",
            b"0x10",
            b"1_000",
            b"Infinity1",
            b"[,]",
            b"[,1]",
            b"\"\\U0001F600\"",
        ];
        for b in bad {
            assert!(
                loads(b).is_err(),
                "{:?} should fail",
                String::from_utf8_lossy(b)
            );
        }
    }

    #[test]
    fn depth_limit() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(loads_with_max_depth(nested(50).as_bytes(), 50).is_ok());
        assert!(matches!(
            loads_with_max_depth(nested(51).as_bytes(), 50),
            Err(JsonError::TooDeep { .. })
        ));
        let objects = format!("{}1{}", "{\"a\":".repeat(51), "}".repeat(51));
        assert!(matches!(
            loads_with_max_depth(objects.as_bytes(), 50),
            Err(JsonError::TooDeep { .. })
        ));
        // The default limit holds without touching the stack, however deep the input.
        let parsed = loads(nested(DEFAULT_MAX_DEPTH).as_bytes());
        assert!(parsed.is_ok());
        let unclosed = "[".repeat(1_000_000);
        assert!(matches!(
            loads(unclosed.as_bytes()),
            Err(JsonError::TooDeep { .. })
        ));
        let deep_ok = "[".repeat(DEFAULT_MAX_DEPTH);
        assert!(matches!(
            loads(deep_ok.as_bytes()),
            Err(JsonError::Syntax { .. })
        ));
        // Drop the deepest accepted value on this (test) thread: must not overflow.
        drop(parsed);
    }

    #[test]
    fn many_keys_is_linear() {
        // 200k distinct keys plus 200k duplicates; quadratic insertion would take minutes.
        let mut body = String::from("{");
        for i in 0..200_000 {
            body.push_str(&format!("\"k{i}\":{i},"));
        }
        for i in 0..200_000 {
            body.push_str(&format!("\"k{i}\":0,"));
        }
        body.push_str("\"end\":true}");
        let v = ok(body.as_bytes());
        let o = v.as_object().expect("object");
        assert_eq!(o.len(), 200_001);
        assert_eq!(o.keys().nth(7), Some("k7"));
        assert_eq!(o.get("k7"), Some(&Value::from(0)));
    }

    /// xorshift64*: a dependency-free generator for the fuzz test.
    fn rng(state: &mut u64) -> u64 {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    #[test]
    fn fuzz_never_panics() {
        let alphabet: &[&[u8]] = &[
            b"[",
            b"]",
            b"{",
            b"}",
            b",",
            b":",
            b"\"",
            b"\\",
            b"u",
            b"d800",
            b"dc00",
            b"1",
            b"-",
            b"0",
            b".",
            b"e",
            b"E",
            b"+",
            b" ",
            b"\n",
            b"null",
            b"true",
            b"NaN",
            b"-Infinity",
            b"\xed\xa0\x80",
            b"\xff",
            b"\x00",
            b"\xc3\xa9",
            b"\xf0\x9f\x98",
            b"a",
            b"\\u",
            b"\"k\":",
        ];
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for round in 0..20_000 {
            let len = (rng(&mut state) % 64) as usize;
            let mut input = Vec::new();
            if round % 4 == 0 {
                // Raw random bytes, sometimes behind a BOM so every decoder gets exercised.
                let boms: [&[u8]; 4] = [b"", b"\xff\xfe", b"\xfe\xff", b"\xff\xfe\x00\x00"];
                input.extend_from_slice(boms[(rng(&mut state) % 4) as usize]);
                input.extend((0..len).map(|_| rng(&mut state) as u8));
            } else {
                for _ in 0..len {
                    input.extend_from_slice(
                        alphabet[(rng(&mut state) % alphabet.len() as u64) as usize],
                    );
                }
            }
            let _ = loads(&input);
            let _ = loads_with_max_depth(&input, 3);
        }
    }
}
