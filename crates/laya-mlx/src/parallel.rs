//! The host's threads: how many a piece of work is worth, and one pool of them for the life
//! of the process.
//!
//! A forward of ModernBERT-large on the host splits some 300 steps (GEMMs, norms, attention)
//! over the cores. Starting and joining fresh threads for each cost ~50 µs a step here (and a
//! fresh thread's first AMX instruction another ~20 µs, for the kernel to grant it tile
//! state); with one pool started once, one question over 128 tokens ran 10-15 % faster
//! (`results/CPU.md`).
//!
//! The pool's threads wait for the next step spinning, for up to [`SPIN`], before they sleep:
//! the steps of a forward follow each other within microseconds, and a sleeping thread woken
//! for each of them joined late. With a general-purpose pool whose idle threads yield and
//! sleep, one GEMM in a hundred at 207 tokens saw its second thread start 2.7-3.8 ms late,
//! after the calling thread had done all the work alone (`results/CPU.md`). The calling
//! thread works too, so the pool has one thread fewer than a step uses at most (the cores,
//! up to 8).

use std::any::Any;
use std::cell::UnsafeCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock, PoisonError, TryLockError};
use std::time::{Duration, Instant};

/// How long an idle pool thread spins for the next step before it sleeps: far longer than
/// the gaps between a forward's steps, short enough that an idle server's threads sleep.
const SPIN: Duration = Duration::from_millis(2);

/// The cores this process may run on, read once (the affinity mask and cgroup quota, which
/// `available_parallelism` reads from the system at every call).
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The most threads one step uses, the calling thread among them.
fn most_threads() -> usize {
    cores().clamp(1, 8)
}

/// Threads worth using for `rows` rows (or other units of work) of `values` values in all.
pub(crate) fn threads_for(rows: usize, values: usize) -> usize {
    // Below ~64k values a thread costs more than it saves.
    if values < 1 << 16 {
        return 1;
    }
    most_threads().min(rows.max(1))
}

/// Runs every job, on this thread and the pool's, and returns when all are done. The first
/// job's panic is this call's, once every job has run: a job that panics stops none of the
/// others (the callers' jobs are parts of one output).
pub(crate) fn run<'a, F: FnOnce() + Send + 'a>(jobs: impl IntoIterator<Item = F>) {
    let jobs: Vec<Mutex<Option<F>>> = jobs.into_iter().map(|j| Mutex::new(Some(j))).collect();
    let next = AtomicUsize::new(0);
    let panic: Mutex<Option<Box<dyn Any + Send>>> = Mutex::new(None);
    broadcast(jobs.len(), || {
        while let Some(job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
            let job = job.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(Err(payload)) = job.map(|j| catch_unwind(AssertUnwindSafe(j))) {
                let mut first = panic.lock().unwrap_or_else(PoisonError::into_inner);
                first.get_or_insert(payload);
            }
        }
    });
    if let Some(payload) = panic.into_inner().unwrap_or_else(PoisonError::into_inner) {
        resume_unwind(payload);
    }
}

/// Runs `work` on up to `threads` threads (this one among them, the others as the pool has
/// them free): for work that hands out its own items from a shared counter, so that the
/// calling thread finishes them all if no other joins in. A panic in `work` is this call's,
/// once every thread running it has returned.
pub(crate) fn broadcast(threads: usize, work: impl Fn() + Sync) {
    let helpers = threads.min(most_threads()).saturating_sub(1);
    let Some(pool) = (helpers > 0).then(Pool::get).flatten() else {
        return work();
    };
    // One step at a time. A second caller runs its work alone: waiting for the pool would
    // leave its own core idle meanwhile, and a step started from inside a step would wait
    // for itself.
    let _turn = match pool.turn.try_lock() {
        Ok(turn) => turn,
        Err(TryLockError::Poisoned(turn)) => turn.into_inner(),
        Err(TryLockError::WouldBlock) => return work(),
    };
    let work: &(dyn Fn() + Sync) = &work;
    // SAFETY: only the lifetime is erased. The pool's threads call `work` only through a
    // seat of this step, and `Join` (dropped before `work` is, on return and on unwind alike)
    // closes the seats and waits for every thread that took one to finish.
    let work: &'static (dyn Fn() + Sync) = unsafe { std::mem::transmute(work) };
    let helpers = helpers.min(pool.threads.load(Ordering::Relaxed));
    *pool.panic.lock().unwrap_or_else(PoisonError::into_inner) = None;
    // SAFETY: no pool thread reads the cell outside a seat, and the seats are closed (the
    // last step's `Join`); the seats' release store below publishes the write.
    unsafe { *pool.work.get() = Some(work) };
    pool.finished.store(0, Ordering::Relaxed);
    pool.seats.store(helpers, Ordering::Release);
    // From the moment a seat is open, whatever happens, the step ends by closing them.
    let join = Join { pool, helpers };
    pool.epoch.fetch_add(1, Ordering::SeqCst);
    if pool.sleeping.load(Ordering::SeqCst) > 0 {
        let _sleep = pool.sleep.lock().unwrap_or_else(PoisonError::into_inner);
        pool.wake.notify_all();
    }
    work();
    drop(join);
    let panic = pool
        .panic
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    if let Some(payload) = panic {
        resume_unwind(payload);
    }
}

