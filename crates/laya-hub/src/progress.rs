//! Progress reporting. The library calls a [`Progress`]; the binary picks how it looks:
//! [`BarProgress`] (indicatif bars) on a terminal, [`LineProgress`] (plain lines, one per
//! event and every 10%) otherwise, [`NoProgress`] for silence. [`stderr_progress`] makes that
//! choice for stderr.
//!
//! Both displays keep one [`Tally`] of the pull, so they agree on what they report: a speed
//! counts only bytes fetched in this run (a resumed file does not count what was already on
//! disk), a finished file shows its full size, and the pull ends with one summary line.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// Receives what a pull is doing. All methods have empty defaults; `path` is the file's path
/// in the repo, byte counts are totals for that file (not increments).
pub trait Progress {
    /// A one-line status: which model is being pulled, waiting for a lock, a retry.
    fn message(&self, _text: &str) {}
    /// The files this pull makes sure of, in order, with their sizes where known. Called
    /// once per model, before any event about its files.
    fn plan(&self, _files: &[(&str, Option<u64>)]) {}
    /// A download starts (or resumes: `done` bytes are already on disk). `total` is `None`
    /// when the hub did not say.
    fn download_started(&self, _path: &str, _total: Option<u64>, _done: u64) {}
    /// `done` bytes of `path` are on disk.
    fn download_progress(&self, _path: &str, _done: u64) {}
    /// Hashing of `path` starts (`total` bytes).
    fn verify_started(&self, _path: &str, _total: u64) {}
    /// `done` bytes of `path` are hashed.
    fn verify_progress(&self, _path: &str, _done: u64) {}
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

// ---- the tally both displays report from ----

/// One file of the pull.
#[derive(Debug, Clone)]
struct FileTally {
    path: String,
    size: Option<u64>,
    /// Bytes on disk (downloading) or hashed (verifying); the size once finished.
    done: u64,
    /// Where this run's transfer started, when it resumed a partial file.
    resumed_at: Option<u64>,
    /// When and from which byte this run's transfer started.
    fetch_start: Option<(Instant, u64)>,
    /// Bytes fetched by this run, and the seconds it took (set when the transfer ends).
    fetched: u64,
    fetch_secs: f64,
    downloading: bool,
    finished: bool,
}

impl FileTally {
    fn new(path: &str, size: Option<u64>) -> FileTally {
        FileTally {
            path: path.to_owned(),
            size,
            done: 0,
            resumed_at: None,
            fetch_start: None,
            fetched: 0,
            fetch_secs: 0.0,
            downloading: false,
            finished: false,
        }
    }

    /// Closes the transfer's account (called when hashing starts or the file is done).
    fn end_transfer(&mut self) {
        if let (true, Some((at, from))) = (self.downloading, self.fetch_start) {
            self.fetched += self.done.saturating_sub(from);
            self.fetch_secs += at.elapsed().as_secs_f64();
        }
        self.downloading = false;
    }

    /// What the display says of a finished file: its size, then how it got here.
    fn note(&self) -> String {
        let size = format_size(self.size.unwrap_or(self.done));
        if self.fetch_start.is_none() {
            return format!("{size}, already cached");
        }
        let mut note = format!("{size}, fetched {}", format_size(self.fetched));
        // A speed needs an interval long enough to measure.
        if self.fetch_secs >= 0.05 {
            note.push_str(&format!(
                " in {} ({})",
                format_secs(self.fetch_secs),
                format_rate(self.fetched, self.fetch_secs)
            ));
        }
        if let Some(at) = self.resumed_at {
            note.push_str(&format!(", resumed at {}", format_size(at)));
        }
        note
    }
}

/// The whole pull: every planned file (plus any event about a file not planned).
#[derive(Debug, Default)]
struct Tally {
    files: Vec<FileTally>,
    started: Option<Instant>,
}

impl Tally {
    fn plan(&mut self, files: &[(&str, Option<u64>)]) {
        self.files = files.iter().map(|(p, s)| FileTally::new(p, *s)).collect();
        self.started = Some(Instant::now());
    }

