//! The host's threads: how many a piece of work is worth, and one pool of them for the life
//! of the process.
//!
//! A forward of ModernBERT-large on the host splits some 300 steps (GEMMs, norms, attention)
//! over the cores. Starting and joining fresh threads for each cost ~50 µs a step here (and a
//! fresh thread's first AMX instruction another ~20 µs, for the kernel to grant it tile
//! state); with one pool started once, one question over 128 tokens ran 10-15 % faster
//! (`results/CPU.md`).

use std::sync::OnceLock;

/// The cores this process may run on, read once (the affinity mask and cgroup quota, which
/// `available_parallelism` reads from the system at every call).
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Threads worth using for `rows` rows (or other units of work) of `values` values in all.
pub(crate) fn threads_for(rows: usize, values: usize) -> usize {
    // Below ~64k values a thread costs more than it saves.
    if values < 1 << 16 {
        return 1;
    }
    cores().clamp(1, 8).min(rows.max(1))
}

/// Runs every job, the first on this thread and the others on the pool's threads, and
/// returns when all are done. A job's panic is this call's, once every job has ended.
pub(crate) fn run<'a, F: FnOnce() + Send + 'a>(jobs: impl IntoIterator<Item = F>) {
    let mut jobs = jobs.into_iter();
    let Some(first) = jobs.next() else {
        return;
    };
    rayon_core::in_place_scope(|scope| {
        for job in jobs {
            scope.spawn(move |_| job());
        }
        first();
    });
}

/// Runs `work` on up to `threads` threads (this one among them, the others as the pool has
/// them free): for work that hands out its own items from a shared counter, so that the
/// calling thread finishes them all if no other joins in.
pub(crate) fn broadcast(threads: usize, work: impl Fn() + Sync) {
    let work = &work;
    run((0..threads.max(1)).map(|_| move || work()));
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_job_runs_once() {
        let done: Vec<AtomicUsize> = (0..37).map(|_| AtomicUsize::new(0)).collect();
        super::run(done.iter().map(|d| {
            move || {
                d.fetch_add(1, Ordering::Relaxed);
            }
        }));
        assert!(done.iter().all(|d| d.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn broadcast_runs_on_as_many_threads_as_asked() {
        let calls = AtomicUsize::new(0);
        super::broadcast(3, || {
            calls.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(calls.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_jobs_panic_reaches_the_caller() {
        let caught = std::panic::catch_unwind(|| {
            super::run((0..4).map(|i| move || assert_ne!(i, 2, "job 2 fails")));
        });
        assert!(caught.is_err());
    }
}
