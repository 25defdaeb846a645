//! f32 linear layers on the host, on weights packed once at load: the CPU engine's GEMMs.
//!
//! Through MLX each GEMM is an OpenBLAS call that repacks the weights every time, splits
//! the work between its threads in fixed shares, and leaves a worker spinning between calls
//! against the host's own kernels (attention, GeGLU, int8). Here the weights are packed when
//! the checkpoint loads, the threads take tiles from a shared counter, and values stay on
//! the host between the layers that the host computes (`results/CPU.md` has the numbers).
//!
//! Kernels, chosen at run time ([`Kernel::detect`]), fastest first:
//! * AMX-BF16 (`f32_amx.rs`): tile products of exact bf16 splits of the f32 values, for
//!   layers whose weights are f16 values (a checkpoint's are): about twice the FMA kernels'
//!   rate, as close to the exact product as they are, not their bits.
//! * AVX-512 (12 rows × 32 channels a tile) and AVX2 with FMA (6 rows × 16 channels): each
//!   output `y[r][n] = Σₖ x[r][k] · w[n][k] (+ b[n])` is one chain of fused multiply-adds
//!   over `k` in order, from zero, then the bias. Both compute that same chain, so their
//!   bits are the same.
//!
//! A CPU with none keeps MLX's GEMM. With every kernel a row's output is bit for bit the same
//! however the rows are tiled and whatever other rows share the GEMM. Added into an output
//! ([`F32Linear::forward_add_into`]), that result is added as one more rounding.
//!
//! The FMA kernels' weights are packed in blocks of 16 output channels, each block `[k][16]`:
//! one 64-byte load is one input's weights for 16 channels.
//!
//! ModernBERT's `Wi` feeds GeGLU, `GELU(a) · g` for its output's halves `[a | g]`. Packed
//! with its halves paired ([`F32Linear::pair_halves`]), each 32-channel tile of the AVX-512
//! kernel holds 16 channels of `a` and the same 16 of `g`, and stores `GELU(a) · g` directly
//! ([`F32Linear::forward_geglu_into`]): the `[rows, 2·inter]` output is never written, nor
//! read again by a pass of its own. The sums are the same chains, and GELU the same
//! function as [`crate::host::geglu`]'s, so the bits are those of the two steps.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

/// Output channels per packed block.
const BLOCK: usize = 16;
/// Activation bytes a work item's rows hold, about a core's L2. The weights come from memory
/// once per chunk of rows (1.3 GB a forward for ModernBERT-large's), so the chunk is as large
/// as L2 keeps: at 256 KB a 207-token forward read them four times and took 5-10 % longer
/// (`results/CPU.md`). The rows are read again for each panel, 48 bytes per 24
/// multiply-adds, which L2 (or L3) serves without holding up the kernel.
const CHUNK_BYTES: usize = 2 * 1024 * 1024;
/// The same for the AMX kernel, whose rows (three bf16 planes) are read again for each group
/// of four blocks, against 256 KB of its weights at `k` = 1,024: both in L2 together.
const AMX_CHUNK_BYTES: usize = 1024 * 1024;
/// Work items each thread should have at least, for the threads to finish together.
const ITEMS_PER_THREAD: usize = 32;
/// Panels (of the kernel's tile width) one work item takes at most.
const MAX_PANELS_PER_ITEM: usize = 8;

/// Which f32 kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// AMX-BF16 on exact bf16 splits (`f32_amx.rs`), with AVX-512F.
    AmxBf16,
    /// AVX-512F.
    Avx512,
    /// AVX2 and FMA.
    Avx2Fma,
}

impl Kernel {
    /// Every kernel, fastest first.
    pub const ALL: [Kernel; 3] = [Kernel::AmxBf16, Kernel::Avx512, Kernel::Avx2Fma];

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
                Kernel::AmxBf16 => has!("avx512f") && crate::amx::ready(crate::amx::Unit::Bf16),
                Kernel::Avx512 => has!("avx512f"),
                Kernel::Avx2Fma => has!("avx2") && has!("fma"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// A short name for logs: `amx-bf16`, `avx512`, `avx2-fma`.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::AmxBf16 => "amx-bf16",
            Kernel::Avx512 => "avx512",
            Kernel::Avx2Fma => "avx2-fma",
        }
    }

    /// Rows and 16-channel blocks of the kernel's full tile.
    fn tile(self) -> (usize, usize) {
        match self {
            Kernel::AmxBf16 => (crate::f32_amx::ROWS, crate::f32_amx::GROUP),
            Kernel::Avx512 => (12, 2),
            Kernel::Avx2Fma => (6, 1),
        }
    }
}

impl std::str::FromStr for Kernel {
    type Err = String;

    /// A kernel by its [`Kernel::name`].
    fn from_str(s: &str) -> Result<Kernel, String> {
        Kernel::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Kernel::ALL.iter().map(|k| k.name()).collect();
                format!("no f32 kernel `{s}` (there are {})", names.join(", "))
            })
    }
}

/// A linear layer with f32 weights packed for the host kernels.
#[derive(Debug)]
pub struct F32Linear {
    out: usize,
    k: usize,
    /// The kernel the weights are packed for.
    kernel: Kernel,
    weights: Weights,
    bias: Option<Vec<f32>>,
    /// With halves paired ([`F32Linear::pair_halves`]): `out / 2`, and packed block `2j`
    /// holds channels `16j …` and block `2j + 1` channels `out / 2 + 16j …`.
    half: Option<usize>,
}

