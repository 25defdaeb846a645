//! GPU parity probe: where, if anywhere, MLX's GPU backend parts from its CPU backend on the
//! operations and layouts `laya-mlx` uses.
//!
//! ```text
//! cargo run --release -p laya-mlx --example gpu-probe -- <checkpoint dir> [ops] [strided] [forward] [taps]
//! ```
//!
//! - `ops`: each operation of the forward, with the exact view layouts the engine hands it
//!   (split columns of the fused QKV projection, transposed heads, bool masks), on random
//!   ModernBERT-large-shaped inputs; the CPU in f32 is the reference, the GPU runs f32 and f16.
//! - `forward`: whole forwards of the checkpoint on the GPU (f32 and f16, with and without
//!   padded or per-length attention) against the CPU in f32, for three row layouts, and each GPU variant run
//!   three more times to show whether it is deterministic.
//! - `strided`: attention over the strided views RoPE returns for strided input (the
//!   engine's layout without contiguous heads), apart because it may crash the process.
//! - `taps`: the residual stream after every layer half, GPU f32 against CPU f32, evaluated
//!   layer by layer.
//!
//! Every line is `<section> <case> <variant> max_abs=<..> rel=<..>`, with `rel` the error over
//! the reference's largest magnitude; the probe reports and never fails on a difference.

use std::path::{Path, PathBuf};

use laya_core::config::QType;
use laya_core::engine::{Row, RowLogits};
use laya_mlx::{DeviceKind, EngineSettings, MlxEngine, Precision};
use mlx_rs::error::Exception;
use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
use mlx_rs::{ops, Array, Device, Dtype, Stream};

type BoxError = Box<dyn std::error::Error>;

/// A deterministic stream of numbers in [-1, 1) (no RNG crate, same values on every machine).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
}

fn host(a: &Array) -> Result<Vec<f32>, BoxError> {
    let a = a.as_dtype(Dtype::Float32)?.contiguous()?;
    Ok(a.try_as_slice::<f32>()?.to_vec())
}

fn compare(reference: &[f32], got: &[f32]) -> (f64, f64, usize) {
    let scale = reference
        .iter()
        .fold(0f64, |m, &v| m.max((v as f64).abs()))
        .max(1e-30);
    let mut max = 0f64;
    let mut nonfinite = 0;
    for (&r, &g) in reference.iter().zip(got) {
        if !g.is_finite() {
            nonfinite += 1;
            continue;
        }
        max = max.max((r as f64 - g as f64).abs());
    }
    (max, max / scale, nonfinite)
}

fn report(section: &str, case: &str, variant: &str, reference: &[f32], got: &[f32]) {
    if reference.len() != got.len() {
        println!(
            "{section} {case} {variant} LENGTH {} vs {}",
            reference.len(),
            got.len()
        );
        return;
    }
    let (max, rel, nonfinite) = compare(reference, got);
    let flag = if nonfinite > 0 || rel > 2e-2 {
        "  <-- BAD"
    } else {
        ""
    };
    println!(
        "{section} {case} {variant} max_abs={max:.3e} rel={rel:.3e} nonfinite={nonfinite}{flag}"
    );
}

/// `GPU_PROBE_DEVICE=cpu` runs the "GPU" side on the CPU too: a dry run of the probe itself
/// on a machine without a GPU (every difference should then be zero or f16 rounding).
fn probe_device() -> DeviceKind {
    match std::env::var("GPU_PROBE_DEVICE").as_deref() {
        Ok("cpu") => DeviceKind::Cpu,
        _ => DeviceKind::Gpu,
    }
}

fn gpu_stream() -> Result<Stream, Exception> {
    match probe_device() {
        DeviceKind::Cpu => Ok(Stream::cpu()),
        _ => Stream::try_default_on_device(&Device::gpu()),
    }
}

