//! `model.safetensors`: the tensor inventory the configs imply (`model.md` §1.6), a strict
//! check of the file against it, and loading into MLX arrays in the compute dtype.
//!
//! The safetensors header is read and checked here before MLX sees the file, so a missing
//! tensor, an unexpected one, a wrong shape or dtype, or a truncated file each fail with an
//! error that names the tensor, instead of surfacing later as an MLX exception.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Read;
use std::path::Path;

use laya_core::config::CheckpointConfig;
use mlx_rs::error::Exception;
use mlx_rs::{Array, Dtype, Stream};
use serde_json::Value;

use crate::error::LoadError;

/// Name and shape of one tensor of a Laya checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// Checkpoint name, e.g. `encoder.layers.3.attn.Wqkv.weight`.
    pub name: String,
    /// Shape, torch order (`[out, in]` for linear weights).
    pub shape: Vec<usize>,
}

/// Number of attention heads of the decision head: `max(1, d / 64)` (`model.md` §3.3).
pub fn head_heads(hidden: usize) -> usize {
    (hidden / 64).max(1)
}

/// Every tensor the configs imply, in upstream's `state_dict` order (`model.md` §1.6):
/// 206 for ModernBERT-large, 170 for mmBERT-base, the 3-element `temperature` included.
pub fn expected_tensors(cfg: &CheckpointConfig) -> Vec<TensorSpec> {
    let e = &cfg.encoder;
    let (d, i, v) = (e.hidden_size, e.intermediate_size, e.vocab_size);
    let mut out = Vec::new();
    let mut push = |name: String, shape: &[usize]| {
        out.push(TensorSpec {
            name,
            shape: shape.to_vec(),
        })
    };
    push("encoder.embeddings.tok_embeddings.weight".into(), &[v, d]);
    push("encoder.embeddings.norm.weight".into(), &[d]);
    for l in 0..e.num_hidden_layers {
        let p = format!("encoder.layers.{l}");
        if l > 0 {
            push(format!("{p}.attn_norm.weight"), &[d]);
        }
        push(format!("{p}.attn.Wqkv.weight"), &[3 * d, d]);
        push(format!("{p}.attn.Wo.weight"), &[d, d]);
        push(format!("{p}.mlp_norm.weight"), &[d]);
        push(format!("{p}.mlp.Wi.weight"), &[2 * i, d]);
        push(format!("{p}.mlp.Wo.weight"), &[d, i]);
    }
    push("encoder.final_norm.weight".into(), &[d]);
    for j in 0..cfg.agent.head_layers {
        let p = format!("head.layers.{j}");
        push(format!("{p}.self_attn.in_proj_weight"), &[3 * d, d]);
        push(format!("{p}.self_attn.in_proj_bias"), &[3 * d]);
        push(format!("{p}.self_attn.out_proj.weight"), &[d, d]);
        push(format!("{p}.self_attn.out_proj.bias"), &[d]);
        push(format!("{p}.linear1.weight"), &[4 * d, d]);
        push(format!("{p}.linear1.bias"), &[4 * d]);
        push(format!("{p}.linear2.weight"), &[d, 4 * d]);
        push(format!("{p}.linear2.bias"), &[d]);
        for n in ["norm1", "norm2"] {
            push(format!("{p}.{n}.weight"), &[d]);
            push(format!("{p}.{n}.bias"), &[d]);
        }
    }
    push("type_emb.weight".into(), &[3, d]);
    push("scorer.0.weight".into(), &[d]);
    push("scorer.0.bias".into(), &[d]);
    push("scorer.1.weight".into(), &[d, d]);
    push("scorer.1.bias".into(), &[d]);
    push("scorer.3.weight".into(), &[1, d]);
    push("scorer.3.bias".into(), &[1]);
    push("act_head.0.weight".into(), &[256, d + 4]);
    push("act_head.0.bias".into(), &[256]);
    push("act_head.2.weight".into(), &[cfg.agent.n_act, 256]);
    push("act_head.2.bias".into(), &[cfg.agent.n_act]);
    push("temperature".into(), &[3]);
    out
}

