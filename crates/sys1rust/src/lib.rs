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
//! * [`worker`] is the one thread that owns the checkpoints and runs
//!   `laya_core::decide::decide` on each, through the engine [`engine`] loaded.
//!
//! [`cli`] holds every flag (with its environment fallback); [`config`] resolves them once
//! into what the server runs with; [`cmd`] runs each subcommand.

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
