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

use crate::config::{CheckpointConfig, MAX_LAYERS};

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
    /// The configs imply a tensor inventory no file can hold (more layers than
    /// [`MAX_LAYERS`], a dimension whose multiple overflows). Configs read by
    /// [`CheckpointConfig::load`] never do; this guards configs built in code.
    #[error("the configs imply no loadable checkpoint: {reason}")]
    Inventory {
        /// What is impossible.
        reason: String,
    },
    /// A tensor holds a NaN or an infinity (in the dtype it is read into), which would make
    /// every answer NaN.
    #[error("tensor {name:?} holds a non-finite value (NaN or infinity) at element {index}")]
    NonFinite {
        /// Checkpoint name of the tensor.
        name: String,
        /// Row-major index of the first such element.
        index: usize,
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
///
/// For configs that [`try_expected_tensors`] accepts, which every config read by
/// [`CheckpointConfig::load`] is; the loaders call that instead.
///
/// # Panics
///
/// Where [`try_expected_tensors`] fails: more than [`MAX_LAYERS`] layers, or a dimension
/// whose multiple overflows `usize`.
pub fn expected_tensors(cfg: &CheckpointConfig) -> Vec<TensorSpec> {
    match try_expected_tensors(cfg) {
        Ok(specs) => specs,
        Err(e) => panic!("{e}"),
    }
}

/// [`expected_tensors`], or [`TensorError::Inventory`] where the configs imply more than
/// [`MAX_LAYERS`] layers (the list is built whole before the header is compared with it) or
/// a shape whose size overflows (it would wrap in release builds).
pub fn try_expected_tensors(cfg: &CheckpointConfig) -> Result<Vec<TensorSpec>, TensorError> {
    let e = &cfg.encoder;
    let impossible = |reason: String| TensorError::Inventory { reason };
    for (key, n) in [
        ("num_hidden_layers", e.num_hidden_layers),
        ("head_layers", cfg.agent.head_layers),
    ] {
        if n > MAX_LAYERS {
            return Err(impossible(format!(
                "{key} {n} is more than the {MAX_LAYERS} layers a checkpoint may have"
            )));
        }
    }
    let (d, i, v) = (e.hidden_size, e.intermediate_size, e.vocab_size);
    let times = |n: usize, k: usize, what: &str| {
        n.checked_mul(k)
            .ok_or_else(|| impossible(format!("{k} × {what} ({n}) overflows")))
    };
    let (d3, d4, i2) = (
        times(d, 3, "hidden_size")?,
        times(d, 4, "hidden_size")?,
        times(i, 2, "intermediate_size")?,
    );
    let d_plus_4 = d
        .checked_add(4)
        .ok_or_else(|| impossible(format!("hidden_size ({d}) + 4 overflows")))?;
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
        push(format!("{p}.attn.Wqkv.weight"), &[d3, d]);
        push(format!("{p}.attn.Wo.weight"), &[d, d]);
        push(format!("{p}.mlp_norm.weight"), &[d]);
        push(format!("{p}.mlp.Wi.weight"), &[i2, d]);
        push(format!("{p}.mlp.Wo.weight"), &[d, i]);
    }
    push("encoder.final_norm.weight".into(), &[d]);
    for j in 0..cfg.agent.head_layers {
        let p = format!("head.layers.{j}");
        push(format!("{p}.self_attn.in_proj_weight"), &[d3, d]);
        push(format!("{p}.self_attn.in_proj_bias"), &[d3]);
        push(format!("{p}.self_attn.out_proj.weight"), &[d, d]);
        push(format!("{p}.self_attn.out_proj.bias"), &[d]);
        push(format!("{p}.linear1.weight"), &[d4, d]);
        push(format!("{p}.linear1.bias"), &[d4]);
        push(format!("{p}.linear2.weight"), &[d, d4]);
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
    push("act_head.0.weight".into(), &[256, d_plus_4]);
    push("act_head.0.bias".into(), &[256]);
    push("act_head.2.weight".into(), &[cfg.agent.n_act, 256]);
    push("act_head.2.bias".into(), &[cfg.agent.n_act]);
    push("temperature".into(), &[3]);
    Ok(out)
}

/// Index of the first non-finite value among IEEE half-precision bit patterns.
///
/// Blocks of 1,024 are OR-reduced without branching (the compiler vectorises the fold) and
/// only a block with a hit is searched: ModernBERT-large's 421M f16 weights take ~30 ms on
/// one aarch64 core.
pub fn first_non_finite_f16_bits(bits: &[u16]) -> Option<usize> {
    first_in_blocks(bits, |&b| b & 0x7c00 == 0x7c00)
}

/// Index of the first non-finite value among bfloat16 bit patterns (see
/// [`first_non_finite_f16_bits`]).
pub fn first_non_finite_bf16_bits(bits: &[u16]) -> Option<usize> {
    first_in_blocks(bits, |&b| b & 0x7f80 == 0x7f80)
}

/// Index of the first NaN or infinity (see [`first_non_finite_f16_bits`]).
pub fn first_non_finite_f32(values: &[f32]) -> Option<usize> {
    first_in_blocks(values, |x| !x.is_finite())
}

fn first_in_blocks<T>(values: &[T], bad: impl Fn(&T) -> bool) -> Option<usize> {
    const BLOCK: usize = 1024;
    values
        .chunks(BLOCK)
        .enumerate()
        .find(|(_, block)| block.iter().fold(false, |hit, x| hit | bad(x)))
        .and_then(|(b, block)| Some(b * BLOCK + block.iter().position(&bad)?))
}

/// [`TensorError::NonFinite`] for tensor `name` when a scan found element `index`.
///
/// Every tensor is scanned as it is read: one NaN weight makes every answer NaN, which the
/// server would otherwise report request after request. Over ModernBERT-large's 842 MB of
/// f16 the scans took 24-36 ms (one aarch64 core) of the 0.5-1.3 s `read_f16_bits` took for
/// every tensor, and they hold no copy.
fn finite(name: &str, index: Option<usize>) -> Result<(), TensorError> {
    match index {
        None => Ok(()),
        Some(index) => Err(TensorError::NonFinite {
            name: name.to_owned(),
            index,
        }),
    }
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
    let obj = serde_json::from_slice::<HeaderObject>(&header)
        .map_err(|e| match e.classify() {
            serde_json::error::Category::Data => {
                format_err(format!("header is not a JSON object: {e}"))
            }
            _ => format_err(format!("header is not JSON: {e}")),
        })?
        .0;
    let data_len = file_len - 8 - header_len;
    let mut entries = BTreeMap::new();
    for (name, v) in &obj {
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
        let entry = HeaderEntry {
            dtype,
            shape,
            begin: begin as usize,
            end: end as usize,
        };
        if entries.insert(name.clone(), entry).is_some() {
            // JSON parsers keep one of the two (serde_json the last), so which data a
            // duplicated name stands for depends on the reader.
            return Err(format_err(format!(
                "tensor {name:?} appears twice in the header"
            )));
        }
    }
    Ok(entries)
}

/// A JSON object's members in file order, a repeated key kept twice (a map would keep one).
struct HeaderObject(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for HeaderObject {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = HeaderObject;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<HeaderObject, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Value>()? {
                    members.push(member);
                }
                Ok(HeaderObject(members))
            }
        }
        deserializer.deserialize_map(Members)
    }
}