/// One entry of a safetensors header.
#[derive(Debug, Clone)]
struct HeaderEntry {
    dtype: String,
    shape: Vec<usize>,
    begin: usize,
    end: usize,
}

fn dtype_size(dtype: &str) -> Option<usize> {
    match dtype {
        "F16" | "BF16" => Some(2),
        "F32" => Some(4),
        _ => None,
    }
}

/// Reads and checks the header of `path` (lengths, offsets inside the file). Returns the
/// entries by name, `__metadata__` left out.
fn read_header(path: &Path) -> Result<BTreeMap<String, HeaderEntry>, LoadError> {
    let read_err = |source| LoadError::Read {
        path: path.to_owned(),
        source,
    };
    let format_err = |reason: String| LoadError::Format {
        path: path.to_owned(),
        reason,
    };
    let mut file = File::open(path).map_err(read_err)?;
    let file_len = file.metadata().map_err(read_err)?.len();
    let mut len_bytes = [0u8; 8];
    file.read_exact(&mut len_bytes)
        .map_err(|_| format_err("shorter than the 8-byte header length".into()))?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > 100 << 20 || header_len > file_len.saturating_sub(8) {
        return Err(format_err(format!(
            "header length {header_len} does not fit a {file_len}-byte file"
        )));
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header).map_err(read_err)?;
    let json: Value = serde_json::from_slice(&header)
        .map_err(|e| format_err(format!("header is not JSON: {e}")))?;
    let obj = json
        .as_object()
        .ok_or_else(|| format_err("header is not a JSON object".into()))?;
    let data_len = file_len - 8 - header_len;
    let mut entries = BTreeMap::new();
    for (name, v) in obj {
        if name == "__metadata__" {
            continue;
        }
        let bad = |what: &str| format_err(format!("tensor {name:?}: {what}"));
        let dtype = v
            .get("dtype")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("no dtype"))?
            .to_owned();
        let shape = v
            .get("shape")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("no shape"))?
            .iter()
            .map(|x| x.as_u64().map(|n| n as usize))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("shape is not a list of integers"))?;
        let offsets = v
            .get("data_offsets")
            .and_then(Value::as_array)
            .filter(|o| o.len() == 2)
            .and_then(|o| Some((o[0].as_u64()?, o[1].as_u64()?)))
            .ok_or_else(|| bad("data_offsets is not [begin, end]"))?;
        let (begin, end) = offsets;
        if begin > end || end > data_len {
            return Err(bad(&format!(
                "data [{begin}, {end}) lies outside the {data_len} data bytes (file truncated?)"
            )));
        }
        if let Some(size) = dtype_size(&dtype) {
            let numel = shape.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
            if numel.and_then(|n| n.checked_mul(size)) != Some((end - begin) as usize) {
                return Err(bad(&format!(
                    "{} data bytes do not hold a {dtype} tensor of shape {shape:?}",
                    end - begin
                )));
            }
        }
        entries.insert(
            name.clone(),
            HeaderEntry {
                dtype,
                shape,
                begin: begin as usize,
                end: end as usize,
            },
        );
    }
    Ok(entries)
}

/// Checks the header against the inventory the configs imply: every name present, no
/// other name, shapes equal, dtypes floating point.
fn check_inventory(
    header: &BTreeMap<String, HeaderEntry>,
    expected: &[TensorSpec],
) -> Result<(), LoadError> {
    for spec in expected {
        let entry = header
            .get(&spec.name)
            .ok_or_else(|| LoadError::MissingTensor {
                name: spec.name.clone(),
            })?;
        if entry.shape != spec.shape {
            return Err(LoadError::Shape {
                name: spec.name.clone(),
                expected: spec.shape.clone(),
                found: entry.shape.clone(),
            });
        }
        if dtype_size(&entry.dtype).is_none() {
            return Err(LoadError::Dtype {
                name: spec.name.clone(),
                dtype: entry.dtype.clone(),
            });
        }
    }
    let known: std::collections::HashSet<&str> = expected.iter().map(|s| s.name.as_str()).collect();
    if let Some(name) = header.keys().find(|k| !known.contains(k.as_str())) {
        return Err(LoadError::UnexpectedTensor { name: name.clone() });
    }
    Ok(())
}

