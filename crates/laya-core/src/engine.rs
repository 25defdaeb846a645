//! The seam between the request rules (this crate) and the tensor engines (`laya-mlx`,
//! `laya-cuda`): plain data in, plain data out, so an engine knows nothing of questions, JSON
//! or HTTP, and a batcher can sit on the same seam.

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

/// Why a forward pass failed. The server answers any engine failure with upstream's 500
/// `inference failed` and logs this error, never showing it to the client.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The engine's own failure (device, kernel, a row it refused), kept as the source.
    #[error("{engine} engine: {source}")]
    Backend {
        engine: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An engine answered a different number of rows or logits than it was given (a bug in
    /// that engine).
    #[error("the engine returned {got} {what} for {expected}")]
    Mismatch {
        what: &'static str,
        got: usize,
        expected: usize,
    },
}

impl EngineError {
    /// Wraps an engine's own error.
    pub fn backend(
        engine: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> EngineError {
        EngineError::Backend {
            engine,
            source: source.into(),
        }
    }
}

/// What the server reports about an engine (the ready line, `/health`, benchmark reports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineInfo {
    /// Which engine: `mlx`, `cuda`, or a test engine's name.
    pub engine: &'static str,
    /// The device in upstream's (PyTorch's) vocabulary: `cpu`, `cuda`, `mps`.
    pub device: String,
    /// The compute precision: `f32` or `f16`.
    pub precision: &'static str,
}

/// A forward pass over rows that are run together (one "pass" in upstream's terms).
///
/// Implementations must give each row the answer it would get in any other grouping, up to
/// floating-point rounding; rows are never padded against each other in matmul work.
pub trait Forward {
    fn forward(&mut self, rows: &[Row]) -> Result<Vec<RowLogits>, EngineError>;

    /// What this engine is and where it runs.
    fn info(&self) -> EngineInfo;

    /// One-time work before the first request (kernel compilation, graph capture), each
    /// engine with its own ladder of shapes; the server runs it before it reports ready.
    fn warm(&mut self) -> Result<(), EngineError> {
        Ok(())
    }

    /// Whether every row's logits are bit for bit the same whatever other rows share its
    /// pass (and wherever it sits among them): then the rows of several requests may run in
    /// one pass without changing any answer.
    fn batch_invariant(&self) -> bool {
        false
    }
}

/// An engine chosen at run time (`--engine`) behind the same seam.
impl<F: Forward + ?Sized> Forward for Box<F> {
    fn forward(&mut self, rows: &[Row]) -> Result<Vec<RowLogits>, EngineError> {
        (**self).forward(rows)
    }

    fn info(&self) -> EngineInfo {
        (**self).info()
    }

    fn warm(&mut self) -> Result<(), EngineError> {
        (**self).warm()
    }

    fn batch_invariant(&self) -> bool {
        (**self).batch_invariant()
    }
}

/// Rows of the given lengths for warming an engine up: valid for any vocabulary (token 0),
/// two option markers each. Their answers mean nothing; their shapes are what counts.
pub fn warm_rows(lengths: &[usize]) -> Vec<Row> {
    lengths
        .iter()
        .map(|&len| Row {
            ids: vec![0; len.max(4)],
            markers: vec![1, 2],
            qtype: QType::Choice,
        })
        .collect()
}

/// Checks what every engine needs of its rows: tokens, at most `max_tokens` of them, ids
/// inside a vocabulary of `vocab`, at least one marker, markers inside the row. The error is
/// the first bad row's index and why.
pub fn check_rows(rows: &[Row], vocab: usize, max_tokens: usize) -> Result<(), (usize, String)> {
    for (i, r) in rows.iter().enumerate() {
        if r.ids.is_empty() {
            return Err((i, "no tokens".into()));
        }
        if r.ids.len() > max_tokens {
            return Err((
                i,
                format!(
                    "{} tokens is more than the {max_tokens} this engine runs",
                    r.ids.len()
                ),
            ));
        }
        if r.markers.is_empty() {
            return Err((i, "no option markers".into()));
        }
        if let Some(&m) = r.markers.iter().find(|&&m| m >= r.ids.len()) {
            return Err((
                i,
                format!("marker {m} is outside its {} tokens", r.ids.len()),
            ));
        }
        if let Some(&t) = r.ids.iter().find(|&&t| t as usize >= vocab) {
            return Err((
                i,
                format!("token id {t} is outside the vocabulary of {vocab}"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ids: &[u32], markers: &[usize]) -> Row {
        Row {
            ids: ids.to_vec(),
            markers: markers.to_vec(),
            qtype: QType::Choice,
        }
    }

    #[test]
    fn check_rows_names_the_first_bad_row() {
        assert_eq!(check_rows(&[row(&[1, 2], &[1])], 10, 8), Ok(()));
        let bad = [row(&[1, 2], &[1]), row(&[1, 2, 3], &[3])];
        assert_eq!(
            check_rows(&bad, 10, 8),
            Err((1, "marker 3 is outside its 3 tokens".into()))
        );
        assert_eq!(check_rows(&[row(&[], &[])], 10, 8).map_err(|e| e.0), Err(0));
        assert_eq!(
            check_rows(&[row(&[1], &[])], 10, 8).map_err(|e| e.1),
            Err("no option markers".into())
        );
        assert_eq!(
            check_rows(&[row(&[1, 12], &[0])], 10, 8).map_err(|e| e.1),
            Err("token id 12 is outside the vocabulary of 10".into())
        );
        assert_eq!(
            check_rows(&[row(&[1; 9], &[0])], 10, 8).map_err(|e| e.1),
            Err("9 tokens is more than the 8 this engine runs".into())
        );
    }
}
