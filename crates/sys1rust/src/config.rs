//! What the server runs with, resolved once from the command line ([`crate::cli::ServeArgs`])
//! and the served model: the HTTP settings, the connection limits and the decision settings.
//! [`start`] turns it and a way to build the checkpoints into a running engine worker and the
//! [`AppState`] the handlers share.

use std::time::Duration;

use anyhow::Context;
use laya_core::decide;
use laya_core::render::Output;
use laya_core::request::{Limits, MAX_CHOICE_OPTIONS, MAX_TOURNAMENT_CHOICE_OPTIONS};
use laya_core::routing::{Checkpoint, RoutingConfig};

use crate::cli::ServeArgs;
use crate::dispatch::Pool;
use crate::http::{AppState, HttpConfig};
use crate::registry::Registry;
use crate::server::ConnLimits;

/// The tournament group of strict Jev mode unless one is given: Jev takes choices of up to
/// 255 options, and a group of 100 narrows only what one pass cannot hold, so every choice
/// one pass answers is answered as without a tournament.
pub const JEV_TOURNAMENT_GROUP: usize = 100;
use crate::worker::{self, Owned, Started};

/// The longest wait a setting gives: a year, a limit nothing reaches. Upstream reads its
/// timeouts with Python's `float()`, so `1e20` is a valid setting; `Duration::from_secs_f64`
/// panics on it, and a deadline `Instant::now() + d` overflows long before.
const LONGEST_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// `s` seconds as a wait: NaN and anything not above zero are zero, anything past
/// [`LONGEST_WAIT`] (infinity too) is that.
pub(crate) fn wait_of(s: f64) -> Duration {
    if s.is_nan() || s <= 0.0 {
        Duration::ZERO
    } else if s >= LONGEST_WAIT.as_secs_f64() {
        LONGEST_WAIT
    } else {
        Duration::from_secs_f64(s)
    }
}

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
    /// Unload every checkpoint after this long without a request (router mode).
    pub idle_unload: Option<Duration>,
    /// How long after a shutdown signal the server keeps accepting, `/ready` already 503.
    pub drain_delay: Duration,
}

/// What `serve` holds.
#[derive(Debug, Clone)]
pub enum Served {
    /// `--model X`: one checkpoint answers every name; `label` is what `routing.repo` prints.
    Single { label: String },
    /// Upstream's router over the registry.
    Router(Registry),
}

