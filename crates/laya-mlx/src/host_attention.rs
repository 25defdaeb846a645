//! The encoder's self-attention on the host, for MLX's CPU backend.
//!
//! MLX's CPU path builds the `[heads, L, L]` score tensor (or the blocked one of the sliding
//! layout), hands it to the host softmax and back, and runs RoPE and the head transposes as
//! separate passes: at 590 tokens the attention half of a ModernBERT-large layer took 67-84 ms
//! of which its two GEMMs are 20 (`results/CPU.md`). Here each (row, head) is one task:
//! RoPE into head-local buffers (keys packed in tiles), then for blocks of queries the scores
//! against the keys they see (the whole row on global layers, `|i − j| ≤ half` on sliding
//! ones), an exact two-pass softmax per query and the weighted sum of the values. Nothing
//! larger than one block's scores exists, and the tasks share the machine's cores.
//!
//! 64-wide heads (every System 1 encoder's) take a register-blocked kernel: 8 queries × 32
//! keys of fused multiply-adds per step on AVX-512 (AVX2 and portable Rust elsewhere, the
//! same bits), at 3 × 590 tokens ~4x the plain loops it replaced. Heads of other widths take
//! those plain loops.
//!
//! The numbers follow `model.md` §3.1 as upstream computes them: the RoPE table of
//! [`laya_core::config::rope_table`] (the CUDA engine's too), `x·cos + rotate_half(x)·sin`,
//! scores scaled by `1/√hd`, the softmax in f32 with the same `exp` as [`crate::host`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::attention::Span;
use crate::host::exp;

/// Queries scored together against one load of each key row (heads of any width).
const QUERY_BLOCK: usize = 4;
/// The head width of the blocked kernel: every System 1 encoder's (ModernBERT-large 16 × 64,
/// mmBERT-base 12 × 64).
const HD: usize = 64;
/// Queries of one block of the 64-wide kernel: they share every key and value load.
const QB: usize = 8;
/// Keys of one packed tile of the 64-wide kernel.
const KT: usize = 32;
/// Keys scored at once: the accumulators of a query block stay in registers.
const KEY_TILE: usize = 16;

/// Tokens ahead whose query, key and value a head's packing asks the cache for: each is
/// 256 bytes of a row many kilobytes long, which the hardware's prefetchers do not follow.
const PREFETCH: usize = 8;

/// Asks for `x`'s cache lines ahead of their use (a hint only; nothing changes but timing).
#[inline(always)]
fn prefetch(x: &[f32]) {
    // A line's start every 16 values, and the last value's line: unaligned, 64 values span
    // five lines.
    #[cfg(target_arch = "x86_64")]
    for at in x.iter().step_by(16).chain(x.last()) {
        // SAFETY: a prefetch reads nothing the program sees, and the address is in `x`.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                at as *const f32 as *const i8,
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

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
    let job = Job {
        q: qkv,
        q_stride: 3 * d,
        kv: qkv,
        kv_stride: 3 * d,
        k_col: d,
        v_col: 2 * d,
        d,
        head_dim,
        rope: Some(rope),
        half,
    };
    job.run(spans, spans)
}

/// The decision head's attention (`torch.nn.MultiheadAttention`: no positions, every key of
/// the row) for 64-wide heads: the queries of row `r` are `q`'s rows `q_spans[r]` (`[Tq, d]`;
/// every token, or the last layer's few selected positions), its keys and values `kv`'s rows
/// `kv_spans[r]` (`[T, 2d]`, keys then values). Returns `[Tq, d]`.
pub(crate) fn cross_attention(
    q: &[f32],
    q_spans: &[Span],
    kv: &[f32],
    kv_spans: &[Span],
    d: usize,
) -> Vec<f32> {
    let job = Job {
        q,
        q_stride: d,
        kv,
        kv_stride: 2 * d,
        k_col: 0,
        v_col: d,
        d,
        head_dim: HD,
        rope: None,
        half: None,
    };
    job.run(q_spans, kv_spans)
}

/// What every task of one call reads: where each token's query, key and value of a head
/// are, and the positions and window that apply. RoPE and a window need queries and keys to
/// be the same tokens (self-attention).
struct Job<'a> {
    q: &'a [f32],
    q_stride: usize,
    kv: &'a [f32],
    kv_stride: usize,
    k_col: usize,
    v_col: usize,
    d: usize,
    head_dim: usize,
    rope: Option<&'a RopeTable>,
    half: Option<usize>,
}

