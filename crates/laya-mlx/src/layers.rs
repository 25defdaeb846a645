//! The small building blocks shared by the encoder and the decision head: a linear layer
//! (on MLX, or on the host in f32 or int8), LayerNorm with and without bias, and exact-erf
//! GELU.

use mlx_rs::error::Exception;
use mlx_rs::{fast, ops, Array, Dtype};

use crate::f32_linear::F32Linear;
use crate::int8::{Activations, Int8Linear, Kernel, Role};
use crate::settings::Kernels;

/// `torch.nn.Linear`: `y = x · Wᵀ (+ b)`, on MLX or on the host ([`HostLinear`]).
#[derive(Debug)]
pub(crate) enum Linear {
    Dense(Dense),
    Host(HostLinear),
}

/// A linear layer the host computes: in f32 on packed weights ([`crate::f32_linear`]), or
/// with `--int8` in int8 ([`crate::int8`]).
#[derive(Debug)]
pub(crate) enum HostLinear {
    F32(F32Linear),
    Int8(Quantized),
}

/// A linear layer in the checkpoint's precision. `wt` is the `[out, in]` weight seen
/// transposed (a view; MLX hands the transposition to the GEMM, nothing is copied).
#[derive(Debug)]
pub(crate) struct Dense {
    wt: Array,
    bias: Option<Array>,
    /// The dtype inputs are rounded to and outputs come out in: the weight's on disk.
    io: Dtype,
}

/// An int8 linear layer ([`crate::int8`]) and the kernel it runs with.
#[derive(Debug)]
pub(crate) struct Quantized {
    layer: Int8Linear,
    kernel: Kernel,
    activations: Activations,
}

impl Linear {
    /// From the checkpoint's `[out, in]` weight and optional `[out]` bias. With `upcast`, an
    /// f16 layer keeps f32 copies of its (f16) values and computes each GEMM in f32 on inputs
    /// rounded to f16, rounding the result to f16: what a GPU's f16 GEMM with f32 accumulation
    /// computes, for backends without a fast f16 GEMM (MLX's CPU).
    pub fn new(weight: &Array, bias: Option<Array>, upcast: bool) -> Result<Self, Exception> {
        let io = weight.dtype();
        if !upcast || io == Dtype::Float32 {
            return Ok(Linear::Dense(Dense {
                wt: weight.transpose()?,
                bias,
                io,
            }));
        }
        let wt = weight.as_dtype(Dtype::Float32)?.transpose()?;
        let bias = bias.map(|b| b.as_dtype(Dtype::Float32)).transpose()?;
        wt.eval()?;
        if let Some(b) = &bias {
            b.eval()?;
        }
        Ok(Linear::Dense(Dense { wt, bias, io }))
    }

    /// A linear layer of the encoder or the decision head, as `kernels` say: in int8 on the
    /// host when the layer has an int8 `role` and `--int8` is on, in f32 on the host when
    /// the host has an f32 kernel ([`Kernels::host_gemm`]), otherwise [`Linear::new`].
    pub fn for_model(
        weight: &Array,
        bias: Option<Array>,
        kernels: Kernels,
        role: Option<Role>,
    ) -> Result<Self, Exception> {
        let shape = weight.shape();
        let [out, k] = [shape[0] as usize, shape[1] as usize];
        if let (Some(int8), Some(role)) = (kernels.int8, role) {
            let w = host_values(weight)?;
            let bias = bias.map(|b| host_values(&b)).transpose()?;
            return Ok(Linear::Host(HostLinear::Int8(Quantized {
                layer: Int8Linear::new(&w, out, k, bias),
                kernel: int8.kernel,
                activations: int8.activations.for_role(role),
            })));
        }
        match kernels.host_gemm {
            // Set only in f32; the weight may still be in the file's dtype (its values are
            // read into f32 here).
            Some(kernel) => {
                let bias = bias.map(|b| host_values(&b)).transpose()?;
                let layer = if weight.dtype() == Dtype::Float16 {
                    // Packed from the file's values in place: an f32 copy first would be
                    // fresh memory, page faults and all, for every weight of the checkpoint.
                    let w = weight.contiguous()?;
                    let values = w.try_as_slice::<half::f16>().map_err(|e| {
                        Exception::custom(format!("reading a linear layer's values: {e}"))
                    })?;
                    F32Linear::new(values, out, k, bias, kernel)
                } else {
                    F32Linear::new(&host_values(weight)?, out, k, bias, kernel)
                };
                if layer.kernel() != kernel {
                    tracing::debug!(
                        out,
                        k,
                        asked = kernel.name(),
                        runs = layer.kernel().name(),
                        "a linear layer's weights are not two bf16 values each"
                    );
                }
                Ok(Linear::Host(HostLinear::F32(layer)))
            }
            None => Linear::new(weight, bias, kernels.upcast),
        }
    }