/// Runs `f` on the CPU in f32 (the reference) and on the GPU in f32 and f16.
fn op_case(
    name: &str,
    gpu: &Stream,
    f: impl Fn(Dtype) -> Result<Array, Exception>,
) -> Result<(), BoxError> {
    let reference = mlx_rs::with_stream(&Stream::cpu(), || -> Result<_, BoxError> {
        host(&f(Dtype::Float32)?)
    })?;
    for (dt, label) in [(Dtype::Float32, "gpu-f32"), (Dtype::Float16, "gpu-f16")] {
        match mlx_rs::with_stream(gpu, || -> Result<_, BoxError> { host(&f(dt)?) }) {
            Ok(got) => report("ops", name, label, &reference, &got),
            Err(e) => println!("ops {name} {label} ERROR {e}"),
        }
    }
    Ok(())
}

fn window_mask(len: usize, half: usize) -> Vec<bool> {
    let mut m = vec![false; len * len];
    for i in 0..len {
        for j in i.saturating_sub(half)..(i + half + 1).min(len) {
            m[i * len + j] = true;
        }
    }
    m
}

/// The operations, or with `strided` only the attention over strided (post-RoPE) views, which
/// on MLX 0.32.2's CUDA backend may corrupt memory and so runs in a process of its own.
fn ops_section(gpu: &Stream, strided: bool) -> Result<(), BoxError> {
    const T: i32 = 150;
    const D: i32 = 1024;
    const H: i32 = 16;
    const HD: i32 = 64;
    const I: i32 = 2624;
    let mut rng = Lcg(7);
    let x = rng.vec((T * D) as usize, 1.0);
    let wqkv = rng.vec((3 * D * D) as usize, 0.03);
    let qkv = rng.vec((T * 3 * D) as usize, 1.0);
    let gate = rng.vec((T * 2 * I) as usize, 2.0);
    let ln_w = rng.vec(D as usize, 1.0);
    let ln_b = rng.vec(D as usize, 0.1);
    let table = rng.vec((1000 * D) as usize, 1.0);
    let idx: Vec<u32> = (0..T as u32).map(|i| (i * 37 + 11) % 1000).collect();
    let mask = window_mask(T as usize, 64);
    let arr = |v: &[f32], shape: &[i32], dt: Dtype| Array::from_slice(v, shape).as_dtype(dt);
    // The engine's path to one head tensor: column block `part` of the fused [T, 3d] QKV
    // output, as [1, H, T, hd] (a strided view).
    let head_view = |part: usize, dt: Dtype| -> Result<Array, Exception> {
        let all = arr(&qkv, &[T, 3 * D], dt)?;
        let parts = ops::split_at_indices(&all, &[D, 2 * D], 1)?;
        parts[part]
            .reshape(&[1, T, H, HD])?
            .transpose_axes(&[0, 2, 1, 3])
    };
    let rope = |a: &Array| fast::rope(a, HD, false, 160000.0f32, 1.0, 0, None);
    let sdpa = |q: &Array, k: &Array, v: &Array, m: Option<&Array>| {
        fast::scaled_dot_product_attention(
            q,
            k,
            v,
            1.0 / (HD as f32).sqrt(),
            m.map(ScaledDotProductAttentionMask::Array),
            None,
        )
    };

    op_case("matmul_x_Wt", gpu, |dt| {
        arr(&x, &[T, D], dt)?.matmul(arr(&wqkv, &[3 * D, D], dt)?.transpose()?)
    })?;
    op_case("split_view_copy", gpu, |dt| head_view(1, dt)?.contiguous())?;
    op_case("rope_strided_view", gpu, |dt| rope(&head_view(0, dt)?))?;
    op_case("rope_contiguous", gpu, |dt| {
        rope(&head_view(0, dt)?.contiguous()?)
    })?;
    op_case("sdpa_contiguous", gpu, |dt| {
        let (q, k, v) = (
            head_view(0, dt)?.contiguous()?,
            head_view(1, dt)?.contiguous()?,
            head_view(2, dt)?.contiguous()?,
        );
        sdpa(&q, &k, &v, None)
    })?;
    op_case("sdpa_bool_window_mask", gpu, |dt| {
        let (q, k, v) = (
            head_view(0, dt)?.contiguous()?,
            head_view(1, dt)?.contiguous()?,
            head_view(2, dt)?.contiguous()?,
        );
        let m = Array::from_slice(&mask, &[T, T]);
        sdpa(&q, &k, &v, Some(&m))
    })?;
    op_case("sdpa_additive_mask", gpu, |dt| {
        let (q, k, v) = (
            head_view(0, dt)?.contiguous()?,
            head_view(1, dt)?.contiguous()?,
            head_view(2, dt)?.contiguous()?,
        );
        let add: Vec<f32> = mask.iter().map(|&b| if b { 0.0 } else { -1e4 }).collect();
        let m = arr(&add, &[T, T], dt)?;
        sdpa(&q, &k, &v, Some(&m))
    })?;
    if strided {
        op_case("sdpa_views_after_rope", gpu, |dt| {
            let q = rope(&head_view(0, dt)?)?;
            let k = rope(&head_view(1, dt)?)?;
            sdpa(&q, &k, &head_view(2, dt)?, None)
        })?;
        op_case("sdpa_bool_mask_views", gpu, |dt| {
            let q = rope(&head_view(0, dt)?)?;
            let k = rope(&head_view(1, dt)?)?;
            let m = Array::from_slice(&mask, &[T, T]);
            sdpa(&q, &k, &head_view(2, dt)?, Some(&m))
        })?;
        return Ok(());
    }
    op_case("layer_norm_no_bias", gpu, |dt| {
        fast::layer_norm(arr(&x, &[T, D], dt)?, &arr(&ln_w, &[D], dt)?, None, 1e-5)
    })?;
    op_case("layer_norm_bias", gpu, |dt| {
        let b = arr(&ln_b, &[D], dt)?;
        fast::layer_norm(
            arr(&x, &[T, D], dt)?,
            &arr(&ln_w, &[D], dt)?,
            Some(&b),
            1e-5,
        )
    })?;
    op_case("geglu_split_views", gpu, |dt| {
        let h = arr(&gate, &[T, 2 * I], dt)?;
        let halves = ops::split_at_indices(&h, &[I], 1)?;
        let inner =
            halves[0].multiply(Array::from_f32(std::f32::consts::FRAC_1_SQRT_2).as_dtype(dt)?)?;
        let cdf = ops::erf(&inner)?
            .add(Array::from_f32(1.0).as_dtype(dt)?)?
            .multiply(Array::from_f32(0.5).as_dtype(dt)?)?;
        halves[0].multiply(&cdf)?.multiply(&halves[1])
    })?;
    op_case("take_axis_u32", gpu, |dt| {
        arr(&table, &[1000, D], dt)?.take_axis(Array::from_slice(&idx, &[T]), 0)
    })?;
    op_case("addmm_bias", gpu, |dt| {
        let w = arr(&wqkv[..(D * D) as usize], &[D, D], dt)?;
        ops::addmm(
            arr(&ln_b, &[D], dt)?,
            arr(&x, &[T, D], dt)?,
            w.transpose()?,
            1.0,
            1.0,
        )
    })?;
    op_case("stack_split_concat", gpu, |dt| {
        let a = arr(&x, &[T, D], dt)?;
        let parts = ops::split_at_indices(&a, &[50, 100], 0)?;
        let s = ops::stack(&[&parts[0], &parts[1]], 0)?.reshape(&[100, D])?;
        ops::concatenate(&[&s, &parts[2]], 0)
    })?;
    Ok(())
}

