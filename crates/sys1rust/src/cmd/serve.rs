//! `sys1rust serve`: load the model on the engine worker, warm it up, listen, print the ready
//! line, and serve until SIGINT/SIGTERM.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use laya_core::checkpoints::Router;

use crate::cli::{EngineArgs, EngineChoice, ServeArgs};
use crate::config::{self, ServeConfig, Served};
use crate::http;
use crate::registry;
use crate::server;
use crate::worker::Started;

/// Points MLX's on-disk kernel cache at `explicit`, else at an operator's MLX_PTX_CACHE_DIR,
/// else at sys1rust's cache directory. MLX reads the variable once, at its first run-time
/// compilation, so this must run before the engine loads. Returns the directory in use.
fn configure_kernel_cache(explicit: Option<&Path>, exported: Option<&Path>) -> Option<PathBuf> {
    let dir = match (explicit, exported) {
        (Some(dir), _) => dir.to_path_buf(),
        (None, Some(dir)) if !dir.as_os_str().is_empty() => return Some(dir.to_path_buf()),
        _ => user_cache_dir()?.join("sys1rust").join("mlx"),
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot create the kernel cache directory; MLX uses its default");
        return None;
    }
    laya_mlx::backend::set_kernel_cache(&dir);
    Some(dir)
}

/// The directory the engine that answers compiles its kernels into: the CUDA engine keeps
/// its own cubins where its settings say (`--kernel-cache`, else laya-cuda's default) and MLX
/// never compiles in its server; on MLX, [`configure_kernel_cache`]'s.
fn kernel_cache_in_use(engine: &EngineArgs, exported: Option<&Path>) -> Option<PathBuf> {
    match engine.engine {
        EngineChoice::Cuda => engine.cuda_settings().kernel_cache,
        EngineChoice::Mlx | EngineChoice::Auto => {
            configure_kernel_cache(engine.kernel_cache.as_deref(), exported)
        }
    }
}

/// The XDG cache directory: `$XDG_CACHE_HOME`, else `~/.cache`.
fn user_cache_dir() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("XDG_CACHE_HOME").or_else(|| var("HOME").map(|h| h.join(".cache")))
}

pub fn run(mut args: ServeArgs) -> anyhow::Result<()> {
    args.model.engine = args.model.engine.settled()?;
    let mut model = args.model.clone();
    model.engine.kernel_cache = args.kernel_cache.clone();
    let kernel_cache = kernel_cache_in_use(&model.engine, args.mlx_ptx_cache_dir.as_deref());
    let loading_device = model.engine.preview().device;
    // One engine worker per GPU of --gpus (one on MLX).
    let workers = model.engine.workers()?;
    if workers.len() > 1 {
        tracing::info!(gpus = ?workers, "one engine worker per GPU");
    }
    // `rm` refuses what a server holds, for as long as the server runs.
    let mut held = Vec::new();
    let (spawned, cfg, described) = match &args.model.model {
        // The model is found (downloaded when it is not cached) before the port opens: the
        // label `routing.repo` prints comes from it.
        Some(_) => {
            let resolved = model.resolve()?;
            held.extend(super::hold(&resolved)?);
            let label = args
                .repo_label
                .clone()
                .unwrap_or_else(|| super::repo_label(&resolved));
            let cfg = ServeConfig::from_args(&args, &Served::Single { label })?;
            let described = serde_json::json!({
                "model": resolved.name,
                "dir": resolved.dir.display().to_string(),
                "revision": resolved.revision,
            });
            let spawned = config::spawn(&cfg, loading_device, &workers, move |ordinal| {
                let mut model = model.clone();
                model.engine = model.engine.on_gpu(ordinal);
                super::load_single(&model, &resolved, true)
            })?;
            (spawned, cfg, described)
        }
        None => {
            let base = std::env::current_dir().context("reading the working directory")?;
            let registry = registry::registry(&args.router, &base).map_err(anyhow::Error::msg)?;
            let cfg = ServeConfig::from_args(&args, &Served::Router(registry.clone()))?;
            let preload = if args.router.preload {
                registry
                    .preload_names(args.router.models.as_deref())
                    .map_err(anyhow::Error::msg)?
            } else {
                Vec::new()
            };
            let described = serde_json::json!({
                "model": "router",
                "checkpoints": registry.entries.iter().map(|e| e.name.name()).collect::<Vec<_>>(),
                "preload": preload.iter().map(|c| c.name()).collect::<Vec<_>>(),
            });
            let (engine, offline, max_loaded) =
                (model.engine.clone(), model.offline, args.router.max_loaded);
            let spawned = config::spawn(&cfg, loading_device, &workers, move |ordinal| {
                let started = std::time::Instant::now();
                let engine = engine.on_gpu(ordinal);
                let preview = engine.preview();
                let mut router = Router::new(registry.clone().loader(engine, offline), max_loaded);
                router
                    .preload(&preload)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                let info = router.engine_info().unwrap_or(preview);
                let loaded = Started {
                    info,
                    load_ms: started.elapsed().as_secs_f64() * 1e3,
                    warmup_ms: 0.0,
                };
                Ok((router, loaded))
            })?;
            (spawned, cfg, described)
        }
    };
    let mut described = described;
    if workers.len() > 1 {
        described["gpus"] = serde_json::json!(workers);
    }
    let config::Spawned {
        state,
        loaded,
        thread: worker,
    } = spawned;
    let readiness = state.readiness.clone();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    let served = runtime.block_on(async move {
        // Listening at once: an orchestrator sees a live process (/health) that is not yet
        // ready (/ready), rather than a closed port, while the checkpoints load.
        let listener = tokio::net::TcpListener::bind((cfg.host.as_str(), cfg.port))
            .await
            .with_context(|| format!("binding {}:{}", cfg.host, cfg.port))?;
        let addr = listener.local_addr()?;
        let open_files = server::raise_open_files_limit();
        if open_files.is_some_and(|n| (n as usize) < cfg.conn.max_connections.saturating_add(64)) {
            tracing::warn!(open_files, max_connections = cfg.conn.max_connections, "the open-files limit is below the connection cap; raise it (ulimit -n, LimitNOFILE=)");
        }
        tracing::info!(%addr, open_files, "listening; loading the checkpoints");
        let server = server::serve(
            listener,
            http::app(state),
            cfg.conn,
            drain_on_signal(readiness.clone(), cfg.drain_delay),
        );
        tokio::pin!(server);
        // Waited for on a thread of its own, not a blocking task: the runtime's drop waits for
        // its blocking tasks, so a signal while loading would wait for the whole load (a
        // download, a first kernel compile) with no one left listening for signals.
        let (load_tx, load) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("load-wait".to_owned())
            .spawn(move || {
                let _ = load_tx.send(loaded.recv());
            })
            .context("starting a thread")?;
        let started = tokio::select! {
            // A signal while loading: nothing was ready, nothing is lost.
            res = &mut server => {
                res?;
                return Ok(Stopped::WhileLoading);
            }
            outcome = load => outcome
                .context("waiting for the engine worker")?
                .context("the engine worker stopped while loading")??,
        };
        readiness.loaded(started.clone());
        println!(
            "{}",
            ready_line(addr, &described, &started, kernel_cache.as_deref())
        );
        tracing::info!(%addr, "ready");
        server.await?;
        Ok::<_, anyhow::Error>(Stopped::AfterReady)
    });
    // Every handle of the state goes with the runtime's tasks; the worker then drops its
    // engines on its own thread, before the process ends (a GPU context must not be torn
    // down under a thread still using it).
    drop(runtime);
    if let Stopped::WhileLoading = served? {
        // As upstream, which has no signal handlers while it preloads: the load is abandoned
        // and the process ends without MLX's or the GPU's teardown.
        tracing::info!("stopped while loading");
        return Ok(());
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !worker.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if worker.is_finished() {
        let _ = worker.join();
    } else {
        tracing::warn!("the engine worker is still busy; exiting without it");
    }
    tracing::info!("stopped");
    Ok(())
}

/// When serving stopped.
enum Stopped {
    /// On a signal before the checkpoints had loaded.
    WhileLoading,
    AfterReady,
}

/// The shutdown the server waits for: on SIGINT/SIGTERM `/ready` turns 503 at once, and the
/// server keeps accepting for `delay` (so that load balancers see it before connections are
/// refused), then stops accepting and finishes what is in flight. A second signal cuts the
/// delay short.
async fn drain_on_signal(readiness: std::sync::Arc<http::Readiness>, delay: Duration) {
    server::shutdown_signal().await;
    readiness.drain();
    if !delay.is_zero() {
        tracing::info!(
            delay_s = delay.as_secs_f64(),
            "draining: /ready answers 503; still accepting requests"
        );
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = server::shutdown_signal() => {}
        }
    }
}

