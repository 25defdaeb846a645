//! Request ids and the one log line per request.
//!
//! [`layer`] wraps every route: it takes the client's `X-Request-Id` when it is sane, else
//! makes one, runs the request inside a span carrying it (so the worker's and the error's log
//! lines name it too), echoes it on the response, and logs one line when the response is
//! ready, or when the client leaves first (status 499). Handlers report what they learned (inference time, tokens, the routed checkpoint, an
//! error's cause) as a [`Facts`] response extension; bodies and bearer tokens are never logged.

use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

/// The header, in the spelling most proxies and tracers use.
pub const HEADER: &str = "x-request-id";

/// Longest client-chosen id kept; a longer one is replaced, not cut.
pub const MAX_LEN: usize = 128;

/// What a handler learned about its request, for the log line.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub inference_ms: Option<f64>,
    pub input_tokens: Option<usize>,
    /// States answered (1 on the single route).
    pub states: Option<usize>,
    /// The routed checkpoints, in order of first appearance.
    pub checkpoints: Vec<String>,
    /// Why the request failed, when it did (an error's cause, not the body).
    pub error: Option<String>,
}

/// An id a client may choose: 1 to [`MAX_LEN`] bytes of letters, digits and `-_.:/+=@`, so it
/// can be logged and echoed without escaping.
fn sane(value: &HeaderValue) -> Option<&str> {
    let s = value.to_str().ok()?;
    let ok = !s.is_empty()
        && s.len() <= MAX_LEN
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/+=@".contains(&b));
    ok.then_some(s)
}

/// 32 hex digits, unique in the process (a counter) and across processes (random keys).
fn generate() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut out = String::with_capacity(32);
    for salt in [0u64, 1] {
        // RandomState draws fresh random keys for each instance.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(n);
        h.write_u64(salt);
        let _ = write!(out, "{:016x}", h.finish());
    }
    out
}

/// The status a request's log line and metrics give when its client closed the connection
/// before the answer was ready (nginx's convention; no response was sent).
pub const CLIENT_CLOSED: u16 = 499;

/// The longest `error` a log line carries: errors quote client values (question ids, labels)
/// in full for the response, and a body may be 2 MiB.
const MAX_ERROR_CHARS: usize = 1024;

/// What a request's log line says besides its facts.
struct Line {
    span: tracing::Span,
    method: axum::http::Method,
    route: String,
    started: Instant,
}

impl Line {
    fn write(&self, status: u16, facts: &Facts) {
        let total_ms = round2(self.started.elapsed().as_secs_f64() * 1e3);
        let checkpoint = (!facts.checkpoints.is_empty()).then(|| facts.checkpoints.join(","));
        let error = facts.error.as_deref().map(clipped);
        let (method, route) = (&self.method, &self.route);
        self.span.in_scope(|| {
            macro_rules! line {
                ($level:ident) => {
                    tracing::$level!(
                        method = %method,
                        route = %route,
                        status,
                        total_ms,
                        inference_ms = facts.inference_ms.map(round2),
                        input_tokens = facts.input_tokens,
                        states = facts.states,
                        checkpoint = checkpoint.as_deref(),
                        error = error.as_deref(),
                        "request"
                    )
                };
            }
            if status >= 500 && status != 503 && status != 504 {
                line!(error)
            } else {
                line!(info)
            }
        });
    }
}

/// `error` cut to [`MAX_ERROR_CHARS`] characters, saying how much was left out.
fn clipped(error: &str) -> std::borrow::Cow<'_, str> {
    match error.char_indices().nth(MAX_ERROR_CHARS) {
        None => error.into(),
        Some((at, _)) => format!("{}… ({} more bytes)", &error[..at], error.len() - at).into(),
    }
}

/// Writes the line of a request whose future was dropped before its response: its client
/// left (the connection closed), so no status was sent.
struct Pending(Option<Line>);

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(line) = self.0.take() {
            let facts = Facts {
                error: Some("the client closed the connection before the answer".to_owned()),
                ..Facts::default()
            };
            line.write(CLIENT_CLOSED, &facts);
        }
    }
}

/// The middleware (`axum::middleware::from_fn`).
pub async fn layer(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = req
        .headers()
        .get(HEADER)
        .and_then(sane)
        .map(str::to_owned)
        .unwrap_or_else(generate);
    let method = req.method().clone();
    // The route's pattern, never a client's arbitrary path.
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let span = tracing::info_span!("request", id = %id);
    let mut pending = Pending(Some(Line {
        span: span.clone(),
        method,
        route,
        started,
    }));
    let mut resp = next.run(req).instrument(span).await;
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(HEADER, v);
    }
    let facts = resp.extensions_mut().remove::<Facts>().unwrap_or_default();
    if let Some(line) = pending.0.take() {
        line.write(resp.status().as_u16(), &facts);
    }
    resp
}

fn round2(ms: f64) -> f64 {
    (ms * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sane_ids_pass_and_others_are_replaced() {
        let ok = HeaderValue::from_static("req-1_a.b:c/d+e=f@g");
        assert_eq!(sane(&ok), Some("req-1_a.b:c/d+e=f@g"));
        for bad in ["", "a b", "a\"b", "ä"] {
            if let Ok(v) = HeaderValue::from_str(bad) {
                assert_eq!(sane(&v), None, "{bad:?}");
            }
        }
        let long = "x".repeat(MAX_LEN + 1);
        assert_eq!(sane(&HeaderValue::from_str(&long).unwrap()), None);
        let longest = "x".repeat(MAX_LEN);
        assert!(sane(&HeaderValue::from_str(&longest).unwrap()).is_some());
    }

    #[test]
    fn generated_ids_are_hex_and_distinct() {
        let a = generate();
        let b = generate();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn long_errors_are_cut_for_the_log() {
        assert_eq!(clipped("short"), "short");
        let at_limit = "é".repeat(MAX_ERROR_CHARS);
        assert_eq!(clipped(&at_limit), at_limit);
        let long = format!("{}{}", "é".repeat(MAX_ERROR_CHARS), "z".repeat(1_500_000));
        let cut = clipped(&long);
        assert!(cut.starts_with(&at_limit), "the first characters are kept");
        assert!(
            cut.ends_with("… (1500000 more bytes)"),
            "{}",
            &cut[cut.len() - 40..]
        );
        assert!(cut.len() < 3 * MAX_ERROR_CHARS);
    }
}
