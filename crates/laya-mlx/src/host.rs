//! Elementwise work the engine does on the host when it runs on MLX's CPU backend.
//!
//! MLX 0.32's CPU backend evaluates `erf` and `exp` one element at a time on one thread:
//! 21 ns an `erf`, 11.6 ms of a 45 ms ModernBERT-large layer at 207 tokens and 37 ms at 590,
//! and the attention softmax 6.4 ms and 55 ms (`results/CPU.md`). The loops here are branch-free so the compiler vectorizes them
//! (8 lanes where the CPU has AVX2, chosen at run time), and they split the rows across
//! cores.
//!
//! `erf` is the Abramowitz–Stegun 7.1.26 form, `1 − (a₁t + … + a₅t⁵)·e^(−x²)` with
//! `t = 1/(1 + p|x|)`. That is the form PyTorch's vectorized CPU kernels evaluate, and so
//! upstream's CPU reference. The formula is within 1.5e-7 of the true erf; evaluated in f32,
//! within 5e-7.

use crate::parallel;

/// `GELU(a) · b` for each row of `h`, whose rows are `[a (inter values) | b (inter values)]`
/// (ModernBERT's GeGLU on the output of `Wi`). Returns `rows × inter` values.
pub(crate) fn geglu(h: &[f32], inter: usize) -> Vec<f32> {
    let mut out = Vec::new();
    geglu_into(h, inter, &mut out);
    out
}

/// [`geglu`] into `out`, resized to the result (its memory reused from call to call).
pub(crate) fn geglu_into(h: &[f32], inter: usize, out: &mut Vec<f32>) {
    let rows = h.len() / (2 * inter);
    out.resize(rows * inter, 0.0);
    let per = rows
        .div_ceil(parallel::threads_for(rows, rows * inter))
        .max(1);
    parallel::run(
        h.chunks(per * 2 * inter)
            .zip(out.chunks_mut(per * inter))
            .map(|(src, dst)| {
                move || {
                    for (row, o) in src.chunks_exact(2 * inter).zip(dst.chunks_exact_mut(inter)) {
                        let (a, b) = row.split_at(inter);
                        geglu_row(a, b, o);
                    }
                }
            }),
    );
}

/// LayerNorm over rows of its weight's width, on the host: the mean, then the variance
/// about it (two passes, so a large mean does not cancel the variance away), summed in f64,
/// then `(x − mean) · 1/√(var + eps) · weight (+ bias)` in f32. ModernBERT's norms have no
/// bias; the decision head's (PyTorch's `LayerNorm`) have one.
///
/// Summed in f32, the moments put the tiny checkpoint's f32 logits 1.8e-5 from upstream's;
/// in f64 (as near exact as PyTorch's Welford sums), 1.6e-5 and act logits 1.8e-6 from
/// upstream's, against MLX's norm's 1.6e-5 and 2.6e-6 (`tests/parity.rs`).
#[derive(Debug)]
pub(crate) struct HostNorm {
    pub weight: Vec<f32>,
    pub bias: Option<Vec<f32>>,
    pub eps: f32,
}

impl HostNorm {
    /// Every row of `x` normalized into `out`, resized to `x`'s length (its memory reused
    /// from call to call).
    pub fn forward_into(&self, x: &[f32], out: &mut Vec<f32>) {
        let d = self.weight.len();
        if d == 0 {
            out.clear();
            return;
        }
        let rows = x.len() / d;
        out.resize(rows * d, 0.0);
        let per = rows.div_ceil(parallel::threads_for(rows, x.len())).max(1);
        parallel::run(
            x.chunks(per * d)
                .zip(out.chunks_mut(per * d))
                .map(|(src, dst)| {
                    move || {
                        for (row, o) in src.chunks_exact(d).zip(dst.chunks_exact_mut(d)) {
                            norm_row(row, &self.weight, self.bias.as_deref(), self.eps, o);
                        }
                    }
                }),
        );
    }
}

