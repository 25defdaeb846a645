//! The checkpoint's tokenizer (`tokenizer/tokenizer.json` through the HF `tokenizers` crate),
//! with the special tokens upstream reads from `tokenizer/tokenizer_config.json`.
//!
//! Every call encodes with `add_special_tokens=False`, as upstream's `encode_text` does; the
//! `[CLS]`/`[SEP]`/`[MASK]` ids are placed by the sequence layout, not by the tokenizer.

mod byte_bpe;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use byte_bpe::ByteBpe;

/// Largest `tokenizer.json` read: it is read whole. The ModernBERT one is 3.6 MB and the
/// multilingual (256k-entry) one 34 MB.
pub const MAX_TOKENIZER_BYTES: u64 = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("cannot load tokenizer {path}: {message}")]
    Load { path: PathBuf, message: String },
    #[error("cannot read {path}: {message}")]
    Config { path: PathBuf, message: String },
    /// `tokenizer_config.json` is JSON but not of the expected form (not an object, or a
    /// special-token entry that is neither a string nor an object with a string `content`).
    #[error("{path}: {message}")]
    BadConfig { path: PathBuf, message: String },
    /// A file is over its size limit ([`MAX_TOKENIZER_BYTES`],
    /// [`crate::config::MAX_CONFIG_BYTES`]).
    #[error("{path} is larger than the {limit} bytes this file may have")]
    TooLarge { path: PathBuf, limit: u64 },
    /// A vocabulary id leaves holes no real vocabulary has: larger than the vocabulary's
    /// entries and added tokens together could need.
    #[error("{path}: token {token:?} has id {id}, but its {entries} vocabulary entries and added tokens need no id above {max}")]
    SparseVocabulary {
        path: PathBuf,
        token: String,
        id: u64,
        entries: usize,
        max: u64,
    },
    #[error(
        "tokenizer config {path} names {role} token {token:?}, which is not in the vocabulary"
    )]
    MissingToken {
        path: PathBuf,
        role: &'static str,
        token: String,
    },
    #[error("tokenization failed: {0}")]
    Encode(String),
}

/// A special token: its text (as it may appear literally in user input) and its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Special {
    pub text: String,
    pub id: u32,
}

#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// `inner` without its normalizer, for ASCII text (see [`Tokenizer::encode`]).
    ascii: Option<tokenizers::Tokenizer>,
    /// Byte-level BPE done here, for text the normalizer keeps as it is (see [`byte_bpe`]).
    fast: Option<Arc<ByteBpe>>,
    pub cls: Special,
    pub sep: Special,
    pub mask: Special,
    pub pad: Special,
    /// See [`Tokenizer::max_id`].
    max_id: u32,
}

