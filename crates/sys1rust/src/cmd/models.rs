//! `sys1rust pull` and `sys1rust models`.

use anyhow::Context;

use crate::cli::PullArgs;

pub fn pull(args: &PullArgs) -> anyhow::Result<()> {
    let hub = laya_hub::Hub::from_env().context("reading the Hugging Face settings")?;
    let progress = laya_hub::stderr_progress();
    let model = hub
        .pull(&args.model, args.revision.as_deref(), &*progress)
        .with_context(|| format!("pulling {:?}", args.model))?;
    println!(
        "{} {} {}",
        model.name,
        model.revision.as_deref().unwrap_or("-"),
        model.dir.display()
    );
    Ok(())
}

pub fn list() -> anyhow::Result<()> {
    let hub = laya_hub::Hub::from_env().context("reading the Hugging Face settings")?;
    print!("{}", laya_hub::render_models_table(&hub.list()));
    Ok(())
}
