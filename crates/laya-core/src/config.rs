//! Checkpoint configuration: `rl_agent_config.json` (the agent) and `encoder/config.json`
//! (the ModernBERT encoder), read the way upstream laya 0.4.15 reads them.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Question type, with upstream's ids (`QTYPES`): the index into `type_emb` and `temperature`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QType {
    Choice = 0,
    Score = 1,
    Noul = 2,
}

impl QType {
    pub fn name(self) -> &'static str {
        match self {
            QType::Choice => "choice",
            QType::Score => "score",
            QType::Noul => "noul",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn from_name(name: &str) -> Option<QType> {
        match name {
            "choice" => Some(QType::Choice),
            "score" => Some(QType::Score),
            "noul" => Some(QType::Noul),
            _ => None,
        }
    }
}

/// Attention kind of one encoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    /// Every real token attends every real token.
    Global,
    /// Keys limited to `|i - j| <= local_attention / 2` by sequence index.
    Sliding,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid JSON: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The encoder shape and numerics that matter at inference (spec `model.md` 1.4).
#[derive(Debug, Clone, PartialEq)]
pub struct EncoderConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_attention_heads: usize,
    pub num_hidden_layers: usize,
    pub intermediate_size: usize,
    pub norm_eps: f32,
    /// Full window width; a sliding layer reaches `local_attention / 2` tokens each way.
    pub local_attention: usize,
    pub layer_kinds: Vec<LayerKind>,
    pub rope_theta_global: f32,
    pub rope_theta_local: f32,
    pub max_position_embeddings: usize,
}

impl EncoderConfig {
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Half window of the sliding layers, inclusive (`|i - j| <= half_window`).
    pub fn half_window(&self) -> usize {
        self.local_attention / 2
    }

    pub fn rope_theta(&self, kind: LayerKind) -> f32 {
        match kind {
            LayerKind::Global => self.rope_theta_global,
            LayerKind::Sliding => self.rope_theta_local,
        }
    }

    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let v = read_json(path)?;
        Self::from_json(&v).map_err(|message| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        })
    }

    /// Accepts both transformers layouts: 5.x (`rope_parameters`, `layer_types`) and
    /// 4.x (`global_rope_theta`, `local_rope_theta`, layer type from
    /// `global_attn_every_n_layers`). Like upstream's `_apply_rope_config`, the 5.x per-type
    /// thetas win, because 4.x defaults would silently give mmBERT a local theta of 10000.
    pub fn from_json(v: &Value) -> Result<Self, String> {
        let usize_field = |key: &str| -> Result<usize, String> {
            v.get(key)
                .and_then(Value::as_u64)
                .map(|n| n as usize)
                .ok_or_else(|| format!("'{key}' must be a non-negative integer"))
        };
        let usize_or = |key: &str, default: usize| -> Result<usize, String> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(_) => usize_field(key),
            }
        };
        let hidden_size = usize_field("hidden_size")?;
        let num_attention_heads = usize_field("num_attention_heads")?;
        let num_hidden_layers = usize_field("num_hidden_layers")?;
        if num_attention_heads == 0 || hidden_size % num_attention_heads != 0 {
            return Err("hidden_size must be a multiple of num_attention_heads".into());
        }
        let every = usize_or("global_attn_every_n_layers", 3)?.max(1);
        let layer_kinds = match v.get("layer_types").and_then(Value::as_array) {
            Some(types) => {
                if types.len() != num_hidden_layers {
                    return Err("layer_types must have one entry per layer".into());
                }
                types
                    .iter()
                    .map(|t| match t.as_str() {
                        Some("full_attention") => Ok(LayerKind::Global),
                        Some("sliding_attention") => Ok(LayerKind::Sliding),
                        other => Err(format!("unknown layer type {other:?}")),
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            None => (0..num_hidden_layers)
                .map(|i| {
                    if i % every == 0 {
                        LayerKind::Global
                    } else {
                        LayerKind::Sliding
                    }
                })
                .collect(),
        };
        let theta = |layer_type: &str, legacy: &str, default: f64| -> f64 {
            let rope = v.get("rope_parameters");
            rope.and_then(|r| r.get(layer_type))
                .and_then(|p| p.get("rope_theta"))
                .and_then(Value::as_f64)
                .or_else(|| {
                    rope.and_then(|r| r.get("rope_theta"))
                        .and_then(Value::as_f64)
                })
                .or_else(|| v.get(legacy).and_then(Value::as_f64))
                .unwrap_or(default)
        };
        let norm_eps = v
            .get("norm_eps")
            .or_else(|| v.get("layer_norm_eps"))
            .and_then(Value::as_f64)
            .unwrap_or(1e-5);
        if let Some(act) = v.get("hidden_activation").and_then(Value::as_str) {
            if act != "gelu" {
                return Err(format!(
                    "hidden_activation {act:?} is not supported (only exact-erf \"gelu\")"
                ));
            }
        }
        for key in ["norm_bias", "attention_bias", "mlp_bias"] {
            if v.get(key).and_then(Value::as_bool) == Some(true) {
                return Err(format!(
                    "{key}=true is not supported (Laya encoders have no biases)"
                ));
            }
        }
        Ok(EncoderConfig {
            vocab_size: usize_field("vocab_size")?,
            hidden_size,
            num_attention_heads,
            num_hidden_layers,
            intermediate_size: usize_field("intermediate_size")?,
            norm_eps: norm_eps as f32,
            local_attention: usize_or("local_attention", 128)?,
            layer_kinds,
            rope_theta_global: theta("full_attention", "global_rope_theta", 160000.0) as f32,
            rope_theta_local: theta("sliding_attention", "local_rope_theta", 10000.0) as f32,
            max_position_embeddings: usize_or("max_position_embeddings", 8192)?,
        })
    }
}

/// Lower and upper bounds upstream's `clamp_temperature` applies to every temperature at load.
pub const TEMP_MIN: f64 = 0.5;
pub const TEMP_MAX: f64 = 5.0;

/// Upstream `clamp_temperature`: non-numbers (bools included), NaN and infinities become 1.0.
pub fn clamp_temperature(v: &Value) -> f64 {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(t) if t.is_finite() => t.clamp(TEMP_MIN, TEMP_MAX),
            _ => 1.0,
        },
        _ => 1.0,
    }
}

