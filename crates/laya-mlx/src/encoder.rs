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

use crate::attention::{packed_attention, Heads, PaddedBatch, Span, Window};
use crate::error::LoadError;
use crate::host_attention::{self, RopeTables};
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

/// `x`'s values, evaluated here (`x` must be f32 and contiguous).
fn host_values<'a>(x: &'a Array, what: &str) -> Result<&'a [f32], Exception> {
    x.try_as_slice::<f32>()
        .map_err(|e| Exception::custom(format!("reading {what}: {e}")))
}

/// The host buffers of the host layers, reused from layer to layer and forward to forward:
/// `Wqkv`'s and `Wi`'s outputs are computed a few rows at a time (13 MB and 21 MB at most
/// for rows up to 1,024 tokens), the layers' outputs are 22 MB at 5,500 tokens, and a fresh
/// buffer each time costs its page faults, and a copy into MLX and back out another pass
/// over it.
#[derive(Debug, Default)]
struct HostBuffers {
    qkv: Vec<f32>,
    attn_out: Vec<f32>,
    wi_out: Vec<f32>,
    geglu: Vec<f32>,
    mlp_out: Vec<f32>,
}

/// Rows the host's feed-forward half computes at a time ([`Encoder::feed_forward_on_host`]).
const FEED_FORWARD_ROWS: usize = 1024;

/// Tokens the host's attention half takes at a time ([`Encoder::attention_on_host`]): as
/// many whole rows as fit, and a longer row alone.
const ATTENTION_TOKENS: usize = 1024;

/// `spans` (contiguous, in order) cut into runs of consecutive rows of at most `tokens`
/// tokens together, a longer row in a run of its own.
fn row_groups(spans: &[Span], tokens: usize) -> impl Iterator<Item = &[Span]> {
    let mut rest = spans;
    std::iter::from_fn(move || {
        let first = rest.first()?;
        let mut n = 1;
        let mut total = first.len;
        while let Some(next) = rest.get(n) {
            if total + next.len > tokens {
                break;
            }
            total += next.len;
            n += 1;
        }
        let (group, tail) = rest.split_at(n);
        rest = tail;
        Some(group)
    })
}