impl Tokenizer {
    /// Loads `<dir>/tokenizer.json` and the special tokens named in `<dir>/tokenizer_config.json`.
    ///
    /// The special-token strings come from the config, never from guessing by spelling: the
    /// multilingual vocabulary also holds `<s>`/`</s>`, which are not its CLS/SEP.
    pub fn load(dir: &Path) -> Result<Self, TokenizerError> {
        let json_path = dir.join("tokenizer.json");
        let load_error = |message: String| TokenizerError::Load {
            path: json_path.clone(),
            message,
        };
        let json = read_capped(&json_path, MAX_TOKENIZER_BYTES, load_error)?;
        // Our own reading of the file, before `tokenizers` builds anything from it: the ids
        // are bounded here, and the fast path takes the merges from it.
        let file: TokenizerFile =
            serde_json::from_slice(&json).map_err(|e| load_error(e.to_string()))?;
        let max_id = file.max_id(&json_path)?;
        let inner =
            tokenizers::Tokenizer::from_bytes(&json).map_err(|e| load_error(e.to_string()))?;
        drop(json);
        let cfg_path = dir.join("tokenizer_config.json");
        let cfg_bytes = read_capped(&cfg_path, crate::config::MAX_CONFIG_BYTES, |message| {
            TokenizerError::Config {
                path: cfg_path.clone(),
                message,
            }
        })?;
        let cfg: Value =
            serde_json::from_slice(&cfg_bytes).map_err(|e| TokenizerError::Config {
                path: cfg_path.clone(),
                message: e.to_string(),
            })?;
        let bad_config = |message: String| TokenizerError::BadConfig {
            path: cfg_path.clone(),
            message,
        };
        let cfg = cfg
            .as_object()
            .ok_or_else(|| bad_config("the file must hold a JSON object".into()))?;
        let special =
            |role: &'static str, key: &str, default: &str| -> Result<Special, TokenizerError> {
                // Absent or null: the family's default spelling. Anything else must name the
                // token: a malformed entry read as the default would put the wrong markers in
                // every row of a vocabulary that spells its tokens otherwise.
                let text = match cfg.get(key) {
                    None | Some(Value::Null) => default.to_owned(),
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Object(o)) => match o.get("content") {
                        Some(Value::String(s)) => s.clone(),
                        _ => {
                            return Err(bad_config(format!(
                                "'{key}' is an object without a string 'content'"
                            )))
                        }
                    },
                    Some(other) => {
                        return Err(bad_config(format!(
                    "'{key}' must be a string or an object with a string 'content', got {other}"
                )))
                    }
                };
                let id = inner
                    .token_to_id(&text)
                    .ok_or_else(|| TokenizerError::MissingToken {
                        path: cfg_path.clone(),
                        role,
                        token: text.clone(),
                    })?;
                Ok(Special { text, id })
            };
        let ascii = ascii_identity(&inner).then(|| {
            let mut t = inner.clone();
            t.with_normalizer(None::<tokenizers::NormalizerWrapper>);
            t
        });
        let fast = file
            .added_contents_unique()
            .then(|| ByteBpe::of(&inner, file.model.merges.as_ref()?))
            .flatten()
            .map(Arc::new);
        Ok(Tokenizer {
            ascii,
            fast,
            cls: special("cls", "cls_token", "[CLS]")?,
            sep: special("sep", "sep_token", "[SEP]")?,
            mask: special("mask", "mask_token", "[MASK]")?,
            pad: special("pad", "pad_token", "[PAD]")?,
            max_id,
            inner,
        })
    }

    /// The largest id of the vocabulary and the added tokens: every id the tokenizer can give
    /// is at most this.
    pub fn max_id(&self) -> u32 {
        self.max_id
    }

    /// `tokenizer(text, add_special_tokens=False)["input_ids"]`.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        if let Some(ids) = self.fast.as_ref().and_then(|f| f.encode(text)) {
            return Ok(ids);
        }
        let tokenizer = match &self.ascii {
            Some(t) if text.is_ascii() => t,
            _ => &self.inner,
        };
        let enc = tokenizer
            .encode_fast(text, false)
            .map_err(|e| TokenizerError::Encode(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// `tokenizer.decode(ids)` as transformers 5.24 does it for a BPE tokenizer: special tokens
    /// kept and no `clean_up_tokenization_spaces` pass (5.24 skips it for BPE models; the
    /// reference answers of `predict_long` were made with that version).
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, false)
            .map_err(|e| TokenizerError::Encode(e.to_string()))
    }

    /// Replaces every occurrence of the mask token's text with one space, as upstream does to
    /// instructions, options and the serialized state, so user text cannot forge a marker.
    pub fn scrub_mask(&self, text: &str) -> String {
        text.replace(&self.mask.text, " ")
    }
}

/// `tokenizer.json` as this module reads it, beside `tokenizers`: the added tokens, the
/// model's vocabulary and (for BPE) its merges, each left as JSON.
#[derive(serde::Deserialize)]
struct TokenizerFile {
    #[serde(default)]
    added_tokens: Vec<AddedEntry>,
    model: ModelEntry,
}

#[derive(serde::Deserialize)]
struct AddedEntry {
    id: u64,
    content: String,
}

#[derive(serde::Deserialize)]
struct ModelEntry {
    /// `{token: id}` (BPE, WordPiece, WordLevel) or `[[piece, score], ...]` (Unigram).
    #[serde(default)]
    vocab: Option<Value>,
    #[serde(default)]
    merges: Option<Value>,
}

