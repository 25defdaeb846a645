//! Parity with upstream: every recorded forward pass of the fixture references, run through
//! [`MlxEngine`], against PyTorch fp32 CPU logits; plus invariances the packing must keep
//! (a row's answer does not depend on its batch, the sliding-window layouts agree, the
//! shortened last head layer agrees with the full one).

use std::time::Instant;

use crate::common::{checkpoint, reference_passes, RefPass};
use laya_core::engine::{Forward, Row};
use laya_fixtures::max_logit_diff;
use laya_mlx::f32_linear::Kernel;
use laya_mlx::{EngineSettings, MlxEngine, Precision, SlidingAttention};

/// f32 tolerance: option logits `|ours − ref| <= 1e-4`; act logits
/// `|ours − ref| <= 1e-4 + 1e-5 · |ref|`, the relative part for the real checkpoints, whose
/// act logits reach ±4000 (`model.md` §3.5); on the tiny ones (|act| < 1.5) it adds < 1.5e-5.
const F32_ATOL: f32 = 1e-4;
const F32_ACT_RTOL: f32 = 1e-5;

/// f16 tolerance on logits. f16 has a 2^-11 ≈ 4.9e-4 relative step; through 6 encoder
/// layers, 2 head layers and a scorer whose last layer has weights of scale 16/√d, errors of a
/// few 1e-2 on logits of magnitude ~10–16 are expected (`model.md` §3.6 quotes ≤ 0.009 per
/// probability for fp16 paths). The real f16 acceptance rule is on probabilities, elsewhere.
const F16_ATOL: f32 = 1e-1;

#[derive(Debug, Default)]
struct Errors {
    logits: f32,
    act: f32,
    /// Σ |error| over the option logits, and how many.
    logit_sum: f64,
    logit_count: usize,
    worst: String,
    failures: Vec<String>,
}

fn compare(passes: &[RefPass], engine: &mut MlxEngine, atol: f32, act_rtol: f32) -> Errors {
    let mut e = Errors::default();
    for pass in passes {
        let rows: Vec<Row> = pass.rows.iter().map(|r| r.row.clone()).collect();
        let out = engine
            .forward(&rows)
            .unwrap_or_else(|err| panic!("{}: forward failed: {err}", pass.id));
        assert_eq!(out.len(), rows.len(), "{}", pass.id);
        for (i, (got, want)) in out.iter().zip(&pass.rows).enumerate() {
            assert_eq!(got.logits.len(), want.logits.len(), "{} row {i}", pass.id);
            assert_eq!(
                got.act_logits.len(),
                want.act_logits.len(),
                "{} row {i}",
                pass.id
            );
            for (kind, g, w) in [
                ("logit", &got.logits, &want.logits),
                ("act", &got.act_logits, &want.act_logits),
            ] {
                for (s, (&g, &w)) in g.iter().zip(w.iter()).enumerate() {
                    let err = (g - w).abs();
                    if kind == "logit" {
                        e.logit_sum += err as f64;
                        e.logit_count += 1;
                    }
                    let max = if kind == "logit" {
                        &mut e.logits
                    } else {
                        &mut e.act
                    };
                    if err > *max {
                        *max = err;
                        if kind == "logit" {
                            e.worst = format!("{} row {i} slot {s}: {g} vs {w}", pass.id);
                        }
                    }
                    let rtol = if kind == "act" { act_rtol } else { 0.0 };
                    if err.is_nan() || err > atol + rtol * w.abs() {
                        e.failures.push(format!(
                            "{} row {i} {kind} {s}: ours {g}, upstream {w}, error {err}",
                            pass.id
                        ));
                    }
                }
            }
        }
    }
    e
}

