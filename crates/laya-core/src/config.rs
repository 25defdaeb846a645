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

/// Most encoder layers (`num_hidden_layers`) and most decision-head layers (`head_layers`) a
/// config may ask for. The published encoders have 28 and 22 and the heads 2; the loaders
/// allocate per layer before the safetensors header can contradict the config, so an
/// unchecked count (1e12) aborted the process on a failed allocation.
pub const MAX_LAYERS: usize = 1024;

/// Most positions `max_position_embeddings` and `max_len` may ask for: 16 times the 8,192 of
/// ModernBERT and mmBERT. The CUDA engine builds its RoPE tables for
/// `max(max_position_embeddings, max_len)` positions at load (64 MiB at this bound with
/// 64-wide heads), so an unchecked value (1e12) aborted the process.
pub const MAX_POSITIONS: usize = 1 << 17;

/// Largest config file read (`rl_agent_config.json`, `encoder/config.json`,
/// `tokenizer_config.json`): the published ones are under 3 KB, and a config is read whole.
pub const MAX_CONFIG_BYTES: u64 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is larger than a config file can be ([`MAX_CONFIG_BYTES`]).
    #[error("{path} is larger than the {limit} bytes a config file may have")]
    TooLarge { path: PathBuf, limit: u64 },
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
                .and_then(|n| usize::try_from(n).ok())
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
        let intermediate_size = usize_field("intermediate_size")?;
        if hidden_size == 0 {
            return Err("'hidden_size' must be positive".into());
        }
        if num_attention_heads == 0 || hidden_size % num_attention_heads != 0 {
            return Err("hidden_size must be a multiple of num_attention_heads".into());
        }
        // Checked before anything is allocated per layer.
        at_most("num_hidden_layers", num_hidden_layers, MAX_LAYERS)?;
        // The tensor inventory holds `[4d, d]`, `[256, d + 4]` and `[2I, d]` shapes: sizes whose
        // multiples overflow can describe no file, and would wrap in release builds.
        for (key, n, factor) in [
            ("hidden_size", hidden_size, 4),
            ("intermediate_size", intermediate_size, 2),
        ] {
            if n.checked_mul(factor).is_none() {
                return Err(format!("'{key}' is {n}, too large for any checkpoint"));
            }
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
        // A value that is present must be a usable number: one that is not used to load and
        // then fail every request (a norm dividing by zero, RoPE angles of NaN).
        let theta = |layer_type: &str, legacy: &str, default: f64| -> Result<f32, String> {
            let paths: [&[&str]; 3] = [
                &["rope_parameters", layer_type, "rope_theta"],
                &["rope_parameters", "rope_theta"],
                &[legacy],
            ];
            positive_f32(v, &paths, default)
        };
        let norm_eps = positive_f32(v, &[&["norm_eps"], &["layer_norm_eps"]], 1e-5)?;
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
        let max_position_embeddings = usize_or("max_position_embeddings", 8192)?;
        at_most(
            "max_position_embeddings",
            max_position_embeddings,
            MAX_POSITIONS,
        )?;
        Ok(EncoderConfig {
            vocab_size: usize_field("vocab_size")?,
            hidden_size,
            num_attention_heads,
            num_hidden_layers,
            intermediate_size,
            norm_eps,
            local_attention: usize_or("local_attention", 128)?,
            layer_kinds,
            rope_theta_global: theta("full_attention", "global_rope_theta", 160000.0)?,
            rope_theta_local: theta("sliding_attention", "local_rope_theta", 10000.0)?,
            max_position_embeddings,
        })
    }
}

/// `Err` naming `key` when `n` exceeds `max`.
fn at_most(key: &str, n: usize, max: usize) -> Result<(), String> {
    if n > max {
        return Err(format!(
            "'{key}' is {n}, more than the {max} this loader accepts"
        ));
    }
    Ok(())
}

/// The number at the first of `paths` (keys into nested objects) that is present and not
/// null, as f32, which must be finite and above zero; `default` when none is present. The
/// check is on the f32 the engines compute with: 1e39 is finite in JSON and infinite there.
fn positive_f32(v: &Value, paths: &[&[&str]], default: f64) -> Result<f32, String> {
    let found = paths.iter().find_map(|path| {
        let x = path.iter().try_fold(v, |node, key| node.get(key))?;
        (!x.is_null()).then(|| (path.join("."), x))
    });
    let Some((key, x)) = found else {
        return Ok(default as f32);
    };
    match x.as_f64().map(|f| f as f32) {
        Some(f) if f.is_finite() && f > 0.0 => Ok(f),
        Some(_) => Err(format!(
            "'{key}' must be a finite number above zero (in f32), got {x}"
        )),
        None => Err(format!("'{key}' must be a number, got {x}")),
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
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| format!("'{key}' must be an integer")),
            }
        };
        let head_layers = match obj.get("head_layers") {
            Some(_) => int_or("head_layers", 0)?,
            None => return Err("'head_layers' is missing".into()),
        };
        // Checked before anything is allocated per head layer.
        at_most("head_layers", head_layers, MAX_LAYERS)?;
        let max_len = int_or("max_len", 512)?;
        // The CUDA engine's RoPE tables cover `max_len` positions.
        at_most("max_len", max_len, MAX_POSITIONS)?;
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
    let text = read_capped(path, MAX_CONFIG_BYTES).map_err(|e| match e {
        CappedReadError::Io(source) => ConfigError::Read {
            path: path.to_owned(),
            source,
        },
        CappedReadError::TooLarge => ConfigError::TooLarge {
            path: path.to_owned(),
            limit: MAX_CONFIG_BYTES,
        },
    })?;
    serde_json::from_slice(&text).map_err(|source| ConfigError::Json {
        path: path.to_owned(),
        source,
    })
}

/// Why [`read_capped`] read nothing.
#[derive(Debug)]
pub(crate) enum CappedReadError {
    Io(std::io::Error),
    /// The file holds more than the limit.
    TooLarge,
}

/// The whole of `path`, refused past `limit` bytes: files read whole must not be able to take
/// all memory. A regular file over the limit is refused from its size alone; anything else is
/// read up to one byte past the limit.
pub(crate) fn read_capped(path: &Path, limit: u64) -> Result<Vec<u8>, CappedReadError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(CappedReadError::Io)?;
    let meta = file.metadata().map_err(CappedReadError::Io)?;
    if meta.is_file() && meta.len() > limit {
        return Err(CappedReadError::TooLarge);
    }
    let mut buf = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(CappedReadError::Io)?;
    if buf.len() as u64 > limit {
        return Err(CappedReadError::TooLarge);
    }
    Ok(buf)
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
/// The tables are allocated whole: configs bound the positions to [`MAX_POSITIONS`].
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
