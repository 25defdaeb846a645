//! Progress reporting. The library calls a [`Progress`]; the binary picks how it looks:
//! [`BarProgress`] (indicatif bars) on a terminal, [`LineProgress`] (plain lines, one per
//! event and every 10%) otherwise, [`NoProgress`] for silence. [`stderr_progress`] makes that
//! choice for stderr.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Receives what a pull is doing. All methods have empty defaults; `path` is the file's path
/// in the repo, byte counts are totals for that file (not increments).
pub trait Progress {
    /// A one-line status: which model is being pulled, waiting for a lock, a retry.
    fn message(&self, _text: &str) {}
    /// A download starts (or resumes: `done` bytes are already on disk). `total` is `None`
    /// when the hub did not say.
    fn download_started(&self, _path: &str, _total: Option<u64>, _done: u64) {}
    /// `done` bytes of `path` are on disk.
    fn download_progress(&self, _path: &str, _done: u64) {}
    /// Hashing of `path` starts (`total` bytes).
    fn verify_started(&self, _path: &str, _total: u64) {}
    /// `path` is verified and visible in the snapshot (also called for files already cached).
    fn file_done(&self, _path: &str) {}
}

/// Reports nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {}

/// A [`BarProgress`] when stderr is a terminal, a [`LineProgress`] on stderr otherwise.
pub fn stderr_progress() -> Box<dyn Progress + Send + Sync> {
    if std::io::stderr().is_terminal() {
        Box::new(BarProgress::new())
    } else {
        Box::new(LineProgress::new(std::io::stderr()))
    }
}

/// Plain lines for logs and pipes: messages, the start of each download, every 10% of it,
/// verification and completion.
pub struct LineProgress<W: Write> {
    state: Mutex<LineState<W>>,
}

struct LineState<W> {
    out: W,
    total: Option<u64>,
    last_decile: u64,
}

impl<W: Write> LineProgress<W> {
    /// Writes to `out`.
    pub fn new(out: W) -> Self {
        LineProgress {
            state: Mutex::new(LineState {
                out,
                total: None,
                last_decile: 0,
            }),
        }
    }

    /// The writer back (tests read what was written).
    pub fn into_inner(self) -> W {
        match self.state.into_inner() {
            Ok(s) => s.out,
            Err(poisoned) => poisoned.into_inner().out,
        }
    }

    fn with(&self, f: impl FnOnce(&mut LineState<W>)) {
        // A panic elsewhere must not silence progress; the state is plain data.
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard);
    }
}

impl<W: Write> Progress for LineProgress<W> {
    fn message(&self, text: &str) {
        self.with(|s| {
            let _ = writeln!(s.out, "{text}");
        });
    }

    fn download_started(&self, path: &str, total: Option<u64>, done: u64) {
        self.with(|s| {
            s.total = total;
            s.last_decile = match total {
                Some(t) if t > 0 => done.saturating_mul(10) / t,
                _ => 0,
            };
            let size = total
                .map(format_size)
                .unwrap_or_else(|| "unknown size".into());
            let _ = if done > 0 {
                writeln!(s.out, "{path}: resuming at {} of {size}", format_size(done))
            } else {
                writeln!(s.out, "{path}: downloading {size}")
            };
        });
    }

    fn download_progress(&self, path: &str, done: u64) {
        self.with(|s| {
            let Some(total) = s.total.filter(|&t| t > 0) else {
                return;
            };
            let decile = done.saturating_mul(10) / total;
            if decile > s.last_decile && decile < 10 {
                s.last_decile = decile;
                let _ = writeln!(
                    s.out,
                    "{path}: {}% ({} of {})",
                    decile * 10,
                    format_size(done),
                    format_size(total)
                );
            }
        });
    }

    fn verify_started(&self, path: &str, total: u64) {
        self.with(|s| {
            let _ = writeln!(s.out, "{path}: verifying {}", format_size(total));
        });
    }

    fn file_done(&self, path: &str) {
        self.with(|s| {
            let _ = writeln!(s.out, "{path}: ok");
        });
    }
}

/// indicatif bars on stderr: one bar per file while it downloads or is hashed.
pub struct BarProgress {
    bar: Mutex<Option<ProgressBar>>,
}

impl BarProgress {
    /// Draws on stderr.
    pub fn new() -> Self {
        BarProgress {
            bar: Mutex::new(None),
        }
    }

    fn replace(&self, bar: Option<ProgressBar>) {
        let mut guard = self.bar.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = guard.take() {
            old.finish_and_clear();
        }
        *guard = bar;
    }

    fn new_bar(path: &str, total: Option<u64>, done: u64, verb: &str) -> ProgressBar {
        let bar = match total {
            Some(t) => ProgressBar::with_draw_target(Some(t), ProgressDrawTarget::stderr()),
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
        };
        let template = if total.is_some() {
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}"
        } else {
            "{msg} {spinner} {bytes} {bytes_per_sec}"
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(format!("{verb} {path}"));
        bar.set_position(done);
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    }
}

impl Default for BarProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress for BarProgress {
    fn message(&self, text: &str) {
        let guard = self.bar.lock().unwrap_or_else(|p| p.into_inner());
        match guard.as_ref() {
            Some(bar) => bar.println(text),
            None => eprintln!("{text}"),
        }
    }

    fn download_started(&self, path: &str, total: Option<u64>, done: u64) {
        self.replace(Some(Self::new_bar(path, total, done, "downloading")));
    }

    fn download_progress(&self, _path: &str, done: u64) {
        let guard = self.bar.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(bar) = guard.as_ref() {
            bar.set_position(done);
        }
    }

    fn verify_started(&self, path: &str, total: u64) {
        // Hashing an 800 MB file takes seconds; say so rather than look stuck at 100%.
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{msg} {spinner}") {
            bar.set_style(style);
        }
        bar.set_message(format!("verifying {path} ({})", format_size(total)));
        bar.enable_steady_tick(Duration::from_millis(200));
        self.replace(Some(bar));
    }

    fn file_done(&self, path: &str) {
        self.replace(None);
        eprintln!("{path}: ok");
    }
}

/// Bytes in binary units with one decimal (`847 B`, `3.4 MiB`, `803.6 MiB`, `1.2 GiB`), as
/// `sys1rust models` prints sizes.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(847), "847 B");
        assert_eq!(format_size(1024), "1.0 KiB");
        assert_eq!(format_size(3_583_228), "3.4 MiB");
        assert_eq!(format_size(842_609_220), "803.6 MiB");
        assert_eq!(format_size(5 << 30), "5.0 GiB");
    }

    #[test]
    fn lines_every_tenth() {
        let p = LineProgress::new(Vec::new());
        p.download_started("m", Some(100), 0);
        for done in (0..=100).step_by(5) {
            p.download_progress("m", done);
        }
        p.file_done("m");
        let text = String::from_utf8(p.into_inner()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.first(), Some(&"m: downloading 100 B"));
        assert_eq!(lines.len(), 1 + 9 + 1, "{text}");
        assert_eq!(lines.last(), Some(&"m: ok"));
    }
}
