//! f32 linear layers on the host, on weights packed once at load: the CPU engine's GEMMs.
//!
//! Through MLX each GEMM is an OpenBLAS call that repacks the weights every time, splits
//! the work between its threads in fixed shares, and leaves a worker spinning between calls
//! against the host's own kernels (attention, GeGLU, int8). Here the weights are packed when
//! the checkpoint loads, the threads take tiles from a shared counter, and values stay on
//! the host between the layers that the host computes (`results/CPU.md` has the numbers).
//!
//! Every output `y[r][n] = Σₖ x[r][k] · w[n][k] (+ b[n])` is one chain of fused
//! multiply-adds over `k` in order, from zero, then the bias. Every kernel computes that
//! same chain, so a row's output is bit for bit the same whichever kernel the CPU takes,
//! however the rows are tiled, and whatever other rows share the GEMM.
//!
//! Kernels, chosen at run time ([`Kernel::detect`]): AVX-512 (12 rows × 32 channels a
//! tile) and AVX2 with FMA (6 rows × 16 channels). A CPU with neither keeps MLX's GEMM.
//!
//! Weights are packed in blocks of 16 output channels, each block `[k][16]`: one 64-byte
//! load is one input's weights for 16 channels.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Output channels per packed block.
const BLOCK: usize = 16;
/// Activation bytes a work item's rows hold: what stays in a core's L2 beside a panel.
const CHUNK_BYTES: usize = 256 * 1024;

/// Which f32 kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// AVX-512F.
    Avx512,
    /// AVX2 and FMA.
    Avx2Fma,
}

impl Kernel {
    /// Every kernel, fastest first.
    pub const ALL: [Kernel; 2] = [Kernel::Avx512, Kernel::Avx2Fma];

    /// The fastest kernel this CPU runs, or `None` (then MLX's GEMM runs).
    pub fn detect() -> Option<Kernel> {
        Kernel::ALL.into_iter().find(|k| k.available())
    }

    /// Whether this CPU can run the kernel.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            match self {
                Kernel::Avx512 => has!("avx512f"),
                Kernel::Avx2Fma => has!("avx2") && has!("fma"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// A short name for logs: `avx512`, `avx2-fma`.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Avx512 => "avx512",
            Kernel::Avx2Fma => "avx2-fma",
        }
    }

    /// Rows and 16-channel blocks of the kernel's full tile.
    fn tile(self) -> (usize, usize) {
        match self {
            Kernel::Avx512 => (12, 2),
            Kernel::Avx2Fma => (6, 1),
        }
    }
}

/// A linear layer with f32 weights packed for the host kernels.
#[derive(Debug)]
pub struct F32Linear {
    out: usize,
    k: usize,
    /// `out / 16` blocks (rounded up) of `[k][16]`, one cache line per input (so no load
    /// splits a line); channels past `out` are zero.
    packed: Vec<Line>,
    bias: Option<Vec<f32>>,
}

impl F32Linear {
    /// Packs the row-major `[out, k]` weight `w`, in f32 or any type that converts to it
    /// exactly (the checkpoint's f16, read in place), and keeps the `[out]` bias.
    pub fn new<T: Copy + Into<f32>>(
        w: &[T],
        out: usize,
        k: usize,
        bias: Option<Vec<f32>>,
    ) -> F32Linear {
        assert_eq!(w.len(), out * k, "weight is not [out, k]");
        if let Some(b) = &bias {
            assert_eq!(b.len(), out, "bias is not [out]");
        }
        let blocks = out.div_ceil(BLOCK);
        let mut packed = vec![Line([0.0; BLOCK]); blocks * k];
        for (n, row) in w.chunks_exact(k.max(1)).enumerate().take(out) {
            let (b, c) = (n / BLOCK, n % BLOCK);
            for (line, &v) in packed[b * k..(b + 1) * k].iter_mut().zip(row) {
                line.0[c] = v.into();
            }
        }
        F32Linear {
            out,
            k,
            packed,
            bias,
        }
    }

    /// Output channels.
    pub fn out_features(&self) -> usize {
        self.out
    }

    /// Input features.
    pub fn in_features(&self) -> usize {
        self.k
    }

    /// Bytes held (weights and bias).
    pub fn bytes(&self) -> usize {
        4 * (BLOCK * self.packed.len() + self.bias.as_ref().map_or(0, Vec::len))
    }

    /// `x` is row-major `[rows, k]`; returns `[rows, out]`, computed by `kernel`.
    pub fn forward(&self, x: &[f32], kernel: Kernel) -> Vec<f32> {
        let rows = x.len().checked_div(self.k).unwrap_or(0);
        let mut y = vec![0f32; rows * self.out];
        self.forward_into(x, kernel, &mut y);
        y
    }

