//! `sys1rust pull` and `sys1rust models`.

use anyhow::Context;

use crate::cli::PullArgs;
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

pub fn list() -> anyhow::Result<()> {
    let hub = laya_hub::Hub::from_env().context("reading the Hugging Face settings")?;
    print!("{}", laya_hub::render_models_table(&hub.list()));
    Ok(())
}
