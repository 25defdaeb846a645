//! Cross-request batching on the CPU rests on this: where the encoder, the decision head and
//! the scorer run on the host, every request's logits are bit-identical alone and among any
//! batch mates, with each f32 GEMM kernel the CPU has and under `--int8` with both kinds of
//! activations; and the engine says so (`batch_invariant`), which lets the server's worker
//! run queued requests in one pass.

use laya_core::agent::Agent;
use laya_core::engine::{Forward, Row, RowLogits};
use laya_fixtures::{checkpoints, decision_cases, fixtures_dir};
use laya_mlx::f32_linear::Kernel;
use laya_mlx::int8::{Activations, Int8};
use laya_mlx::{EngineSettings, MlxEngine, Precision};

/// Compositions a checkpoint and configuration: a random request among 1-12 random others.
const COMPOSITIONS: usize = 100;

/// Every pass of rows the references make, as the engine's layout builds them.
fn reference_passes(engine: &Agent<MlxEngine>, ckpt: &str) -> Vec<Vec<Row>> {
    decision_cases(ckpt)
        .iter()
        .filter_map(|case| {
            engine
                .layout(&case.call.states, &case.questions, &case.call.opts)
                .ok()
        })
        .flat_map(|passes| {
            passes
                .iter()
                .map(|p| p.iter().map(|e| e.row.clone()).collect())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A 64-bit linear congruential generator: the same compositions on every run.
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

/// A random pass packed among 1-12 random other passes at a random position must give the
/// very bits it gives alone, `compositions` times.
fn check_batch_mates(engine: &mut MlxEngine, passes: &[Vec<Row>], seed: u64, what: &str) {
    let mut rng = Lcg(seed);
    let mut alone: Vec<Option<Vec<RowLogits>>> = vec![None; passes.len()];
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for k in 0..COMPOSITIONS {
        let i = rng.below(passes.len());
        let rows = &passes[i];
        let solo = alone[i].get_or_insert_with(|| engine.forward(rows).expect("forward"));
        let mates = 1 + rng.below(12);
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
        let together = engine.forward(&batch).expect("forward");
        for (j, (t, a)) in together[offset..offset + rows.len()]
            .iter()
            .zip(solo.iter())
            .enumerate()
        {
            assert!(
                bits(&t.logits) == bits(&a.logits) && bits(&t.act_logits) == bits(&a.act_logits),
                "{what} composition {k}: pass {i} row {j} changed with {mates} batch mates at \
                 position {at} ({} rows): {a:?} alone, {t:?} together",
                batch.len()
            );
        }
    }
    println!("{what}: {COMPOSITIONS} compositions bit-identical");
}

#[test]
fn batch_mates_do_not_change_answers_on_the_host() {
    let kernels: Vec<Kernel> = Kernel::ALL.into_iter().filter(|k| k.available()).collect();
    if kernels.is_empty() {
        eprintln!("skipped: this CPU has no host f32 GEMM kernel, so requests run alone");
        return;
    }
    let mut configurations: Vec<(String, EngineSettings)> = kernels
        .iter()
        .map(|&k| {
            let settings = EngineSettings {
                precision: Some(Precision::F32),
                host_gemm_kernel: Some(k),
                ..EngineSettings::default()
            };
            (format!("f32 {}", k.name()), settings)
        })
        .collect();
    for activations in [Activations::Int8, Activations::Split] {
        let settings = EngineSettings {
            precision: Some(Precision::F32),
            int8: Some(Int8::detect(activations)),
            ..EngineSettings::default()
        };
        configurations.push((format!("--int8 {activations:?}"), settings));
    }
    for (n, ckpt) in checkpoints().iter().enumerate() {
        let dir = fixtures_dir().join("checkpoints").join(ckpt);
        for (c, (name, settings)) in configurations.iter().enumerate() {
            let forward = MlxEngine::load(&dir, settings).expect("engine loads");
            let mut e = Agent::load(&dir, forward).expect("tokenizer and configs load");
            assert!(
                e.forward.batch_invariant(),
                "{ckpt}, {name}: the engine does not run on the host"
            );
            let passes = reference_passes(&e, ckpt);
            let what = format!("{ckpt}, {name}");
            check_batch_mates(&mut e.forward, &passes, (7 + n * 16 + c) as u64, &what);
        }
    }
}

/// Where MLX's own GEMMs run (no host f32 kernel asked for, f16), the engine does not claim
/// batch invariance, so the server runs each request alone there.
#[test]
fn mlx_gemms_run_requests_alone() {
    let dir = fixtures_dir().join("checkpoints").join("tiny");
    let settings = EngineSettings {
        precision: Some(Precision::F16),
        ..EngineSettings::default()
    };
    let forward = MlxEngine::load(&dir, &settings).expect("engine loads");
    assert!(!forward.batch_invariant());
}
