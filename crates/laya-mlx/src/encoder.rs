//! The ModernBERT / mmBERT encoder (`model.md` §3.1), on packed rows.
//!
//! Embeddings → bias-free LayerNorm; per layer (pre-norm; layer 0 has no `attn_norm`):
//! fused `Wqkv`, RoPE with the layer kind's theta (global theta on full layers, local theta
//! on sliding layers), attention (full, or `|i - j| <= local_attention / 2` inclusive),
//! `Wo`, then GeGLU (`GELU_erf` of the first half of `Wi`'s output times the second half)
//! and `Wo`; finally the bias-free `final_norm`. No biases anywhere.
//! ModernBERT: <https://arxiv.org/abs/2412.13663>, transformers `ModernBertModel`.

use laya_core::config::{EncoderConfig, LayerKind};
use mlx_rs::error::Exception;
use mlx_rs::{ops, Array};

use crate::attention::{
    packed_attention, row_groups, Heads, PaddedBatch, RowGroup, Span, Window, ROW_GROUP_TOKENS,
};
use crate::error::LoadError;
use crate::host::{add_assign, Buffers, HostNorm};
use crate::host_attention::{self, RopeTables};
use crate::int8::Role;
use crate::layers::{gelu_erf, HostLinear, LayerNorm, Linear};
use crate::settings::{Kernels, SlidingAttention};
use crate::weights::TensorStore;

/// A look at an intermediate array, by name.
pub(crate) type Tap<'a> = dyn FnMut(&str, &Array) -> Result<(), Exception> + 'a;

/// GeGLU on the host ([`crate::host::geglu`]): evaluates `h` (`[T, 2·inter]`) here, in f32,
/// and returns the result in `h`'s dtype.
fn host_geglu(h: &Array, inter: usize) -> Result<Array, Exception> {
    let io = h.dtype();
    let h = h.as_dtype(mlx_rs::Dtype::Float32)?;
    let values = h
        .try_as_slice::<f32>()
        .map_err(|e| Exception::custom(format!("reading the GeGLU input: {e}")))?;
    let rows = values.len() / (2 * inter);
    Array::from_slice(
        &crate::host::geglu(values, inter),
        &[rows as i32, inter as i32],
    )
    .as_dtype(io)
}

/// `norm`'s weight and bias read onto the host.
pub(crate) fn host_norm(norm: &LayerNorm) -> Result<HostNorm, LoadError> {
    let read = |a: &Array| -> Result<Vec<f32>, LoadError> {
        let values = || -> Result<Vec<f32>, Exception> {
            let a = a.as_dtype(mlx_rs::Dtype::Float32)?.contiguous()?;
            Ok(host_values(&a, "a norm's weights")?.to_vec())
        };
        values().map_err(|source| LoadError::Mlx {
            context: "reading a norm's weights".to_owned(),
            source,
        })
    };
    Ok(HostNorm {
        weight: read(&norm.weight)?,
        bias: norm.bias.as_ref().map(read).transpose()?,
        eps: norm.eps,
    })
}

/// `x`'s values, evaluated here (`x` must be f32 and contiguous).
fn host_values<'a>(x: &'a Array, what: &str) -> Result<&'a [f32], Exception> {
    x.try_as_slice::<f32>()
        .map_err(|e| Exception::custom(format!("reading {what}: {e}")))
}

/// Rows the host's feed-forward halves compute at a time ([`Encoder::forward_on_host`],
/// `DecisionHead::forward_on_host`): the encoder's `Wi` output is 2.5 times the layer's
/// width, the head's `linear1` output 4 times.
pub(crate) const FEED_FORWARD_ROWS: usize = 1024;

/// One encoder layer.
#[derive(Debug)]
struct EncoderLayer {
    /// `None` on layer 0 (ModernBERT's first layer has no attention norm).
    attn_norm: Option<LayerNorm>,
    wqkv: Linear,
    wo: Linear,
    mlp_norm: LayerNorm,
    wi: Linear,
    mlp_wo: Linear,
    /// The norms' weights on the host, for the host path ([`Encoder::forward_on_host`]).
    host_norms: (Option<HostNorm>, HostNorm),
    kind: LayerKind,
    rope_theta: f32,
}

/// One layer whose `Wqkv`, `attn.Wo` and `Wi` are host layers ([`Encoder::host_layers`]).
struct HostLayer<'a> {
    wqkv: &'a HostLinear,
    wo: &'a HostLinear,
    wi: &'a HostLinear,
    layer: &'a EncoderLayer,
}

