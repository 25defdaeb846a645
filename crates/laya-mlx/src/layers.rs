//! The small building blocks shared by the encoder and the decision head: a linear layer
//! stored ready for `x · Wᵀ`, LayerNorm with and without bias, and exact-erf GELU.

use mlx_rs::error::Exception;
use mlx_rs::{fast, ops, Array, Dtype};

/// `torch.nn.Linear`: `y = x · Wᵀ (+ b)`. `wt` is the checkpoint's `[out, in]` weight seen
/// transposed (a view; MLX hands the transposition to the GEMM, nothing is copied).
#[derive(Debug)]
pub(crate) struct Linear {
    pub wt: Array,
    pub bias: Option<Array>,
    /// The dtype inputs are rounded to and outputs come out in: the weight's on disk.
    io: Dtype,
}

impl Linear {
    /// From the checkpoint's `[out, in]` weight and optional `[out]` bias. With `upcast`, an
    /// f16 layer keeps f32 copies of its (f16) values and computes each GEMM in f32 on inputs
    /// rounded to f16, rounding the result to f16: what a GPU's f16 GEMM with f32 accumulation
    /// computes, for backends without a fast f16 GEMM (MLX's CPU).
    pub fn new(weight: &Array, bias: Option<Array>, upcast: bool) -> Result<Self, Exception> {
        let io = weight.dtype();
        if !upcast || io == Dtype::Float32 {
            return Ok(Linear {
                wt: weight.transpose()?,
                bias,
                io,
            });
        }
        let wt = weight.as_dtype(Dtype::Float32)?.transpose()?;
        let bias = bias.map(|b| b.as_dtype(Dtype::Float32)).transpose()?;
        wt.eval()?;
        if let Some(b) = &bias {
            b.eval()?;
        }
        Ok(Linear { wt, bias, io })
    }

    /// `x` is `[n, in]`; the result is `[n, out]`, in the layer's dtype (an f32 input meets
    /// f16 weights as f16, like a linear layer under autocast).
    pub fn forward(&self, x: &Array) -> Result<Array, Exception> {
        let mut x = x.as_dtype(self.io)?;
        if self.wt.dtype() != self.io {
            x = x.as_dtype(self.wt.dtype())?;
        }
        let y = match &self.bias {
            Some(b) => ops::addmm(b, &x, &self.wt, 1.0, 1.0)?,
            None => x.matmul(&self.wt)?,
        };
        if y.dtype() == self.io {
            Ok(y)
        } else {
            y.as_dtype(self.io)
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
