//! The encoder's self-attention on the host, for MLX's CPU backend.
//!
//! MLX's CPU path builds the `[heads, L, L]` score tensor (or the blocked one of the sliding
//! layout), hands it to the host softmax and back, and runs RoPE and the head transposes as
//! separate passes: at 590 tokens the attention half of a ModernBERT-large layer took 67-84 ms
//! of which its two GEMMs are 20 (`results/CPU.md`). Here each (row, head) is one task:
//! RoPE into head-local buffers (keys transposed), then for blocks of four queries the scores
//! against the keys they see (the whole row on global layers, `|i − j| ≤ half` on sliding
//! ones), an exact two-pass softmax per query and the weighted sum of the values. Nothing
//! larger than four queries' scores exists, and the tasks share the machine's cores.
//!
//! The numbers follow `model.md` §3.1 as upstream computes them: the RoPE table of
//! [`laya_core::config::rope_table`] (the CUDA engine's too), `x·cos + rotate_half(x)·sin`,
//! scores scaled by `1/√hd`, the softmax in f32 with the same `exp` as [`crate::host`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::attention::Span;
use crate::host::exp;

/// Queries scored together against one load of each key row.
const QUERY_BLOCK: usize = 4;
/// Keys scored at once: the accumulators of a query block stay in registers.
const KEY_TILE: usize = 16;

/// `cos` and `sin` of every (position, frequency) of one θ, row-major `[pos][hd/2]`.
#[derive(Debug)]
pub(crate) struct RopeTable {
    theta: f32,
    half_dim: usize,
    positions: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeTable {
    /// The table for `positions` positions of `head_dim`-wide heads.
    pub fn new(theta: f32, head_dim: usize, positions: usize) -> RopeTable {
        let (cos, sin) = laya_core::config::rope_table(theta, head_dim, positions);
        RopeTable {
            theta,
            half_dim: head_dim / 2,
            positions,
            cos,
            sin,
        }
    }

    /// Whether this table serves `theta` for rows of up to `positions` tokens.
    pub fn covers(&self, theta: f32, head_dim: usize, positions: usize) -> bool {
        self.theta.to_bits() == theta.to_bits()
            && self.half_dim * 2 == head_dim
            && self.positions >= positions
    }

    fn at(&self, pos: usize) -> (&[f32], &[f32]) {
        let r = pos * self.half_dim..(pos + 1) * self.half_dim;
        (&self.cos[r.clone()], &self.sin[r])
    }
}

/// One layer's self-attention over packed rows. `qkv` is the fused projection, `[T, 3d]`
/// row-major (q, k, v of token `t` at `3d·t`, `3d·t + d`, `3d·t + 2d`; head `h` owns
/// channels `h·hd … h·hd + hd − 1` of each). `half` is the sliding window's reach (`None`
/// on global layers). Returns `[T, d]`, row-major.
pub(crate) fn self_attention(
    qkv: &[f32],
    spans: &[Span],
    heads: usize,
    head_dim: usize,
    rope: &RopeTable,
    half: Option<usize>,
) -> Vec<f32> {
    let d = heads * head_dim;
    let tokens = spans.iter().map(|s| s.start + s.len).max().unwrap_or(0);
    let mut out = vec![0f32; tokens * d];
    let tasks: Vec<(usize, usize)> = (0..spans.len())
        .flat_map(|r| (0..heads).map(move |h| (r, h)))
        .filter(|&(r, _)| spans[r].len > 0)
        .collect();
    let work: usize = tasks.iter().map(|&(r, _)| spans[r].len).sum::<usize>() * head_dim;
    let threads = crate::host::threads_for(tasks.len(), work);
    let next = AtomicUsize::new(0);
    let job = Job {
        qkv,
        d,
        head_dim,
        rope,
        half,
    };
    let done: Vec<Vec<(usize, Vec<f32>)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let t = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&(r, h)) = tasks.get(t) else { break };
                        mine.push((t, job.head(spans[r], h)));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    for (t, head_out) in done.into_iter().flatten() {
        let (r, h) = tasks[t];
        let span = spans[r];
        for (i, row) in head_out.chunks_exact(head_dim).enumerate() {
            let at = (span.start + i) * d + h * head_dim;
            out[at..at + head_dim].copy_from_slice(row);
        }
    }
    out
}

/// What every task of one call reads.
struct Job<'a> {
    qkv: &'a [f32],
    d: usize,
    head_dim: usize,
    rope: &'a RopeTable,
    half: Option<usize>,
}

