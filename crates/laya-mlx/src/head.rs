//! Everything after the encoder (`model.md` §3.2–3.5): the decision head
//! (`head_layers` × `torch.nn.TransformerEncoderLayer`, pre-norm, ReLU, `4d` feed-forward,
//! full attention over the row's tokens, no positions, no final norm), the option scorer at
//! the markers, and the act head on position 0 plus features of the untempered softmax.

use mlx_rs::error::Exception;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::{ops, Array};

use crate::attention::{
    packed_attention, row_groups, Heads, PaddedBatch, Span, Window, ROW_GROUP_TOKENS,
};
use crate::encoder::{host_norm, FEED_FORWARD_ROWS};
use crate::error::LoadError;
use crate::host::{relu_in_place, Buffers, HostNorm};
use crate::host_attention;
use crate::layers::{gelu_erf, HostLinear, LayerNorm, Linear};
use crate::settings::Kernels;
use crate::weights::{head_heads, TensorStore};

/// PyTorch's `LayerNorm` default, used by the head, the scorer and nothing in the encoder.
const HEAD_NORM_EPS: f32 = 1e-5;

fn mlx(name: &str) -> impl FnOnce(Exception) -> LoadError + '_ {
    move |source| LoadError::Mlx {
        context: format!("preparing {name}"),
        source,
    }
}

/// A linear layer of the decision head ([`Linear::for_model`]), f32 even under `--int8`.
///
/// Two layers against the encoder's 28, but right before the softmaxes, so their rounding
/// moves picks out of proportion: in int8 the head flipped a quarter of the picks that
/// `--int8` flips on the fixtures (441 of 480 agreeing with f32 with the head in int8, 453
/// with it in f32; 472 and 476 with split activations). Its f32 GEMMs cost an `--int8`
/// forward ~9 % at 207 tokens and ~3 % at ten rows of 550 (`results/CPU.md`).
fn head_linear(
    store: &mut TensorStore,
    prefix: &str,
    kernels: Kernels,
) -> Result<Linear, LoadError> {
    let w = store.take(&format!("{prefix}.weight"))?;
    let b = store.take(&format!("{prefix}.bias"))?;
    head_weights(&w, b, kernels).map_err(mlx(prefix))
}

/// [`head_linear`] for weights already taken from the store.
fn head_weights(w: &Array, b: Array, kernels: Kernels) -> Result<Linear, Exception> {
    Linear::for_model(w, Some(b), kernels, None)
}

fn layer_norm(store: &mut TensorStore, prefix: &str) -> Result<LayerNorm, LoadError> {
    Ok(LayerNorm {
        weight: store.take(&format!("{prefix}.weight"))?,
        bias: Some(store.take(&format!("{prefix}.bias"))?),
        eps: HEAD_NORM_EPS,
    })
}

/// One `TransformerEncoderLayer(norm_first=True, activation=relu)`.
#[derive(Debug)]
struct HeadLayer {
    norm1: LayerNorm,
    /// `in_proj` rows `0..d` (queries) and `d..3d` (keys, values), as two linears so the
    /// last layer can project queries at a few positions only.
    q_proj: Linear,
    kv_proj: Linear,
    out_proj: Linear,
    norm2: LayerNorm,
    linear1: Linear,
    linear2: Linear,
    /// `norm1` and `norm2` on the host, for the host path ([`DecisionHead::forward_on_host`]).
    host_norms: (HostNorm, HostNorm),
}

/// One layer whose linear layers are host layers, but for `linear2`, which may be either
/// ([`DecisionHead::host_layers`]).
struct HostHeadLayer<'a> {
    q_proj: &'a HostLinear,
    kv_proj: &'a HostLinear,
    out_proj: &'a HostLinear,
    linear1: &'a HostLinear,
    linear2: &'a HostLinear,
    layer: &'a HeadLayer,
}

/// The decision head.
#[derive(Debug)]
pub(crate) struct DecisionHead {
    layers: Vec<HeadLayer>,
    heads: Heads,
    hidden: usize,
    /// Attention over one padded batch instead of one batch per row length.
    padded: bool,
    /// Attention on the host ([`host_attention::cross_attention`]): with the host math, on
    /// per-row attention, for 64-wide heads (every checkpoint's: `head_heads`).
    host_attention: bool,
}

