//! Errors of this crate: [`LoadError`] when a checkpoint cannot become an engine, and
//! [`ForwardError`] when one forward pass fails (turned into `laya_core`'s `EngineError` at
//! the seam).

use laya_core::checkpoint::TensorError;
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
    /// `model.safetensors` does not hold the configs' model: unreadable, malformed, or a
    /// tensor missing, unexpected, or of the wrong shape or dtype (each named).
    #[error(transparent)]
    Tensors(#[from] TensorError),
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
