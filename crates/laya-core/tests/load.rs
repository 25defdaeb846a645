//! Loading checkpoints that are not what they should be: each is refused at load with an error
//! naming the file and the key or tensor, instead of aborting the process on an allocation
//! or loading and then failing every request. Each test edits a scratch copy of the tiny
//! fixture checkpoint.

use std::fs;
use std::path::{Path, PathBuf};

use laya_core::agent::{Agent, LoadError};
use laya_core::checkpoint::{try_expected_tensors, CheckpointTensors, TensorError, TensorSpec};
use laya_core::config::{CheckpointConfig, ConfigError, MAX_LAYERS};
use laya_core::tokenizer::{Tokenizer, TokenizerError};
use laya_fixtures::{fixtures_dir, Recorded};
use serde_json::{json, Map, Value};

fn tiny() -> PathBuf {
    fixtures_dir().join("checkpoints").join("tiny")
}

/// A scratch copy of the tiny checkpoint (removed on drop). `model.safetensors` is linked
/// rather than copied where a test leaves it as it is.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("laya-core-load-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let src = tiny();
        for sub in ["encoder", "tokenizer"] {
            fs::create_dir_all(dir.join(sub)).expect("mkdir");
        }
        for f in [
            "rl_agent_config.json",
            "encoder/config.json",
            "tokenizer/tokenizer.json",
            "tokenizer/tokenizer_config.json",
            "model.safetensors",
        ] {
            fs::copy(src.join(f), dir.join(f)).expect("copy fixture");
        }
        Scratch { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// Rewrites the JSON file `rel` through `edit`.
    fn edit_json(&self, rel: &str, edit: impl FnOnce(&mut Map<String, Value>)) {
        let p = self.path(rel);
        let mut v: Value = serde_json::from_slice(&fs::read(&p).expect("read")).expect("json");
        edit(v.as_object_mut().expect("object"));
        fs::write(&p, serde_json::to_vec(&v).expect("json")).expect("write");
    }

    /// Rewrites `model.safetensors` with the header text `edit` returns (tensor data kept).
    fn edit_header_text(&self, edit: impl FnOnce(String) -> String) {
        let p = self.path("model.safetensors");
        let bytes = fs::read(&p).expect("read");
        let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
        let text = String::from_utf8(bytes[8..8 + n].to_vec()).expect("utf-8 header");
        let mut h = edit(text).into_bytes();
        h.resize(h.len().next_multiple_of(8), b' ');
        let mut out = (h.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&h);
        out.extend_from_slice(&bytes[8 + n..]);
        fs::write(&p, out).expect("write");
    }

    /// Rewrites `model.safetensors` with its header parsed and edited.
    fn edit_header(&self, edit: impl FnOnce(&mut Map<String, Value>)) {
        self.edit_header_text(|text| {
            let mut h: Map<String, Value> = serde_json::from_str(&text).expect("header");
            edit(&mut h);
            Value::Object(h).to_string()
        });
    }

    /// Overwrites the `index`-th 16-bit element of tensor `name` (an F16 tensor) with `bits`.
    fn poke_f16(&self, name: &str, index: usize, bits: u16) {
        let p = self.path("model.safetensors");
        let mut bytes = fs::read(&p).expect("read");
        let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
        let h: Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
        assert_eq!(h[name]["dtype"], "F16", "{name}");
        let begin = h[name]["data_offsets"][0].as_u64().expect("offset") as usize;
        let at = 8 + n + begin + 2 * index;
        bytes[at..at + 2].copy_from_slice(&bits.to_le_bytes());
        fs::write(&p, bytes).expect("write");
    }

    fn config(&self) -> Result<CheckpointConfig, ConfigError> {
        CheckpointConfig::load(&self.dir)
    }

    fn agent(&self) -> Result<Agent<Recorded>, LoadError> {
        Agent::load(&self.dir, Recorded::for_checkpoint("tiny"))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The error is `Invalid` for `file`, and its text names `key`.
fn assert_invalid(r: Result<CheckpointConfig, ConfigError>, file: &str, key: &str) {
    let e = r.expect_err("must be refused");
    assert!(
        matches!(&e, ConfigError::Invalid { path, .. } if path.ends_with(file)),
        "{e}"
    );
    let text = e.to_string();
    assert!(text.contains(key), "{text}");
}

/// Item 1: a layer count of 1e12 allocated a Vec per layer (a 1 TB allocation: abort).
#[test]
fn absurd_layer_counts_are_refused_naming_the_file_and_key() {
    let s = Scratch::new("layers");
    s.edit_json("encoder/config.json", |c| {
        c.remove("layer_types");
        c.insert("num_hidden_layers".into(), json!(1_000_000_000_000u64));
    });
    assert_invalid(s.config(), "encoder/config.json", "num_hidden_layers");
    // With `layer_types` the list bounds the count, but the cap holds the same.
    s.edit_json("encoder/config.json", |c| {
        c.insert("num_hidden_layers".into(), json!(MAX_LAYERS + 1));
        c.insert(
            "layer_types".into(),
            json!(vec!["full_attention"; MAX_LAYERS + 1]),
        );
    });
    assert_invalid(s.config(), "encoder/config.json", "num_hidden_layers");

    let s = Scratch::new("head-layers");
    s.edit_json("rl_agent_config.json", |c| {
        c.insert("head_layers".into(), json!(1_000_000_000u64));
    });
    assert_invalid(s.config(), "rl_agent_config.json", "head_layers");
}

/// Item 1: sizes whose multiples (`3d`, `4d`, `2I`, `d + 4`) overflow are refused at the
/// config, and the inventory computed from configs built in code reports them instead of
/// wrapping.
#[test]
fn overflowing_dimensions_are_refused() {
    let s = Scratch::new("dims");
    s.edit_json("encoder/config.json", |c| {
        c.insert("hidden_size".into(), json!(1u64 << 62));
        c.insert("num_attention_heads".into(), json!(1));
    });
    assert_invalid(s.config(), "encoder/config.json", "hidden_size");
    let s = Scratch::new("inter");
    s.edit_json("encoder/config.json", |c| {
        c.insert("intermediate_size".into(), json!(u64::MAX / 2 + 1));
    });
    assert_invalid(s.config(), "encoder/config.json", "intermediate_size");

    let mut cfg = CheckpointConfig::load(&tiny()).expect("fixture configs");
    let specs: Vec<TensorSpec> = try_expected_tensors(&cfg).expect("fixture inventory");
    assert_eq!(specs.len(), 2 + 6 * 5 + 5 + 1 + 2 * 12 + 12);
    cfg.encoder.hidden_size = usize::MAX / 3 + 1;
    let e = try_expected_tensors(&cfg).expect_err("3d overflows");
    assert!(matches!(e, TensorError::Inventory { .. }), "{e}");
    cfg.encoder.hidden_size = 64;
    cfg.encoder.intermediate_size = usize::MAX / 2 + 1;
    assert!(try_expected_tensors(&cfg).is_err());
    cfg.encoder.intermediate_size = 96;
    cfg.agent.head_layers = 1_000_000_000;
    let e = try_expected_tensors(&cfg).expect_err("too many head layers");
    assert!(e.to_string().contains("head_layers"), "{e}");
}

/// Item 3: the CUDA engine sizes its RoPE tables from these (1e12: abort).
#[test]
fn absurd_position_counts_are_refused() {
    let s = Scratch::new("positions");
    s.edit_json("encoder/config.json", |c| {
        c.insert(
            "max_position_embeddings".into(),
            json!(1_000_000_000_000u64),
        );
    });
    assert_invalid(s.config(), "encoder/config.json", "max_position_embeddings");
    let s = Scratch::new("max-len");
    s.edit_json("rl_agent_config.json", |c| {
        c.insert("max_len".into(), json!(1_000_000_000_000u64));
    });
    assert_invalid(s.config(), "rl_agent_config.json", "max_len");
    // The published values load.
    let cfg = CheckpointConfig::load(&tiny()).expect("fixture configs");
    assert_eq!(cfg.encoder.max_position_embeddings, 8192);
}

/// Item 4: values that load and then make every request fail are refused at load.
#[test]
fn unusable_float_settings_are_refused_naming_the_key() {
    let cases: [(&str, Value, &str); 9] = [
        ("norm_eps", json!(0.0), "norm_eps"),
        ("norm_eps", json!(-1e-5), "norm_eps"),
        ("norm_eps", json!("1e-5"), "norm_eps"),
        // Finite in JSON, zero or infinite as the f32 the engines use.
        ("norm_eps", json!(1e-60), "norm_eps"),
        (
            "rope_theta_global",
            json!(1e39),
            "full_attention.rope_theta",
        ),
        ("rope_theta_global", json!(0), "full_attention.rope_theta"),
        (
            "rope_theta_local",
            json!(-10000.0),
            "sliding_attention.rope_theta",
        ),
        (
            "rope_theta_local",
            json!([1]),
            "sliding_attention.rope_theta",
        ),
        ("local_rope_theta", json!(-1.0), "local_rope_theta"),
    ];
    for (i, (what, value, key)) in cases.into_iter().enumerate() {
        let s = Scratch::new(&format!("float-{i}"));
        s.edit_json("encoder/config.json", |c| match what {
            "norm_eps" => {
                c.insert("norm_eps".into(), value.clone());
            }
            "rope_theta_global" => {
                c["rope_parameters"]["full_attention"]["rope_theta"] = value.clone();
            }
            "rope_theta_local" => {
                c["rope_parameters"]["sliding_attention"]["rope_theta"] = value.clone();
            }
            _ => {
                // The transformers 4.x layout.
                c.remove("rope_parameters");
                c.insert(what.into(), value.clone());
            }
        });
        assert_invalid(s.config(), "encoder/config.json", key);
    }
    // `layer_norm_eps` stands in when `norm_eps` is absent.
    let s = Scratch::new("legacy-eps");
    s.edit_json("encoder/config.json", |c| {
        c.remove("norm_eps");
        c.insert("layer_norm_eps".into(), json!(-1));
    });
    assert_invalid(s.config(), "encoder/config.json", "layer_norm_eps");
    let s = Scratch::new("legacy-eps-ok");
    s.edit_json("encoder/config.json", |c| {
        c.remove("norm_eps");
        c.insert("layer_norm_eps".into(), json!(1e-6));
    });
    assert_eq!(s.config().expect("loads").encoder.norm_eps, 1e-6);
}

/// Item 4: a NaN or an infinity among the weights is refused as the tensor is read, naming
/// it and the element, in either read.
#[test]
fn non_finite_weights_are_refused_naming_the_tensor() {
    let name = "encoder.layers.1.attn.Wo.weight";
    for (tag, bits) in [("inf", 0x7c00u16), ("nan", 0x7e00), ("neg-inf", 0xfc00)] {
        let s = Scratch::new(&format!("weights-{tag}"));
        s.poke_f16(name, 1234, bits);
        let cfg = s.config().expect("configs");
        let t = CheckpointTensors::open(&s.dir, &cfg).expect("the header is fine");
        for e in [
            t.read_f16_bits(name).expect_err("f16 read"),
            t.read_f32(name).expect_err("f32 read"),
        ] {
            assert!(
                matches!(&e, TensorError::NonFinite { name: n, index: 1234 } if n == name),
                "{e}"
            );
        }
        // Other tensors read as before.
        t.read_f16_bits("encoder.layers.0.attn.Wo.weight")
            .expect("untouched tensor");
    }
    // The fixture itself is finite throughout.
    let cfg = CheckpointConfig::load(&tiny()).expect("configs");
    let t = CheckpointTensors::open(&tiny(), &cfg).expect("fixture");
    for spec in try_expected_tensors(&cfg).expect("inventory") {
        t.read_f32(&spec.name).expect("finite");
    }
}

/// Item 5: a `vocab_size` below the tokenizer's ids loaded, reported ready, and failed every
/// request (500).
#[test]
fn a_vocabulary_smaller_than_the_tokenizers_is_refused() {
    let s = Scratch::new("vocab-10");
    s.edit_json("encoder/config.json", |c| {
        c.insert("vocab_size".into(), json!(10));
    });
    let e = s.agent().err().expect("must be refused");
    let text = e.to_string();
    assert!(
        matches!(
            &e,
            LoadError::Vocabulary {
                id: 50281,
                vocab_size: 10,
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains("[CLS]") && text.contains("encoder/config.json"),
        "{text}"
    );
    // Every special token fits, but not the largest id (50367, `[unused82]`).
    let s = Scratch::new("vocab-50300");
    s.edit_json("encoder/config.json", |c| {
        c.insert("vocab_size".into(), json!(50300));
    });
    let e = s.agent().err().expect("must be refused");
    assert!(matches!(&e, LoadError::Vocabulary { id: 50367, .. }), "{e}");
    let s = Scratch::new("vocab-ok");
    let agent = s.agent().expect("the fixture loads");
    assert_eq!(agent.tokenizer.max_id(), 50367);
}

fn tokenizer_error(s: &Scratch) -> TokenizerError {
    Tokenizer::load(&s.path("tokenizer")).expect_err("must be refused")
}

/// Item 2: a vocabulary id far past the entries used to make the fast path's serialization
/// list (and print) every missing id, then abort on an 8 GB allocation.
#[test]
fn a_sparse_vocabulary_is_refused() {
    for id in [5_000_000u64, 4_294_967_294] {
        let s = Scratch::new(&format!("sparse-{id}"));
        s.edit_json("tokenizer/tokenizer.json", |t| {
            t["model"]["vocab"]["the"] = json!(id);
        });
        let e = tokenizer_error(&s);
        assert!(
            matches!(&e, TokenizerError::SparseVocabulary { token, id: got, .. }
                if token == "the" && *got == id),
            "{e}"
        );
        assert!(e.to_string().contains("tokenizer.json"), "{e}");
    }
    // So is an added token's.
    let s = Scratch::new("sparse-added");
    s.edit_json("tokenizer/tokenizer.json", |t| {
        t["added_tokens"][0]["id"] = json!(70_000);
    });
    assert!(matches!(
        tokenizer_error(&s),
        TokenizerError::SparseVocabulary { id: 70_000, .. }
    ));
}

/// Item 8: a malformed `tokenizer_config.json` was read as if it named the default tokens.
#[test]
fn a_malformed_tokenizer_config_is_refused_naming_the_key() {
    let cases: [(&str, &str); 5] = [
        ("[1, 2]", "JSON object"),
        (r#"{"mask_token": {"content": 5}}"#, "mask_token"),
        (r#"{"cls_token": 5}"#, "cls_token"),
        (r#"{"sep_token": ["[SEP]"]}"#, "sep_token"),
        (r#"{"pad_token": {"lstrip": false}}"#, "pad_token"),
    ];
    for (i, (text, key)) in cases.into_iter().enumerate() {
        let s = Scratch::new(&format!("tokcfg-{i}"));
        fs::write(s.path("tokenizer/tokenizer_config.json"), text).expect("write");
        let e = tokenizer_error(&s);
        assert!(
            matches!(&e, TokenizerError::BadConfig { path, .. } if path.ends_with("tokenizer_config.json")),
            "{text}: {e}"
        );
        assert!(e.to_string().contains(key), "{e}");
    }
    // An object with a string `content`, a string, null and absence all still load.
    let s = Scratch::new("tokcfg-ok");
    fs::write(
        s.path("tokenizer/tokenizer_config.json"),
        r#"{"mask_token": {"content": "[MASK]", "lstrip": true}, "cls_token": "[CLS]", "sep_token": null}"#,
    )
    .expect("write");
    let t = Tokenizer::load(&s.path("tokenizer")).expect("loads");
    assert_eq!(
        (t.mask.id, t.cls.id, t.sep.id, t.pad.id),
        (50284, 50281, 50282, 50283)
    );
}

/// Makes `p` a sparse file of `len` bytes (no disk used).
fn sparse_file(p: &Path, len: u64) {
    let f = fs::File::create(p).expect("create");
    f.set_len(len).expect("set_len");
}

/// Config and tokenizer files are read whole: past their caps they are refused unread.
#[test]
fn oversized_config_and_tokenizer_files_are_refused() {
    let s = Scratch::new("big-config");
    sparse_file(&s.path("encoder/config.json"), (64 << 20) + 1);
    let e = s.config().expect_err("must be refused");
    assert!(
        matches!(&e, ConfigError::TooLarge { path, .. } if path.ends_with("encoder/config.json")),
        "{e}"
    );
    let s = Scratch::new("big-tokenizer");
    sparse_file(&s.path("tokenizer/tokenizer.json"), (256 << 20) + 1);
    let e = tokenizer_error(&s);
    assert!(matches!(&e, TokenizerError::TooLarge { .. }), "{e}");
    let s = Scratch::new("big-tokcfg");
    sparse_file(&s.path("tokenizer/tokenizer_config.json"), (64 << 20) + 1);
    let e = tokenizer_error(&s);
    assert!(matches!(&e, TokenizerError::TooLarge { .. }), "{e}");
}

fn open_error(s: &Scratch) -> TensorError {
    let cfg = s.config().expect("configs");
    CheckpointTensors::open(&s.dir, &cfg).expect_err("must be refused")
}

/// Item 6: the safetensors format forbids tensors sharing bytes.
#[test]
fn overlapping_tensor_data_is_refused() {
    let (a, b) = (
        "encoder.layers.1.attn_norm.weight",
        "encoder.layers.2.attn_norm.weight",
    );
    let s = Scratch::new("overlap");
    s.edit_header(|h| {
        let offsets = h[a]["data_offsets"].clone();
        h[b]["data_offsets"] = offsets;
    });
    let e = open_error(&s);
    let text = e.to_string();
    assert!(matches!(e, TensorError::Format { .. }), "{text}");
    assert!(
        text.contains("overlap") && text.contains(a) && text.contains(b),
        "{text}"
    );
    // Partly: a tensor's data starting inside another's.
    let s = Scratch::new("overlap-part");
    s.edit_header(|h| {
        let begin = h[a]["data_offsets"][0].as_u64().expect("begin");
        let len = 2 * 64;
        h[b]["data_offsets"] = json!([begin + 2, begin + 2 + len]);
    });
    assert!(open_error(&s).to_string().contains("overlap"));
}

/// Item 6: a key the header holds twice (serde_json kept the last).
#[test]
fn a_repeated_header_key_is_refused() {
    let s = Scratch::new("duplicate");
    let name = "encoder.final_norm.weight";
    s.edit_header_text(|text| {
        let h: Map<String, Value> = serde_json::from_str(&text).expect("header");
        let member = format!("{}:{}", json!(name), h[name]);
        format!("{{{member},{}", &text[1..])
    });
    let e = open_error(&s);
    let text = e.to_string();
    assert!(
        matches!(e, TensorError::Format { .. }) && text.contains("twice") && text.contains(name),
        "{text}"
    );
}
