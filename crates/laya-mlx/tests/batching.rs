//! Cross-request batching on the CPU rests on this: where the encoder, the decision head and
//! the scorer run on the host, every request's logits are bit-identical alone and among any
//! batch mates, with each f32 GEMM kernel the CPU has and under `--int8` with both kinds of
//! activations; and the engine says so (`batch_invariant`), which lets the server's worker
//! run queued requests in one pass.

use laya_core::agent::Agent;
use laya_core::engine::Forward;
use laya_fixtures::{check_batch_mates, checkpoints, fixtures_dir, reference_passes};
use laya_mlx::f32_linear::Kernel;
use laya_mlx::int8::{Activations, Int8};
use laya_mlx::{EngineSettings, MlxEngine, Precision};

/// Compositions a checkpoint and configuration: a random request among 1-12 random others.
const COMPOSITIONS: usize = 100;

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
    for activations in [Activations::Int8, Activations::Mixed, Activations::Split] {
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
            let seed = (7 + n * 16 + c) as u64;
            check_batch_mates(&mut e.forward, &passes, COMPOSITIONS, seed, &what);
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