    fn file(&mut self, path: &str) -> &mut FileTally {
        let i = match self.files.iter().position(|f| f.path == path) {
            Some(i) => i,
            None => {
                self.files.push(FileTally::new(path, None));
                self.files.len() - 1
            }
        };
        &mut self.files[i]
    }

    fn download_started(&mut self, path: &str, total: Option<u64>, done: u64) {
        let f = self.file(path);
        f.end_transfer();
        if total.is_some() {
            f.size = total;
        }
        f.done = done;
        f.resumed_at = (done > 0).then_some(done);
        f.fetch_start = Some((Instant::now(), done));
        f.downloading = true;
    }

    fn file_done(&mut self, path: &str) -> FileTally {
        let f = self.file(path);
        f.end_transfer();
        f.done = f.size.unwrap_or(f.done);
        f.finished = true;
        f.clone()
    }

    /// Bytes of the pull on disk: finished files at their size, downloading ones so far.
    fn on_disk(&self) -> u64 {
        self.files
            .iter()
            .map(|f| {
                if f.finished {
                    f.size.unwrap_or(f.done)
                } else if f.downloading {
                    f.done
                } else {
                    0
                }
            })
            .sum()
    }

    /// The pull's size, when every file's size is known.
    fn total(&self) -> Option<u64> {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Bytes fetched by this run so far, including transfers under way.
    fn fetched(&self) -> u64 {
        self.files
            .iter()
            .map(|f| match (f.downloading, f.fetch_start) {
                (true, Some((_, from))) => f.fetched + f.done.saturating_sub(from),
                _ => f.fetched,
            })
            .sum()
    }

    fn all_done(&self) -> bool {
        !self.files.is_empty() && self.files.iter().all(|f| f.finished)
    }

    /// The closing line: files, size, and what this run fetched at which speed.
    fn summary(&self) -> String {
        let n = self.files.len();
        let files = if n == 1 {
            "1 file".to_owned()
        } else {
            format!("{n} files")
        };
        let size = format_size(self.on_disk());
        let fetched = self.fetched();
        if fetched == 0 && self.files.iter().all(|f| f.fetch_start.is_none()) {
            return format!("{files}, {size}, all already cached");
        }
        let secs = self.started.map_or(0.0, |t| t.elapsed().as_secs_f64());
        format!(
            "{files}, {size} in {}: fetched {} ({})",
            format_secs(secs),
            format_size(fetched),
            format_rate(fetched, secs)
        )
    }
}

/// `0.4 s`, `12 s`, `3 min 05 s`.
fn format_secs(secs: f64) -> String {
    if secs < 10.0 {
        format!("{secs:.1} s")
    } else if secs < 60.0 {
        format!("{secs:.0} s")
    } else {
        let s = secs.round() as u64;
        format!("{} min {:02} s", s / 60, s % 60)
    }
}

/// Bytes per second in [`format_size`]'s units; `-` until there is a measurable interval.
fn format_rate(bytes: u64, secs: f64) -> String {
    if secs < 0.05 {
        return "- /s".to_owned();
    }
    format!("{}/s", format_size((bytes as f64 / secs) as u64))
}

/// Seconds left at `rate` for `left` bytes, in [`format_secs`]'s spelling.
fn format_eta(left: u64, bytes: u64, secs: f64) -> String {
    if bytes == 0 || secs < 0.05 {
        return String::new();
    }
    let rate = bytes as f64 / secs;
    format!("eta {}", format_secs(left as f64 / rate))
}

// ---- plain lines ----

/// Plain lines for logs and pipes: messages, the start of each download (or where it
/// resumes), every 10% of it, verification, each file's result and the pull's summary.
pub struct LineProgress<W: Write> {
    state: Mutex<LineState<W>>,
}

struct LineState<W> {
    out: W,
    tally: Tally,
    total: Option<u64>,
    last_decile: u64,
}

impl<W: Write> LineProgress<W> {
    /// Writes to `out`.
    pub fn new(out: W) -> Self {
        LineProgress {
            state: Mutex::new(LineState {
                out,
                tally: Tally::default(),
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

    fn plan(&self, files: &[(&str, Option<u64>)]) {
        self.with(|s| s.tally.plan(files));
    }

    fn download_started(&self, path: &str, total: Option<u64>, done: u64) {
        self.with(|s| {
            s.tally.download_started(path, total, done);
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
            s.tally.file(path).done = done;
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
            s.tally.file(path).end_transfer();
            let _ = writeln!(s.out, "{path}: verifying {}", format_size(total));
        });
    }

    fn file_done(&self, path: &str) {
        self.with(|s| {
            let f = s.tally.file_done(path);
            let _ = writeln!(s.out, "{path}: ok ({})", f.note());
            if s.tally.all_done() {
                let _ = writeln!(s.out, "pulled {}", s.tally.summary());
            }
        });
    }
}

// ---- bars ----

/// The bars on screen now, so that log lines can be printed above them ([`suspend_bars`]).
static DISPLAY: Mutex<Option<(u64, MultiProgress)>> = Mutex::new(None);
static DISPLAY_ID: AtomicU64 = AtomicU64::new(0);

/// Runs `f` (which writes to the terminal) with any [`BarProgress`] display cleared, then
/// draws the bars again below what `f` wrote. Log writers call this so log lines never land
/// inside a bar.
pub fn suspend_bars<R>(f: impl FnOnce() -> R) -> R {
    let display = DISPLAY
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map(|(_, m)| m.clone());
    match display {
        Some(multi) => multi.suspend(f),
        None => f(),
    }
}

/// indicatif bars on stderr: one line per file (a bar while it downloads or is hashed, its
/// result once done) and a total line below them.
pub struct BarProgress {
    multi: MultiProgress,
    id: u64,
    state: Mutex<BarState>,
}

#[derive(Default)]
struct BarState {
    tally: Tally,
    width: usize,
    bars: Vec<(String, ProgressBar)>,
    total: Option<ProgressBar>,
    /// Bytes fetched by this run, read by the total line's speed.
    fetched: Arc<AtomicU64>,
}

impl BarProgress {
    /// Draws on stderr.
    pub fn new() -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let id = DISPLAY_ID.fetch_add(1, Ordering::Relaxed);
        *DISPLAY.lock().unwrap_or_else(|p| p.into_inner()) = Some((id, multi.clone()));
        BarProgress {
            multi,
            id,
            state: Mutex::new(BarState::default()),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut BarState, &MultiProgress) -> R) -> R {
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard, &self.multi)
    }
}

impl Default for BarProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for BarProgress {
    fn drop(&mut self) {
        // A failed pull leaves its bars as they stood (the error follows them), not ticking.
        self.with(|s, _| s.abandon());
        let mut display = DISPLAY.lock().unwrap_or_else(|p| p.into_inner());
        if display.as_ref().is_some_and(|(id, _)| *id == self.id) {
            *display = None;
        }
    }
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

/// `{rate}` and `{eta}` from the bytes this run moved since `start` (`from` bytes were
/// already there), never from the position alone: a resumed file is not a fast one.
fn with_rate(
    style: ProgressStyle,
    start: Instant,
    fetched: impl Fn(&ProgressState) -> u64 + Clone + Send + Sync + 'static,
) -> ProgressStyle {
    let eta_fetched = fetched.clone();
    style
        .with_key(
            "rate",
            move |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = w.write_str(&format_rate(fetched(s), start.elapsed().as_secs_f64()));
            },
        )
        .with_key(
            "eta",
            move |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                if let Some(len) = s.len() {
                    let left = len.saturating_sub(s.pos());
                    let _ = w.write_str(&format_eta(
                        left,
                        eta_fetched(s),
                        start.elapsed().as_secs_f64(),
                    ));
                }
            },
        )
}

impl BarState {
    /// Lets go of every line, leaving unfinished ones as they stand, no longer ticking.
    fn abandon(&mut self) {
        let total = self.total.take();
        for bar in self.bars.drain(..).map(|(_, b)| b).chain(total) {
            if !bar.is_finished() {
                bar.abandon();
            }
        }
    }