/// The one line serve prints on stdout once it is ready, for scripts and the tests.
fn ready_line(
    addr: std::net::SocketAddr,
    described: &serde_json::Value,
    started: &Started,
    kernel_cache: Option<&Path>,
) -> serde_json::Value {
    let mut line = serde_json::json!({
        "event": "ready",
        "address": addr.to_string(),
        "url": format!("http://{addr}"),
    });
    if let (Some(line), Some(more)) = (line.as_object_mut(), described.as_object()) {
        line.extend(more.clone());
        line.extend([
            ("engine".to_owned(), started.info.engine.into()),
            ("device".to_owned(), started.info.device.clone().into()),
            ("precision".to_owned(), started.info.precision.into()),
            (
                "load_ms".to_owned(),
                ((started.load_ms * 10.0).round() / 10.0).into(),
            ),
            (
                "warmup_ms".to_owned(),
                ((started.warmup_ms * 10.0).round() / 10.0).into(),
            ),
            (
                "kernel_cache".to_owned(),
                kernel_cache.map(|d| d.display().to_string()).into(),
            ),
        ]);
    }
    line
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn cuda_engine(kernel_cache: Option<&Path>) -> EngineArgs {
        EngineArgs {
            kernel_cache: kernel_cache.map(Path::to_path_buf),
            ..crate::cli::serve_engine_args(&["--engine", "cuda"])
        }
    }

    /// On the CUDA engine the ready line names the CUDA engine's cubin cache, never MLX's
    /// (an operator's MLX_PTX_CACHE_DIR included), which that server does not use.
    #[test]
    fn the_cuda_engine_reports_its_own_kernel_cache() {
        let explicit = Path::new("/srv/kernels");
        let exported = Some(Path::new("/srv/mlx"));
        assert_eq!(
            kernel_cache_in_use(&cuda_engine(Some(explicit)), exported).as_deref(),
            Some(explicit)
        );
        let default = kernel_cache_in_use(&cuda_engine(None), exported);
        assert_eq!(default, laya_cuda::CudaSettings::default().kernel_cache);
        assert!(default.is_none_or(|d| d.ends_with("sys1rust/kernels")));
    }
}
