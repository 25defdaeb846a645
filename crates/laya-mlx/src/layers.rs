//! The small building blocks shared by the encoder and the decision head: a linear layer
//! stored ready for `x · Wᵀ`, LayerNorm with and without bias, and exact-erf GELU.

use mlx_rs::error::Exception;
use mlx_rs::{fast, ops, Array};

/// `torch.nn.Linear`: `y = x · Wᵀ (+ b)`. `wt` is the checkpoint's `[out, in]` weight seen
/// transposed (a view; MLX hands the transposition to the GEMM, nothing is copied).
#[derive(Debug)]
pub(crate) struct Linear {
    pub wt: Array,
    pub bias: Option<Array>,
}

impl Linear {
    /// From the checkpoint's `[out, in]` weight and optional `[out]` bias.
    pub fn new(weight: &Array, bias: Option<Array>) -> Result<Self, Exception> {
        Ok(Linear {
            wt: weight.transpose()?,
            bias,
        })
    }

    /// `x` is `[n, in]`; the result is `[n, out]`, in the weight's dtype (an f32 input meets
    /// f16 weights as f16, like a linear layer under autocast).
    pub fn forward(&self, x: &Array) -> Result<Array, Exception> {
        let x = x.as_dtype(self.wt.dtype())?;
        match &self.bias {
            Some(b) => ops::addmm(b, &x, &self.wt, 1.0, 1.0),
            None => x.matmul(&self.wt),
        }
    }
}

/// LayerNorm over the last axis; `bias` is `None` for ModernBERT's bias-free norms.
#[derive(Debug)]
pub(crate) struct LayerNorm {
    pub weight: Array,
    pub bias: Option<Array>,
    pub eps: f32,
}

impl LayerNorm {
    pub fn forward(&self, x: &Array) -> Result<Array, Exception> {
        fast::layer_norm(x, &self.weight, self.bias.as_ref(), self.eps)
    }
}

/// Exact GELU, `0.5 · x · (1 + erf(x / √2))` (PyTorch's default `approximate='none'`).
///
/// Written out rather than `mlx_rs::nn::gelu`, which goes through `compile()` and on the CPU
/// JIT-compiles with g++ on first use (1–2 s) for no speed gain.
pub(crate) fn gelu_erf(x: &Array) -> Result<Array, Exception> {
    let dtype = x.dtype();
    let inner = x.multiply(Array::from_f32(std::f32::consts::FRAC_1_SQRT_2).as_dtype(dtype)?)?;
    let cdf = ops::erf(&inner)?
        .add(Array::from_f32(1.0).as_dtype(dtype)?)?
        .multiply(Array::from_f32(0.5).as_dtype(dtype)?)?;
    x.multiply(&cdf)
}