/// Three row layouts: one 150-token row, one 300-token row (blocked sliding attention), and
/// three 100-token rows plus a 60-token one (rows batched by length).
fn row_sets(vocab: u32) -> Vec<(&'static str, Vec<Row>)> {
    let mut rng = Lcg(11);
    let mut row = |len: usize| {
        let ids: Vec<u32> = (0..len)
            .map(|_| 1000 + ((rng.next() + 1.0) * 0.5 * (vocab - 1001) as f32) as u32)
            .collect();
        Row {
            ids,
            markers: vec![3, len / 2, len - 2],
            qtype: QType::Choice,
        }
    };
    vec![
        ("one_150", vec![row(150)]),
        ("one_300", vec![row(300)]),
        ("mixed_4", vec![row(100), row(100), row(60), row(100)]),
    ]
}

fn flat(out: &[RowLogits]) -> Vec<f32> {
    out.iter()
        .flat_map(|r| r.logits.iter().chain(&r.act_logits).copied())
        .collect()
}

fn forward_section(dir: &Path) -> Result<(), BoxError> {
    let cpu = MlxEngine::load(
        dir,
        &EngineSettings {
            device: DeviceKind::Cpu,
            precision: Some(Precision::F32),
            ..Default::default()
        },
    )?;
    let vocab = cpu.config().encoder.vocab_size as u32;
    let sets = row_sets(vocab);
    let mut references = Vec::new();
    for (_, rows) in &sets {
        references.push(flat(&cpu.run(rows)?));
    }
    drop(cpu);
    // The engine's GPU defaults (contiguous heads, padded attention), then per-length groups.
    for (precision, padded) in [
        (Precision::F32, true),
        (Precision::F16, true),
        (Precision::F32, false),
        (Precision::F16, false),
    ] {
        let variant = format!(
            "gpu-{}-{}",
            precision.name(),
            if padded { "padded" } else { "grouped" }
        );
        let engine = MlxEngine::load(
            dir,
            &EngineSettings {
                device: probe_device(),
                precision: Some(precision),
                contiguous_heads: Some(true),
                padded_attention: Some(padded),
                ..Default::default()
            },
        )?;
        for ((name, rows), reference) in sets.iter().zip(&references) {
            let first = match engine.run(rows) {
                Ok(o) => flat(&o),
                Err(e) => {
                    println!("forward {name} {variant} ERROR {e}");
                    continue;
                }
            };
            report("forward", name, &variant, reference, &first);
            let mut spread = 0f64;
            for _ in 0..3 {
                let again = flat(&engine.run(rows)?);
                spread = spread.max(compare(&first, &again).0);
            }
            println!("repeat {name} {variant} max_abs_vs_first={spread:.3e}");
        }
    }
    Ok(())
}