/// A layer's weights, packed for its kernel.
#[derive(Debug)]
enum Weights {
    /// For the FMA kernels: `out / 16` blocks (rounded up) of `[k][16]`, one cache line per
    /// input (so no load splits a line); channels past `out` are zero.
    Lines(Vec<Line>),
    /// For AMX-BF16.
    Planes(crate::f32_amx::Planes),
}

impl F32Linear {
    /// Packs the row-major `[out, k]` weight `w`, in f32 or any type that converts to it
    /// exactly (the checkpoint's f16, read in place), for `kernel`, and keeps the `[out]`
    /// bias. A layer for AMX-BF16 whose weights are not all two bf16 values exactly (more
    /// than f16's 11 significant bits) is packed for AVX-512 instead
    /// ([`F32Linear::kernel`] says which runs).
    ///
    /// # Panics
    /// If `kernel` is not [`Kernel::available`], or the shapes do not match.
    pub fn new<T: Copy + Into<f32> + Sync>(
        w: &[T],
        out: usize,
        k: usize,
        bias: Option<Vec<f32>>,
        kernel: Kernel,
    ) -> F32Linear {
        assert!(
            kernel.available(),
            "the {} kernel needs a CPU that has it",
            kernel.name()
        );
        assert_eq!(w.len(), out * k, "weight is not [out, k]");
        if let Some(b) = &bias {
            assert_eq!(b.len(), out, "bias is not [out]");
        }
        let planes = match kernel {
            Kernel::AmxBf16 => crate::f32_amx::Planes::new(w, out, k),
            Kernel::Avx512 | Kernel::Avx2Fma => None,
        };
        let (kernel, weights) = match planes {
            Some(planes) => (kernel, Weights::Planes(planes)),
            None => {
                let blocks = out.div_ceil(BLOCK);
                let mut packed = vec![Line([0.0; BLOCK]); blocks * k];
                for (n, row) in w.chunks_exact(k.max(1)).enumerate().take(out) {
                    let (b, c) = (n / BLOCK, n % BLOCK);
                    for (line, &v) in packed[b * k..(b + 1) * k].iter_mut().zip(row) {
                        line.0[c] = v.into();
                    }
                }
                let kernel = match kernel {
                    Kernel::AmxBf16 => Kernel::Avx512,
                    other => other,
                };
                (kernel, Weights::Lines(packed))
            }
        };
        F32Linear {
            out,
            k,
            kernel,
            weights,
            bias,
            half: None,
        }
    }

    /// The kernel that runs this layer.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Repacks the weights so that each pair of packed blocks holds the same 16 channels of
    /// the output's two halves, for [`F32Linear::forward_geglu_into`]. Outputs keep their
    /// order (and bits) for every other call. A layer whose halves are not whole blocks
    /// stays as it is ([`F32Linear::pairs_halves`] says which).
    pub fn pair_halves(mut self) -> F32Linear {
        let half = self.out / 2;
        if self.half.is_some()
            || !self.out.is_multiple_of(2)
            || !half.is_multiple_of(BLOCK)
            || half == 0
        {
            return self;
        }
        let (blocks, k) = (self.out / BLOCK, self.k);
        let from = |b: usize| {
            if b.is_multiple_of(2) {
                b / 2
            } else {
                blocks / 2 + b / 2
            }
        };
        self.weights = match self.weights {
            Weights::Lines(lines) => {
                let mut paired = Vec::with_capacity(lines.len());
                for b in 0..blocks {
                    paired.extend_from_slice(&lines[from(b) * k..(from(b) + 1) * k]);
                }
                Weights::Lines(paired)
            }
            Weights::Planes(planes) => Weights::Planes(planes.reorder(blocks, from)),
        };
        self.half = Some(half);
        self
    }

    /// Whether the halves are paired ([`F32Linear::pair_halves`]).
    pub fn pairs_halves(&self) -> bool {
        self.half.is_some()
    }

    /// Whether [`F32Linear::forward_geglu_into`] runs: halves paired, and the kernel's tile
    /// a whole number of pairs of blocks wide (AVX-512's and AMX-BF16's).
    pub fn fuses_geglu(&self) -> bool {
        self.half.is_some() && self.kernel.tile().1.is_multiple_of(2)
    }

    /// The first output channel of packed block `b`.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn column(&self, b: usize) -> usize {
        match self.half {
            Some(half) if b % 2 == 1 => half + (b / 2) * BLOCK,
            Some(_) => (b / 2) * BLOCK,
            None => b * BLOCK,
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
        let weights = match &self.weights {
            Weights::Lines(lines) => std::mem::size_of_val(lines.as_slice()),
            Weights::Planes(planes) => planes.bytes(),
        };
        weights + 4 * self.bias.as_ref().map_or(0, Vec::len)
    }

