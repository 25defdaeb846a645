//! On an NVIDIA GPU: every decision reference of the stored checkpoints answered by the CUDA
//! engine, checked against upstream's f32 answers with the f16 rule (each probability within
//! 1e-2, argmax equal except near ties), the same suite `laya-mlx` passes; answers identical
//! run to run, with and without CUDA graphs, and close to the plain reference attention.
//!
//! Without a usable GPU (no driver, no CUDA 13 libraries) each test prints why and passes:
//! the workspace must build and test on machines without CUDA.

use laya_core::agent::Agent;
use laya_core::engine::Row;
use laya_cuda::{Attention, CudaEngine, CudaSettings};
use laya_fixtures::{
    check_f16_references, checkpoints, decision_cases, fixtures_dir, max_logit_diff,
};

fn gpu() -> bool {
    match laya_cuda::probe(0) {
        Ok(name) => {
            eprintln!("running on {name}");
            true
        }
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

fn engine(ckpt: &str, settings: &CudaSettings) -> Agent<CudaEngine> {
    let dir = fixtures_dir().join("checkpoints").join(ckpt);
    let forward = CudaEngine::load(&dir, settings).expect("engine loads");
    Agent::load(&dir, forward).expect("tokenizer and configs load")
}

/// Every pass of rows the references make, as the engine's layout builds them.
fn reference_passes(engine: &Agent<CudaEngine>, ckpt: &str) -> Vec<Vec<Row>> {
    let mut out = Vec::new();
    for case in decision_cases(ckpt) {
        if let Ok(passes) = engine.layout(&case.call.states, &case.questions, &case.call.opts) {
            out.extend(
                passes
                    .iter()
                    .map(|p| p.iter().map(|e| e.row.clone()).collect()),
            );
        }
    }
    out
}

#[test]
fn f16_answers_within_tolerance() {
    if !gpu() {
        return;
    }
    for ckpt in &checkpoints() {
        let mut engine = engine(ckpt, &CudaSettings::default());
        let (stats, _) = check_f16_references(&mut engine, ckpt);
        println!("cuda f16 {ckpt}: {}", stats.summary());
        assert!(
            stats.answers > 300,
            "{ckpt}: only {} answers compared",
            stats.answers
        );
    }
}

#[test]
fn deterministic_with_and_without_graphs_and_close_to_reference_attention() {
    if !gpu() {
        return;
    }
    for ckpt in &checkpoints() {
        let mut graphs = engine(ckpt, &CudaSettings::default());
        let passes = reference_passes(&graphs, ckpt);
        assert!(passes.len() > 100, "{ckpt}: {} passes", passes.len());
        let mut eager = engine(
            ckpt,
            &CudaSettings {
                graphs: false,
                ..CudaSettings::default()
            },
        );
        let mut rows_attention = engine(
            ckpt,
            &CudaSettings {
                graphs: false,
                attention: Attention::Rows,
                ..CudaSettings::default()
            },
        );
        let mut worst = 0f32;
        for (i, rows) in passes.iter().enumerate() {
            let first = graphs.forward.run(rows).expect("forward");
            let second = graphs.forward.run(rows).expect("forward");
            let third = graphs.forward.run(rows).expect("forward");
            assert_eq!(
                first, second,
                "{ckpt} pass {i}: eager first run vs graph replay"
            );
            assert_eq!(second, third, "{ckpt} pass {i}: replay vs replay");
            let plain = eager.forward.run(rows).expect("forward");
            assert_eq!(first, plain, "{ckpt} pass {i}: graphs vs no graphs");
            let reference = rows_attention.forward.run(rows).expect("forward");
            worst = worst.max(max_logit_diff(&first, &reference));
        }
        let stats = graphs.forward.stats();
        println!(
            "{ckpt}: {} passes; tensor-core vs reference attention: max logit diff {worst:.2e}; {:?}",
            passes.len(),
            stats
        );
        assert!(stats.replays > 0 && stats.captures > 0, "{stats:?}");
        assert!(worst < 5e-2, "{ckpt}: attention paths differ by {worst}");
    }
}

/// A small deterministic generator (no dependency): the batch mates are random but the same
/// on every run.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// Runs every pass alone and again packed among random other passes (so in other token and
/// selection buckets, at other offsets) and requires the very same bits.
fn check_batch_mates(engine: &mut CudaEngine, passes: &[Vec<Row>], what: &str) -> usize {
    let mut rng = Lcg(7);
    let mut checked = 0;
    for (i, rows) in passes.iter().enumerate() {
        let alone = engine.run(rows).expect("forward");
        for _ in 0..2 {
            let mates = 1 + rng.below(8);
            let at = rng.below(mates + 1);
            let mut batch: Vec<Row> = Vec::new();
            let mut offset = 0;
            for m in 0..=mates {
                if m == at {
                    offset = batch.len();
                    batch.extend(rows.iter().cloned());
                } else {
                    batch.extend(passes[rng.below(passes.len())].iter().cloned());
                }
            }
            let together = engine.run(&batch).expect("forward");
            assert_eq!(
                &together[offset..offset + rows.len()],
                &alone[..],
                "{what} pass {i}: answers changed with {mates} batch mates ({} rows, {} tokens)",
                batch.len(),
                batch.iter().map(|r| r.ids.len()).sum::<usize>()
            );
            checked += 1;
        }
    }
    checked
}

/// Why sys1rust does not batch requests together on this engine: this fails. The attention
/// tiles start at each row's own start, so attention does not depend on batch mates, but
/// cuBLASLt picks another kernel for another token count, and the last bits of a row's
/// logits move with the batch (measured on the H200; results/GPU-NOTES.md). Run it with
/// `--ignored` to see whether that still holds.
#[test]
#[ignore = "documents why cross-request batching is off: cuBLASLt kernels differ by token count"]
fn batch_mates_do_not_change_answers() {
    if !gpu() {
        return;
    }
    for ckpt in &checkpoints() {
        let mut e = engine(ckpt, &CudaSettings::default());
        let passes = reference_passes(&e, ckpt);
        let n = check_batch_mates(&mut e.forward, &passes[..passes.len().min(60)], ckpt);
        println!("{ckpt}: {n} batches bit-identical to their rows alone");
    }
    // The benchmark's checkpoint shape (ModernBERT-large), where GEMMs of different token
    // counts run different cuBLASLt kernels: `LAYA_CUDA_LARGE=<checkpoint dir>`.
    if let Some(dir) = std::env::var_os("LAYA_CUDA_LARGE") {
        let mut e = CudaEngine::load(std::path::Path::new(&dir), &CudaSettings::default())
            .expect("large loads");
        let mut rng = Lcg(11);
        let passes: Vec<Vec<Row>> = (0..40)
            .map(|_| {
                (0..1 + rng.below(4))
                    .map(|_| {
                        let len = 8 + rng.below(700);
                        Row {
                            ids: (0..len)
                                .map(|j| (1000 + (j * 7919) % 40000) as u32)
                                .collect(),
                            markers: (1..=(1 + rng.below(6)).min(len - 1)).collect(),
                            qtype: laya_core::config::QType::Choice,
                        }
                    })
                    .collect()
            })
            .collect();
        let n = check_batch_mates(&mut e, &passes, "large");
        println!("large: {n} batches bit-identical to their rows alone");
    }
}