/// `x += y`, element by element (the residual adds; the same bits as MLX's `add`).
pub(crate) fn add_assign(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

fn norm_row(x: &[f32], w: &[f32], b: Option<&[f32]>, eps: f32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F, checked just above.
        unsafe { norm_row_avx512(x, w, b, eps, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        unsafe { norm_row_avx2(x, w, b, eps, out) };
        return;
    }
    norm_row_portable(x, w, b, eps, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn norm_row_avx512(x: &[f32], w: &[f32], b: Option<&[f32]>, eps: f32, out: &mut [f32]) {
    norm_row_portable(x, w, b, eps, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn norm_row_avx2(x: &[f32], w: &[f32], b: Option<&[f32]>, eps: f32, out: &mut [f32]) {
    norm_row_portable(x, w, b, eps, out)
}

/// Eight partial sums of `f(v)` over `x`, in f64, so the sum vectorizes; their total in a
/// fixed order, so every build gives the same bits.
#[inline(always)]
fn lane_sum(x: &[f32], f: impl Fn(f64) -> f64) -> f64 {
    let mut lanes = [0f64; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += f(v as f64);
        }
    }
    lanes.iter().sum::<f64>() + chunks.remainder().iter().map(|&v| f(v as f64)).sum::<f64>()
}

#[inline(always)]
fn norm_row_portable(x: &[f32], w: &[f32], b: Option<&[f32]>, eps: f32, out: &mut [f32]) {
    let n = x.len() as f64;
    let mean64 = lane_sum(x, |v| v) / n;
    let var = lane_sum(x, |v| (v - mean64) * (v - mean64)) / n;
    let mean = mean64 as f32;
    let inv = (1.0 / (var + eps as f64).sqrt()) as f32;
    match b {
        Some(b) => {
            for (((o, &v), &g), &c) in out.iter_mut().zip(x).zip(w).zip(b) {
                *o = (v - mean) * inv * g + c;
            }
        }
        None => {
            for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
                *o = (v - mean) * inv * g;
            }
        }
    }
}

/// `max(x, 0)` in place (the decision head's ReLU), split across cores. A NaN stays NaN, as
/// under MLX's `maximum` and PyTorch's `relu`.
pub(crate) fn relu_in_place(x: &mut [f32]) {
    let per = x
        .len()
        .div_ceil(parallel::threads_for(x.len(), x.len()))
        .max(1);
    parallel::run(x.chunks_mut(per).map(|part| {
        move || {
            for v in part {
                if *v < 0.0 {
                    *v = 0.0;
                }
            }
        }
    }));
}

/// The host path's buffers, reused from layer to layer and forward to forward, by the
/// encoder and then the decision head: the residual stream and a norm's output are 22 MB
/// each at 5,500 tokens, a fresh buffer each time costs its page faults, and buffers of
/// their own for the head would hold ~100 MB more at the peak.
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    /// The residual stream, `[T, d]`.
    pub residual: Vec<f32>,
    /// A norm's output, `[T, d]`.
    pub normed: Vec<f32>,
    /// A fused projection's output: the encoder's `Wqkv`, the head's keys and values.
    pub projected: Vec<f32>,
    /// The head's queries.
    pub queries: Vec<f32>,
    /// A linear layer's output on its way into the residual stream, where the layer cannot
    /// add as it stores (int8).
    pub to_add: Vec<f32>,
    /// The feed-forward's first linear layer's output: the encoder's `Wi` where GeGLU is
    /// not in its GEMM's stores (int8, or no AVX-512), the head's `linear1` (ReLU in place).
    pub wide: Vec<f32>,
    /// The encoder's GeGLU output.
    pub geglu: Vec<f32>,
}

/// Softmax of each `keys`-long row of `scores` (all rows, row-major), over the keys whose
/// flag in `mask(row)` is true (all keys for `None`); masked keys get probability 0. A row
/// with no key left is all zeros.
pub(crate) fn softmax_rows<'m>(
    scores: &[f32],
    keys: usize,
    mask: impl Fn(usize) -> Option<&'m [bool]> + Sync,
) -> Vec<f32> {
    let rows = scores.len() / keys;
    let mut out = vec![0f32; rows * keys];
    let per = rows
        .div_ceil(parallel::threads_for(rows, scores.len()))
        .max(1);
    let mask = &mask;
    parallel::run(
        scores
            .chunks(per * keys)
            .zip(out.chunks_mut(per * keys))
            .enumerate()
            .map(|(c, (src, dst))| {
                move || {
                    for (i, (s, o)) in src
                        .chunks_exact(keys)
                        .zip(dst.chunks_exact_mut(keys))
                        .enumerate()
                    {
                        softmax_row(s, mask(c * per + i), o);
                    }
                }
            }),
    );
    out
}

fn softmax_row(s: &[f32], mask: Option<&[bool]>, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        unsafe { softmax_row_avx2(s, mask, out) };
        return;
    }
    softmax_row_portable(s, mask, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn softmax_row_avx2(s: &[f32], mask: Option<&[bool]>, out: &mut [f32]) {
    softmax_row_portable(s, mask, out)
}

#[inline(always)]
fn softmax_row_portable(s: &[f32], mask: Option<&[bool]>, out: &mut [f32]) {
    let max = match mask {
        Some(m) => s
            .iter()
            .zip(m)
            .filter(|(_, &keep)| keep)
            .fold(f32::NEG_INFINITY, |a, (&x, _)| a.max(x)),
        None => s.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x)),
    };
    if max == f32::NEG_INFINITY {
        out.fill(0.0);
        return;
    }
    match mask {
        Some(m) => {
            for ((o, &x), &keep) in out.iter_mut().zip(s).zip(m) {
                let e = exp(x - max);
                *o = if keep { e } else { 0.0 };
            }
        }
        None => {
            for (o, &x) in out.iter_mut().zip(s) {
                *o = exp(x - max);
            }
        }
    }
    // Eight partial sums, so the sum vectorizes like the rest.
    let mut lanes = [0f32; 8];
    let mut chunks = out.chunks_exact(8);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += v;
        }
    }
    let sum = lanes.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>();
    let inv = 1.0 / sum;
    for o in out.iter_mut() {
        *o *= inv;
    }
}

