//! Writes a random-weight Laya checkpoint directory, deterministically from a seed, in
//! upstream's exact layout (`model.md` §1.2, §1.6): `rl_agent_config.json`,
//! `encoder/config.json`, `tokenizer/{tokenizer.json, tokenizer_config.json}` and
//! `model.safetensors` (every tensor F16; `temperature` F32 in the english/multilingual
//! layout), with the tensor inventory `laya_mlx::weights::expected_tensors` derives from the
//! configs. No Python, no MLX: the safetensors file is streamed by hand, tensor by tensor.
//!
//! ```text
//! cargo run --release -p laya-mlx --example make-checkpoint -- \
//!     --preset tiny --seed 1001 --out /tmp/tiny [--configs DIR] [--force]
//! ```
//!
//! Presets (configs from `crates/laya-fixtures/data/checkpoint-configs/<base>`):
//!
//! | preset | base configs | encoder | params |
//! |---|---|---|---|
//! | `tiny` | typed-decisions | hidden 128, 2×64 heads, 6 layers, intermediate 192 | 7,732,742 |
//! | `tiny-multilingual-shape` | multilingual (RoPE 160000 on every layer) | same tiny dims | 7,732,742 |
//! | `large` | typed-decisions, byte for byte | ModernBERT-large | 421,293,830 |
//! | `multilingual` | multilingual, byte for byte | mmBERT-base | 321,908,998 |
//! | `english` | english, byte for byte | ModernBERT-large | 421,293,830 |
//!
//! Every checkpoint gets the ModernBERT tokenizer (`crates/laya-fixtures/data/tokenizers/modernbert`;
//! the real 34 MB mmBERT tokenizer is not available offline; its ids all fit the 256k table).
//!
//! Values follow the oracle's initialisation scales (`shared/oracle/README.md`,
//! "Initialisation"): each tensor has its own random stream seeded from
//! `"<seed>/<tensor name>"`, so values do not depend on iteration order. The streams are not
//! numpy's, so the values differ from `make_checkpoint.py`'s.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use laya_core::config::CheckpointConfig;
use laya_mlx::weights::{expected_tensors, TensorSpec};
use serde_json::Value;

struct Preset {
    base: &'static str,
    tiny_dims: bool,
    temperature_f32: bool,
    tokenizer_config: &'static str,
}

fn preset(name: &str) -> Option<Preset> {
    let p = |base, tiny_dims, temperature_f32, tokenizer_config| Preset {
        base,
        tiny_dims,
        temperature_f32,
        tokenizer_config,
    };
    Some(match name {
        "tiny" => p("typed-decisions", true, false, "typed-decisions"),
        "tiny-multilingual-shape" => p("multilingual", true, true, "english"),
        "large" => p("typed-decisions", false, false, "typed-decisions"),
        "multilingual" => p("multilingual", false, true, "english"),
        "english" => p("english", false, true, "english"),
        _ => return None,
    })
}

const USAGE: &str =
    "usage: make-checkpoint --preset tiny|tiny-multilingual-shape|large|multilingual|english \
--seed N --out DIR [--configs FIXTURES_DIR] [--force]";