    /// `x` is row-major `[rows, k]`; returns `[rows, out]`.
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        let rows = x.len().checked_div(self.k).unwrap_or(0);
        let mut y = vec![0f32; rows * self.out];
        self.forward_into(x, &mut y);
        y
    }

    /// [`F32Linear::forward`] into `y`, which must hold `[rows, out]` (any values: every one
    /// is written), so that callers can hand out memory that is already mapped.
    ///
    /// # Panics
    /// If the shapes do not match.
    pub fn forward_into(&self, x: &[f32], y: &mut [f32]) {
        self.gemm(x, y, Store::Set);
    }

    /// GeGLU on the layer's output, `GELU(a) · g` for its halves `[a | g]`, into `y`
    /// (`[rows, out / 2]`, any values): the bits of [`crate::host::geglu`] on
    /// [`F32Linear::forward`]'s output, without that output.
    ///
    /// # Panics
    /// If `!self.fuses_geglu()`, or as [`F32Linear::forward_into`].
    pub fn forward_geglu_into(&self, x: &[f32], y: &mut [f32]) {
        assert!(
            self.fuses_geglu(),
            "GeGLU in the store needs paired halves and tiles of whole pairs of blocks"
        );
        self.gemm(x, y, Store::Geglu);
    }

    /// `y += x · wᵀ (+ b)`: [`F32Linear::forward_into`] added to what `y` holds, the sum
    /// `y + (x · wᵀ + b)` rounded once as a separate add would round it (the residual
    /// stream's adds), without a pass over `y` of its own.
    ///
    /// # Panics
    /// As [`F32Linear::forward_into`].
    pub fn forward_add_into(&self, x: &[f32], y: &mut [f32]) {
        self.gemm(x, y, Store::Add);
    }

    fn gemm(&self, x: &[f32], y: &mut [f32], store: Store) {
        let kernel = self.kernel;
        assert_eq!(x.len() % self.k.max(1), 0, "input is not [rows, k]");
        let rows = x.len().checked_div(self.k).unwrap_or(0);
        assert_eq!(
            y.len(),
            rows * store.width(self.out),
            "output is not [rows, out] ([rows, out / 2] for GeGLU)"
        );
        if rows == 0 || self.out == 0 {
            return;
        }
        let (mr, nb) = kernel.tile();
        let blocks = self.out.div_ceil(BLOCK);
        // Work items are a chunk of rows by a panel of channels, chunk by chunk: a chunk's
        // activations stay in the core's cache while the panels go by. The threads take
        // items in turn from a shared counter, so one that is held up (another process, a
        // slower core) leaves its share to the others instead of holding up the GEMM.
        let packing = match kernel {
            Kernel::AmxBf16 => RowPacking::Amx,
            Kernel::Avx512 | Kernel::Avx2Fma => RowPacking::Fma { mr },
        };
        let chunk_bytes = match packing {
            RowPacking::Amx => AMX_CHUNK_BYTES,
            RowPacking::Fma { .. } => CHUNK_BYTES,
        };
        let chunk = (chunk_bytes / packing.tile_bytes(self.k).max(1)).max(1) * mr;
        let chunks = rows.div_ceil(chunk);
        let threads = crate::parallel::threads_for(
            chunks * blocks.div_ceil(nb),
            rows * self.out * self.k / 64,
        );
        // Each item is a turn of the shared counter, whose cache line the cores pass back
        // and forth: at one panel an item that was ~2 % of a long forward's samples. Where
        // there are many, an item takes several panels, and enough items stay for the
        // threads to even out.
        let wide = (chunks * blocks.div_ceil(nb) / (ITEMS_PER_THREAD * threads))
            .clamp(1, MAX_PANELS_PER_ITEM)
            * nb;
        let panels = blocks.div_ceil(wide);
        let items = chunks * panels;
        let next = AtomicUsize::new(0);
        let out = Out(y.as_mut_ptr());
        // The calling thread's packing buffer, kept from call to call: a fresh one would
        // fault its pages in at every GEMM.
        let mut buffer = PACKED.with(|p| std::mem::take(&mut *p.borrow_mut()));
        let packed = PackedRows::new(x, self.k, rows, packing, chunk, &mut buffer);
        let work = || loop {
            let item = next.fetch_add(1, Ordering::Relaxed);
            if item >= items {
                break;
            }
            let (c, p) = (item / panels, item % panels);
            let (r0, b0) = (c * chunk, p * wide);
            let tile = Tile {
                rows: r0..(r0 + chunk).min(rows),
                blocks: b0..(b0 + wide).min(blocks),
            };
            let xs = packed.chunk(c);
            // SAFETY: `xs` holds the item's rows packed for the kernel, and `y` holds
            // `[rows, width]` (checked above) and outlives the threads; the kernel is
            // available (checked in `new`); each item is taken by one thread, which writes
            // only that item's rows and channels. For GeGLU the kernel's tile is whole pairs
            // of blocks (`fuses_geglu`), so `wide` is even, every item starts at an even
            // block, and a paired layer's blocks are an even number: the items hold whole
            // pairs. For AMX-BF16 `wide` is whole groups, so every item starts a group.
            unsafe { self.run(xs, tile, out.ptr(), store) }
        };
        crate::parallel::broadcast(threads, work);
        PACKED.with(|p| *p.borrow_mut() = buffer);
    }

    /// # Safety
    /// As [`x86::avx512`], with `packed` the item's chunk packed for `self.kernel`.
    unsafe fn run(&self, packed: &[u8], tile: Tile, y: *mut f32, store: Store) {
        #[cfg(target_arch = "x86_64")]
        {
            const SET: u8 = Store::Set as u8;
            const ADD: u8 = Store::Add as u8;
            const GEGLU: u8 = Store::Geglu as u8;
            let x = packed.as_ptr() as *const f32;
            match (self.kernel, store, &self.weights) {
                (Kernel::AmxBf16, _, Weights::Planes(planes)) => {
                    let (rows, blocks) = (tile.rows, tile.blocks);
                    let group = crate::f32_amx::GROUP;
                    crate::f32_amx::x86::gemm(
                        planes,
                        packed.as_ptr(),
                        0..rows.len().div_ceil(crate::f32_amx::ROWS),
                        blocks.start / group..blocks.end.div_ceil(group),
                        |t, g, sums| {
                            let r = rows.start + t * crate::f32_amx::ROWS;
                            let tile_rows = r..(r + crate::f32_amx::ROWS).min(rows.end);
                            x86::store_sums(self, store, sums, tile_rows, g * group, y);
                        },
                    )
                }
                (Kernel::Avx512, Store::Set, _) => x86::avx512::<SET>(self, x, tile, y),
                (Kernel::Avx512, Store::Add, _) => x86::avx512::<ADD>(self, x, tile, y),
                (Kernel::Avx512, Store::Geglu, _) => x86::avx512::<GEGLU>(self, x, tile, y),
                (Kernel::Avx2Fma, Store::Set, _) => x86::avx2::<false>(self, x, tile, y),
                (Kernel::Avx2Fma, Store::Add, _) => x86::avx2::<true>(self, x, tile, y),
                (Kernel::Avx2Fma, Store::Geglu, _) => {
                    unreachable!("`forward_geglu_into` checks for tiles of whole pairs")
                }
                (Kernel::AmxBf16, _, Weights::Lines(_)) => {
                    unreachable!("`new` packs AMX-BF16 layers in planes")
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (packed, tile, y, store);
            unreachable!("no f32 kernel is available off x86-64");
        }
    }

    /// The FMA kernels' packed weights.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn lines(&self) -> &[Line] {
        match &self.weights {
            Weights::Lines(lines) => lines,
            Weights::Planes(_) => unreachable!("`new` packs the FMA kernels' layers in lines"),
        }
    }
}