impl TokenizerFile {
    /// The largest id in the file, refused past what its entries could need.
    ///
    /// A vocabulary of `n` entries and `a` added tokens needs no id above `n + a - 1`; one
    /// that says `"the": 4294967294` is broken. `tokenizers` itself loads it, but each pass
    /// that serializes the vocabulary then builds a list of every missing id (gigabytes) and
    /// prints it to stdout.
    fn max_id(&self, path: &Path) -> Result<u32, TokenizerError> {
        let listed: Vec<(&str, u64)> = match &self.model.vocab {
            Some(Value::Object(m)) => m
                .iter()
                .map(|(token, id)| {
                    id.as_u64()
                        .map(|id| (token.as_str(), id))
                        .ok_or_else(|| TokenizerError::Load {
                            path: path.to_owned(),
                            message: format!("vocabulary entry {token:?} has id {id}, not an id"),
                        })
                })
                .collect::<Result<_, _>>()?,
            // Unigram: the id is the index.
            Some(Value::Array(a)) => (0..a.len() as u64).map(|id| ("", id)).collect(),
            _ => Vec::new(),
        };
        let entries = listed.len().saturating_add(self.added_tokens.len());
        let max = (entries as u64).saturating_sub(1);
        let ids = listed
            .into_iter()
            .chain(self.added_tokens.iter().map(|a| (a.content.as_str(), a.id)));
        let mut largest = 0u32;
        for (token, id) in ids {
            if id > max {
                return Err(TokenizerError::SparseVocabulary {
                    path: path.to_owned(),
                    token: token.to_owned(),
                    id,
                    entries,
                    max,
                });
            }
            // `id <= max`, which is below the entry count: it fits u32 unless the file holds
            // over four billion entries, which the size cap rules out.
            largest = largest.max(u32::try_from(id).unwrap_or(u32::MAX));
        }
        Ok(largest)
    }

    /// Whether each of the file's added tokens has a text of its own. `tokenizers` keeps every
    /// entry of a repeated text in its searches for added tokens but shows only the last
    /// (`get_added_tokens_decoder`), which is all the fast path can read; files that
    /// `tokenizers` writes repeat none, and a file that does is left to `tokenizers` whole.
    fn added_contents_unique(&self) -> bool {
        let mut seen = std::collections::HashSet::new();
        self.added_tokens.iter().all(|e| seen.insert(&e.content))
    }
}

/// [`read_capped`](crate::config::read_capped) with this module's errors, `io` making the
/// one for a failed read.
fn read_capped(
    path: &Path,
    limit: u64,
    io: impl FnOnce(String) -> TokenizerError,
) -> Result<Vec<u8>, TokenizerError> {
    use crate::config::CappedReadError;
    crate::config::read_capped(path, limit).map_err(|e| match e {
        CappedReadError::Io(e) => io(e.to_string()),
        CappedReadError::TooLarge => TokenizerError::TooLarge {
            path: path.to_owned(),
            limit,
        },
    })
}