/// The tap of a normal forward: looks at nothing.
pub(crate) fn no_tap(_: &str, _: &Array) -> Result<(), Exception> {
    Ok(())
}

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
    kind: LayerKind,
    rope_theta: f32,
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
    /// With host linear layers and host attention, what `Wqkv`, attention, `attn.Wo`, `Wi`,
    /// the GeGLU and `mlp.Wo` pass each other stays on the host, in these.
    host_buffers: std::sync::Mutex<HostBuffers>,
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
        let linear =
            |store: &mut TensorStore, name: &str, int8: bool| -> Result<Linear, LoadError> {
                let w = store.take(name)?;
                Linear::for_model(&w, None, kernels, int8).map_err(|source| LoadError::Mlx {
                    context: format!("preparing {name}"),
                    source,
                })
            };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for (l, &kind) in cfg.layer_kinds.iter().enumerate() {
            let p = format!("encoder.layers.{l}");
            layers.push(EncoderLayer {
                attn_norm: if l == 0 {
                    None
                } else {
                    Some(norm(store, &format!("{p}.attn_norm.weight"))?)
                },
                wqkv: linear(store, &format!("{p}.attn.Wqkv.weight"), true)?,
                wo: linear(store, &format!("{p}.attn.Wo.weight"), true)?,
                mlp_norm: norm(store, &format!("{p}.mlp_norm.weight"))?,
                wi: linear(store, &format!("{p}.mlp.Wi.weight"), true)?,
                mlp_wo: linear(store, &format!("{p}.mlp.Wo.weight"), false)?,
                kind,
                rope_theta: cfg.rope_theta(kind),
            });
        }
        Ok(Encoder {
            tok_embeddings: store.take("encoder.embeddings.tok_embeddings.weight")?,
            emb_norm: norm(store, "encoder.embeddings.norm.weight")?,
            layers,
            final_norm: norm(store, "encoder.final_norm.weight")?,
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
            host_buffers: std::sync::Mutex::default(),
        })
    }

    /// `ids` is `[T]` (all rows' tokens packed, spans `spans`); returns `h_enc`, `[T, d]`.
    /// `tap` sees the residual stream after the embeddings and after each half of each layer
    /// (a probe compares them across devices; the engine passes [`no_tap`]).
    pub fn forward(&self, ids: &Array, spans: &[Span], tap: &mut Tap) -> Result<Array, Exception> {
        // The residual stream is f32 at every precision, as under PyTorch's autocast: only
        // the matmuls and attention run in the compute dtype (`Linear` casts its input).
        let mut x = self.emb_norm.forward(
            &self
                .tok_embeddings
                .take_axis(ids, 0)?
                .as_dtype(mlx_rs::Dtype::Float32)?,
        )?;
        let padded = self.padded.then(|| PaddedBatch::new(spans, spans));
        tap("embeddings", &x)?;
        for (l, layer) in self.layers.iter().enumerate() {
            let _span = tracing::trace_span!("encoder_layer", l, kind = ?layer.kind).entered();
            let a = match &layer.attn_norm {
                Some(n) => n.forward(&x)?,
                None => x.clone(),
            };
            // With host linear layers and the host math, what passes between the linear
            // layers, attention and the GeGLU never becomes an MLX array.
            let host = match (layer.wqkv.host(), layer.wo.host(), layer.wi.host()) {
                (Some(wqkv), Some(wo), Some(wi)) if self.host_attention && self.host_geglu => {
                    Some((wqkv, wo, wi))
                }
                _ => None,
            };
            if let Some((wqkv, wo, wi)) = host {
                x = x.add(self.attention_on_host(&a, spans, layer, wqkv, wo)?)?;
                tap(&format!("layer {l} attention"), &x)?;
                let m = layer.mlp_norm.forward(&x)?;
                x = x.add(self.feed_forward_on_host(&m, wi, &layer.mlp_wo)?)?;
                tap(&format!("layer {l} mlp"), &x)?;
                continue;
            }
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
            tap(&format!("layer {l} attention"), &x)?;

            let h = layer.wi.forward(&layer.mlp_norm.forward(&x)?)?;
            let g = if self.host_geglu {
                host_geglu(&h, self.intermediate)?
            } else {
                let halves = ops::split_at_indices(&h, &[self.intermediate as i32], 1)?;
                gelu_erf(&halves[0])?.multiply(&halves[1])?
            };
            x = x.add(layer.mlp_wo.forward(&g)?)?;
            tap(&format!("layer {l} mlp"), &x)?;
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

    /// The attention half on the host: `Wqkv`, attention and `attn.Wo` pass host values to
    /// each other; returns `attn.Wo`'s output (`[T, d]`, f32). The same operations as the
    /// path through MLX arrays, so the same bits.
    fn attention_on_host(
        &self,
        a: &Array,
        spans: &[Span],
        layer: &EncoderLayer,
        wqkv: &HostLinear,
        wo: &HostLinear,
    ) -> Result<Array, Exception> {
        let a = a.as_dtype(mlx_rs::Dtype::Float32)?.contiguous()?;
        let values = host_values(&a, "the attention input")?;
        let mut buffers = self.host_buffers.lock().unwrap_or_else(|e| e.into_inner());
        let HostBuffers { qkv, attn_out, .. } = &mut *buffers;
        let d = self.hidden;
        let tokens = values.len() / d;
        attn_out.resize(tokens * d, 0.0);
        // A few whole rows at a time: `Wqkv`'s output is three times the layer's width, 68
        // MB at 5,500 tokens whole. Attention never crosses a row and every GEMM row is
        // computed on its own, so the groups give the same bits.
        for group in row_groups(spans, ATTENTION_TOKENS) {
            let lo = group[0].start;
            let hi = group.last().map_or(lo, |s| s.start + s.len);
            let local: Vec<Span> = group
                .iter()
                .map(|s| Span {
                    start: s.start - lo,
                    len: s.len,
                })
                .collect();
            let qkv = wqkv.forward_host(&values[lo * d..hi * d], qkv);
            let attn = self.attend_on_host(qkv, &local, layer);
            wo.forward_into(&attn, &mut attn_out[lo * d..hi * d]);
        }
        Ok(Array::from_slice(
            &attn_out[..tokens * d],
            &[tokens as i32, d as i32],
        ))
    }

    /// The feed-forward half on the host: `Wi`, the GeGLU and (when it is a host layer)
    /// `mlp_wo` pass host values to each other; returns `mlp_wo`'s output (`[T, d]`).
    fn feed_forward_on_host(
        &self,
        m: &Array,
        wi: &HostLinear,
        mlp_wo: &Linear,
    ) -> Result<Array, Exception> {
        let m = m.as_dtype(mlx_rs::Dtype::Float32)?.contiguous()?;
        let values = host_values(&m, "the feed-forward input")?;
        let mut buffers = self.host_buffers.lock().unwrap_or_else(|e| e.into_inner());
        let HostBuffers {
            wi_out,
            geglu,
            mlp_out,
            ..
        } = &mut *buffers;
        let (d, inter) = (self.hidden, self.intermediate);
        let rows = values.len() / d;
        let Some(mlp_wo) = mlp_wo.host() else {
            let h = wi.forward_host(values, wi_out);
            crate::host::geglu_into(h, inter, geglu);
            return mlp_wo.forward(&Array::from_slice(geglu, &[rows as i32, inter as i32]));
        };
        // In blocks of rows: `Wi`'s output is 2.5 times the layer's width, and whole it is
        // 115 MB at 5,500 tokens (with the GeGLU's, 172 MB more peak memory). Every row is
        // computed on its own, so the blocks give the same bits.
        mlp_out.resize(rows * d, 0.0);
        for (x, y) in values
            .chunks(FEED_FORWARD_ROWS * d)
            .zip(mlp_out.chunks_mut(FEED_FORWARD_ROWS * d))
        {
            let h = wi.forward_host(x, wi_out);
            crate::host::geglu_into(h, inter, geglu);
            mlp_wo.forward_into(geglu, y);
        }
        Ok(Array::from_slice(mlp_out, &[rows as i32, d as i32]))
    }

    /// Vocabulary size (token ids must be below it).
    pub fn vocab_size(&self) -> usize {
        self.tok_embeddings.shape()[0] as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::spans_from_lengths;

    fn lengths(groups: Vec<&[Span]>) -> Vec<Vec<usize>> {
        groups
            .iter()
            .map(|g| g.iter().map(|s| s.len).collect())
            .collect()
    }

    #[test]
    fn row_groups_keep_rows_whole_and_in_order() {
        let spans = spans_from_lengths([300, 700, 25, 2000, 1024, 1, 1]);
        assert_eq!(
            lengths(row_groups(&spans, 1024).collect()),
            vec![vec![300, 700], vec![25], vec![2000], vec![1024], vec![1, 1]]
        );
        assert_eq!(row_groups(&[], 1024).count(), 0);
    }
}
