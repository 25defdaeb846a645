//! Byte-level BPE without `tokenizers`' offset bookkeeping.
//!
//! `tokenizers` keeps every piece of the text aligned with the original, allocating for each
//! piece and each character; on a state of 512 tokens that was most of a decision's host time.
//! Nothing here reads offsets (upstream keeps only `input_ids`). So for a tokenizer whose
//! pipeline this module reproduces exactly (checked by [`ByteBpe::of`]: no normalizer or one of
//! NFC, NFD, NFKC and NFKD, the GPT-2 `ByteLevel` split without a prefix space, BPE without
//! dropout, prefix or suffix, a post-processor that adds nothing without special tokens, no
//! truncation or padding), text is split on the added tokens as `tokenizers` splits it, and
//! the rest split, mapped to bytes' symbols and merged here, with `tokenizers`' own merge
//! order. Text goes through `tokenizers` instead when it holds an added token that takes the
//! spaces around it or must stand as a word, or a piece that the normalizer might change (a
//! quick check decides; ASCII is never changed). The tests compare the two on the fixture
//! tokenizers over hand-picked, workload and random text.

use std::collections::BinaryHeap;
use std::sync::RwLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use rustc_hash::FxHashMap;
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::utils::SysRegex;
use tokenizers::{ModelWrapper, NormalizedString, Normalizer};
use unicode_normalization_alignments::IsNormalized;

/// Words cached, and the longest one cached (in bytes): `tokenizers`' own BPE cache bounds.
const CACHE_WORDS: usize = 10_000;
const CACHE_WORD_BYTES: usize = 256;

/// A piece of the split (its bytes) → its ids.
type WordCache = FxHashMap<Box<[u8]>, Box<[u32]>>;

pub(super) struct ByteBpe {
    /// The id of each byte's one-symbol token, where byte-level BPE starts.
    byte_ids: [u32; 256],
    /// The normalizer, which text that is not ASCII must be seen to pass unchanged.
    form: Form,
    /// The `ByteLevel` pre-tokenizer's split, for text that is not ASCII (ASCII text is split
    /// by [`piece_end`]).
    split_pattern: SysRegex,
    /// `(left, right)` → `(rank, merged)`.
    merges: FxHashMap<(u32, u32), (u32, u32)>,
    /// The added tokens `tokenizers` looks for in the text as given, then those it looks for
    /// in the normalized pieces left between them (the pieces as given, which is all that
    /// `encode` takes on).
    plain: AddedSplit,
    normalized: AddedSplit,
    cache: RwLock<WordCache>,
}

/// One of `tokenizers`' two searches for added tokens: the leftmost longest match first.
struct AddedSplit {
    automaton: AhoCorasick,
    /// Each pattern's id, and whether its token takes the spaces around it or must stand as a
    /// word (`lstrip`, `rstrip`, `single_word`): text where one occurs is left to `tokenizers`.
    tokens: Vec<(u32, bool)>,
}

impl AddedSplit {
    /// `patterns`: (text, id, flagged). `None` where a text is empty or stands for two ids.
    fn new(mut patterns: Vec<(String, u32, bool)>) -> Option<AddedSplit> {
        patterns.sort();
        patterns.dedup();
        let distinct = patterns.windows(2).all(|w| w[0].0 != w[1].0);
        if !distinct || patterns.iter().any(|p| p.0.is_empty()) {
            return None;
        }
        let automaton = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(patterns.iter().map(|p| &p.0))
            .ok()?;
        Some(AddedSplit {
            automaton,
            tokens: patterns.into_iter().map(|(_, id, f)| (id, f)).collect(),
        })
    }
}

impl std::fmt::Debug for ByteBpe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteBpe")
            .field("merges", &self.merges.len())
            .finish_non_exhaustive()
    }
}

