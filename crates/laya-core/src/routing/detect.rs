//! Script and language detection on a request state: a port of upstream laya 0.4.15's
//! `lang.py` (`analyse` and everything it calls), which decides whether the English checkpoint
//! can read a state.
//!
//! The verdict is heuristic, so exactness here means *the same heuristic*: the same word lists
//! ([`super::words`]), the same Unicode 14.0 character classes as CPython 3.11
//! ([`super::text`]), the same thresholds, orderings and tie-breaks, and the same float
//! arithmetic (`round(x, 4)`, banker's rounding of counts).

// Fx hashing: the lists are looked up once per distinct word of every state routed.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::OnceLock;

use super::text::{
    blank_identifiers, blank_upper_runs, count_alpha, is_combining, is_joined, is_letter, is_lower,
    is_upper, letter_runs, looks_like_code, prefix, py_len, py_lower, py_split, py_strip,
    str_is_upper, words,
};
use super::words::{
    EN_COLLISION_CANDIDATES, NON_EN_DIACRITICS, NORDIC_OVERLAP, SCRIPT_RANGES, SHORT_SWEDISH, STOP,
};
use pyjson::{round4, Value};

/// A diacritic rate at or above this reads as non-English even without a stop-word verdict.
const NON_EN_DIACRITIC_RATE: f64 = 0.02;
/// Above this rate, English function words no longer rescue text with accented letters.
const ENGLISH_RESCUE_DIACRITIC_RATE: f64 = 0.06;
/// Share of non-Latin letters that carries a Latin-plurality text on its own…
const NON_LATIN_FRACTION: f64 = 0.2;
/// …or this smaller share, if it is also at least `NON_LATIN_MIN_LETTERS` letters.
const NON_LATIN_MIN_FRACTION: f64 = 0.1;
const NON_LATIN_MIN_LETTERS: usize = 10;
/// A shouted line needs a matched stop word at least this long…
const SHOUTED_MIN_STOPWORD: usize = 4;
/// …and a token at least this long (shorter all-caps runs are treated as acronyms).
const SHOUTED_MIN_WORD: usize = 5;
/// How much text the whole-state read and the segment scan look at, in code points.
const MAX_CHARS: usize = 4000;
/// Nesting below this many levels is not read (upstream's `_depth > 6`).
const MAX_DEPTH: usize = 6;

/// What detection found, in the key order upstream serializes (`routing.detection`).
#[derive(Debug, Clone, PartialEq)]
pub struct Detection {
    /// `latin`, `unknown` (no letters), or a script name (`han`, `cyrillic`, …, `other`).
    pub script: &'static str,
    /// Fraction of letters per script: Latin first, then the others in order of first
    /// appearance. Empty when there are no letters.
    pub script_profile: Vec<(&'static str, f64)>,
    /// Language code when one was named (`en`, `de`, …).
    pub language: Option<&'static str>,
    pub is_english: bool,
    pub language_undecided: bool,
    /// Rounded to 4 decimals.
    pub diacritic_rate: f64,
    /// Rounded to 4 decimals.
    pub non_latin_fraction: f64,
    /// The line or field (stripped) the segment scan found non-English, when it decided.
    pub mixed_segment: Option<String>,
}

/// Word-list lookups, built once from [`STOP`] the way upstream derives its sets.
struct Lexicon {
    /// Bit `i` set when the word is in `STOP[i]`.
    langs_of: HashMap<&'static str, u16>,
    /// `_SHARED_WORDS`: in more than one list, plus the Nordic overlap words.
    shared: HashSet<&'static str>,
    /// `_EN_ONLY_WORDS`.
    en_only: HashSet<&'static str>,
    /// `_EN_COLLISION_WORDS`: count once however often they repeat.
    collision: HashSet<&'static str>,
    short_swedish: HashSet<&'static str>,
    nordic: HashSet<&'static str>,
    diacritics: HashSet<char>,
}

/// `STOP[0]` is English.
const EN: usize = 0;

fn lexicon() -> &'static Lexicon {
    static LEX: OnceLock<Lexicon> = OnceLock::new();
    LEX.get_or_init(|| {
        let mut langs_of: HashMap<&'static str, u16> = HashMap::default();
        for (i, (_, list)) in STOP.iter().enumerate() {
            for &w in list.iter() {
                *langs_of.entry(w).or_insert(0) |= 1 << i;
            }
        }
        let nordic: HashSet<&'static str> = NORDIC_OVERLAP.iter().copied().collect();
        let mut shared: HashSet<&'static str> = langs_of
            .iter()
            .filter(|(_, m)| m.count_ones() > 1)
            .map(|(w, _)| *w)
            .collect();
        shared.extend(nordic.iter().copied());
        let en_only = STOP[EN]
            .1
            .iter()
            .copied()
            .filter(|w| !shared.contains(w))
            .collect();
        let collision = EN_COLLISION_CANDIDATES
            .iter()
            .copied()
            .filter(|w| langs_of.get(w).is_some_and(|m| m & !(1 << EN) != 0))
            .collect();
        Lexicon {
            langs_of,
            shared,
            en_only,
            collision,
            short_swedish: SHORT_SWEDISH.iter().copied().collect(),
            nordic,
            diacritics: NON_EN_DIACRITICS.chars().collect(),
        }
    })
}

