//! Entry points for the profiling examples (`examples/op-timing.rs`) into work the engine
//! does on the host, so each can be timed by itself on the shapes of a real forward. Not a
//! stable interface.

use crate::attention::spans_from_lengths;
use crate::host_attention::{self_attention, RopeTable};

/// One layer's host self-attention over rows of `lengths` tokens packed together: `qkv` is
/// the fused projection (`[Σ lengths, 3 · heads · head_dim]`), `half` the sliding window's
/// reach (`None`: global). Returns `[Σ lengths, heads · head_dim]`.
pub fn host_attention(
    qkv: &[f32],
    lengths: &[usize],
    heads: usize,
    head_dim: usize,
    theta: f32,
    half: Option<usize>,
) -> Vec<f32> {
    let spans = spans_from_lengths(lengths.iter().copied());
    let longest = lengths.iter().copied().max().unwrap_or(0);
    let rope = RopeTable::new(theta, head_dim, longest);
    self_attention(qkv, &spans, heads, head_dim, &rope, half)
}