/// `rl_agent_config.json`, reduced to what inference reads (spec `model.md` 1.3).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// Hub id of the base encoder; only a fallback upstream never needs with `encoder/`.
    pub encoder: String,
    pub head_layers: usize,
    pub max_len: usize,
    pub head_max_len: usize,
    /// Width of the act head: `len(act_costs) + 1`.
    pub n_act: usize,
    /// Per-type temperatures `[choice, score, noul]`, already clamped.
    pub temperature: [f64; 3],
    /// Per-bucket overrides (`"choice:3-5"` ...), clamped, in file order.
    pub temperature_by_options: Vec<(String, f64)>,
    pub amp_dtype: String,
    pub parallel_layout: bool,
}

impl AgentConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let v = read_json(path)?;
        Self::from_json(&v).map_err(|message| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        })
    }

    pub fn from_json(v: &Value) -> Result<Self, String> {
        let obj = v.as_object().ok_or("the config must be a JSON object")?;
        let encoder = obj
            .get("encoder")
            .and_then(Value::as_str)
            .ok_or("'encoder' is missing")?
            .to_owned();
        let int_or = |key: &str, default: usize| -> Result<usize, String> {
            match obj.get(key) {
                None => Ok(default),
                Some(x) => x
                    .as_u64()
                    .map(|n| n as usize)
                    .ok_or_else(|| format!("'{key}' must be an integer")),
            }
        };
        let head_layers = match obj.get("head_layers") {
            Some(x) => x.as_u64().ok_or("'head_layers' must be an integer")? as usize,
            None => return Err("'head_layers' is missing".into()),
        };
        let max_len = int_or("max_len", 512)?;
        let head_max_len = int_or("head_max_len", 192)?;
        let n_act = match obj.get("act_costs") {
            None => 1,
            Some(Value::Object(m)) => m.len() + 1,
            Some(_) => return Err("'act_costs' must be an object".into()),
        };
        let temperature = match obj.get("temperature") {
            None => [1.0; 3],
            Some(Value::Array(t)) if t.len() == 3 => [
                clamp_temperature(&t[0]),
                clamp_temperature(&t[1]),
                clamp_temperature(&t[2]),
            ],
            Some(_) => return Err("'temperature' must be a list of exactly 3 numbers".into()),
        };
        let temperature_by_options = match obj.get("temperature_by_options") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, t)| (k.clone(), clamp_temperature(t)))
                .collect(),
            Some(_) => return Err("'temperature_by_options' must be an object".into()),
        };
        let amp_dtype = obj
            .get("amp_dtype")
            .and_then(Value::as_str)
            .unwrap_or("fp16")
            .to_owned();
        let parallel_layout = match obj.get("option_layout").and_then(Value::as_str) {
            None | Some("sequential") => false,
            Some("parallel") => true,
            Some(other) => return Err(format!("unknown option_layout {other:?}")),
        };
        if !(4 < head_max_len && head_max_len < max_len) {
            return Err(format!(
                "need 4 < head_max_len < max_len, got {head_max_len} and {max_len}"
            ));
        }
        Ok(AgentConfig {
            encoder,
            head_layers,
            max_len,
            head_max_len,
            n_act,
            temperature,
            temperature_by_options,
            amp_dtype,
            parallel_layout,
        })
    }

    /// Temperature for a question of `qtype` with `k` options (spec 4.1).
    pub fn temperature_for(&self, qtype: QType, k: usize) -> f64 {
        let bucket = temp_bucket(qtype, k);
        self.temperature_by_options
            .iter()
            .find(|(name, _)| *name == bucket)
            .map(|(_, t)| *t)
            .unwrap_or(self.temperature[qtype.index()])
    }
}