/// The pool: `threads` threads that take the seats of each step.
struct Pool {
    /// How many were started.
    threads: AtomicUsize,
    /// Held by the thread whose step the pool runs.
    turn: Mutex<()>,
    /// Bumped at each step: what a waiting thread watches.
    epoch: AtomicU64,
    /// Seats of the current step still open.
    seats: AtomicUsize,
    /// Threads that took a seat of the current step and have returned from it.
    finished: AtomicUsize,
    /// The current step's work; written only while no seat is open or taken.
    work: UnsafeCell<Option<&'static (dyn Fn() + Sync)>>,
    /// The first panic of a pool thread in the current step.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// Threads asleep on `wake`, and what they sleep on.
    sleeping: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `work` is written by the thread holding `turn` while no seat is open or taken, and
// read by a pool thread only after it took a seat (acquire, after the release that opened
// them); every other field is `Sync`.
unsafe impl Sync for Pool {}

impl Pool {
    /// The process's pool, started at first use; `None` if no thread could be started.
    fn get() -> Option<&'static Pool> {
        static POOL: OnceLock<Option<&'static Pool>> = OnceLock::new();
        *POOL.get_or_init(|| {
            let pool: &'static Pool = Box::leak(Box::new(Pool {
                threads: AtomicUsize::new(0),
                turn: Mutex::new(()),
                epoch: AtomicU64::new(0),
                seats: AtomicUsize::new(0),
                finished: AtomicUsize::new(0),
                work: UnsafeCell::new(None),
                panic: Mutex::new(None),
                sleeping: AtomicUsize::new(0),
                sleep: Mutex::new(()),
                wake: Condvar::new(),
            }));
            let started = (0..most_threads() - 1)
                .take_while(|i| {
                    std::thread::Builder::new()
                        .name(format!("laya-host-{i}"))
                        .spawn(move || pool.serve())
                        .is_ok()
                })
                .count();
            pool.threads.store(started, Ordering::Relaxed);
            (started > 0).then_some(pool)
        })
    }

    /// A pool thread: each step, take a seat if one is open and run the step's work.
    fn serve(&self) {
        let mut seen = self.epoch.load(Ordering::Acquire);
        loop {
            seen = self.wait_past(seen);
            if !self.take_seat() {
                continue;
            }
            // SAFETY: a seat is taken, so the work is this step's and outlives the seat.
            let work = unsafe { *self.work.get() };
            let extra = match work.map(|work| catch_unwind(AssertUnwindSafe(work))) {
                Some(Err(payload)) => self.keep_panic(payload),
                _ => None,
            };
            self.finished.fetch_add(1, Ordering::Release);
            // A second panic's payload is dropped only once the seat is given back, where a
            // panic in its own `Drop` cannot keep the caller waiting.
            if let Some(payload) = extra {
                let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
            }
        }
    }

    /// Keeps the step's first panic for the caller, before the seat is given back (after,
    /// the caller may have looked already); returns any later one.
    fn keep_panic(&self, payload: Box<dyn Any + Send>) -> Option<Box<dyn Any + Send>> {
        let mut panic = self.panic.lock().unwrap_or_else(PoisonError::into_inner);
        match *panic {
            Some(_) => Some(payload),
            None => {
                *panic = Some(payload);
                None
            }
        }
    }

    /// Waits for a step after `seen`, spinning for up to [`SPIN`], then asleep.
    fn wait_past(&self, seen: u64) -> u64 {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let epoch = self.epoch.load(Ordering::Acquire);
            if epoch != seen {
                return epoch;
            }
            spins = spins.wrapping_add(1);
            // The clock is read once in 64 turns; a turn is one pause instruction.
            if !spins.is_multiple_of(64) || start.elapsed() < SPIN {
                std::hint::spin_loop();
                continue;
            }
            let mut sleep = self.sleep.lock().unwrap_or_else(PoisonError::into_inner);
            self.sleeping.fetch_add(1, Ordering::SeqCst);
            while self.epoch.load(Ordering::SeqCst) == seen {
                sleep = self
                    .wake
                    .wait(sleep)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            self.sleeping.fetch_sub(1, Ordering::SeqCst);
            drop(sleep);
        }
    }

    /// Takes one of the current step's open seats, if any.
    fn take_seat(&self) -> bool {
        self.seats
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |s| s.checked_sub(1))
            .is_ok()
    }
}

/// The end of a step: closes its seats and waits for the threads that took one. It waits
/// spinning, then yielding, never asleep: a thread holding a seat is running the step's
/// last items, which take at most one item's time.
struct Join {
    pool: &'static Pool,
    helpers: usize,
}

