//! f32 GEMMs on AMX-BF16 tiles, from exact splits into bf16: the host's fastest f32 kernel
//! ([`crate::f32_linear::Kernel::AmxBf16`]).
//!
//! `tdpbf16ps` multiplies bf16 values (8 significant bits) exactly and sums the products in
//! f32, ~16 times the products a cycle of AVX-512's FMAs. An f32 value is exactly the sum of
//! three bf16 values, each the rounding of what the ones before it left: `x = x₀ + x₁ + x₂`,
//! `|x₁| ≤ 2⁻⁸|x|`, `|x₂| ≤ 2⁻¹⁷|x|`. A checkpoint's weights are f16 (11 significant bits),
//! so each is exactly two: `w = w₀ + w₁`, `|w₁| ≤ 2⁻⁸|w|`, stored in the 4 bytes an f32 takes.
//! Of the six products `xᵢ·wⱼ` the kernel sums five, in this order at every 32 inputs:
//! `x₀w₀, x₁w₀, x₂w₀, x₀w₁, x₁w₁`. The one left out, `x₂w₁`, is at most 2⁻²⁵ of the product,
//! under f32's own rounding of it (2⁻²⁴). Measured against the f64 product, the sums are as
//! close as the FMA chain's or closer (`tests/f32_linear.rs`); they are not its bits.
//!
//! `tdpbf16ps` treats subnormal bf16 inputs as zero: a weight whose planes would be subnormal
//! does not split (none of f16's does), and an activation below ~2⁻¹¹⁰ loses its later
//! planes, under 2⁻¹²⁶ in absolute terms. A non-finite activation is its first plane alone
//! (its products are ±inf or NaN, as in the FMA chain, though an infinity can meet a
//! weight's zero plane and give NaN where the chain gives ±inf); a finite one too large to
//! round to bf16 is split by truncation instead, which is exact too.
//!
//! A row's sums depend on that row alone (a tile product's row `m` reads only row `m` of the
//! activations), so a row gives the same bits whatever rows share the GEMM.
//!
//! Layouts, both in whole 1 KB tiles of 16 rows × 64 bytes:
//! * Weights ([`Planes`]): `[plane][group][k / 32][4][16][32]`, a group being four blocks of
//!   16 output channels; a tile row holds 16 channels' pairs of consecutive inputs, the
//!   layout `tdpbf16ps` wants for its second operand. Per step of 32 inputs a group's eight
//!   tiles are 8 KB in two runs, so the kernel addresses them from two registers.
//! * Activations ([`pack_rows`]): `[row tile][k / 32][plane][16][32]`: 16 rows, 32 inputs,
//!   three planes, contiguous per step.
//!
//! `k` is padded to a multiple of 32 and the channels to whole groups, with zeros (which add
//! nothing: every product of a zero is +0).

use std::sync::atomic::{AtomicBool, Ordering};

/// Rows of a tile product.
pub(crate) const ROWS: usize = 16;
/// Inputs a tile step covers (16 tile rows of bf16 pairs).
const STEP: usize = 32;
/// 16-channel blocks one kernel step sums at once (four accumulator tiles).
pub(crate) const GROUP: usize = 4;
/// bf16 values in a 1 KB tile.
const TILE: usize = 512;
/// Planes of a split activation.
const X_PLANES: usize = 3;

/// 1 KB: one tile, aligned as `tileloadd` reads it best.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Tile(pub [u16; TILE]);