/// Upstream `temp_bucket`: `"<type>:<size>"` with sizes `2` (k <= 2), `3-5`, `6-10`, `11+`.
pub fn temp_bucket(qtype: QType, k: usize) -> String {
    let size = match k {
        0..=2 => "2",
        3..=5 => "3-5",
        6..=10 => "6-10",
        _ => "11+",
    };
    format!("{}:{}", qtype.name(), size)
}

fn read_json(path: &Path) -> Result<Value, ConfigError> {
    let text = std::fs::read(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_slice(&text).map_err(|source| ConfigError::Json {
        path: path.to_owned(),
        source,
    })
}

/// Both config files of a checkpoint directory.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointConfig {
    pub agent: AgentConfig,
    pub encoder: EncoderConfig,
}

impl CheckpointConfig {
    pub fn load(dir: &Path) -> Result<Self, ConfigError> {
        Ok(CheckpointConfig {
            agent: AgentConfig::load(&dir.join("rl_agent_config.json"))?,
            encoder: EncoderConfig::load(&dir.join("encoder").join("config.json"))?,
        })
    }
}

/// RoPE's `cos` and `sin` of `pos · θ^(−2i/hd)` for `i < hd/2` and `pos < positions`,
/// row-major `[pos][hd/2]`, every product and function in f32 (`model.md` §3.1, as
/// transformers computes `inv_freq` and the angles). Both engines build their tables here.
pub fn rope_table(theta: f32, head_dim: usize, positions: usize) -> (Vec<f32>, Vec<f32>) {
    let half = head_dim / 2;
    let inv: Vec<f32> = (0..half)
        .map(|i| 1.0f32 / theta.powf((2 * i) as f32 / head_dim as f32))
        .collect();
    let mut cos = Vec::with_capacity(positions * half);
    let mut sin = Vec::with_capacity(positions * half);
    for p in 0..positions {
        for &f in &inv {
            let a = p as f32 * f;
            cos.push(a.cos());
            sin.push(a.sin());
        }
    }
    (cos, sin)
}

#[cfg(test)]
mod tests {
    use super::rope_table;

    #[test]
    fn rope_table_starts_at_angle_zero_and_rotates_by_inv_freq() {
        let (c, s) = rope_table(10000.0, 64, 3);
        assert_eq!(c.len(), 3 * 32);
        assert!(c[..32].iter().all(|&x| x == 1.0) && s[..32].iter().all(|&x| x == 0.0));
        // Position 1, i = 0: angle 1 rad; i = 31: 10000^(-62/64).
        assert_eq!(c[32], 1.0f32.cos());
        let f = 1.0f32 / 10000f32.powf(62.0 / 64.0);
        assert_eq!(s[63], f.sin());
    }
}