/// The head's attention on the host, in f32 (queries `q`, rows `q_spans`; keys and values
/// `kv`, `[T, 2d]`, rows `kv_spans`); the result in `q`'s dtype.
fn attention_on_host(
    q: &Array,
    q_spans: &[Span],
    kv: &Array,
    kv_spans: &[Span],
    d: usize,
) -> Result<Array, Exception> {
    let io = q.dtype();
    let (q, kv) = (
        q.as_dtype(mlx_rs::Dtype::Float32)?,
        kv.as_dtype(mlx_rs::Dtype::Float32)?,
    );
    let err = |e| Exception::custom(format!("reading the head's attention input: {e}"));
    let qv = q.try_as_slice::<f32>().map_err(err)?;
    let kvv = kv.try_as_slice::<f32>().map_err(err)?;
    let out = host_attention::cross_attention(qv, q_spans, kvv, kv_spans, d);
    let rows = (out.len() / d.max(1)) as i32;
    Array::from_slice(&out, &[rows, d as i32]).as_dtype(io)
}

impl DecisionHead {
    pub fn load(
        store: &mut TensorStore,
        hidden: usize,
        n_layers: usize,
        kernels: Kernels,
    ) -> Result<Self, LoadError> {
        let nhead = head_heads(hidden);
        if hidden.checked_rem(nhead) != Some(0) {
            return Err(LoadError::Unsupported(format!(
                "decision head: hidden size {hidden} is not a multiple of its {nhead} heads"
            )));
        }
        let mut layers = Vec::with_capacity(n_layers);
        for j in 0..n_layers {
            let p = format!("head.layers.{j}");
            let w_name = format!("{p}.self_attn.in_proj_weight");
            let w = store.take(&w_name)?;
            let b = store.take(&format!("{p}.self_attn.in_proj_bias"))?;
            let d = hidden as i32;
            let ws = ops::split_at_indices(&w, &[d], 0).map_err(mlx(&w_name))?;
            let bs = ops::split_at_indices(&b, &[d], 0).map_err(mlx(&w_name))?;
            let [wq, wkv] = <[Array; 2]>::try_from(ws)
                .map_err(|_| LoadError::Unsupported(format!("cannot split {w_name}")))?;
            let [bq, bkv] = <[Array; 2]>::try_from(bs)
                .map_err(|_| LoadError::Unsupported(format!("cannot split {w_name}")))?;
            let norm1 = layer_norm(store, &format!("{p}.norm1"))?;
            let norm2 = layer_norm(store, &format!("{p}.norm2"))?;
            layers.push(HeadLayer {
                host_norms: (host_norm(&norm1)?, host_norm(&norm2)?),
                norm1,
                q_proj: head_weights(&wq, bq, kernels).map_err(mlx(&w_name))?,
                kv_proj: head_weights(&wkv, bkv, kernels).map_err(mlx(&w_name))?,
                out_proj: head_linear(store, &format!("{p}.self_attn.out_proj"), kernels)?,
                norm2,
                linear1: head_linear(store, &format!("{p}.linear1"), kernels)?,
                linear2: head_linear(store, &format!("{p}.linear2"), kernels)?,
            });
        }
        Ok(DecisionHead {
            layers,
            heads: Heads {
                heads: nhead,
                head_dim: hidden / nhead,
                contiguous: kernels.contiguous_heads,
                host_softmax: kernels.host_math,
                upcast: kernels.upcast,
            },
            hidden,
            padded: kernels.padded,
            host_attention: kernels.host_math && !kernels.padded && hidden / nhead == 64,
        })
    }

