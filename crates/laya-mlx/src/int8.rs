//! Int8 linear layers for `--int8` on the CPU: weights quantized once, per output channel;
//! activations quantized per row as each GEMM runs; products summed exactly in `i32`.
//!
//! A layer `y = x · Wᵀ (+ b)` becomes, for row `r` and channel `n`,
//! `y[r][n] = (Σₖ qx[r][k] · qw[n][k]) · (sx[r] · sw[n]) (+ b[n])` with `qw = round(W / sw)`,
//! `sw[n] = max|W[n]| / 127`, `qx = round(x / sx)`, `sx[r] = max|x[r]| / 127`, both in
//! `[-127, 127]`. The sum is an integer, computed exactly by every kernel below, and the
//! scaling is the same f32 operations in the same order in each: so a row's output is bit for
//! bit the same whichever kernel the CPU takes, and whatever other rows share the GEMM.
//!
//! With [`Activations::Split`], `x` is rounded twice: `qx` as above, then what that left,
//! `x - sx·qx`, on its own scale; two integer GEMMs whose scaled sums add up.
//!
//! Kernels, chosen at run time ([`Kernel::detect`]):
//! * AVX-512 VNNI: `vpdpbusd` on 512-bit registers (16 channels × 4 products each). It
//!   multiplies unsigned by signed bytes, so activations are shifted to `qx + 128` and
//!   `128 · Σₖ qw[n][k]` is taken off the sum again (exact in `i32`).
//! * AMX-INT8: `tdpbusd` on tiles (16 rows × 64 activation bytes against 16 groups of four
//!   inputs × 16 channels), the same unsigned-by-signed products as `vpdpbusd`, eight times
//!   as many a cycle. The packed weight blocks below are exactly the B tiles' layout, and
//!   the activations are quantized straight into the A tiles' ([`Layout::Tiles`]). For
//!   layers whose `k` is a multiple of 64 (every checkpoint's); others take AVX-512 VNNI.
//!   Linux hands the tile registers to a process only on request (`arch_prctl`), asked once.
//! * AVX-VNNI: the same on 256-bit registers, for CPUs with VNNI but not AVX-512.
//! * AVX2: `vpmaddubsw` / `vpmaddwd`. `vpmaddubsw` saturates pairs of `u8 · i8` products at
//!   `i16`, which `(qx + 128) · qw` would reach; `|qx| · (qw · sign qx)` cannot
//!   (`2 · 127 · 127 < 32 767`), so that is what it multiplies.
//! * Portable code everywhere else.
//!
//! Weights are packed in blocks of 16 output channels, each block `[k / 4][16][4]`: one
//! 64-byte load is four consecutive inputs of 16 channels, what one `vpdpbusd` consumes.

use std::ops::Range;

/// Output channels per packed block.
const BLOCK: usize = 16;
/// Blocks per panel: the channels one row tile sweeps over `k` together (64 with AVX-512).
const PANEL: usize = 4;
/// Activation bytes a work item's rows hold: what stays in a core's L2 beside a panel.
const CHUNK_BYTES: usize = 256 * 1024;
/// Rows of an AMX tile, and the bytes of `k` one holds.
const AMX_ROWS: usize = 16;
const AMX_K: usize = 64;

/// `--int8`'s settings: the kernel, and how activations are quantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Int8 {
    /// The dot-product kernel.
    pub kernel: Kernel,
    /// How each GEMM's activations are quantized.
    pub activations: Activations,
}

impl Int8 {
    /// The CPU's best kernel, with `activations`.
    pub fn detect(activations: Activations) -> Int8 {
        Int8 {
            kernel: Kernel::detect(),
            activations,
        }
    }

    /// The precision the engine reports: `int8`, `int8-mixed` or `int8-split`.
    pub fn precision(self) -> &'static str {
        match self.activations {
            Activations::Int8 => "int8",
            Activations::Mixed => "int8-mixed",
            Activations::Split => "int8-split",
        }
    }
}

/// Which int8 dot-product kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// AMX-INT8 (`tdpbusd` on tiles), AVX-512 VNNI where a layer's `k` does not fit tiles.
    Amx,
    /// AVX-512 VNNI (`vpdpbusd`, 512-bit).
    Avx512Vnni,
    /// AVX-VNNI (`vpdpbusd`, 256-bit).
    AvxVnni,
    /// AVX2 (`vpmaddubsw` + `vpmaddwd`).
    Avx2,
    /// Plain Rust.
    Portable,
}

impl Kernel {
    /// Every kernel, fastest first.
    pub const ALL: [Kernel; 5] = [
        Kernel::Amx,
        Kernel::Avx512Vnni,
        Kernel::AvxVnni,
        Kernel::Avx2,
        Kernel::Portable,
    ];

    /// The fastest kernel this CPU runs.
    pub fn detect() -> Kernel {
        Kernel::ALL
            .into_iter()
            .find(|k| k.available())
            .unwrap_or(Kernel::Portable)
    }

