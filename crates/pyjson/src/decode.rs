//! Bytes to text the way `json.loads(bytes)` does it:
//! `b.decode(json.detect_encoding(b), 'surrogatepass')`.
//!
//! The text is produced as *generalized UTF-8*: ordinary UTF-8, except that a surrogate code
//! point U+D800..U+DFFF (which Python's `surrogatepass` lets through) is kept as its 3-byte
//! form `ED A0..BF 80..BF`. Surrogates are never combined here: a UTF-8 body holding the two
//! 3-byte forms of a pair decodes, in Python too, to two separate code points. The parser
//! turns each such code point inside a string into U+FFFD and records that it saw one.

use std::borrow::Cow;

/// The codec `json.detect_encoding` picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    Utf8,
    /// UTF-8 after a BOM (`utf-8-sig`; only one BOM is removed).
    Utf8Sig,
    /// `utf-16` / `utf-32`: a BOM gives the byte order and is removed.
    Utf16 {
        big_endian: bool,
        bom: bool,
    },
    Utf32 {
        big_endian: bool,
        bom: bool,
    },
}

impl Encoding {
    /// Python's codec name, for error messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Encoding::Utf8 => "utf-8",
            Encoding::Utf8Sig => "utf-8-sig",
            Encoding::Utf16 { bom: true, .. } => "utf-16",
            Encoding::Utf16 {
                big_endian: true, ..
            } => "utf-16-be",
            Encoding::Utf16 { .. } => "utf-16-le",
            Encoding::Utf32 { bom: true, .. } => "utf-32",
            Encoding::Utf32 {
                big_endian: true, ..
            } => "utf-32-be",
            Encoding::Utf32 { .. } => "utf-32-le",
        }
    }
}

/// `json.detect_encoding` (CPython 3.11 `Lib/json/__init__.py`), rule for rule.
pub(crate) fn detect_encoding(b: &[u8]) -> Encoding {
    if b.starts_with(&[0x00, 0x00, 0xFE, 0xFF]) {
        return Encoding::Utf32 {
            big_endian: true,
            bom: true,
        };
    }
    if b.starts_with(&[0xFF, 0xFE, 0x00, 0x00]) {
        return Encoding::Utf32 {
            big_endian: false,
            bom: true,
        };
    }
    if b.starts_with(&[0xFE, 0xFF]) {
        return Encoding::Utf16 {
            big_endian: true,
            bom: true,
        };
    }
    if b.starts_with(&[0xFF, 0xFE]) {
        return Encoding::Utf16 {
            big_endian: false,
            bom: true,
        };
    }
    if b.starts_with(&[0xEF, 0xBB, 0xBF]) {
        return Encoding::Utf8Sig;
    }
    if b.len() >= 4 {
        if b[0] == 0 {
            // 00 00 -- -- utf-32-be; 00 XX -- -- utf-16-be
            return if b[1] != 0 {
                Encoding::Utf16 {
                    big_endian: true,
                    bom: false,
                }
            } else {
                Encoding::Utf32 {
                    big_endian: true,
                    bom: false,
                }
            };
        }
        if b[1] == 0 {
            // XX 00 00 00 utf-32-le; XX 00 00 XX and XX 00 XX -- utf-16-le
            return if b[2] != 0 || b[3] != 0 {
                Encoding::Utf16 {
                    big_endian: false,
                    bom: false,
                }
            } else {
                Encoding::Utf32 {
                    big_endian: false,
                    bom: false,
                }
            };
        }
    } else if b.len() == 2 {
        if b[0] == 0 {
            return Encoding::Utf16 {
                big_endian: true,
                bom: false,
            };
        }
        if b[1] == 0 {
            return Encoding::Utf16 {
                big_endian: false,
                bom: false,
            };
        }
    }
    Encoding::Utf8
}

/// Python raised `UnicodeDecodeError` for this codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DecodeError {
    pub(crate) encoding: Encoding,
}

/// Decodes `b` as `json.loads` would, into generalized UTF-8 (see the module docs). UTF-8
/// input is borrowed, not copied.
pub(crate) fn decode(b: &[u8]) -> Result<Cow<'_, [u8]>, DecodeError> {
    let encoding = detect_encoding(b);
    let fail = DecodeError { encoding };
    match encoding {
        Encoding::Utf8 => check_utf8_surrogatepass(b)
            .map(|()| Cow::Borrowed(b))
            .ok_or(fail),
        Encoding::Utf8Sig => {
            let body = &b[3..];
            check_utf8_surrogatepass(body)
                .map(|()| Cow::Borrowed(body))
                .ok_or(fail)
        }
        Encoding::Utf16 { big_endian, bom } => {
            let body = if bom { &b[2..] } else { b };
            utf16_to_generalized(body, big_endian)
                .map(Cow::Owned)
                .ok_or(fail)
        }
        Encoding::Utf32 { big_endian, bom } => {
            let body = if bom { &b[4..] } else { b };
            utf32_to_generalized(body, big_endian)
                .map(Cow::Owned)
                .ok_or(fail)
        }
    }
}

/// Is `b` a 3-byte UTF-8 form of a surrogate code point (`ED A0..BF 80..BF`)?
pub(crate) fn is_surrogate_form(b: &[u8]) -> bool {
    matches!(b, [0xED, 0xA0..=0xBF, 0x80..=0xBF, ..])
}