impl ServeConfig {
    /// From the command line, for what is served.
    pub fn from_args(args: &ServeArgs, served: &Served) -> anyhow::Result<ServeConfig> {
        let extra = match served {
            Served::Single { .. } => Vec::new(),
            Served::Router(r) => r.extra_names(),
        };
        let default_model =
            laya_core::routing::parse_default_model(Some(&args.default_model), &extra)
                .map_err(anyhow::Error::msg)?
                .unwrap_or_else(Checkpoint::multilingual);
        let routing = match served {
            Served::Single { label } => {
                RoutingConfig::single(label.clone(), default_model, args.auto_task)
            }
            Served::Router(r) => r.routing(default_model, args.auto_task),
        };
        // `/health` echoes the setting as given; the worker waits at most a year.
        let idle_unload_seconds = match served {
            Served::Router(_) if args.router.idle_unload_seconds > 0.0 => {
                Some(args.router.idle_unload_seconds)
            }
            _ => None,
        };
        let idle_unload = idle_unload_seconds.map(wait_of);
        let tournament_group = args.tournament_group.unwrap_or(if args.jev_strict {
            JEV_TOURNAMENT_GROUP
        } else {
            0
        });
        let http = HttpConfig {
            api_key: args.api_key.clone().filter(|k| !k.is_empty()),
            body_timeout: wait_of(args.body_timeout),
            limits: Limits {
                max_token_budget: args.max_token_budget,
                max_batch_tokens: args.max_batch_tokens,
                max_windows: args.max_windows,
                max_choice_options: if tournament_group > 0 {
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
            idle_unload_seconds,
            request_timeout: (args.request_timeout > 0.0 && args.request_timeout.is_finite())
                .then(|| wait_of(args.request_timeout)),
        };
        Ok(ServeConfig {
            host: args.host.clone(),
            port: match args.port {
                Some(port) => port,
                None => laya_core::request::laya_port(args.laya_port.as_deref())
                    .map_err(anyhow::Error::msg)?,
            },
            http,
            conn: ConnLimits {
                max_connections: args.max_connections,
                header_read_timeout: wait_of(args.header_timeout.max(0.001)),
                keep_alive_timeout: wait_of(args.keep_alive_timeout.max(0.001)),
                write_timeout: wait_of(args.write_timeout.max(0.001)),
                shutdown_grace: wait_of(args.shutdown_grace),
            },
            decide: decide::Settings {
                routing,
                tournament_group,
                pass_tokens: match args.batch_tokens {
                    Some(tokens) => tokens,
                    None => args.model.engine.default_pass_tokens()?,
                },
            },
            max_concurrent: args.max_concurrent,
            drain_delay: wait_of(if args.drain_delay.is_finite() {
                args.drain_delay
            } else {
                0.0
            }),
            idle_unload,
        })
    }
}

/// Started engine workers whose checkpoints are still loading.
pub struct Spawned {
    /// The handlers' state, at [`crate::http::Stage::Loading`].
    pub state: AppState,
    /// The outcome of the builds once all are done: the first worker's report when any
    /// loaded (a worker that failed is left out of dispatch), else the first failure.
    pub loaded: std::sync::mpsc::Receiver<anyhow::Result<Started>>,
    /// Ends once every worker's thread has (each drops its engines there), which happens once
    /// every handle of the state is gone.
    pub thread: std::thread::JoinHandle<()>,
}

/// Starts one engine worker per entry of `ordinals` (the GPU each runs on), each running
/// `build(ordinal)` (load and warm its checkpoints) on its own thread, and returns at once: a
/// server can listen (and answer `/ready` with 503) while they load. `loading_device` is the
/// device `/health` names until then.
pub fn spawn<C, B>(
    cfg: &ServeConfig,
    loading_device: String,
    ordinals: &[usize],
    build: B,
) -> anyhow::Result<Spawned>
where
    C: Owned + 'static,
    B: Fn(usize) -> anyhow::Result<(C, Started)> + Send + Sync + 'static,
{
    let build = std::sync::Arc::new(build);
    let mut handles = Vec::with_capacity(ordinals.len());
    let mut outcomes = Vec::with_capacity(ordinals.len());
    let mut threads = Vec::with_capacity(ordinals.len());
    for &ordinal in ordinals {
        let build = build.clone();
        let (handle, loaded, thread) = worker::spawn(
            worker::WorkerConfig {
                settings: cfg.decide.clone(),
                idle_unload: cfg.idle_unload,
            },
            move || build(ordinal),
        )
        .context("starting the engine worker")?;
        handles.push((ordinal, handle));
        outcomes.push((ordinal, loaded));
        threads.push(thread);
    }
    let (report, loaded) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("sys1-loading".into())
        .spawn(move || {
            let mut first_ok = None;
            let mut first_err = None;
            for (ordinal, rx) in outcomes {
                match rx.recv() {
                    Ok(Ok(started)) => {
                        first_ok.get_or_insert(started);
                    }
                    Ok(Err(e)) => {
                        tracing::error!(gpu = ordinal, error = %format!("{e:#}"), "an engine worker failed to load; serving without it");
                        first_err.get_or_insert(e);
                    }
                    Err(_) => {
                        first_err.get_or_insert(anyhow::anyhow!("engine worker {ordinal} stopped while loading"));
                    }
                }
            }
            let outcome = match (first_ok, first_err) {
                (Some(started), _) => Ok(started),
                (None, Some(e)) => Err(e),
                (None, None) => Err(anyhow::anyhow!("no engine worker")),
            };
            let _ = report.send(outcome);
        })
        .context("starting the engine workers")?;
    let thread = std::thread::Builder::new()
        .name("sys1-workers".into())
        .spawn(move || {
            for t in threads {
                let _ = t.join();
            }
        })
        .context("starting the engine workers")?;
    let state = AppState::new(
        cfg.http.clone(),
        Pool::new(handles),
        cfg.max_concurrent,
        loading_device,
    );
    Ok(Spawned {
        state,
        loaded,
        thread,
    })
}

/// [`spawn`] of one worker, then waits until the checkpoints are loaded: the state is ready.
pub fn start<C, B>(
    cfg: &ServeConfig,
    build: B,
) -> anyhow::Result<(AppState, std::thread::JoinHandle<()>)>
where
    C: Owned + 'static,
    B: FnOnce() -> anyhow::Result<(C, Started)> + Send + 'static,
{
    let build = std::sync::Mutex::new(Some(build));
    start_pool(cfg, &[0], move |_| {
        let build = build
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| anyhow::anyhow!("one worker builds once"))?;
        build()
    })
}

/// [`spawn`] of a worker per entry of `ordinals`, then waits until they are loaded.
pub fn start_pool<C, B>(
    cfg: &ServeConfig,
    ordinals: &[usize],
    build: B,
) -> anyhow::Result<(AppState, std::thread::JoinHandle<()>)>
where
    C: Owned + 'static,
    B: Fn(usize) -> anyhow::Result<(C, Started)> + Send + Sync + 'static,
{
    let spawned = spawn(cfg, String::from("cpu"), ordinals, build)?;
    let started = spawned
        .loaded
        .recv()
        .context("the engine worker stopped while loading")??;
    spawned.state.readiness.loaded(started);
    Ok((spawned.state, spawned.thread))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_clamped_not_panics() {
        assert_eq!(wait_of(2.5), Duration::from_millis(2500));
        assert_eq!(wait_of(0.0), Duration::ZERO);
        assert_eq!(wait_of(-3.0), Duration::ZERO);
        assert_eq!(wait_of(f64::NAN), Duration::ZERO);
        assert_eq!(wait_of(1e20), LONGEST_WAIT);
        assert_eq!(wait_of(f64::INFINITY), LONGEST_WAIT);
        // A deadline that far out is still an instant.
        assert!(std::time::Instant::now()
            .checked_add(wait_of(1e300))
            .is_some());
    }
}