    /// Whether this CPU can run the kernel.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let vnni512 = has!("avx512f") && has!("avx512bw") && has!("avx512vnni");
            match self {
                Kernel::Amx => vnni512 && crate::amx::ready(crate::amx::Unit::Int8),
                Kernel::Avx512Vnni => vnni512,
                Kernel::AvxVnni => has!("avx2") && has!("avxvnni"),
                Kernel::Avx2 => has!("avx2"),
                Kernel::Portable => true,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Kernel::Portable
        }
    }

    /// A short name for logs and `/health`: `amx-int8`, `avx512-vnni`, `avx-vnni`, `avx2`,
    /// `portable`.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Amx => "amx-int8",
            Kernel::Avx512Vnni => "avx512-vnni",
            Kernel::AvxVnni => "avx-vnni",
            Kernel::Avx2 => "avx2",
            Kernel::Portable => "portable",
        }
    }

    /// Whether the kernel multiplies activations shifted by 128 (`vpdpbusd`).
    fn shifted(self) -> bool {
        matches!(self, Kernel::Amx | Kernel::Avx512Vnni | Kernel::AvxVnni)
    }
}

/// A linear layer with int8 weights: `[out, k]` quantized per output channel.
#[derive(Debug)]
pub struct Int8Linear {
    out: usize,
    k: usize,
    /// `k` rounded up to a multiple of 4 (the padding is zero in weights and activations).
    k4: usize,
    /// `out / 16` blocks (rounded up) of `[k4 / 4][16][4]`; channels past `out` are zero.
    packed: Vec<i8>,
    /// Per channel (padded to the blocks): the scale `sw`.
    scale: Vec<f32>,
    /// Per channel (padded): `128 · Σₖ qw[n][k]`, what the shifted kernels take off.
    shift: Vec<i32>,
    bias: Option<Vec<f32>>,
}

