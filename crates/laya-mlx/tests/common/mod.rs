//! Fixture access shared by the integration tests: the fixtures directory (`SYS1_FIXTURES`,
//! else `<workspace>/../shared/fixtures`; missing means FAIL, never skip) and the recorded
//! forward passes of `references/<checkpoint>/{smoke,short,edge}.jsonl`.
#![allow(dead_code)]

use std::path::PathBuf;

use laya_core::config::QType;
use laya_core::engine::Row;
use serde_json::Value;

/// The fixtures directory; panics with the path it tried when it is missing.
pub fn fixtures_dir() -> PathBuf {
    let dir = match std::env::var_os("SYS1_FIXTURES") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
    };
    assert!(
        dir.is_dir(),
        "fixtures directory {} does not exist: set SYS1_FIXTURES to shared/fixtures",
        dir.display()
    );
    dir
}

/// A checkpoint directory under `fixtures/checkpoints`, which must exist.
pub fn checkpoint(name: &str) -> PathBuf {
    let dir = fixtures_dir().join("checkpoints").join(name);
    assert!(
        dir.join("model.safetensors").is_file(),
        "checkpoint {} is missing",
        dir.display()
    );
    dir
}

/// One row of a recorded pass with the upstream (PyTorch fp32 CPU) outputs.
#[derive(Debug, Clone)]
pub struct RefRow {
    pub row: Row,
    pub logits: Vec<f32>,
    pub act_logits: Vec<f32>,
}

/// One forward pass as the reference server ran it.
#[derive(Debug, Clone)]
pub struct RefPass {
    /// `<file>/<workload id>#<pass index>`.
    pub id: String,
    pub rows: Vec<RefRow>,
}

fn f32_list(v: &Value, what: &str) -> Vec<f32> {
    v.as_array()
        .unwrap_or_else(|| panic!("{what} is not a list"))
        .iter()
        .map(|x| {
            x.as_f64()
                .unwrap_or_else(|| panic!("{what} holds a non-number")) as f32
        })
        .collect()
}

fn usize_list(v: &Value, what: &str) -> Vec<usize> {
    v.as_array()
        .unwrap_or_else(|| panic!("{what} is not a list"))
        .iter()
        .map(|x| {
            x.as_u64()
                .unwrap_or_else(|| panic!("{what} holds a non-integer")) as usize
        })
        .collect()
}

/// Every pass recorded for checkpoint `ckpt` in smoke, short and edge.
pub fn reference_passes(ckpt: &str) -> Vec<RefPass> {
    let dir = fixtures_dir().join("references").join(ckpt);
    let mut passes = Vec::new();
    for file in ["smoke", "short", "edge"] {
        let path = dir.join(format!("{file}.jsonl"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        for (ln, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), ln + 1));
            let Some(rows) = v.get("rows").and_then(Value::as_array) else {
                continue;
            };
            let id = v.get("id").and_then(Value::as_str).unwrap_or("?");
            for (p, pass) in rows.iter().enumerate() {
                let rows = pass
                    .as_array()
                    .expect("a pass is a list of rows")
                    .iter()
                    .map(|r| {
                        let qtype = match r["qtype"].as_u64() {
                            Some(0) => QType::Choice,
                            Some(1) => QType::Score,
                            Some(2) => QType::Noul,
                            other => panic!("{id}: bad qtype {other:?}"),
                        };
                        RefRow {
                            row: Row {
                                ids: usize_list(&r["input_ids"], "input_ids")
                                    .into_iter()
                                    .map(|x| x as u32)
                                    .collect(),
                                markers: usize_list(&r["markers"], "markers"),
                                qtype,
                            },
                            logits: f32_list(&r["logits"], "logits"),
                            act_logits: f32_list(&r["act_logits"], "act_logits"),
                        }
                    })
                    .collect();
                passes.push(RefPass {
                    id: format!("{file}/{id}#{p}"),
                    rows,
                });
            }
        }
    }
    assert!(
        !passes.is_empty(),
        "no recorded passes under {}",
        dir.display()
    );
    passes
}
