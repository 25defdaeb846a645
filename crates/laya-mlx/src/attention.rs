//! Attention over packed rows.
//!
//! Every linear layer runs on all rows' tokens packed into one `[T, d]` matrix, with no
//! padding; attention is the only place rows meet their own tokens. It runs either per row,
//! batching rows of equal length together, so no padding ever enters a score (the CPU
//! layout), or over all rows padded to the longest with padded keys masked out, the padding
//! living only inside attention (the GPU layout, [`PaddedBatch`]).
//!
//! Sliding-window layers (`|i - j| <= half_window`, inclusive, `model.md` §3.1) can be laid
//! out two ways with the same numbers: the full `L x L` scores under a window mask, or query
//! blocks of `half_window` rows each attending only the `3 · half_window` keys their windows
//! reach (block `b`: queries `[b·w, b·w + w)`, keys `[b·w − w, b·w + 2w)`), with a mask for
//! the exact window edge. MLX's CPU softmax is scalar (~22 ns per element), so the blocked
//! layout matters once rows are a few hundred tokens long.

use std::collections::HashMap;

use mlx_rs::error::Exception;
use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
use mlx_rs::{ops, Array};

use crate::settings::SlidingAttention;

/// Rows at least this long use the blocked sliding layout under [`SlidingAttention::Auto`].
const BLOCKED_MIN_LEN: usize = 256;

/// Where one row's tokens sit in a packed `[T, d]` matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    /// First packed index of the row.
    pub start: usize,
    /// Number of tokens.
    pub len: usize,
}

/// Builds contiguous spans from lengths.
pub(crate) fn spans_from_lengths(lengths: impl IntoIterator<Item = usize>) -> Vec<Span> {
    let mut start = 0;
    lengths
        .into_iter()
        .map(|len| {
            let s = Span { start, len };
            start += len;
            s
        })
        .collect()
}

/// Tokens a row group holds on the host paths (the encoder's attention half, the head's full
/// layers): as many whole rows as fit, a longer row alone. At 1,024 a group's widest buffer
/// (the head's 4d feed-forward) is 16 MB, and the GEMMs still see hundreds of rows.
pub(crate) const ROW_GROUP_TOKENS: usize = 1024;

/// A run of consecutive rows ([`row_groups`]): packed tokens `start..end`, and the rows'
/// spans counted from `start`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct RowGroup {
    pub start: usize,
    pub end: usize,
    pub spans: Vec<Span>,
}

/// `spans` (contiguous, in order) cut into runs of consecutive rows of at most `tokens`
/// tokens together, a longer row in a run of its own. What works row by row (attention, and
/// every per-token step) can then run a group at a time, in a group's memory.
pub(crate) fn row_groups(spans: &[Span], tokens: usize) -> impl Iterator<Item = RowGroup> + '_ {
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
        let start = first.start;
        debug_assert!(
            group
                .windows(2)
                .all(|w| w[0].start + w[0].len == w[1].start),
            "row_groups takes contiguous spans"
        );
        Some(RowGroup {
            start,
            end: start + total,
            spans: group
                .iter()
                .map(|s| Span {
                    start: s.start - start,
                    len: s.len,
                })
                .collect(),
        })
    })
}

/// Head layout of one attention: `heads × head_dim = d`, scores scaled by `scale`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heads {
    pub heads: usize,
    pub head_dim: usize,
    /// Materialize `[b, H, L, hd]` before RoPE and attention ([`crate::EngineSettings::contiguous_heads`]).
    pub contiguous: bool,
    /// Softmax on the host ([`crate::EngineSettings::host_math`]); per-length groups only.
    pub host_softmax: bool,
    /// Attention on f16 queries, keys and values computed in f32, its output rounded to f16
    /// (the CPU, which has no fast f16 attention).
    pub upcast: bool,
}

impl Heads {
    fn scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }
}

/// Which keys a query may see.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Window {
    /// Every key of the row.
    Full,
    /// Keys with `|i - j| <= half`, by sequence index (queries and keys are the same tokens).
    Sliding {
        half: usize,
        layout: SlidingAttention,
    },
}