impl Int8Linear {
    /// Quantizes the row-major `[out, k]` weight `w` (and keeps the `[out]` bias in f32).
    pub fn new(w: &[f32], out: usize, k: usize, bias: Option<Vec<f32>>) -> Int8Linear {
        assert_eq!(w.len(), out * k, "weight is not [out, k]");
        if let Some(b) = &bias {
            assert_eq!(b.len(), out, "bias is not [out]");
        }
        let k4 = k.div_ceil(4) * 4;
        let blocks = out.div_ceil(BLOCK);
        let mut packed = vec![0i8; blocks * BLOCK * k4];
        let mut scale = vec![0f32; blocks * BLOCK];
        let mut shift = vec![0i32; blocks * BLOCK];
        for n in 0..out {
            let row = &w[n * k..(n + 1) * k];
            let (s, inv) = scale_of(row);
            scale[n] = s;
            let (b, c) = (n / BLOCK, n % BLOCK);
            let mut sum = 0i32;
            for (kk, &v) in row.iter().enumerate() {
                let q = quantize(v, inv);
                sum += q as i32;
                packed[b * BLOCK * k4 + (kk / 4) * BLOCK * 4 + c * 4 + kk % 4] = q;
            }
            shift[n] = 128 * sum;
        }
        Int8Linear {
            out,
            k,
            k4,
            packed,
            scale,
            shift,
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

    /// Bytes held (weights, scales, bias).
    pub fn bytes(&self) -> usize {
        self.packed.len() + 8 * self.scale.len() + 4 * self.bias.as_ref().map_or(0, Vec::len)
    }

    /// `x` is row-major `[rows, k]`; returns `[rows, out]`, computed by `kernel`, which must
    /// be [`Kernel::available`] (otherwise the portable kernel runs), with the activations
    /// quantized as `activations` says.
    pub fn forward(&self, x: &[f32], kernel: Kernel, activations: Activations) -> Vec<f32> {
        let rows = x.len().checked_div(self.k).unwrap_or(0);
        let mut y = vec![0f32; rows * self.out];
        self.forward_into(x, kernel, activations, &mut y);
        y
    }

    /// [`Int8Linear::forward`] into `y`, which must hold `[rows, out]` (any values: every
    /// one is written), so that callers can hand out memory that is already mapped.
    pub fn forward_into(&self, x: &[f32], kernel: Kernel, activations: Activations, y: &mut [f32]) {
        assert_eq!(x.len() % self.k.max(1), 0, "input is not [rows, k]");
        let rows = x.len().checked_div(self.k).unwrap_or(0);
        assert_eq!(y.len(), rows * self.out, "output is not [rows, out]");
        if rows == 0 {
            return;
        }
        let kernel = if kernel.available() {
            kernel
        } else {
            Kernel::Portable
        };
        let layout = if self.amx_tiles(kernel) {
            Layout::Tiles
        } else if kernel.shifted() {
            Layout::ShiftedRows
        } else {
            Layout::Rows
        };
        let planes = planes(x, rows, self.k, self.k4, layout, activations);
        let blocks = self.out.div_ceil(BLOCK);
        // Work items are a chunk of rows by a panel of channels, chunk by chunk: a chunk's
        // activations stay in the core's cache while the panels go by. The threads (this one
        // among them) take items in turn from a shared counter, so a thread that is held up
        // (another process, a slower core) leaves its share to the others instead of holding
        // up the GEMM.
        let panels = blocks.div_ceil(PANEL);
        let mut chunk = (CHUNK_BYTES / self.k4.max(1)).max(8);
        if kernel == Kernel::Amx {
            // Whole pairs of 16-row tiles.
            chunk = chunk.div_ceil(2 * AMX_ROWS) * 2 * AMX_ROWS;
        }
        let chunks = rows.div_ceil(chunk);
        let items = chunks * panels;
        let threads = crate::parallel::threads_for(items, rows * self.out * self.k / 64);
        let next = std::sync::atomic::AtomicUsize::new(0);
        let out = Out(y.as_mut_ptr());
        let work = || loop {
            let item = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if item >= items {
                break;
            }
            let (c, p) = (item / panels, item % panels);
            let (r0, b0) = (c * chunk, p * PANEL);
            for plane in &planes {
                // SAFETY: `y` has `rows * out` values and outlives the threads; each item is
                // taken by one thread, which writes only that item's rows and channels (one
                // plane after the other, so their sums add in the same order in every run).
                unsafe {
                    self.run(
                        plane,
                        r0..(r0 + chunk).min(rows),
                        b0..(b0 + PANEL).min(blocks),
                        out.ptr(),
                        kernel,
                    )
                }
            }
        };
        crate::parallel::broadcast(threads, work);
    }

    /// Channels of blocks `blocks`, every row, into `y` (`[rows, out]`).
    ///
    /// # Safety
    /// `y` must hold `acts.rows * self.out` values, and `kernel` must be available.
    unsafe fn run(
        &self,
        acts: &Plane,
        rows: Range<usize>,
        blocks: Range<usize>,
        y: *mut f32,
        kernel: Kernel,
    ) {
        #[cfg(target_arch = "x86_64")]
        match kernel {
            Kernel::Amx if self.amx_tiles(kernel) => return x86::amx(self, acts, rows, blocks, y),
            Kernel::Amx | Kernel::Avx512Vnni => return x86::vnni512(self, acts, rows, blocks, y),
            Kernel::AvxVnni => return x86::vnni256(self, acts, rows, blocks, y),
            Kernel::Avx2 => return x86::avx2(self, acts, rows, blocks, y),
            Kernel::Portable => {}
        }
        let _ = kernel;
        portable(self, acts, rows, blocks, y);
    }

    /// Whether `kernel` runs this layer on AMX tiles (which want the activations tiled):
    /// where `k` fills whole tiles; other layers take AVX-512 VNNI.
    fn amx_tiles(&self, kernel: Kernel) -> bool {
        kernel == Kernel::Amx && self.k4 > 0 && self.k4.is_multiple_of(AMX_K)
    }

    /// The packed weights of block `b`.
    fn block(&self, b: usize) -> &[i8] {
        &self.packed[b * BLOCK * self.k4..(b + 1) * BLOCK * self.k4]
    }

    /// Writes the 16 sums of row `r`'s channels `n0..` (those below `out`): the one
    /// scaling every kernel uses, so their outputs agree bit for bit.
    ///
    /// # Safety
    /// `y` must hold row `r` of `[rows, out]`.
    unsafe fn finish(&self, acts: &Plane, r: usize, n0: usize, sums: &[i32; BLOCK], y: *mut f32) {
        let sx = acts.scale[r];
        for (c, &s) in sums.iter().enumerate() {
            let n = n0 + c;
            if n >= self.out {
                break;
            }
            let s = if acts.layout.shifted() {
                s - self.shift[n]
            } else {
                s
            };
            let v = s as f32 * (sx * self.scale[n]);
            let at = y.add(r * self.out + n);
            if acts.residual {
                *at += v;
            } else {
                *at = match &self.bias {
                    Some(b) => v + b[n],
                    None => v,
                };
            }
        }
    }
}

/// The output matrix, shared by the threads that write disjoint channels of it.
struct Out(*mut f32);

impl Out {
    /// A method, so closures capture the whole (`Sync`) wrapper, not its raw field.
    fn ptr(&self) -> *mut f32 {
        self.0
    }
}
// SAFETY: each thread writes only its own channels (see `Int8Linear::forward`).
unsafe impl Sync for Out {}

/// How a GEMM's activations are quantized, per row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activations {
    /// One int8 plane: one integer GEMM, and the activations' rounding on top of the
    /// weights' (about six times the probability error of `Split` on the fixtures).
    #[default]
    Int8,
    /// Two int8 planes: the value rounded to int8, and what that rounding left, rounded to
    /// int8 on its own scale (about 15 bits in all). Two integer GEMMs; the activations'
    /// rounding then costs about nothing, and the weights' int8 is what is left.
    Split,
    /// [`Activations::Split`] for the layers whose activations' rounding moves answers (the
    /// attention output `attn.Wo` and the feed-forward input `Wi`), one plane for `Wqkv`,
    /// whose rounding moved no pick (results/CPU.md): `Split`'s answers on the fixtures for
    /// about two thirds of its extra integer work. As a layer's setting it means `Split`.
    Mixed,
}

/// Which of an encoder block's int8 layers a GEMM is: what [`Activations::Mixed`] decides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The fused query, key and value projection (`attn.Wqkv`).
    Qkv,
    /// The attention output projection (`attn.Wo`).
    AttentionOut,
    /// The feed-forward input projection (`mlp.Wi`).
    FeedForwardIn,
}

