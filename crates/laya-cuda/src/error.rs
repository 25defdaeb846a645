//! Errors of this crate: [`LoadError`] when a checkpoint cannot become a [`crate::CudaEngine`],
//! [`ForwardError`] when one forward pass fails, and [`CudaError`] for the CUDA libraries
//! underneath both.

use laya_core::checkpoint::TensorError;
use laya_core::config::ConfigError;

/// A failure of the CUDA driver, NVRTC or cuBLASLt.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// The CUDA libraries cannot be loaded on this machine (no driver, no NVRTC, no
    /// cuBLASLt), or there is no usable GPU.
    #[error("CUDA is not available: {0}")]
    Unavailable(String),
    /// A driver call failed.
    #[error("CUDA driver: {what}: {source}")]
    Driver {
        /// The call.
        what: &'static str,
        /// The driver's error.
        source: cudarc::driver::DriverError,
    },
    /// A cuBLASLt call failed.
    #[error("cuBLASLt: {what}: {source:?}")]
    Blas {
        /// The call.
        what: &'static str,
        /// cuBLASLt's status.
        source: cudarc::cublaslt::result::CublasError,
    },
    /// NVRTC could not compile the kernels.
    #[error("compiling the kernels: {0}")]
    Compile(String),
}

/// Why a checkpoint directory could not be loaded into a [`crate::CudaEngine`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// `rl_agent_config.json` or `encoder/config.json` is missing or invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `model.safetensors` does not hold the configs' model.
    #[error(transparent)]
    Tensors(#[from] TensorError),
    /// The configs describe a model these kernels do not implement.
    #[error("unsupported model configuration: {0}")]
    Unsupported(String),
    /// CUDA failed while loading.
    #[error(transparent)]
    Cuda(#[from] CudaError),
}

/// Why one forward pass failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ForwardError {
    /// A row cannot be run (empty, no marker, a marker out of range, a token id outside the
    /// vocabulary, or longer than the position tables).
    #[error("row {row}: {reason}")]
    InvalidRow {
        /// Index of the row in the pass.
        row: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// CUDA failed during the forward.
    #[error(transparent)]
    Cuda(#[from] CudaError),
}