fn geglu_row(a: &[f32], b: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F, checked just above.
        unsafe { geglu_row_avx512(a, b, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        unsafe { geglu_row_avx2(a, b, out) };
        return;
    }
    geglu_row_portable(a, b, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn geglu_row_avx512(a: &[f32], b: &[f32], out: &mut [f32]) {
    geglu_row_portable(a, b, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn geglu_row_avx2(a: &[f32], b: &[f32], out: &mut [f32]) {
    geglu_row_portable(a, b, out)
}

// No fused multiply-adds are written (Rust never contracts `a * b + c`), so every build of
// this loop (AVX-512, AVX2, baseline) gives bit-identical results on every x86-64 CPU.
#[inline(always)]
pub(crate) fn geglu_row_portable(a: &[f32], b: &[f32], out: &mut [f32]) {
    for ((o, &x), &g) in out.iter_mut().zip(a).zip(b) {
        *o = gelu(x) * g;
    }
}

/// Exact-form GELU, `x · ½ · (1 + erf(x/√2))`, in PyTorch's operation order.
#[inline(always)]
pub(crate) fn gelu(x: f32) -> f32 {
    x * 0.5 * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// Abramowitz–Stegun 7.1.26 (see the module docs), its constants as published.
#[inline(always)]
#[allow(clippy::excessive_precision)]
pub(crate) fn erf(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A1: f32 = 0.254_829_592;
    const A2: f32 = -0.284_496_736;
    const A3: f32 = 1.421_413_741;
    const A4: f32 = -1.453_152_027;
    const A5: f32 = 1.061_405_429;
    let ax = x.abs();
    let t = 1.0 / (P * ax + 1.0);
    let r = (((A5 * t + A4) * t + A3) * t + A2) * t + A1;
    let y = 1.0 - r * t * exp(-(x * x));
    y.copysign(x)
}

/// `e^x` to about 1 ulp, branch-free: `x = n·ln2 + r` with `|r| ≤ ln2/2` (Cody–Waite), a
/// degree-7 Taylor polynomial for `e^r` (truncation below 5e-9 relative), and `2^n` built
/// in the exponent bits. Inputs are clamped to where `e^x` is a normal f32.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Adding and subtracting 1.5·2²³ rounds to the nearest integer without a branch.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    p * f32::from_bits(biased_exponent(n) << 23)
}

/// `n + 127` for an integral `n` in −127 ..= 128, read from the mantissa of
/// `1.5·2²³ + 127 + n`, which holds it exactly: the value of `(n as i32 + 127) as u32` without
/// the saturating conversion that keeps `as` from vectorizing.
#[inline(always)]
fn biased_exponent(n: f32) -> u32 {
    const ROUND: f32 = 12_582_912.0;
    (n + (ROUND + 127.0))
        .to_bits()
        .wrapping_sub(ROUND.to_bits())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relu_zeroes_negatives_and_keeps_nan() {
        // Long enough to be split across threads.
        let mut x: Vec<f32> = (0..1 << 17).map(|i| (i % 7) as f32 - 3.0).collect();
        x[5] = f32::NAN;
        x[6] = f32::NEG_INFINITY;
        let want: Vec<f32> = x.iter().map(|&v| if v < 0.0 { 0.0 } else { v }).collect();
        super::relu_in_place(&mut x);
        assert!(
            x[5].is_nan(),
            "NaN must pass through, as under PyTorch's relu"
        );
        assert_eq!(x[6], 0.0);
        for (i, (a, b)) in x.iter().zip(&want).enumerate() {
            assert!(i == 5 || a == b, "{i}: {a} vs {b}");
        }
    }

    #[test]
    fn host_norm_matches_an_f64_layer_norm() {
        let d = 1024;
        let mut s = 0x2545_f491_u32;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s as f32 / u32::MAX as f32 - 0.5
        };
        let weight: Vec<f32> = (0..d).map(|_| 1.0 + next()).collect();
        // Rows with offsets up to 30 times their spread, and one outlier channel. The bound
        // is what f32 sums allow there (the mean's rounding, a few 1e-6 of the spread); a
        // wrong step (no centring, eps or weight misapplied) is off by far more.
        let mut x: Vec<f32> = (0..7 * d)
            .map(|i| next() * 4.0 + (i / d) as f32 * 6.0)
            .collect();
        x[3 * d + 17] = 900.0;
        // Without a bias (ModernBERT's norms) and with one (the decision head's).
        let bias: Vec<f32> = (0..d).map(|_| next() * 3.0).collect();
        for bias in [None, Some(bias)] {
            let norm = HostNorm {
                weight: weight.clone(),
                bias,
                eps: 1e-5,
            };
            let mut out = Vec::new();
            norm.forward_into(&x, &mut out);
            assert_eq!(out.len(), x.len());
            for (row, got) in x.chunks(d).zip(out.chunks(d)) {
                let mean = row.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
                let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / d as f64;
                let inv = 1.0 / (var + 1e-5).sqrt();
                for (c, (&v, &g)) in row.iter().zip(got).enumerate() {
                    let shift = norm.bias.as_ref().map_or(0.0, |b| b[c] as f64);
                    let want = (v as f64 - mean) * inv * norm.weight[c] as f64 + shift;
                    assert!(
                        (g as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "{g} vs {want}"
                    );
                }
            }
            norm.forward_into(&[], &mut out);
            assert!(out.is_empty());
        }
    }

    /// erf and exp in f64 from their series/the standard library, as the yardstick.
    fn erf64(x: f64) -> f64 {
        // Maclaurin series up to |x| = 3 (f64 keeps its cancellation below 1e-12); beyond,
        // erfc's asymptotic series, whose first omitted term is below 1e-9 there.
        if x.abs() > 3.0 {
            let a = x.abs();
            let u = 1.0 / (2.0 * a * a);
            let erfc = (-a * a).exp() / (a * std::f64::consts::PI.sqrt())
                * (1.0 - u + 3.0 * u * u - 15.0 * u * u * u + 105.0 * u.powi(4));
            return x.signum() * (1.0 - erfc);
        }
        let mut sum = 0.0;
        let mut term = x;
        let mut n = 0.0;
        while term.abs() > 1e-18 {
            sum += term / (2.0 * n + 1.0);
            n += 1.0;
            term *= -x * x / n;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn exp_is_within_two_ulp() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let want = (x as f64).exp();
            let got = exp(x) as f64;
            let ulp = (want as f32).abs() * f32::EPSILON;
            assert!(
                (got - want).abs() <= 2.0 * ulp as f64,
                "exp({x}) = {got}, want {want}"
            );
            x += 0.0137;
        }
    }

    #[test]
    fn the_exponent_is_read_exactly() {
        for n in -127..=128 {
            assert_eq!(biased_exponent(n as f32), (n + 127) as u32, "n = {n}");
        }
    }

    #[test]
    fn erf_is_within_the_formula_bound() {
        let mut x = -5.0f32;
        while x < 5.0 {
            let err = (erf(x) as f64 - erf64(x as f64)).abs();
            assert!(err < 5e-7, "erf({x}) off by {err}");
            x += 0.001;
        }
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(-0.0).to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn softmax_rows_match_f64_and_honour_masks() {
        let keys = 37;
        let rows = 3000; // over the threading threshold
        let scores: Vec<f32> = (0..rows * keys)
            .map(|i| ((i * 7919) % 1000) as f32 / 40.0 - 12.0)
            .collect();
        let flags: Vec<bool> = (0..keys).map(|j| j % 3 != 0).collect();
        let none = vec![false; keys];
        let probs = softmax_rows(&scores, keys, |r| match r % 3 {
            0 => None,
            1 => Some(&flags[..]),
            _ => Some(&none[..]),
        });
        for r in [0, 1, 2, rows / 2, rows - 2, rows - 1] {
            let s = &scores[r * keys..(r + 1) * keys];
            let p = &probs[r * keys..(r + 1) * keys];
            let keep = |j: usize| match r % 3 {
                0 => true,
                1 => flags[j],
                _ => false,
            };
            let max = (0..keys)
                .filter(|&j| keep(j))
                .map(|j| s[j] as f64)
                .fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = (0..keys)
                .filter(|&j| keep(j))
                .map(|j| (s[j] as f64 - max).exp())
                .sum();
            for j in 0..keys {
                let want = if keep(j) {
                    (s[j] as f64 - max).exp() / sum
                } else {
                    0.0
                };
                assert!(
                    (p[j] as f64 - want).abs() < 1e-6,
                    "row {r} key {j}: {} vs {want}",
                    p[j]
                );
            }
        }
    }

    /// The AVX-512, AVX2 and baseline builds of the GeGLU and the norm give the same bits
    /// (what lets the engine take the widest one the CPU has).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn every_build_gives_the_same_bits() {
        use std::arch::is_x86_feature_detected as has;
        let mut s = 0x1234_5678_u32;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32 - 0.5) * 12.0
        };
        let n = 1024 + 13;
        let (a, b, w): (Vec<f32>, Vec<f32>, Vec<f32>) = (
            (0..n).map(|_| next()).collect(),
            (0..n).map(|_| next()).collect(),
            (0..n).map(|_| next()).collect(),
        );
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let (mut g0, mut n0) = (vec![0f32; n], vec![0f32; n]);
        super::geglu_row_portable(&a, &b, &mut g0);
        super::norm_row_portable(&a, &w, Some(&b), 1e-5, &mut n0);
        let mut builds = 0;
        for (name, present) in [("avx2", has!("avx2")), ("avx512", has!("avx512f"))] {
            if !present {
                continue;
            }
            let (mut g, mut m) = (vec![0f32; n], vec![0f32; n]);
            // SAFETY: the CPU has the build's features, checked just above.
            unsafe {
                if name == "avx2" {
                    super::geglu_row_avx2(&a, &b, &mut g);
                    super::norm_row_avx2(&a, &w, Some(&b), 1e-5, &mut m);
                } else {
                    super::geglu_row_avx512(&a, &b, &mut g);
                    super::norm_row_avx512(&a, &w, Some(&b), 1e-5, &mut m);
                }
            }
            assert_eq!(bits(&g), bits(&g0), "{name} GeGLU");
            assert_eq!(bits(&m), bits(&n0), "{name} norm");
            builds += 1;
        }
        println!("host builds checked against the baseline: {builds}");
    }

    #[test]
    fn geglu_splits_rows_and_threads_alike() {
        let inter = 300;
        let rows = 400; // over the threading threshold
        let h: Vec<f32> = (0..rows * 2 * inter)
            .map(|i| ((i * 7919) % 2000) as f32 / 250.0 - 4.0)
            .collect();
        let out = geglu(&h, inter);
        assert_eq!(out.len(), rows * inter);
        for r in [0, 1, rows / 2, rows - 1] {
            for j in [0, 1, inter - 1] {
                let (a, b) = (h[r * 2 * inter + j], h[r * 2 * inter + inter + j]);
                assert_eq!(out[r * inter + j], gelu(a) * b);
                let exact = a as f64 * 0.5 * (1.0 + erf64(a as f64 / 2f64.sqrt())) * b as f64;
                assert!((out[r * inter + j] as f64 - exact).abs() < 1e-5 * (1.0 + exact.abs()));
            }
        }
    }
}