    fn prefix(&self, path: &str) -> String {
        format!("{path:<w$}", w = self.width)
    }

    /// The line of `path`, made (above the total line) on its first event.
    fn bar(&mut self, path: &str, multi: &MultiProgress) -> ProgressBar {
        if let Some((_, bar)) = self.bars.iter().find(|(p, _)| p == path) {
            return bar.clone();
        }
        self.width = self.width.max(path.len());
        // Built hidden and styled: a bar draws itself on any change until the display adopts
        // it, and indicatif's default bar is wider than a terminal.
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden())
            .with_style(style("{prefix} {msg}"))
            .with_prefix(self.prefix(path));
        let bar = match &self.total {
            Some(total) => multi.insert_before(total, bar),
            None => multi.add(bar),
        };
        self.bars.push((path.to_owned(), bar.clone()));
        bar
    }

    fn update_total(&self) {
        self.fetched.store(self.tally.fetched(), Ordering::Relaxed);
        if let Some(total) = &self.total {
            total.set_position(self.tally.on_disk());
        }
    }
}

impl Progress for BarProgress {
    fn message(&self, text: &str) {
        self.multi.suspend(|| eprintln!("{text}"));
    }

    fn plan(&self, files: &[(&str, Option<u64>)]) {
        self.with(|s, multi| {
            // A second model in one run: its files get lines of their own.
            s.abandon();
            s.tally.plan(files);
            s.width = files.iter().map(|(p, _)| p.len()).max().unwrap_or(0).max(5);
            s.fetched = Arc::new(AtomicU64::new(0));
            let fetched = s.fetched.clone();
            let hidden = |len| ProgressBar::with_draw_target(len, ProgressDrawTarget::hidden());
            let total = match s.tally.total() {
                Some(len) => hidden(Some(len)).with_style(with_rate(
                    style("{prefix} [{bar:30}] {bytes}/{total_bytes} {rate} {eta}"),
                    Instant::now(),
                    move |_| fetched.load(Ordering::Relaxed),
                )),
                None => hidden(None).with_style(with_rate(
                    style("{prefix} {bytes} {rate}"),
                    Instant::now(),
                    move |_| fetched.load(Ordering::Relaxed),
                )),
            };
            let total = multi.add(total.with_prefix(s.prefix("total")));
            total.enable_steady_tick(Duration::from_millis(250));
            s.total = Some(total);
        });
    }