/// Refuses tensors whose data overlap, which the safetensors format forbids: one write
/// through either would change the other. Empty tensors occupy no bytes and overlap nothing.
fn check_disjoint(path: &Path, header: &BTreeMap<String, HeaderEntry>) -> Result<(), TensorError> {
    let mut spans: Vec<(&str, &HeaderEntry)> = header
        .iter()
        .filter(|(_, e)| e.end > e.begin)
        .map(|(n, e)| (n.as_str(), e))
        .collect();
    spans.sort_by_key(|(_, e)| (e.begin, e.end));
    // The span reaching furthest so far: any later span starting before its end overlaps it.
    let mut furthest: Option<(&str, &HeaderEntry)> = None;
    for (name, e) in spans {
        if let Some((prev, p)) = furthest.filter(|(_, p)| e.begin < p.end) {
            return Err(TensorError::Format {
                path: path.to_owned(),
                reason: format!(
                    "the data of tensors {prev:?} [{}, {}) and {name:?} [{}, {}) overlap",
                    p.begin, p.end, e.begin, e.end
                ),
            });
        }
        if furthest.is_none_or(|(_, p)| e.end > p.end) {
            furthest = Some((name, e));
        }
    }
    Ok(())
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
        check_inventory(&header, &try_expected_tensors(cfg)?)?;
        // After the inventory, so that a tensor that should not be there at all is named as
        // such rather than as overlapping the one whose data it borrows.
        check_disjoint(&path, &header)?;
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

    /// Tensor `name` converted to f32, row-major; [`TensorError::NonFinite`] where a value
    /// is NaN or infinite.
    pub fn read_f32(&self, name: &str) -> Result<Vec<f32>, TensorError> {
        let e = self.entry(name)?;
        let raw = self.raw(e)?;
        let values: Vec<f32> = match e.dtype.as_str() {
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
        };
        finite(name, first_non_finite_f32(&values))?;
        Ok(values)
    }

    /// Tensor `name` as IEEE half-precision bit patterns, row-major: F16 data as stored,
    /// F32 and BF16 rounded to nearest; [`TensorError::NonFinite`] where a value is NaN or
    /// infinite, an F32 value beyond f16's range included (it rounds to infinity).
    pub fn read_f16_bits(&self, name: &str) -> Result<Vec<u16>, TensorError> {
        let e = self.entry(name)?;
        let bits: Vec<u16> = if e.dtype == "F16" {
            self.raw(e)?
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect()
        } else {
            self.read_f32(name)?
                .into_iter()
                .map(|x| half::f16::from_f32(x).to_bits())
                .collect()
        };
        finite(name, first_non_finite_f16_bits(&bits))?;
        Ok(bits)
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
