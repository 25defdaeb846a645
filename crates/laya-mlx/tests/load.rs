//! Strict checkpoint loading: the fixture checkpoints load; a tampered copy with a missing
//! tensor, an unexpected tensor, a wrong shape or a truncated file each fail with their own
//! error naming the tensor.

use std::fs;
use std::path::{Path, PathBuf};

use crate::common::checkpoint;
use laya_core::checkpoint::TensorError;
use laya_mlx::{EngineSettings, LoadError, MlxEngine, Precision};
use serde_json::{Map, Value};

#[test]
fn fixture_checkpoints_load_in_both_precisions() {
    for name in ["tiny", "tiny-multilingual-shape"] {
        for precision in [Precision::F32, Precision::F16] {
            let settings = EngineSettings {
                precision: Some(precision),
                ..Default::default()
            };
            let engine = MlxEngine::load(&checkpoint(name), &settings).expect("loads");
            assert_eq!(engine.precision(), precision);
        }
    }
    let engine = MlxEngine::load(&checkpoint("tiny"), &EngineSettings::default()).expect("loads");
    println!("default engine: {engine:?}");
}

/// A scratch copy of the tiny checkpoint whose safetensors header went through `edit`
/// (tensor data left where it was); `keep` bytes of the file are kept.
struct Tampered {
    dir: PathBuf,
}

impl Tampered {
    fn new(tag: &str, edit: impl FnOnce(&mut Map<String, Value>), keep: Option<usize>) -> Tampered {
        let src = checkpoint("tiny");
        let dir = std::env::temp_dir().join(format!("laya-mlx-load-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("encoder")).expect("mkdir");
        for f in ["rl_agent_config.json", "encoder/config.json"] {
            fs::copy(src.join(f), dir.join(f)).expect("copy config");
        }
        let bytes = fs::read(src.join("model.safetensors")).expect("read safetensors");
        let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
        let mut header: Map<String, Value> =
            serde_json::from_slice(&bytes[8..8 + n]).expect("header");
        edit(&mut header);
        let mut h = Value::Object(header).to_string().into_bytes();
        h.resize(h.len().next_multiple_of(8), b' ');
        let mut out = (h.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&h);
        out.extend_from_slice(&bytes[8 + n..]);
        if let Some(k) = keep {
            out.truncate(k);
        }
        fs::write(dir.join("model.safetensors"), out).expect("write");
        Tampered { dir }
    }

    fn load(&self) -> LoadError {
        MlxEngine::load(&self.dir, &EngineSettings::default())
            .expect_err("tampered checkpoint must not load")
    }
}

impl Drop for Tampered {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn file_len(p: &Path) -> usize {
    fs::metadata(p).expect("stat").len() as usize
}

#[test]
fn a_missing_tensor_is_named() {
    let t = Tampered::new(
        "missing",
        |h| drop(h.remove("encoder.layers.2.attn_norm.weight")),
        None,
    );
    let e = t.load();
    assert!(
        matches!(&e, LoadError::Tensors(TensorError::MissingTensor { name }) if name == "encoder.layers.2.attn_norm.weight"),
        "{e}"
    );
}

#[test]
fn an_unexpected_tensor_is_named() {
    let t = Tampered::new(
        "unexpected",
        |h| {
            let v = h["encoder.final_norm.weight"].clone();
            h.insert("encoder.layers.0.attn_norm.weight".into(), v);
        },
        None,
    );
    let e = t.load();
    assert!(
        matches!(&e, LoadError::Tensors(TensorError::UnexpectedTensor { name }) if name == "encoder.layers.0.attn_norm.weight"),
        "{e}"
    );
}

#[test]
fn a_wrong_shape_is_named() {
    let t = Tampered::new(
        "shape",
        |h| h["type_emb.weight"]["shape"] = serde_json::json!([64, 3]),
        None,
    );
    let e = t.load();
    assert!(
        matches!(&e, LoadError::Tensors(TensorError::Shape { name, expected, found })
            if name == "type_emb.weight" && expected == &[3, 64] && found == &[64, 3]),
        "{e}"
    );
}

#[test]
fn a_truncated_file_is_refused() {
    let full = file_len(&checkpoint("tiny").join("model.safetensors"));
    let t = Tampered::new("truncated", |_| {}, Some(full - 1000));
    let e = t.load();
    assert!(
        matches!(&e, LoadError::Tensors(TensorError::Format { .. })),
        "{e}"
    );
    println!("{e}");
}

#[test]
fn a_missing_directory_is_a_config_error() {
    let e = MlxEngine::load(
        Path::new("/nonexistent/laya-checkpoint"),
        &EngineSettings::default(),
    )
    .expect_err("must fail");
    assert!(matches!(e, LoadError::Config(_)), "{e}");
}
