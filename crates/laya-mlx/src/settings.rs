//! Engine settings ("knobs"): which device runs the forward, in which precision, and how the
//! attention is laid out. Read once when the engine is built; nothing here is per request.

use mlx_rs::Dtype;

/// Floating-point type the encoder and the decision head compute in.
///
/// Weights are stored F16 on disk and converted once at load. The option scorer and the act
/// head are small and always run in f32 (their inputs are cast up), and logits are always f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Pure fp32, like the upstream CPU reference (`model.md` §3.6). The default on the CPU,
    /// where MLX has no fast f16 matmul.
    F32,
    /// Weights, activations and the residual stream in f16 (softmax inside attention and
    /// LayerNorm statistics are accumulated in f32 by MLX). The default on a GPU.
    F16,
}

impl Precision {
    /// The MLX dtype of this precision.
    pub fn dtype(self) -> Dtype {
        match self {
            Precision::F32 => Dtype::Float32,
            Precision::F16 => Dtype::Float16,
        }
    }

    /// `"f32"` or `"f16"`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
        }
    }
}

/// Which MLX device runs the forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceKind {
    /// MLX's default device: the CPU with a CPU libmlx, the GPU with a Metal or CUDA libmlx.
    #[default]
    Default,
    /// The CPU backend.
    Cpu,
    /// The GPU backend (Metal or CUDA, whichever libmlx was built with).
    Gpu,
}

/// How sliding-window encoder layers restrict attention to `|i - j| <= half_window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SlidingAttention {
    /// No mask when the row fits inside one window, the full masked `L x L` scores for short
    /// rows, query blocks for long rows (`L >= 256`).
    #[default]
    Auto,
    /// Always the full `L x L` scores with a window mask (the plain reference layout).
    Masked,
    /// Always query blocks of 64 attending only the keys their windows reach.
    Blocked,
}

/// Everything [`crate::MlxEngine::load`] needs besides the checkpoint directory.
#[derive(Debug, Clone, Default)]
pub struct EngineSettings {
    /// Device that runs the forward.
    pub device: DeviceKind,
    /// Compute precision; `None` picks f32 on the CPU and f16 on a GPU.
    pub precision: Option<Precision>,
    /// Layout of the sliding-window attention (same numbers either way, up to rounding).
    pub sliding_attention: SlidingAttention,
    /// Run the last decision-head layer at every position instead of only at the positions
    /// the answers read (position 0 and the markers). Same numbers; for tests and probes.
    pub full_last_head_layer: bool,
}