thread_local! {
    /// The calling thread's [`PackedRows`] buffer, kept from GEMM to GEMM: a fresh one
    /// would fault its pages in at every call. It keeps the largest size it has held (a
    /// 1,024-row group of `mlp.Wo`'s input is 11 MB). Cache lines, so that AMX tiles in it
    /// are aligned.
    static PACKED: std::cell::RefCell<Vec<Line>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A chunk nobody has claimed yet.
const UNPACKED: u8 = 0;
/// A chunk one thread is packing.
const PACKING: u8 = 1;
/// A chunk ready to read.
const READY: u8 = 2;
/// A chunk whose packing panicked: whoever needs it panics too, instead of waiting forever.
const POISONED: u8 = 3;
/// Turns a waiting thread spins before it yields its core: the packing thread may be
/// waiting for it.
const SPINS: u32 = 64;

/// One GEMM's activations, packed chunk by chunk by whichever thread first needs a chunk.
///
/// The FMA kernels read each input's `mr` row values from one place, so the rows are
/// repacked as tiles `[k][mr]`; the AMX kernel reads them split into bf16 planes
/// ([`crate::f32_amx::pack_rows`]). Each chunk is packed once, into one buffer every thread
/// reads: packed by each thread that took one of its items, the rows cost twice the
/// copying on two cores (4 % of a long forward's samples). A thread that finds its chunk
/// being packed packs the next unclaimed chunks meanwhile, so nobody waits longer than the
/// rest of one chunk's packing (while the thread packing it runs) and no packing is done
/// twice.
struct PackedRows<'a> {
    x: &'a [f32],
    k: usize,
    rows: usize,
    packing: RowPacking,
    chunk: usize,
    /// Row tiles, each [`RowPacking::tile_bytes`]: chunk `c` from tile `c · chunk / rows a
    /// tile` (the kernels read no lane past the last row).
    buffer: *mut u8,
    state: Vec<AtomicU8>,
}

/// How a GEMM's rows are packed for its kernel.
#[derive(Debug, Clone, Copy)]
enum RowPacking {
    /// For an FMA kernel of `mr` rows a tile: tiles `[k][mr]` of f32.
    Fma { mr: usize },
    /// For AMX-BF16: [`crate::f32_amx::pack_rows`].
    Amx,
}

impl RowPacking {
    fn tile_rows(self) -> usize {
        match self {
            RowPacking::Fma { mr } => mr,
            RowPacking::Amx => crate::f32_amx::ROWS,
        }
    }

    /// Bytes of one row tile at `k` inputs.
    fn tile_bytes(self, k: usize) -> usize {
        match self {
            RowPacking::Fma { mr } => 4 * mr * k,
            RowPacking::Amx => crate::f32_amx::row_tile_bytes(k),
        }
    }

    /// Packs `rows` of `x` (`[_, k]`) into `dst`, whole row tiles.
    fn pack(self, x: &[f32], k: usize, rows: std::ops::Range<usize>, dst: &mut [u8]) {
        match self {
            RowPacking::Fma { mr } => {
                // SAFETY: the buffer is cache lines and a chunk starts at a multiple of 4
                // bytes (whole tiles of f32), so `dst` is aligned for f32, whose values any
                // bytes are; the length is whole f32 values.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(dst.as_mut_ptr() as *mut f32, dst.len() / 4)
                };
                pack_rows(x, k, rows, mr, dst)
            }
            RowPacking::Amx => crate::f32_amx::pack_rows(x, k, rows, dst),
        }
    }
}

