//! The pieces of CPython 3.11's `str` methods and `re` character classes that the detector
//! uses, on the interpreter's own Unicode 14.0 data ([`super::unicode_table`]), plus the
//! handful of fixed regular expressions of upstream's `lang.py`, written as plain scans.
//!
//! Rust's `char` predicates follow a newer Unicode and use other definitions (`is_alphabetic`
//! is the Alphabetic property, which includes combining vowel signs; Python's `isalpha` is the
//! `L*` categories only), so none of them is used for a decision here.

use std::sync::OnceLock;

use super::unicode_table::{
    ALPHA, COMBINING, DECIMAL, LATE_LETTER, LOWER, LOWER_MAPS, NUMERIC, RUNS, SPACE, TITLE, UPPER,
};

/// The flag set of `c` in [`RUNS`].
fn flags(c: char) -> u16 {
    // Most text the detector reads is ASCII: a table of it saves the search on every char.
    static ASCII: OnceLock<[u16; 128]> = OnceLock::new();
    let cp = u32::from(c);
    match usize::try_from(cp) {
        Ok(i) if i < 128 => ASCII.get_or_init(|| std::array::from_fn(|i| search(i as u32)))[i],
        _ => search(cp),
    }
}

/// The flag set of code point `cp` in [`RUNS`], by binary search.
fn search(cp: u32) -> u16 {
    // RUNS[0] starts at 0, so at least one entry is `<= cp` and the index is never below 0.
    let i = RUNS
        .partition_point(|&(start, _)| start <= cp)
        .saturating_sub(1);
    RUNS.get(i).map_or(0, |&(_, f)| f)
}

fn has(c: char, flag: u16) -> bool {
    flags(c) & flag != 0
}

/// `str.isalpha()` of one character (categories Lu, Ll, Lt, Lm, Lo).
pub(super) fn is_alpha(c: char) -> bool {
    has(c, ALPHA)
}

/// Upstream's `_is_letter`: `isalpha()`, or a letter assigned after Unicode 14 from its table.
pub(super) fn is_letter(c: char) -> bool {
    has(c, ALPHA | LATE_LETTER)
}

pub(super) fn is_upper(c: char) -> bool {
    has(c, UPPER)
}

pub(super) fn is_lower(c: char) -> bool {
    has(c, LOWER)
}

/// `unicodedata.combining(c) != 0`.
pub(super) fn is_combining(c: char) -> bool {
    has(c, COMBINING)
}

/// `str.isspace()` of one character (what `str.split()` and `str.strip()` cut on).
pub(super) fn is_space(c: char) -> bool {
    has(c, SPACE)
}

/// `re`'s `\w`: `isalnum()` (alpha or numeric; decimal digits are numeric) or `_`.
pub(super) fn is_word(c: char) -> bool {
    c == '_' || has(c, ALPHA | NUMERIC)
}

/// `re`'s `[^\W_]`: `isalnum()`.
fn is_alnum(c: char) -> bool {
    has(c, ALPHA | NUMERIC)
}

/// `re`'s `[^\W\d_]`: alphanumeric but not a decimal digit (`\d` is `isdecimal()`), so letters
/// and letter-like numerals (`Ⅻ`, `²`).
pub(super) fn is_word_letter(c: char) -> bool {
    let f = flags(c);
    f & ALPHA != 0 || (f & NUMERIC != 0 && f & DECIMAL == 0)
}

/// `len(s)`: code points.
pub(super) fn py_len(s: &str) -> usize {
    s.chars().count()
}

/// `s[:n]` in code points.
pub(super) fn prefix(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((at, _)) => &s[..at],
        None => s,
    }
}

/// `sum(ch.isalpha() for ch in s)`.
pub(super) fn count_alpha(s: &str) -> usize {
    s.chars().filter(|&c| is_alpha(c)).count()
}

/// `str.strip()`.
pub(super) fn py_strip(s: &str) -> &str {
    s.trim_matches(is_space)
}

/// `str.split()` with no separator: runs of non-whitespace.
pub(super) fn py_split(s: &str) -> impl Iterator<Item = &str> {
    s.split(is_space).filter(|t| !t.is_empty())
}

