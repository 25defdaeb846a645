//! The subcommands, each a thin layer over the library: parse the command line once, resolve
//! the model, and hand over to the server, the decision pipeline or the hub.

mod bench;
mod decide;
mod health;
mod models;
mod serve;

use std::time::Instant;

use anyhow::Context;
use laya_core::agent::Agent;
use laya_core::checkpoints::Single;
use laya_core::engine::Forward;

use crate::cli::{Cli, Command, ModelArgs};
use crate::engine::AnyForward;
use crate::worker::Started;

/// Runs the command line; the result is the process's exit status.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Decide(args) => decide::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Pull(args) => models::pull(&args),
        Command::Models(args) => models::list(&args),
        Command::Show(args) => models::show(&args),
        Command::Rm(args) => models::remove(&args),
        Command::Ps(args) => health::ps(&args),
        Command::Completions(args) => {
            let mut cmd = <crate::cli::Cli as clap::CommandFactory>::command();
            clap_complete::generate(args.shell, &mut cmd, "sys1rust", &mut std::io::stdout());
            Ok(())
        }
        Command::Health(args) => health::run(&args),
    }
}

/// Marks a resolved model as served for as long as the guard lives, so `sys1rust rm` refuses
/// to delete it from under the server.
pub fn hold(resolved: &laya_hub::ResolvedModel) -> anyhow::Result<Option<laya_hub::InUse>> {
    let hub = laya_hub::Hub::from_env().context("reading the Hugging Face settings")?;
    hub.hold(resolved)
        .with_context(|| format!("marking {} as in use", resolved.name))
}

impl ModelArgs {
    /// The one model a command runs: `--model`, else typed-decisions.
    pub fn model_or_default(&self) -> &str {
        self.model.as_deref().unwrap_or(laya_hub::DEFAULT_MODEL)
    }

    /// Finds the checkpoint directory of [`ModelArgs::model_or_default`], downloading the
    /// model once if it is not cached.
    pub fn resolve(&self) -> anyhow::Result<laya_hub::ResolvedModel> {
        let model = self.model_or_default();
        let hub = laya_hub::Hub::from_env().context("reading the Hugging Face settings")?;
        let progress = laya_hub::stderr_progress();
        hub.resolve(model, self.revision.as_deref(), self.offline, &*progress)
            .map_err(|e| {
                let advice = if e.is_unreachable() {
                    format!(
                        "cannot get model {model:?}: the hub cannot be reached. Check the network, \
                         or serve what is cached with --offline (HF_HUB_OFFLINE=1), or point \
                         HF_ENDPOINT at a mirror, or serve a local checkpoint directory: --model DIR \
                         (rl_agent_config.json, model.safetensors, encoder/, tokenizer/)"
                    )
                } else {
                    format!("cannot get model {model:?}")
                };
                anyhow::Error::new(e).context(advice)
            })
    }
}

/// What `routing.repo` prints for a resolved model when no label is given: upstream prints the
/// checkpoint's source, the repo id or the directory as configured.
pub(crate) fn repo_label(resolved: &laya_hub::ResolvedModel) -> String {
    match &resolved.repo {
        Some(repo) => repo.clone(),
        None => resolved
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| resolved.name.clone()),
    }
}

/// Loads the resolved model as the one checkpoint behind every name, and warms it when
/// `warm` (the server does before its ready line).
pub(crate) fn load_single(
    model: &ModelArgs,
    resolved: &laya_hub::ResolvedModel,
    warm: bool,
) -> anyhow::Result<(Single<AnyForward>, Started)> {
    let dir = &resolved.dir;
    let started = Instant::now();
    let mut agent: Agent<AnyForward> = model.engine.load_agent(dir)?;
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    let warm_started = Instant::now();
    if warm {
        agent.forward.warm().context("warming the engine up")?;
    }
    let started = Started {
        info: agent.forward.info(),
        load_ms,
        warmup_ms: warm_started.elapsed().as_secs_f64() * 1e3,
    };
    Ok((Single::new(agent, resolved.revision.clone()), started))
}
