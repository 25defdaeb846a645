//! The process's log output: text for people, JSON lines for log collectors, on stderr.
//!
//! The level comes from `--log-level` (also `SYS1_LOG_LEVEL`, else upstream's
//! `LAYA_LOG_LEVEL`, parsed as upstream parses it); `RUST_LOG`, when set, overrides it with a
//! full filter (per-module levels), as every tracing-based server lets it.

use std::io::Write;

use clap::ValueEnum;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// `--log-format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event (colours on a terminal).
    #[default]
    Text,
    /// One JSON object per event: `timestamp`, `level`, `fields`, `target`, `span`, `spans`.
    Json,
}

/// Upstream's levels (uvicorn's), in its spelling.
pub const LEVELS: [&str; 6] = ["critical", "debug", "error", "info", "trace", "warning"];

/// Upstream's `LAYA_LOG_LEVEL` rule: trimmed, lower-cased, blank means `info`, else one of
/// [`LEVELS`]; the error is upstream's start-up message. Returns tracing's directive.
/// `source` names where the value came from, for the message.
pub fn parse_level(raw: &str, source: &str) -> Result<&'static str, String> {
    let level = raw.trim().to_lowercase();
    Ok(match level.as_str() {
        "" | "info" => "info",
        // tracing has no level above error: critical and error log the same events.
        "critical" | "error" => "error",
        "warning" => "warn",
        "debug" => "debug",
        "trace" => "trace",
        _ => {
            return Err(format!(
                "invalid {source} {}: must be one of {}",
                pyjson::repr_str(raw),
                LEVELS.join(", ")
            ))
        }
    })
}

/// Installs the global subscriber. `level` is a [`parse_level`] directive; `rust_log` (the
/// `RUST_LOG` variable) a full filter that overrides it when it parses.
pub fn init(format: LogFormat, level: &str, rust_log: Option<&str>) {
    let filter = rust_log
        .filter(|v| !v.trim().is_empty())
        .and_then(|v| EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(AboveBars);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .init(),
    }
}

/// stderr, with a download's progress bars cleared while a line is written and drawn again
/// below it: a log line never lands inside a bar.
struct AboveBars;

impl<'a> MakeWriter<'a> for AboveBars {
    type Writer = AboveBarsWriter;

    fn make_writer(&'a self) -> AboveBarsWriter {
        AboveBarsWriter
    }
}

struct AboveBarsWriter;

impl Write for AboveBarsWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The formatter hands over one whole event per write.
        laya_hub::suspend_bars(|| std::io::stderr().write_all(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
