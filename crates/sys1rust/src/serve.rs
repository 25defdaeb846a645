//! `sys1rust serve`: load the model on the engine worker, warm it up, listen, print the ready
//! line, and serve until SIGINT/SIGTERM.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use laya_core::engine::{Forward, Row};
use laya_core::request::Limits;
use laya_core::routing::{Checkpoint, RoutingConfig};

use crate::http::{self, AppState, HttpConfig};
use crate::server::{self, ConnLimits};
use crate::worker::{self, WorkerInfo};
use crate::ModelArgs;

/// Upstream's boolean environment rule: `1`, `true`, `yes`, `on` (any case) are true.
pub fn truthy(s: &str) -> Result<bool, std::convert::Infallible> {
    Ok(matches!(
        s.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    ))
}

/// Upstream's `LAYA_MAX_CONCURRENT` rule: an integer, anything invalid or <= 0 means 16.
fn concurrency(s: &str) -> Result<usize, std::convert::Infallible> {
    Ok(s.trim()
        .parse::<i64>()
        .ok()
        .filter(|&n| n > 0)
        .map(|n| n as usize)
        .unwrap_or(16))
}

/// A positive number of seconds; anything else falls back to `default` (upstream's rule for
/// `LAYA_BODY_READ_TIMEOUT`).
fn seconds_or(s: &str, default: f64) -> Duration {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Duration::from_secs_f64(v),
        _ => Duration::from_secs_f64(default),
    }
}

fn positive_or(s: &str, default: usize) -> Result<usize, std::convert::Infallible> {
    Ok(s.trim()
        .parse::<i64>()
        .ok()
        .filter(|&n| n > 0)
        .map(|n| n as usize)
        .unwrap_or(default))
}

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address to bind.
    #[arg(long, env = "LAYA_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port to bind; 0 picks a free port (the ready line says which).
    #[arg(long, env = "LAYA_PORT", default_value_t = 8000)]
    pub port: u16,
    /// Require `Authorization: Bearer <key>` on the decision routes (and /metrics).
    #[arg(long, env = "LAYA_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Decision requests admitted at once (one runs, the rest queue); more get 503.
    #[arg(long, env = "LAYA_MAX_CONCURRENT", default_value = "16", value_parser = concurrency)]
    pub max_concurrent: usize,
    /// Strict Jev output: only the contracted keys.
    #[arg(long, env = "LAYA_JEV_STRICT", default_value = "false", value_parser = truthy, num_args = 0..=1, default_missing_value = "true")]
    pub jev_strict: bool,
    /// Seconds to receive a whole request body (408 after).
    #[arg(long, env = "LAYA_BODY_READ_TIMEOUT", default_value = "10")]
    pub body_timeout: String,
    /// Largest `max_len` / `head_max_len` a request may ask for.
    #[arg(long, env = "LAYA_MAX_TOKEN_BUDGET", default_value = "8192", value_parser = |s: &str| positive_or(s, 8192))]
    pub max_token_budget: usize,
    /// Token budget of one batch forward pass (larger batches are split, never refused).
    #[arg(long, env = "LAYA_MAX_BATCH_TOKENS", default_value = "131072", value_parser = |s: &str| positive_or(s, 131072))]
    pub max_batch_tokens: usize,
    /// Routing fallback for states without language evidence (english, multilingual, typed-decisions).
    #[arg(long, env = "LAYA_DEFAULT_MODEL", default_value = "multilingual")]
    pub default_model: String,
    /// Answer a choice with more options than this by elimination in groups of this size
    /// (2-100; anything else is off), which also raises the per-choice cap to 255.
    #[arg(long, env = "LAYA_TOURNAMENT_GROUP", default_value = "0", value_parser = |s: &str| Ok::<usize, std::convert::Infallible>(laya_core::request::tournament_group(Some(s))))]
    pub tournament_group: usize,
    /// Route requests whose question ids match a typed-decisions workflow to typed-decisions.
    #[arg(long, env = "LAYA_AUTO_TASK", default_value = "false", value_parser = truthy, num_args = 0..=1, default_missing_value = "true")]
    pub auto_task: bool,
    /// The source string `routing.repo` reports (default: the model's repo id or directory name).
    #[arg(long, env = "SYS1_REPO_LABEL")]
    pub repo_label: Option<String>,
    /// Most open connections; new ones past it are closed at once.
    #[arg(long, env = "SYS1_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
    /// Seconds a client has to send a request's headers.
    #[arg(long, env = "SYS1_HEADER_TIMEOUT", default_value_t = 10.0)]
    pub header_timeout: f64,
    /// Seconds an idle keep-alive connection stays open (at most --header-timeout, whose timer
    /// also runs while a connection waits for its next request).
    #[arg(long, env = "SYS1_KEEP_ALIVE_TIMEOUT", default_value_t = 5.0)]
    pub keep_alive_timeout: f64,
    /// Persistent directory for compiled GPU kernels, so a restarted server skips the
    /// run-time compilation a first start pays: MLX's (MLX_PTX_CACHE_DIR; default
    /// $XDG_CACHE_HOME/sys1rust/mlx or ~/.cache/sys1rust/mlx; an exported MLX_PTX_CACHE_DIR
    /// wins over the default, not over this option) and the CUDA engine's cubins (default
    /// ~/.cache/sys1rust/kernels).
    #[arg(long, env = "SYS1_KERNEL_CACHE")]
    pub kernel_cache: Option<std::path::PathBuf>,
}