/// `str.lower()`. Characters whose 3.11 lowercase differs from themselves are mapped with
/// Rust's full lowercase mapping, which agrees with CPython 3.11 on every one of them
/// (checked over all 1433 when the table was made); all others are kept, so a letter cased
/// only in a newer Unicode stays as Python 3.11 leaves it. Python's final-sigma rule (`Σ` at
/// a word end becomes `ς`, not `σ`) is not reproduced: both are letters of the same length
/// and neither is in any word list or the diacritic set, so no detection outcome can differ.
pub(super) fn py_lower(s: &str) -> String {
    if s.is_ascii() {
        return s.to_ascii_lowercase();
    }
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if has(c, LOWER_MAPS) {
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `str.isupper()` of a string: at least one uppercase character and no lowercase or
/// titlecase one.
pub(super) fn str_is_upper(s: &str) -> bool {
    let mut cased = false;
    for c in s.chars() {
        let f = flags(c);
        if f & (LOWER | TITLE) != 0 {
            return false;
        }
        cased |= f & UPPER != 0;
    }
    cased
}

/// `_WORD.findall(s)` with `_WORD = [^\W\d_]+`: maximal runs of [`is_word_letter`].
pub(super) fn words(s: &str) -> Vec<&str> {
    runs(s, 1)
}

/// Maximal runs of [`is_word_letter`] at least `min_len` code points long, which is what
/// `finditer` of `[^\W\d_]{min_len,}` yields (a run is always taken whole, greedily).
fn runs(s: &str, min_len: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let mut len = 0usize;
    for (i, c) in s.char_indices() {
        if is_word_letter(c) {
            if start.is_none() {
                start = Some(i);
                len = 0;
            }
            len += 1;
        } else if let Some(st) = start.take() {
            if len >= min_len {
                out.push(&s[st..i]);
            }
        }
    }
    if let Some(st) = start {
        if len >= min_len {
            out.push(&s[st..]);
        }
    }
    out
}

/// `_LETTER_RUN.finditer(s)` with `_LETTER_RUN = [^\W\d_]{2,}`.
pub(super) fn letter_runs(s: &str) -> Vec<&str> {
    runs(s, 2)
}

/// `_LETTER_RUN.sub(lambda m: " " if m.group().isupper() else m.group(), s)`: every
/// all-capitals run of two or more letters becomes one space.
pub(super) fn blank_upper_runs(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut last = 0usize;
    for run in letter_runs(s) {
        if str_is_upper(run) {
            // `run` is a subslice of `s`; its offset comes from the pointer difference.
            let at = run.as_ptr() as usize - s.as_ptr() as usize;
            out.push_str(&s[last..at]);
            out.push(' ');
            last = at + run.len();
        }
    }
    out.push_str(&s[last..]);
    out
}

/// `_IDENTIFIER.sub(" ", s)` with `_IDENTIFIER = (?<![\w-])[\w-]*(?:[.@][\w-]+)+`: dotted
/// or `@`-joined tokens (`github.com`, `a@b.io`, `v1.2`) become one space.
///
/// A match can only start where the previous character is not `[\w-]`; from there it takes
/// the whole `[\w-]` run (a shorter one would be followed by `[\w-]`, never by `.`/`@`), then
/// as many `[.@][\w-]+` pieces as follow. Positions inside a run are rejected by the
/// lookbehind at once, so the scan is linear.
pub(super) fn blank_identifiers(s: &str) -> String {
    let is_id = |c: char| c == '-' || is_word(c);
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let n = chars.len();
    let at = |i: usize| chars.get(i).map_or(s.len(), |&(b, _)| b);
    let ch = |i: usize| chars.get(i).map(|&(_, c)| c);
    let mut out = String::with_capacity(s.len());
    let mut last = 0usize;
    let mut i = 0usize;
    while i < n {
        if i > 0 && ch(i - 1).is_some_and(is_id) {
            i += 1;
            continue;
        }
        let mut j = i;
        while ch(j).is_some_and(is_id) {
            j += 1;
        }
        let mut end = j;
        let mut pieces = 0usize;
        while matches!(ch(end), Some('.') | Some('@')) {
            let mut k = end + 1;
            while ch(k).is_some_and(is_id) {
                k += 1;
            }
            if k == end + 1 {
                break;
            }
            end = k;
            pieces += 1;
        }
        if pieces > 0 {
            out.push_str(&s[last..at(i)]);
            out.push(' ');
            last = at(end);
            i = end;
        } else {
            i += 1;
        }
    }
    out.push_str(&s[last..]);
    out
}

/// `_CODE_LINE.search(s)` with `_CODE_LINE = [=;{}\[\]]|\w\(`.
pub(super) fn looks_like_code(s: &str) -> bool {
    let mut prev_word = false;
    for c in s.chars() {
        if matches!(c, '=' | ';' | '{' | '}' | '[' | ']') || (c == '(' && prev_word) {
            return true;
        }
        prev_word = is_word(c);
    }
    false
}

/// `_JOINED.search(s)` with `_JOINED = [^\W_][._/\\][^\W_]`.
pub(super) fn is_joined(s: &str) -> bool {
    let chars: Vec<char> = s.chars().collect();
    chars
        .windows(3)
        .any(|w| is_alnum(w[0]) && matches!(w[1], '.' | '_' | '/' | '\\') && is_alnum(w[2]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_character_classes() {
        assert!(is_alpha('é') && is_alpha('中') && !is_alpha('1') && !is_alpha('_'));
        // Devanagari vowel sign: Alphabetic in Rust, not `isalpha()` in Python.
        assert!('\u{093E}'.is_alphabetic() && !is_alpha('\u{093E}'));
        assert!(is_word_letter('²') && is_word_letter('Ⅻ') && !is_word_letter('7'));
        assert!(is_word('7') && is_word('_') && !is_word('-'));
        assert!(is_space('\u{1c}') && is_space('\u{a0}') && !is_space('\u{200b}'));
        assert!(is_combining('\u{301}') && !is_combining('a'));
        // U+A7CB is unassigned in Unicode 14 but a letter for upstream's `_is_letter`.
        assert!(!is_alpha('\u{A7CB}') && is_letter('\u{A7CB}'));
        assert_eq!(py_lower("İSTANBUL Ǆ"), "i\u{307}stanbul ǆ");
        assert_eq!(py_lower("\u{A7CB}"), "\u{A7CB}");
    }

    #[test]
    fn string_predicates() {
        assert!(
            str_is_upper("ABC") && str_is_upper("A1") && !str_is_upper("Ab") && !str_is_upper("12")
        );
        assert!(!str_is_upper("ǅA"));
        assert_eq!(
            words("don't, x2y ²b_c"),
            vec!["don", "t", "x", "y", "²b", "c"]
        );
        assert_eq!(
            blank_upper_runs("sag mir das HEUTIGE DATUM a B"),
            "sag mir das     a B"
        );
        assert_eq!(prefix("héllo", 2), "hé");
        assert_eq!(py_strip("\u{1f} x \u{3000}"), "x");
        assert_eq!(
            py_split(" a\u{85}b  c ").collect::<Vec<_>>(),
            vec!["a", "b", "c"]
        );
    }

    #[test]
    fn identifier_blanking_matches_python() {
        // Outputs of `_IDENTIFIER.sub(" ", s)` on CPython 3.11.
        assert_eq!(blank_identifiers("see github.com now"), "see   now");
        assert_eq!(blank_identifiers("mail a-b@c.d.e, ok."), "mail  , ok.");
        assert_eq!(blank_identifiers("a..b"), "a. ");
        assert_eq!(blank_identifiers(" .com x"), "   x");
        assert_eq!(blank_identifiers("fim."), "fim.");
        assert_eq!(blank_identifiers("v1.2.3"), " ");
    }

    #[test]
    fn code_and_joined() {
        assert!(
            looks_like_code("x = 1")
                && looks_like_code("print(x)")
                && !looks_like_code("Deu erro (500)")
        );
        assert!(
            is_joined("os.path")
                && is_joined("Nav/Com")
                && is_joined("a_b")
                && !is_joined("_ab")
                && !is_joined("a.")
        );
    }
}