/// Every row of a forward padded to one length inside attention, for devices where one large
/// batch beats many small ones (a GPU: the op count no longer grows with the number of
/// distinct row lengths). Linear layers still run on the packed tokens; only attention
/// gathers rows into `[b, L]` and scatters its output back, so padding never reaches a matmul
/// outside attention. Built once per forward and shared by every layer.
pub(crate) struct PaddedBatch {
    b: usize,
    lq: usize,
    lk: usize,
    /// `[b · lq]` packed query index of each padded slot (padding repeats the row's last token).
    q_idx: Array,
    /// `[b · lk]`, likewise for keys and values.
    kv_idx: Array,
    /// `[Tq]` padded slot of each packed query.
    back: Array,
    /// `[b, 1, 1, lk]`, true at real keys; `None` when every row has `lk` keys.
    key_mask: Option<Array>,
    /// Key count of each row.
    kv_lens: Vec<usize>,
    /// Key mask and sliding window, built on first use: `(half, [b or 1, 1, lq, lk])`.
    sliding: std::cell::OnceCell<(usize, Array)>,
    /// The same for query blocks ([`sliding_blocked`]), built on first use.
    blocked: std::cell::OnceCell<(usize, std::rc::Rc<HostMask>)>,
}

impl PaddedBatch {
    pub fn new(q_spans: &[Span], kv_spans: &[Span]) -> Self {
        let b = q_spans.len();
        let lq = q_spans.iter().map(|s| s.len).max().unwrap_or(0);
        let lk = kv_spans.iter().map(|s| s.len).max().unwrap_or(0);
        let slots = |spans: &[Span], l: usize| -> Vec<u32> {
            spans
                .iter()
                .flat_map(|s| (0..l).map(move |p| (s.start + p.min(s.len - 1)) as u32))
                .collect()
        };
        let q_idx = slots(q_spans, lq);
        let kv_idx = slots(kv_spans, lk);
        let back: Vec<u32> = q_spans
            .iter()
            .enumerate()
            .flat_map(|(r, s)| (0..s.len).map(move |p| (r * lq + p) as u32))
            .collect();
        let key_mask = kv_spans.iter().any(|s| s.len < lk).then(|| {
            let m: Vec<bool> = kv_spans
                .iter()
                .flat_map(|s| (0..lk).map(move |p| p < s.len))
                .collect();
            Array::from_slice(&m, &[b as i32, 1, 1, lk as i32])
        });
        PaddedBatch {
            b,
            lq,
            lk,
            q_idx: Array::from_slice(&q_idx, &[q_idx.len() as i32]),
            kv_idx: Array::from_slice(&kv_idx, &[kv_idx.len() as i32]),
            back: Array::from_slice(&back, &[back.len() as i32]),
            key_mask,
            kv_lens: kv_spans.iter().map(|s| s.len).collect(),
            sliding: std::cell::OnceCell::new(),
            blocked: std::cell::OnceCell::new(),
        }
    }

    /// The query-block mask of [`sliding_blocked`] for these rows, built once per forward
    /// (it is the largest host-built array of a forward: `b · L · 3 · half` flags).
    fn blocked_mask(&self, half: usize) -> std::rc::Rc<HostMask> {
        if let Some((h, m)) = self.blocked.get() {
            if *h == half {
                return m.clone();
            }
        }
        let m = std::rc::Rc::new(blocked_mask(&self.kv_lens, self.lq, half));
        let _ = self.blocked.set((half, m.clone()));
        m
    }

    /// The mask for `window`, `None` when every key may be seen.
    fn mask(&self, window: Window) -> Result<Option<Array>, Exception> {
        let half = match window {
            Window::Sliding { half, .. } if self.lk > half + 1 => half,
            _ => return Ok(self.key_mask.clone()),
        };
        if let Some((h, m)) = self.sliding.get() {
            if *h == half {
                return Ok(Some(m.clone()));
            }
        }
        debug_assert_eq!(self.lq, self.lk, "a sliding window needs queries = keys");
        let w = Array::from_slice(
            &window_mask(self.lq, half),
            &[1, 1, self.lq as i32, self.lk as i32],
        );
        let m = match &self.key_mask {
            Some(k) => w.logical_and(k)?,
            None => w,
        };
        let _ = self.sliding.set((half, m.clone()));
        Ok(Some(m))
    }
}