impl Drop for Join {
    fn drop(&mut self) {
        let taken = self.helpers - self.pool.seats.swap(0, Ordering::AcqRel);
        let mut spins = 0u32;
        while self.pool.finished.load(Ordering::Acquire) < taken {
            spins = spins.saturating_add(1);
            if spins < 1 << 16 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        // SAFETY: the seats are closed and every thread that took one has returned.
        unsafe { *self.pool.work.get() = None };
        // Unwinding, the caller's own panic is the one it carries on with.
        if std::thread::panicking() {
            let _ = self.pool.panic.lock().map(|mut p| p.take());
        }
    }
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

    /// Work handing out `items` from a counter, as the kernels' is: each item once, whoever
    /// joins in. Returns how many threads ran it.
    fn share(threads: usize, items: &[AtomicUsize]) -> usize {
        let (next, calls) = (AtomicUsize::new(0), AtomicUsize::new(0));
        super::broadcast(threads, || {
            calls.fetch_add(1, Ordering::Relaxed);
            while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
                item.fetch_add(1, Ordering::Relaxed);
            }
        });
        calls.into_inner()
    }

    #[test]
    fn broadcast_runs_on_at_most_as_many_threads_as_asked() {
        let items: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
        for threads in 1..5 {
            let calls = share(threads, &items);
            assert!(
                (1..=threads).contains(&calls),
                "{calls} calls for {threads}"
            );
        }
        assert!(items.iter().all(|i| i.load(Ordering::Relaxed) == 4));
    }

    #[test]
    fn steps_from_several_threads_and_from_inside_a_step_each_finish() {
        let items: Vec<AtomicUsize> = (0..64).map(|_| AtomicUsize::new(0)).collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let inner = AtomicUsize::new(0);
                        super::broadcast(2, || {
                            super::run((0..3).map(|_| {
                                || {
                                    inner.fetch_add(1, Ordering::Relaxed);
                                }
                            }));
                        });
                        // `run`'s three jobs, once on each thread that ran the step.
                        assert!([3, 6].contains(&inner.load(Ordering::Relaxed)));
                        share(2, &items);
                    }
                });
            }
        });
        assert!(items.iter().all(|i| i.load(Ordering::Relaxed) == 800));
    }

    #[test]
    fn every_job_runs_though_one_panics_and_the_panic_reaches_the_caller() {
        for _ in 0..50 {
            let done: Vec<AtomicUsize> = (0..4).map(|_| AtomicUsize::new(0)).collect();
            let caught = std::panic::catch_unwind(|| {
                super::run(done.iter().enumerate().map(|(i, d)| {
                    move || {
                        d.fetch_add(1, Ordering::Relaxed);
                        assert_ne!(i, 2, "job 2 fails");
                    }
                }));
            });
            assert!(caught.is_err());
            assert!(done.iter().all(|d| d.load(Ordering::Relaxed) == 1));
        }
    }

    fn on_pool_thread() -> bool {
        std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("laya-host-"))
    }

    /// Broadcasts `work` to two threads, giving a pool thread up to a second to join in;
    /// `joined` says whether one did. A panic in `work` is this call's.
    fn step_with_pool_thread(joined: &std::sync::atomic::AtomicBool, work: impl Fn() + Sync) {
        let start = std::time::Instant::now();
        super::broadcast(2, || {
            if on_pool_thread() {
                joined.store(true, Ordering::Relaxed);
            } else {
                while !joined.load(Ordering::Relaxed)
                    && start.elapsed() < std::time::Duration::from_secs(1)
                {
                    std::hint::spin_loop();
                }
            }
            work();
        });
    }

    /// [`step_with_pool_thread`], its panic caught; whether a pool thread ran `work`.
    fn with_pool_thread(work: impl Fn() + Sync) -> bool {
        let joined = std::sync::atomic::AtomicBool::new(false);
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            step_with_pool_thread(&joined, work)
        }));
        joined.into_inner()
    }

    #[test]
    fn pool_threads_join_in_after_sleeping() {
        if super::most_threads() < 2 {
            return;
        }
        // Other tests' steps may hold the pool for a moment: then this step runs alone.
        let joined = (0..50).any(|_| {
            std::thread::sleep(super::SPIN * 5);
            with_pool_thread(|| ())
        });
        assert!(joined, "no pool thread joined a step in 50 tries");
    }

    #[test]
    fn a_pool_threads_panic_reaches_the_caller_and_no_later_step() {
        if super::most_threads() < 2 {
            return;
        }
        let panicked = |on_caller_too: bool| {
            let joined = with_pool_thread(|| {
                if on_pool_thread() || on_caller_too {
                    panic!("the step fails");
                }
            });
            if joined {
                let caught = std::panic::catch_unwind(|| super::broadcast(2, || ()));
                assert!(caught.is_ok(), "a later step carried an old panic");
            }
            joined
        };
        for on_caller_too in [false, true] {
            assert!((0..50).any(|_| panicked(on_caller_too)));
        }
        // The pool thread's panic, alone, is the caller's.
        let caught = (0..50).find_map(|_| {
            let ran = std::sync::atomic::AtomicBool::new(false);
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                step_with_pool_thread(&ran, || {
                    if on_pool_thread() {
                        panic!("the pool thread fails");
                    }
                })
            }));
            ran.into_inner().then_some(caught)
        });
        assert!(matches!(caught, Some(Err(_))), "{caught:?}");
    }
}
