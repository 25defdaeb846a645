//! The `sys1rust` binary: logging, the command line, then the library.

use clap::Parser;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = sys1rust::cli::Cli::parse();
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