/// [`packed_attention`] over a [`PaddedBatch`]: one gather per input, one attention, one
/// gather back. Padded query slots may see no key at all in a sliding layer; their output is
/// dropped by the gather back and never becomes a key.
#[allow(clippy::too_many_arguments)]
fn padded_attention(
    q: &Array,
    k: &Array,
    v: &Array,
    batch: &PaddedBatch,
    heads: Heads,
    rope_theta: Option<f32>,
    window: Window,
) -> Result<Array, Exception> {
    let (b, lq, lk) = (batch.b, batch.lq, batch.lk);
    let gather = |x: &Array, idx: &Array, l: usize| -> Result<Array, Exception> {
        to_heads(&x.take_axis(idx, 0)?, b, l, heads)
    };
    let mut qg = gather(q, &batch.q_idx, lq)?;
    let mut kg = gather(k, &batch.kv_idx, lk)?;
    let vg = gather(v, &batch.kv_idx, lk)?;
    if let Some(theta) = rope_theta {
        let dims = heads.head_dim as i32;
        qg = fast::rope(&qg, dims, false, theta, 1.0, 0, None)?;
        kg = fast::rope(&kg, dims, false, theta, 1.0, 0, None)?;
    }
    // Query blocks only when asked for: on an H200 the padded batch's full masked scores beat
    // the blocks' extra gathers at every size measured (s512_q10: 49.2 ms against 56.2 ms,
    // results/GPU-NOTES.md).
    let og = match window {
        Window::Sliding { half, layout }
            if lk > half + 1 && layout == SlidingAttention::Blocked =>
        {
            let mask = batch.blocked_mask(half);
            sliding_blocked(&qg, &kg, &vg, b, lq, half, heads, &mask)?
        }
        _ => fast_sdpa(&qg, &kg, &vg, heads, batch.mask(window)?.as_ref())?,
    };
    og.transpose_axes(&[0, 2, 1, 3])?
        .reshape(&[(b * lq) as i32, (heads.heads * heads.head_dim) as i32])?
        .take_axis(&batch.back, 0)
}