impl Job<'_> {
    /// Head `h` of one row: `[len, hd]`, row-major.
    fn head(&self, span: Span, h: usize) -> Vec<f32> {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512F, checked just above.
                return unsafe { self.head_avx512(span, h) };
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2, checked just above.
                return unsafe { self.head_avx2(span, h) };
            }
        }
        self.head_portable(span, h)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn head_avx512(&self, span: Span, h: usize) -> Vec<f32> {
        self.head_portable(span, h)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn head_avx2(&self, span: Span, h: usize) -> Vec<f32> {
        self.head_portable(span, h)
    }

    // No fused multiply-adds are written (Rust never contracts `a * b + c`), so every build
    // of this loop gives the same bits.
    #[inline(always)]
    fn head_portable(&self, span: Span, h: usize) -> Vec<f32> {
        let (len, hd, d) = (span.len, self.head_dim, self.d);
        let half_hd = hd / 2;
        let stride = 3 * d;
        // Rotated queries `[len, hd]` (plus a block's worth of zero rows), rotated keys
        // transposed `[hd, lp]` (zero past `len`, and a tile of zeros after the last row, so a
        // tile starting anywhere in a row can be read whole; what it reads past the row's
        // window is never used), values `[len, hd]`.
        let lp = len.next_multiple_of(KEY_TILE);
        let mut q = vec![0f32; (len + QUERY_BLOCK) * hd];
        let mut kt = vec![0f32; hd * lp + KEY_TILE];
        let mut v = vec![0f32; len * hd];
        for i in 0..len {
            let base = (span.start + i) * stride + h * hd;
            let qs = &self.qkv[base..base + hd];
            let ks = &self.qkv[base + d..base + d + hd];
            v[i * hd..(i + 1) * hd].copy_from_slice(&self.qkv[base + 2 * d..base + 2 * d + hd]);
            let (cos, sin) = self.rope.at(i);
            let qi = &mut q[i * hd..(i + 1) * hd];
            for x in 0..half_hd {
                let (c, s) = (cos[x], sin[x]);
                qi[x] = qs[x] * c - qs[x + half_hd] * s;
                qi[x + half_hd] = qs[x + half_hd] * c + qs[x] * s;
                kt[x * lp + i] = ks[x] * c - ks[x + half_hd] * s;
                kt[(x + half_hd) * lp + i] = ks[x + half_hd] * c + ks[x] * s;
            }
        }
        let scale = 1.0 / (hd as f32).sqrt();
        let window = |i: usize| match self.half {
            Some(w) => (i.saturating_sub(w), (i + w).min(len - 1)),
            None => (0, len - 1),
        };
        let mut out = vec![0f32; len * hd];
        let mut scores = vec![0f32; QUERY_BLOCK * (lp + KEY_TILE)];
        let row = lp + KEY_TILE;
        for i0 in (0..len).step_by(QUERY_BLOCK) {
            let nb = (len - i0).min(QUERY_BLOCK);
            let lo = window(i0).0;
            let hi = window(i0 + nb - 1).1;
            // Tiles of KEY_TILE keys from `lo`; the last may reach into the zero padding.
            for t in (lo..=hi).step_by(KEY_TILE) {
                let mut acc = [[0f32; KEY_TILE]; QUERY_BLOCK];
                for x in 0..hd {
                    let k: &[f32; KEY_TILE] = kt[x * lp + t..x * lp + t + KEY_TILE]
                        .try_into()
                        .unwrap_or(&[0.0; KEY_TILE]);
                    for (b, a) in acc.iter_mut().enumerate() {
                        let qx = q[(i0 + b) * hd + x];
                        for (a, &k) in a.iter_mut().zip(k) {
                            *a += qx * k;
                        }
                    }
                }
                for (b, a) in acc.iter().enumerate().take(nb) {
                    let at = b * row + (t - lo);
                    scores[at..at + KEY_TILE].copy_from_slice(a);
                }
            }
            // A full block of queries that see the same keys (every block of a global
            // layer) shares each value row's load; the sums are the same either way.
            if nb == QUERY_BLOCK && hd == 64 && window(i0) == window(i0 + nb - 1) {
                let n = hi - lo + 1;
                let mut sums = [0f32; QUERY_BLOCK];
                for (b, sum) in sums.iter_mut().enumerate() {
                    *sum = softmax_numerators(&mut scores[b * row..b * row + n], scale);
                }
                let p: [&[f32]; QUERY_BLOCK] =
                    std::array::from_fn(|b| &scores[b * row..b * row + n]);
                let o = &mut out[i0 * hd..(i0 + QUERY_BLOCK) * hd];
                weighted_sums::<64>(p, &v[lo * hd..(hi + 1) * hd], o);
                for (o, sum) in o.chunks_exact_mut(hd).zip(sums) {
                    normalize(o, sum);
                }
                continue;
            }
            for b in 0..nb {
                let (qlo, qhi) = window(i0 + b);
                let s = &mut scores[b * row + (qlo - lo)..b * row + (qhi - lo) + 1];
                let o = &mut out[(i0 + b) * hd..(i0 + b + 1) * hd];
                let sum = softmax_numerators(s, scale);
                match hd {
                    64 => weighted_sum::<64>(s, &v[qlo * hd..(qhi + 1) * hd], o),
                    _ => weighted_sum_any(s, &v[qlo * hd..(qhi + 1) * hd], o),
                }
                normalize(o, sum);
            }
        }
        out
    }
}