    /// Runs the head on `x` (`[T, d]`, rows `spans`) and returns its output at the packed
    /// positions `select` (`[S]`, in `select_spans` order: row by row, each row's positions
    /// inside that row's span), `[S, d]`.
    ///
    /// Unless `full_last_layer`, the last layer runs its queries, residual and feed-forward
    /// only at the selected positions (keys and values still cover every token of the row):
    /// the other positions of the last layer are never read.
    pub fn forward(
        &self,
        x: &Array,
        spans: &[Span],
        select: &Array,
        select_spans: &[Span],
        full_last_layer: bool,
    ) -> Result<Array, Exception> {
        let n = self.layers.len();
        let mut x = x.clone();
        // Full-row attention runs in every layer but a shortened last one.
        let padded =
            (self.padded && (n > 1 || full_last_layer)).then(|| PaddedBatch::new(spans, spans));
        for (j, layer) in self.layers.iter().enumerate() {
            let _span = tracing::trace_span!("head_layer", j).entered();
            let last = j + 1 == n;
            if last && !full_last_layer {
                let a = layer.norm1.forward(&x)?;
                let kv = layer.kv_proj.forward(&a)?;
                let kvs = ops::split_at_indices(&kv, &[self.hidden as i32], 1)?;
                let a_sel = a.take_axis(select, 0)?;
                let q = layer.q_proj.forward(&a_sel)?;
                let att = if self.host_attention {
                    attention_on_host(&q, select_spans, &kv, spans, self.hidden)?
                } else {
                    packed_attention(
                        &q,
                        &kvs[0],
                        &kvs[1],
                        select_spans,
                        spans,
                        self.heads,
                        None,
                        Window::Full,
                        self.padded
                            .then(|| PaddedBatch::new(select_spans, spans))
                            .as_ref(),
                    )?
                };
                let x_sel = x.take_axis(select, 0)?.add(layer.out_proj.forward(&att)?)?;
                return layer.feed_forward(&x_sel);
            }
            x = if self.host_attention {
                // A few whole rows at a time, each group evaluated before the next: whole,
                // the layer's intermediates are ~370 MB at 5,500 tokens (its feed-forward
                // is four times the width). Every step is per row or per token, so the
                // groups give the same values.
                let mut groups = Vec::new();
                for g in row_groups(spans, ROW_GROUP_TOKENS) {
                    let rows = x.index(g.start as i32..g.end as i32);
                    let y = self.full_layer(
                        layer,
                        &layer.norm1.forward(&rows)?,
                        &rows,
                        &g.spans,
                        None,
                    )?;
                    y.eval()?;
                    groups.push(y);
                }
                ops::concatenate(&groups, 0)?
            } else {
                self.full_layer(layer, &layer.norm1.forward(&x)?, &x, spans, padded.as_ref())?
            };
        }
        x.take_axis(select, 0)
    }