/// Attention over packed rows: `q` is `[Tq, d]` with row spans `q_spans`, `k` and `v` are
/// `[Tk, d]` with row spans `kv_spans` (one span per row in both). With `rope_theta`, RoPE
/// (rotate-half, positions `0..L`) is applied to the queries and keys of each row; that and
/// a sliding window need queries and keys to be the same tokens. Returns `[Tq, d]`.
/// With `padded` (built from the same spans), all rows run as one padded batch instead of one
/// batch per distinct length.
#[allow(clippy::too_many_arguments)]
pub(crate) fn packed_attention(
    q: &Array,
    k: &Array,
    v: &Array,
    q_spans: &[Span],
    kv_spans: &[Span],
    heads: Heads,
    rope_theta: Option<f32>,
    window: Window,
    padded: Option<&PaddedBatch>,
) -> Result<Array, Exception> {
    let io = q.dtype();
    if heads.upcast && io != mlx_rs::Dtype::Float32 {
        let f32 = |a: &Array| a.as_dtype(mlx_rs::Dtype::Float32);
        return packed_attention(
            &f32(q)?,
            &f32(k)?,
            &f32(v)?,
            q_spans,
            kv_spans,
            heads,
            rope_theta,
            window,
            padded,
        )?
        .as_dtype(io);
    }
    if let Some(batch) = padded {
        return padded_attention(q, k, v, batch, heads, rope_theta, window);
    }
    let n = q_spans.len();
    let q_rows = split_rows(q, q_spans)?;
    let k_rows = split_rows(k, kv_spans)?;
    let v_rows = split_rows(v, kv_spans)?;

    // Rows with equal (query, key) lengths run as one batch, in order of first appearance.
    let mut group_of: HashMap<(usize, usize), usize> = HashMap::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for r in 0..n {
        let key = (q_spans[r].len, kv_spans[r].len);
        let g = *group_of.entry(key).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(r);
    }

    let mut outputs: Vec<Option<Array>> = (0..n).map(|_| None).collect();
    for rows in &groups {
        let (lq, lk) = (q_spans[rows[0]].len, kv_spans[rows[0]].len);
        let b = rows.len();
        let mut qg = to_heads(&stack_rows(&q_rows, rows)?, b, lq, heads)?;
        let mut kg = to_heads(&stack_rows(&k_rows, rows)?, b, lk, heads)?;
        let vg = to_heads(&stack_rows(&v_rows, rows)?, b, lk, heads)?;
        if let Some(theta) = rope_theta {
            let dims = heads.head_dim as i32;
            qg = fast::rope(&qg, dims, false, theta, 1.0, 0, None)?;
            kg = fast::rope(&kg, dims, false, theta, 1.0, 0, None)?;
        }
        let og = match window {
            Window::Sliding { half, layout } if lk > half + 1 => {
                if blocked(layout, lq) {
                    let mask = blocked_mask(&vec![lk; b], lq, half);
                    sliding_blocked(&qg, &kg, &vg, b, lq, half, heads, &mask)?
                } else {
                    let mask = HostMask {
                        flags: window_mask(lq, half),
                        items: 1,
                        rows: lq,
                        keys: lk,
                    };
                    sdpa(&qg, &kg, &vg, heads, Some(&mask))?
                }
            }
            // A window wider than the row, or full attention: no mask at all.
            _ => sdpa(&qg, &kg, &vg, heads, None)?,
        };
        // [b, H, lq, hd] -> [b · lq, d]
        let og = og
            .transpose_axes(&[0, 2, 1, 3])?
            .reshape(&[(b * lq) as i32, (heads.heads * heads.head_dim) as i32])?;
        if b == 1 {
            outputs[rows[0]] = Some(og);
        } else {
            let cuts: Vec<i32> = (1..b).map(|i| (i * lq) as i32).collect();
            for (r, part) in rows.iter().zip(ops::split_at_indices(&og, &cuts, 0)?) {
                outputs[*r] = Some(part);
            }
        }
    }
    let outputs: Vec<Array> = outputs
        .into_iter()
        .map(|o| o.expect("every row belongs to a group: this is a bug"))
        .collect();
    if outputs.len() == 1 {
        return Ok(outputs.into_iter().next().expect("one output"));
    }
    ops::concatenate(&outputs, 0)
}

/// `[T, d]` -> one `[L_r, d]` view per span. The spans are contiguous, in order, and cover
/// all of `x`.
fn split_rows(x: &Array, spans: &[Span]) -> Result<Vec<Array>, Exception> {
    if spans.len() == 1 {
        return Ok(vec![x.clone()]);
    }
    let cuts: Vec<i32> = spans[1..].iter().map(|s| s.start as i32).collect();
    ops::split_at_indices(x, &cuts, 0)
}

/// The rows `idx` of `parts` as one `[b, L, d]` batch.
fn stack_rows(parts: &[Array], idx: &[usize]) -> Result<Array, Exception> {
    if idx.len() == 1 {
        return parts[idx[0]].expand_dims(0);
    }
    let chosen: Vec<&Array> = idx.iter().map(|&i| &parts[i]).collect();
    ops::stack(&chosen, 0)
}

/// `[b, L, d]` -> `[b, H, L, hd]`.
fn to_heads(x: &Array, b: usize, len: usize, heads: Heads) -> Result<Array, Exception> {
    let x = x
        .reshape(&[
            b as i32,
            len as i32,
            heads.heads as i32,
            heads.head_dim as i32,
        ])?
        .transpose_axes(&[0, 2, 1, 3])?;
    if heads.contiguous {
        x.contiguous()
    } else {
        Ok(x)
    }
}

/// A bool attention mask built on the host, `[items, 1, rows, keys]` (`items == 1`: one
/// `[rows, keys]` mask shared by every batch item), true where a query may see a key.
pub(crate) struct HostMask {
    flags: Vec<bool>,
    items: usize,
    rows: usize,
    keys: usize,
}

impl HostMask {
    fn array(&self) -> Array {
        let (rows, keys) = (self.rows as i32, self.keys as i32);
        if self.items == 1 {
            Array::from_slice(&self.flags, &[rows, keys])
        } else {
            Array::from_slice(&self.flags, &[self.items as i32, 1, rows, keys])
        }
    }