impl Activations {
    /// What the activations of a layer in `role` get under this setting.
    pub fn for_role(self, role: Role) -> Activations {
        match (self, role) {
            (Activations::Mixed, Role::Qkv) => Activations::Int8,
            (Activations::Mixed, _) => Activations::Split,
            (activations, _) => activations,
        }
    }
}

/// The quantized activations of one GEMM: one plane, or two for [`Activations::Split`] (and
/// [`Activations::Mixed`], when a layer is handed it unresolved).
fn planes(
    x: &[f32],
    rows: usize,
    k: usize,
    k4: usize,
    layout: Layout,
    activations: Activations,
) -> Vec<Plane> {
    let first = Plane::new(x, rows, k, k4, layout, false);
    if activations == Activations::Int8 {
        return vec![first];
    }
    // What the first rounding left.
    let mut left = x.to_vec();
    for (r, row) in left.chunks_exact_mut(k.max(1)).take(rows).enumerate() {
        let s = first.scale[r];
        for (kk, v) in row.iter_mut().enumerate() {
            *v -= first.value(r, kk) as f32 * s;
        }
    }
    let second = Plane::new(&left, rows, k, k4, layout, true);
    vec![first, second]
}

/// How a plane's bytes are laid out, which is what the kernel that reads them wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// `[rows, k4]`, unshifted: the portable and AVX2 kernels.
    Rows,
    /// `[rows, k4]`, shifted by 128: the `vpdpbusd` kernels.
    ShiftedRows,
    /// Shifted, and in AMX tiles: `[rows / 16][k4 / 64][16][64]`, each tile's 1 KB in one
    /// place. The AMX kernel is bound by its tile loads (`results/CPU.md`); loading 1 KB in
    /// one run instead of 16 rows `k4` bytes apart took its three layers 4-6 % less time at
    /// 1,024 tokens, and an s128_q1 request ~4 %.
    Tiles,
}

impl Layout {
    fn shifted(self) -> bool {
        self != Layout::Rows
    }

    /// Where byte `kk` of row `r` goes, for planes whose `k4` is a multiple of 64 when tiled.
    #[inline(always)]
    fn at(self, r: usize, kk: usize, k4: usize) -> usize {
        match self {
            Layout::Tiles => {
                ((r / AMX_ROWS) * (k4 / AMX_K) + kk / AMX_K) * (AMX_ROWS * AMX_K)
                    + (r % AMX_ROWS) * AMX_K
                    + kk % AMX_K
            }
            Layout::Rows | Layout::ShiftedRows => r * k4 + kk,
        }
    }
}

/// One plane of a GEMM's activations, quantized per row.
struct Plane {
    k4: usize,
    /// `qx` as bytes, shifted by 128 (as `u8`) for the `vpdpbusd` and `tdpbusd` kernels, in
    /// `layout`; 32 rows past the last (rounded up to a tile) are padding for the AMX tiles.
    q: Vec<u8>,
    scale: Vec<f32>,
    layout: Layout,
    /// What the first plane's rounding left: added to the output, without the bias.
    residual: bool,
}

impl Plane {
    fn new(x: &[f32], rows: usize, k: usize, k4: usize, layout: Layout, residual: bool) -> Plane {
        // Two AMX tiles of rows past the last: a tile that starts at a real row reads 16 or
        // 32 rows whatever is left, and what it computes for these is never written out.
        let padded = rows.next_multiple_of(AMX_ROWS) + 2 * AMX_ROWS;
        let mut q = vec![if layout.shifted() { 128u8 } else { 0 }; padded * k4];
        let mut scale = vec![0f32; rows];
        let mut per = rows
            .div_ceil(crate::parallel::threads_for(rows, rows * k))
            .max(1);
        if layout == Layout::Tiles {
            // Whole tiles a thread, so that each writes a range of `q` of its own.
            per = per.next_multiple_of(AMX_ROWS);
        }
        crate::parallel::run(
            x.chunks(per * k.max(1))
                .zip(q.chunks_mut(per * k4))
                .zip(scale.chunks_mut(per))
                .map(|((x, q), scale)| move || quantize_rows(x, k, q, k4, scale, layout)),
        );
        Plane {
            k4,
            q,
            scale,
            layout,
            residual,
        }
    }

    /// `qx[r][kk]`, unshifted, in any layout.
    fn value(&self, r: usize, kk: usize) -> i32 {
        let q = self.q[self.layout.at(r, kk, self.k4)];
        if self.layout.shifted() {
            q as i32 - 128
        } else {
            q as i8 as i32
        }
    }

    /// Row `r`'s bytes, in a row layout.
    fn row(&self, r: usize) -> &[u8] {
        debug_assert_ne!(self.layout, Layout::Tiles, "a tiled plane has no rows");
        &self.q[r * self.k4..(r + 1) * self.k4]
    }
}