    /// Every layer's linear layers on the host, or `None` if one is not a host layer (all
    /// are f32 host layers where the host has an f32 kernel, even under `--int8`).
    fn host_layers(&self) -> Option<Vec<HostHeadLayer<'_>>> {
        self.layers
            .iter()
            .map(|layer| {
                Some(HostHeadLayer {
                    q_proj: layer.q_proj.host()?,
                    kv_proj: layer.kv_proj.host()?,
                    out_proj: layer.out_proj.host()?,
                    linear1: layer.linear1.host()?,
                    linear2: layer.linear2.host()?,
                    layer,
                })
            })
            .collect()
    }

    /// Whether the head can run on the host ([`DecisionHead::forward_on_host`]): host
    /// attention and host linear layers.
    pub fn runs_on_host(&self) -> bool {
        self.host_attention && self.host_layers().is_some()
    }

    /// [`DecisionHead::forward`] on the host ([`DecisionHead::runs_on_host`]), from its
    /// input in `buffers.residual` (`[T, d]`, f32), which it overwrites; `select` holds the
    /// packed positions. The residual stream stays in the host's buffers from layer to
    /// layer, the f32 host GEMMs add into it as they store, and the output, `[S, d]` f32,
    /// becomes an MLX array. Every step is per row or per token, as in
    /// [`DecisionHead::forward`], so rows and blocks of rows give the same values. An error
    /// unless [`DecisionHead::runs_on_host`].
    pub fn forward_on_host(
        &self,
        buffers: &mut Buffers,
        spans: &[Span],
        select: &[usize],
        select_spans: &[Span],
        full_last_layer: bool,
    ) -> Result<Array, Exception> {
        let layers = self
            .host_layers()
            .filter(|_| self.host_attention)
            .ok_or_else(|| Exception::custom("the decision head does not run on the host"))?;
        let d = self.hidden;
        let Buffers {
            residual,
            normed,
            projected: kv,
            queries,
            to_add,
            wide,
            ..
        } = buffers;
        let groups: Vec<_> = row_groups(spans, ROW_GROUP_TOKENS).collect();
        let n = layers.len();
        for (j, host) in layers.iter().enumerate() {
            let _span = tracing::trace_span!("head_layer", j).entered();
            let (norm1, _) = &host.layer.host_norms;
            norm1.forward_into(residual, normed);
            if j + 1 == n && !full_last_layer {
                // Queries, residual and feed-forward at the selected positions only; keys
                // and values still cover every token.
                let mut x_sel = Vec::with_capacity(select.len() * d);
                let mut a_sel = Vec::with_capacity(select.len() * d);
                let mut rows = select_spans;
                for group in &groups {
                    let (here, rest) = rows.split_at(group.spans.len());
                    rows = rest;
                    let first = here.first().map_or(0, |s| s.start);
                    let picked = here.last().map_or(first, |s| s.start + s.len);
                    let at = &select[first..picked];
                    let q_spans: Vec<Span> = here
                        .iter()
                        .map(|s| Span {
                            start: s.start - first,
                            len: s.len,
                        })
                        .collect();
                    a_sel.clear();
                    for &p in at {
                        a_sel.extend_from_slice(&normed[p * d..(p + 1) * d]);
                    }
                    let x0 = x_sel.len();
                    for &p in at {
                        x_sel.extend_from_slice(&residual[p * d..(p + 1) * d]);
                    }
                    let group_rows = group.start * d..group.end * d;
                    let keys = host.kv_proj.forward_host(&normed[group_rows], kv);
                    let q = host.q_proj.forward_host(&a_sel, queries);
                    let att = host_attention::cross_attention(q, &q_spans, keys, &group.spans, d);
                    host.out_proj.forward_add(&att, &mut x_sel[x0..], to_add);
                }
                self.feed_forward_on_host(host, &mut x_sel, normed, wide, to_add);
                return Ok(Array::from_slice(&x_sel, &[select.len() as i32, d as i32]));
            }
            // A few whole rows at a time: keys and values are twice the layer's width.
            for group in &groups {
                let rows = group.start * d..group.end * d;
                let keys = host.kv_proj.forward_host(&normed[rows.clone()], kv);
                let q = host.q_proj.forward_host(&normed[rows.clone()], queries);
                let att = host_attention::cross_attention(q, &group.spans, keys, &group.spans, d);
                host.out_proj.forward_add(&att, &mut residual[rows], to_add);
            }
            self.feed_forward_on_host(host, residual, normed, wide, to_add);
        }
        let mut out = Vec::with_capacity(select.len() * d);
        for &p in select {
            out.extend_from_slice(&residual[p * d..(p + 1) * d]);
        }
        Ok(Array::from_slice(&out, &[select.len() as i32, d as i32]))
    }

    /// `x += linear2(relu(linear1(norm2(x))))` on the host, in blocks of rows: `linear1`'s
    /// output is four times the layer's width.
    fn feed_forward_on_host(
        &self,
        host: &HostHeadLayer,
        x: &mut [f32],
        normed: &mut Vec<f32>,
        wide: &mut Vec<f32>,
        to_add: &mut Vec<f32>,
    ) {
        let d = self.hidden;
        host.layer.host_norms.1.forward_into(x, normed);
        for (x, m) in x
            .chunks_mut(FEED_FORWARD_ROWS * d)
            .zip(normed.chunks(FEED_FORWARD_ROWS * d))
        {
            let len = host.linear1.forward_host(m, wide).len();
            let h = &mut wide[..len];
            relu_in_place(h);
            host.linear2.forward_add(h, x, to_add);
        }
    }

    /// A layer at every position: `a` is `norm1(x)`, rows `spans`.
    fn full_layer(
        &self,
        layer: &HeadLayer,
        a: &Array,
        x: &Array,
        spans: &[Span],
        padded: Option<&PaddedBatch>,
    ) -> Result<Array, Exception> {
        let kv = layer.kv_proj.forward(a)?;
        let q = layer.q_proj.forward(a)?;
        let att = if self.host_attention {
            attention_on_host(&q, spans, &kv, spans, self.hidden)?
        } else {
            let kvs = ops::split_at_indices(&kv, &[self.hidden as i32], 1)?;
            packed_attention(
                &q,
                &kvs[0],
                &kvs[1],
                spans,
                spans,
                self.heads,
                None,
                Window::Full,
                padded,
            )?
        };
        layer.feed_forward(&x.add(layer.out_proj.forward(&att)?)?)
    }
}