struct Args {
    preset: String,
    seed: u64,
    out: PathBuf,
    fixtures: PathBuf,
    force: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let (mut preset, mut seed, mut out, mut fixtures, mut force) = (None, None, None, None, false);
    while let Some(a) = it.next() {
        let mut value = |flag: &str| it.next().ok_or(format!("{flag} needs a value"));
        match a.as_str() {
            "--preset" => preset = Some(value("--preset")?),
            "--seed" => {
                seed = Some(
                    value("--seed")?
                        .parse::<u64>()
                        .map_err(|e| format!("--seed: {e}"))?,
                )
            }
            "--out" => out = Some(PathBuf::from(value("--out")?)),
            "--configs" | "--fixtures" => fixtures = Some(PathBuf::from(value("--configs")?)),
            "--force" => force = true,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let default_fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../laya-fixtures/data");
    Ok(Args {
        preset: preset.ok_or(USAGE)?,
        seed: seed.ok_or(USAGE)?,
        out: out.ok_or(USAGE)?,
        fixtures: fixtures
            .or_else(|| std::env::var_os("SYS1_FIXTURES").map(PathBuf::from))
            .unwrap_or(default_fixtures),
        force,
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("make-checkpoint: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<String, String> {
    let p =
        preset(&args.preset).ok_or_else(|| format!("unknown preset {:?}\n{USAGE}", args.preset))?;
    let configs = args.fixtures.join("checkpoint-configs");
    let base = configs.join(p.base);
    if !base.is_dir() {
        return Err(format!(
            "{} is not a directory (set --configs or SYS1_FIXTURES)",
            base.display()
        ));
    }
    if args.out.exists() && !args.force {
        return Err(format!(
            "{} exists; pass --force to replace it",
            args.out.display()
        ));
    }
    let name = args
        .out
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("checkpoint");
    let work = args
        .out
        .with_file_name(format!(".{name}.partial-{}", std::process::id()));
    let io = |what: &str, path: &Path| {
        let what = what.to_owned();
        let path = path.to_owned();
        move |e: std::io::Error| format!("{what} {}: {e}", path.display())
    };
    if work.exists() {
        fs::remove_dir_all(&work).map_err(io("cannot remove", &work))?;
    }
    fs::create_dir_all(work.join("encoder")).map_err(io("cannot create", &work))?;
    fs::create_dir_all(work.join("tokenizer")).map_err(io("cannot create", &work))?;

    // Copies are made writable (0644), whatever the fixture files' modes.
    let copy = |from: &Path, to: &Path| {
        fs::copy(from, to).map_err(io("cannot copy", from))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(to, fs::Permissions::from_mode(0o644))
                .map_err(io("cannot chmod", to))?;
        }
        Ok::<(), String>(())
    };
    copy(
        &base.join("rl_agent_config.json"),
        &work.join("rl_agent_config.json"),
    )?;
    let enc_src = base.join("encoder").join("config.json");
    let enc_dst = work.join("encoder").join("config.json");
    if p.tiny_dims {
        fs::write(&enc_dst, tiny_encoder_config(&enc_src)?)
            .map_err(io("cannot write", &enc_dst))?;
    } else {
        copy(&enc_src, &enc_dst)?;
    }
    copy(
        &args.fixtures.join("tokenizers/modernbert/tokenizer.json"),
        &work.join("tokenizer").join("tokenizer.json"),
    )?;
    copy(
        &configs
            .join(p.tokenizer_config)
            .join("tokenizer")
            .join("tokenizer_config.json"),
        &work.join("tokenizer").join("tokenizer_config.json"),
    )?;

    let cfg = CheckpointConfig::load(&work).map_err(|e| e.to_string())?;
    let specs = expected_tensors(&cfg);
    let st = work.join("model.safetensors");
    let bytes = write_safetensors(&st, &specs, &cfg, args.seed, p.temperature_f32)
        .map_err(io("cannot write", &st))?;

    if args.out.exists() {
        fs::remove_dir_all(&args.out).map_err(io("cannot remove", &args.out))?;
    }
    fs::rename(&work, &args.out).map_err(io("cannot move into place", &work))?;
    let params: usize = specs
        .iter()
        .map(|s| s.shape.iter().product::<usize>())
        .sum();
    Ok(serde_json::json!({
        "preset": args.preset,
        "seed": args.seed,
        "out": args.out.display().to_string(),
        "tensors": specs.len(),
        "parameters": params,
        "model_safetensors_bytes": bytes,
    })
    .to_string())
}

/// The base encoder config with the tiny dims, like `make_checkpoint.py` (`TINY_DIMS`).
fn tiny_encoder_config(src: &Path) -> Result<String, String> {
    let text = fs::read(src).map_err(|e| format!("cannot read {}: {e}", src.display()))?;
    let mut v: Value =
        serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", src.display()))?;
    let obj = v
        .as_object_mut()
        .ok_or_else(|| format!("{} is not a JSON object", src.display()))?;
    let layers = 6usize;
    let every = obj
        .get("global_attn_every_n_layers")
        .and_then(Value::as_u64)
        .unwrap_or(3)
        .max(1) as usize;
    for (k, n) in [
        ("hidden_size", 128u64),
        ("num_attention_heads", 2),
        ("num_hidden_layers", layers as u64),
        ("intermediate_size", 192),
        ("local_attention", 128),
        ("vocab_size", 50368),
    ] {
        obj.insert(k.into(), n.into());
    }
    let types: Vec<Value> = (0..layers)
        .map(|i| {
            if i % every == 0 {
                "full_attention"
            } else {
                "sliding_attention"
            }
            .into()
        })
        .collect();
    obj.insert("layer_types".into(), types.into());
    obj.insert("dtype".into(), "float32".into());
    // What `make_checkpoint.py` writes (transformers 5.24.0's save_pretrained).
    obj.insert("transformers_version".into(), "5.24.0".into());
    let mut sorted: BTreeMap<String, Value> = BTreeMap::new();
    for (k, val) in obj.iter() {
        sorted.insert(k.clone(), val.clone());
    }
    let mut out = serde_json::to_string_pretty(&sorted).map_err(|e| e.to_string())?;
    out.push('\n');
    Ok(out)
}

/// How one tensor is initialised: `N(mean, std)` or the constant `mean` when `std == 0`.
fn init_rule(name: &str, shape: &[usize], d: usize, inter: usize) -> (f64, f64) {
    if name == "temperature" {
        return (1.0, 0.0);
    }
    let parts: Vec<&str> = name.split('.').collect();
    let parent = parts.len().checked_sub(2).map(|i| parts[i]).unwrap_or("");
    let is_norm = parent.contains("norm") || name.starts_with("scorer.0.");
    if is_norm && name.ends_with(".weight") {
        return (1.0, 0.1);
    }
    if name.ends_with(".bias") || name.ends_with("in_proj_bias") {
        return (0.0, 0.02);
    }
    let sd = |x: f64| (0.0, x);
    let df = d as f64;
    match name {
        "encoder.embeddings.tok_embeddings.weight" => sd(1.0),
        "type_emb.weight" => sd(0.5),
        "scorer.1.weight" => sd(1.0 / df.sqrt()),
        "scorer.3.weight" => sd(16.0 / df.sqrt()),
        "act_head.0.weight" => sd(1.0 / (df + 4.0).sqrt()),
        "act_head.2.weight" => sd(1.0 / 16.0),
        _ if name.ends_with("attn.Wqkv.weight") || name.ends_with("mlp.Wi.weight") => {
            sd(1.0 / df.sqrt())
        }
        _ if name.ends_with("attn.Wo.weight") => sd(0.5 / df.sqrt()),
        _ if name.ends_with("mlp.Wo.weight") => sd(0.5 / (inter as f64).sqrt()),
        // Head: in_proj, out_proj, linear1, linear2.
        _ => sd(1.0 / (*shape.last().unwrap_or(&1) as f64).sqrt()),
    }
}

/// Streams the safetensors file: 8-byte little-endian header length, the JSON header
/// (compact, padded with spaces to 8 bytes), then each tensor's little-endian data.
fn write_safetensors(
    path: &Path,
    specs: &[TensorSpec],
    cfg: &CheckpointConfig,
    seed: u64,
    temperature_f32: bool,
) -> std::io::Result<u64> {
    let f32_tensor = |s: &TensorSpec| temperature_f32 && s.name == "temperature";
    // The `safetensors` library's order: wider dtypes first, then by name; the header lists
    // the tensors in that same order.
    let mut sorted: Vec<&TensorSpec> = specs.iter().collect();
    sorted.sort_by(|a, b| {
        f32_tensor(b)
            .cmp(&f32_tensor(a))
            .then_with(|| a.name.cmp(&b.name))
    });
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for s in &sorted {
        let size = if f32_tensor(s) { 4 } else { 2 };
        let n: usize = s.shape.iter().product();
        header.insert(
            s.name.clone(),
            serde_json::json!({
                "dtype": if f32_tensor(s) { "F32" } else { "F16" },
                "shape": s.shape,
                "data_offsets": [offset, offset + n * size],
            }),
        );
        offset += n * size;
    }
    let mut header = Value::Object(header).to_string().into_bytes();
    header.resize(header.len().next_multiple_of(8), b' ');
    let mut w = BufWriter::with_capacity(1 << 20, fs::File::create(path)?);
    w.write_all(&(header.len() as u64).to_le_bytes())?;
    w.write_all(&header)?;
    let (d, inter) = (cfg.encoder.hidden_size, cfg.encoder.intermediate_size);
    let mut buf = Vec::with_capacity(1 << 20);
    for s in &sorted {
        let (mean, std) = init_rule(&s.name, &s.shape, d, inter);
        let n: usize = s.shape.iter().product();
        let mut rng = Rng::for_tensor(seed, &s.name);
        let mut left = n;
        while left > 0 {
            let chunk = left.min(1 << 18);
            buf.clear();
            for _ in 0..chunk {
                let x = if std == 0.0 {
                    mean
                } else {
                    mean + std * rng.normal()
                } as f32;
                if f32_tensor(s) {
                    buf.extend_from_slice(&x.to_le_bytes());
                } else {
                    buf.extend_from_slice(&half::f16::from_f32(x).to_le_bytes());
                }
            }
            w.write_all(&buf)?;
            left -= chunk;
        }
    }
    w.flush()?;
    Ok(8 + header.len() as u64 + offset as u64)
}

/// xoshiro256++ seeded (through SplitMix64) from FNV-1a of `"<seed>/<name>"`; normals by the
/// Box–Muller transform.
struct Rng {
    s: [u64; 4],
    spare: Option<f64>,
}

impl Rng {
    fn for_tensor(seed: u64, name: &str) -> Rng {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in format!("{seed}/{name}").bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        let mut sm = h;
        let mut next = || {
            sm = sm.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = sm;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
            spare: None,
        }
    }

    fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in (0, 1].
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) * (1.0 / (1u64 << 53) as f64)
    }

    fn normal(&mut self) -> f64 {
        if let Some(x) = self.spare.take() {
            return x;
        }
        let r = (-2.0 * self.uniform().ln()).sqrt();
        let theta = 2.0 * std::f64::consts::PI * self.uniform();
        self.spare = Some(r * theta.sin());
        r * theta.cos()
    }
}