impl ByteBpe {
    /// The fast path for `t`, or `None` where its pipeline is not the one this module
    /// reproduces. `t` must be as loaded: `tokenizers` builds its search for normalized tokens
    /// when they are added and keeps it when the normalizer is replaced, while this reads the
    /// normalizer of now; and it must hold no added text twice (the caller checks the file).
    /// `merges` is the `model.merges` list of the file `t` was loaded from.
    pub(super) fn of(t: &tokenizers::Tokenizer, merges: &serde_json::Value) -> Option<ByteBpe> {
        let form = match t.get_normalizer() {
            None => Some(Form::None),
            Some(NormalizerWrapper::NFC(_)) => Some(Form::Nfc),
            Some(NormalizerWrapper::NFD(_)) => Some(Form::Nfd),
            Some(NormalizerWrapper::NFKC(_)) => Some(Form::Nfkc),
            Some(NormalizerWrapper::NFKD(_)) => Some(Form::Nfkd),
            Some(_) => None,
        };
        let gpt2_split = matches!(
            t.get_pre_tokenizer(),
            Some(PreTokenizerWrapper::ByteLevel(b)) if b.use_regex && !b.add_prefix_space
        );
        let ModelWrapper::BPE(bpe) = t.get_model() else {
            return None;
        };
        let plain_bpe = matches!(bpe.dropout, None | Some(0.0))
            && bpe.continuing_subword_prefix.is_none()
            && bpe.end_of_word_suffix.is_none()
            && !bpe.ignore_merges;
        let form = form?;
        if !(gpt2_split
            && plain_bpe
            && !t.get_encode_special_tokens()
            && one_sequence(t)
            && t.get_truncation().is_none()
            && t.get_padding().is_none())
        {
            return None;
        }
        // The model's own vocabulary (a copy of its token → id map). Not through
        // `serde_json::to_value(bpe)`: `tokenizers` serializes a vocabulary by walking every
        // id up to the largest, listing and printing to stdout each one missing.
        let vocab = tokenizers::Model::get_vocab(bpe);
        let id = |token: &str| vocab.get(token).copied();
        // Every ASCII byte's token is needed; a byte beyond ASCII without one (ModernBERT's
        // vocabulary leaves out those UTF-8 never holds: 0xc0, 0xc1, 0xf5-0xff) keeps
        // `NO_TOKEN`, and text holding it goes through `tokenizers`.
        let mut byte_ids = [NO_TOKEN; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            let token = id(byte_symbol(b as u8).encode_utf8(&mut [0; 4]));
            match token {
                Some(token) => *slot = token,
                None if b < 128 => return None,
                None => {}
            }
        }
        // The merges as `tokenizers` ranks them: their index in the file's list (the legacy
        // `"a b"` form without its `#version` lines), a pair listed twice taking its last
        // rank and result, as the model's map does when it is collected.
        let listed = merges.as_array()?;
        let mut merges = FxHashMap::default();
        merges.reserve(listed.len());
        let pairs = listed.iter().filter(
            |pair| !matches!(pair, serde_json::Value::String(s) if s.starts_with("#version")),
        );
        for (rank, pair) in pairs.enumerate() {
            let (a, b) = match pair {
                serde_json::Value::Array(p) if p.len() == 2 => (p[0].as_str()?, p[1].as_str()?),
                serde_json::Value::String(s) => s.split_once(' ')?,
                _ => return None,
            };
            let merged = id(&format!("{a}{b}"))?;
            merges.insert((id(a)?, id(b)?), (u32::try_from(rank).ok()?, merged));
        }
        // As `tokenizers` builds its two searches: a normalized token is looked for by its
        // normalized text (NFC can make ASCII of a token that is not: the Kelvin sign is `K`).
        let (mut plain, mut normalized) = (Vec::new(), Vec::new());
        for (id, token) in t.get_added_tokens_decoder() {
            let flagged = token.lstrip || token.rstrip || token.single_word;
            if !token.normalized {
                plain.push((token.content, id, flagged));
                continue;
            }
            let mut text = NormalizedString::from(token.content.as_str());
            if let Some(n) = t.get_normalizer() {
                n.normalize(&mut text).ok()?;
            }
            normalized.push((text.get().to_owned(), id, flagged));
        }
        Some(ByteBpe {
            byte_ids,
            form,
            split_pattern: SysRegex::new(SPLIT_PATTERN).ok()?,
            merges,
            plain: AddedSplit::new(plain)?,
            normalized: AddedSplit::new(normalized)?,
            cache: RwLock::new(WordCache::default()),
        })
    }

    /// The ids of `text`, or `None` when it holds an added token that takes the spaces around
    /// it or must stand as a word, or a piece the normalizer might change.
    pub(super) fn encode(&self, text: &str) -> Option<Vec<u32>> {
        if !text.is_ascii()
            && text
                .bytes()
                .any(|b| self.byte_ids[usize::from(b)] == NO_TOKEN)
        {
            return None;
        }
        let mut ids = Vec::with_capacity(text.len() / 3 + 1);
        // `tokenizers` normalizes each piece the plain tokens leave, then searches it for the
        // normalized ones. A piece the normalizer is seen to keep as it is (ASCII always) is
        // searched as it stands; any other sends the whole text to `tokenizers`.
        self.split(&self.plain, text, &mut ids, &mut |piece, ids| {
            if !self.form.keeps(piece) {
                return None;
            }
            self.split(&self.normalized, piece, ids, &mut |piece, ids| {
                self.pieces(piece, ids);
                Some(())
            })
        })?;
        Some(ids)
    }

