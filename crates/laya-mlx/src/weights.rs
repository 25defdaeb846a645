//! `model.safetensors` loaded into MLX arrays in the compute dtype. The header is checked
//! against the configs by `laya_core::checkpoint` before MLX sees the file, so a missing
//! tensor, an unexpected one, a wrong shape or dtype, or a truncated file each fail with an
//! error that names the tensor, instead of surfacing later as an MLX exception.

use std::collections::HashMap;
use std::path::Path;

pub use laya_core::checkpoint::{expected_tensors, head_heads, TensorSpec};
use laya_core::checkpoint::{CheckpointTensors, TensorError};
use laya_core::config::CheckpointConfig;
use mlx_rs::error::Exception;
use mlx_rs::{Array, Dtype, Stream};

use crate::error::LoadError;

/// The checkpoint's tensors by name, converted: f32 for the names `in_f32` accepts, `dtype`
/// for the rest, except that a name `as_stored` accepts keeps the file's dtype where it would
/// have become f32 (its user converts what it reads); evaluated on `stream`'s device.
pub(crate) struct TensorStore {
    arrays: HashMap<String, Array>,
}

impl TensorStore {
    /// Checks `model.safetensors` of `dir` against `cfg` and loads it.
    pub fn load(
        dir: &Path,
        cfg: &CheckpointConfig,
        dtype: Dtype,
        in_f32: impl Fn(&str) -> bool,
        as_stored: impl Fn(&str) -> bool,
        stream: &Stream,
    ) -> Result<Self, LoadError> {
        let checked = CheckpointTensors::open(dir, cfg)?;
        let path = checked.path().to_owned();
        let expected = expected_tensors(cfg);
        tracing::debug!(path = %path.display(), tensors = expected.len(), data_bytes = checked.data_bytes(), "safetensors header checked");

        let mlx_err = |context: &str| {
            let context = context.to_owned();
            move |source: Exception| LoadError::Mlx { context, source }
        };
        // MLX loads files on the CPU only; the dtype conversion then runs on the target stream.
        let loaded = mlx_rs::with_stream(&Stream::cpu(), || Array::load_safetensors(&path))
            .map_err(|e| TensorError::Format {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        // One tensor at a time: the file's copy of a tensor is dropped as soon as its
        // conversion is materialized, so the peak holds one tensor twice rather than the whole
        // checkpoint in both dtypes (an f16 file read into f32 weights peaked at 1.5x).
        let mut loaded = loaded;
        let mut arrays = HashMap::with_capacity(expected.len());
        mlx_rs::with_stream(stream, || -> Result<(), LoadError> {
            for spec in &expected {
                let a = loaded
                    .remove(&spec.name)
                    .ok_or_else(|| TensorError::MissingTensor {
                        name: spec.name.clone(),
                    })?;
                let target = if in_f32(&spec.name) {
                    Dtype::Float32
                } else {
                    dtype
                };
                // Only in place of f32, to which any later conversion is exact.
                let target = if target == Dtype::Float32 && as_stored(&spec.name) {
                    a.dtype()
                } else {
                    target
                };
                let converted = a
                    .as_dtype(target)
                    .map_err(mlx_err(&format!("converting {}", spec.name)))?;
                drop(a);
                converted
                    .eval()
                    .map_err(mlx_err(&format!("materializing {}", spec.name)))?;
                arrays.insert(spec.name.clone(), converted);
            }
            Ok(())
        })?;
        Ok(TensorStore { arrays })
    }

    /// Takes one tensor out of the store.
    pub fn take(&mut self, name: &str) -> Result<Array, LoadError> {
        self.arrays.remove(name).ok_or_else(|| {
            TensorError::MissingTensor {
                name: name.to_owned(),
            }
            .into()
        })
    }
}
