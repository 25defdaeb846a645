//! The linear layers: `y = x · Wᵀ (+ b)` through cuBLASLt, with the bias, the ReLU and the
//! residual add done in its epilogue instead of separate kernels.
//!
//! Activations are row-major `[tokens, features]` and weights PyTorch's `[out, in]`. In
//! cuBLASLt's column-major terms that is `Dᵀ (out × tokens) = W (out × in, stored transposed)
//! · Xᵀ`, the "TN" case its Hopper kernels are built for. A plan (descriptors and an
//! algorithm) is made once per shape and reused, also inside CUDA graphs.
//!
//! Batch invariance: a row's output must not depend on how many other rows share the GEMM,
//! so that requests can share forward passes without changing an answer. cuBLASLt's
//! heuristic picks another kernel for another token count, and split-K or stream-K kernels
//! reduce in an order that depends on it, so each layer shape ([`Family`]: the weight and the
//! kind) gets one algorithm for every token count: the heuristic's first pick without split-K
//! at [`Blas::reference_tokens`] that computes the same bits for a block of rows alone, at the
//! start of passes of several token counts and at the end of the largest (checked on the GPU
//! when the layer is first planned).
//!
//! That pick suits short passes, and costs long ones (its tiles are small for them). So a
//! family may take more algorithms, one for each of [`Blas::long_tokens`], used for passes
//! of at least half that many tokens: the heuristic's pick there, kept only if it gives, in
//! passes of those sizes, the very bits the first algorithm gives the same rows alone.
//! Kernels without split-K that use the same tensor-core instruction add up each output over
//! `k` in the same order whatever their tile sizes, so they can agree bit for bit; the check
//! decides.
//!
//! Short passes are the other end: the first algorithm's tiles leave most multiprocessors
//! idle when a pass has a few hundred rows, and the GEMMs then wait on the weights. So when a
//! pass of at most [`Blas::short_tokens`] tokens is first planned, the heuristic's candidates
//! for that very size are timed against the first algorithm with the weights out of the L2
//! cache, as a forward pass meets them, and the fastest is taken only if it gives, over every
//! row of a pass of that size, exactly the first algorithm's bits. Timing decides speed only:
//! whichever candidate wins, the answers are the same bits. Sizes are timed when first met
//! until [`Blas::end_short_timing`], which a server calls when its warm-up ends: a size first
//! met by traffic after that keeps the first algorithm rather than hold its request up.
//! A timed pass that reaches a long tier is timed against that tier's algorithm instead, and
//! a candidate must give its bits (the tier's algorithm was itself checked against the first
//! one's when it was chosen).
//!
//! On Hopper the short passes' candidates may include `gemm_wg` ([`crate::wgmma`]; by
//! default in passes of [`Blas::own_tokens`] tokens or more, [`Blas::own`]), a kernel of our
//! own whose blocks are small enough to cover the GPU with a few hundred rows. It adds up
//! each output as cuBLASLt's split-free Hopper kernels do, and gave their bits for every
//! layer of the three models on an H100; still, like theirs, its bits are taken only where
//! the check sees them equal to the first algorithm's. It can also do the step after a GEMM
//! in its epilogue ([`Then`]: GeGLU after `Wi`, RoPE after `Wqkv`), which a short pass takes
//! the same way: timed against the GEMM plus the step's own kernel, and only where it gives
//! their bits.

use std::collections::HashMap;
use std::ffi::c_void;

use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;

use crate::error::CudaError;
use crate::gpu::{self, DeviceBuf, Event};
use crate::wgmma::{Tile, WgKernels};

/// The workspace cuBLASLt may use; allocated once, so the GEMMs can be captured in graphs.
const WORKSPACE_BYTES: usize = 32 << 20;

fn blas(what: &'static str) -> impl FnOnce(lt::CublasError) -> CudaError {
    move |source| CudaError::Blas { what, source }
}

/// What one GEMM reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// f16 in, f16 out.
    Half,
    /// f16 in, f16 out, `+ b` (f16 bias).
    HalfBias,
    /// f16 in, f16 out, `relu(· + b)` (f16 bias).
    HalfReluBias,
    /// f16 in, `y += ·` on an f32 residual stream.
    Residual,
    /// f16 in, `y += · + b` on an f32 residual stream (f32 bias).
    ResidualBias,
}

impl Kind {
    fn out_type(self) -> sys::cudaDataType {
        match self {
            Kind::Half | Kind::HalfBias | Kind::HalfReluBias => sys::cudaDataType::CUDA_R_16F,
            _ => sys::cudaDataType::CUDA_R_32F,
        }
    }
    fn epilogue(self) -> sys::cublasLtEpilogue_t {
        match self {
            Kind::Half | Kind::Residual => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT,
            Kind::HalfReluBias => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU_BIAS,
            _ => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS,
        }
    }
    fn has_bias(self) -> bool {
        !matches!(self, Kind::Half | Kind::Residual)
    }
    fn beta(self) -> f32 {
        match self {
            Kind::Residual | Kind::ResidualBias => 1.0,
            _ => 0.0,
        }
    }
    /// `gemm_wg`'s `kind` argument (`kernels.cu`'s `WG_*`).
    pub(crate) fn code(self) -> i32 {
        match self {
            Kind::Half => 0,
            Kind::HalfBias => 1,
            Kind::HalfReluBias => 2,
            Kind::Residual => 3,
            Kind::ResidualBias => 4,
        }
    }
}

/// Element-wise work on a GEMM's f16 output that `gemm_wg` can do in its epilogue
/// ([`Blas::run_then`]), sparing a kernel and the output's round trip through memory. Either
/// way the bits are the same: the epilogue rounds each output to f16 as the GEMM would
/// write it and computes what the separate kernel computes (checked on the GPU before a
/// pass takes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// The MLP's GeGLU: `g[t, out / 2] = GELU(y[:, :out / 2]) ⊙ y[:, out / 2..]` (f16), which
    /// `kernel` (`kernels.cu`'s `geglu`) computes on its own.
    GeGlu {
        g: u64,
        kernel: cudarc::driver::sys::CUfunction,
    },
    /// RoPE in place on the query and key thirds of the fused `Wqkv` output (64-wide heads),
    /// each token at its position `pos[t]` (i32) in the layer's tables `cos` and `sin`
    /// (`[positions][32]` f32), which `kernel` (`kernels.cu`'s `rope_qk`) computes on its own.
    Rope {
        pos: u64,
        cos: u64,
        sin: u64,
        positions: usize,
        kernel: cudarc::driver::sys::CUfunction,
    },
}

/// Which [`Then`], whatever its operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Step {
    GeGlu,
    Rope,
}

/// RoPE's head width (`kernels.cu`'s `HD`).
pub const HEAD_DIM: usize = 64;

impl Then {
    fn step(&self) -> Step {
        match self {
            Then::GeGlu { .. } => Step::GeGlu,
            Then::Rope { .. } => Step::Rope,
        }
    }

