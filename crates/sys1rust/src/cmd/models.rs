//! `sys1rust pull`, `sys1rust models` and `sys1rust rm`.

use anyhow::Context;

use std::io::{BufRead, IsTerminal, Write};

use crate::cli::{ModelsArgs, PullArgs, RmArgs};
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
