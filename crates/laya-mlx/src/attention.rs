//! Attention over packed rows.
//!
//! Every linear layer runs on all rows' tokens packed into one `[T, d]` matrix; attention is
//! the only place rows meet their own tokens, so it is done per row, batching rows of equal
//! length together. No padding token ever enters a score or a matmul.
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

/// Head layout of one attention: `heads × head_dim = d`, scores scaled by `scale`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heads {
    pub heads: usize,
    pub head_dim: usize,
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

/// Attention over packed rows: `q` is `[Tq, d]` with row spans `q_spans`, `k` and `v` are
/// `[Tk, d]` with row spans `kv_spans` (one span per row in both). With `rope_theta`, RoPE
/// (rotate-half, positions `0..L`) is applied to the queries and keys of each row; that and
/// a sliding window need queries and keys to be the same tokens. Returns `[Tq, d]`.
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
) -> Result<Array, Exception> {
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
                let blocked = match layout {
                    SlidingAttention::Auto => lq >= BLOCKED_MIN_LEN,
                    SlidingAttention::Masked => false,
                    SlidingAttention::Blocked => true,
                };
                if blocked {
                    sliding_blocked(&qg, &kg, &vg, b, lq, half, heads)?
                } else {
                    let mask = Array::from_slice(&window_mask(lq, half), &[lq as i32, lq as i32]);
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
    x.reshape(&[
        b as i32,
        len as i32,
        heads.heads as i32,
        heads.head_dim as i32,
    ])?
    .transpose_axes(&[0, 2, 1, 3])
}

fn sdpa(
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

/// Sliding attention by query blocks. `q`, `k`, `v` are `[b, H, L, hd]` (RoPE applied);
/// returns `[b, H, L, hd]`.
fn sliding_blocked(
    q: &Array,
    k: &Array,
    v: &Array,
    b: usize,
    len: usize,
    half: usize,
    heads: Heads,
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
    let mut k_idx = Vec::with_capacity(nb * span);
    let mut mask = Vec::with_capacity(nb * block * span);
    for blk in 0..nb {
        let k0 = (blk * block) as i64 - half as i64;
        for j in 0..span as i64 {
            k_idx.push((k0 + j).clamp(0, last) as u32);
        }
        for r in 0..block {
            let qi = ((blk * block + r) as i64).min(last);
            for j in 0..span as i64 {
                let kj = k0 + j;
                mask.push((0..=last).contains(&kj) && (qi - kj).abs() <= half as i64);
            }
        }
    }
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
    let mask = if b == 1 { mask } else { mask.repeat(b) };
    let mask = Array::from_slice(&mask, &[bi * nbi, 1, blocki, spani]);
    let ob = sdpa(&qb, &kb, &vb, heads, Some(&mask))?; // [b·nb, H, block, hd]
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
