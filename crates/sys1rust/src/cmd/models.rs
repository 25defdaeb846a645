//! `sys1rust pull`, `sys1rust models`, `sys1rust show` and `sys1rust rm`.

use anyhow::Context;

use std::io::{BufRead, IsTerminal, Write};

use crate::cli::{ModelsArgs, PullArgs, RmArgs, ShowArgs};
use crate::registry;

/// `pull MODEL`, or without one what `serve` would preload: every checkpoint of the router's
/// registry with a Hugging Face source (`LAYA_MODELS` narrows it, as for `serve`).
pub fn pull(args: &PullArgs) -> anyhow::Result<()> {
    let hub = laya_hub::Hub::from_env().context("reading the Hugging Face settings")?;
    let progress = laya_hub::stderr_progress();
    let specs: Vec<String> = match &args.model {
        Some(model) => vec![model.clone()],
        None => {
            let router = crate::cli::RouterArgs {
                extra_models: args.extra_models.clone(),
                preload: true,
                models: args.models.clone(),
                max_loaded: 2,
                idle_unload_seconds: 0.0,
            };
            let base = std::env::current_dir().context("reading the working directory")?;
            let registry = registry::registry(&router, &base).map_err(anyhow::Error::msg)?;
            let names = registry
                .preload_names(args.models.as_deref())
                .map_err(anyhow::Error::msg)?;
            registry
                .entries
                .iter()
                .filter(|e| names.contains(&e.name))
                .filter_map(|e| match &e.source {
                    registry::Source::Hub(spec) => Some(spec.clone()),
                    _ => None,
                })
                .collect()
        }
    };
    for spec in &specs {
        let model = hub
            .pull(spec, args.revision.as_deref(), &*progress)
            .with_context(|| format!("pulling {spec:?}"))?;
        println!(
            "{} {} {}",
            model.name,
            model.revision.as_deref().unwrap_or("-"),
            model.dir.display()
        );
    }
    Ok(())
}

pub fn list(args: &ModelsArgs) -> anyhow::Result<()> {
    let hub = laya_hub::Hub::from_env().context("reading the Hugging Face settings")?;
    let models = hub.list();
    if !args.json {
        print!("{}", laya_hub::render_models_table(&models));
        return Ok(());
    }
    let rows: Vec<serde_json::Value> = models
        .iter()
        .map(|m| {
            serde_json::json!({
                "name": m.name,
                "repo": m.repo,
                "revision": m.revision,
                "pinned": m.pinned,
                "size": m.size,
                "complete": m.complete,
                "path": m.path.display().to_string(),
            })
        })
        .collect();
    println!("{}", serde_json::Value::Array(rows));
    Ok(())
}

/// The config keys `show` prints, in this order (the rest is in `--json`).
const CHECKPOINT_KEYS: [&str; 8] = [
    "model_name",
    "encoder",
    "max_len",
    "head_layers",
    "head_max_len",
    "max_prefixes",
    "max_tokens_per_batch",
    "amp_dtype",
];
const ENCODER_KEYS: [&str; 10] = [
    "model_type",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "global_attn_every_n_layers",
    "local_attention",
    "dtype",
];

/// `show MODEL`: from the model table and the cache, never the network.
pub fn show(args: &ShowArgs) -> anyhow::Result<()> {
    let hub = laya_hub::Hub::from_env().context("reading the Hugging Face settings")?;
    let d = hub
        .show(&args.model, args.revision.as_deref())
        .with_context(|| format!("cannot show {:?}", args.model))?;
    let config = |name: &str| -> anyhow::Result<Option<serde_json::Value>> {
        let path = d.path.join(name);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("reading {}", path.display())),
            Err(_) => Ok(None),
        }
    };
    let checkpoint = config("rl_agent_config.json")?;
    let encoder = config("encoder/config.json")?;
    if args.json {
        let files: Vec<serde_json::Value> = d
            .files
            .iter()
            .map(|f| {
                serde_json::json!({
                    "path": f.path,
                    "size": f.size,
                    "digest": f.digest.as_ref().map(|g| g.hex()),
                    "on_disk": f.on_disk,
                    "state": f.state.as_str(),
                })
            })
            .collect();
        let out = serde_json::json!({
            "name": d.name,
            "aliases": d.aliases,
            "repo": d.repo,
            "revision": d.revision,
            "pinned": d.pinned,
            "path": d.path.display().to_string(),
            "complete": d.complete(),
            "files": files,
            "checkpoint": checkpoint,
            "encoder": encoder,
        });
        println!("{out}");
        return Ok(());
    }
    print!(
        "{}",
        render_show(&d, &args.model, checkpoint.as_ref(), encoder.as_ref())
    );
    Ok(())
}