/// Whether the normalizer is one that leaves every ASCII text as it is (NFC, NFD, NFKC,
/// NFKD), so that skipping it for ASCII input gives the same tokens. The copy without it
/// holds its own vocabulary and BPE cache (a few MB for ModernBERT's).
fn ascii_identity(t: &tokenizers::Tokenizer) -> bool {
    use tokenizers::normalizers::NormalizerWrapper as N;
    matches!(
        t.get_normalizer(),
        Some(N::NFC(_) | N::NFD(_) | N::NFKC(_) | N::NFKD(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ASCII text skips the normalizer; the tokens must be the full pipeline's.
    #[test]
    fn ascii_shortcut_gives_the_full_pipelines_tokens() {
        let dirs = ["tiny", "tiny-english", "tiny-multilingual-shape"].map(|c| {
            laya_fixtures::fixtures_dir()
                .join("checkpoints")
                .join(c)
                .join("tokenizer")
        });
        let texts = [
            "",
            " ",
            "Hello, world!",
            "  leading and trailing spaces  ",
            "tabs\tand\nnew\r\nlines",
            "[MASK] [CLS][SEP] [PAD] mask: [MASK]x",
            "{\"state\": {\"cart\": [1, 2.50, -3e7], \"user\": null}}",
            "CamelCase snake_case kebab-case e-mail@example.com http://a.b/c?d=e&f",
            "'s 't 're 've 'm 'll 'd don't I'M",
            "0123456789 1,000,000 3.14159 v2.0.1",
            "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
        ];
        for dir in &dirs {
            let t = Tokenizer::load(dir).expect("fixture tokenizer");
            assert!(
                t.ascii.is_some(),
                "{}: NFC, so ASCII may skip it",
                dir.display()
            );
            let long = texts.join(" ").repeat(20);
            for text in texts.iter().copied().chain([long.as_str()]) {
                let full = t.inner.encode_fast(text, false).expect("encode");
                assert_eq!(t.encode(text).expect("encode"), full.get_ids(), "{text:?}");
            }
            // Text that NFC changes still goes through it: `e` + combining acute is `é`.
            let composed = t.encode("caf\u{e9}").expect("encode");
            assert_eq!(t.encode("cafe\u{301}").expect("encode"), composed);
        }
    }

    /// The fixture tokenizers' texts: the hand-picked ones, every line of every workload
    /// (JSON like the states upstream serializes) and random ASCII, heavy in what the split
    /// pattern turns on (apostrophes, spaces, controls, digits next to letters).
    fn sample_texts() -> Vec<String> {
        let mut texts: Vec<String> = [
            "",
            " ",
            "a",
            "Hello, world!",
            "don't I'M we're they've I'd you'll 's",
            "tabs\tand\nnew\r\nlines\x0b\x0c end",
            " \nx 12 ?! a\n\nb",
            "{\"cart\": [1, 2.50, -3e7], \"user\": null, \"ok\": true}",
            "CamelCase snake_case e-mail@example.com http://a.b/c?d=e&f",
            "\x00\x01\x1c\x1f\x7f controls",
        ]
        .map(String::from)
        .to_vec();
        let workloads = laya_fixtures::fixtures_dir().join("workloads");
        let mut files: Vec<_> = std::fs::read_dir(&workloads)
            .expect("fixture workloads")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        files.sort();
        for file in files {
            let body = std::fs::read_to_string(&file).expect("workload");
            texts.extend(body.lines().map(String::from));
        }
        // A fixed xorshift stream: the same texts on every run.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        // Runs of spaces (added tokens of two to 24 in the ModernBERT tokenizer) and other
        // added tokens, so that the splits on them are compared too.
        let pieces: [&str; 20] = [
            "'",
            "s",
            "t",
            "re",
            "ve",
            "m",
            "ll",
            "d",
            " ",
            "\n",
            "x",
            "Q",
            "7",
            "-",
            "  ",
            "     ",
            "[CLS]",
            "[unused7]",
            "<|padding|>",
            "|||EMAIL_ADDRESS|||",
        ];
        // Each character from one of `pools`, or (twice as likely) any ASCII byte.
        let mut random = |count: usize, max_len: u64, pools: &[&[&str]]| {
            let k = pools.len() as u64 + 2;
            for _ in 0..count {
                let len = next() % max_len;
                let mut t = String::new();
                for _ in 0..len {
                    let r = next();
                    match pools.get((r % k) as usize) {
                        Some(pool) => t.push_str(pool[(r / k % pool.len() as u64) as usize]),
                        None => t.push(char::from((r / k % 128) as u8)),
                    }
                }
                texts.push(t);
            }
        };
        random(20_000, 48, &[&pieces]);
        // Text beyond ASCII: letters, digits and spaces of other scripts and both of Unicode's
        // spaces classes, four-byte characters, and characters the normalizer changes or might
        // (a combining acute, the Angstrom and Kelvin signs, a ligature, a superscript).
        let wide: [&str; 28] = [
            "\u{e9}",
            "\u{df}",
            "\u{f1}",
            "\u{2019}",
            "\u{201c}",
            "\u{201d}",
            "\u{2014}",
            "\u{2026}",
            "\u{20ac}",
            "\u{4e2d}\u{6587}",
            "\u{65e5}\u{672c}",
            "\u{439}",
            "\u{3a9}",
            "\u{627}\u{644}",
            "\u{a0}",
            "\u{3000}",
            "\u{2028}",
            "\u{1f600}",
            "\u{301}",
            "\u{fb01}",
            "\u{212b}",
            "\u{212a}",
            "\u{2460}",
            "\u{b2}",
            "\u{663}",
            "\u{1c5}",
            "\u{85}",
            "\u{ad}",
        ];
        random(20_000, 32, &[&pieces, &wide]);
        texts
    }

    /// A file that repeats an added token's text gets no fast path: `tokenizers` searches for
    /// each entry, and only the last is visible to the fast path.
    #[test]
    fn repeated_added_tokens_leave_the_fast_path_off() {
        let from = laya_fixtures::fixtures_dir()
            .join("checkpoints")
            .join("tiny")
            .join("tokenizer");
        let json = std::fs::read(from.join("tokenizer.json")).expect("fixture");
        let parsed: TokenizerFile = serde_json::from_slice(&json).expect("tokenizer file");
        assert!(parsed.added_contents_unique());
        let mut file: Value = serde_json::from_slice(&json).expect("json");
        let added = file["added_tokens"].as_array_mut().expect("added tokens");
        let mut again = added
            .iter()
            .find(|e| e["content"] == "[unused0]")
            .expect("[unused0]")
            .clone();
        again["normalized"] = Value::Bool(false);
        added.push(again);
        let dir =
            std::env::temp_dir().join(format!("laya-tokenizer-repeat-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(
            dir.join("tokenizer.json"),
            serde_json::to_vec(&file).expect("json"),
        )
        .expect("write");
        std::fs::copy(
            from.join("tokenizer_config.json"),
            dir.join("tokenizer_config.json"),
        )
        .expect("copy");
        let t = Tokenizer::load(&dir).expect("tokenizers reads it");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(t.fast.is_none());
        let text = "x [unused0] y";
        let full = t.inner.encode_fast(text, false).expect("encode");
        assert_eq!(t.encode(text).expect("encode"), full.get_ids());
    }

    /// The byte-level fast path gives `tokenizers`' ids wherever it answers, and answers for
    /// most text, text split on added tokens (runs of spaces, `[CLS]`) included.
    #[test]
    fn fast_path_gives_the_full_pipelines_tokens() {
        let texts = sample_texts();
        for c in ["tiny", "tiny-english", "tiny-multilingual-shape"] {
            let dir = laya_fixtures::fixtures_dir()
                .join("checkpoints")
                .join(c)
                .join("tokenizer");
            let t = Tokenizer::load(&dir).expect("fixture tokenizer");
            let fast = t
                .fast
                .as_ref()
                .expect("a byte-level BPE tokenizer gets the fast path");
            let (mut answered, mut split, mut wide) = (0, 0, 0);
            for text in &texts {
                let Some(ids) = fast.encode(text) else {
                    continue;
                };
                answered += 1;
                split += usize::from(text.contains("  ") || text.contains("[CLS]"));
                wide += usize::from(!text.is_ascii());
                let full = t.inner.encode_fast(text.as_str(), false).expect("encode");
                assert_eq!(ids, full.get_ids(), "{c}: {text:?}");
                // The second time comes from the cache.
                assert_eq!(fast.encode(text), Some(ids), "{c}: {text:?} cached");
            }
            assert!(
                answered * 2 > texts.len(),
                "{c}: the fast path answered {answered} of {} texts",
                texts.len()
            );
            assert!(
                split * 4 > texts.len(),
                "{c}: only {split} answered texts held an added token"
            );
            assert!(
                wide * 10 > texts.len(),
                "{c}: only {wide} answered texts were not ASCII"
            );
            // `[MASK]` takes the spaces before it, and NFC composes `e` and a combining acute:
            // both go through `tokenizers`.
            for text in ["a [MASK] b", "cafe\u{301}"] {
                assert!(fast.encode(text).is_none(), "{text:?}");
            }
        }
    }
}