fn in_list(lang: usize, word: &str) -> bool {
    lexicon()
        .langs_of
        .get(word)
        .is_some_and(|m| m & (1 << lang) != 0)
}

fn lang_index(code: &str) -> Option<usize> {
    STOP.iter().position(|(c, _)| *c == code)
}

// ---------------------------------------------------------------- state flattening

/// `_iter_text`: the string leaves of a state in order, keys ignored, nothing below depth 6.
fn leaves(state: &Value) -> Vec<&str> {
    fn walk<'a>(v: &'a Value, depth: usize, out: &mut Vec<&'a str>) {
        if depth > MAX_DEPTH {
            return;
        }
        match v {
            Value::Str(s) => out.push(s),
            Value::Object(o) => o.values().for_each(|v| walk(v, depth + 1, out)),
            Value::Array(a) => a.iter().for_each(|v| walk(v, depth + 1, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(state, 0, &mut out);
    out
}

/// `state_text`: the leaves joined by spaces, at most [`MAX_CHARS`] code points.
fn state_text(leaves: &[&str]) -> String {
    let mut parts: Vec<&str> = Vec::new();
    let mut budget = MAX_CHARS as i64;
    for leaf in leaves {
        if budget <= 0 {
            break;
        }
        let len = py_len(leaf) as i64;
        if len > budget {
            parts.push(prefix(leaf, budget as usize));
            break;
        }
        parts.push(leaf);
        budget -= len + 1;
    }
    prefix(&parts.join(" "), MAX_CHARS).to_string()
}

// ---------------------------------------------------------------- scripts

/// The named script whose range holds `cp` (upstream's bisect over the sorted ranges).
fn range_script(cp: u32) -> Option<&'static str> {
    let i = SCRIPT_RANGES.partition_point(|&(lo, _, _)| lo <= cp);
    let &(_, hi, name) = SCRIPT_RANGES.get(i.checked_sub(1)?)?;
    (cp <= hi).then_some(name)
}

/// Letters per script: the non-Latin ones in order of first appearance, then `latin` last
/// (so a tie goes to the named script, as upstream's `max` over its dict does).
struct ScriptCounts {
    others: Vec<(&'static str, usize)>,
    latin: usize,
}

fn script_counts(text: &str) -> ScriptCounts {
    let mut others: Vec<(&'static str, usize)> = Vec::new();
    let mut latin = 0usize;
    for c in text.chars() {
        if !is_letter(c) {
            continue;
        }
        let cp = u32::from(c);
        // Latin: Basic + Latin-1 + Extended-A/B + IPA, Extended Additional, fullwidth A-Z a-z.
        if cp < 0x02B0
            || (0x1E00..=0x1EFF).contains(&cp)
            || (0xFF21..=0xFF3A).contains(&cp)
            || (0xFF41..=0xFF5A).contains(&cp)
        {
            latin += 1;
            continue;
        }
        // A letter no range claims still counts, as "other", so it is never taken for Latin.
        let name = range_script(cp).unwrap_or("other");
        match others.iter_mut().find(|(n, _)| *n == name) {
            Some((_, k)) => *k += 1,
            None => others.push((name, 1)),
        }
    }
    ScriptCounts { others, latin }
}

impl ScriptCounts {
    fn total(&self) -> usize {
        self.latin + self.others.iter().map(|(_, k)| k).sum::<usize>()
    }

    /// `_script_from_counts`: the first script with the highest count, `latin` considered last.
    fn dominant(&self) -> &'static str {
        if self.total() == 0 {
            return "unknown";
        }
        let mut best = ("latin", 0usize);
        let mut first = true;
        for &(name, k) in self
            .others
            .iter()
            .chain(std::iter::once(&("latin", self.latin)))
        {
            if first || k > best.1 {
                best = (name, k);
                first = false;
            }
        }
        best.0
    }

    /// `_profile_from_counts`: Latin first, each as a fraction of all letters.
    fn profile(&self) -> Vec<(&'static str, f64)> {
        let total = self.total();
        if total == 0 {
            return Vec::new();
        }
        let t = total as f64;
        let mut out = Vec::with_capacity(self.others.len() + 1);
        if self.latin > 0 {
            out.push(("latin", self.latin as f64 / t));
        }
        out.extend(self.others.iter().map(|&(n, k)| (n, k as f64 / t)));
        out
    }
}

/// `_script_of`: the named non-Latin script of one character (note the lower Latin bound,
/// 0x0250, than [`script_counts`]' 0x02B0: IPA letters are unnamed here).
fn script_of(c: char) -> Option<&'static str> {
    let cp = u32::from(c);
    if cp < 0x0250
        || (0x1E00..=0x1EFF).contains(&cp)
        || (0xFF21..=0xFF3A).contains(&cp)
        || (0xFF41..=0xFF5A).contains(&cp)
    {
        return None;
    }
    range_script(cp)
}

/// Whether `_non_latin_words(text)` is non-empty: a run of two or more characters of one named
/// script (combining marks skipped, not splitting) that does not start with a capital.
fn has_non_latin_words(text: &str) -> bool {
    let mut run_first: Option<char> = None;
    let mut run_len = 0usize;
    let mut run_script: Option<&'static str> = None;
    let counts = |first: Option<char>, len: usize| len >= 2 && first.is_some_and(|f| !is_upper(f));
    for c in text.chars() {
        if is_combining(c) {
            continue;
        }
        let s = script_of(c);
        if s.is_some() && s == run_script {
            run_len += 1;
            continue;
        }
        if counts(run_first, run_len) {
            return true;
        }
        match s {
            Some(_) => {
                run_first = Some(c);
                run_len = 1;
                run_script = s;
            }
            None => {
                run_first = None;
                run_len = 0;
                run_script = None;
            }
        }
    }
    counts(run_first, run_len)
}

fn non_latin_carries(non_latin: f64, n_non_latin: i64) -> bool {
    non_latin >= NON_LATIN_FRACTION
        || (non_latin >= NON_LATIN_MIN_FRACTION && n_non_latin >= NON_LATIN_MIN_LETTERS as i64)
}

// ---------------------------------------------------------------- Latin language guess

struct LatinProfile {
    language: Option<&'static str>,
    /// Unrounded.
    diacritic_rate: f64,
    looks_non_english: bool,
}

/// Whether plain English function words outvote a marginal diacritic rate.
fn english_rescued(distinct: &HashSet<&str>, diac_rate: f64) -> bool {
    if diac_rate >= ENGLISH_RESCUE_DIACRITIC_RATE {
        return false;
    }
    let lex = lexicon();
    if distinct.iter().filter(|w| lex.en_only.contains(*w)).count() < 2 {
        return false;
    }
    distinct
        .iter()
        .filter(|w| w.chars().any(|c| lex.diacritics.contains(&c)))
        .count()
        <= 1
}

/// `latin_profile`: the stop-word/diacritic verdict on Latin-script text.
fn latin_profile(text: &str) -> LatinProfile {
    let lex = lexicon();
    // `İ` lowers to `i` + combining dot, which no list holds; upstream maps it to `i` first.
    let lowered_words = py_lower(&blank_identifiers(text).replace('İ', "i"));
    let words: Vec<&str> = words(&lowered_words);
    let lowered = py_lower(text);
    let diac = lowered
        .chars()
        .filter(|c| lex.diacritics.contains(c))
        .count();
    let diac_rate = diac as f64 / py_len(&lowered).max(1) as f64;
    let non_english = diac_rate >= NON_EN_DIACRITIC_RATE;
    let distinct: HashSet<&str> = words.iter().copied().collect();
    let nordic_overlap = distinct.iter().any(|w| lex.nordic.contains(w))
        && !distinct.iter().any(|w| lex.en_only.contains(w));

    if words.len() > 1 && words.len() < 4 && distinct.iter().any(|w| lex.short_swedish.contains(w))
    {
        return LatinProfile {
            language: Some("sv"),
            diacritic_rate: diac_rate,
            looks_non_english: non_english,
        };
    }
    if words.len() < 4 {
        return LatinProfile {
            language: None,
            diacritic_rate: diac_rate,
            looks_non_english: non_english || nordic_overlap,
        };
    }

    let mut counts: HashMap<&str, usize> = HashMap::default();
    for w in &words {
        *counts.entry(w).or_insert(0) += 1;
    }
    let mut scores = [0usize; STOP.len()];
    // Bit `i`: some distinct word is in `STOP[i]` and no other list.
    let mut evidenced = 0u16;
    for (w, n) in &counts {
        let Some(&mask) = lex.langs_of.get(w) else {
            continue;
        };
        let hit = if lex.collision.contains(w) { 1 } else { *n };
        for (i, score) in scores.iter_mut().enumerate() {
            if mask & (1 << i) != 0 {
                *score += hit;
            }
        }
        if !lex.shared.contains(w) {
            evidenced |= mask;
        }
    }
    let en = scores[EN];
    // Only a language with a word no other list claims may be named; the first highest wins.
    let mut best: Option<(usize, usize)> = None;
    for (i, &score) in scores.iter().enumerate().skip(1) {
        if evidenced & (1 << i) != 0 && best.is_none_or(|(_, b)| score > b) {
            best = Some((i, score));
        }
    }
    let best_lang = best.map(|(i, _)| STOP[i].0);
    let best_score = best.map_or(0, |(_, s)| s);

    // A non-English language is named on a clear margin over English function words; on the
    // Swedish login phrase (`kan inte …`, which carries one English-shaped `in`); or, with
    // non-English diacritics, on at least two hits and no fewer than English's.
    let clear_margin = best_score >= 2.max(en + 2);
    let swedish_phrase = best_lang == Some("sv")
        && distinct.contains("inte")
        && distinct.contains("kan")
        && words
            .first()
            .is_some_and(|w| matches!(*w, "kan" | "jag" | "vi"))
        && en <= 1;
    let diacritic_backed = non_english && best_score >= 2.max(en);
    let language = if best_lang.is_some() && (clear_margin || swedish_phrase || diacritic_backed) {
        best_lang
    } else if en > 0 && (!non_english || english_rescued(&distinct, diac_rate)) {
        Some("en")
    } else {
        None
    };
    LatinProfile {
        language,
        diacritic_rate: diac_rate,
        looks_non_english: non_english || (language.is_none() && nordic_overlap),
    }
}

/// `_shouted`: some uppercase and no lowercase character.
fn shouted(text: &str) -> bool {
    text.chars().any(is_upper) && !text.chars().any(is_lower)
}

/// `_shouted_evidence`: an all-caps line's evidence for `lang` is more than acronyms.
fn shouted_evidence(tokens: &[&str], lang: &str, diacritic_rate: f64) -> bool {
    if !tokens.iter().any(|t| py_len(t) >= SHOUTED_MIN_WORD) {
        return false;
    }
    if diacritic_rate >= NON_EN_DIACRITIC_RATE {
        return true;
    }
    let Some(li) = lang_index(lang) else {
        return false;
    };
    tokens
        .iter()
        .map(|t| py_lower(t))
        .any(|w| py_len(&w) >= SHOUTED_MIN_STOPWORD && in_list(li, &w))
}

/// `_named_prose_language`: the non-English language one line is written in, if it names one
/// with the segment bar (four words, two distinct stop words, no code, no acronyms).
fn named_prose_language(segment: &str) -> Option<&'static str> {
    if py_strip(segment).is_empty() || looks_like_code(segment) {
        return None;
    }
    let mut prose = py_split(segment)
        .filter(|t| !is_joined(t))
        .collect::<Vec<_>>()
        .join(" ");
    let is_shouted = shouted(&prose);
    if !is_shouted {
        prose = blank_upper_runs(&prose);
    }
    let tokens = words(&prose);
    if tokens.len() < 4 {
        return None;
    }
    let prof = latin_profile(&prose);
    let lang = prof.language.filter(|l| *l != "en")?;
    if is_shouted && !shouted_evidence(&tokens, lang, prof.diacritic_rate) {
        return None;
    }
    let li = lang_index(lang)?;
    let distinct: HashSet<String> = tokens.iter().map(|t| py_lower(t)).collect();
    if distinct.iter().filter(|w| in_list(li, w)).count() < 2 {
        return None;
    }
    Some(lang)
}

/// `_non_english_segment`: the first line of any leaf (reading at most [`MAX_CHARS`] in all)
/// that names a non-English language, with that line stripped.
fn non_english_segment(leaves: &[&str]) -> Option<(&'static str, String)> {
    let mut seen = 0usize;
    for leaf in leaves {
        for seg in leaf.split('\n') {
            if seen >= MAX_CHARS {
                return None;
            }
            let seg = prefix(seg, MAX_CHARS - seen);
            seen += py_len(seg);
            if let Some(lang) = named_prose_language(seg) {
                return Some((lang, py_strip(seg).to_string()));
            }
        }
    }
    None
}

// ---------------------------------------------------------------- whole-text verdict

/// `_analyse_text`: the verdict on one flattened text.
fn analyse_text(text: &str) -> Detection {
    let counts = script_counts(text);
    let prof = counts.profile();
    let mut script = counts.dominant();
    let latin_share = prof
        .iter()
        .find(|(n, _)| *n == "latin")
        .map_or(0.0, |(_, f)| *f);
    let non_latin = if prof.is_empty() {
        0.0
    } else {
        round4(1.0 - latin_share)
    };
    // Python's `round()` of a float to an int: half to even.
    let n_non_latin = (non_latin * count_alpha(text) as f64).round_ties_even() as i64;
    let carries = non_latin_carries(non_latin, n_non_latin);
    if script == "latin" && carries && has_non_latin_words(text) {
        // The first non-Latin script with the highest share (`carries` implies there is one).
        let mut best: Option<(&'static str, f64)> = None;
        for &(name, f) in prof.iter().filter(|(n, _)| *n != "latin") {
            if best.is_none_or(|(_, b)| f > b) {
                best = Some((name, f));
            }
        }
        if let Some((name, _)) = best {
            script = name;
        }
    }
    if script == "unknown" {
        return Detection {
            script,
            script_profile: prof,
            language: None,
            is_english: true,
            language_undecided: true,
            diacritic_rate: 0.0,
            non_latin_fraction: 0.0,
            mixed_segment: None,
        };
    }
    if script != "latin" {
        return Detection {
            script,
            script_profile: prof,
            language: None,
            is_english: false,
            language_undecided: true,
            diacritic_rate: 0.0,
            non_latin_fraction: non_latin,
            mixed_segment: None,
        };
    }
    let prof_lat = latin_profile(text);
    let mut lang = prof_lat.language;
    if lang.is_some_and(|l| l != "en") && !carries {
        if shouted(text) {
            // All capitals: believe the language only on more than acronym-shaped evidence.
            if let Some(l) = lang {
                if !shouted_evidence(&words(text), l, prof_lat.diacritic_rate) {
                    lang = None;
                }
            }
        } else {
            // Mixed case: re-take the verdict without acronym-shaped all-caps runs, but only
            // when every all-caps run is short enough to be an acronym.
            let caps: Vec<&str> = letter_runs(text)
                .into_iter()
                .filter(|r| str_is_upper(r))
                .collect();
            if !caps.is_empty() && !caps.iter().any(|c| py_len(c) >= SHOUTED_MIN_WORD) {
                let blanked = blank_upper_runs(text);
                if blanked != text {
                    lang = latin_profile(&blanked).language;
                }
            }
        }
    }
    // Undecided is not English unless nothing points away from English.
    let undecided = lang.is_none();
    let english = lang == Some("en") || (undecided && !prof_lat.looks_non_english);
    Detection {
        script: "latin",
        script_profile: prof,
        language: lang,
        is_english: english,
        language_undecided: undecided,
        diacritic_rate: round4(prof_lat.diacritic_rate),
        non_latin_fraction: non_latin,
        mixed_segment: None,
    }
}

/// `_leaf_non_english`: the verdict on the line of one string value that is most clearly not
/// for the English checkpoint (most letters wins), if any.
fn leaf_non_english(leaf: &str) -> Option<Detection> {
    let mut best_n: i64 = -1;
    let mut best = None;
    for line in leaf.split('\n') {
        // Too short to pass any of the bars below.
        if py_len(line) < 7 {
            continue;
        }
        let sample = prefix(line, MAX_CHARS);
        if py_strip(sample).is_empty() || looks_like_code(sample) {
            continue;
        }
        let det = analyse_text(sample);
        if det.is_english {
            continue;
        }
        let named =
            det.language.is_some_and(|l| l != "en") && named_prose_language(sample).is_some();
        if !named {
            if det.script != "latin" && det.script != "unknown" {
                if !(has_non_latin_words(sample) && count_alpha(sample) >= NON_LATIN_MIN_LETTERS) {
                    continue;
                }
            } else if !(det.diacritic_rate >= NON_EN_DIACRITIC_RATE && words(sample).len() >= 4) {
                continue;
            }
        }
        let n_alpha = count_alpha(sample) as i64;
        if n_alpha > best_n {
            best_n = n_alpha;
            best = Some(det);
        }
    }
    best
}

/// Upstream's `analyse(state)`: the detection result routing reads.
///
/// The whole state (its string leaves joined, first 4000 code points) is read first. If that
/// reads as English Latin text and the state has several leaves or lines, each line is checked
/// for a non-English language (`mixed_segment`); and for a structured state still English,
/// each string value is read on its own, and the one most clearly non-English (most letters)
/// overrides `language`, `is_english` and `language_undecided`.
pub fn analyse(state: &Value) -> Detection {
    let leaves = leaves(state);
    let mut result = analyse_text(&state_text(&leaves));
    if result.script == "latin"
        && result.is_english
        && (leaves.len() > 1 || leaves.iter().any(|l| l.contains('\n')))
    {
        if let Some((lang, mixed)) = non_english_segment(&leaves) {
            result.language = Some(lang);
            result.is_english = false;
            result.language_undecided = false;
            result.mixed_segment = Some(mixed);
        }
    }
    if matches!(state, Value::Str(_) | Value::Null) || !result.is_english {
        return result;
    }
    let mut best_n: i64 = -1;
    let mut best: Option<Detection> = None;
    for leaf in &leaves {
        let Some(det) = leaf_non_english(leaf) else {
            continue;
        };
        let n_alpha = count_alpha(prefix(leaf, MAX_CHARS)) as i64;
        if n_alpha > best_n {
            best_n = n_alpha;
            best = Some(det);
        }
    }
    if let Some(b) = best {
        result.language = b.language;
        result.is_english = false;
        result.language_undecided = b.language_undecided;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_table_is_sorted_and_disjoint() {
        for w in SCRIPT_RANGES.windows(2) {
            assert!(w[0].0 <= w[0].1 && w[0].1 < w[1].0, "{:?}", w);
        }
    }

    #[test]
    fn derived_word_sets() {
        let lex = lexicon();
        // Values of upstream's module-level sets on CPython 3.11.
        let mut collision: Vec<_> = lex.collision.iter().copied().collect();
        collision.sort_unstable();
        assert_eq!(
            collision,
            ["care", "come", "do", "im", "per", "plus", "son", "todo"]
        );
        assert!(
            lex.shared.contains("la") && lex.shared.contains("in") && lex.shared.contains("hej")
        );
        assert!(
            lex.en_only.contains("the")
                && lex.en_only.contains("i")
                && !lex.en_only.contains("was")
        );
        assert_eq!((lex.shared.len(), lex.en_only.len()), (50, 112));
    }

    fn s(text: &str) -> Value {
        Value::Str(text.to_string())
    }

    #[test]
    fn english_and_non_latin() {
        let d = analyse(&s("I was charged twice for my subscription this month"));
        assert_eq!(
            (d.script, d.language, d.is_english),
            ("latin", Some("en"), true)
        );
        assert_eq!(d.script_profile, vec![("latin", 1.0)]);
        let d = analyse(&s("我的账户被扣了两次费用，请退款"));
        assert_eq!(
            (d.script, d.is_english, d.non_latin_fraction),
            ("han", false, 1.0)
        );
        let d = analyse(&s("1234 !!"));
        assert_eq!(
            (d.script, d.is_english, d.language_undecided),
            ("unknown", true, true)
        );
        assert!(d.script_profile.is_empty());
    }

    #[test]
    fn german_and_mixed_segment() {
        let d = analyse(&s(
            "Mein Konto wurde zweimal belastet, bitte erstatten Sie das Geld",
        ));
        assert_eq!((d.language, d.is_english), (Some("de"), false));
        let state = Value::Array(vec![
            s("Hi there, this is the support bot. How can we help you with your order today?"),
            s("Ich habe die Rechnung nicht bekommen und ich will mein Geld"),
        ]);
        let d = analyse(&state);
        assert_eq!(d.language, Some("de"));
        assert!(!d.is_english && d.mixed_segment.is_some());
    }
}