    /// The flags of query `row` of batch item `item`.
    fn row(&self, item: usize, row: usize) -> &[bool] {
        let item = if self.items == 1 { 0 } else { item };
        let at = (item * self.rows + row) * self.keys;
        &self.flags[at..at + self.keys]
    }
}

/// Attention of `[B, H, Lq, hd]` queries over `[B, H, Lk, hd]` keys and values, the softmax
/// on the host when `heads.host_softmax`.
fn sdpa(
    q: &Array,
    k: &Array,
    v: &Array,
    heads: Heads,
    mask: Option<&HostMask>,
) -> Result<Array, Exception> {
    if !heads.host_softmax {
        return fast_sdpa(q, k, v, heads, mask.map(HostMask::array).as_ref());
    }
    // MLX's CPU softmax computes exp one element at a time (~10-22 ns each): the scores of a
    // 590-token row cost 55 ms a layer there. Scores and the weighted sum stay MLX matmuls.
    let scores = q
        .multiply(Array::from_f32(heads.scale()).as_dtype(q.dtype())?)?
        .matmul(k.swap_axes(-1, -2)?)?;
    let shape = scores.shape().to_vec();
    let (lq, lk) = (shape[2] as usize, shape[3] as usize);
    let per_item = heads.heads * lq;
    let values = scores
        .try_as_slice::<f32>()
        .map_err(|e| Exception::custom(format!("reading attention scores: {e}")))?;
    let probs =
        crate::host::softmax_rows(values, lk, |r| mask.map(|m| m.row(r / per_item, r % lq)));
    Array::from_slice(&probs, &shape).matmul(v)
}

/// MLX's attention with an optional MLX mask.
fn fast_sdpa(
    q: &Array,
    k: &Array,
    v: &Array,
    heads: Heads,
    mask: Option<&Array>,
) -> Result<Array, Exception> {
    let mask = mask.map(ScaledDotProductAttentionMask::Array);
    fast::scaled_dot_product_attention(q, k, v, heads.scale(), mask, None)
}

/// `[len, len]` boolean mask, true where `|i - j| <= half`.
pub(crate) fn window_mask(len: usize, half: usize) -> Vec<bool> {
    let mut m = vec![false; len * len];
    for i in 0..len {
        for j in i.saturating_sub(half)..(i + half + 1).min(len) {
            m[i * len + j] = true;
        }
    }
    m
}

/// Whether sliding layers of rows `len` long use query blocks.
fn blocked(layout: SlidingAttention, len: usize) -> bool {
    match layout {
        SlidingAttention::Auto => len >= BLOCKED_MIN_LEN,
        SlidingAttention::Masked => false,
        SlidingAttention::Blocked => true,
    }
}

/// Query blocks of [`sliding_blocked`] for rows padded to `len` whose real keys number
/// `key_lens[r]`: `[b · nb, 1, block, span]`, true where query `i` may see key `j`
/// (`|i - j| <= half`, `j` a real key). Query slots past `len` (the last block's tail) repeat
/// slot `len - 1`; a short row's padded slots keep their own positions.
fn blocked_mask(key_lens: &[usize], len: usize, half: usize) -> HostMask {
    let block = half.max(1);
    let span = block + 2 * half;
    let nb = len.div_ceil(block);
    let last_q = (len - 1) as i64;
    let one_row = |keys: usize| {
        let last_k = keys as i64 - 1;
        let mut mask = Vec::with_capacity(nb * block * span);
        for blk in 0..nb {
            let k0 = (blk * block) as i64 - half as i64;
            for r in 0..block {
                let qi = ((blk * block + r) as i64).min(last_q);
                for j in 0..span as i64 {
                    let kj = k0 + j;
                    mask.push((0..=last_k).contains(&kj) && (qi - kj).abs() <= half as i64);
                }
            }
        }
        mask
    };
    let flags = match key_lens {
        [first, rest @ ..] if rest.iter().all(|l| l == first) => {
            one_row(*first).repeat(key_lens.len())
        }
        _ => key_lens.iter().flat_map(|&k| one_row(k)).collect(),
    };
    HostMask {
        flags,
        items: key_lens.len() * nb,
        rows: block,
        keys: span,
    }
}