    /// Queues this step as its own kernel on the output of `gemm`, once that has run.
    pub fn launch(
        &self,
        gemm: &Gemm,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<(), CudaError> {
        match *self {
            Then::GeGlu { g, kernel } => {
                let inter = gemm.out / 2;
                // Each thread takes 8 columns of a token, one to a few blocks a token: the
                // token comes from the grid, not from a 64-bit division of a flat index.
                let threads = (inter / 8).div_ceil(32) * 32;
                gpu::Args::new()
                    .ptr(gemm.y)
                    .ptr(g)
                    .i32(gemm.tokens as i32)
                    .i32(inter as i32)
                    .launch(
                        kernel,
                        (gemm.tokens as u32, threads.div_ceil(1024) as u32, 1),
                        threads.min(1024) as u32,
                        0,
                        stream,
                    )
            }
            Then::Rope {
                pos,
                cos,
                sin,
                kernel,
                ..
            } => {
                let d = gemm.out / 3;
                let heads = d / HEAD_DIM;
                // One thread a (token, head, q or k, 8 of the head's first 32 dims).
                let threads = gemm.tokens * heads * 8;
                gpu::Args::new()
                    .ptr(gemm.y)
                    .i32(gemm.out as i32)
                    .i32(d as i32)
                    .ptr(pos)
                    .ptr(cos)
                    .ptr(sin)
                    .i32(gemm.tokens as i32)
                    .i32(heads as i32)
                    .launch(
                        kernel,
                        (threads.div_ceil(256).max(1) as u32, 1, 1),
                        256,
                        0,
                        stream,
                    )
            }
        }
    }

    /// The same step writing a result of its own (GeGLU's) to `to`; RoPE works in place.
    fn to(mut self, to: u64) -> Then {
        if let Then::GeGlu { g, .. } = &mut self {
            *g = to;
        }
        self
    }

    /// The same step with RoPE's positions read from `at`.
    fn at_positions(mut self, at: u64) -> Then {
        if let Then::Rope { pos, .. } = &mut self {
            *pos = at;
        }
        self
    }

    /// Bytes of the result it writes apart from the GEMM's output, for `gemm`'s rows.
    fn separate_out_bytes(&self, gemm: &Gemm) -> usize {
        match self {
            Then::GeGlu { .. } => gemm.tokens * gemm.out / 2 * 2,
            Then::Rope { .. } => 0,
        }
    }
}

/// What runs one GEMM: a cuBLASLt algorithm, or `gemm_wg` in one of its forms.
#[derive(Clone, Copy)]
enum Algo {
    Lt(sys::cublasLtMatmulAlgo_t),
    Own(Tile),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Shape {
    tokens: usize,
    out: usize,
    inp: usize,
    kind: Kind,
}

impl Shape {
    fn family(&self) -> Family {
        Family {
            out: self.out,
            inp: self.inp,
            kind: self.kind,
        }
    }
}

/// A layer's GEMM whatever its token count: one algorithm serves all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Family {
    out: usize,
    inp: usize,
    kind: Kind,
}

/// A family's algorithm, and whether it was seen to be batch-invariant.
#[derive(Clone, Copy)]
struct Choice {
    algo: sys::cublasLtMatmulAlgo_t,
    /// `(from, algorithm)`, `from` ascending: for passes of at least `from` tokens, an
    /// algorithm seen to give `algo`'s bits there ([`Blas::long_tokens`]).
    long: [Option<(usize, sys::cublasLtMatmulAlgo_t)>; LONG_TIERS],
    invariant: bool,
}

/// The invariance check: a block of [`PROBE_SMALL`] rows alone must give the bits it gives at
/// the start of every one of [`PROBE_COUNTS`] rows, and the last block of the largest count the
/// bits it gives alone. Counts of one, a few and many tiles, in both directions.
const PROBE_SMALL: usize = 64;
const PROBE_COUNTS: [usize; 5] = [192, 640, 1984, 4160, PROBE_LARGE];
const PROBE_LARGE: usize = 8256;

struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    d: sys::cublasLtMatrixLayout_t,
    algo: sys::cublasLtMatmulAlgo_t,
    /// `gemm_wg`'s form when it runs this shape instead of `algo` (which it matched), as
    /// long as the operands suit it.
    own: Option<Tile>,
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: created by `Blas::plan`, used by nothing after the engine is gone.
        unsafe {
            let _ = lt::destroy_matrix_layout(self.a);
            let _ = lt::destroy_matrix_layout(self.b);
            let _ = lt::destroy_matrix_layout(self.d);
            let _ = lt::destroy_matmul_desc(self.desc);
        }
    }
}

/// Heuristic candidates considered per family.
const CANDIDATES: usize = 16;
/// Of those, the ones tried as a family's algorithm for long passes.
const LONG_CANDIDATES: usize = 4;
/// At most this many of [`Blas::long_tokens`] are used.
pub const LONG_TIERS: usize = 4;

/// Timed runs of each candidate for a short pass (the median counts).
const SHORT_REPS: usize = 3;
/// Of the heuristic's candidates for a short pass, the first this many are timed.
const SHORT_CANDIDATES: usize = 8;
/// A short pass's candidate replaces the first algorithm only when this much faster, so that
/// timing noise does not swap equals.
const SHORT_MARGIN: f32 = 0.95;
/// Written before each timed run so that the weights come from memory, not the L2 cache
/// (50 MB on the H100 and H200).
const FLUSH_BYTES: usize = 64 << 20;

/// What the GEMMs chose so far (`CudaEngine::gemm_algorithms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choices {
    /// GEMM layer shapes planned.
    pub families: usize,
    /// The algorithms for long passes they took, all told.
    pub long_pass: usize,
    /// Short pass sizes planned with a faster algorithm of the same bits.
    pub short_pass: usize,
    /// Of those, the ones that took `gemm_wg`.
    pub own: usize,
    /// Short pass sizes and steps ([`Then`]) that run in one `gemm_wg` kernel with their GEMM
    /// (a size may count twice: GeGLU after `Wi`, RoPE after `Wqkv`).
    pub fused: usize,
}

/// A cuBLASLt handle, its workspace and the plans made so far.
pub struct Blas {
    handle: sys::cublasLtHandle_t,
    workspace: DeviceBuf,
    plans: HashMap<Shape, Plan>,
    families: HashMap<Family, Choice>,
    /// Each family's operands for checking its short passes' candidates
    /// ([`Blas::short_tokens`] rows).
    short_probes: HashMap<Family, Probe>,
    /// Passes planned with a timed algorithm (faster than their family's first algorithm or
    /// their long tier's, with the same bits).
    short_plans: usize,
    /// Of those, the ones that took `gemm_wg`.
    short_own: usize,
    /// Per pass shape and step after its GEMM, `gemm_wg`'s form when the two run as one
    /// kernel ([`Blas::run_then`]), or `None` where they run apart.
    fused: HashMap<(Shape, Step), Option<Tile>>,
    /// `gemm_wg`, where the engine loaded it (Hopper): then a short pass's timed candidates
    /// include it.
    pub own: Option<WgKernels>,
    /// Passes of fewer tokens leave `gemm_wg` out of their candidates.
    pub own_tokens: usize,
    /// Per family, whether `gemm_wg` gave its first algorithm's bits ([`Blas::own_bits`]).
    own_same_bits: HashMap<Family, bool>,
    /// [`FLUSH_BYTES`] the short passes' timing writes to push the weights out of the L2
    /// cache, and the timed GEMMs' output (grown as needed); both freed when timing ends.
    short_flush: Option<DeviceBuf>,
    short_out: Option<DeviceBuf>,
    /// Take `gemm_wg` with the next step fused wherever it gives the same bits, timed faster
    /// or not ([`crate::engine::Fuse::untimed`]).
    pub fuse_untimed: bool,
    /// Time the batch-invariant candidates when planning (off: the first of them).
    pub tune: bool,
    /// The token count the heuristic is asked about when a family's algorithm is chosen: the
    /// pass size whose kernels every pass then uses.
    pub reference_tokens: usize,
    /// Token counts, ascending, the heuristic is asked about for a family's algorithms for
    /// long passes: each is used for passes of at least half as many tokens, when it gives
    /// the first algorithm's bits. Empty: one algorithm for every pass.
    pub long_tokens: Vec<usize>,
    /// Passes of at most this many tokens take, for each size, the fastest heuristic
    /// candidate that gives the first algorithm's bits there (0: none do).
    pub short_tokens: usize,
    /// Whether a short pass planned now may be timed ([`Blas::end_short_timing`]).
    short_timing: bool,
    /// Set while a CUDA graph is being captured: nothing may run or synchronise then, so a
    /// family first planned during capture takes the heuristic's pick unverified.
    pub capturing: bool,
}

impl std::fmt::Debug for Blas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blas")
            .field("plans", &self.plans.len())
            .finish()
    }
}