/// bf16 bits of `v` rounded to nearest, ties to even; a finite `v` too large for that,
/// truncated; a NaN, quiet and of the same sign.
fn bf16(v: f32) -> u16 {
    let u = v.to_bits();
    if v.is_nan() {
        return (u >> 16) as u16 | 0x0040;
    }
    let rounded = (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16;
    if v.is_finite() && rounded & 0x7f80 == 0x7f80 {
        (u >> 16) as u16
    } else {
        rounded
    }
}

fn f32_of(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// `w` as `w₀ + w₁`, two bf16 values, when that is exact and neither is subnormal (which
/// `tdpbf16ps` would read as zero).
fn split_weight(w: f32) -> Option<(u16, u16)> {
    if !w.is_finite() {
        return None;
    }
    let hi = bf16(w);
    let rest = w - f32_of(hi);
    let lo = bf16(rest);
    let subnormal = |b: u16| b & 0x7f80 == 0 && b & 0x007f != 0;
    (f32_of(hi) + f32_of(lo) == w && f32_of(lo) == rest && !subnormal(hi) && !subnormal(lo))
        .then_some((hi, lo))
}

/// Block `b`'s weights at step `s` of `w` (`[out, k]`) into its two tiles, each tile row 16
/// channels' pairs of consecutive inputs; whether every value split exactly.
fn fill<T: Copy + Into<f32>>(
    w: &[T],
    k: usize,
    b: usize,
    s: usize,
    out: usize,
    hi: &mut Tile,
    lo: &mut Tile,
) -> bool {
    for c in 0..16.min(out - b * 16) {
        let row = &w[(b * 16 + c) * k..(b * 16 + c + 1) * k];
        for (i, &v) in row[s * STEP..((s + 1) * STEP).min(k)].iter().enumerate() {
            let Some((h, l)) = split_weight(v.into()) else {
                return false;
            };
            let at = (i / 2) * 32 + c * 2 + i % 2;
            hi.0[at] = h;
            lo.0[at] = l;
        }
    }
    true
}

/// A layer's weights as two bf16 planes in the kernel's tiles.
#[derive(Debug)]
pub(crate) struct Planes {
    /// Groups of [`GROUP`] blocks (channels padded with zeros).
    groups: usize,
    /// `k / 32`, rounded up.
    steps: usize,
    tiles: Vec<Tile>,
}

impl Planes {
    /// The row-major `[out, k]` weight `w`, or `None` if some value is not exactly two bf16
    /// values (only f16 values and the like are: an f32 layer keeps the FMA kernels), or if
    /// `k` is 0.
    pub fn new<T: Copy + Into<f32> + Sync>(w: &[T], out: usize, k: usize) -> Option<Planes> {
        if k == 0 {
            return None;
        }
        let blocks = out.div_ceil(16);
        let groups = blocks.div_ceil(GROUP);
        let steps = k.div_ceil(STEP);
        let per_group = steps * GROUP;
        let mut tiles = vec![Tile([0; TILE]); 2 * groups * per_group];
        let exact = AtomicBool::new(true);
        // A group's tiles are one run in each plane; the groups are packed on all cores (on
        // one, the `large` checkpoint loaded in 2.8-2.9 s instead of 2.0).
        let (hi, lo) = tiles.split_at_mut(groups * per_group);
        crate::parallel::run(
            hi.chunks_mut(per_group)
                .zip(lo.chunks_mut(per_group))
                .enumerate()
                .map(|(g, (hi, lo))| {
                    let exact = &exact;
                    move || {
                        for j in 0..GROUP.min(blocks - g * GROUP) {
                            if !exact.load(Ordering::Relaxed) {
                                return;
                            }
                            let b = g * GROUP + j;
                            for s in 0..steps {
                                let at = s * GROUP + j;
                                let ok = fill(w, k, b, s, out, &mut hi[at], &mut lo[at]);
                                if !ok {
                                    exact.store(false, Ordering::Relaxed);
                                    return;
                                }
                            }
                        }
                    }
                }),
        );
        exact.into_inner().then_some(Planes {
            groups,
            steps,
            tiles,
        })
    }

    /// Where plane `q`'s tile of block `b` at step `s` is.
    fn at(&self, q: usize, b: usize, s: usize) -> usize {
        ((q * self.groups + b / GROUP) * self.steps + s) * GROUP + b % GROUP
    }

    /// The planes with their blocks reordered: block `b` of the result is block `from(b)`
    /// of these, for `b` below `blocks` (the layer's blocks; padding stays zero).
    pub fn reorder(&self, blocks: usize, from: impl Fn(usize) -> usize) -> Planes {
        let mut tiles = vec![Tile([0; TILE]); self.tiles.len()];
        for b in 0..blocks {
            for q in 0..2 {
                for s in 0..self.steps {
                    tiles[self.at(q, b, s)] = self.tiles[self.at(q, from(b), s)];
                }
            }
        }
        Planes {
            groups: self.groups,
            steps: self.steps,
            tiles,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(self.tiles.as_slice())
    }
}

/// Bytes one row tile of activations takes, packed for `k` inputs.
pub(crate) fn row_tile_bytes(k: usize) -> usize {
    k.div_ceil(STEP) * X_PLANES * std::mem::size_of::<Tile>()
}

/// Rows `rows` of `x` (`[_, k]`), split into three bf16 planes, into `packed` as row tiles
/// ([`row_tile_bytes`] each); rows past the last of a tile, and inputs past `k`, are zero.
/// `packed` must be 64-byte aligned.
pub(crate) fn pack_rows(x: &[f32], k: usize, rows: std::ops::Range<usize>, packed: &mut [u8]) {
    let steps = k.div_ceil(STEP);
    let tile_bytes = row_tile_bytes(k);
    let tiles = rows.len().div_ceil(ROWS);
    assert!(packed.len() >= tiles * tile_bytes, "room for the row tiles");
    assert_eq!(packed.as_ptr() as usize % 64, 0, "row tiles are aligned");
    // SAFETY: the buffer is aligned (checked) and holds whole tiles; `u16` has no invalid
    // values.
    let packed: &mut [u16] = unsafe {
        std::slice::from_raw_parts_mut(packed.as_mut_ptr() as *mut u16, tiles * tile_bytes / 2)
    };
    let vector = has_avx512();
    for (t, tile) in packed.chunks_exact_mut(tile_bytes / 2).enumerate() {
        for i in 0..ROWS {
            let r = rows.start + t * ROWS + i;
            let src = (r < rows.end).then(|| &x[r * k..(r + 1) * k]);
            for s in 0..steps {
                let at = s * X_PLANES * TILE + i * STEP;
                let [p0, p1, p2] = planes_at(tile, at);
                match src {
                    Some(src) => {
                        let part = &src[s * STEP..((s + 1) * STEP).min(k)];
                        split_run(part, p0, p1, p2, vector);
                    }
                    None => {
                        p0.fill(0);
                        p1.fill(0);
                        p2.fill(0);
                    }
                }
            }
        }
    }
}

/// The three planes' 32 values of one tile row, from `at` in a row tile's step.
fn planes_at(tile: &mut [u16], at: usize) -> [&mut [u16]; X_PLANES] {
    let (p0, rest) = tile[at..].split_at_mut(TILE);
    let (p1, p2) = rest.split_at_mut(TILE);
    [&mut p0[..STEP], &mut p1[..STEP], &mut p2[..STEP]]
}

/// Whether [`x86::split32`] runs here: asked once a GEMM, not for every 32 values.
fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Up to 32 values split into the planes' 32 (the rest zero), 32 at once where `vector`
/// ([`has_avx512`]).
fn split_run(x: &[f32], p0: &mut [u16], p1: &mut [u16], p2: &mut [u16], vector: bool) {
    #[cfg(target_arch = "x86_64")]
    if vector && x.len() == STEP {
        // SAFETY: the CPU has AVX-512F (`vector`); 32 values in, 32 out in each plane.
        unsafe { x86::split32(x, p0, p1, p2) };
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = vector;
    for i in 0..STEP {
        let [a, b, c] = x.get(i).map_or([0; 3], |&v| split_activation(v));
        (p0[i], p1[i], p2[i]) = (a, b, c);
    }
}

/// `x` as `x₀ + x₁ + x₂`, three bf16 values (exact for finite `x`); a non-finite `x` as its
/// first plane alone.
fn split_activation(x: f32) -> [u16; 3] {
    let a = bf16(x);
    if !x.is_finite() {
        return [a, 0, 0];
    }
    let r = x - f32_of(a);
    let b = bf16(r);
    [a, b, bf16(r - f32_of(b))]
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    //! The AVX-512 activation split and the AMX kernel.

    use std::arch::x86_64::*;

    use super::{Planes, Tile, GROUP, ROWS, STEP, X_PLANES};
    use crate::amx::TileConfig;

    /// [`super::split_activation`] on 32 values at once: the same operations, so the same
    /// bits.
    ///
    /// # Safety
    /// The CPU must have AVX-512F; each slice holds 32 values.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn split32(x: &[f32], p0: &mut [u16], p1: &mut [u16], p2: &mut [u16]) {
        assert!(x.len() >= STEP && p0.len() >= STEP && p1.len() >= STEP && p2.len() >= STEP);
        let high = _mm512_set1_epi32(0xffff_0000u32 as i32);
        let exponent = _mm512_set1_epi32(0x7f80_0000);
        // [`super::bf16`]: rounded to the nearest bf16, ties to even; a finite value too large
        // for that truncated; a NaN quieted. Returned as f32 and as its bits.
        let round = |v: __m512| {
            let u = _mm512_castps_si512(v);
            let odd = _mm512_and_si512(_mm512_srli_epi32::<16>(u), _mm512_set1_epi32(1));
            let up = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd);
            let rounded = _mm512_and_si512(up, high);
            let truncated = _mm512_and_si512(u, high);
            let finite = _mm512_cmpneq_epi32_mask(_mm512_and_si512(u, exponent), exponent);
            let overflow = _mm512_cmpeq_epi32_mask(_mm512_and_si512(rounded, exponent), exponent);
            let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
            let top = _mm512_mask_mov_epi32(rounded, finite & overflow, truncated);
            let quiet = _mm512_or_si512(truncated, _mm512_set1_epi32(0x0040_0000));
            let top = _mm512_mask_mov_epi32(top, nan, quiet);
            (_mm512_castsi512_ps(top), _mm512_srli_epi32::<16>(top))
        };
        for half in 0..2 {
            let v = _mm512_loadu_ps(x.as_ptr().add(16 * half));
            let finite = _mm512_cmpneq_epi32_mask(
                _mm512_and_si512(_mm512_castps_si512(v), exponent),
                exponent,
            );
            let (a, a_bits) = round(v);
            // What is left (zero after a non-finite value).
            let r = _mm512_maskz_sub_ps(finite, v, a);
            let (b, b_bits) = round(r);
            let (_, c_bits) = round(_mm512_sub_ps(r, b));
            for (p, bits) in [(&mut *p0, a_bits), (&mut *p1, b_bits), (&mut *p2, c_bits)] {
                _mm256_storeu_si256(
                    p.as_mut_ptr().add(16 * half) as *mut __m256i,
                    _mm512_cvtepi32_epi16(bits),
                );
            }
        }
    }

    /// The sums of one row tile against one group: `[block of the group][row][channel]`.
    pub(crate) type Sums = [[f32; ROWS * 16]; GROUP];

    /// Sums row tiles `tiles` (of `x`, packed by [`super::pack_rows`]) against groups
    /// `groups` of `w`, handing each row tile's sums for each group to `store(tile, group,
    /// sums)`: groups outer, so a group's weights stay in L2 while the row tiles go by.
    ///
    /// # Safety
    /// [`crate::amx::ready`] for bf16; `x` holds `tiles.end` row tiles for `w`'s `k`;
    /// `groups` are `w`'s.
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn gemm(
        w: &Planes,
        x: *const u8,
        tiles: std::ops::Range<usize>,
        groups: std::ops::Range<usize>,
        mut store: impl FnMut(usize, usize, &Sums),
    ) {
        assert!(groups.end <= w.groups, "groups of the layer");
        let tile_bytes = w.steps * X_PLANES * std::mem::size_of::<Tile>();
        let _tiles = TileConfig::full().load();
        let mut sums: Sums = [[0.0; ROWS * 16]; GROUP];
        for g in groups {
            let w0 = w.tiles.as_ptr().add(w.at(0, g * GROUP, 0));
            let w1 = w.tiles.as_ptr().add(w.at(1, g * GROUP, 0));
            for t in tiles.clone() {
                // Per step: the row tile's three planes into tmm4-tmm6, then each of the
                // group's eight weight tiles in turn into tmm7, summed into its block's
                // accumulator (tmm0-tmm3) against the planes it pairs with.
                std::arch::asm!(
                    "tilezero tmm0",
                    "tilezero tmm1",
                    "tilezero tmm2",
                    "tilezero tmm3",
                    "2:",
                    "tileloadd tmm4, [{x} + {s} * 1]",
                    "tileloadd tmm5, [{x} + {s} * 1 + 1024]",
                    "tileloadd tmm6, [{x} + {s} * 1 + 2048]",
                    "tileloadd tmm7, [{w0} + {s} * 1]",
                    "tdpbf16ps tmm0, tmm4, tmm7",
                    "tdpbf16ps tmm0, tmm5, tmm7",
                    "tdpbf16ps tmm0, tmm6, tmm7",
                    "tileloadd tmm7, [{w0} + {s} * 1 + 1024]",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm1, tmm5, tmm7",
                    "tdpbf16ps tmm1, tmm6, tmm7",
                    "tileloadd tmm7, [{w0} + {s} * 1 + 2048]",
                    "tdpbf16ps tmm2, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm7",
                    "tdpbf16ps tmm2, tmm6, tmm7",
                    "tileloadd tmm7, [{w0} + {s} * 1 + 3072]",
                    "tdpbf16ps tmm3, tmm4, tmm7",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    "tdpbf16ps tmm3, tmm6, tmm7",
                    "tileloadd tmm7, [{w1} + {s} * 1]",
                    "tdpbf16ps tmm0, tmm4, tmm7",
                    "tdpbf16ps tmm0, tmm5, tmm7",
                    "tileloadd tmm7, [{w1} + {s} * 1 + 1024]",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm1, tmm5, tmm7",
                    "tileloadd tmm7, [{w1} + {s} * 1 + 2048]",
                    "tdpbf16ps tmm2, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm7",
                    "tileloadd tmm7, [{w1} + {s} * 1 + 3072]",
                    "tdpbf16ps tmm3, tmm4, tmm7",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    "add {x}, {xs}",
                    "add {w0}, {ws}",
                    "add {w1}, {ws}",
                    "dec {steps}",
                    "jnz 2b",
                    "tilestored [{c0} + {s} * 1], tmm0",
                    "tilestored [{c1} + {s} * 1], tmm1",
                    "tilestored [{c2} + {s} * 1], tmm2",
                    "tilestored [{c3} + {s} * 1], tmm3",
                    x = inout(reg) x.add(t * tile_bytes) => _,
                    w0 = inout(reg) w0 => _,
                    w1 = inout(reg) w1 => _,
                    steps = inout(reg) w.steps => _,
                    s = in(reg) TileConfig::ROW_BYTES,
                    xs = const X_PLANES * 1024,
                    ws = const GROUP * 1024,
                    c0 = in(reg) sums[0].as_mut_ptr(),
                    c1 = in(reg) sums[1].as_mut_ptr(),
                    c2 = in(reg) sums[2].as_mut_ptr(),
                    c3 = in(reg) sums[3].as_mut_ptr(),
                    options(nostack)
                );
                store(t, g, &sums);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{f32_of, has_avx512, split_activation, split_run, split_weight, STEP};

    /// Random f32 bit patterns (every exponent, NaNs and infinities among them) and the
    /// edges: zeros, subnormals, the largest values, ties.
    fn awkward_values() -> Vec<f32> {
        let mut s = 0x9e37_79b9_7f4a_7c15_u64;
        let mut v: Vec<f32> = (0..4096)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                f32::from_bits((s >> 32) as u32)
            })
            .collect();
        v.extend([
            0.0,
            -0.0,
            f32::MIN_POSITIVE,
            1e-40,
            -1e-45,
            f32::MAX,
            f32::MIN,
            f32::from_bits(0x7f7f_8000),
            f32::from_bits(0x7f7f_7fff),
            1.0 + 2f32.powi(-8),
            1.0 + 2f32.powi(-9) + 2f32.powi(-17),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::from_bits(0x7fff_ffff),
            f32::from_bits(0xffff_8001),
            f32::from_bits(0x7f80_0001),
        ]);
        v.resize(v.len().next_multiple_of(STEP), 1.5);
        v
    }

    /// A finite activation's three planes sum to it exactly (above 2⁻¹⁰⁰: below, the later
    /// planes are subnormal); a non-finite one is its first
    /// plane (a NaN stays a NaN); and the vectorized split gives the scalar split's bits.
    #[test]
    fn activations_split_exactly_and_both_splits_agree() {
        let values = awkward_values();
        for &x in &values {
            let [a, b, c] = split_activation(x);
            let sum = f32_of(a) as f64 + f32_of(b) as f64 + f32_of(c) as f64;
            if x.is_finite() && (x == 0.0 || x.abs() >= 2f32.powi(-100)) {
                assert_eq!(sum, x as f64, "{x:e} ({:#x})", x.to_bits());
            } else if x.is_finite() {
                // Near the bottom of the range the later planes are subnormal, on bf16's
                // smallest step, 2⁻¹³³ (and the tiles read subnormal bf16 values as zero).
                assert!((sum - x as f64).abs() <= 2f64.powi(-133), "{x:e}");
            } else {
                assert_eq!((b, c), (0, 0), "{x}");
                assert_eq!(f32_of(a).is_nan(), x.is_nan(), "{:#x}", x.to_bits());
                if !x.is_nan() {
                    assert_eq!(f32_of(a), x);
                }
            }
        }
        for run in values.chunks_exact(STEP) {
            let mut vector = [[0u16; STEP]; 3];
            let [p0, p1, p2] = &mut vector;
            split_run(run, p0, p1, p2, has_avx512());
            for (i, &x) in run.iter().enumerate() {
                let want = split_activation(x);
                let got = [vector[0][i], vector[1][i], vector[2][i]];
                assert_eq!(got, want, "{x:e} ({:#x})", x.to_bits());
            }
        }
    }

    /// Every f16 value is two bf16 values exactly; values with more bits, and non-finite
    /// ones, are not split.
    #[test]
    fn f16_weights_split_in_two_and_wider_ones_do_not() {
        for bits in 0..=u16::MAX {
            let w = half::f16::from_bits(bits).to_f32();
            match split_weight(w) {
                Some((hi, lo)) => assert_eq!(f32_of(hi) + f32_of(lo), w),
                None => assert!(!w.is_finite(), "f16 {bits:#x} ({w:e}) did not split"),
            }
        }
        assert_eq!(split_weight(1.0 + 2f32.powi(-9) + 2f32.powi(-23)), None);
        assert_eq!(split_weight(1e-40), None, "a subnormal plane");
    }
}