    /// Appends the ids of `text` split on `added`'s tokens, the text between them through
    /// `between`.
    fn split(
        &self,
        added: &AddedSplit,
        text: &str,
        ids: &mut Vec<u32>,
        between: &mut dyn FnMut(&str, &mut Vec<u32>) -> Option<()>,
    ) -> Option<()> {
        let mut last = 0;
        for m in added.automaton.find_iter(text) {
            let (id, flagged) = added.tokens[m.pattern().as_usize()];
            if flagged {
                return None;
            }
            if m.start() > last {
                between(&text[last..m.start()], ids)?;
            }
            ids.push(id);
            last = m.end();
        }
        if last < text.len() {
            between(&text[last..], ids)?;
        }
        Some(())
    }

    /// Appends the ids of text without added tokens: the pre-tokenizer's pieces, merged.
    fn pieces(&self, text: &str, ids: &mut Vec<u32>) {
        let bytes = text.as_bytes();
        if !text.is_ascii() {
            // The pre-tokenizer's own pattern and engine; what it does not match stays a piece.
            let mut last = 0;
            for (start, end) in self.split_pattern.find_iter(text) {
                if start > last {
                    self.word(&bytes[last..start], ids);
                }
                self.word(&bytes[start..end], ids);
                last = end;
            }
            if last < bytes.len() {
                self.word(&bytes[last..], ids);
            }
            return;
        }
        let mut at = 0;
        while at < bytes.len() {
            let end = piece_end(bytes, at);
            self.word(&bytes[at..end], ids);
            at = end;
        }
    }

    /// Appends the ids of one piece of the split.
    fn word(&self, word: &[u8], out: &mut Vec<u32>) {
        // As in `tokenizers`: a cache being written is passed by, not waited for.
        if let Ok(cache) = self.cache.try_read() {
            if let Some(ids) = cache.get(word) {
                out.extend_from_slice(ids);
                return;
            }
        }
        let start = out.len();
        self.merge(word, out);
        if word.len() < CACHE_WORD_BYTES {
            if let Ok(mut cache) = self.cache.try_write() {
                if cache.len() < CACHE_WORDS {
                    cache.insert(word.into(), out[start..].into());
                }
            }
        }
    }

    /// `tokenizers`' `Word::merge_all`: the lowest-ranked adjacent pair first, the leftmost
    /// of equal ranks, with stale queue entries recognised the same way, so the same merges
    /// happen in the same order.
    fn merge(&self, word: &[u8], out: &mut Vec<u32>) {
        #[derive(Clone, Copy)]
        struct Symbol {
            id: u32,
            prev: usize,
            next: usize,
            gone: bool,
        }
        const NONE: usize = usize::MAX;
        let n = word.len();
        let mut symbols: Vec<Symbol> = word
            .iter()
            .enumerate()
            .map(|(i, &b)| Symbol {
                id: self.byte_ids[usize::from(b)],
                prev: if i == 0 { NONE } else { i - 1 },
                next: if i + 1 == n { NONE } else { i + 1 },
                gone: false,
            })
            .collect();
        // Max-heap of (lowest rank, then lowest position) first.
        let mut queue: BinaryHeap<(std::cmp::Reverse<(u32, usize)>, u32)> = symbols
            .windows(2)
            .enumerate()
            .filter_map(|(pos, w)| {
                let &(rank, merged) = self.merges.get(&(w[0].id, w[1].id))?;
                Some((std::cmp::Reverse((rank, pos)), merged))
            })
            .collect();
        while let Some((std::cmp::Reverse((_, pos)), merged)) = queue.pop() {
            let left = symbols[pos];
            if left.gone || left.next == NONE {
                continue;
            }
            let right = symbols[left.next];
            match self.merges.get(&(left.id, right.id)) {
                Some(&(_, m)) if m == merged => {}
                _ => continue,
            }
            symbols[pos].id = merged;
            symbols[pos].next = right.next;
            symbols[left.next].gone = true;
            if right.next != NONE {
                symbols[right.next].prev = pos;
            }
            let current = symbols[pos];
            if current.prev != NONE {
                let prev = symbols[current.prev];
                if let Some(&(rank, m)) = self.merges.get(&(prev.id, current.id)) {
                    queue.push((std::cmp::Reverse((rank, current.prev)), m));
                }
            }
            if current.next != NONE {
                let next = symbols[current.next];
                if let Some(&(rank, m)) = self.merges.get(&(current.id, next.id)) {
                    queue.push((std::cmp::Reverse((rank, pos)), m));
                }
            }
        }
        out.extend(symbols.iter().filter(|s| !s.gone).map(|s| s.id));
    }
}