/// Rows of `x` (`k` values each) quantized into `q` (`k4` bytes a row, placed and shifted
/// as `layout` says), their scales into `scale` (one a row).
fn quantize_rows(x: &[f32], k: usize, q: &mut [u8], k4: usize, scale: &mut [f32], layout: Layout) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512bw") {
        // SAFETY: the CPU has AVX-512F and BW, checked just above.
        unsafe { quantize_rows_avx512(x, k, q, k4, scale, layout) };
        return;
    }
    quantize_rows_any(x, k, q, k4, scale, layout);
}

/// [`quantize_rows`] compiled for AVX-512: the same operations (a product, comparisons and
/// integer steps, no contraction), so the same bytes, 16 lanes at a time instead of 4. At
/// 5,500 rows the activations' quantization was ~6% of an `--int8` forward.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn quantize_rows_avx512(
    x: &[f32],
    k: usize,
    q: &mut [u8],
    k4: usize,
    scale: &mut [f32],
    layout: Layout,
) {
    quantize_rows_any(x, k, q, k4, scale, layout)
}

#[inline(always)]
fn quantize_rows_any(
    x: &[f32],
    k: usize,
    q: &mut [u8],
    k4: usize,
    scale: &mut [f32],
    layout: Layout,
) {
    let shifted = layout.shifted();
    // A row is one run of bytes, or 64-byte runs in its tiles.
    let run = if layout == Layout::Tiles { AMX_K } else { k4 };
    for (r, s_out) in scale.iter_mut().enumerate() {
        let row = &x[r * k..(r + 1) * k];
        let (s, inv) = scale_of(row);
        *s_out = s;
        for (c, part) in row.chunks(run.max(1)).enumerate() {
            let at = layout.at(r, c * run, k4);
            for (d, &v) in q[at..at + part.len()].iter_mut().zip(part) {
                let v = quantize(v, inv);
                *d = if shifted {
                    (v as i16 + 128) as u8
                } else {
                    v as u8
                };
            }
        }
    }
}

/// `(max|v| / 127, 127 / max|v|)`; `(0, 0)` for an all-zero (or empty) vector.
#[inline(always)]
fn scale_of(v: &[f32]) -> (f32, f32) {
    let amax = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    if amax > 0.0 && amax.is_finite() {
        (amax / 127.0, 127.0 / amax)
    } else {
        (0.0, 0.0)
    }
}

/// `round(v · inv)` (halves away from zero, as `f32::round`), in `[-127, 127]`.
///
/// Written without `f32::round`, which is a libm call on baseline x86-64 and kept the
/// activations' loop scalar (a fifth of a GEMM's time at 2,048 rows): `as` truncates
/// (saturating, NaN to 0), and `x - trunc(x)` is exact, so the half is seen exactly.
#[inline(always)]
fn quantize(v: f32, inv: f32) -> i8 {
    // Clamped first so that `t + 1` cannot overflow; NaN stays NaN and becomes 0.
    let x = (v * inv).clamp(-127.5, 127.5);
    let t = x as i32;
    let frac = x - t as f32;
    let r = t + (frac >= 0.5) as i32 - (frac <= -0.5) as i32;
    r.clamp(-127, 127) as i8
}