    /// `x` is `[n, in]`; the result is `[n, out]`, in the layer's dtype (an f32 input meets
    /// f16 weights as f16, like a linear layer under autocast; host layers give f32).
    pub fn forward(&self, x: &Array) -> Result<Array, Exception> {
        match self {
            Linear::Dense(d) => d.forward(x),
            Linear::Host(h) => {
                let x = x.as_dtype(Dtype::Float32)?.contiguous()?;
                let values = x.try_as_slice::<f32>().map_err(|e| {
                    Exception::custom(format!("reading a linear layer's input: {e}"))
                })?;
                let mut y = Vec::new();
                let rows = h.forward_host(values, &mut y).len() / h.out_features().max(1);
                Ok(Array::from_slice(
                    &y,
                    &[rows as i32, h.out_features() as i32],
                ))
            }
        }
    }

    /// A layer whose output feeds GeGLU: an f32 host layer with its halves paired
    /// ([`F32Linear::pair_halves`]) so that [`HostLinear::forward_geglu`] can fuse it; any
    /// other layer as it is.
    pub fn for_geglu(self) -> Self {
        match self {
            Linear::Host(HostLinear::F32(layer)) => {
                Linear::Host(HostLinear::F32(layer.pair_halves()))
            }
            other => other,
        }
    }

    /// The host layer, for callers that keep its input and output on the host.
    pub fn host(&self) -> Option<&HostLinear> {
        match self {
            Linear::Host(h) => Some(h),
            Linear::Dense(_) => None,
        }
    }
}

impl HostLinear {
    /// Output channels.
    pub fn out_features(&self) -> usize {
        match self {
            HostLinear::F32(layer) => layer.out_features(),
            HostLinear::Int8(q) => q.layer.out_features(),
        }
    }

    /// `x` (`[rows, in]`, f32 on the host) through the layer into `buf`, which grows as
    /// needed and is otherwise reused (its pages stay mapped from one call to the next);
    /// returns the `[rows, out]` values, the same bits as [`Linear::forward`].
    pub fn forward_host<'b>(&self, x: &[f32], buf: &'b mut Vec<f32>) -> &'b [f32] {
        let (k, out) = match self {
            HostLinear::F32(layer) => (layer.in_features(), layer.out_features()),
            HostLinear::Int8(q) => (q.layer.in_features(), q.layer.out_features()),
        };
        let n = x.len() / k.max(1) * out;
        if buf.len() < n {
            buf.resize(n, 0.0);
        }
        let y = &mut buf[..n];
        self.forward_into(x, y);
        y
    }

    /// `y += x · wᵀ (+ b)`, the residual stream's add (`y` holds `[rows, out]`): the f32
    /// kernels add as they store; int8 layers compute into `buf` and add from there. The
    /// same bits either way as [`crate::host::add_assign`] after
    /// [`HostLinear::forward_host`].
    pub fn forward_add(&self, x: &[f32], y: &mut [f32], buf: &mut Vec<f32>) {
        match self {
            HostLinear::F32(layer) => layer.forward_add_into(x, y),
            HostLinear::Int8(_) => crate::host::add_assign(y, self.forward_host(x, buf)),
        }
    }

    /// GeGLU on the layer's output (`[rows, 2·inter]`, see [`crate::host::geglu`]) into
    /// `out`, resized to `[rows, inter]`: in the GEMM's stores where the layer fuses it
    /// ([`F32Linear::fuses_geglu`]), else through `wide`. The same bits either way.
    pub fn forward_geglu(&self, x: &[f32], wide: &mut Vec<f32>, out: &mut Vec<f32>) {
        match self {
            HostLinear::F32(layer) if layer.fuses_geglu() => {
                let rows = x.len() / layer.in_features().max(1);
                out.resize(rows * layer.out_features() / 2, 0.0);
                layer.forward_geglu_into(x, out);
            }
            _ => crate::host::geglu_into(self.forward_host(x, wide), self.out_features() / 2, out),
        }
    }

    /// [`HostLinear::forward_host`] into `y`, which must hold exactly `[rows, out]`.
    pub fn forward_into(&self, x: &[f32], y: &mut [f32]) {
        match self {
            HostLinear::F32(layer) => layer.forward_into(x, y),
            HostLinear::Int8(q) => q.layer.forward_into(x, q.kernel, q.activations, y),
        }
    }
}

impl Dense {
    fn forward(&self, x: &Array) -> Result<Array, Exception> {
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

/// `a`'s values in f32, row-major, evaluated here.
fn host_values(a: &Array) -> Result<Vec<f32>, Exception> {
    let a = a.as_dtype(Dtype::Float32)?.contiguous()?;
    a.try_as_slice::<f32>()
        .map(<[f32]>::to_vec)
        .map_err(|e| Exception::custom(format!("reading a linear layer's values: {e}")))
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
