//! The `sys1rust` binary: the command line, logging, then the library.

use clap::Parser;

fn main() {
    let cli = sys1rust::cli::Cli::parse();
    // Upstream's variable when sys1rust's own is not set, with upstream's rule and message.
    let level = match (&cli.log_level, &cli.laya_log_level) {
        (Some(ours), _) => sys1rust::logging::parse_level(ours, "--log-level (SYS1_LOG_LEVEL)"),
        (None, upstream) => {
            sys1rust::logging::parse_level(upstream.as_deref().unwrap_or(""), "LAYA_LOG_LEVEL")
        }
    };
    let level = match level {
        Ok(level) => level,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(1);
        }
    };
    sys1rust::logging::init(cli.log_format, level, cli.rust_log.as_deref());
    // Before anything touches MLX (and before any thread exists).
    for (name, value) in laya_mlx::backend::configure_process() {
        tracing::debug!(name, value, "MLX setting");
    }
    // A panic here must still leave through `exit` (the hook has printed it already).
    let result = std::panic::catch_unwind(move || sys1rust::cmd::run(cli))
        .unwrap_or_else(|_| laya_mlx::backend::exit(101));
    // As `fn main() -> Result` would report it, then an exit that skips MLX's teardown.
    let code = match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("Error: {e:?}");
            1
        }
    };
    laya_mlx::backend::exit(code)
}
