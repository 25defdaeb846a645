//! The seam between the request rules (this crate) and the tensor engines (`laya-mlx`,
//! later `laya-cuda`): plain data in, plain data out, so an engine knows nothing of
//! questions, JSON or HTTP, and a batcher can sit on the same seam.

use crate::config::QType;

/// One (state, question) sequence, exactly as upstream's collate builds it before padding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Token ids, `[CLS] head [SEP] options [SEP] state [SEP]`, no padding.
    pub ids: Vec<u32>,
    /// Index in `ids` of each option's `[MASK]` marker, in slot order.
    pub markers: Vec<usize>,
    /// Question type; selects the type embedding.
    pub qtype: QType,
}

/// What the model computed for one row, in fp32.
#[derive(Debug, Clone, PartialEq)]
pub struct RowLogits {
    /// Raw (untempered) option logits, one per marker, in slot order.
    pub logits: Vec<f32>,
    /// Raw act-head logits (`n_act` values; index 0 is "act").
    pub act_logits: Vec<f32>,
}

/// Why a forward pass failed. Engines wrap their own error into `message`: the server turns
/// any engine failure into upstream's 500 `inference failed`, never showing the text.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct EngineError {
    pub message: String,
}

impl EngineError {
    pub fn new(message: impl Into<String>) -> Self {
        EngineError {
            message: message.into(),
        }
    }
}

/// A forward pass over rows that are run together (one "pass" in upstream's terms).
///
/// Implementations must give each row the answer it would get in any other grouping, up to
/// floating-point rounding; rows are never padded against each other in matmul work.
pub trait Forward {
    fn forward(&mut self, rows: &[Row]) -> Result<Vec<RowLogits>, EngineError>;
}