/// Python's strict UTF-8 decoder with the `surrogatepass` handler: valid UTF-8, plus 3-byte
/// surrogate forms wherever they occur.
fn check_utf8_surrogatepass(b: &[u8]) -> Option<()> {
    let mut rest = b;
    loop {
        match std::str::from_utf8(rest) {
            Ok(_) => return Some(()),
            Err(e) => {
                let bad = &rest[e.valid_up_to()..];
                if !is_surrogate_form(bad) {
                    return None;
                }
                rest = &bad[3..];
            }
        }
    }
}

/// Appends code point `cp` (which may be a surrogate) in generalized UTF-8.
fn push_code_point(out: &mut Vec<u8>, cp: u32) {
    match char::from_u32(cp) {
        Some(c) => {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
        // Only surrogates reach here (callers reject > U+10FFFF); UTF-8's 3-byte pattern.
        None => out.extend_from_slice(&[
            0xE0 | (cp >> 12) as u8,
            0x80 | ((cp >> 6) & 0x3F) as u8,
            0x80 | (cp & 0x3F) as u8,
        ]),
    }
}

/// Python's UTF-16 decoder with `surrogatepass`: proper pairs combine, lone surrogates pass
/// through, an odd trailing byte is an error.
fn utf16_to_generalized(b: &[u8], big_endian: bool) -> Option<Vec<u8>> {
    let pairs = b.chunks_exact(2);
    if !pairs.remainder().is_empty() {
        return None;
    }
    let units = pairs.map(|p| {
        let pair = [p[0], p[1]];
        if big_endian {
            u16::from_be_bytes(pair)
        } else {
            u16::from_le_bytes(pair)
        }
    });
    let mut out = Vec::with_capacity(b.len() + b.len() / 2);
    for unit in char::decode_utf16(units) {
        match unit {
            Ok(c) => push_code_point(&mut out, u32::from(c)),
            Err(lone) => push_code_point(&mut out, u32::from(lone.unpaired_surrogate())),
        }
    }
    Some(out)
}

/// Python's UTF-32 decoder with `surrogatepass`: code points above U+10FFFF and a trailing
/// partial unit are errors; surrogates pass through.
fn utf32_to_generalized(b: &[u8], big_endian: bool) -> Option<Vec<u8>> {
    let quads = b.chunks_exact(4);
    if !quads.remainder().is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(b.len() / 2);
    for q in quads {
        let quad = [q[0], q[1], q[2], q[3]];
        let cp = if big_endian {
            u32::from_be_bytes(quad)
        } else {
            u32::from_le_bytes(quad)
        };
        if cp > 0x10FFFF {
            return None;
        }
        push_code_point(&mut out, cp);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_follows_python() {
        // json.detect_encoding(b) for each b, in python3.11
        let cases: &[(&[u8], &str)] = &[
            (b"{}", "utf-8"),
            (b"", "utf-8"),
            (b"1", "utf-8"),
            (b"\xef\xbb\xbf{}", "utf-8-sig"),
            (b"\xff\xfe{\x00}\x00", "utf-16"),
            (b"\xfe\xff\x00{\x00}", "utf-16"),
            (b"\xff\xfe\x00\x00{\x00\x00\x00", "utf-32"),
            (b"\x00\x00\xfe\xff\x00\x00\x00{", "utf-32"),
            (b"{\x00}\x00", "utf-16-le"),
            (b"\x00{\x00}", "utf-16-be"),
            (b"1\x00\x00\x00", "utf-32-le"),
            (b"\x00\x00\x001", "utf-32-be"),
            (b"1\x00", "utf-16-le"),
            (b"\x001", "utf-16-be"),
            (b"1\x00\x00", "utf-8"),
            (b"1\x002", "utf-8"),
        ];
        for (b, want) in cases {
            assert_eq!(detect_encoding(b).name(), *want, "{b:?}");
        }
    }

    #[test]
    fn surrogatepass() {
        // b'"\xed\xa0\x80"'.decode('utf-8', 'surrogatepass') == '"\ud800"'
        assert_eq!(
            decode(b"\"\xed\xa0\x80\"").as_deref().ok(),
            Some(&b"\"\xed\xa0\x80\""[..])
        );
        // Overlong, truncated and out-of-range sequences stay errors.
        for bad in [
            &b"\xc0\x80"[..],
            b"\xed\xa0",
            b"\xf4\x90\x80\x80",
            b"\xff",
            b"a\xed\x9f",
        ] {
            assert!(decode(bad).is_err(), "{bad:?}");
        }
        // '"\ud800"'.encode('utf-16-le', 'surrogatepass') decodes back to a lone surrogate
        assert_eq!(
            decode(b"\"\x00\x00\xd8\"\x00").ok().as_deref(),
            Some(&b"\"\xed\xa0\x80\""[..])
        );
        // '"\U0001f600"'.encode('utf-16-be') -> one astral character
        assert_eq!(
            decode(b"\x00\"\xd8\x3d\xde\x00\x00\"").ok().as_deref(),
            Some("\"\u{1F600}\"".as_bytes())
        );
        // b'\xff\xfe1' -> UnicodeDecodeError: truncated data
        assert!(decode(b"\xff\xfe1").is_err());
        // b'\xff\xfe\x00\x00' + (0x110000).to_bytes(4, 'little') -> code point not in range
        assert!(decode(b"\xff\xfe\x00\x00\x00\x00\x11\x00").is_err());
        assert_eq!(
            decode(b"\xff\xfe\x00\x00\xff\xff\x10\x00").ok().as_deref(),
            Some("\u{10FFFF}".as_bytes())
        );
    }
}