/// The encoder's weights and shape.
#[derive(Debug)]
pub(crate) struct Encoder {
    tok_embeddings: Array,
    emb_norm: LayerNorm,
    layers: Vec<EncoderLayer>,
    final_norm: LayerNorm,
    heads: Heads,
    hidden: usize,
    intermediate: usize,
    half_window: usize,
    sliding: SlidingAttention,
    /// Attention over one padded batch instead of one batch per row length.
    padded: bool,
    /// The GeGLU computed on the host ([`crate::EngineSettings::host_math`]).
    host_geglu: bool,
    /// Self-attention (with RoPE) computed on the host ([`crate::host_attention`]): with the
    /// host math, on per-row (unpadded) attention.
    host_attention: bool,
    rope_tables: RopeTables,
    /// `final_norm`'s weight on the host, for the host path ([`Encoder::forward_on_host`]).
    host_final_norm: HostNorm,
}

impl Encoder {
    pub fn load(
        store: &mut TensorStore,
        cfg: &EncoderConfig,
        sliding: SlidingAttention,
        kernels: Kernels,
    ) -> Result<Self, LoadError> {
        let eps = cfg.norm_eps;
        let norm = |store: &mut TensorStore, name: &str| -> Result<LayerNorm, LoadError> {
            Ok(LayerNorm {
                weight: store.take(name)?,
                bias: None,
                eps,
            })
        };
        // `int8` for this layer: every linear layer but the feed-forward output (see
        // `EngineSettings::int8`).
        let linear = |store: &mut TensorStore,
                      name: &str,
                      int8: Option<Role>|
         -> Result<Linear, LoadError> {
            let w = store.take(name)?;
            Linear::for_model(&w, None, kernels, int8).map_err(|source| LoadError::Mlx {
                context: format!("preparing {name}"),
                source,
            })
        };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for (l, &kind) in cfg.layer_kinds.iter().enumerate() {
            let p = format!("encoder.layers.{l}");
            let attn_norm = if l == 0 {
                None
            } else {
                Some(norm(store, &format!("{p}.attn_norm.weight"))?)
            };
            let mlp_norm = norm(store, &format!("{p}.mlp_norm.weight"))?;
            let host_norms = (
                attn_norm.as_ref().map(host_norm).transpose()?,
                host_norm(&mlp_norm)?,
            );
            layers.push(EncoderLayer {
                attn_norm,
                wqkv: linear(store, &format!("{p}.attn.Wqkv.weight"), Some(Role::Qkv))?,
                wo: linear(
                    store,
                    &format!("{p}.attn.Wo.weight"),
                    Some(Role::AttentionOut),
                )?,
                mlp_norm,
                wi: linear(
                    store,
                    &format!("{p}.mlp.Wi.weight"),
                    Some(Role::FeedForwardIn),
                )?
                .for_geglu(),
                mlp_wo: linear(store, &format!("{p}.mlp.Wo.weight"), None)?,
                host_norms,
                kind,
                rope_theta: cfg.rope_theta(kind),
            });
        }
        let final_norm = norm(store, "encoder.final_norm.weight")?;
        Ok(Encoder {
            tok_embeddings: store.take("encoder.embeddings.tok_embeddings.weight")?,
            emb_norm: norm(store, "encoder.embeddings.norm.weight")?,
            layers,
            host_final_norm: host_norm(&final_norm)?,
            final_norm,
            heads: Heads {
                heads: cfg.num_attention_heads,
                head_dim: cfg.head_dim(),
                contiguous: kernels.contiguous_heads,
                host_softmax: kernels.host_math,
                upcast: kernels.upcast,
            },
            hidden: cfg.hidden_size,
            intermediate: cfg.intermediate_size,
            half_window: cfg.half_window(),
            sliding,
            padded: kernels.padded,
            host_geglu: kernels.host_math,
            host_attention: kernels.host_math && !kernels.padded,
            rope_tables: RopeTables::default(),
        })
    }

    /// The embeddings' output for `ids`, `[T, d]`, f32. `tap` sees it.
    fn embed(&self, ids: &Array, tap: Option<&mut Tap>) -> Result<Array, Exception> {
        // The residual stream is f32 at every precision, as under PyTorch's autocast: only
        // the matmuls and attention run in the compute dtype (`Linear` casts its input).
        let x = self.emb_norm.forward(
            &self
                .tok_embeddings
                .take_axis(ids, 0)?
                .as_dtype(mlx_rs::Dtype::Float32)?,
        )?;
        if let Some(tap) = tap {
            tap("embeddings", &x)?;
        }
        Ok(x)
    }