/// Whether the post-processor leaves `encode(text, add_special_tokens=False)` the text's own
/// ids: none, or a template whose single-sequence form holds the sequence once (its special
/// tokens are left out without `add_special_tokens`).
fn one_sequence(t: &tokenizers::Tokenizer) -> bool {
    let Some(post) = t.get_post_processor() else {
        return true;
    };
    let Ok(post) = serde_json::to_value(post) else {
        return false;
    };
    if post.get("type").and_then(|v| v.as_str()) != Some("TemplateProcessing") {
        return false;
    }
    let Some(single) = post.get("single").and_then(|v| v.as_array()) else {
        return false;
    };
    let sequences: Vec<_> = single.iter().filter_map(|p| p.get("Sequence")).collect();
    single
        .iter()
        .all(|p| p.get("Sequence").is_some() || p.get("SpecialToken").is_some())
        && sequences.len() == 1
        && sequences[0].get("id").and_then(|v| v.as_str()) == Some("A")
}

/// A byte without a token in the vocabulary.
const NO_TOKEN: u32 = u32::MAX;

/// The `ByteLevel` pre-tokenizer's split (GPT-2's), as `tokenizers` 0.22.2 compiles it.
const SPLIT_PATTERN: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// The normalizers whose output the fast path can check without running them.
#[derive(Debug, Clone, Copy)]
enum Form {
    None,
    Nfc,
    Nfd,
    Nfkc,
    Nfkd,
}

impl Form {
    /// Whether normalizing `text` certainly leaves it as it is: ASCII, or a quick check that
    /// says yes (it says "maybe" wherever only running the normalizer would tell). The check
    /// is the one of the crate whose tables `tokenizers`' normalizers use.
    fn keeps(self, text: &str) -> bool {
        use unicode_normalization_alignments::{
            is_nfc_quick, is_nfd_quick, is_nfkc_quick, is_nfkd_quick,
        };
        if text.is_ascii() {
            return true;
        }
        let chars = text.chars();
        IsNormalized::Yes
            == match self {
                Form::None => return true,
                Form::Nfc => is_nfc_quick(chars),
                Form::Nfd => is_nfd_quick(chars),
                Form::Nfkc => is_nfkc_quick(chars),
                Form::Nfkd => is_nfkd_quick(chars),
            }
    }
}

/// GPT-2's byte-to-character map: the printable bytes of ASCII and Latin-1 stand for
/// themselves, the others (controls, space, DEL, the C1 block, no-break space, soft hyphen)
/// take the characters from U+0100 on, in byte order.
fn byte_symbol(b: u8) -> char {
    let code = match b {
        b'!'..=b'~' | 0xa1..=0xac | 0xae..=0xff => u32::from(b),
        0..=b' ' => 0x100 + u32::from(b),
        0x7f => 0x121,
        0x80..=0xa0 => 0x122 + u32::from(b - 0x80),
        0xad => 0x143,
    };
    char::from_u32(code).unwrap_or('\0')
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Letter,
    Digit,
    Space,
    Other,
}

/// The pre-tokenizer's classes (`\p{L}`, `\p{N}`, `\s`) on ASCII, as Oniguruma reads them.
fn class(b: u8) -> Class {
    match b {
        b'a'..=b'z' | b'A'..=b'Z' => Class::Letter,
        b'0'..=b'9' => Class::Digit,
        b'\t'..=b'\r' | b' ' => Class::Space,
        _ => Class::Other,
    }
}