    fn download_started(&self, path: &str, total: Option<u64>, done: u64) {
        self.with(|s, multi| {
            s.tally.download_started(path, total, done);
            let bar = s.bar(path, multi);
            let template = match total {
                Some(_) => "{prefix} [{bar:30}] {bytes}/{total_bytes} {rate} {eta} {msg}",
                None => "{prefix} {bytes} {rate} {msg}",
            };
            bar.set_style(with_rate(style(template), Instant::now(), move |st| {
                st.pos().saturating_sub(done)
            }));
            match total {
                Some(t) => bar.set_length(t),
                None => bar.unset_length(),
            }
            bar.set_position(done);
            bar.set_message(if done > 0 {
                format!(
                    "resuming at {} of {}",
                    format_size(done),
                    total.map(format_size).unwrap_or_else(|| "?".into())
                )
            } else {
                String::new()
            });
            bar.enable_steady_tick(Duration::from_millis(250));
            s.update_total();
        });
    }

    fn download_progress(&self, path: &str, done: u64) {
        self.with(|s, multi| {
            s.tally.file(path).done = done;
            s.bar(path, multi).set_position(done);
            s.update_total();
        });
    }

    fn verify_started(&self, path: &str, total: u64) {
        // Hashing an 800 MB file takes seconds; say so rather than look stuck at 100%.
        self.with(|s, multi| {
            s.tally.file(path).end_transfer();
            let bar = s.bar(path, multi);
            bar.set_style(style("{prefix} [{bar:30}] verifying {percent:>3}%"));
            bar.set_length(total.max(1));
            bar.set_position(0);
            bar.set_message("");
            bar.enable_steady_tick(Duration::from_millis(250));
            s.update_total();
        });
    }