/// Points MLX's on-disk kernel cache at `explicit`, else at an operator's MLX_PTX_CACHE_DIR,
/// else at sys1rust's cache directory. MLX reads the variable once, at its first run-time
/// compilation, so this must run before the engine loads. Returns the directory in use.
fn configure_kernel_cache(explicit: Option<&std::path::Path>) -> Option<std::path::PathBuf> {
    let from_env = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
    };
    let dir = match explicit {
        Some(dir) => dir.to_path_buf(),
        None => match from_env("MLX_PTX_CACHE_DIR") {
            Some(dir) => return Some(dir),
            None => from_env("XDG_CACHE_HOME")
                .or_else(|| from_env("HOME").map(|h| h.join(".cache")))?
                .join("sys1rust")
                .join("mlx"),
        },
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot create the kernel cache directory; MLX uses its default");
        return None;
    }
    // Still single-threaded here: the engine worker and tokio start later.
    std::env::set_var("MLX_PTX_CACHE_DIR", &dir);
    Some(dir)
}

/// Forwards run before the ready line, so the first requests do not pay MLX's one-time work.
/// On the CPU one short row compiles what there is to compile. On a GPU every new batch
/// layout also costs kernel selection and a CUDA-graph build on first use (30-160 ms each on
/// an H200), so a fixed ladder of layouts is run, in a fixed order so MLX's on-disk kernel
/// cache sees the same kernels in the same order on every start: 1, 4 and 10 rows of about
/// 16, 150, 300 and 600 tokens, rows of unequal length like real questions.
fn warm_up<F: Forward>(
    engine: &mut laya_core::engine_api::Engine<F>,
    gpu: bool,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let tok = &engine.tokenizer;
    let row = |len: usize| {
        let mut ids = vec![tok.cls.id, tok.mask.id, tok.mask.id];
        ids.resize(len.max(4), tok.sep.id);
        Row {
            ids,
            markers: vec![1, 2],
            qtype: laya_core::config::QType::Choice,
        }
    };
    let ladder: Vec<Vec<Row>> = if !gpu {
        vec![vec![row(6)]]
    } else {
        [16, 150, 300, 600]
            .into_iter()
            .flat_map(|len| [1, 4, 10].map(|n| (0..n).map(|i| row(len - i)).collect()))
            .collect()
    };
    for rows in &ladder {
        engine.forward.forward(rows).context("warm-up forward")?;
    }
    Ok(started.elapsed().as_secs_f64() * 1e3)
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let kernel_cache = configure_kernel_cache(args.kernel_cache.as_deref());
    let default_model = Checkpoint::from_name(&args.default_model)
        .with_context(|| format!("invalid LAYA_DEFAULT_MODEL {:?}", args.default_model))?;
    let resolved = args.model.resolve()?;
    let model_dir = resolved.dir.clone();
    // Upstream prints the checkpoint's source: the repo id, or the directory as configured.
    let repo_label = args
        .repo_label
        .clone()
        .unwrap_or_else(|| match &resolved.repo {
            Some(repo) => repo.clone(),
            None => model_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| resolved.name.clone()),
        });
    let routing = RoutingConfig::single(repo_label, default_model, args.auto_task);
    let mut model = args.model.clone();
    model.cuda_kernel_cache = args.kernel_cache.clone();
    let (handle, ready, _thread) =
        worker::spawn(args.max_concurrent, routing.clone(), move || {
            let started = Instant::now();
            let mut engine = model.load_dir(&model_dir)?;
            let load_ms = started.elapsed().as_secs_f64() * 1e3;
            let warmup_ms = if engine.forward.warm()? {
                started.elapsed().as_secs_f64() * 1e3 - load_ms
            } else {
                let gpu = engine.forward.device_name() != "cpu";
                warm_up(&mut engine, gpu)?
            };
            let info = WorkerInfo {
                engine: engine.forward.engine_name(),
                device: engine.forward.device_name(),
                precision: engine.forward.precision_name().to_owned(),
                load_ms,
                warmup_ms,
            };
            Ok((engine, info))
        })?;
    let info = ready
        .recv()
        .context("the engine worker stopped while loading")??;

    let cfg = HttpConfig {
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        body_timeout: seconds_or(&args.body_timeout, 10.0),
        limits: Limits {
            max_token_budget: args.max_token_budget,
            max_batch_tokens: args.max_batch_tokens,
            max_choice_options: if args.tournament_group > 0 {
                laya_core::request::MAX_TOURNAMENT_CHOICE_OPTIONS
            } else {
                laya_core::request::MAX_CHOICE_OPTIONS
            },
            ..Limits::default()
        },
        jev_strict: args.jev_strict,
        routing,
        revision: resolved.revision.clone(),
        tournament_group: args.tournament_group,
    };
    let limits = ConnLimits {
        max_connections: args.max_connections,
        header_read_timeout: Duration::from_secs_f64(args.header_timeout.max(0.001)),
        keep_alive_timeout: Duration::from_secs_f64(args.keep_alive_timeout.max(0.001)),
    };
    let state = AppState::new(cfg, handle, args.max_concurrent, info.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
            .await
            .with_context(|| format!("binding {}:{}", args.host, args.port))?;
        let addr = listener.local_addr()?;
        let ready_line = serde_json::json!({
            "event": "ready",
            "address": addr.to_string(),
            "url": format!("http://{addr}"),
            "model": resolved.name,
            "dir": resolved.dir.display().to_string(),
            "revision": resolved.revision,
            "engine": info.engine,
            "device": info.device,
            "precision": info.precision,
            "load_ms": (info.load_ms * 10.0).round() / 10.0,
            "warmup_ms": (info.warmup_ms * 10.0).round() / 10.0,
            "kernel_cache": kernel_cache.as_ref().map(|d| d.display().to_string()),
        });
        println!("{ready_line}");
        tracing::info!(%addr, "listening");
        server::serve(
            listener,
            http::app(state),
            limits,
            server::shutdown_signal(),
        )
        .await?;
        tracing::info!("stopped");
        Ok(())
    })
}
