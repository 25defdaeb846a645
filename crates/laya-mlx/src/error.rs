//! Errors of this crate: [`LoadError`] when a checkpoint cannot become an engine, and
//! [`ForwardError`] when one forward pass fails (turned into `laya_core`'s `EngineError` at
//! the seam).

use std::path::PathBuf;

use laya_core::config::ConfigError;
use mlx_rs::error::Exception;

/// Why a checkpoint directory could not be loaded into an [`crate::MlxEngine`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// `rl_agent_config.json` or `encoder/config.json` is missing or invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The configs parse but describe a model this engine cannot build.
    #[error("unsupported model configuration: {0}")]
    Unsupported(String),
    /// `model.safetensors` cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `model.safetensors` is not a well-formed safetensors file (bad header, truncated data).
    #[error("{path} is not a valid safetensors file: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A tensor the model needs is absent.
    #[error("tensor {name:?} is missing from the checkpoint")]
    MissingTensor {
        /// Checkpoint name of the tensor.
        name: String,
    },
    /// The checkpoint holds a tensor the model does not have.
    #[error("unexpected tensor {name:?} in the checkpoint")]
    UnexpectedTensor {
        /// Checkpoint name of the tensor.
        name: String,
    },
    /// A tensor's shape differs from the one the configs imply.
    #[error("tensor {name:?} has shape {found:?}, the configs imply {expected:?}")]
    Shape {
        /// Checkpoint name of the tensor.
        name: String,
        /// Shape the configs imply.
        expected: Vec<usize>,
        /// Shape in the file.
        found: Vec<usize>,
    },
    /// A tensor's dtype is not a floating-point type (F16, BF16 or F32).
    #[error("tensor {name:?} has dtype {dtype}, expected F16, BF16 or F32")]
    Dtype {
        /// Checkpoint name of the tensor.
        name: String,
        /// Dtype string of the safetensors header.
        dtype: String,
    },
    /// The requested device is not available in this libmlx.
    #[error("device {device} is not available: {source}")]
    Device {
        /// Description of the requested device.
        device: String,
        /// MLX's error.
        source: Exception,
    },
    /// MLX failed while loading or converting the weights.
    #[error("MLX failed while {context}: {source}")]
    Mlx {
        /// What was being done.
        context: String,
        /// MLX's error.
        source: Exception,
    },
}

/// Why one forward pass failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ForwardError {
    /// A row cannot be run (it is empty, has no marker, a marker out of range, a token id
    /// outside the vocabulary, or is too long).
    #[error("row {row}: {reason}")]
    InvalidRow {
        /// Index of the row in the pass.
        row: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// MLX failed during the forward.
    #[error("MLX failed during the forward pass: {0}")]
    Mlx(#[from] Exception),
    /// MLX returned an array that could not be read back.
    #[error("cannot read the {what} back from MLX: {reason}")]
    Readback {
        /// Which output.
        what: &'static str,
        /// MLX's explanation.
        reason: String,
    },
}

impl From<laya_core::checkpoint::TensorError> for LoadError {
    fn from(e: laya_core::checkpoint::TensorError) -> Self {
        use laya_core::checkpoint::TensorError as T;
        match e {
            T::Read { path, source } => LoadError::Read { path, source },
            T::Format { path, reason } => LoadError::Format { path, reason },
            T::MissingTensor { name } => LoadError::MissingTensor { name },
            T::UnexpectedTensor { name } => LoadError::UnexpectedTensor { name },
            T::Shape {
                name,
                expected,
                found,
            } => LoadError::Shape {
                name,
                expected,
                found,
            },
            T::Dtype { name, dtype } => LoadError::Dtype { name, dtype },
            other => LoadError::Unsupported(other.to_string()),
        }
    }
}

impl From<ForwardError> for laya_core::engine::EngineError {
    fn from(e: ForwardError) -> Self {
        laya_core::engine::EngineError::new(e.to_string())
    }
}
