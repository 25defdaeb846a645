//! `model.safetensors` loaded into MLX arrays in the compute dtype. The header is checked
//! against the configs by `laya_core::checkpoint` before MLX sees the file, so a missing
//! tensor, an unexpected one, a wrong shape or dtype, or a truncated file each fail with an
//! error that names the tensor, instead of surfacing later as an MLX exception. Each tensor
//! is also scanned for NaN and infinity once converted, so that a checkpoint whose answers
//! would all be NaN fails to load, naming the tensor.

use std::collections::HashMap;
use std::path::Path;

pub use laya_core::checkpoint::{expected_tensors, head_heads, TensorSpec};
use laya_core::checkpoint::{
    first_non_finite_bf16_bits, first_non_finite_f16_bits, first_non_finite_f32,
    try_expected_tensors, CheckpointTensors, TensorError,
};
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
        let expected = try_expected_tensors(cfg)?;
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
                check_finite(&spec.name, &converted)?;
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

/// [`TensorError::NonFinite`] where `a` (evaluated, as converted) holds a NaN or an infinity:
/// the file's, or an f32 value beyond f16's range that the conversion made infinite.
///
/// Reads the array where it lies (unified memory on Apple GPUs), no copy: 23-31 ms over
/// ModernBERT-large's weights on one aarch64 core, of a 1.3-3.1 s CPU load.
fn check_finite(name: &str, a: &Array) -> Result<(), LoadError> {
    use half::slice::HalfFloatSliceExt;
    let unreadable = |e: mlx_rs::error::AsSliceError| {
        LoadError::Unsupported(format!("cannot read {name} back from MLX to check it: {e}"))
    };
    if a.size() == 0 {
        // Nothing to check, and MLX gives no slice of an empty array.
        return Ok(());
    }
    let found = match a.dtype() {
        Dtype::Float32 => first_non_finite_f32(a.try_as_slice::<f32>().map_err(unreadable)?),
        Dtype::Float16 => first_non_finite_f16_bits(
            a.try_as_slice::<half::f16>()
                .map_err(unreadable)?
                .reinterpret_cast(),
        ),
        Dtype::Bfloat16 => first_non_finite_bf16_bits(
            a.try_as_slice::<half::bf16>()
                .map_err(unreadable)?
                .reinterpret_cast(),
        ),
        // Only float tensors pass the header check.
        _ => None,
    };
    match found {
        None => Ok(()),
        Some(index) => Err(TensorError::NonFinite {
            name: name.to_owned(),
            index,
        }
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use crate::{EngineSettings, MlxEngine, Precision};

    use super::*;

    /// A NaN or an infinity in the file fails the load, naming the tensor and the element,
    /// in either precision; an f32 value beyond f16's range fails once converted to f16,
    /// where it would become infinite (checked on the scan itself).
    #[test]
    fn non_finite_weights_fail_the_load() {
        let src = laya_fixtures::fixtures_dir()
            .join("checkpoints")
            .join("tiny");
        let name = "encoder.layers.1.mlp.Wi.weight";
        for (tag, bits) in [("nan", 0x7e00u16), ("inf", 0x7c00)] {
            let dir = std::env::temp_dir()
                .join(format!("laya-mlx-nonfinite-{}-{tag}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(dir.join("encoder")).expect("mkdir");
            for f in ["rl_agent_config.json", "encoder/config.json"] {
                fs::copy(src.join(f), dir.join(f)).expect("copy");
            }
            let mut bytes = fs::read(src.join("model.safetensors")).expect("read");
            let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
            let h: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
            assert_eq!(h[name]["dtype"], "F16");
            let at = 8 + n + h[name]["data_offsets"][0].as_u64().expect("offset") as usize + 2 * 77;
            bytes[at..at + 2].copy_from_slice(&bits.to_le_bytes());
            fs::write(dir.join("model.safetensors"), bytes).expect("write");
            for precision in [Precision::F32, Precision::F16] {
                let settings = EngineSettings {
                    precision: Some(precision),
                    ..Default::default()
                };
                let e = MlxEngine::load(&dir, &settings).expect_err("must not load");
                assert!(
                    matches!(&e, LoadError::Tensors(TensorError::NonFinite { name: n, index: 77 }) if n == name),
                    "{e}"
                );
            }
            let _ = fs::remove_dir_all(&dir);
        }
        // Each element type's scan.
        let f32s = Array::from_slice(&[1.0f32, f32::INFINITY], &[2]);
        assert!(check_finite("x", &f32s).is_err());
        let f16s = f32s.as_dtype(Dtype::Float16).expect("f16");
        assert!(check_finite("x", &f16s).is_err());
        let big = Array::from_slice(&[1.0f32, 1e6], &[2]);
        assert!(check_finite("x", &big).is_ok());
        let big16 = big.as_dtype(Dtype::Float16).expect("f16");
        assert!(check_finite("x", &big16).is_err());
        let bf16s = Array::from_slice(&[1.0f32, f32::NAN], &[2])
            .as_dtype(Dtype::Bfloat16)
            .expect("bf16");
        assert!(check_finite("x", &bf16s).is_err());
    }
}