/// Every pass of `ckpt`'s references at `precision`; in f32 once with each of the host's
/// GEMM kernels this CPU has (the default one, the fastest, is one of them).
fn parity(ckpt: &str, precision: Precision) {
    let passes = reference_passes(ckpt);
    let mut kernels: Vec<Option<Kernel>> = Vec::new();
    if precision == Precision::F32 {
        kernels.extend(Kernel::ALL.into_iter().filter(|k| k.available()).map(Some));
    }
    if kernels.is_empty() {
        kernels.push(None);
    }
    for kernel in kernels {
        let settings = EngineSettings {
            precision: Some(precision),
            host_gemm_kernel: kernel,
            ..EngineSettings::default()
        };
        let mut engine = MlxEngine::load(&checkpoint(ckpt), &settings).expect("checkpoint loads");
        assert_eq!(engine.precision(), precision);
        let started = Instant::now();
        let (atol, rtol) = match precision {
            Precision::F32 => (F32_ATOL, F32_ACT_RTOL),
            Precision::F16 => (F16_ATOL, 0.0),
        };
        let e = compare(&passes, &mut engine, atol, rtol);
        let rows: usize = passes.iter().map(|p| p.rows.len()).sum();
        println!(
            "{ckpt} {}{}: {} passes, {rows} rows in {:.2?}; |error| on logits max {:.3e}, mean {:.3e}; act logits max {:.3e} (worst logit: {})",
            precision.name(),
            kernel.map_or(String::new(), |k| format!(" ({})", k.name())),
            passes.len(),
            started.elapsed(),
            e.logits,
            e.logit_sum / e.logit_count.max(1) as f64,
            e.act,
            e.worst
        );
        assert!(
            e.failures.is_empty(),
            "{} values outside |err| <= {atol} (+ {rtol}·|ref| on act logits), first ones:\n{}",
            e.failures.len(),
            e.failures
                .iter()
                .take(20)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

#[test]
fn tiny_f32_matches_upstream() {
    parity("tiny", Precision::F32);
}

#[test]
fn tiny_multilingual_shape_f32_matches_upstream() {
    parity("tiny-multilingual-shape", Precision::F32);
}

#[test]
fn tiny_f16_is_close_to_upstream() {
    parity("tiny", Precision::F16);
}

#[test]
fn tiny_multilingual_shape_f16_is_close_to_upstream() {
    parity("tiny-multilingual-shape", Precision::F16);
}

/// The largest recorded pass (most rows), and a few rows of several lengths.
fn mixed_rows() -> Vec<Row> {
    let passes = reference_passes("tiny");
    let big = passes.iter().max_by_key(|p| p.rows.len()).expect("a pass");
    let mut rows: Vec<Row> = big.rows.iter().take(12).map(|r| r.row.clone()).collect();
    let longest = passes
        .iter()
        .flat_map(|p| &p.rows)
        .max_by_key(|r| r.row.ids.len())
        .expect("a row");
    rows.push(longest.row.clone());
    rows
}

#[test]
fn rows_answer_the_same_alone_and_in_a_batch() {
    let mut engine =
        MlxEngine::load(&checkpoint("tiny"), &EngineSettings::default()).expect("loads");
    let rows = mixed_rows();
    // The same row twice (an equal-length group), between other rows.
    let mut batch = rows.clone();
    batch.insert(3, rows[0].clone());
    let together = engine.forward(&batch).expect("forward");
    let mut alone = Vec::new();
    for r in &batch {
        alone.extend(engine.forward(std::slice::from_ref(r)).expect("forward"));
    }
    let d = max_logit_diff(&together, &alone);
    println!("batch of {} vs one by one: max |diff| {d:.3e}", batch.len());
    assert!(d <= 5e-5, "packing leaks between rows: max |diff| {d}");
    // Two copies of one row in one batch: equal up to GEMM rounding (a row's position in the
    // packed matrix can change the kernel's edge handling, never what it attends to).
    let copies = max_logit_diff(&together[0..1], &together[3..4]);
    assert!(
        copies <= 5e-5,
        "two copies of one row in one batch differ by {copies}"
    );
}

#[test]
fn sliding_layouts_and_last_head_layer_agree() {
    let dir = checkpoint("tiny");
    let mut rows = mixed_rows();
    // Long rows: the edge workload's longest, cut at lengths around the block boundaries.
    let longest = rows.last().expect("a row").clone();
    for len in [65, 66, 129, 200, 256, 300, 511, 640] {
        if len < longest.ids.len() {
            let markers: Vec<usize> = longest
                .markers
                .iter()
                .copied()
                .filter(|&m| m < len)
                .collect();
            if !markers.is_empty() {
                rows.push(Row {
                    ids: longest.ids[..len].to_vec(),
                    markers,
                    qtype: longest.qtype,
                });
            }
        }
    }
    let run = |settings: EngineSettings| {
        let mut engine = MlxEngine::load(&dir, &settings).expect("loads");
        engine.forward(&rows).expect("forward")
    };
    let masked = run(EngineSettings {
        sliding_attention: SlidingAttention::Masked,
        ..Default::default()
    });
    let blocked = run(EngineSettings {
        sliding_attention: SlidingAttention::Blocked,
        ..Default::default()
    });
    let auto_full = run(EngineSettings {
        full_last_head_layer: true,
        ..Default::default()
    });
    let auto = run(EngineSettings::default());
    // The GPU's layout: every row padded to the longest inside attention, contiguous heads.
    let padded = run(EngineSettings {
        padded_attention: Some(true),
        contiguous_heads: Some(true),
        ..Default::default()
    });
    let padded_blocked = run(EngineSettings {
        padded_attention: Some(true),
        contiguous_heads: Some(true),
        sliding_attention: SlidingAttention::Blocked,
        ..Default::default()
    });
    let d1 = max_logit_diff(&masked, &blocked);
    let d2 = max_logit_diff(&auto, &auto_full);
    let d3 = max_logit_diff(&auto, &padded).max(max_logit_diff(&auto, &padded_blocked));
    println!("masked vs blocked sliding attention: {d1:.3e}; last head layer at outputs vs everywhere: {d2:.3e}; grouped vs padded rows: {d3:.3e}");
    assert!(
        d3 <= 5e-5,
        "padded attention differs from per-length groups by {d3}"
    );
    assert!(
        d1 <= 5e-5,
        "blocked sliding attention differs from the masked one by {d1}"
    );
    assert!(d2 <= 5e-5, "the shortened last head layer differs by {d2}");
}

#[test]
fn an_empty_pass_is_empty() {
    let mut engine =
        MlxEngine::load(&checkpoint("tiny"), &EngineSettings::default()).expect("loads");
    assert!(engine.forward(&[]).expect("forward").is_empty());
}

#[test]
fn bad_rows_are_errors_not_panics() {
    let mut engine =
        MlxEngine::load(&checkpoint("tiny"), &EngineSettings::default()).expect("loads");
    let qtype = laya_core::config::QType::Choice;
    let bad = [
        Row {
            ids: vec![],
            markers: vec![],
            qtype,
        },
        Row {
            ids: vec![1, 2, 3],
            markers: vec![],
            qtype,
        },
        Row {
            ids: vec![1, 2, 3],
            markers: vec![3],
            qtype,
        },
        Row {
            ids: vec![1, 2, 99_999_999],
            markers: vec![1],
            qtype,
        },
    ];
    for r in bad {
        let err = engine
            .forward(std::slice::from_ref(&r))
            .expect_err("invalid row");
        println!("{:?} -> {err}", r);
    }
}

/// `--int8` where the host has no f32 kernel: the encoder's feed-forward output `mlp.Wo`
/// stays f32 and goes through MLX's GEMM inside the host path, whose results are added to
/// the host's residual stream (and the decision head, all f32, runs through MLX). Against
/// the host's own f32 GEMMs the two differ only in rounding (OpenBLAS sums the FMA kernels'
/// chain; AMX-BF16 sums bf16 splits), which can move an activation across an int8 rounding
/// step: a few 1e-3 on a logit at most, where a dropped or misplaced add is off by the
/// logit's whole size.
#[test]
fn int8_layers_agree_whichever_gemm_runs_the_f32_layers() {
    use laya_mlx::int8::{Activations, Int8};
    let rows = mixed_rows();
    let run = |host_gemm: Option<bool>| {
        let settings = EngineSettings {
            precision: Some(Precision::F32),
            int8: Some(Int8::detect(Activations::Split)),
            host_gemm,
            ..EngineSettings::default()
        };
        let mut engine = MlxEngine::load(&checkpoint("tiny"), &settings).expect("loads");
        engine.forward(&rows).expect("forward")
    };
    let (host, mlx) = (run(None), run(Some(false)));
    let d = max_logit_diff(&host, &mlx);
    let scale = host
        .iter()
        .flat_map(|r| &r.logits)
        .fold(0f32, |m, &v| m.max(v.abs()));
    println!(
        "int8, f32 layers on the host vs through MLX: max |diff| {d:.3e} (logits up to {scale:.2})"
    );
    assert!(d <= 1e-2, "the f32 layers' two paths differ by {d}");
    assert!(scale > 1.0, "logits too small to tell a dropped add apart");
}
