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

/// Whether `a` and `b` are the same values bit for bit (and the same length).
pub fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// A small deterministic generator (xorshift), values roughly normal: inputs and weights for
/// the host kernels' tests.
pub struct Values(pub u64);

impl Values {
    pub fn next(&mut self) -> f32 {
        let mut s = 0f32;
        for _ in 0..4 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            s += (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        }
        s
    }

    pub fn take(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}