/// One GEMM's operands: `d[tokens, out] (op)= x[tokens, inp] · w[out, inp]ᵀ (+ bias)`.
#[derive(Debug, Clone, Copy)]
pub struct Gemm {
    pub kind: Kind,
    pub tokens: usize,
    pub out: usize,
    pub inp: usize,
    /// Activations, row-major `[tokens, inp]`.
    pub x: u64,
    /// Weight, row-major `[out, inp]`.
    pub w: u64,
    /// Bias `[out]`, or 0.
    pub bias: u64,
    /// Output (and, for the residual kinds, the stream added to), row-major `[tokens, out]`.
    pub y: u64,
}

impl Blas {
    pub fn new() -> Result<Blas, CudaError> {
        let handle = lt::create_handle().map_err(blas("cublasLtCreate"))?;
        Ok(Blas {
            handle,
            workspace: DeviceBuf::alloc(WORKSPACE_BYTES)?,
            plans: HashMap::new(),
            families: HashMap::new(),
            short_probes: HashMap::new(),
            short_plans: 0,
            short_own: 0,
            fused: HashMap::new(),
            fuse_untimed: false,
            own: None,
            own_tokens: 0,
            own_same_bits: HashMap::new(),
            short_flush: None,
            short_out: None,
            tune: false,
            reference_tokens: 512,
            long_tokens: vec![2048],
            short_tokens: 0,
            short_timing: true,
            capturing: false,
        })
    }

    /// `(from, tokens)` of each tier of [`Blas::long_tokens`]: the smallest pass that takes
    /// the algorithm picked at `tokens`.
    fn long_tiers(&self) -> Vec<(usize, usize)> {
        let mut tiers = Vec::new();
        let mut floor = self.reference_tokens + 1;
        let mut tokens = self.long_tokens.clone();
        tokens.sort_unstable();
        tokens.dedup();
        for t in tokens {
            let from = (t / 2).max(floor);
            if t > self.reference_tokens && tiers.len() < LONG_TIERS {
                tiers.push((from, t));
                floor = from + 1;
            }
        }
        tiers
    }

    /// Short passes first met from now on keep their family's first algorithm; the memory
    /// used for timing is freed.
    pub fn end_short_timing(&mut self) {
        self.short_timing = false;
        self.short_probes.clear();
        self.short_flush = None;
        self.short_out = None;
    }

    /// What was chosen so far.
    pub fn choices(&self) -> Choices {
        Choices {
            families: self.families.len(),
            long_pass: self
                .families
                .values()
                .map(|c| c.long.iter().flatten().count())
                .sum(),
            short_pass: self.short_plans,
            own: self.short_own,
            fused: self.fused.values().flatten().count(),
        }
    }

    /// Whether every GEMM planned so far computes each row independently of its batch mates
    /// (false before anything is planned).
    pub fn batch_invariant(&self) -> bool {
        !self.families.is_empty() && self.families.values().all(|c| c.invariant)
    }

    fn plan(
        &mut self,
        s: Shape,
        g: &Gemm,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<&Plan, CudaError> {
        if !self.plans.contains_key(&s) {
            let family = s.family();
            if !self.families.contains_key(&family) {
                let choice = self.choose(family, g, stream)?;
                self.families.insert(family, choice);
            }
            let mut plan = self.layouts(s)?;
            let choice = *self
                .families
                .get(&family)
                .ok_or_else(|| CudaError::Unavailable("GEMM family vanished".into()))?;
            // The longest tier this pass reaches whose algorithm runs at its size.
            let long = choice
                .long
                .iter()
                .flatten()
                .rev()
                .find(|(from, a)| s.tokens >= *from && self.check(&plan, a))
                .map(|&(_, a)| a);
            let base = long.or_else(|| self.check(&plan, &choice.algo).then_some(choice.algo));
            if let Some(base) = base {
                plan.algo = base;
                let timed = self.short_timing && !self.capturing;
                if choice.invariant && s.tokens <= self.short_tokens && timed {
                    match self.choose_short(s, &plan, &base, g, stream) {
                        Ok(Some(Algo::Lt(algo))) => {
                            plan.algo = algo;
                            self.short_plans += 1;
                        }
                        Ok(Some(Algo::Own(tile))) => {
                            plan.own = Some(tile);
                            self.short_plans += 1;
                            self.short_own += 1;
                        }
                        Ok(None) => {}
                        // Only speed is at stake: the untimed algorithm serves this size.
                        Err(e) => tracing::warn!(?s, error = %e,
                            "timing GEMM kernels for a pass failed; it keeps its untimed algorithm"),
                    }
                }
            } else {
                // Another kernel for this token count: correct, but no longer invariant.
                tracing::warn!(?s, "the family's GEMM algorithm does not run at this token count; requests stop sharing passes");
                if let Some(c) = self.families.get_mut(&family) {
                    c.invariant = false;
                }
                plan.algo = *self
                    .heuristic(&plan, false)?
                    .first()
                    .ok_or(CudaError::Blas {
                        what: "cublasLtMatmulAlgoGetHeuristic",
                        source: lt::CublasError(sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED),
                    })?;
            }
            tracing::trace!(?s, "GEMM planned");
            self.plans.insert(s, plan);
        }
        self.plans
            .get(&s)
            .ok_or_else(|| CudaError::Unavailable("GEMM plan vanished".into()))
    }

    /// The descriptors of shape `s` (its algorithm still unset).
    fn layouts(&self, s: Shape) -> Result<Plan, CudaError> {
        let desc = lt::create_matmul_desc(
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cudaDataType::CUDA_R_32F,
        )
        .map_err(blas("cublasLtMatmulDescCreate"))?;
        // From here on `plan` owns what exists, so an early return frees it.
        let mut plan = Plan {
            desc,
            a: std::ptr::null_mut(),
            b: std::ptr::null_mut(),
            d: std::ptr::null_mut(),
            // SAFETY: plain data, overwritten before any use.
            algo: unsafe { std::mem::zeroed() },
            own: None,
        };
        let set = |attr: sys::cublasLtMatmulDescAttributes_t, v: *const c_void, n: usize| {
            // SAFETY: `v` points at a value of the attribute's type, `n` bytes.
            unsafe { lt::set_matmul_desc_attribute(desc, attr, v, n) }
                .map_err(blas("cublasLtMatmulDescSetAttribute"))
        };
        // cublasOperation_t (cuBLAS's header, not cuBLASLt's): CUBLAS_OP_N = 0, CUBLAS_OP_T = 1.
        let trans: i32 = 1;
        let no_trans: i32 = 0;
        set(
            sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
            &trans as *const _ as *const c_void,
            std::mem::size_of_val(&trans),
        )?;
        set(
            sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
            &no_trans as *const _ as *const c_void,
            std::mem::size_of_val(&no_trans),
        )?;
        let epi = s.kind.epilogue();
        set(
            sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_EPILOGUE,
            &epi as *const _ as *const c_void,
            std::mem::size_of_val(&epi),
        )?;
        if s.kind.has_bias() {
            // The bias has the output's type; said explicitly rather than left to defaults.
            let bt = s.kind.out_type();
            set(
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                &bt as *const _ as *const c_void,
                std::mem::size_of_val(&bt),
            )?;
        }
        let (tin, tout) = (sys::cudaDataType::CUDA_R_16F, s.kind.out_type());
        plan.a = lt::create_matrix_layout(tin, s.inp as u64, s.out as u64, s.inp as i64)
            .map_err(blas("cublasLtMatrixLayoutCreate"))?;
        plan.b = lt::create_matrix_layout(tin, s.inp as u64, s.tokens as u64, s.inp as i64)
            .map_err(blas("cublasLtMatrixLayoutCreate"))?;
        plan.d = lt::create_matrix_layout(tout, s.out as u64, s.tokens as u64, s.out as i64)
            .map_err(blas("cublasLtMatrixLayoutCreate"))?;
        Ok(plan)
    }

    /// The heuristic's candidates for `plan`, best first; with `no_split_k` only those without
    /// a split-K reduction.
    fn heuristic(
        &self,
        plan: &Plan,
        no_split_k: bool,
    ) -> Result<Vec<sys::cublasLtMatmulAlgo_t>, CudaError> {
        let pref = lt::create_matmul_pref().map_err(blas("cublasLtMatmulPreferenceCreate"))?;
        let ws = WORKSPACE_BYTES;
        // Only CUBLASLT_REDUCTION_SCHEME_NONE: no split-K, whose reduction depends on the shape.
        let no_reduction: u32 = 0;
        // SAFETY: zeroed results are plain data the call overwrites.
        let mut results: Vec<sys::cublasLtMatmulHeuristicResult_t> =
            vec![unsafe { std::mem::zeroed() }; CANDIDATES];
        let mut found = 0i32;
        // SAFETY: each attribute value has the attribute's type; `results` holds CANDIDATES
        // entries; `pref` is destroyed below.
        let status = unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const usize as *const c_void,
                std::mem::size_of::<usize>(),
            )
            .and_then(|_| {
                if !no_split_k {
                    return Ok(());
                }
                lt::set_matmul_pref_attribute(
                    pref,
                    sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                    &no_reduction as *const u32 as *const c_void,
                    std::mem::size_of::<u32>(),
                )
            })
            .and_then(|_| {
                sys::cublasLtMatmulAlgoGetHeuristic(
                    self.handle,
                    plan.desc,
                    plan.a,
                    plan.b,
                    plan.d,
                    plan.d,
                    pref,
                    CANDIDATES as i32,
                    results.as_mut_ptr(),
                    &mut found,
                )
                .result()
            })
        };
        // SAFETY: created above.
        unsafe {
            let _ = lt::destroy_matmul_pref(pref);
        }
        status.map_err(blas("cublasLtMatmulAlgoGetHeuristic"))?;
        Ok(results
            .iter()
            .take(found.max(0) as usize)
            .filter(|r| r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
            .map(|r| r.algo)
            .filter(|a| !no_split_k || split_k(a) <= 1)
            .collect())
    }

