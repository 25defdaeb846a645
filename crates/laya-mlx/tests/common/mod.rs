//! Fixture access shared by the integration tests, on top of `laya-fixtures`: a stored
//! checkpoint's directory and every forward pass upstream recorded for it.

use std::path::PathBuf;

pub use laya_fixtures::{fixtures_dir, RefRow};

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

/// One forward pass as the reference server ran it.
#[derive(Debug, Clone)]
pub struct RefPass {
    /// `<file>/<workload id>#<pass index>`.
    pub id: String,
    pub rows: Vec<RefRow>,
}

/// Every pass recorded for checkpoint `ckpt` in smoke, short and edge.
pub fn reference_passes(ckpt: &str) -> Vec<RefPass> {
    let mut passes = Vec::new();
    for workload in laya_fixtures::WORKLOADS {
        for reference in laya_fixtures::references(ckpt, workload) {
            for (p, rows) in reference.passes.into_iter().enumerate() {
                passes.push(RefPass {
                    id: format!("{workload}/{}#{p}", reference.id),
                    rows,
                });
            }
        }
    }
    assert!(!passes.is_empty(), "no recorded passes for {ckpt}");
    passes
}
