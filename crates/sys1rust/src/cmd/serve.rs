//! `sys1rust serve`: load the model on the engine worker, warm it up, listen, print the ready
//! line, and serve until SIGINT/SIGTERM.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::cli::ServeArgs;
use crate::config::{self, ServeConfig};
use crate::http;
use crate::server;

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

/// The XDG cache directory: `$XDG_CACHE_HOME`, else `~/.cache`.
fn user_cache_dir() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("XDG_CACHE_HOME").or_else(|| var("HOME").map(|h| h.join(".cache")))
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let kernel_cache = configure_kernel_cache(
        args.kernel_cache.as_deref(),
        args.mlx_ptx_cache_dir.as_deref(),
    );
    let resolved = args.model.resolve()?;
    let label = args
        .repo_label
        .clone()
        .unwrap_or_else(|| super::repo_label(&resolved));
    let cfg = ServeConfig::from_args(&args, label, resolved.revision.clone())?;
    let mut model = args.model.clone();
    model.engine.kernel_cache = args.kernel_cache.clone();
    let dir = resolved.dir.clone();
    let state = config::start(&cfg, move || super::load_single(&model, &dir, true))?;
    let loaded = state.loaded.clone();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((cfg.host.as_str(), cfg.port))
            .await
            .with_context(|| format!("binding {}:{}", cfg.host, cfg.port))?;
        let addr = listener.local_addr()?;
        let ready_line = serde_json::json!({
            "event": "ready",
            "address": addr.to_string(),
            "url": format!("http://{addr}"),
            "model": resolved.name,
            "dir": resolved.dir.display().to_string(),
            "revision": resolved.revision,
            "engine": loaded.info.engine,
            "device": loaded.info.device,
            "precision": loaded.info.precision,
            "load_ms": (loaded.load_ms * 10.0).round() / 10.0,
            "warmup_ms": (loaded.warmup_ms * 10.0).round() / 10.0,
            "kernel_cache": kernel_cache.as_ref().map(|d| d.display().to_string()),
        });
        println!("{ready_line}");
        tracing::info!(%addr, "listening");
        server::serve(
            listener,
            http::app(state),
            cfg.conn,
            server::shutdown_signal(),
        )
        .await?;
        tracing::info!("stopped");
        Ok(())
    })
}