// SAFETY: a chunk's part of `buffer` is written by the one thread that claimed it (the
// `UNPACKED → PACKING` exchange), and read only once it is `READY` (release, then acquire).
unsafe impl Sync for PackedRows<'_> {}

impl<'a> PackedRows<'a> {
    fn new(
        x: &'a [f32],
        k: usize,
        rows: usize,
        packing: RowPacking,
        chunk: usize,
        buffer: &'a mut Vec<Line>,
    ) -> PackedRows<'a> {
        let bytes = rows.div_ceil(packing.tile_rows()) * packing.tile_bytes(k);
        let lines = bytes.div_ceil(std::mem::size_of::<Line>());
        if buffer.len() < lines {
            buffer.resize(lines, Line([0.0; BLOCK]));
        }
        PackedRows {
            x,
            k,
            rows,
            packing,
            chunk,
            buffer: buffer.as_mut_ptr() as *mut u8,
            state: (0..rows.div_ceil(chunk))
                .map(|_| AtomicU8::new(UNPACKED))
                .collect(),
        }
    }

    /// Chunk `c`'s rows, packed.
    fn chunk(&self, c: usize) -> &[u8] {
        let mut spins = 0;
        loop {
            match self.state[c].load(Ordering::Acquire) {
                READY => break,
                UNPACKED => {
                    if self.claim(c) {
                        break;
                    }
                }
                POISONED => panic!("another thread panicked packing this GEMM's rows"),
                _ => {
                    if !((c + 1)..self.state.len()).any(|n| self.claim(n)) {
                        spins += 1;
                        if spins < SPINS {
                            std::hint::spin_loop();
                        } else {
                            std::thread::yield_now();
                        }
                    }
                }
            }
        }
        let (start, end) = self.bounds(c);
        // SAFETY: the chunk is `READY`: written, and never written again during this GEMM.
        unsafe { std::slice::from_raw_parts(self.buffer.add(start), end - start) }
    }

    /// Packs chunk `c` if no thread has claimed it; whether this thread did.
    fn claim(&self, c: usize) -> bool {
        let state = &self.state[c];
        if state.load(Ordering::Relaxed) != UNPACKED
            || state
                .compare_exchange(UNPACKED, PACKING, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        /// Marks the chunk poisoned if its packing unwinds.
        struct Guard<'s>(&'s AtomicU8);
        impl Drop for Guard<'_> {
            fn drop(&mut self) {
                self.0.store(POISONED, Ordering::Release);
            }
        }
        let guard = Guard(state);
        let (start, end) = self.bounds(c);
        // SAFETY: this thread alone claimed the chunk, and no thread reads it before `READY`.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.buffer.add(start), end - start) };
        let r0 = c * self.chunk;
        self.packing
            .pack(self.x, self.k, r0..(r0 + self.chunk).min(self.rows), dst);
        std::mem::forget(guard);
        state.store(READY, Ordering::Release);
        true
    }

    /// Chunk `c`'s part of the buffer, in bytes. Chunks are whole row tiles, and tiles of
    /// AMX-BF16 rows whole cache lines: an AMX chunk starts at a cache line.
    fn bounds(&self, c: usize) -> (usize, usize) {
        let (r0, mr) = (c * self.chunk, self.packing.tile_rows());
        let tiles = ((r0 + self.chunk).min(self.rows) - r0).div_ceil(mr);
        let bytes = self.packing.tile_bytes(self.k);
        (r0 / mr * bytes, (r0 / mr + tiles) * bytes)
    }
}

/// Rows `rows` of `x` (`[_, k]`) into `packed` as tiles of `mr` rows, each `[k][mr]`, the
/// last one padded with zeros.
fn pack_rows(x: &[f32], k: usize, rows: std::ops::Range<usize>, mr: usize, packed: &mut [f32]) {
    for (t, dst) in packed.chunks_exact_mut(k * mr).enumerate() {
        let r0 = rows.start + t * mr;
        let lanes = (rows.end - r0).min(mr);
        let src = &x[r0 * k..(r0 + lanes) * k];
        match (mr, lanes) {
            #[cfg(target_arch = "x86_64")]
            (12, 12) if std::arch::is_x86_feature_detected!("avx512f") => {
                // SAFETY: the CPU has AVX-512F; `src` is 12 rows of `k`, `dst` `[k][12]`.
                unsafe { x86::pack_tile12(src, k, dst) }
            }
            (12, 12) => pack_tile::<12>(src, k, dst),
            (6, 6) => pack_tile::<6>(src, k, dst),
            _ => {
                // Written in order, read from `lanes` rows at once.
                for (kk, d) in dst.chunks_exact_mut(mr).enumerate() {
                    for (lane, v) in d.iter_mut().enumerate() {
                        *v = if lane < lanes {
                            src[lane * k + kk]
                        } else {
                            0.0
                        };
                    }
                }
            }
        }
    }
}

/// A whole tile of `MR` rows (`src`, `[MR, k]`) into `dst` (`[k][MR]`): with the row count
/// a constant, each input's values are `MR` loads and stores without checks.
fn pack_tile<const MR: usize>(src: &[f32], k: usize, dst: &mut [f32]) {
    let rows: [&[f32]; MR] = std::array::from_fn(|lane| &src[lane * k..(lane + 1) * k]);
    for (kk, d) in dst.chunks_exact_mut(MR).enumerate().take(k) {
        let d: &mut [f32; MR] = d.try_into().expect("chunks of MR");
        for (v, row) in d.iter_mut().zip(&rows) {
            *v = row[kk];
        }
    }
}