/// The portable kernel: the same sums, one product at a time.
///
/// # Safety
/// `y` must hold `acts.rows * lin.out` values.
unsafe fn portable(
    lin: &Int8Linear,
    acts: &Plane,
    rows: Range<usize>,
    blocks: Range<usize>,
    y: *mut f32,
) {
    for b in blocks {
        let w = lin.block(b);
        for r in rows.clone() {
            let a = acts.row(r);
            let mut sums = [0i32; BLOCK];
            for (g, wg) in w.chunks_exact(BLOCK * 4).enumerate() {
                let ag = &a[g * 4..g * 4 + 4];
                for (c, wc) in wg.chunks_exact(4).enumerate() {
                    for t in 0..4 {
                        let av = if acts.layout.shifted() {
                            ag[t] as i32
                        } else {
                            ag[t] as i8 as i32
                        };
                        sums[c] += av * wc[t] as i32;
                    }
                }
            }
            lin.finish(acts, r, b * BLOCK, &sums, y);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The x86-64 kernels. The vector ones sweep a tile of `MR` rows by `NB` blocks of 16
    //! channels over the whole of `k` with every sum in a register, then hand the sums to
    //! [`Int8Linear::finish`]; both are constants (`crate::tiles::sweep`), so the sums never
    //! leave the registers. The AMX one sums in tiles and stores them for the same scaling.

    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::{Int8Linear, Layout, Plane, AMX_K, AMX_ROWS, BLOCK};
    use crate::amx::TileConfig;

    /// AMX-INT8: tiles of 32 rows × 32 channels (four 16 × 16 sums `tmm0`-`tmm3`; two
    /// activation tiles `tmm4`, `tmm5`; two weight tiles `tmm6`, `tmm7`), over `k` 64 bytes a
    /// step. `lin.k4` must be a positive multiple of 64, and `acts` must be in
    /// [`Layout::Tiles`] with 32 rows past the last (it is: [`Plane::new`]).
    ///
    /// The integer sums are exact, so they are the other kernels' sums, and
    /// [`Int8Linear::finish`] scales them the same way.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn amx(
        lin: &Int8Linear,
        acts: &Plane,
        rows: Range<usize>,
        blocks: Range<usize>,
        y: *mut f32,
    ) {
        // Loaded once a call: per block it cost a quarter of the kernel's time at 207 rows.
        let _tiles = TileConfig::full().load();
        debug_assert_eq!(acts.layout, Layout::Tiles, "AMX reads tiled activations");
        let k4 = lin.k4;
        let block_bytes = BLOCK * k4;
        let mut sums = [[0i32; AMX_ROWS * BLOCK]; 4];
        let mut r = rows.start;
        while r < rows.end {
            // `r` starts a tile: chunks and steps are whole pairs of tiles.
            let a0 = acts.q.as_ptr().add(Layout::Tiles.at(r, 0, k4));
            let mut b = blocks.start;
            while b < blocks.end {
                // An odd last block pairs with itself; its second copy is not written out.
                let b1 = if b + 1 < blocks.end { b + 1 } else { b };
                // One block from zeroing the sums to storing them.
                std::arch::asm!(
                    "tilezero tmm0",
                    "tilezero tmm1",
                    "tilezero tmm2",
                    "tilezero tmm3",
                    "2:",
                    "tileloadd tmm4, [{a0} + {sa} * 1]",
                    "tileloadd tmm5, [{a1} + {sa} * 1]",
                    "tileloadd tmm6, [{w0} + {sw} * 1]",
                    "tileloadd tmm7, [{w1} + {sw} * 1]",
                    "tdpbusd tmm0, tmm4, tmm6",
                    "tdpbusd tmm1, tmm4, tmm7",
                    "tdpbusd tmm2, tmm5, tmm6",
                    "tdpbusd tmm3, tmm5, tmm7",
                    "add {a0}, {ka}",
                    "add {a1}, {ka}",
                    "add {w0}, {kw}",
                    "add {w1}, {kw}",
                    "dec {steps}",
                    "jnz 2b",
                    "tilestored [{c0} + {sw} * 1], tmm0",
                    "tilestored [{c1} + {sw} * 1], tmm1",
                    "tilestored [{c2} + {sw} * 1], tmm2",
                    "tilestored [{c3} + {sw} * 1], tmm3",
                    a0 = inout(reg) a0 => _,
                    a1 = inout(reg) a0.add(AMX_ROWS * k4) => _,
                    w0 = inout(reg) lin.packed.as_ptr().add(b * block_bytes) => _,
                    w1 = inout(reg) lin.packed.as_ptr().add(b1 * block_bytes) => _,
                    steps = inout(reg) k4 / AMX_K => _,
                    sa = in(reg) AMX_K,
                    sw = in(reg) BLOCK * 4,
                    ka = const AMX_ROWS * AMX_K,
                    kw = const AMX_ROWS * BLOCK * 4,
                    c0 = in(reg) sums[0].as_mut_ptr(),
                    c1 = in(reg) sums[1].as_mut_ptr(),
                    c2 = in(reg) sums[2].as_mut_ptr(),
                    c3 = in(reg) sums[3].as_mut_ptr(),
                    options(nostack)
                );
                for (t, tile) in sums.iter().enumerate() {
                    let (half, second) = (t / 2, t % 2 == 1);
                    if second && b1 == b {
                        continue;
                    }
                    let n0 = if second { b1 } else { b } * BLOCK;
                    for (i, row) in tile.chunks_exact(BLOCK).enumerate() {
                        let rr = r + half * AMX_ROWS + i;
                        if rr >= rows.end {
                            break;
                        }
                        if n0 + BLOCK <= lin.out {
                            let s = _mm512_loadu_si512(row.as_ptr() as *const _);
                            finish512(lin, acts, rr, n0, s, y);
                        } else {
                            let row: &[i32; BLOCK] = row.try_into().expect("16 sums a row");
                            lin.finish(acts, rr, n0, row, y);
                        }
                    }
                }
                b += 2;
            }
            r += 2 * AMX_ROWS;
        }
    }

    /// The four activation bytes `a[r][4g..4g + 4]` as one 32-bit lane value.
    #[inline(always)]
    unsafe fn quad(acts: &Plane, r: usize, g: usize) -> i32 {
        std::ptr::read_unaligned(acts.q.as_ptr().add(r * acts.k4 + 4 * g) as *const i32)
    }

    /// AVX-512 VNNI: 6 rows × 64 channels a tile (24 sums, 4 weight registers).
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn vnni512(
        lin: &Int8Linear,
        acts: &Plane,
        rows: Range<usize>,
        blocks: Range<usize>,
        y: *mut f32,
    ) {
        macro_rules! tile {
            ($m:literal, $nb:literal, $r:ident, $b:ident) => {
                tile512::<$m, $nb>(lin, acts, $r, $b, y)
            };
        }
        crate::tiles::sweep!(rows, blocks, 6, 4, [1, 2, 3, 4, 5], tile);
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile512<const MR: usize, const NB: usize>(
        lin: &Int8Linear,
        acts: &Plane,
        r0: usize,
        b0: usize,
        y: *mut f32,
    ) {
        let mut acc = [[_mm512_setzero_si512(); NB]; MR];
        let stride = BLOCK * lin.k4;
        let w = lin.packed.as_ptr().add(b0 * stride);
        for g in 0..lin.k4 / 4 {
            let mut wv = [_mm512_setzero_si512(); NB];
            for (j, v) in wv.iter_mut().enumerate() {
                let p = w.add(j * stride + g * BLOCK * 4);
                // A panel (64 KB at k = 1,024) is more than L1 holds, so each row tile reads
                // it from L2 again; asking a kilobyte ahead gave ~7-10% at 2,048 x 5,248
                // (a prefetch past the end is harmless, hence `wrapping_add`).
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(16 * BLOCK * 4));
                *v = _mm512_loadu_si512(p as *const _);
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let a = _mm512_set1_epi32(quad(acts, r0 + i, g));
                for (s, &wj) in row.iter_mut().zip(&wv) {
                    *s = _mm512_dpbusd_epi32(*s, a, wj);
                }
            }
        }
        for (i, row) in acc.iter().enumerate() {
            for (j, s) in row.iter().enumerate() {
                let n0 = (b0 + j) * BLOCK;
                if n0 + BLOCK <= lin.out {
                    finish512(lin, acts, r0 + i, n0, *s, y);
                } else {
                    let mut sums = [0i32; BLOCK];
                    _mm512_storeu_si512(sums.as_mut_ptr() as *mut _, *s);
                    lin.finish(acts, r0 + i, n0, &sums, y);
                }
            }
        }
    }

    /// [`Int8Linear::finish`] for a whole block, on 16 lanes: the same operations in the same
    /// order, so the same bits.
    #[target_feature(enable = "avx512f")]
    unsafe fn finish512(
        lin: &Int8Linear,
        acts: &Plane,
        r: usize,
        n0: usize,
        s: __m512i,
        y: *mut f32,
    ) {
        let s = if acts.layout.shifted() {
            _mm512_sub_epi32(
                s,
                _mm512_loadu_si512(lin.shift.as_ptr().add(n0) as *const _),
            )
        } else {
            s
        };
        let scale = _mm512_mul_ps(
            _mm512_set1_ps(acts.scale[r]),
            _mm512_loadu_ps(lin.scale.as_ptr().add(n0)),
        );
        let v = _mm512_mul_ps(_mm512_cvtepi32_ps(s), scale);
        let at = y.add(r * lin.out + n0);
        let v = if acts.residual {
            _mm512_add_ps(_mm512_loadu_ps(at), v)
        } else {
            match &lin.bias {
                Some(b) => _mm512_add_ps(v, _mm512_loadu_ps(b.as_ptr().add(n0))),
                None => v,
            }
        };
        _mm512_storeu_ps(at, v);
    }

    /// AVX-VNNI: 6 rows × 32 channels a tile (two 256-bit halves a block; 12 sums).
    #[target_feature(enable = "avx2,avxvnni")]
    pub(super) unsafe fn vnni256(
        lin: &Int8Linear,
        acts: &Plane,
        rows: Range<usize>,
        blocks: Range<usize>,
        y: *mut f32,
    ) {
        macro_rules! tile {
            ($m:literal, $nb:literal, $r:ident, $b:ident) => {
                tile256::<$m, $nb>(lin, acts, $r, $b, y)
            };
        }
        crate::tiles::sweep!(rows, blocks, 6, 1, [1, 2, 3, 4, 5], tile);
    }

    #[target_feature(enable = "avx2,avxvnni")]
    unsafe fn tile256<const MR: usize, const NB: usize>(
        lin: &Int8Linear,
        acts: &Plane,
        r0: usize,
        b0: usize,
        y: *mut f32,
    ) {
        let mut acc = [[[_mm256_setzero_si256(); 2]; NB]; MR];
        let stride = BLOCK * lin.k4;
        let w = lin.packed.as_ptr().add(b0 * stride);
        for g in 0..lin.k4 / 4 {
            let mut wv = [[_mm256_setzero_si256(); 2]; NB];
            for (j, v) in wv.iter_mut().enumerate() {
                let p = w.add(j * stride + g * BLOCK * 4);
                v[0] = _mm256_loadu_si256(p as *const __m256i);
                v[1] = _mm256_loadu_si256(p.add(32) as *const __m256i);
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let a = _mm256_set1_epi32(quad(acts, r0 + i, g));
                for (s, wj) in row.iter_mut().zip(&wv) {
                    s[0] = _mm256_dpbusd_avx_epi32(s[0], a, wj[0]);
                    s[1] = _mm256_dpbusd_avx_epi32(s[1], a, wj[1]);
                }
            }
        }
        finish_halves(lin, acts, r0, b0, &acc, y);
    }

    /// AVX2: 4 rows × 32 channels a tile (16 sums spill little with 16 registers).
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn avx2(
        lin: &Int8Linear,
        acts: &Plane,
        rows: Range<usize>,
        blocks: Range<usize>,
        y: *mut f32,
    ) {
        macro_rules! tile {
            ($m:literal, $nb:literal, $r:ident, $b:ident) => {
                tile_avx2::<$m, $nb>(lin, acts, $r, $b, y)
            };
        }
        crate::tiles::sweep!(rows, blocks, 4, 1, [1, 2, 3], tile);
    }

    #[target_feature(enable = "avx2")]
    unsafe fn tile_avx2<const MR: usize, const NB: usize>(
        lin: &Int8Linear,
        acts: &Plane,
        r0: usize,
        b0: usize,
        y: *mut f32,
    ) {
        let mut acc = [[[_mm256_setzero_si256(); 2]; NB]; MR];
        let ones = _mm256_set1_epi16(1);
        let stride = BLOCK * lin.k4;
        let w = lin.packed.as_ptr().add(b0 * stride);
        for g in 0..lin.k4 / 4 {
            let mut wv = [[_mm256_setzero_si256(); 2]; NB];
            for (j, v) in wv.iter_mut().enumerate() {
                let p = w.add(j * stride + g * BLOCK * 4);
                v[0] = _mm256_loadu_si256(p as *const __m256i);
                v[1] = _mm256_loadu_si256(p.add(32) as *const __m256i);
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let a = _mm256_set1_epi32(quad(acts, r0 + i, g));
                let magnitude = _mm256_abs_epi8(a);
                for (s, wj) in row.iter_mut().zip(&wv) {
                    for h in 0..2 {
                        // |a| · (w · sign a) = a · w, pairs summed without saturating.
                        let pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(wj[h], a));
                        s[h] = _mm256_add_epi32(s[h], _mm256_madd_epi16(pairs, ones));
                    }
                }
            }
        }
        finish_halves(lin, acts, r0, b0, &acc, y);
    }

    /// Hands a 256-bit tile's sums (two halves a block) to [`Int8Linear::finish`].
    #[inline(always)]
    unsafe fn finish_halves<const MR: usize, const NB: usize>(
        lin: &Int8Linear,
        acts: &Plane,
        r0: usize,
        b0: usize,
        acc: &[[[__m256i; 2]; NB]; MR],
        y: *mut f32,
    ) {
        for (i, row) in acc.iter().enumerate() {
            for (j, s) in row.iter().enumerate() {
                let mut sums = [0i32; BLOCK];
                _mm256_storeu_si256(sums.as_mut_ptr() as *mut __m256i, s[0]);
                _mm256_storeu_si256(sums.as_mut_ptr().add(8) as *mut __m256i, s[1]);
                lin.finish(acts, r0 + i, (b0 + j) * BLOCK, &sums, y);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::quantize;
    #[cfg(target_arch = "x86_64")]
    use super::{quantize_rows_any, quantize_rows_avx512, Layout, AMX_ROWS};

    /// The AVX-512 build of the activations' quantization gives the portable build's bytes
    /// and scales, halves, zeros, NaN and infinities among the values.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn quantize_rows_avx512_matches_the_portable_build() {
        if !std::arch::is_x86_feature_detected!("avx512bw") {
            return;
        }
        let (rows, k, k4) = (37, 203, 204);
        let mut s = 0x2545_f491_u32;
        let mut x: Vec<f32> = (0..rows * k)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                match i % 97 {
                    0 => (i % 255) as f32 * 0.5 - 63.5,
                    1 => -0.0,
                    _ => (s as f32 / u32::MAX as f32 - 0.5) * 20.0,
                }
            })
            .collect();
        x[5 * k + 3] = f32::NAN;
        x[9 * k..10 * k].fill(0.0);
        x[11 * k + 7] = f32::INFINITY;
        for layout in [Layout::Rows, Layout::ShiftedRows, Layout::Tiles] {
            // Tiles hold whole 64-byte runs and whole 16-row tiles.
            let (k4, bytes) = match layout {
                Layout::Tiles => (256, rows.next_multiple_of(AMX_ROWS) * 256),
                _ => (k4, rows * k4),
            };
            let (mut qa, mut sa) = (vec![0u8; bytes], vec![0f32; rows]);
            let (mut qb, mut sb) = (vec![0u8; bytes], vec![0f32; rows]);
            quantize_rows_any(&x, k, &mut qa, k4, &mut sa, layout);
            // SAFETY: the CPU has AVX-512F and BW, checked above.
            unsafe { quantize_rows_avx512(&x, k, &mut qb, k4, &mut sb, layout) };
            assert_eq!(qa, qb, "bytes, {layout:?}");
            assert_eq!(
                sa.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                sb.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "scales, {layout:?}"
            );
        }
    }

    #[test]
    fn quantize_rounds_as_f32_round_does() {
        let reference = |v: f32, inv: f32| ((v * inv).round() as i32).clamp(-127, 127) as i8;
        let mut values = vec![
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            f32::MAX,
        ];
        for i in -300..=300 {
            let h = i as f32 * 0.5;
            values.extend([h, h.next_up(), h.next_down()]);
        }
        let mut s = 0x9e37_79b9_u32;
        for _ in 0..100_000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            values.push((s as f32 / u32::MAX as f32 - 0.5) * 300.0);
        }
        for &v in &values {
            for inv in [1.0, 0.5, 3.0, 127.0 / 128.0, 1e30] {
                assert_eq!(quantize(v, inv), reference(v, inv), "{v} * {inv}");
            }
        }
    }
}