    /// [`F32Linear::forward`] into `y`, which must hold `[rows, out]` (any values: every one
    /// is written), so that callers can hand out memory that is already mapped.
    ///
    /// # Panics
    /// If `kernel` is not [`Kernel::available`], or the shapes do not match.
    pub fn forward_into(&self, x: &[f32], kernel: Kernel, y: &mut [f32]) {
        assert!(
            kernel.available(),
            "the {} kernel needs a CPU that has it",
            kernel.name()
        );
        assert_eq!(x.len() % self.k.max(1), 0, "input is not [rows, k]");
        let rows = x.len().checked_div(self.k).unwrap_or(0);
        assert_eq!(y.len(), rows * self.out, "output is not [rows, out]");
        if rows == 0 || self.out == 0 {
            return;
        }
        let (mr, nb) = kernel.tile();
        let blocks = self.out.div_ceil(BLOCK);
        // Work items are a chunk of rows by a panel of channels, chunk by chunk: a chunk's
        // activations stay in the core's cache while the panels go by. The threads take
        // items in turn from a shared counter, so one that is held up (another process, a
        // slower core) leaves its share to the others instead of holding up the GEMM.
        let panels = blocks.div_ceil(nb);
        let chunk = (CHUNK_BYTES / (4 * self.k).max(1) / mr * mr).max(mr);
        let chunks = rows.div_ceil(chunk);
        let items = chunks * panels;
        let threads = crate::parallel::threads_for(items, rows * self.out * self.k / 64);
        let next = AtomicUsize::new(0);
        let out = Out(y.as_mut_ptr());
        let work = || {
            // The chunk's rows, packed `[tiles][k][mr]` (zero past the last row): the tile
            // kernels then read each input's `mr` values from one place, which keeps their
            // loops to the loads and multiply-adds.
            let mut packed = Vec::new();
            let mut packed_chunk = None;
            loop {
                let item = next.fetch_add(1, Ordering::Relaxed);
                if item >= items {
                    break;
                }
                let (c, p) = (item / panels, item % panels);
                let (r0, b0) = (c * chunk, p * nb);
                let item_rows = r0..(r0 + chunk).min(rows);
                if packed_chunk != Some(c) {
                    pack_rows(x, self.k, item_rows.clone(), mr, &mut packed);
                    packed_chunk = Some(c);
                }
                let tile = Tile {
                    rows: item_rows,
                    blocks: b0..(b0 + nb).min(blocks),
                };
                // SAFETY: `packed` holds the item's rows packed for `mr`, and `y` holds
                // `[rows, out]` (checked above) and outlives the threads; the kernel is
                // available (checked above); each item is taken by one thread, which writes
                // only that item's rows and channels.
                unsafe { self.run(&packed, tile, out.ptr(), kernel) }
            }
        };
        crate::parallel::broadcast(threads, work);
    }

    /// # Safety
    /// As [`x86::avx512`].
    unsafe fn run(&self, packed: &[f32], tile: Tile, y: *mut f32, kernel: Kernel) {
        #[cfg(target_arch = "x86_64")]
        match kernel {
            Kernel::Avx512 => x86::avx512(self, packed.as_ptr(), tile, y),
            Kernel::Avx2Fma => x86::avx2(self, packed.as_ptr(), tile, y),
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (packed, tile, y, kernel);
            unreachable!("no f32 kernel is available off x86-64");
        }
    }
}

/// Rows `rows` of `x` (`[_, k]`) into `packed` as tiles of `mr` rows, each `[k][mr]`, the
/// last one padded with zeros.
fn pack_rows(x: &[f32], k: usize, rows: std::ops::Range<usize>, mr: usize, packed: &mut Vec<f32>) {
    let tiles = rows.len().div_ceil(mr);
    packed.clear();
    packed.resize(tiles * k * mr, 0.0);
    for (t, dst) in packed.chunks_exact_mut(k * mr).enumerate() {
        let r0 = rows.start + t * mr;
        let lanes = (rows.end - r0).min(mr);
        let src = &x[r0 * k..(r0 + lanes) * k];
        // Written in order, read from `lanes` rows at once.
        for (kk, d) in dst.chunks_exact_mut(mr).enumerate() {
            for (lane, v) in d[..lanes].iter_mut().enumerate() {
                *v = src[lane * k + kk];
            }
        }
    }
}

/// One input's weights for a block of 16 channels: a cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; BLOCK]);

/// A work item: rows by 16-channel blocks.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct Tile {
    rows: std::ops::Range<usize>,
    blocks: std::ops::Range<usize>,
}

/// The output matrix, shared by the threads that write disjoint tiles of it.
struct Out(*mut f32);