fn render_show(
    d: &laya_hub::ModelDetails,
    spec: &str,
    checkpoint: Option<&serde_json::Value>,
    encoder: Option<&serde_json::Value>,
) -> String {
    use laya_hub::{format_size, FileState};
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "{}", d.name);
    let mut field = |k: &str, v: String| {
        let _ = writeln!(out, "  {k:<10}  {v}");
    };
    if !d.aliases.is_empty() {
        field("aliases", d.aliases.join(", "));
    }
    if let Some(repo) = &d.repo {
        field("repo", repo.clone());
    }
    if let Some(rev) = &d.revision {
        let pin = if d.pinned { " (pinned)" } else { "" };
        field("revision", format!("{rev}{pin}"));
    }
    field("path", d.path.display().to_string());
    let cached = d
        .files
        .iter()
        .filter(|f| f.state == FileState::Cached)
        .count();
    let on_disk: u64 = d.files.iter().map(|f| f.on_disk).sum();
    let total: Option<u64> = d.files.iter().map(|f| f.size).sum();
    let state = if d.complete() {
        format!("complete, {}", format_size(on_disk))
    } else if on_disk == 0 {
        format!("nothing yet: sys1rust pull {spec}")
    } else {
        let of = total
            .map(|t| format!(" of {}", format_size(t)))
            .unwrap_or_default();
        format!(
            "{cached} of {} files, {}{of}: sys1rust pull {spec} finishes it",
            d.files.len(),
            format_size(on_disk)
        )
    };
    field("cached", state);

    let width = d.files.iter().map(|f| f.path.len()).max().unwrap_or(0);
    let _ = writeln!(out, "\nfiles");
    for f in &d.files {
        let size = f.size.map(format_size).unwrap_or_else(|| "-".into());
        let digest = f
            .digest
            .as_ref()
            .map(|g| format!("{} {}", g.kind(), &g.hex()[..12]))
            .unwrap_or_default();
        let partial = if f.state == FileState::Partial {
            format!("  ({} so far)", format_size(f.on_disk))
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  {:<width$}  {size:>10}  {:<7}  {digest}{partial}",
            f.path,
            f.state.as_str()
        );
    }
    for (title, file, value, keys) in [
        (
            "checkpoint",
            "rl_agent_config.json",
            checkpoint,
            &CHECKPOINT_KEYS[..],
        ),
        ("encoder", "encoder/config.json", encoder, &ENCODER_KEYS[..]),
    ] {
        let Some(value) = value else { continue };
        let _ = writeln!(out, "\n{title} ({file})");
        let width = keys.iter().map(|k| k.len()).max().unwrap_or(0);
        for key in keys {
            let Some(v) = value.get(key) else { continue };
            let text = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let _ = writeln!(out, "  {key:<width$}  {text}");
        }
    }
    out
}

/// `rm MODEL`: asks first on a terminal; elsewhere `--yes` is needed.
pub fn remove(args: &RmArgs) -> anyhow::Result<()> {
    let hub = laya_hub::Hub::from_env().context("reading the Hugging Face settings")?;
    if !args.yes {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            anyhow::bail!(
                "refusing to delete {:?} without confirmation: pass --yes",
                args.model
            );
        }
        eprint!("delete every cached revision of {:?}? [y/N] ", args.model);
        std::io::stderr().flush().ok();
        let mut answer = String::new();
        stdin
            .lock()
            .read_line(&mut answer)
            .context("reading the answer")?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            anyhow::bail!("not deleted");
        }
    }
    let (path, bytes) = hub
        .remove(&args.model)
        .with_context(|| format!("cannot delete {:?}", args.model))?;
    println!(
        "deleted {} ({}) {}",
        args.model,
        laya_hub::format_size(bytes),
        path.display()
    );
    Ok(())
}