/// The output rows, which the tasks write in disjoint parts (one head of each token each).
struct Out(*mut f32);
// SAFETY: see `Job::run`: no two tasks write the same element, and nothing reads it before
// every task has ended.
unsafe impl Sync for Out {}

impl Out {
    /// A method, so closures capture the whole (`Sync`) wrapper, not its raw field.
    fn ptr(&self) -> *mut f32 {
        self.0
    }
}

impl Job<'_> {
    /// Every (row, head) as one task, shared by the machine's cores; `[Tq, d]` out.
    fn run(&self, q_spans: &[Span], kv_spans: &[Span]) -> Vec<f32> {
        let (d, hd) = (self.d, self.head_dim);
        let heads = d / hd;
        let tokens = q_spans.iter().map(|s| s.start + s.len).max().unwrap_or(0);
        let mut out = vec![0f32; tokens * d];
        let tasks: Vec<(usize, usize)> = (0..q_spans.len())
            .flat_map(|r| (0..heads).map(move |h| (r, h)))
            .filter(|&(r, _)| q_spans[r].len > 0 && kv_spans[r].len > 0)
            .collect();
        let work: usize = tasks
            .iter()
            .map(|&(r, _)| q_spans[r].len * kv_spans[r].len)
            .sum::<usize>()
            * hd;
        let threads = crate::parallel::threads_for(tasks.len(), work);
        // The tasks write `out` in place, each its head of its rows' tokens: that is only
        // sound if no token belongs to two rows.
        let mut taken: Vec<(usize, usize)> = q_spans
            .iter()
            .filter(|s| s.len > 0)
            .map(|s| (s.start, s.start + s.len))
            .collect();
        taken.sort_unstable();
        assert!(
            taken.windows(2).all(|w| w[0].1 <= w[1].0),
            "query rows overlap"
        );
        let next = AtomicUsize::new(0);
        let dst = Out(out.as_mut_ptr());
        crate::parallel::broadcast(threads, || loop {
            let t = next.fetch_add(1, Ordering::Relaxed);
            let Some(&(r, h)) = tasks.get(t) else { break };
            let span = q_spans[r];
            let head_out = self.head(span, kv_spans[r], h);
            assert_eq!(
                head_out.len(),
                span.len * hd,
                "a head's output is [queries, hd]"
            );
            // Each thread places its own heads, so the copy is shared too.
            for (i, row) in head_out.chunks_exact(hd).enumerate() {
                let at = (span.start + i) * d + h * hd;
                // SAFETY: `out` holds `[tokens, d]` and outlives the threads; `at .. at + hd`
                // is head `h`'s part of token `span.start + i`, written by this task alone.
                unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), dst.ptr().add(at), hd) };
            }
        });
        out
    }

    /// Head `h`'s `hd` query values of query token `t`.
    fn q_at(&self, t: usize, h: usize) -> &[f32] {
        let at = t * self.q_stride + h * self.head_dim;
        &self.q[at..at + self.head_dim]
    }

    /// Head `h`'s key and value of token `t`.
    fn kv_at(&self, t: usize, h: usize) -> (&[f32], &[f32]) {
        let (at, hd) = (t * self.kv_stride + h * self.head_dim, self.head_dim);
        (
            &self.kv[at + self.k_col..at + self.k_col + hd],
            &self.kv[at + self.v_col..at + self.v_col + hd],
        )
    }

    /// The keys query `i` of a row of `len` keys sees, inclusive.
    fn window(&self, i: usize, len: usize) -> (usize, usize) {
        match self.half {
            Some(w) => (i.saturating_sub(w), (i + w).min(len - 1)),
            None => (0, len - 1),
        }
    }
}

