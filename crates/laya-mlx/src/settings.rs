//! Engine settings ("knobs"): which device runs the forward, in which precision, and how the
//! attention is laid out. Read once when the engine is built; nothing here is per request.

use mlx_rs::Dtype;

/// Floating-point type the encoder and the decision head compute in.
///
/// Weights are stored F16 on disk and converted once at load. The option scorer and the act
/// head are small and always run in f32 (their inputs are cast up), and logits are always f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Pure fp32, like the upstream CPU reference (`model.md` §3.6). The default on the CPU.
    F32,
    /// Matmul weights and inputs, attention and the feed-forward activations in f16; the
    /// residual stream, the norms and the type embedding stay f32, as under PyTorch's fp16
    /// autocast (upstream's `LAYA_CUDA_AMP=fp16`). The default on a GPU. On the CPU, which has
    /// no fast f16 kernels, GEMMs and attention take f16 values and compute in f32, rounding
    /// their results to f16, as a GPU's f16 kernels with f32 accumulation do.
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
    /// rows, query blocks for long rows (`L >= 256`) in per-length groups; always the full
    /// masked scores in a padded batch (the GPU layout, where they measured faster).
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
    /// Copy queries, keys and values into contiguous `[b, H, L, hd]` arrays before RoPE and
    /// attention, instead of handing MLX's kernels strided views of the fused projection.
    /// Same numbers on a correct backend, at one copy per tensor and layer. `None` copies on
    /// the GPU only: MLX 0.32.2's CUDA attention reads strided queries and keys wrongly (and
    /// with a mask, out of bounds), which the `gpu-probe` example shows op by op.
    pub contiguous_heads: Option<bool>,
    /// Run each attention over all rows padded to the longest one (padded keys masked out)
    /// instead of one batch per distinct row length. Linear layers stay unpadded either way.
    /// `None` pads on the GPU only, where one large batch costs less than many small ones.
    pub padded_attention: Option<bool>,
    /// Compute the encoder's GeGLU (exact-erf GELU times the gate) and the attention softmax
    /// on the host, vectorized and across cores, instead of with MLX's CPU `erf` and `exp`,
    /// which run one element at a time. `None` does so on the CPU. The erf is the form
    /// PyTorch's CPU kernels use. With per-row attention, the encoder's whole self-attention
    /// (RoPE, scores, softmax, values) runs on the host too (`host_attention.rs`), and the
    /// decision head's attention; with host linear layers as well, the residual stream
    /// stays on the host from the encoder's first layer to the head's last (norms, adds,
    /// ReLU there too).
    pub host_math: Option<bool>,
    /// `--int8`: the encoder's linear layers with int8 weights (per output channel) and int8
    /// activations (per row) on the host, with this kernel and activation split
    /// ([`crate::int8::Int8::detect`] picks the CPU's best kernel). The feed-forward output
    /// projection `mlp.Wo` stays f32: its inputs carry the activation outliers that per-row
    /// int8 rounds worst. So does the decision head, whose int8 flipped a quarter of the
    /// picks that `--int8` flips on the fixtures (for 3-9 % of the time). CPU and f32 only.
    pub int8: Option<crate::int8::Int8>,
    /// The f32 linear layers of the encoder and the decision head on the host, on weights
    /// packed at load ([`crate::f32_linear`]), instead of MLX's GEMM (OpenBLAS on Linux).
    /// `None` does so on the CPU in f32 when the CPU has an f32 kernel
    /// ([`crate::f32_linear::Kernel::detect`]); `Some(true)` without one is an error.
    pub host_gemm: Option<bool>,
    /// The kernel of the host's f32 GEMMs; `None` takes the CPU's fastest
    /// ([`crate::f32_linear::Kernel::detect`]). Where they run (the CPU, f32), one the CPU
    /// lacks is an error. A layer whose weights AMX-BF16 cannot split exactly runs on AVX-512.
    pub host_gemm_kernel: Option<crate::f32_linear::Kernel>,
}

/// How the forward's kernels run, resolved from [`EngineSettings`] and the device when the
/// engine is built.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kernels {
    /// [`EngineSettings::contiguous_heads`].
    pub contiguous_heads: bool,
    /// [`EngineSettings::padded_attention`].
    pub padded: bool,
    /// [`EngineSettings::host_math`].
    pub host_math: bool,
    /// f16 GEMMs and attention computed in f32 and rounded to f16 (f16 on the CPU, which has
    /// no fast f16 kernels): see `Linear::new`.
    pub upcast: bool,
    /// [`EngineSettings::int8`].
    pub int8: Option<crate::int8::Int8>,
    /// [`EngineSettings::host_gemm`], resolved to the kernel that runs.
    pub host_gemm: Option<crate::f32_linear::Kernel>,
}