/// One query's softmax numerators `e^(scale·s − max)` in place of its scores `s`; returns
/// their sum (the softmax is `s / sum`, applied to the weighted sum by [`normalize`]).
#[inline(always)]
fn softmax_numerators(s: &mut [f32], scale: f32) -> f32 {
    let mut max = f32::NEG_INFINITY;
    for x in s.iter_mut() {
        *x *= scale;
        max = max.max(*x);
    }
    // Eight partial sums, so the sum vectorizes like the rest.
    let mut lanes = [0f32; 8];
    let mut chunks = s.chunks_exact_mut(8);
    for c in &mut chunks {
        for (l, x) in lanes.iter_mut().zip(c.iter_mut()) {
            *x = exp(*x - max);
            *l += *x;
        }
    }
    let mut sum = 0f32;
    for x in chunks.into_remainder() {
        *x = exp(*x - max);
        sum += *x;
    }
    lanes.iter().sum::<f32>() + sum
}

#[inline(always)]
fn normalize(o: &mut [f32], sum: f32) {
    let inv = 1.0 / sum;
    for x in o.iter_mut() {
        *x *= inv;
    }
}

/// [`weighted_sum`] for a block of queries over the same keys: `o` is their outputs, one
/// after another. Each output is summed in the same order as alone.
#[inline(always)]
fn weighted_sums<const HD: usize>(p: [&[f32]; QUERY_BLOCK], v: &[f32], o: &mut [f32]) {
    let mut acc = [[0f32; HD]; QUERY_BLOCK];
    for (j, vj) in v.chunks_exact(HD).enumerate() {
        for (a, p) in acc.iter_mut().zip(&p) {
            let pj = p[j];
            for (a, &x) in a.iter_mut().zip(vj) {
                *a += pj * x;
            }
        }
    }
    for (o, a) in o.chunks_exact_mut(HD).zip(&acc) {
        o.copy_from_slice(a);
    }
}

/// `o = Σ_j p[j] · v[j]`, the accumulator in registers for the common head width.
#[inline(always)]
fn weighted_sum<const HD: usize>(p: &[f32], v: &[f32], o: &mut [f32]) {
    let mut acc = [0f32; HD];
    for (&pj, vj) in p.iter().zip(v.chunks_exact(HD)) {
        for (a, &x) in acc.iter_mut().zip(vj) {
            *a += pj * x;
        }
    }
    o.copy_from_slice(&acc);
}

#[inline(always)]
fn weighted_sum_any(p: &[f32], v: &[f32], o: &mut [f32]) {
    o.fill(0.0);
    for (&pj, vj) in p.iter().zip(v.chunks_exact(o.len())) {
        for (a, &x) in o.iter_mut().zip(vj) {
            *a += pj * x;
        }
    }
}

/// The RoPE tables an encoder has built, one per θ, grown to the longest row seen.
#[derive(Debug, Default)]
pub(crate) struct RopeTables(std::sync::Mutex<Vec<Arc<RopeTable>>>);