fn taps_section(dir: &Path) -> Result<(), BoxError> {
    let load = |device, contiguous| {
        MlxEngine::load(
            dir,
            &EngineSettings {
                device,
                precision: Some(Precision::F32),
                contiguous_heads: Some(contiguous),
                ..Default::default()
            },
        )
    };
    let cpu = load(DeviceKind::Cpu, false)?;
    let vocab = cpu.config().encoder.vocab_size as u32;
    let gpu = load(probe_device(), false)?;
    for (name, rows) in row_sets(vocab).into_iter().take(2) {
        let mut taps: Vec<(String, Vec<f32>)> = Vec::new();
        let reference = flat(&cpu.run_tapped(&rows, &mut |tap, a| {
            let v = host(a).map_err(|e| Exception::custom(e.to_string()))?;
            taps.push((tap.to_owned(), v));
            Ok(())
        })?);
        let mut at = 0;
        let got = flat(&gpu.run_tapped(&rows, &mut |tap, a| {
            let v = host(a).map_err(|e| Exception::custom(e.to_string()))?;
            if let Some((rname, rv)) = taps.get(at) {
                report(
                    "taps",
                    &format!("{name}:{}", rname.replace(' ', "_")),
                    "gpu-f32",
                    rv,
                    &v,
                );
                debug_assert_eq!(rname, tap);
            }
            at += 1;
            Ok(())
        })?);
        report(
            "taps",
            &format!("{name}:logits"),
            "gpu-f32",
            &reference,
            &got,
        );
    }
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .ok_or("usage: gpu-probe <checkpoint dir> [ops] [strided] [forward] [taps]")?,
    );
    let mut sections: Vec<String> = args.collect();
    if sections.is_empty() {
        sections = vec!["ops".into(), "forward".into(), "taps".into()];
    }
    for (name, value) in laya_mlx::backend::configure_process() {
        println!("setting {name}={value}");
    }
    let gpu = gpu_stream()?;
    for s in &sections {
        let started = std::time::Instant::now();
        match s.as_str() {
            "ops" => ops_section(&gpu, false)?,
            "strided" => ops_section(&gpu, true)?,
            "forward" => forward_section(&dir)?,
            "taps" => taps_section(&dir)?,
            other => return Err(format!("unknown section {other}").into()),
        }
        println!("section {s} took {:.1} s", started.elapsed().as_secs_f64());
    }
    Ok(())
}