    /// Whether the whole encoder can run on the host ([`Encoder::forward_on_host`]): host
    /// attention, host GeGLU, and host `Wqkv`, `attn.Wo` and `Wi` in every layer.
    pub fn runs_on_host(&self) -> bool {
        self.host_attention && self.host_geglu && self.host_layers().is_some()
    }

    /// `ids` is `[T]` (all rows' tokens packed, spans `spans`); returns `h_enc`, `[T, d]`.
    /// `tap` sees the residual stream after the embeddings and after each half of each layer
    /// (a probe compares them across devices).
    pub fn forward(
        &self,
        ids: &Array,
        spans: &[Span],
        mut tap: Option<&mut Tap>,
    ) -> Result<Array, Exception> {
        let mut x = self.embed(ids, tap.as_deref_mut())?;
        let padded = self.padded.then(|| PaddedBatch::new(spans, spans));
        for (l, layer) in self.layers.iter().enumerate() {
            let _span = tracing::trace_span!("encoder_layer", l, kind = ?layer.kind).entered();
            let a = match &layer.attn_norm {
                Some(n) => n.forward(&x)?,
                None => x.clone(),
            };
            let qkv = layer.wqkv.forward(&a)?;
            let attn = if self.host_attention {
                self.host_self_attention(&qkv, spans, layer)?
            } else {
                let d = self.hidden as i32;
                let parts = ops::split_at_indices(&qkv, &[d, 2 * d], 1)?;
                let window = match layer.kind {
                    LayerKind::Global => Window::Full,
                    LayerKind::Sliding => Window::Sliding {
                        half: self.half_window,
                        layout: self.sliding,
                    },
                };
                packed_attention(
                    &parts[0],
                    &parts[1],
                    &parts[2],
                    spans,
                    spans,
                    self.heads,
                    Some(layer.rope_theta),
                    window,
                    padded.as_ref(),
                )?
            };
            x = x.add(layer.wo.forward(&attn)?)?;
            if let Some(tap) = tap.as_deref_mut() {
                tap(&format!("layer {l} attention"), &x)?;
            }

            let h = layer.wi.forward(&layer.mlp_norm.forward(&x)?)?;
            let g = if self.host_geglu {
                host_geglu(&h, self.intermediate)?
            } else {
                let halves = ops::split_at_indices(&h, &[self.intermediate as i32], 1)?;
                gelu_erf(&halves[0])?.multiply(&halves[1])?
            };
            x = x.add(layer.mlp_wo.forward(&g)?)?;
            if let Some(tap) = tap.as_deref_mut() {
                tap(&format!("layer {l} mlp"), &x)?;
            }
        }
        self.final_norm.forward(&x)
    }

    /// One layer's attention from its fused `qkv` (`[T, 3d]`) on the host, in f32; returns
    /// `[T, d]` in `qkv`'s dtype.
    fn host_self_attention(
        &self,
        qkv: &Array,
        spans: &[Span],
        layer: &EncoderLayer,
    ) -> Result<Array, Exception> {
        let io = qkv.dtype();
        let qkv = qkv.as_dtype(mlx_rs::Dtype::Float32)?;
        let out = self.attend_on_host(host_values(&qkv, "the attention input")?, spans, layer);
        let tokens = (out.len() / self.hidden) as i32;
        Array::from_slice(&out, &[tokens, self.hidden as i32]).as_dtype(io)
    }

    /// One layer's attention, with RoPE and the layer kind's window, from the host values of
    /// its fused `qkv` (`[T, 3d]`); returns `[T, d]`.
    fn attend_on_host(&self, qkv: &[f32], spans: &[Span], layer: &EncoderLayer) -> Vec<f32> {
        let longest = spans.iter().map(|s| s.len).max().unwrap_or(0);
        let (heads, head_dim) = (self.heads.heads, self.heads.head_dim);
        let rope = self.rope_tables.get(layer.rope_theta, head_dim, longest);
        let half = match layer.kind {
            LayerKind::Global => None,
            LayerKind::Sliding => Some(self.half_window),
        };
        host_attention::self_attention(qkv, spans, heads, head_dim, &rope, half)
    }