impl HeadLayer {
    /// `x + linear2(relu(linear1(norm2(x))))`.
    fn feed_forward(&self, x: &Array) -> Result<Array, Exception> {
        let h = self.linear1.forward(&self.norm2.forward(x)?)?;
        let h = ops::maximum(&h, Array::from_f32(0.0).as_dtype(h.dtype())?)?;
        x.add(self.linear2.forward(&h)?)
    }
}

/// `scorer = Sequential(LayerNorm, Linear(d, d), GELU, Linear(d, 1))`, in f32: on the host
/// where the host has f32 GEMM kernels, where every marker's logit is computed on its own
/// (MLX's GEMM, OpenBLAS on Linux, may sum a row in another order beside other rows), and
/// otherwise on MLX.
#[derive(Debug)]
pub(crate) struct Scorer {
    norm: LayerNorm,
    l1: Linear,
    l3: Linear,
    /// `norm` on the host, where `l1` and `l3` are host layers.
    host_norm: Option<HostNorm>,
}

impl Scorer {
    pub fn load(store: &mut TensorStore, kernels: Kernels) -> Result<Self, LoadError> {
        let norm = layer_norm(store, "scorer.0")?;
        let f32_kernels = Kernels {
            upcast: false,
            ..kernels
        };
        let linear = |store: &mut TensorStore, prefix: &str| -> Result<Linear, LoadError> {
            let w = store.take(&format!("{prefix}.weight"))?;
            let b = store.take(&format!("{prefix}.bias"))?;
            Linear::for_model(&w, Some(b), f32_kernels, None).map_err(mlx(prefix))
        };
        let l1 = linear(store, "scorer.1")?;
        let l3 = linear(store, "scorer.3")?;
        let host_norm = match (l1.host(), l3.host()) {
            (Some(_), Some(_)) => Some(host_norm(&norm)?),
            _ => None,
        };
        Ok(Scorer {
            norm,
            l1,
            l3,
            host_norm,
        })
    }

    /// Whether [`Scorer::forward_on_host`] runs.
    pub fn runs_on_host(&self) -> bool {
        self.host_norm.is_some()
    }

    /// `m` is the head output at the markers, `[K, d]`; returns the option logits `[K]`, f32.
    pub fn forward(&self, m: &Array) -> Result<Array, Exception> {
        let m = m.as_dtype(mlx_rs::Dtype::Float32)?;
        let h = gelu_erf(&self.l1.forward(&self.norm.forward(&m)?)?)?;
        self.l3.forward(&h)?.reshape(&[-1])
    }

    /// [`Scorer::forward`] on the host ([`Scorer::runs_on_host`]), from the markers' rows
    /// `m` (`[K, d]`, f32): the `K` logits, each from its own row alone.
    pub fn forward_on_host(&self, m: &[f32]) -> Option<Vec<f32>> {
        let (norm, l1, l3) = (self.host_norm.as_ref()?, self.l1.host()?, self.l3.host()?);
        let mut normed = Vec::new();
        norm.forward_into(m, &mut normed);
        let mut h = Vec::new();
        l1.forward_host(&normed, &mut h);
        h.iter_mut().for_each(|v| *v = crate::host::gelu(*v));
        let mut logits = Vec::new();
        l3.forward_host(&h, &mut logits);
        Some(logits)
    }
}

/// `act_head = Sequential(Linear(d + 4, 256), GELU, Linear(256, n_act))`, in f32 on the host.
///
/// Its inputs are the option logits' features, which only exist once the logits are read
/// back, so running it on the device would send them there and read the result back again;
/// at 256 hidden units it costs microseconds here.
#[derive(Debug)]
pub(crate) struct ActHead {
    /// `[hidden, d + 4]`, row-major, and `[hidden]`.
    w0: Vec<f32>,
    b0: Vec<f32>,
    /// `[n_act, hidden]` and `[n_act]`.
    w2: Vec<f32>,
    b2: Vec<f32>,
}

