//! Prometheus metrics in the text exposition format, kept with atomics (no registry crate
//! needed for a handful of series).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bucket upper bounds in seconds, shared by the latency and inference-time histograms.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Default)]
struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    /// Sum in microseconds, so it stays an integer atomic.
    sum_us: AtomicU64,
}

impl Histogram {
    fn observe(&self, seconds: f64) {
        for (i, b) in BUCKETS.iter().enumerate() {
            if seconds <= *b {
                self.counts[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add((seconds * 1e6) as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {}",
                self.counts[i].load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(
            out,
            "{name}_sum{braces} {}",
            self.sum_us.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "{name}_count{braces} {count}");
    }
}

/// The server's counters.
#[derive(Default)]
pub struct Metrics {
    /// `(route, status) -> count`.
    requests: Mutex<Vec<((&'static str, u16), u64)>>,
    latency: [Histogram; 2],
    inference: [Histogram; 2],
    in_flight: AtomicU64,
    input_tokens: AtomicU64,
    truncated_states: AtomicU64,
    decisions: AtomicU64,
}

fn route_index(route: &str) -> usize {
    usize::from(route == "batch")
}

impl Metrics {
    pub fn request(&self, route: &'static str, status: u16, seconds: f64) {
        {
            let mut r = self.requests.lock().unwrap_or_else(|e| e.into_inner());
            match r.iter_mut().find(|(k, _)| *k == (route, status)) {
                Some((_, n)) => *n += 1,
                None => r.push(((route, status), 1)),
            }
        }
        self.latency[route_index(route)].observe(seconds);
    }

    pub fn inference(
        &self,
        route: &'static str,
        seconds: f64,
        input_tokens: u64,
        truncated: u64,
        decisions: u64,
    ) {
        self.inference[route_index(route)].observe(seconds);
        self.input_tokens.fetch_add(input_tokens, Ordering::Relaxed);
        self.truncated_states
            .fetch_add(truncated, Ordering::Relaxed);
        self.decisions.fetch_add(decisions, Ordering::Relaxed);
    }

    /// Admitted requests (uploading, queued or running); decremented by the guard's drop.
    pub fn admitted(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    /// The exposition text; `cancelled` is the worker's count of queued decisions it dropped.
    pub fn render(&self, cancelled: u64, workers: &[crate::dispatch::WorkerView]) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP sys1_requests_total Decision requests by route and the status answered (499: the client closed the connection first).\n",
        );
        out.push_str("# TYPE sys1_requests_total counter\n");
        let mut reqs = self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        reqs.sort();
        for ((route, status), n) in reqs {
            let _ = writeln!(
                out,
                "sys1_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str(
            "# HELP sys1_request_duration_seconds Time from the handler's start (before auth and admission) to the response, by route.\n",
        );
        out.push_str("# TYPE sys1_request_duration_seconds histogram\n");
        for (i, route) in ["single", "batch"].iter().enumerate() {
            self.latency[i].render(
                &mut out,
                "sys1_request_duration_seconds",
                &format!("route=\"{route}\""),
            );
        }
        out.push_str("# HELP sys1_inference_duration_seconds Inference time (X-Inference-Time-Ms), by route.\n");
        out.push_str("# TYPE sys1_inference_duration_seconds histogram\n");
        for (i, route) in ["single", "batch"].iter().enumerate() {
            self.inference[i].render(
                &mut out,
                "sys1_inference_duration_seconds",
                &format!("route=\"{route}\""),
            );
        }
        let gauge = |out: &mut String, name: &str, help: &str, kind: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        };
        gauge(
            &mut out,
            "sys1_queue_depth",
            "Admitted decision requests (uploading, queued or running).",
            "gauge",
            self.in_flight.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            "sys1_input_tokens_total",
            "Tokens run through the model.",
            "counter",
            self.input_tokens.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            "sys1_truncated_states_total",
            "States whose tokens did not all fit a row.",
            "counter",
            self.truncated_states.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            "sys1_cancelled_total",
            "Queued decisions dropped unrun: their client disconnected or timed out first.",
            "counter",
            cancelled,
        );
        gauge(
            &mut out,
            "sys1_decisions_total",
            "Answers produced (one per state and question).",
            "counter",
            self.decisions.load(Ordering::Relaxed),
        );
        // One series per engine worker (one per GPU of --gpus).
        let per_worker =
            |out: &mut String,
             name: &str,
             help: &str,
             kind: &str,
             v: &dyn Fn(&crate::dispatch::WorkerView) -> u64| {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
                for w in workers {
                    let _ = writeln!(
                        out,
                        "{name}{{worker=\"{}\",gpu=\"{}\"}} {}",
                        w.index,
                        w.ordinal,
                        v(w)
                    );
                }
            };
        per_worker(
            &mut out,
            "sys1_worker_in_flight",
            "Decisions sent to an engine worker and not answered yet.",
            "gauge",
            &|w| w.in_flight as u64,
        );
        per_worker(
            &mut out,
            "sys1_worker_answered_total",
            "Decisions an engine worker answered.",
            "counter",
            &|w| w.answered,
        );
        per_worker(
            &mut out,
            "sys1_worker_up",
            "1 while an engine worker runs, 0 once it has stopped.",
            "gauge",
            &|w| u64::from(w.alive),
        );
        out
    }
}

pub struct InFlight(Arc<Metrics>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}
