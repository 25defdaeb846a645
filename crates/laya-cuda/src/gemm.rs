//! The linear layers: `y = x · Wᵀ (+ b)` through cuBLASLt, with the bias, the ReLU and the
//! residual add done in its epilogue instead of separate kernels.
//!
//! Activations are row-major `[tokens, features]` and weights PyTorch's `[out, in]`. In
//! cuBLASLt's column-major terms that is `Dᵀ (out × tokens) = W (out × in, stored transposed)
//! · Xᵀ`, the "TN" case its Hopper kernels are built for. A plan (descriptors and the
//! heuristic's algorithm) is made once per shape and reused, also inside CUDA graphs.

use std::collections::HashMap;
use std::ffi::c_void;

use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;

use crate::error::CudaError;
use crate::gpu::{DeviceBuf, Event};

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
    /// All f32, `+ b` (f32 bias): the scorer.
    FullBias,
}

impl Kind {
    fn in_type(self) -> sys::cudaDataType {
        match self {
            Kind::FullBias => sys::cudaDataType::CUDA_R_32F,
            _ => sys::cudaDataType::CUDA_R_16F,
        }
    }
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Shape {
    tokens: usize,
    out: usize,
    inp: usize,
    kind: Kind,
}

struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    d: sys::cublasLtMatrixLayout_t,
    algo: sys::cublasLtMatmulAlgo_t,
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

/// Heuristic candidates timed per shape.
const CANDIDATES: usize = 16;

/// A cuBLASLt handle, its workspace and the plans made so far.
pub struct Blas {
    handle: sys::cublasLtHandle_t,
    workspace: DeviceBuf,
    plans: HashMap<Shape, Plan>,
    /// Time the candidates when planning (off: the heuristic's first pick).
    pub tune: bool,
    /// Set while a CUDA graph is being captured: nothing may run or synchronise then, so a
    /// plan made during capture takes the heuristic's pick untimed.
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
            tune: true,
            capturing: false,
        })
    }

    fn plan(
        &mut self,
        s: Shape,
        g: &Gemm,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<&Plan, CudaError> {
        if !self.plans.contains_key(&s) {
            let timed = (self.tune && !self.capturing).then_some((g, stream));
            let plan = self.make_plan(s, timed)?;
            self.plans.insert(s, plan);
        }
        self.plans
            .get(&s)
            .ok_or_else(|| CudaError::Unavailable("GEMM plan vanished".into()))
    }

    fn make_plan(
        &self,
        s: Shape,
        timed: Option<(&Gemm, cudarc::driver::sys::CUstream)>,
    ) -> Result<Plan, CudaError> {
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
            algo: unsafe { std::mem::zeroed() },
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
        let (tin, tout) = (s.kind.in_type(), s.kind.out_type());
        plan.a = lt::create_matrix_layout(tin, s.inp as u64, s.out as u64, s.inp as i64)
            .map_err(blas("cublasLtMatrixLayoutCreate"))?;
        plan.b = lt::create_matrix_layout(tin, s.inp as u64, s.tokens as u64, s.inp as i64)
            .map_err(blas("cublasLtMatrixLayoutCreate"))?;
        plan.d = lt::create_matrix_layout(tout, s.out as u64, s.tokens as u64, s.out as i64)
            .map_err(blas("cublasLtMatrixLayoutCreate"))?;

        let pref = lt::create_matmul_pref().map_err(blas("cublasLtMatmulPreferenceCreate"))?;
        let ws = WORKSPACE_BYTES;
        // SAFETY: zeroed results are plain data the call overwrites.
        let mut results: Vec<sys::cublasLtMatmulHeuristicResult_t> =
            vec![unsafe { std::mem::zeroed() }; CANDIDATES];
        let mut found = 0i32;
        // SAFETY: `ws` is a usize as the attribute wants; `results` holds CANDIDATES entries;
        // `pref` is destroyed below.
        let status = unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const usize as *const c_void,
                std::mem::size_of::<usize>(),
            )
            .and_then(|_| {
                sys::cublasLtMatmulAlgoGetHeuristic(
                    self.handle,
                    desc,
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
        let candidates: Vec<sys::cublasLtMatmulAlgo_t> = results
            .iter()
            .take(found.max(0) as usize)
            .filter(|r| r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
            .map(|r| r.algo)
            .collect();
        let first = *candidates.first().ok_or(CudaError::Blas {
            what: "cublasLtMatmulAlgoGetHeuristic",
            source: lt::CublasError(sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED),
        })?;
        plan.algo = match timed {
            Some((g, stream)) if candidates.len() > 1 => {
                self.fastest(&plan, &candidates, g, stream)?
            }
            _ => first,
        };
        tracing::trace!(?s, "GEMM planned");
        Ok(plan)
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
            // SAFETY: a live stream.
            unsafe { cudarc::driver::result::stream::synchronize(stream) }.map_err(|source| {
                CudaError::Driver {
                    what: "cuStreamSynchronize",
                    source,
                }
            })?;
            let ms = start.elapsed_ms(&end)?;
            if ok && best.is_none_or(|(b, _)| ms < b) {
                best = Some((ms, *algo));
            }
        }
        Ok(best.map_or(candidates[0], |(_, a)| a))
    }

    /// Queues one GEMM on `stream`.
    pub fn run(
        &mut self,
        g: &Gemm,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<(), CudaError> {
        let shape = Shape {
            tokens: g.tokens,
            out: g.out,
            inp: g.inp,
            kind: g.kind,
        };
        self.plan(shape, g, stream)?;
        let plan = self
            .plans
            .get(&shape)
            .ok_or_else(|| CudaError::Unavailable("GEMM plan vanished".into()))?;
        self.launch(plan, &plan.algo, g, stream)
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

impl Drop for Blas {
    fn drop(&mut self) {
        self.plans.clear();
        // SAFETY: created by `new`.
        unsafe {
            let _ = lt::destroy_handle(self.handle);
        }
    }
}
