//! `sys1rust`: Laya System 1 decision models served over HTTP, wire-compatible with upstream
//! laya-serve 0.4.15's `/v1/systemone` API.
//!
//! The library is the server; `main.rs` only starts it. A request flows one way:
//!
//! * [`server`] accepts connections (limits, timeouts, graceful shutdown) and hands requests
//!   to [`http::app`], the axum router;
//! * [`http`] checks auth, admission and the body, validates it with `laya_core::request`,
//!   queues the decision on the [`worker`] and renders the answer with `laya_core::render`;
//!   its [`http::ApiError`] chooses every error's status;
//! * [`dispatch`] hands each decision to the least loaded engine worker (one per GPU);
//! * [`worker`] is the one thread that owns the checkpoints and runs
//!   `laya_core::decide::decide` on each, through the engine [`engine`] loaded.
//!
//! [`cli`] holds every flag (with its environment fallback); [`config`] resolves them once
//! into what the server runs with; [`registry`] names the checkpoints the router may pick
//! (the built-in names plus `LAYA_EXTRA_MODELS`); [`logging`] installs the log format and
//! level; [`cmd`] runs each subcommand.

pub mod cli;
pub mod cmd;
pub mod config;
pub mod dispatch;
pub mod engine;
pub mod http;
pub mod logging;
pub mod registry;
pub mod server;
pub mod worker;

/// The release, as Cargo names it.
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");
/// The commit this binary was built from (`unknown` from a tree without git).
pub const COMMIT: &str = env!("SYS1_COMMIT");
/// The MLX release the binary links.
pub const MLX_VERSION: &str = env!("SYS1_MLX_VERSION");
/// The bundle flavor: which MLX backend (`cpu`, `cuda13` or `metal`).
pub const BUNDLE: &str = env!("SYS1_BUNDLE");

/// `--version`: the release, the commit it was built from, the MLX it links and the bundle
/// flavor (which MLX backend: cpu, cuda13 or metal).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SYS1_COMMIT"),
    ", MLX ",
    env!("SYS1_MLX_VERSION"),
    ", bundle ",
    env!("SYS1_BUNDLE"),
    ")"
);