impl Job<'_> {
    /// Head `h` of one row, its queries `qs` and its keys `ks`: `[qs.len, hd]`, row-major.
    fn head(&self, qs: Span, ks: Span, h: usize) -> Vec<f32> {
        if self.head_dim != HD {
            return self.head_any(qs, h);
        }
        match Simd::detect() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `detect` saw AVX-512F and FMA on this CPU.
            Simd::Avx512 => unsafe { self.head64_avx512(qs, ks, h) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `detect` saw AVX2 and FMA on this CPU.
            Simd::Avx2 => unsafe { self.head64_avx2(qs, ks, h) },
            Simd::Portable => self.head64(qs, ks, h, Simd::Portable),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,fma")]
    unsafe fn head64_avx512(&self, qs: Span, ks: Span, h: usize) -> Vec<f32> {
        self.head64(qs, ks, h, Simd::Avx512)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn head64_avx2(&self, qs: Span, ks: Span, h: usize) -> Vec<f32> {
        self.head64(qs, ks, h, Simd::Avx2)
    }

    /// The blocked kernel for 64-wide heads: blocks of [`QB`] queries against packed tiles of
    /// [`KT`] keys, the block's scores (`QB` rows of the keys it sees) kept for an exact
    /// two-pass softmax, then one pass over the values for the whole block. A query's keys
    /// outside its window get probability 0, which adds nothing to its sums.
    #[inline(always)]
    fn head64(&self, qs: Span, ks: Span, h: usize, simd: Simd) -> Vec<f32> {
        let (nq, len) = (qs.len, ks.len);
        let tiles = len.div_ceil(KT);
        let lp = tiles * KT;
        // Queries (rotated where RoPE applies) pre-scaled by 1/√64 = 2⁻³ (exact, so the
        // scores are the same bits as scaling them), zero rows up to a whole block; keys
        // (rotated likewise) packed per tile as `[tile][x][KT]`; values `[lp][HD]`; zeros
        // past the row.
        let mut q = vec![0f32; nq.next_multiple_of(QB) * HD];
        let mut kp = vec![0f32; lp * HD];
        let mut v = vec![0f32; lp * HD];
        for i in 0..nq {
            if i + PREFETCH < nq {
                prefetch(self.q_at(qs.start + i + PREFETCH, h));
            }
            let (src, qi) = (self.q_at(qs.start + i, h), &mut q[i * HD..(i + 1) * HD]);
            match self.rope {
                Some(rope) => {
                    let (cos, sin) = rope.at(i);
                    for x in 0..HD / 2 {
                        let (c, s) = (cos[x], sin[x]);
                        qi[x] = (src[x] * c - src[x + HD / 2] * s) * 0.125;
                        qi[x + HD / 2] = (src[x + HD / 2] * c + src[x] * s) * 0.125;
                    }
                }
                None => {
                    for (o, &x) in qi.iter_mut().zip(src) {
                        *o = x * 0.125;
                    }
                }
            }
        }
        for i in 0..len {
            if i + PREFETCH < len {
                let (ahead_k, ahead_v) = self.kv_at(ks.start + i + PREFETCH, h);
                prefetch(ahead_k);
                prefetch(ahead_v);
            }
            let (ksrc, vsrc) = self.kv_at(ks.start + i, h);
            v[i * HD..(i + 1) * HD].copy_from_slice(vsrc);
            let kt = &mut kp[(i / KT) * HD * KT + i % KT..];
            match self.rope {
                Some(rope) => {
                    let (cos, sin) = rope.at(i);
                    for x in 0..HD / 2 {
                        let (c, s) = (cos[x], sin[x]);
                        kt[x * KT] = ksrc[x] * c - ksrc[x + HD / 2] * s;
                        kt[(x + HD / 2) * KT] = ksrc[x + HD / 2] * c + ksrc[x] * s;
                    }
                }
                None => {
                    for (x, &k) in ksrc.iter().enumerate() {
                        kt[x * KT] = k;
                    }
                }
            }
        }
        // Self-attention's windows; the head's queries see every key.
        let window = |i: usize| self.window(i, len);
        let mut out = vec![0f32; nq * HD];
        let mut scores = vec![0f32; QB * lp];
        let mut o = [0f32; QB * HD];
        for i0 in (0..nq).step_by(QB) {
            let nb = (nq - i0).min(QB);
            let (t_lo, t_hi) = (window(i0).0 / KT, window(i0 + nb - 1).1 / KT);
            let first = t_lo * KT;
            let n = (t_hi + 1 - t_lo) * KT;
            let qb: &[f32; QB * HD] = slice_array(&q[i0 * HD..]);
            for t in t_lo..=t_hi {
                let k: &[f32; HD * KT] = slice_array(&kp[t * HD * KT..]);
                simd.scores(qb, k, &mut scores[(t - t_lo) * KT..], lp);
            }
            let mut sums = [1f32; QB];
            for (b, sum) in sums.iter_mut().enumerate() {
                let row = &mut scores[b * lp..b * lp + n];
                if b < nb {
                    let (lo, hi) = window(i0 + b);
                    *sum = numerators(row, lo - first, hi + 1 - first);
                } else {
                    row.fill(0.0);
                }
            }
            simd.values(&scores, lp, n, &v[first * HD..(first + n) * HD], &mut o);
            for (b, sum) in sums.iter().enumerate().take(nb) {
                let dst = &mut out[(i0 + b) * HD..(i0 + b + 1) * HD];
                dst.copy_from_slice(&o[b * HD..(b + 1) * HD]);
                normalize(dst, *sum);
            }
        }
        out
    }

    /// Head `h` of one row of self-attention for heads of any width. No fused
    /// multiply-adds are written (Rust never contracts `a * b + c`), so every build of this
    /// loop gives the same bits.
    fn head_any(&self, span: Span, h: usize) -> Vec<f32> {
        let (len, hd) = (span.len, self.head_dim);
        let half_hd = hd / 2;
        // Rotated queries `[len, hd]` (plus a block's worth of zero rows), rotated keys
        // transposed `[hd, lp]` (zero past `len`, and a tile of zeros after the last row, so a
        // tile starting anywhere in a row can be read whole; what it reads past the row's
        // window is never used), values `[len, hd]`.
        let lp = len.next_multiple_of(KEY_TILE);
        let mut q = vec![0f32; (len + QUERY_BLOCK) * hd];
        let mut kt = vec![0f32; hd * lp + KEY_TILE];
        let mut v = vec![0f32; len * hd];
        for i in 0..len {
            let qs = self.q_at(span.start + i, h);
            let (ks, vs) = self.kv_at(span.start + i, h);
            v[i * hd..(i + 1) * hd].copy_from_slice(vs);
            let qi = &mut q[i * hd..(i + 1) * hd];
            let Some(rope) = self.rope else {
                qi.copy_from_slice(qs);
                for (x, &k) in ks.iter().enumerate() {
                    kt[x * lp + i] = k;
                }
                continue;
            };
            let (cos, sin) = rope.at(i);
            for x in 0..half_hd {
                let (c, s) = (cos[x], sin[x]);
                qi[x] = qs[x] * c - qs[x + half_hd] * s;
                qi[x + half_hd] = qs[x + half_hd] * c + qs[x] * s;
                kt[x * lp + i] = ks[x] * c - ks[x + half_hd] * s;
                kt[(x + half_hd) * lp + i] = ks[x + half_hd] * c + ks[x] * s;
            }
        }
        let scale = 1.0 / (hd as f32).sqrt();
        let window = |i: usize| self.window(i, len);
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

/// `a[..N]` as an array (the blocked kernels' fixed-size operands).
#[inline(always)]
fn slice_array<const N: usize>(a: &[f32]) -> &[f32; N] {
    a[..N].try_into().expect("a slice of N values")
}

/// The inner products of the 64-wide kernel, on the widest vectors the CPU has. Each output
/// element is one chain of fused multiply-adds, over `x` (scores) or the keys (values) in
/// ascending order, starting from zero; the implementations only tile the elements
/// differently, so all of them give the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Simd {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Portable,
}

impl Simd {
    fn detect() -> Simd {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("fma") {
                return Simd::Avx512;
            }
            if has!("avx2") && has!("fma") {
                return Simd::Avx2;
            }
        }
        Simd::Portable
    }

    /// Every implementation this CPU runs (the tests compare them).
    #[cfg(test)]
    fn available() -> Vec<Simd> {
        #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
        let mut all = vec![Simd::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx2") && has!("fma") {
                all.push(Simd::Avx2);
            }
            if has!("avx512f") && has!("fma") {
                all.push(Simd::Avx512);
            }
        }
        all
    }

    /// `s[b·stride + j] = Σ_x q[b][x] · k[x][j]` for the block's [`QB`] queries (`[QB][HD]`)
    /// and one packed tile of [`KT`] keys (`[HD][KT]`).
    #[inline(always)]
    fn scores(self, q: &[f32; QB * HD], k: &[f32; HD * KT], s: &mut [f32], stride: usize) {
        assert!(s.len() >= (QB - 1) * stride + KT);
        match self {
            // SAFETY: the CPU has the features (`detect`); `s` holds every row written.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 => unsafe { x86::scores512(q, k, s.as_mut_ptr(), stride) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { x86::scores256(q, k, s.as_mut_ptr(), stride) },
            Simd::Portable => {
                for b in 0..QB {
                    for j in 0..KT {
                        let mut a = 0f32;
                        for x in 0..HD {
                            a = q[b * HD + x].mul_add(k[x * KT + j], a);
                        }
                        s[b * stride + j] = a;
                    }
                }
            }
        }
    }

    /// `o[b][c] = Σ_{j<n} p[b·stride + j] · v[j][c]` for the block's [`QB`] queries.
    #[inline(always)]
    fn values(self, p: &[f32], stride: usize, n: usize, v: &[f32], o: &mut [f32; QB * HD]) {
        assert!(p.len() >= (QB - 1) * stride + n && v.len() >= n * HD);
        match self {
            // SAFETY: the CPU has the features (`detect`); the bounds are checked above.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 => unsafe { x86::values512(p.as_ptr(), stride, n, v.as_ptr(), o) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { x86::values256(p.as_ptr(), stride, n, v.as_ptr(), o) },
            Simd::Portable => {
                for b in 0..QB {
                    for c in 0..HD {
                        let mut a = 0f32;
                        for j in 0..n {
                            a = p[b * stride + j].mul_add(v[j * HD + c], a);
                        }
                        o[b * HD + c] = a;
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{HD, KT, QB};

    /// All [`QB`] × [`KT`] scores at once: 16 registers of sums, two key loads per `x`.
    #[target_feature(enable = "avx512f,fma")]
    pub(super) unsafe fn scores512(
        q: &[f32; QB * HD],
        k: &[f32; HD * KT],
        s: *mut f32,
        stride: usize,
    ) {
        let (q, k) = (q.as_ptr(), k.as_ptr());
        let mut acc = [[_mm512_setzero_ps(); 2]; QB];
        for x in 0..HD {
            let k0 = _mm512_loadu_ps(k.add(x * KT));
            let k1 = _mm512_loadu_ps(k.add(x * KT + 16));
            for (b, a) in acc.iter_mut().enumerate() {
                let qb = _mm512_set1_ps(*q.add(b * HD + x));
                a[0] = _mm512_fmadd_ps(qb, k0, a[0]);
                a[1] = _mm512_fmadd_ps(qb, k1, a[1]);
            }
        }
        for (b, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(s.add(b * stride), a[0]);
            _mm512_storeu_ps(s.add(b * stride + 16), a[1]);
        }
    }

    /// Half the head's width for all [`QB`] queries at a time: 16 registers of sums, two
    /// value loads per key.
    #[target_feature(enable = "avx512f,fma")]
    pub(super) unsafe fn values512(
        p: *const f32,
        stride: usize,
        n: usize,
        v: *const f32,
        o: &mut [f32; QB * HD],
    ) {
        for half in 0..2 {
            let mut acc = [[_mm512_setzero_ps(); 2]; QB];
            for j in 0..n {
                let v0 = _mm512_loadu_ps(v.add(j * HD + half * 32));
                let v1 = _mm512_loadu_ps(v.add(j * HD + half * 32 + 16));
                for (b, a) in acc.iter_mut().enumerate() {
                    let pb = _mm512_set1_ps(*p.add(b * stride + j));
                    a[0] = _mm512_fmadd_ps(pb, v0, a[0]);
                    a[1] = _mm512_fmadd_ps(pb, v1, a[1]);
                }
            }
            for (b, a) in acc.iter().enumerate() {
                _mm512_storeu_ps(o.as_mut_ptr().add(b * HD + half * 32), a[0]);
                _mm512_storeu_ps(o.as_mut_ptr().add(b * HD + half * 32 + 16), a[1]);
            }
        }
    }

    /// Four queries × 16 keys at a time: 8 registers of sums, two key loads per `x`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn scores256(
        q: &[f32; QB * HD],
        k: &[f32; HD * KT],
        s: *mut f32,
        stride: usize,
    ) {
        let (q, k) = (q.as_ptr(), k.as_ptr());
        for b0 in (0..QB).step_by(4) {
            for j0 in (0..KT).step_by(16) {
                let mut acc = [[_mm256_setzero_ps(); 2]; 4];
                for x in 0..HD {
                    let k0 = _mm256_loadu_ps(k.add(x * KT + j0));
                    let k1 = _mm256_loadu_ps(k.add(x * KT + j0 + 8));
                    for (b, a) in acc.iter_mut().enumerate() {
                        let qb = _mm256_set1_ps(*q.add((b0 + b) * HD + x));
                        a[0] = _mm256_fmadd_ps(qb, k0, a[0]);
                        a[1] = _mm256_fmadd_ps(qb, k1, a[1]);
                    }
                }
                for (b, a) in acc.iter().enumerate() {
                    _mm256_storeu_ps(s.add((b0 + b) * stride + j0), a[0]);
                    _mm256_storeu_ps(s.add((b0 + b) * stride + j0 + 8), a[1]);
                }
            }
        }
    }

    /// Four queries × 16 of the head's values at a time: 8 registers of sums.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn values256(
        p: *const f32,
        stride: usize,
        n: usize,
        v: *const f32,
        o: &mut [f32; QB * HD],
    ) {
        for b0 in (0..QB).step_by(4) {
            for c0 in (0..HD).step_by(16) {
                let mut acc = [[_mm256_setzero_ps(); 2]; 4];
                for j in 0..n {
                    let v0 = _mm256_loadu_ps(v.add(j * HD + c0));
                    let v1 = _mm256_loadu_ps(v.add(j * HD + c0 + 8));
                    for (b, a) in acc.iter_mut().enumerate() {
                        let pb = _mm256_set1_ps(*p.add((b0 + b) * stride + j));
                        a[0] = _mm256_fmadd_ps(pb, v0, a[0]);
                        a[1] = _mm256_fmadd_ps(pb, v1, a[1]);
                    }
                }
                for (b, a) in acc.iter().enumerate() {
                    _mm256_storeu_ps(o.as_mut_ptr().add((b0 + b) * HD + c0), a[0]);
                    _mm256_storeu_ps(o.as_mut_ptr().add((b0 + b) * HD + c0 + 8), a[1]);
                }
            }
        }
    }
}

/// A query's softmax numerators `e^(s − max)` over its keys `row[lo..hi]` (already scaled),
/// every other entry of `row` set to 0; returns their sum. Branch-free, so it vectorizes in
/// whatever vector context inlines it, and the sum's order (16 lanes, then the rest) is the
/// same in every one.
#[inline(always)]
fn numerators(row: &mut [f32], lo: usize, hi: usize) -> f32 {
    // The maximum in 16 lanes (a select, not `f32::max`, so it vectorizes); exact in any order.
    let mut top = [f32::NEG_INFINITY; 16];
    let mut chunks = row[lo..hi].chunks_exact(16);
    for c in &mut chunks {
        for (t, &x) in top.iter_mut().zip(c) {
            *t = if x > *t { x } else { *t };
        }
    }
    let max = chunks
        .remainder()
        .iter()
        .chain(&top)
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    row[..lo].fill(0.0);
    row[hi..].fill(0.0);
    let mut lanes = [0f32; 16];
    let mut chunks = row[lo..hi].chunks_exact_mut(16);
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
    fn every_vector_width_gives_the_same_bits() {
        let (heads, hd) = (2, 64);
        let d = heads * hd;
        // Rows ending inside, at and past a key tile and a query block.
        let spans = crate::attention::spans_from_lengths([1, 9, 31, 32, 33, 100]);
        let tokens = spans.iter().map(|s| s.start + s.len).max().unwrap_or(0);
        let qkv = inputs(tokens, d, 3);
        let rope = RopeTable::new(160_000.0, hd, 128);
        for half in [None, Some(5), Some(64)] {
            let job = Job {
                q: &qkv,
                q_stride: 3 * d,
                kv: &qkv,
                kv_stride: 3 * d,
                k_col: d,
                v_col: 2 * d,
                d,
                head_dim: hd,
                rope: Some(&rope),
                half,
            };
            for &span in &spans {
                for h in 0..heads {
                    let want = job.head64(span, span, h, Simd::Portable);
                    for simd in Simd::available() {
                        let got = job.head64(span, span, h, simd);
                        let same = got
                            .iter()
                            .zip(&want)
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(same, "{simd:?}, half {half:?}, row of {}", span.len);
                    }
                }
            }
        }
    }

    #[test]
    fn cross_attention_matches_f64_at_every_position_or_a_few() {
        let (heads, d) = (2, 128);
        let kv_spans = crate::attention::spans_from_lengths([1, 33, 70]);
        let tokens = 104;
        let q_all = inputs(tokens, d / 3 + 1, 5)[..tokens * d].to_vec();
        let kv = inputs(tokens, 2 * d / 3 + 1, 9)[..tokens * 2 * d].to_vec();
        // Every token's query, then a few per row (the last head layer's selected positions).
        let picks: [&[usize]; 3] = [&[0], &[0, 5, 32], &[0, 1, 40, 69]];
        let mut q_few = Vec::new();
        for (span, pick) in kv_spans.iter().zip(picks) {
            for &i in pick {
                q_few.extend_from_slice(&q_all[(span.start + i) * d..(span.start + i + 1) * d]);
            }
        }
        let few_spans = crate::attention::spans_from_lengths(picks.iter().map(|p| p.len()));
        for (q, q_spans) in [(&q_all, &kv_spans), (&q_few, &few_spans)] {
            let got = cross_attention(q, q_spans, &kv, &kv_spans, d);
            for (r, (qs, ks)) in q_spans.iter().zip(&kv_spans).enumerate() {
                for i in 0..qs.len {
                    for h in 0..heads {
                        let qi = &q[(qs.start + i) * d + h * 64..][..64];
                        let scores: Vec<f64> = (0..ks.len)
                            .map(|j| {
                                let kj = &kv[(ks.start + j) * 2 * d + h * 64..][..64];
                                qi.iter()
                                    .zip(kj)
                                    .map(|(&a, &b)| a as f64 * b as f64)
                                    .sum::<f64>()
                                    / 8.0
                            })
                            .collect();
                        let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                        let sum: f64 = e.iter().sum();
                        for x in 0..64 {
                            let want: f64 = (0..ks.len)
                                .map(|j| {
                                    e[j] / sum * kv[(ks.start + j) * 2 * d + d + h * 64 + x] as f64
                                })
                                .sum();
                            let g = got[(qs.start + i) * d + h * 64 + x] as f64;
                            assert!(
                                (g - want).abs() < 2e-5,
                                "row {r}, query {i}, head {h}: {g} vs {want}"
                            );
                        }
                    }
                }
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
