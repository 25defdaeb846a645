//! What the server runs with, resolved once from the command line ([`crate::cli::ServeArgs`])
//! and the served model: the HTTP settings, the connection limits and the decision settings.
//! [`start`] turns it and a way to build the checkpoints into a running engine worker and the
//! [`AppState`] the handlers share.

use std::time::Duration;

use anyhow::Context;
use laya_core::decide::{self, Checkpoints};
use laya_core::render::Output;
use laya_core::request::{Limits, MAX_CHOICE_OPTIONS, MAX_TOURNAMENT_CHOICE_OPTIONS};
use laya_core::routing::{Checkpoint, RoutingConfig};

use crate::cli::ServeArgs;
use crate::http::{AppState, HttpConfig};
use crate::server::ConnLimits;
use crate::worker::{self, Loaded};

/// Everything `serve` needs besides the model itself.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub host: String,
    pub port: u16,
    pub http: HttpConfig,
    pub conn: ConnLimits,
    pub decide: decide::Settings,
    /// Admission slots (`LAYA_MAX_CONCURRENT`).
    pub max_concurrent: usize,
}

impl ServeConfig {
    /// From the command line, for a served model whose `routing.repo` label is `repo_label`
    /// and whose commit is `revision` (`None` for a local directory).
    pub fn from_args(
        args: &ServeArgs,
        repo_label: String,
        revision: Option<String>,
    ) -> anyhow::Result<ServeConfig> {
        let default_model = Checkpoint::from_name(&args.default_model)
            .with_context(|| format!("invalid LAYA_DEFAULT_MODEL {:?}", args.default_model))?;
        let routing = RoutingConfig::single(repo_label, default_model, args.auto_task);
        let http = HttpConfig {
            api_key: args.api_key.clone().filter(|k| !k.is_empty()),
            body_timeout: Duration::from_secs_f64(args.body_timeout),
            limits: Limits {
                max_token_budget: args.max_token_budget,
                max_batch_tokens: args.max_batch_tokens,
                max_choice_options: if args.tournament_group > 0 {
                    MAX_TOURNAMENT_CHOICE_OPTIONS
                } else {
                    MAX_CHOICE_OPTIONS
                },
                ..Limits::default()
            },
            output: if args.jev_strict {
                Output::JevStrict
            } else {
                Output::Full
            },
            routing: routing.clone(),
            revision,
        };
        Ok(ServeConfig {
            host: args.host.clone(),
            port: args.port,
            http,
            conn: ConnLimits {
                max_connections: args.max_connections,
                header_read_timeout: Duration::from_secs_f64(args.header_timeout.max(0.001)),
                keep_alive_timeout: Duration::from_secs_f64(args.keep_alive_timeout.max(0.001)),
            },
            decide: decide::Settings {
                routing,
                tournament_group: args.tournament_group,
            },
            max_concurrent: args.max_concurrent,
        })
    }
}

/// Starts the engine worker, which runs `build` (load and warm the checkpoints) on its own
/// thread, waits until it is ready, and returns the handlers' state.
pub fn start<C, B>(cfg: &ServeConfig, build: B) -> anyhow::Result<AppState>
where
    C: Checkpoints + 'static,
    B: FnOnce() -> anyhow::Result<(C, Loaded)> + Send + 'static,
{
    let (handle, ready, _thread) = worker::spawn(cfg.max_concurrent, cfg.decide.clone(), build)
        .context("starting the engine worker")?;
    let loaded = ready
        .recv()
        .context("the engine worker stopped while loading")??;
    Ok(AppState::new(
        cfg.http.clone(),
        handle,
        cfg.max_concurrent,
        loaded,
    ))
}