    fn verify_progress(&self, path: &str, done: u64) {
        self.with(|s, multi| s.bar(path, multi).set_position(done));
    }

    fn file_done(&self, path: &str) {
        self.with(|s, multi| {
            let f = s.tally.file_done(path);
            let bar = s.bar(path, multi);
            bar.set_style(style("{prefix} {msg}"));
            bar.finish_with_message(format!("ok  {}", f.note()));
            s.update_total();
            if s.tally.all_done() {
                if let Some(total) = &s.total {
                    total.set_style(style("{prefix} {msg}"));
                    total.finish_with_message(format!("ok  {}", s.tally.summary()));
                }
            }
        });
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
        p.plan(&[("m", Some(100))]);
        p.download_started("m", Some(100), 0);
        for done in (0..=100).step_by(5) {
            p.download_progress("m", done);
        }
        p.file_done("m");
        let text = String::from_utf8(p.into_inner()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.first(), Some(&"m: downloading 100 B"));
        assert_eq!(lines.len(), 1 + 9 + 2, "{text}");
        assert!(
            lines[10].starts_with("m: ok (100 B, fetched 100 B"),
            "{text}"
        );
        assert!(lines[11].starts_with("pulled 1 file, 100 B in "), "{text}");
        assert!(lines[11].contains(": fetched 100 B ("), "{text}");
    }

    #[test]
    fn a_resumed_file_counts_only_what_this_run_fetched() {
        let p = LineProgress::new(Vec::new());
        p.plan(&[("config.json", Some(10)), ("m", Some(100))]);
        p.file_done("config.json");
        p.download_started("m", Some(100), 40);
        p.download_progress("m", 100);
        p.verify_started("m", 100);
        p.file_done("m");
        let text = String::from_utf8(p.into_inner()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "config.json: ok (10 B, already cached)", "{text}");
        assert_eq!(lines[1], "m: resuming at 40 B of 100 B", "{text}");
        assert_eq!(lines[2], "m: verifying 100 B", "{text}");
        assert!(lines[3].starts_with("m: ok (100 B, fetched 60 B"), "{text}");
        assert!(lines[3].ends_with(", resumed at 40 B)"), "{text}");
        assert!(lines[4].starts_with("pulled 2 files, 110 B in "), "{text}");
        assert!(lines[4].contains(": fetched 60 B ("), "{text}");
        assert_eq!(lines.len(), 5, "{text}");
    }

    #[test]
    fn a_pull_of_cached_files_says_so() {
        let mut t = Tally::default();
        t.plan(&[("a", Some(1024)), ("b", Some(1024))]);
        t.file_done("a");
        assert!(!t.all_done());
        t.file_done("b");
        assert!(t.all_done());
        assert_eq!(t.summary(), "2 files, 2.0 KiB, all already cached");
    }

    #[test]
    fn rates_and_times() {
        assert_eq!(format_rate(3 << 20, 2.0), "1.5 MiB/s");
        assert_eq!(format_rate(100, 0.0), "- /s");
        assert_eq!(format_secs(0.42), "0.4 s");
        assert_eq!(format_secs(12.4), "12 s");
        assert_eq!(format_secs(185.0), "3 min 05 s");
        assert_eq!(format_eta(50, 50, 1.0), "eta 1.0 s");
    }
}