impl Out {
    /// A method, so closures capture the whole (`Sync`) wrapper, not its raw field.
    fn ptr(&self) -> *mut f32 {
        self.0
    }
}
// SAFETY: each thread writes only its own tiles (see `F32Linear::forward_into`).
unsafe impl Sync for Out {}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The x86-64 kernels. Each sweeps a tile of `MR` rows by `NB` blocks of 16 channels over
    //! the whole of `k` with every sum in a register; both are constants
    //! (`crate::tiles::sweep`), so the sums never leave the registers.

    use std::arch::x86_64::*;

    #[cfg(doc)]
    use super::pack_rows;
    use super::{F32Linear, Tile, BLOCK};

    /// AVX-512: 12 rows × 32 channels a tile (24 sums, 2 weight registers).
    ///
    /// # Safety
    /// The CPU must have AVX-512F; `x` must hold the item's rows packed by [`pack_rows`] for
    /// 12-row tiles, and `y` `[rows, lin.out]` for every row of `item`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn avx512(lin: &F32Linear, x: *const f32, item: Tile, y: *mut f32) {
        macro_rules! tile {
            // The tile's rows, packed (see `pack_rows`).
            ($m:literal, $nb:literal, $r:ident, $b:ident) => {
                tile512::<$m, $nb>(lin, x.add(($r - item.rows.start) * lin.k), $r, $b, y)
            };
        }
        crate::tiles::sweep!(
            item.rows.clone(),
            item.blocks.clone(),
            12,
            2,
            [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
            tile
        );
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn tile512<const MR: usize, const NB: usize>(
        lin: &F32Linear,
        x: *const f32,
        r0: usize,
        b0: usize,
        y: *mut f32,
    ) {
        let k = lin.k;
        let stride = BLOCK * k;
        let w = (lin.packed.as_ptr() as *const f32).add(b0 * stride);
        let mut acc = [[_mm512_setzero_ps(); NB]; MR];
        for kk in 0..k {
            let mut wv = [_mm512_setzero_ps(); NB];
            for (j, v) in wv.iter_mut().enumerate() {
                let p = w.add(j * stride + kk * BLOCK);
                // A block is 64 KB at k = 1,024, more than L1 holds next to the rows, so
                // each row tile reads it from L2 again: ask for it a kilobyte ahead (a
                // prefetch past the end is harmless, hence `wrapping_add`).
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(16 * BLOCK) as *const i8);
                *v = _mm512_loadu_ps(p);
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let a = _mm512_set1_ps(*x.add(kk * 12 + i));
                for (s, &wj) in row.iter_mut().zip(&wv) {
                    *s = _mm512_fmadd_ps(a, wj, *s);
                }
            }
        }
        for (i, row) in acc.iter().enumerate() {
            for (j, &s) in row.iter().enumerate() {
                let n0 = (b0 + j) * BLOCK;
                let lanes = (lin.out - n0).min(BLOCK);
                let mask: __mmask16 = if lanes == BLOCK {
                    !0
                } else {
                    (1u16 << lanes) - 1
                };
                let v = match &lin.bias {
                    Some(b) => _mm512_add_ps(s, _mm512_maskz_loadu_ps(mask, b.as_ptr().add(n0))),
                    None => s,
                };
                _mm512_mask_storeu_ps(y.add((r0 + i) * lin.out + n0), mask, v);
            }
        }
    }

    /// AVX2 with FMA: 6 rows × 16 channels a tile (12 sums in two 256-bit halves a block).
    ///
    /// # Safety
    /// As [`avx512`], for AVX2 and FMA and 6-row tiles.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn avx2(lin: &F32Linear, x: *const f32, item: Tile, y: *mut f32) {
        macro_rules! tile {
            // The tile's rows, packed (see `pack_rows`).
            ($m:literal, $nb:literal, $r:ident, $b:ident) => {
                tile256::<$m, $nb>(lin, x.add(($r - item.rows.start) * lin.k), $r, $b, y)
            };
        }
        crate::tiles::sweep!(
            item.rows.clone(),
            item.blocks.clone(),
            6,
            1,
            [1, 2, 3, 4, 5],
            tile
        );
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile256<const MR: usize, const NB: usize>(
        lin: &F32Linear,
        x: *const f32,
        r0: usize,
        b0: usize,
        y: *mut f32,
    ) {
        let k = lin.k;
        let stride = BLOCK * k;
        let w = (lin.packed.as_ptr() as *const f32).add(b0 * stride);
        let mut acc = [[[_mm256_setzero_ps(); 2]; NB]; MR];
        for kk in 0..k {
            let mut wv = [[_mm256_setzero_ps(); 2]; NB];
            for (j, v) in wv.iter_mut().enumerate() {
                let p = w.add(j * stride + kk * BLOCK);
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(16 * BLOCK) as *const i8);
                v[0] = _mm256_loadu_ps(p);
                v[1] = _mm256_loadu_ps(p.add(8));
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let a = _mm256_set1_ps(*x.add(kk * 6 + i));
                for (s, wj) in row.iter_mut().zip(&wv) {
                    s[0] = _mm256_fmadd_ps(a, wj[0], s[0]);
                    s[1] = _mm256_fmadd_ps(a, wj[1], s[1]);
                }
            }
        }
        for (i, row) in acc.iter().enumerate() {
            for (j, s) in row.iter().enumerate() {
                let n0 = (b0 + j) * BLOCK;
                let mut sums = [0f32; BLOCK];
                _mm256_storeu_ps(sums.as_mut_ptr(), s[0]);
                _mm256_storeu_ps(sums.as_mut_ptr().add(8), s[1]);
                let at = y.add((r0 + i) * lin.out);
                for (c, &v) in sums.iter().enumerate() {
                    let n = n0 + c;
                    if n >= lin.out {
                        break;
                    }
                    *at.add(n) = match &lin.bias {
                        Some(b) => v + b[n],
                        None => v,
                    };
                }
            }
        }
    }
}