impl ActHead {
    pub fn load(store: &mut TensorStore) -> Result<Self, LoadError> {
        let mut host = |name: &str| -> Result<Vec<f32>, LoadError> {
            let a = store
                .take(name)?
                .as_dtype(mlx_rs::Dtype::Float32)
                .map_err(mlx(name))?;
            a.eval().map_err(mlx(name))?;
            a.try_as_slice::<f32>()
                .map(<[f32]>::to_vec)
                .map_err(|e| LoadError::Unsupported(format!("reading {name}: {e}")))
        };
        let head = ActHead {
            w0: host("act_head.0.weight")?,
            b0: host("act_head.0.bias")?,
            w2: host("act_head.2.weight")?,
            b2: host("act_head.2.bias")?,
        };
        let (hidden, n_act) = (head.b0.len(), head.b2.len());
        if hidden == 0
            || n_act == 0
            || !head.w0.len().is_multiple_of(hidden)
            || head.w2.len() != n_act * hidden
        {
            return Err(LoadError::Unsupported(
                "act head weights do not fit together".into(),
            ));
        }
        Ok(head)
    }

    /// Inputs per row: the head output at position 0 and the row's [`act_features`].
    pub fn inputs(&self) -> usize {
        self.w0.len() / self.b0.len()
    }

    /// `pooled` is the head output at position 0 of each row (`n × d`, f32), `feats` the
    /// [`act_features`] of each row; returns `n × n_act` logits.
    pub fn forward(&self, pooled: &[f32], feats: &[[f32; 4]]) -> Vec<f32> {
        let (hidden, n_act) = (self.b0.len(), self.b2.len());
        let d = self.inputs() - 4;
        let mut out = Vec::with_capacity(feats.len() * n_act);
        let mut h = vec![0f32; hidden];
        for (x, f) in pooled.chunks_exact(d).zip(feats) {
            for (j, hj) in h.iter_mut().enumerate() {
                let w = &self.w0[j * (d + 4)..(j + 1) * (d + 4)];
                let dot: f32 = w[..d].iter().zip(x).map(|(w, x)| w * x).sum::<f32>()
                    + w[d..].iter().zip(f).map(|(w, x)| w * x).sum::<f32>();
                *hj = crate::host::gelu(dot + self.b0[j]);
            }
            for k in 0..n_act {
                let w = &self.w2[k * hidden..(k + 1) * hidden];
                out.push(w.iter().zip(&h).map(|(w, h)| w * h).sum::<f32>() + self.b2[k]);
            }
        }
        out
    }
}

/// The act head's features of one row (`model.md` §3.5), from its untempered option logits:
/// `[top1, top1 − top2, entropy / ln k, k / 255]` with `p = softmax(logits)`,
/// `k = max(markers, 2)`, entropy `−Σ p · ln(max(p, 1e-9))`, `top2 = 0` for one option.
///
/// Upstream computes these over the batch's marker width with masked slots at −1e4; their
/// probability is exactly 0 in fp32, so the row's own markers give the same numbers.
pub(crate) fn act_features(logits: &[f32]) -> [f32; 4] {
    let k = logits.len().max(2) as f32;
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f32> = logits.iter().map(|&z| (z - max).exp()).collect();
    let sum: f32 = exps.iter().sum();
    let p: Vec<f32> = exps.iter().map(|&e| e / sum).collect();
    let ent: f32 = -p.iter().map(|&pi| pi * pi.max(1e-9).ln()).sum::<f32>() / k.ln();
    let (mut top1, mut top2) = (0.0f32, 0.0f32);
    for &pi in &p {
        if pi > top1 {
            top2 = top1;
            top1 = pi;
        } else if pi > top2 {
            top2 = pi;
        }
    }
    [top1, top1 - top2, ent, k / 255.0]
}

#[cfg(test)]
mod tests {
    use super::act_features;

    #[test]
    fn one_option_has_no_runner_up() {
        let f = act_features(&[3.0]);
        assert_eq!(f[0], 1.0);
        assert_eq!(f[1], 1.0);
        assert_eq!(f[2], 0.0);
        assert!((f[3] - 2.0 / 255.0).abs() < 1e-9);
    }

    #[test]
    fn uniform_options_have_unit_entropy() {
        let f = act_features(&[0.5, 0.5, 0.5, 0.5]);
        assert!((f[0] - 0.25).abs() < 1e-7);
        assert_eq!(f[1], 0.0);
        assert!((f[2] - 1.0).abs() < 1e-6);
        assert!((f[3] - 4.0 / 255.0).abs() < 1e-9);
    }
}