/// Sliding attention by query blocks. `q`, `k`, `v` are `[b, H, L, hd]` (RoPE applied),
/// `mask` is [`blocked_mask`]'s for these rows; returns `[b, H, L, hd]`.
#[allow(clippy::too_many_arguments)]
fn sliding_blocked(
    q: &Array,
    k: &Array,
    v: &Array,
    b: usize,
    len: usize,
    half: usize,
    heads: Heads,
    mask: &HostMask,
) -> Result<Array, Exception> {
    let block = half.max(1);
    let span = block + 2 * half;
    let nb = len.div_ceil(block);
    let last = (len - 1) as i64;
    // Query slots past the end repeat the last query (their outputs are dropped); key slots
    // outside [0, len) are clamped for the gather and masked out.
    let q_idx: Vec<u32> = (0..nb * block)
        .map(|i| (i as i64).min(last) as u32)
        .collect();
    let k_idx: Vec<u32> = (0..nb)
        .flat_map(|blk| {
            let k0 = (blk * block) as i64 - half as i64;
            (0..span as i64).map(move |j| (k0 + j).clamp(0, last) as u32)
        })
        .collect();
    let (h, hd) = (heads.heads as i32, heads.head_dim as i32);
    let (bi, nbi, blocki, spani) = (b as i32, nb as i32, block as i32, span as i32);
    let gather = |x: &Array, idx: &[u32], per: i32| -> Result<Array, Exception> {
        let idx = Array::from_slice(idx, &[idx.len() as i32]);
        x.take_axis(&idx, 2)?
            .reshape(&[bi, h, nbi, per, hd])?
            .transpose_axes(&[0, 2, 1, 3, 4])?
            .reshape(&[bi * nbi, h, per, hd])
    };
    let qb = gather(q, &q_idx, blocki)?;
    let kb = gather(k, &k_idx, spani)?;
    let vb = gather(v, &k_idx, spani)?;
    let ob = sdpa(&qb, &kb, &vb, heads, Some(mask))?; // [b·nb, H, block, hd]
    let ob = ob
        .reshape(&[bi, nbi, h, blocki, hd])?
        .transpose_axes(&[0, 2, 1, 3, 4])?
        .reshape(&[bi, h, nbi * blocki, hd])?;
    if nb * block == len {
        return Ok(ob);
    }
    Ok(ops::split_at_indices(&ob, &[len as i32], 2)?.swap_remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_groups_keep_rows_whole_and_in_order() {
        let spans = spans_from_lengths([300, 700, 25, 2000, 1024, 1, 1]);
        let groups: Vec<RowGroup> = row_groups(&spans, 1024).collect();
        let lengths: Vec<Vec<usize>> = groups
            .iter()
            .map(|g| g.spans.iter().map(|s| s.len).collect())
            .collect();
        assert_eq!(
            lengths,
            vec![vec![300, 700], vec![25], vec![2000], vec![1024], vec![1, 1]]
        );
        let bounds: Vec<(usize, usize)> = groups.iter().map(|g| (g.start, g.end)).collect();
        assert_eq!(
            bounds,
            vec![
                (0, 1000),
                (1000, 1025),
                (1025, 3025),
                (3025, 4049),
                (4049, 4051)
            ]
        );
        assert_eq!(
            groups[0].spans[1],
            Span {
                start: 300,
                len: 700
            }
        );
        assert_eq!(groups[4].spans[1], Span { start: 1, len: 1 });
        assert_eq!(row_groups(&[], 1024).count(), 0);
    }

    #[test]
    fn window_mask_is_inclusive() {
        let m = window_mask(5, 1);
        let rows: Vec<Vec<u8>> = m
            .chunks(5)
            .map(|r| r.iter().map(|&b| b as u8).collect())
            .collect();
        assert_eq!(rows[0], vec![1, 1, 0, 0, 0]);
        assert_eq!(rows[2], vec![0, 1, 1, 1, 0]);
        assert_eq!(rows[4], vec![0, 0, 0, 1, 1]);
    }

    #[test]
    fn spans_are_contiguous() {
        let s = spans_from_lengths([3, 1, 4]);
        assert_eq!(
            s,
            vec![
                Span { start: 0, len: 3 },
                Span { start: 3, len: 1 },
                Span { start: 4, len: 4 }
            ]
        );
    }
}