/// The end of the piece that starts at `at`: the first alternative of
/// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+` that
/// matches there. Every byte is in one of the classes, so a piece starts wherever the last
/// one ended.
fn piece_end(b: &[u8], at: usize) -> usize {
    if b[at] == b'\'' {
        for tail in [&b"s"[..], b"t", b"re", b"ve", b"m", b"ll", b"d"] {
            if b[at + 1..].starts_with(tail) {
                return at + 1 + tail.len();
            }
        }
    }
    // ` ?X+`: the optional space, then a run of one class. Without the space no branch can
    // start on one, so a space not followed by such a run falls to the whitespace branches.
    let run = if b[at] == b' ' { at + 1 } else { at };
    if let Some(&first) = b.get(run) {
        let c = class(first);
        if c != Class::Space {
            let len = b[run..].iter().take_while(|&&x| class(x) == c).count();
            return run + len;
        }
    }
    let len = b[at..]
        .iter()
        .take_while(|&&x| class(x) == Class::Space)
        .count();
    let end = at + len;
    // `\s+(?!\S)` gives back the last space when a non-space follows; `\s+` takes a lone one.
    if end < b.len() && len >= 2 {
        end - 1
    } else {
        end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_symbols_are_gpt2s() {
        let ours: std::collections::HashSet<char> = (0..=255u8).map(byte_symbol).collect();
        let theirs: std::collections::HashSet<char> =
            tokenizers::pre_tokenizers::byte_level::ByteLevel::alphabet()
                .into_iter()
                .collect();
        assert_eq!(ours, theirs);
        assert_eq!(byte_symbol(0x80), '\u{122}');
        assert_eq!(byte_symbol(0xa0), '\u{142}');
        assert_eq!(byte_symbol(0xad), '\u{143}');
        assert_eq!(byte_symbol(0xe9), '\u{e9}');
        assert_eq!(byte_symbol(b' '), '\u{120}');
        assert_eq!(byte_symbol(b'\n'), '\u{10a}');
        assert_eq!(byte_symbol(0), '\u{100}');
        assert_eq!(byte_symbol(0x7f), '\u{121}');
        assert_eq!(byte_symbol(b'a'), 'a');
    }

    fn fixture_path() -> std::path::PathBuf {
        laya_fixtures::fixtures_dir()
            .join("checkpoints")
            .join("tiny")
            .join("tokenizer")
            .join("tokenizer.json")
    }

    fn fixture_tokenizer() -> tokenizers::Tokenizer {
        tokenizers::Tokenizer::from_file(fixture_path()).expect("fixture tokenizer")
    }

    /// The fixture file's `model.merges`.
    fn fixture_merges() -> serde_json::Value {
        let file: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixture_path()).expect("fixture")).expect("json");
        file["model"]["merges"].clone()
    }

    /// The merges read from the file are the model's own: the same pairs, ranks in the same
    /// order and results as `tokenizers`' serialization of the model lists them (safe on the
    /// fixture, whose vocabulary has no holes).
    #[test]
    fn merges_from_the_file_are_the_models() {
        let t = fixture_tokenizer();
        let fast = ByteBpe::of(&t, &fixture_merges()).expect("fast path");
        let ModelWrapper::BPE(bpe) = t.get_model() else {
            panic!("a BPE model")
        };
        let model = serde_json::to_value(bpe).expect("serializes");
        let vocab = model["vocab"].as_object().expect("vocab");
        let id = |s: &str| vocab[s].as_u64().expect("id") as u32;
        let listed = model["merges"].as_array().expect("merges");
        assert_eq!(fast.merges.len(), listed.len());
        for (rank, pair) in listed.iter().enumerate() {
            let (a, b) = (pair[0].as_str().expect("a"), pair[1].as_str().expect("b"));
            assert_eq!(
                fast.merges.get(&(id(a), id(b))),
                Some(&(rank as u32, id(&format!("{a}{b}")))),
                "{a} {b}"
            );
        }
        // A pair listed twice takes its last rank in `tokenizers`, and here.
        let mut merges = fixture_merges();
        let first = merges[0].clone();
        merges.as_array_mut().expect("list").push(first.clone());
        let mut file: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixture_path()).expect("fixture")).expect("json");
        file["model"]["merges"] = merges.clone();
        let t = tokenizers::Tokenizer::from_bytes(serde_json::to_vec(&file).expect("json"))
            .expect("tokenizers loads it");
        let fast = ByteBpe::of(&t, &merges).expect("fast path");
        let (a, b) = (first[0].as_str().expect("a"), first[1].as_str().expect("b"));
        let last = merges.as_array().expect("list").len() - 1;
        assert_eq!(fast.merges[&(id(a), id(b))].0, last as u32);
        assert_same_ids(&t, &fast, &["the theory of the thing", "Hello, world!"]);
    }

    /// The fast path answers each of `texts`, with `tokenizers`' ids.
    fn assert_same_ids(t: &tokenizers::Tokenizer, fast: &ByteBpe, texts: &[&str]) {
        for &text in texts {
            let full = t.encode_fast(text, false).expect("encode");
            assert_eq!(
                fast.encode(text).as_deref(),
                Some(full.get_ids()),
                "{text:?}"
            );
        }
    }

    /// A normalized added token that NFC turns into ASCII (the Kelvin sign is `K`) splits
    /// ASCII text in `tokenizers`, and so here.
    #[test]
    fn added_tokens_are_looked_for_as_normalized() {
        let mut t = fixture_tokenizer();
        t.add_tokens(&[tokenizers::AddedToken::from("\u{212a}", false).normalized(true)]);
        let fast = ByteBpe::of(&t, &fixture_merges()).expect("still a byte-level BPE tokenizer");
        assert_same_ids(&t, &fast, &["OK then", "ok then", "KK", "a Kb K"]);
        let kelvin = t.token_to_id("\u{212a}").expect("added");
        assert_eq!(
            fast.encode("OK").as_deref(),
            Some(&[t.token_to_id("O").expect("a byte's token"), kelvin][..])
        );
    }

    /// The plain tokens are looked for first, in the whole text, and the normalized ones only
    /// in what they leave: `<x>` wins over `a<`, although `a<` starts further left.
    #[test]
    fn plain_tokens_split_before_normalized_ones() {
        let mut t = fixture_tokenizer();
        t.add_special_tokens(&[tokenizers::AddedToken::from("<x>", true)]);
        t.add_tokens(&[tokenizers::AddedToken::from("a<", false).normalized(true)]);
        let fast = ByteBpe::of(&t, &fixture_merges()).expect("still a byte-level BPE tokenizer");
        let x = t.token_to_id("<x>").expect("added");
        assert_same_ids(&t, &fast, &["a<x>", "a<a<x>b", "a<xa<"]);
        let ids = fast.encode("a<x>").expect("ascii");
        assert_eq!(ids.last(), Some(&x), "{ids:?}");
        assert_ne!(ids.first(), t.token_to_id("a<").as_ref(), "{ids:?}");
    }

    /// Tokens that take the spaces around them or must stand as a word are left to
    /// `tokenizers`, wherever they occur; the text around other tokens is not.
    #[test]
    fn tokens_with_spacing_rules_go_through_tokenizers() {
        let mut t = fixture_tokenizer();
        t.add_tokens(&[
            tokenizers::AddedToken::from("<l>", false).lstrip(true),
            tokenizers::AddedToken::from("<r>", false).rstrip(true),
            tokenizers::AddedToken::from("word", false).single_word(true),
            tokenizers::AddedToken::from("<p>", false),
        ]);
        let fast = ByteBpe::of(&t, &fixture_merges()).expect("still a byte-level BPE tokenizer");
        for text in ["a <l> b", "a <r> b", "a word b", "swordfish"] {
            assert_eq!(fast.encode(text), None, "{text:?}");
        }
        assert_same_ids(&t, &fast, &["a <p> b", "<p><p>x  <p>", "a<p>"]);
    }

    /// A template that repeats the sequence changes the ids even without special tokens.
    #[test]
    fn only_a_template_with_the_sequence_once_is_reproduced() {
        let mut t = fixture_tokenizer();
        assert!(ByteBpe::of(&t, &fixture_merges()).is_some());
        let twice = tokenizers::processors::template::TemplateProcessing::builder()
            .try_single("$A $A")
            .expect("template")
            .build()
            .expect("template");
        t.with_post_processor(Some(twice));
        assert!(ByteBpe::of(&t, &fixture_merges()).is_none());
    }

    #[test]
    fn pieces_follow_the_split_pattern() {
        fn split(s: &str) -> Vec<&str> {
            let b = s.as_bytes();
            let mut out = Vec::new();
            let mut at = 0;
            while at < b.len() {
                let end = piece_end(b, at);
                out.push(&s[at..end]);
                at = end;
            }
            out
        }
        assert_eq!(split("don't I'M"), ["don", "'t", " I", "'", "M"]);
        assert_eq!(
            split("a  b\n\nc  "),
            ["a", " ", " b", "\n", "\n", "c", "  "]
        );
        assert_eq!(split(" \nx 12 ?!"), [" ", "\n", "x", " 12", " ?!"]);
    }
}