impl RopeTables {
    /// A table for `theta` covering rows of `positions` tokens.
    pub fn get(&self, theta: f32, head_dim: usize, positions: usize) -> Arc<RopeTable> {
        let mut tables = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = tables.iter().find(|t| t.covers(theta, head_dim, positions)) {
            return t.clone();
        }
        tables.retain(|t| t.theta.to_bits() != theta.to_bits());
        // Grown in steps, so rows of slowly rising length do not rebuild it every time.
        let positions = positions.next_power_of_two().max(512);
        let table = Arc::new(RopeTable::new(theta, head_dim, positions));
        tables.push(table.clone());
        table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention in f64, the textbook way: RoPE, full scores, masked softmax, sum.
    fn reference(
        qkv: &[f32],
        spans: &[Span],
        heads: usize,
        hd: usize,
        theta: f32,
        half: Option<usize>,
    ) -> Vec<f64> {
        let d = heads * hd;
        let tokens = spans.iter().map(|s| s.start + s.len).max().unwrap_or(0);
        let mut out = vec![0f64; tokens * d];
        let rope = RopeTable::new(theta, hd, 2048);
        for span in spans {
            for h in 0..heads {
                let rot = |t: usize, off: usize| -> Vec<f64> {
                    let base = (span.start + t) * 3 * d + off + h * hd;
                    let x = &qkv[base..base + hd];
                    let (c, s) = rope.at(t);
                    (0..hd)
                        .map(|i| {
                            let j = i % (hd / 2);
                            let (c, s) = (c[j] as f64, s[j] as f64);
                            if i < hd / 2 {
                                x[i] as f64 * c - x[i + hd / 2] as f64 * s
                            } else {
                                x[i] as f64 * c + x[i - hd / 2] as f64 * s
                            }
                        })
                        .collect()
                };
                for i in 0..span.len {
                    let qi = rot(i, 0);
                    let keys: Vec<usize> = (0..span.len)
                        .filter(|&j| half.is_none_or(|w| i.abs_diff(j) <= w))
                        .collect();
                    let scores: Vec<f64> = keys
                        .iter()
                        .map(|&j| {
                            let kj = rot(j, d);
                            qi.iter().zip(&kj).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt()
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for (&j, &w) in keys.iter().zip(&e) {
                        let base = (span.start + j) * 3 * d + 2 * d + h * hd;
                        for x in 0..hd {
                            out[(span.start + i) * d + h * hd + x] +=
                                w / sum * qkv[base + x] as f64;
                        }
                    }
                }
            }
        }
        out
    }

    fn inputs(tokens: usize, d: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        (0..tokens * 3 * d)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
            })
            .collect()
    }

    #[test]
    fn matches_f64_attention_on_global_and_sliding_layers() {
        let (heads, hd) = (3, 64);
        // Rows shorter than, equal to and longer than the window, one of a single token.
        let spans = crate::attention::spans_from_lengths([1, 7, 13, 40, 5]);
        let tokens = 66;
        let qkv = inputs(tokens, heads * hd, 7);
        for half in [None, Some(2), Some(6), Some(64)] {
            for theta in [10_000.0, 160_000.0] {
                let rope = RopeTable::new(theta, hd, 64);
                let got = self_attention(&qkv, &spans, heads, hd, &rope, half);
                let want = reference(&qkv, &spans, heads, hd, theta, half);
                let worst = got
                    .iter()
                    .zip(&want)
                    .map(|(&g, &w)| (g as f64 - w).abs())
                    .fold(0.0, f64::max);
                assert!(
                    worst < 2e-5,
                    "half {half:?}, theta {theta}: max error {worst}"
                );
            }
        }
    }

    #[test]
    fn other_head_widths_take_the_general_path() {
        let (heads, hd) = (2, 32);
        let spans = crate::attention::spans_from_lengths([9, 3]);
        let qkv = inputs(12, heads * hd, 11);
        let rope = RopeTable::new(10_000.0, hd, 16);
        let got = self_attention(&qkv, &spans, heads, hd, &rope, Some(4));
        let want = reference(&qkv, &spans, heads, hd, 10_000.0, Some(4));
        for (&g, &w) in got.iter().zip(&want) {
            assert!((g as f64 - w).abs() < 2e-5, "{g} vs {w}");
        }
    }

    #[test]
    fn tables_are_shared_and_grown() {
        let tables = RopeTables::default();
        let a = tables.get(10_000.0, 64, 100);
        let b = tables.get(10_000.0, 64, 300);
        assert!(Arc::ptr_eq(&a, &b));
        let c = tables.get(10_000.0, 64, 600);
        assert!(c.positions >= 600 && !Arc::ptr_eq(&a, &c));
        let g = tables.get(160_000.0, 64, 10);
        assert!(g.covers(160_000.0, 64, 10));
    }
}