    /// Every layer's linear layers on the host, or `None` if one of `Wqkv`, `attn.Wo` and
    /// `Wi` is not a host layer (`mlp.Wo` may be either).
    fn host_layers(&self) -> Option<Vec<HostLayer<'_>>> {
        self.layers
            .iter()
            .map(|layer| {
                Some(HostLayer {
                    wqkv: layer.wqkv.host()?,
                    wo: layer.wo.host()?,
                    wi: layer.wi.host()?,
                    layer,
                })
            })
            .collect()
    }

    /// [`Encoder::forward`] with the layers on the host ([`Encoder::runs_on_host`]): from
    /// the embeddings' output to `h_enc`, left in `buffers.residual` (`[T, d]`, f32), the
    /// residual stream never becomes an MLX array. `mlp.Wo` runs through MLX where it is not
    /// a host layer (`--int8` without the host f32 GEMMs).
    ///
    /// An error unless [`Encoder::runs_on_host`].
    pub fn forward_on_host(
        &self,
        ids: &Array,
        spans: &[Span],
        mut tap: Option<&mut Tap>,
        buffers: &mut Buffers,
    ) -> Result<(), Exception> {
        let layers = self
            .host_layers()
            .filter(|_| self.host_attention && self.host_geglu)
            .ok_or_else(|| Exception::custom("the encoder does not run on the host"))?;
        let x = self.embed(ids, tap.as_deref_mut())?;
        let (d, inter) = (self.hidden, self.intermediate);
        let Buffers {
            residual,
            normed,
            projected: qkv,
            to_add,
            wide: wi_out,
            geglu,
            ..
        } = buffers;
        let x = x.as_dtype(mlx_rs::Dtype::Float32)?.contiguous()?;
        residual.clear();
        residual.extend_from_slice(host_values(&x, "the embeddings")?);
        let tokens = residual.len() / d;
        let shape = [tokens as i32, d as i32];
        let groups: Vec<RowGroup> = row_groups(spans, ROW_GROUP_TOKENS).collect();
        for (l, host) in layers.iter().enumerate() {
            let layer = host.layer;
            let _span = tracing::trace_span!("encoder_layer", l, kind = ?layer.kind).entered();
            let (attn_norm, mlp_norm) = &layer.host_norms;
            match attn_norm {
                Some(n) => n.forward_into(residual, normed),
                None => {
                    normed.clear();
                    normed.extend_from_slice(residual);
                }
            }
            // A few whole rows at a time: `Wqkv`'s output is three times the layer's width,
            // 68 MB at 5,500 tokens whole. Attention never crosses a row and every GEMM row
            // is computed on its own, so the groups give the same bits.
            for group in &groups {
                let rows = group.start * d..group.end * d;
                let qkv = host.wqkv.forward_host(&normed[rows.clone()], qkv);
                let attn = self.attend_on_host(qkv, &group.spans, layer);
                host.wo.forward_add(&attn, &mut residual[rows], to_add);
            }
            if let Some(tap) = tap.as_deref_mut() {
                tap(
                    &format!("layer {l} attention"),
                    &Array::from_slice(residual, &shape),
                )?;
            }
            // In blocks of rows: `Wi`'s output (where GeGLU is not in its stores) is 2.5
            // times the layer's width, and whole it is 115 MB at 5,500 tokens. Every host
            // GEMM row is computed on its own, so the blocks give the same bits (an `mlp.Wo`
            // through MLX's GEMM, the same values).
            mlp_norm.forward_into(residual, normed);
            for (x, m) in residual
                .chunks_mut(FEED_FORWARD_ROWS * d)
                .zip(normed.chunks(FEED_FORWARD_ROWS * d))
            {
                host.wi.forward_geglu(m, wi_out, geglu);
                match layer.mlp_wo.host() {
                    Some(mlp_wo) => mlp_wo.forward_add(geglu, x, to_add),
                    None => {
                        let rows = (geglu.len() / inter) as i32;
                        let y = layer
                            .mlp_wo
                            .forward(&Array::from_slice(geglu, &[rows, inter as i32]))?
                            .as_dtype(mlx_rs::Dtype::Float32)?;
                        add_assign(x, host_values(&y, "mlp.Wo's output")?);
                    }
                }
            }
            if let Some(tap) = tap.as_deref_mut() {
                tap(
                    &format!("layer {l} mlp"),
                    &Array::from_slice(residual, &shape),
                )?;
            }
        }
        self.host_final_norm.forward_into(residual, normed);
        std::mem::swap(residual, normed);
        Ok(())
    }

    /// Vocabulary size (token ids must be below it).
    pub fn vocab_size(&self) -> usize {
        self.tok_embeddings.shape()[0] as usize
    }
}
