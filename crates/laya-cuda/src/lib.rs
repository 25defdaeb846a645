//! `laya-cuda`: the Laya System 1 forward pass (`model.md` §3) as a native NVIDIA engine,
//! behind the same plain-data seam as `laya-mlx` ([`laya_core::engine::Forward`]: token rows
//! in, logits out).
//!
//! - [`gpu`]: the CUDA driver, NVRTC and cuBLASLt, opened at run time (no CUDA at build time,
//!   so the workspace builds and tests anywhere); device memory, launches, graphs.
//! - [`compile`]: the fused kernels of `kernels.cu`, compiled by NVRTC for the GPU at hand
//!   and cached on disk.
//! - [`gemm`]: the linear layers through cuBLASLt, bias/ReLU/residual in the epilogue;
//!   [`wgmma`]: our own Hopper GEMM kernels (`gemm_wg`, and `gemm_tma` fed by TMA), which
//!   passes take where they give the same bits and are faster, alone or with GeGLU or RoPE
//!   in their epilogue.
//! - [`batch`]: rows packed back to back into fixed-size buckets, one CUDA graph per bucket.
//! - [`weights`], [`engine`]: the checkpoint on the GPU and the forward pass.
//!
//! Numerics follow upstream's fp16 autocast on CUDA: f16 weights and GEMM inputs with f32
//! accumulation, an f32 residual stream and f32 norms, softmax in f32, and the scorer and act
//! head in f32.

pub mod batch;
pub mod compile;
pub mod engine;
pub mod error;
mod gemm;
mod gpu;
pub mod weights;
mod wgmma;

pub use engine::{Attention, CudaEngine, CudaSettings, Fuse, Stats};
pub use error::{CudaError, ForwardError, LoadError};
pub use gemm::Choices;

/// Opens the CUDA driver, NVRTC and cuBLASLt, or says which is missing or older than CUDA 13
/// (never panics).
pub fn load_libraries() -> Result<(), CudaError> {
    gpu::load_libraries()
}

/// Opens NVRTC alone (enough to compile the kernels), or says why not.
pub fn load_nvrtc() -> Result<(), CudaError> {
    gpu::load(&["nvrtc"])
}

/// How many CUDA devices are visible (for one engine per GPU), creating no context.
pub fn device_count() -> Result<usize, CudaError> {
    gpu::device_count()
}

/// Whether this machine can run the engine: the CUDA libraries load and GPU `ordinal` exists
/// with compute capability 8.0 or newer. Its name, or the reason when not. Creates no
/// context.
pub fn probe(ordinal: usize) -> Result<String, CudaError> {
    gpu::find_device(ordinal).map(|d| d.name)
}