/// What a GEMM's kernel does with its sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Store {
    /// Stores them (plus the bias).
    Set,
    /// Adds them (plus the bias) to what the output holds.
    Add,
    /// Stores GeGLU of each pair of blocks (halves paired: [`F32Linear::pair_halves`]).
    Geglu,
}

impl Store {
    /// The output's row width for a layer of `out` channels.
    fn width(self, out: usize) -> usize {
        match self {
            Store::Geglu => out / 2,
            Store::Set | Store::Add => out,
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
// SAFETY: each thread writes only its own tiles (see `F32Linear::gemm`).
unsafe impl Sync for Out {}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The x86-64 kernels. Each sweeps a tile of `MR` rows by `NB` blocks of 16 channels over
    //! the whole of `k` with every sum in a register; both are constants
    //! (`crate::tiles::sweep`), so the sums never leave the registers.

    use std::arch::x86_64::*;

    #[cfg(doc)]
    use super::pack_rows;
    use std::ops::Range;

    use super::{F32Linear, Store, Tile, BLOCK};
    use crate::f32_amx::x86::Sums;
    use crate::f32_amx::GROUP;

    /// [`super::pack_tile`] for 12 rows in 4 × 4 transposes: for each 16 inputs, 4 rows'
    /// loads become 4 vectors that hold, in each 128-bit lane, one input's 4 rows, stored
    /// as they are. A copy, so the bits of the scalar loop; ~4 % of a long forward's
    /// samples were the scalar loop's loads and stores one value at a time.
    ///
    /// # Safety
    /// The CPU must have AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn pack_tile12(src: &[f32], k: usize, dst: &mut [f32]) {
        assert!(
            src.len() >= 12 * k && dst.len() >= 12 * k,
            "a tile is 12 rows of k"
        );
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        let mut kk = 0;
        while kk + 16 <= k {
            for g in 0..3 {
                let row = |i: usize| _mm512_loadu_ps(s.add((4 * g + i) * k + kk));
                let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
                let (t0, t1) = (_mm512_unpacklo_ps(r0, r1), _mm512_unpackhi_ps(r0, r1));
                let (t2, t3) = (_mm512_unpacklo_ps(r2, r3), _mm512_unpackhi_ps(r2, r3));
                let pd = _mm512_castps_pd;
                // Lane `l` of `u[j]`: rows 4g … 4g + 3 of input kk + 4l + j.
                let u = [
                    _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t0), pd(t2))),
                    _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t0), pd(t2))),
                    _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t1), pd(t3))),
                    _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t1), pd(t3))),
                ];
                for (j, &u) in u.iter().enumerate() {
                    let at = |l: usize| d.add((kk + 4 * l + j) * 12 + 4 * g);
                    _mm_storeu_ps(at(0), _mm512_extractf32x4_ps::<0>(u));
                    _mm_storeu_ps(at(1), _mm512_extractf32x4_ps::<1>(u));
                    _mm_storeu_ps(at(2), _mm512_extractf32x4_ps::<2>(u));
                    _mm_storeu_ps(at(3), _mm512_extractf32x4_ps::<3>(u));
                }
            }
            kk += 16;
        }
        for kk in kk..k {
            for lane in 0..12 {
                *d.add(kk * 12 + lane) = *s.add(lane * k + kk);
            }
        }
    }

    /// AVX-512: 12 rows × 32 channels a tile (24 sums, 2 weight registers).
    ///
    /// # Safety
    /// The CPU must have AVX-512F; `x` must hold the item's rows packed by [`pack_rows`] for
    /// 12-row tiles, and `y` `[rows, width]` for every row of `item` (`width` as
    /// [`Store::width`] says for `STORE`, a [`Store`] as `u8`). With [`Store::Geglu`] the
    /// layer's halves are paired and the item's blocks start at an even block and are an
    /// even number.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn avx512<const STORE: u8>(
        lin: &F32Linear,
        x: *const f32,
        item: Tile,
        y: *mut f32,
    ) {
        macro_rules! tile {
            // The tile's rows, packed (see `pack_rows`).
            ($m:literal, $nb:literal, $r:ident, $b:ident) => {
                tile512::<$m, $nb, STORE>(lin, x.add(($r - item.rows.start) * lin.k), $r, $b, y)
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
    unsafe fn tile512<const MR: usize, const NB: usize, const STORE: u8>(
        lin: &F32Linear,
        x: *const f32,
        r0: usize,
        b0: usize,
        y: *mut f32,
    ) {
        let k = lin.k;
        let stride = BLOCK * k;
        let w = (lin.lines().as_ptr() as *const f32).add(b0 * stride);
        let mut acc = [[_mm512_setzero_ps(); NB]; MR];
        for kk in 0..k {
            let mut wv = [_mm512_setzero_ps(); NB];
            for (j, v) in wv.iter_mut().enumerate() {
                let p = w.add(j * stride + kk * BLOCK);
                // A block is 64 KB at k = 1,024, more than L1 holds next to the rows, so
                // each row tile reads it from L2 again, and the first one from memory: ask
                // for it 4 KB ahead, which measured 3 % faster than 1 KB (a prefetch past
                // the end is harmless, hence `wrapping_add`).
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64 * BLOCK) as *const i8);
                *v = _mm512_loadu_ps(p);
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let a = _mm512_set1_ps(*x.add(kk * 12 + i));
                for (s, &wj) in row.iter_mut().zip(&wv) {
                    *s = _mm512_fmadd_ps(a, wj, *s);
                }
            }
        }
        let biased = |s: __m512, n0: usize, mask: __mmask16| match &lin.bias {
            Some(b) => _mm512_add_ps(s, _mm512_maskz_loadu_ps(mask, b.as_ptr().add(n0))),
            None => s,
        };
        if STORE == Store::Geglu as u8 {
            // Blocks `b0` and `b0 + 1` are the same 16 channels of the two halves, whole
            // (`pair_halves` pairs only whole blocks).
            assert!(
                NB == 2 && b0.is_multiple_of(2),
                "GeGLU stores pairs of blocks"
            );
            let (n0, half) = (lin.column(b0), lin.out / 2);
            let (mut a, mut g) = ([0f32; BLOCK], [0f32; BLOCK]);
            for (i, row) in acc.iter().enumerate() {
                _mm512_storeu_ps(a.as_mut_ptr(), biased(row[0], n0, !0));
                _mm512_storeu_ps(g.as_mut_ptr(), biased(row[1], half + n0, !0));
                // SAFETY: `y` is `[rows, half]` (the caller's contract) and `n0 + 16 ≤ half`;
                // this tile's thread alone writes these 16 values.
                let at = std::slice::from_raw_parts_mut(y.add((r0 + i) * half + n0), BLOCK);
                crate::host::geglu_row_portable(&a, &g, at);
            }
            return;
        }
        for (i, row) in acc.iter().enumerate() {
            for (j, &s) in row.iter().enumerate() {
                let n0 = lin.column(b0 + j);
                let lanes = (lin.out - n0).min(BLOCK);
                let mask: __mmask16 = if lanes == BLOCK {
                    !0
                } else {
                    (1u16 << lanes) - 1
                };
                let v = biased(s, n0, mask);
                let at = y.add((r0 + i) * lin.out + n0);
                let v = if STORE == Store::Add as u8 {
                    _mm512_add_ps(_mm512_maskz_loadu_ps(mask, at), v)
                } else {
                    v
                };
                _mm512_mask_storeu_ps(at, mask, v);
            }
        }
    }

    /// The AMX-BF16 kernel's sums of one row tile (`rows`, at most 16) against the group of
    /// blocks from `b0`, into `y` as `store` says, with the bias: the operations of
    /// [`tile512`]'s stores on the same sums.
    ///
    /// # Safety
    /// The CPU must have AVX-512F; `y` as [`avx512`] says, for `store`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn store_sums(
        lin: &F32Linear,
        store: Store,
        sums: &Sums,
        rows: Range<usize>,
        b0: usize,
        y: *mut f32,
    ) {
        let blocks = lin.out.div_ceil(BLOCK);
        let biased = |s: __m512, n0: usize, mask: __mmask16| match &lin.bias {
            Some(b) => _mm512_add_ps(s, _mm512_maskz_loadu_ps(mask, b.as_ptr().add(n0))),
            None => s,
        };
        for (i, r) in rows.enumerate() {
            let sum = |j: usize| _mm512_loadu_ps(sums[j].as_ptr().add(i * BLOCK));
            if store == Store::Geglu {
                // Blocks `b` and `b + 1` are the same 16 channels of the two halves, whole;
                // a group holds two such pairs (or padding past the last).
                let half = lin.out / 2;
                for j in (0..GROUP).step_by(2) {
                    if b0 + j >= blocks {
                        break;
                    }
                    let n0 = lin.column(b0 + j);
                    let (mut a, mut g) = ([0f32; BLOCK], [0f32; BLOCK]);
                    _mm512_storeu_ps(a.as_mut_ptr(), biased(sum(j), n0, !0));
                    _mm512_storeu_ps(g.as_mut_ptr(), biased(sum(j + 1), half + n0, !0));
                    // SAFETY: `y` is `[rows, half]` and `n0 + 16 ≤ half`; this tile's thread
                    // alone writes these 16 values.
                    let at = std::slice::from_raw_parts_mut(y.add(r * half + n0), BLOCK);
                    crate::host::geglu_row_portable(&a, &g, at);
                }
                continue;
            }
            for j in 0..GROUP {
                if b0 + j >= blocks {
                    break;
                }
                let n0 = lin.column(b0 + j);
                let lanes = (lin.out - n0).min(BLOCK);
                let mask: __mmask16 = if lanes == BLOCK {
                    !0
                } else {
                    (1u16 << lanes) - 1
                };
                let v = biased(sum(j), n0, mask);
                let at = y.add(r * lin.out + n0);
                let v = if store == Store::Add {
                    _mm512_add_ps(_mm512_maskz_loadu_ps(mask, at), v)
                } else {
                    v
                };
                _mm512_mask_storeu_ps(at, mask, v);
            }
        }
    }

    /// AVX2 with FMA: 6 rows × 16 channels a tile (12 sums in two 256-bit halves a block).
    ///
    /// # Safety
    /// As [`avx512`] with [`Store::Set`] or, with `ADD`, [`Store::Add`], for AVX2 and FMA
    /// and 6-row tiles.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn avx2<const ADD: bool>(
        lin: &F32Linear,
        x: *const f32,
        item: Tile,
        y: *mut f32,
    ) {
        macro_rules! tile {
            // The tile's rows, packed (see `pack_rows`).
            ($m:literal, $nb:literal, $r:ident, $b:ident) => {
                tile256::<$m, $nb, ADD>(lin, x.add(($r - item.rows.start) * lin.k), $r, $b, y)
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
    unsafe fn tile256<const MR: usize, const NB: usize, const ADD: bool>(
        lin: &F32Linear,
        x: *const f32,
        r0: usize,
        b0: usize,
        y: *mut f32,
    ) {
        let k = lin.k;
        let stride = BLOCK * k;
        let w = (lin.lines().as_ptr() as *const f32).add(b0 * stride);
        let mut acc = [[[_mm256_setzero_ps(); 2]; NB]; MR];
        for kk in 0..k {
            let mut wv = [[_mm256_setzero_ps(); 2]; NB];
            for (j, v) in wv.iter_mut().enumerate() {
                let p = w.add(j * stride + kk * BLOCK);
                // 1 KB ahead: the AVX-512 kernel's 4 KB was measured on that kernel only.
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
                let n0 = lin.column(b0 + j);
                let mut sums = [0f32; BLOCK];
                _mm256_storeu_ps(sums.as_mut_ptr(), s[0]);
                _mm256_storeu_ps(sums.as_mut_ptr().add(8), s[1]);
                let at = y.add((r0 + i) * lin.out);
                for (c, &v) in sums.iter().enumerate() {
                    let n = n0 + c;
                    if n >= lin.out {
                        break;
                    }
                    let v = match &lin.bias {
                        Some(b) => v + b[n],
                        None => v,
                    };
                    *at.add(n) = if ADD { *at.add(n) + v } else { v };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{F32Linear, Kernel};

    /// Values in [-1, 1) from a fixed seed.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// Paired halves change nothing a plain call returns, on any kernel, and the fused
    /// GeGLU gives the bits of `host::geglu` on the plain output: row counts around the
    /// 12- and 16-row tiles, several chunks of rows, ragged `k`, a bias, halves of one to
    /// 256 blocks (enough that work items take several pairs, as `Wi`'s 164 do; and odd
    /// numbers of pairs, which leave a group of AMX blocks half padding), and one that
    /// cannot pair, which stays as it is.
    #[test]
    fn paired_halves_and_the_fused_geglu_give_the_two_steps_bits() {
        let kernels: Vec<Kernel> = Kernel::ALL.into_iter().filter(|k| k.available()).collect();
        if !kernels.iter().any(|&k| {
            F32Linear::new(&[0.0; 32], 32, 1, None, k)
                .pair_halves()
                .fuses_geglu()
        }) {
            println!("no two-block kernel on this CPU: the fused GeGLU is not checked");
        }
        for (i, &(rows, inter, k)) in [
            (1, 16, 4),
            (13, 48, 64),
            (207, 64, 131),
            (1100, 32, 1024),
            (30, 2624, 16),
            (3, 4096, 4),
            (5, 40, 8),
        ]
        .iter()
        .enumerate()
        {
            let out = 2 * inter;
            // f16 values, as a checkpoint's weights are: the AMX kernel runs on those.
            let w: Vec<f32> = values(out * k, 11 + i as u64)
                .iter()
                .map(|&v| half::f16::from_f32(v).to_f32())
                .collect();
            let x: Vec<f32> = values(rows * k, 23 + i as u64)
                .iter()
                .map(|v| 3.0 * v)
                .collect();
            let bias = values(out, 37 + i as u64);
            for &kernel in &kernels {
                let plain = F32Linear::new(&w, out, k, Some(bias.clone()), kernel);
                let paired = F32Linear::new(&w, out, k, Some(bias.clone()), kernel).pair_halves();
                assert_eq!(
                    paired.pairs_halves(),
                    inter.is_multiple_of(16),
                    "inter {inter}"
                );
                let want = plain.forward(&x);
                let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&paired.forward(&x)),
                    bits(&want),
                    "{} at {rows}x{out}x{k}",
                    kernel.name()
                );
                if paired.fuses_geglu() {
                    let mut got = vec![f32::NAN; rows * inter];
                    paired.forward_geglu_into(&x, &mut got);
                    assert_eq!(
                        bits(&got),
                        bits(&crate::host::geglu(&want, inter)),
                        "GeGLU, {} at {rows}x{out}x{k}",
                        kernel.name()
                    );
                }
            }
        }
    }

    /// The transposing packer against the plain loop, at widths around its 16-input steps.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_avx512_packing_is_the_plain_packing() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            println!("no AVX-512 on this CPU: only the plain packing runs");
            return;
        }
        for k in [1, 15, 16, 17, 131, 1024] {
            let src: Vec<f32> = (0..12 * k).map(|i| i as f32 * 0.5 - 3.0).collect();
            let mut want = vec![f32::NAN; 12 * k];
            super::pack_tile::<12>(&src, k, &mut want);
            let mut got = vec![f32::NAN; 12 * k];
            // SAFETY: the CPU has AVX-512F (checked above).
            unsafe { super::x86::pack_tile12(&src, k, &mut got) };
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "k = {k}"
            );
            // The plain loop's layout: input kk's 12 rows side by side.
            assert_eq!(want[12 * (k - 1) + 11], src[11 * k + k - 1]);
        }
    }
}
