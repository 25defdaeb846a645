//! `model.safetensors` of a Laya checkpoint: the tensor inventory the configs imply
//! (`model.md` §1.6), a strict check of the file against it, and reading tensors into host
//! memory. Engines that do not load files themselves (`laya-cuda`) read through
//! [`CheckpointTensors`]; every engine checks through [`CheckpointTensors::open`].
//!
//! The header is read and checked before any tensor is, so a missing tensor, an unexpected
//! one, a wrong shape or dtype, or a truncated file each fail with an error that names the
//! tensor.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::CheckpointConfig;

/// Why `model.safetensors` cannot serve the configs' model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TensorError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Not a well-formed safetensors file (bad header, truncated data).
    #[error("{path} is not a valid safetensors file: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A tensor the model needs is absent.
    #[error("tensor {name:?} is missing from the checkpoint")]
    MissingTensor {
        /// Checkpoint name of the tensor.
        name: String,
    },
    /// The checkpoint holds a tensor the model does not have.
    #[error("unexpected tensor {name:?} in the checkpoint")]
    UnexpectedTensor {
        /// Checkpoint name of the tensor.
        name: String,
    },
    /// A tensor's shape differs from the one the configs imply.
    #[error("tensor {name:?} has shape {found:?}, the configs imply {expected:?}")]
    Shape {
        /// Checkpoint name of the tensor.
        name: String,
        /// Shape the configs imply.
        expected: Vec<usize>,
        /// Shape in the file.
        found: Vec<usize>,
    },
    /// A tensor's dtype is not a floating-point type (F16, BF16 or F32).
    #[error("tensor {name:?} has dtype {dtype}, expected F16, BF16 or F32")]
    Dtype {
        /// Checkpoint name of the tensor.
        name: String,
        /// Dtype string of the safetensors header.
        dtype: String,
    },
}

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
fn read_header(path: &Path) -> Result<BTreeMap<String, HeaderEntry>, TensorError> {
    let read_err = |source| TensorError::Read {
        path: path.to_owned(),
        source,
    };
    let format_err = |reason: String| TensorError::Format {
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
) -> Result<(), TensorError> {
    for spec in expected {
        let entry = header
            .get(&spec.name)
            .ok_or_else(|| TensorError::MissingTensor {
                name: spec.name.clone(),
            })?;
        if entry.shape != spec.shape {
            return Err(TensorError::Shape {
                name: spec.name.clone(),
                expected: spec.shape.clone(),
                found: entry.shape.clone(),
            });
        }
        if dtype_size(&entry.dtype).is_none() {
            return Err(TensorError::Dtype {
                name: spec.name.clone(),
                dtype: entry.dtype.clone(),
            });
        }
    }
    let known: std::collections::HashSet<&str> = expected.iter().map(|s| s.name.as_str()).collect();
    if let Some(name) = header.keys().find(|k| !known.contains(k.as_str())) {
        return Err(TensorError::UnexpectedTensor { name: name.clone() });
    }
    Ok(())
}

/// `model.safetensors` of a checkpoint directory, its header checked against the configs;
/// tensors are read on demand.
#[derive(Debug)]
pub struct CheckpointTensors {
    path: PathBuf,
    data_start: u64,
    header: BTreeMap<String, HeaderEntry>,
}

impl CheckpointTensors {
    /// Reads the header of `dir/model.safetensors` and checks it against `cfg`.
    pub fn open(dir: &Path, cfg: &CheckpointConfig) -> Result<Self, TensorError> {
        let path = dir.join("model.safetensors");
        let header = read_header(&path)?;
        check_inventory(&header, &expected_tensors(cfg))?;
        let mut len_bytes = [0u8; 8];
        File::open(&path)
            .and_then(|mut f| f.read_exact(&mut len_bytes))
            .map_err(|source| TensorError::Read {
                path: path.clone(),
                source,
            })?;
        Ok(CheckpointTensors {
            data_start: 8 + u64::from_le_bytes(len_bytes),
            path,
            header,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Total bytes of tensor data.
    pub fn data_bytes(&self) -> usize {
        self.header.values().map(|e| e.end - e.begin).sum()
    }

    /// The shape of tensor `name`.
    pub fn shape(&self, name: &str) -> Result<&[usize], TensorError> {
        Ok(&self.entry(name)?.shape)
    }

    fn entry(&self, name: &str) -> Result<&HeaderEntry, TensorError> {
        self.header
            .get(name)
            .ok_or_else(|| TensorError::MissingTensor {
                name: name.to_owned(),
            })
    }

    /// Tensor `name` converted to f32, row-major.
    pub fn read_f32(&self, name: &str) -> Result<Vec<f32>, TensorError> {
        let e = self.entry(name)?;
        let raw = self.raw(e)?;
        Ok(match e.dtype.as_str() {
            "F32" => raw
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            "F16" => raw
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            "BF16" => raw
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            other => {
                return Err(TensorError::Dtype {
                    name: name.to_owned(),
                    dtype: other.to_owned(),
                })
            }
        })
    }

    /// Tensor `name` as IEEE half-precision bit patterns, row-major: F16 data as stored,
    /// F32 and BF16 rounded to nearest.
    pub fn read_f16_bits(&self, name: &str) -> Result<Vec<u16>, TensorError> {
        let e = self.entry(name)?;
        if e.dtype == "F16" {
            let raw = self.raw(e)?;
            return Ok(raw
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect());
        }
        Ok(self
            .read_f32(name)?
            .into_iter()
            .map(|x| half::f16::from_f32(x).to_bits())
            .collect())
    }

    fn raw(&self, e: &HeaderEntry) -> Result<Vec<u8>, TensorError> {
        let read_err = |source| TensorError::Read {
            path: self.path.clone(),
            source,
        };
        let mut f = File::open(&self.path).map_err(read_err)?;
        f.seek(SeekFrom::Start(self.data_start + e.begin as u64))
            .map_err(read_err)?;
        let mut buf = vec![0u8; e.end - e.begin];
        f.read_exact(&mut buf).map_err(read_err)?;
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AgentConfig, EncoderConfig};

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