/// The checkpoint's tensors by name, converted: f32 for the names `in_f32` accepts,
/// `dtype` for the rest, evaluated on `stream`'s device.
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
        stream: &Stream,
    ) -> Result<Self, LoadError> {
        let path = dir.join("model.safetensors");
        let header = read_header(&path)?;
        let expected = expected_tensors(cfg);
        check_inventory(&header, &expected)?;
        let data_bytes: usize = header.values().map(|e| e.end - e.begin).sum();
        tracing::debug!(path = %path.display(), tensors = header.len(), data_bytes, "safetensors header checked");

        let mlx_err = |context: &str| {
            let context = context.to_owned();
            move |source: Exception| LoadError::Mlx { context, source }
        };
        // MLX loads files on the CPU only; the dtype conversion then runs on the target stream.
        let loaded = mlx_rs::with_stream(&Stream::cpu(), || Array::load_safetensors(&path))
            .map_err(|e| LoadError::Format {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        let mut arrays = HashMap::with_capacity(expected.len());
        mlx_rs::with_stream(stream, || -> Result<(), LoadError> {
            for spec in &expected {
                let a = loaded
                    .get(&spec.name)
                    .ok_or_else(|| LoadError::MissingTensor {
                        name: spec.name.clone(),
                    })?;
                let target = if in_f32(&spec.name) {
                    Dtype::Float32
                } else {
                    dtype
                };
                let converted = a
                    .as_dtype(target)
                    .map_err(mlx_err(&format!("converting {}", spec.name)))?;
                arrays.insert(spec.name.clone(), converted);
            }
            mlx_rs::transforms::eval(arrays.values()).map_err(mlx_err("materializing the weights"))
        })?;
        Ok(TensorStore { arrays })
    }

    /// Takes one tensor out of the store.
    pub fn take(&mut self, name: &str) -> Result<Array, LoadError> {
        self.arrays
            .remove(name)
            .ok_or_else(|| LoadError::MissingTensor {
                name: name.to_owned(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use laya_core::config::{AgentConfig, EncoderConfig};

    fn config(
        hidden: usize,
        heads: usize,
        layers: usize,
        inter: usize,
        vocab: usize,
    ) -> CheckpointConfig {
        let enc = serde_json::json!({
            "hidden_size": hidden, "num_attention_heads": heads, "num_hidden_layers": layers,
            "intermediate_size": inter, "vocab_size": vocab,
        });
        let agent = serde_json::json!({"encoder": "x", "head_layers": 2, "act_costs": {"escalate": 0.5},
            "max_len": 512, "head_max_len": 192});
        CheckpointConfig {
            agent: AgentConfig::from_json(&agent).expect("agent config"),
            encoder: EncoderConfig::from_json(&enc).expect("encoder config"),
        }
    }

    fn params(specs: &[TensorSpec]) -> usize {
        specs
            .iter()
            .map(|s| s.shape.iter().product::<usize>())
            .sum()
    }

    #[test]
    fn inventory_matches_the_published_checkpoints() {
        let large = expected_tensors(&config(1024, 16, 28, 2624, 50368));
        assert_eq!(large.len(), 206);
        assert_eq!(params(&large), 421_293_830);
        let base = expected_tensors(&config(768, 12, 22, 1152, 256000));
        assert_eq!(base.len(), 170);
        assert_eq!(params(&base), 321_908_998);
    }
}