    /// Whether cuBLASLt runs `algo` for `plan`'s shape within the workspace.
    fn check(&self, plan: &Plan, algo: &sys::cublasLtMatmulAlgo_t) -> bool {
        // SAFETY: plain data the call overwrites.
        let mut result: sys::cublasLtMatmulHeuristicResult_t = unsafe { std::mem::zeroed() };
        // SAFETY: live descriptors of one shape; `result` is written by the call.
        let status = unsafe {
            sys::cublasLtMatmulAlgoCheck(
                self.handle,
                plan.desc,
                plan.a,
                plan.b,
                plan.d,
                plan.d,
                algo,
                &mut result,
            )
        };
        status == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS
            && result.workspaceSize <= WORKSPACE_BYTES
    }

    /// `family`'s algorithm: the first (or with `tune` the fastest) heuristic candidate at
    /// the reference token count that runs at the probe sizes and gives a block of rows the
    /// same bits alone, first among many and last among many. While a graph is captured
    /// nothing can run, so the heuristic's first pick is taken unverified.
    fn choose(
        &self,
        family: Family,
        g: &Gemm,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<Choice, CudaError> {
        let shape = |tokens| Shape {
            tokens,
            out: family.out,
            inp: family.inp,
            kind: family.kind,
        };
        let reference = self.layouts(shape(self.reference_tokens.max(1)))?;
        let mut candidates = self.heuristic(&reference, true)?;
        if candidates.is_empty() {
            // None without split-K offered: the probe judges the unrestricted ones.
            candidates = self.heuristic(&reference, false)?;
        }
        let unsupported = || CudaError::Blas {
            what: "cublasLtMatmulAlgoGetHeuristic",
            source: lt::CublasError(sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED),
        };
        let first = *candidates.first().ok_or_else(unsupported)?;
        if self.capturing {
            tracing::warn!(
                ?family,
                "GEMM family first planned inside a graph capture: not verified batch-invariant"
            );
            return Ok(Choice {
                algo: first,
                long: [None; LONG_TIERS],
                invariant: false,
            });
        }
        let small = self.layouts(shape(PROBE_SMALL))?;
        let counts = PROBE_COUNTS
            .iter()
            .map(|&n| Ok((n, self.layouts(shape(n))?)))
            .collect::<Result<Vec<(usize, Plan)>, CudaError>>()?;
        let probe = Probe::new(family, g, PROBE_LARGE)?;
        let mut invariant = Vec::new();
        for algo in &candidates {
            let runs = self.check(&small, algo)
                && self.check(&reference, algo)
                && counts.iter().all(|(_, p)| self.check(p, algo));
            if !runs {
                continue;
            }
            if probe.same_bits(self, algo, algo, &small, &counts, stream)? {
                invariant.push(*algo);
                if !self.tune {
                    break;
                }
            }
        }
        let Some(&best) = invariant.first() else {
            tracing::warn!(
                ?family,
                candidates = candidates.len(),
                "no batch-invariant GEMM algorithm; requests will not share passes"
            );
            return Ok(Choice {
                algo: first,
                long: [None; LONG_TIERS],
                invariant: false,
            });
        };
        let algo = if self.tune && invariant.len() > 1 {
            let g = Gemm {
                tokens: self.reference_tokens.clamp(1, PROBE_LARGE),
                x: probe.x.ptr(),
                ..*g
            };
            let timed = self.layouts(shape(g.tokens))?;
            self.fastest(&timed, &invariant, &g, stream)?
        } else {
            best
        };
        let mut long = [None; LONG_TIERS];
        let mut used = vec![algo];
        for (slot, (from, tokens)) in long.iter_mut().zip(self.long_tiers()) {
            let tier = Tier { from, tokens };
            *slot = self
                .choose_long(family, tier, &used, &small, &counts, &probe, stream)?
                .map(|a| (from, a));
            if let Some((_, a)) = slot {
                used.push(*a);
            }
        }
        tracing::debug!(?family, long = ?long.map(|t| t.map(|(from, _)| from)), "GEMM family planned");
        Ok(Choice {
            algo,
            long,
            invariant: true,
        })
    }

    /// `family`'s algorithm for passes of at least `tier.from` tokens: the first of the
    /// heuristic's top candidates at `tier.tokens`, ranked above every algorithm in `used`
    /// (the first one, then the shorter tiers'), that runs at the probe sizes from
    /// `tier.from` up and gives, in those passes, the bits `used[0]` gives the probe's
    /// blocks of rows alone; `None` if none does.
    #[allow(clippy::too_many_arguments)]
    fn choose_long(
        &self,
        family: Family,
        tier: Tier,
        used: &[sys::cublasLtMatmulAlgo_t],
        small: &Plan,
        counts: &[(usize, Plan)],
        probe: &Probe,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<Option<sys::cublasLtMatmulAlgo_t>, CudaError> {
        let algo = &used[0];
        let long: Vec<&(usize, Plan)> = counts.iter().filter(|(n, _)| *n >= tier.from).collect();
        if long.is_empty() {
            return Ok(None);
        }
        let reference = self.layouts(Shape {
            tokens: tier.tokens,
            out: family.out,
            inp: family.inp,
            kind: family.kind,
        })?;
        // Only candidates the heuristic ranks above what shorter passes already use.
        for candidate in self
            .heuristic(&reference, true)?
            .into_iter()
            .take(LONG_CANDIDATES)
        {
            if used.iter().any(|u| u.data == candidate.data) {
                return Ok(None);
            }
            if !self.check(&reference, &candidate)
                || !long.iter().all(|(_, p)| self.check(p, &candidate))
            {
                continue;
            }
            let long: Vec<(usize, &Plan)> = long.iter().map(|(n, p)| (*n, p)).collect();
            if probe.same_bits(self, algo, &candidate, small, &long, stream)? {
                return Ok(Some(candidate));
            }
        }
        Ok(None)
    }

    /// Times each candidate on `g`'s operands, writing into scratch memory (the real output,
    /// which the residual kinds accumulate into, is left alone), and returns the fastest.
    fn fastest(
        &self,
        plan: &Plan,
        candidates: &[sys::cublasLtMatmulAlgo_t],
        g: &Gemm,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<sys::cublasLtMatmulAlgo_t, CudaError> {
        let elem = if g.kind.out_type() == sys::cudaDataType::CUDA_R_16F {
            2
        } else {
            4
        };
        let scratch = DeviceBuf::alloc(g.tokens * g.out * elem)?;
        let probe = Gemm {
            y: scratch.ptr(),
            ..*g
        };
        let (start, end) = (Event::new()?, Event::new()?);
        let mut best: Option<(f32, sys::cublasLtMatmulAlgo_t)> = None;
        for algo in candidates {
            let once = || self.launch(plan, algo, &probe, stream);
            // A candidate cuBLASLt refuses for these operands is skipped.
            if once().and_then(|_| once()).is_err() {
                continue;
            }
            start.record(stream)?;
            let mut ok = true;
            for _ in 0..5 {
                ok &= once().is_ok();
            }
            end.record(stream)?;
            gpu::sync_stream(stream)?;
            let ms = start.elapsed_ms(&end)?;
            if ok && best.is_none_or(|(b, _)| ms < b) {
                best = Some((ms, *algo));
            }
        }
        Ok(best.map_or(candidates[0], |(_, a)| a))
    }

    /// A faster algorithm than `base` (the family's first algorithm, or the long tier's that
    /// the pass reaches) for the pass `s`, of the same bits: the heuristic's candidates at
    /// `s.tokens` without split-K and `gemm_wg`'s forms, timed against `base` with the
    /// weights out of the L2 cache, the fastest tried first, each taken only if all of its
    /// output rows equal `base`'s on the family's probe; `None` if none is faster by
    /// [`SHORT_MARGIN`] and agrees.
    fn choose_short(
        &mut self,
        s: Shape,
        plan: &Plan,
        base: &sys::cublasLtMatmulAlgo_t,
        g: &Gemm,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<Option<Algo>, CudaError> {
        let family = s.family();
        let mut candidates: Vec<Algo> = self
            .heuristic(plan, true)?
            .into_iter()
            .filter(|a| a.data != base.data && self.check(plan, a))
            .take(SHORT_CANDIDATES)
            .map(Algo::Lt)
            .collect();
        let tiles: Vec<Tile> = Tile::ALL
            .into_iter()
            .filter(|&t| self.own_for(s) && WgKernels::fits(t, g))
            .collect();
        if candidates.is_empty() && tiles.is_empty() {
            return Ok(None);
        }
        if !self.short_probes.contains_key(&family) {
            let probe = Probe::new(family, g, self.short_tokens.max(s.tokens))?;
            self.short_probes.insert(family, probe);
        }
        if !tiles.is_empty() && self.own_bits(s, plan, base, &tiles, stream)? {
            candidates.extend(tiles.into_iter().map(Algo::Own));
        }
        if candidates.is_empty() {
            return Ok(None);
        }
        self.ensure_scratch(s)?;
        let probe = self.probe(family)?;
        let mut all = vec![Algo::Lt(*base)];
        all.extend(&candidates);
        let timed = Gemm {
            x: probe.x.ptr(),
            ..*g
        };
        let times = self.time_cold(plan, &all, &timed, stream)?;
        let Some((&base_us, rest)) = times.split_first() else {
            return Ok(None);
        };
        let own_us: Vec<(Tile, f32)> = candidates
            .iter()
            .zip(rest)
            .filter_map(|(a, &us)| match a {
                Algo::Own(t) => Some((*t, us)),
                Algo::Lt(_) => None,
            })
            .collect();
        tracing::debug!(?s, base_us, ?own_us, "short pass timed");
        // (µs, the rank among the candidates, algorithm), fastest first.
        let mut order: Vec<(f32, usize, Algo)> = rest
            .iter()
            .copied()
            .zip(candidates)
            .enumerate()
            .map(|(rank, (us, algo))| (us, rank, algo))
            .filter(|(us, _, _)| *us < base_us * SHORT_MARGIN)
            .collect();
        order.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (us, rank, algo) in order {
            let found = probe.differences(self, base, &algo, plan, s.tokens, stream)?;
            if found.is_some_and(|(differing, _)| differing == 0) {
                tracing::debug!(
                    ?s,
                    base_us,
                    us,
                    rank,
                    own = ?match algo {
                        Algo::Own(tile) => Some(tile),
                        Algo::Lt(_) => None,
                    },
                    "short pass: a faster GEMM algorithm of the same bits"
                );
                return Ok(Some(algo));
            }
        }
        Ok(None)
    }

    /// Whether `gemm_wg` is among the pass `s`'s timed candidates.
    fn own_for(&self, s: Shape) -> bool {
        self.own.is_some() && s.tokens >= self.own_tokens
    }

    /// The family's probe, made by [`Blas::choose_short`] when its first short pass was timed.
    fn probe(&self, family: Family) -> Result<&Probe, CudaError> {
        self.short_probes
            .get(&family)
            .ok_or_else(|| CudaError::Unavailable("GEMM probe vanished".into()))
    }

    /// What runs `g` as `plan` has it: `gemm_wg` where the plan took it and the operands suit
    /// it, else the algorithm whose bits it gives.
    fn algo(&self, plan: &Plan, g: &Gemm) -> Algo {
        match plan.own {
            Some(tile) if self.own.is_some() && WgKernels::fits(tile, g) => Algo::Own(tile),
            _ => Algo::Lt(plan.algo),
        }
    }

    /// Allocates what timing a pass of shape `s` needs: the cache flush, and scratch output
    /// of `s`'s size in f32 (the wider of the outputs; an f16 output and what the step after
    /// it writes fit too).
    fn ensure_scratch(&mut self, s: Shape) -> Result<(), CudaError> {
        if self.short_flush.is_none() {
            self.short_flush = Some(DeviceBuf::alloc(FLUSH_BYTES)?);
        }
        let out_bytes = s.tokens * s.out * 4;
        if self
            .short_out
            .as_ref()
            .is_none_or(|b| b.bytes() < out_bytes)
        {
            // Freed before the larger one is allocated, so the two are never held together.
            self.short_out = None;
            self.short_out = Some(DeviceBuf::alloc(out_bytes)?);
        }
        Ok(())
    }

    /// `gemm_wg`'s form to run the planned pass `s` and `then` as one kernel, chosen when
    /// the pair is first met at this size: like the short passes' timed candidates, only
    /// while timing is allowed and for families of one algorithm at every size.
    fn fused(
        &mut self,
        s: Shape,
        g: &Gemm,
        then: &Then,
        stream: cudarc::driver::sys::CUstream,
    ) -> Option<Tile> {
        let key = (s, then.step());
        if let Some(&tile) = self.fused.get(&key) {
            return tile.filter(|&t| WgKernels::fits_then(t, g, then));
        }
        if self.capturing {
            // Nothing may run now; the pass was planned eagerly before its capture.
            return None;
        }
        let invariant = self.families.get(&s.family()).is_some_and(|c| c.invariant);
        let timed = self.short_timing && s.tokens <= self.short_tokens;
        let tile = if invariant && timed && self.own_for(s) {
            // Taken out for the call, which borrows the plan beside `self`.
            let plan = self.plans.remove(&s)?;
            let chosen = self.choose_fused(s, &plan, then, g, stream);
            self.plans.insert(s, plan);
            chosen.unwrap_or_else(|e| {
                tracing::warn!(?s, error = %e,
                    "timing gemm_wg with the next step fused failed; the pass runs them apart");
                None
            })
        } else {
            None
        };
        self.fused.insert(key, tile);
        tile
    }

    /// `gemm_wg`'s form to run the pass `s` and `then` as one kernel: the fastest of the
    /// forms faster by [`SHORT_MARGIN`] than the GEMM as `plan` now runs it followed by
    /// `then`'s own kernel, all timed with the weights out of the L2 cache, that gives the
    /// same bits over every row of a pass of that size on the family's probe. Only for
    /// families whose plain `gemm_wg` sums were seen to be cuBLASLt's ([`Blas::own_bits`]).
    fn choose_fused(
        &mut self,
        s: Shape,
        plan: &Plan,
        then: &Then,
        g: &Gemm,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<Option<Tile>, CudaError> {
        let family = s.family();
        let Some(own) = self.own else {
            return Ok(None);
        };
        let tiles: Vec<Tile> = Tile::ALL
            .into_iter()
            .filter(|&t| WgKernels::fits_then(t, g, then))
            .collect();
        if tiles.is_empty() || self.own_same_bits.get(&family) != Some(&true) {
            return Ok(None);
        }
        self.ensure_scratch(s)?;
        let probe = self.probe(family)?;
        // What the pass runs otherwise.
        let apart = self.algo(plan, g);
        let scratch = self.scratch()?;
        let timed = Gemm {
            x: probe.x.ptr(),
            y: scratch.ptr(),
            ..*g
        };
        let after = then.to(scratch.at(s.tokens * s.out * 2));
        // The forms to check, fastest first: untimed (tests), the widest first.
        let order: Vec<Tile> = if self.fuse_untimed {
            tiles.into_iter().rev().collect()
        } else {
            type Run<'a> = Box<dyn Fn() -> Result<(), CudaError> + 'a>;
            let mut runs: Vec<Run> = vec![Box::new(|| {
                self.launch_any(plan, &apart, &timed, stream)?;
                after.launch(&timed, stream)
            })];
            for &tile in &tiles {
                runs.push(Box::new(move || {
                    own.launch_then(tile, &timed, &after, stream)
                }));
            }
            let times = self.time_runs(&runs, stream)?;
            let Some((&apart_us, fused_us)) = times.split_first() else {
                return Ok(None);
            };
            let fused: Vec<(Tile, f32)> = tiles
                .iter()
                .copied()
                .zip(fused_us.iter().copied())
                .collect();
            tracing::debug!(
                ?s,
                apart_us,
                ?fused,
                "short pass: GEMM and the next step timed apart and fused"
            );
            let mut faster: Vec<(Tile, f32)> = fused
                .into_iter()
                .filter(|(_, us)| *us < apart_us * SHORT_MARGIN)
                .collect();
            faster.sort_by(|a, b| a.1.total_cmp(&b.1));
            faster.into_iter().map(|(t, _)| t).collect()
        };
        for tile in order {
            let found =
                probe.fused_differences(self, plan, &apart, tile, then, s.tokens, stream)?;
            if found.is_some_and(|(differing, _)| differing == 0) {
                return Ok(Some(tile));
            }
            tracing::warn!(
                ?s,
                ?tile,
                ?found,
                "gemm_wg with the next step fused gave other bits; not taken"
            );
        }
        Ok(None)
    }

    /// Whether `gemm_wg` gives `s`'s family the bits of `base` over a whole pass of `s`'s size
    /// on the family's probe, in every form in `tiles`: checked once per family, before any
    /// timing, so that where its sums are not cuBLASLt's bits it is never timed again. The
    /// forms add up an output in the same order but fill their stages by different means,
    /// so each is checked (and the one a pass takes again before it is taken); one that
    /// differs keeps the family off all of them and is logged.
    fn own_bits(
        &mut self,
        s: Shape,
        plan: &Plan,
        base: &sys::cublasLtMatmulAlgo_t,
        tiles: &[Tile],
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<bool, CudaError> {
        let family = s.family();
        if let Some(&same) = self.own_same_bits.get(&family) {
            return Ok(same);
        }
        let probe = self.probe(family)?;
        let mut all_same = true;
        for &tile in tiles {
            let found = probe.differences(self, base, &Algo::Own(tile), plan, s.tokens, stream)?;
            let same = found.is_some_and(|(differing, _)| differing == 0);
            all_same &= same;
            match found {
                Some((differing, max_abs)) if same => tracing::info!(
                    ?family,
                    ?tile,
                    tokens = s.tokens,
                    differing,
                    max_abs,
                    "gemm_wg's sums against cuBLASLt's for this layer: the same bits"
                ),
                Some((differing, max_abs)) => tracing::warn!(
                    ?family,
                    ?tile,
                    tokens = s.tokens,
                    differing,
                    max_abs,
                    "gemm_wg's sums against cuBLASLt's for this layer: other bits; the layer \
                     keeps cuBLASLt's kernels"
                ),
                None => tracing::warn!(
                    ?family,
                    ?tile,
                    "gemm_wg failed to run; this layer keeps cuBLASLt's kernels"
                ),
            }
        }
        self.own_same_bits.insert(family, all_same);
        Ok(all_same)
    }

    /// Each algorithm's median GPU time (µs) over [`SHORT_REPS`] runs of `g`, the L2 cache
    /// overwritten before each run (a failed run times as infinite). The output goes to
    /// `short_out`.
    fn time_cold(
        &self,
        plan: &Plan,
        algos: &[Algo],
        g: &Gemm,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<Vec<f32>, CudaError> {
        let scratch = self.scratch()?;
        gpu::fill(scratch.ptr(), 0, scratch.bytes() / 4, stream)?;
        let g = Gemm {
            y: scratch.ptr(),
            ..*g
        };
        let runs: Vec<_> = algos
            .iter()
            .map(|algo| move || self.launch_any(plan, algo, &g, stream))
            .collect();
        self.time_runs(&runs, stream)
    }

    /// `short_out`, which timed runs write into.
    fn scratch(&self) -> Result<&DeviceBuf, CudaError> {
        self.short_out
            .as_ref()
            .ok_or_else(|| CudaError::Unavailable("no scratch memory for timing".into()))
    }

    /// Each run's median GPU time (µs) over [`SHORT_REPS`] rounds, the L2 cache overwritten
    /// before each (a failed run times as infinite).
    fn time_runs<F: Fn() -> Result<(), CudaError>>(
        &self,
        runs: &[F],
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<Vec<f32>, CudaError> {
        let Some(flush) = &self.short_flush else {
            return Err(CudaError::Unavailable(
                "no scratch memory for timing".into(),
            ));
        };
        // Rounds outermost, so that a drift of the clocks spreads over every candidate.
        let mut marks = Vec::with_capacity(SHORT_REPS * runs.len());
        for _ in 0..SHORT_REPS {
            for run in runs {
                gpu::fill(flush.ptr(), 0, FLUSH_BYTES / 4, stream)?;
                let (start, end) = (Event::new()?, Event::new()?);
                start.record(stream)?;
                let ok = run().is_ok();
                end.record(stream)?;
                marks.push((start, end, ok));
            }
        }
        gpu::sync_stream(stream)?;
        let mut times = vec![Vec::with_capacity(SHORT_REPS); runs.len()];
        for (i, (start, end, ok)) in marks.iter().enumerate() {
            let us = if *ok {
                start.elapsed_ms(end)? * 1e3
            } else {
                f32::INFINITY
            };
            times[i % runs.len()].push(us);
        }
        Ok(times
            .into_iter()
            .map(|mut t| {
                t.sort_by(f32::total_cmp);
                t[t.len() / 2]
            })
            .collect())
    }

    /// Queues one GEMM on `stream`.
    pub fn run(
        &mut self,
        g: &Gemm,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<(), CudaError> {
        self.run_inner(g, None, stream).map(|_| ())
    }

    /// Queues one GEMM on `stream`, and `then` with it in one kernel where that was faster
    /// for this pass size: true if so, false if only the GEMM was queued and `then` is the
    /// caller's to queue ([`Then::launch`]).
    pub fn run_then(
        &mut self,
        g: &Gemm,
        then: &Then,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<bool, CudaError> {
        self.run_inner(g, Some(then), stream)
    }

    fn run_inner(
        &mut self,
        g: &Gemm,
        then: Option<&Then>,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<bool, CudaError> {
        let shape = Shape {
            tokens: g.tokens,
            out: g.out,
            inp: g.inp,
            kind: g.kind,
        };
        self.plan(shape, g, stream)?;
        if let Some(then) = then {
            if let Some(tile) = self.fused(shape, g, then, stream) {
                if let Some(own) = &self.own {
                    own.launch_then(tile, g, then, stream)?;
                    return Ok(true);
                }
            }
        }
        let plan = self
            .plans
            .get(&shape)
            .ok_or_else(|| CudaError::Unavailable("GEMM plan vanished".into()))?;
        self.launch_any(plan, &self.algo(plan, g), g, stream)?;
        Ok(false)
    }

    /// Queues one GEMM with `algo`, whichever kind it is.
    fn launch_any(
        &self,
        plan: &Plan,
        algo: &Algo,
        g: &Gemm,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<(), CudaError> {
        match (algo, &self.own) {
            (Algo::Lt(a), _) => self.launch(plan, a, g, stream),
            (Algo::Own(tile), Some(own)) => own.launch(*tile, g, stream),
            (Algo::Own(_), None) => Err(CudaError::Unavailable("gemm_wg is not loaded".into())),
        }
    }

    fn launch(
        &self,
        plan: &Plan,
        algo: &sys::cublasLtMatmulAlgo_t,
        g: &Gemm,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<(), CudaError> {
        let (handle, ws) = (self.handle, self.workspace.ptr());
        if g.kind.has_bias() {
            let bias = g.bias as *const c_void;
            // SAFETY: a pointer-sized attribute value.
            unsafe {
                lt::set_matmul_desc_attribute(
                    plan.desc,
                    sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                    &bias as *const *const c_void as *const c_void,
                    std::mem::size_of::<*const c_void>(),
                )
            }
            .map_err(blas("setting the bias"))?;
        }
        let alpha = 1.0f32;
        let beta = g.kind.beta();
        // SAFETY: the operands are device buffers of the plan's shapes (the engine sizes them);
        // C and D are the same matrix, which cuBLASLt allows for equal layouts.
        unsafe {
            lt::matmul(
                handle,
                plan.desc,
                &alpha as *const f32 as *const c_void,
                &beta as *const f32 as *const c_void,
                g.w as *const c_void,
                plan.a,
                g.x as *const c_void,
                plan.b,
                g.y as *const c_void,
                plan.d,
                g.y as *mut c_void,
                plan.d,
                algo,
                ws as *mut c_void,
                WORKSPACE_BYTES,
                stream as sys::cudaStream_t,
            )
        }
        .map_err(blas("cublasLtMatmul"))
    }
}

/// The split-K factor an algorithm's configuration asks for (1: none).
fn split_k(algo: &sys::cublasLtMatmulAlgo_t) -> i32 {
    let mut value: i32 = 1;
    let mut written = 0usize;
    // SAFETY: the attribute is an int32; `value` has its size.
    let status = unsafe {
        sys::cublasLtMatmulAlgoConfigGetAttribute(
            algo,
            sys::cublasLtMatmulAlgoConfigAttributes_t::CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
            &mut value as *mut i32 as *mut c_void,
            std::mem::size_of::<i32>(),
            &mut written,
        )
    };
    if status == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        value
    } else {
        1
    }
}

/// A tier of [`Blas::long_tokens`]: passes from `from` tokens take the algorithm the
/// heuristic picks at `tokens`.
#[derive(Debug, Clone, Copy)]
struct Tier {
    from: usize,
    tokens: usize,
}

/// Operands for the checks of one family: fixed pseudo-random activations of `rows` rows
/// ([`PROBE_LARGE`] for the invariance check), the layer's own weight and bias, and for the
/// residual kinds a pseudo-random stream to add to.
///
/// The values use every bit of their mantissas, so that their products' sums round and two
/// kernels that add up an output in different orders give different bits. (Values on a
/// coarse grid, as the first probe used, add up exactly in any order: a kernel of another
/// order passed that check and then moved real answers in the last bits.)
struct Probe {
    family: Family,
    x: DeviceBuf,
    w: u64,
    bias: u64,
    out_elem: usize,
    /// The residual kinds' stream as it starts, `rows` rows of f32 bytes (a row has the same
    /// values wherever it sits); empty for the kinds that overwrite their output.
    stream: Vec<u8>,
}

impl Probe {
    fn new(family: Family, g: &Gemm, rows: usize) -> Result<Probe, CudaError> {
        let n = rows * family.inp;
        let bits: Vec<u16> = (0..n)
            .map(|i| half::f16::from_f32(probe_value(i as u64)).to_bits())
            .collect();
        let x = DeviceBuf::from_slice(&bits)?;
        let out_elem = if family.kind.out_type() == sys::cudaDataType::CUDA_R_16F {
            2
        } else {
            4
        };
        let stream = if family.kind.beta() == 0.0 {
            Vec::new()
        } else {
            (0..(rows * family.out) as u64)
                .flat_map(|i| (4.0 * probe_value(i ^ 0x5eed_0000_0000)).to_ne_bytes())
                .collect()
        };
        Ok(Probe {
            family,
            x,
            w: g.w,
            bias: g.bias,
            out_elem,
            stream,
        })
    }

    /// The output as it starts for rows `from..from + rows`.
    fn start(&self, from: usize, rows: usize) -> Result<DeviceBuf, CudaError> {
        let row_bytes = self.family.out * self.out_elem;
        if self.stream.is_empty() {
            DeviceBuf::from_slice(&vec![0u8; rows * row_bytes])
        } else {
            DeviceBuf::from_slice(&self.stream[from * row_bytes..(from + rows) * row_bytes])
        }
    }

    fn gemm(&self, tokens: usize, x: u64, y: u64) -> Gemm {
        Gemm {
            kind: self.family.kind,
            tokens,
            out: self.family.out,
            inp: self.family.inp,
            x,
            w: self.w,
            bias: self.bias,
            y,
        }
    }

    /// How many outputs of a pass of the first `tokens` rows (`plan`'s shape) differ in
    /// their bits between `a` and `b`, and by how much at most; `None` if one did not run.
    fn differences(
        &self,
        blas: &Blas,
        a: &sys::cublasLtMatmulAlgo_t,
        b: &Algo,
        plan: &Plan,
        tokens: usize,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<Option<(usize, f32)>, CudaError> {
        let (out_a, out_b) = (self.start(0, tokens)?, self.start(0, tokens)?);
        let ran = blas
            .launch(
                plan,
                a,
                &self.gemm(tokens, self.x.ptr(), out_a.ptr()),
                stream,
            )
            .and_then(|_| {
                blas.launch_any(
                    plan,
                    b,
                    &self.gemm(tokens, self.x.ptr(), out_b.ptr()),
                    stream,
                )
            });
        gpu::sync_stream(stream)?;
        if ran.is_err() {
            return Ok(None);
        }
        Ok(Some(compare(
            &out_a.to_host()?,
            &out_b.to_host()?,
            self.out_elem,
        )))
    }

    /// How many outputs of `then` differ in their bits between a pass of the first `tokens`
    /// rows run apart (the GEMM with `apart`, then `then`'s kernel) and run as one `gemm_wg`
    /// kernel of `tile`, and by how much at most; `None` if one did not run.
    #[allow(clippy::too_many_arguments)]
    fn fused_differences(
        &self,
        blas: &Blas,
        plan: &Plan,
        apart: &Algo,
        tile: Tile,
        then: &Then,
        tokens: usize,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<Option<(usize, f32)>, CudaError> {
        let Some(own) = &blas.own else {
            return Ok(None);
        };
        let (y_a, y_b) = (self.start(0, tokens)?, self.start(0, tokens)?);
        let (g_a, g_b) = (
            self.gemm(tokens, self.x.ptr(), y_a.ptr()),
            self.gemm(tokens, self.x.ptr(), y_b.ptr()),
        );
        let bytes = then.separate_out_bytes(&g_a);
        let outs = if bytes > 0 {
            Some((DeviceBuf::alloc(bytes)?, DeviceBuf::alloc(bytes)?))
        } else {
            None
        };
        // RoPE at positions of the probe's own, spread over its tables: the pass being
        // planned may be a warm-up's, whose tokens all sit at position 0, where a rotation is
        // the identity and any two ways of rounding it agree.
        let spread = match then {
            Then::Rope { positions, .. } => {
                Some(DeviceBuf::from_slice(&probe_positions(tokens, *positions))?)
            }
            Then::GeGlu { .. } => None,
        };
        let then = spread
            .as_ref()
            .map_or(*then, |p| then.at_positions(p.ptr()));
        let (then_a, then_b) = match &outs {
            Some((a, b)) => (then.to(a.ptr()), then.to(b.ptr())),
            None => (then, then),
        };
        let ran = blas
            .launch_any(plan, apart, &g_a, stream)
            .and_then(|_| then_a.launch(&g_a, stream))
            .and_then(|_| own.launch_then(tile, &g_b, &then_b, stream));
        gpu::sync_stream(stream)?;
        if ran.is_err() {
            return Ok(None);
        }
        // The step's own result, or the GEMM's output it changed in place; f16 either way.
        let (a, b) = match &outs {
            Some((a, b)) => (a.to_host()?, b.to_host()?),
            None => (y_a.to_host()?, y_b.to_host()?),
        };
        Ok(Some(compare(&a, &b, 2)))
    }

    /// Runs `alone` on the first and the last block of rows alone, then `among` on the first
    /// `n` rows for each count, and compares (the last block only in a pass of
    /// [`PROBE_LARGE`] rows).
    fn same_bits<P: std::borrow::Borrow<Plan>>(
        &self,
        blas: &Blas,
        alone: &sys::cublasLtMatmulAlgo_t,
        among: &sys::cublasLtMatmulAlgo_t,
        small: &Plan,
        counts: &[(usize, P)],
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<bool, CudaError> {
        let f = self.family;
        let row_bytes = f.out * self.out_elem;
        let offset = PROBE_LARGE - PROBE_SMALL;
        let (head, tail) = (
            self.start(0, PROBE_SMALL)?,
            self.start(offset, PROBE_SMALL)?,
        );
        let outs = counts
            .iter()
            .map(|(n, _)| self.start(0, *n))
            .collect::<Result<Vec<_>, _>>()?;
        // A kernel cuBLASLt refuses for these operands is no candidate.
        let mut ran = blas
            .launch(
                small,
                alone,
                &self.gemm(PROBE_SMALL, self.x.ptr(), head.ptr()),
                stream,
            )
            .and_then(|_| {
                let x = self.x.at(offset * f.inp * 2);
                blas.launch(small, alone, &self.gemm(PROBE_SMALL, x, tail.ptr()), stream)
            });
        for ((n, plan), out) in counts.iter().zip(&outs) {
            ran = ran.and_then(|_| {
                blas.launch(
                    plan.borrow(),
                    among,
                    &self.gemm(*n, self.x.ptr(), out.ptr()),
                    stream,
                )
            });
        }
        gpu::sync_stream(stream)?;
        if ran.is_err() {
            return Ok(false);
        }
        let (head, tail) = (head.to_host()?, tail.to_host()?);
        let block = PROBE_SMALL * row_bytes;
        for ((n, _), out) in counts.iter().zip(&outs) {
            let all = out.to_host()?;
            if all[..block] != head[..] {
                return Ok(false);
            }
            if *n == PROBE_LARGE && all[offset * row_bytes..] != tail[..] {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// How many `elem`-byte values (f16 or f32) of `a` and `b` differ in their bits, and by how
/// much at most.
fn compare(a: &[u8], b: &[u8], elem: usize) -> (usize, f32) {
    let value = |e: &[u8]| match *e {
        [lo, hi] => half::f16::from_le_bytes([lo, hi]).to_f32(),
        [b0, b1, b2, b3] => f32::from_le_bytes([b0, b1, b2, b3]),
        _ => f32::NAN,
    };
    let mut differing = 0;
    let mut max_abs = 0f32;
    for (x, y) in a.chunks(elem).zip(b.chunks(elem)) {
        if x != y {
            differing += 1;
            let d = (value(x) - value(y)).abs();
            // NaN (a wrong kernel's garbage) counts as infinitely far.
            max_abs = if d.is_nan() {
                f32::INFINITY
            } else {
                max_abs.max(d)
            };
        }
    }
    (differing, max_abs)
}

/// Pseudo-random positions in `[0, positions)` for `tokens` rows, for checking RoPE.
fn probe_positions(tokens: usize, positions: usize) -> Vec<i32> {
    let top = positions.saturating_sub(1) as f32;
    (0..tokens as u64)
        .map(|i| ((probe_value(i ^ 0x9051_7100) + 1.0) / 2.0 * top).round() as i32)
        .collect()
}

/// A pseudo-random value in [-1, 1) for index `i`, with all 24 bits of an f32 mantissa
/// (splitmix64's mixing).
fn probe_value(i: u64) -> f32 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

impl Drop for Blas {
    fn drop(&mut self) {
        self.plans.clear();
        // SAFETY: created by `new`.
        unsafe {
            let _ = lt::destroy_handle(self.handle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RoPE's check must turn its rows: positions inside the tables, hardly ever 0 (where a
    /// rotation is the identity), and spread over them.
    #[test]
    fn probe_positions_spread_over_the_tables() {
        for (tokens, positions) in [(192, 8192), (6144, 8192), (640, 512)] {
            let p = probe_positions(tokens, positions);
            assert_eq!(p.len(), tokens);
            assert!(p.iter().all(|&x| (0..positions as i32).contains(&x)));
            let zeros = p.iter().filter(|&&x| x == 0).count();
            assert!(zeros * 100 <= tokens, "{zeros} of {tokens} at position 0");
            let distinct: std::collections::HashSet<_> = p.iter().collect();
            assert!(
                distinct.len() * 2 > tokens.min(positions),
                "{} distinct",
                distinct.len()
            );
            let (lo, hi) = (p.iter().min().copied(), p.iter().max().copied());
            assert!(lo < Some(positions as i32 / 10) && hi > Some(positions as i32 * 9 / 10));
        }
    }

    /// The probe's values must round when summed: spread over [-1, 1), not on a coarse grid,
    /// and as f16 (the activations) still using most of the mantissa.
    #[test]
    fn probe_values_use_their_mantissas() {
        let values: Vec<f32> = (0..4096).map(probe_value).collect();
        assert!(values.iter().all(|v| (-1.0..1.0).contains(v)));
        let (lo, hi) = values
            .iter()
            .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
        assert!(lo < -0.99 && hi > 0.99, "{lo} {hi}");
        // On a 1/128 grid every value times 128 is whole; these almost never are.
        let on_grid = values
            .iter()
            .filter(|v| (*v * 128.0).fract() == 0.0)
            .count();
        assert!(on_grid < 8, "{on_grid} of 4096 on the 1/128 grid");
        // As f16, values above 1/2 in magnitude keep the mantissa's low bit set about half
        // of the time.
        let odd = values
            .iter()
            .filter(|v| v.abs() >= 0.5)
            .filter(|v| half::f16::from_f32(**v).to_bits() & 1 == 1)
            .count();
        let big = values.iter().filter(|v| v.abs() >= 0.5).count();
        assert!(odd * 3 > big && odd * 3 < 2 * big, "{odd} of {big}");
    }
}
