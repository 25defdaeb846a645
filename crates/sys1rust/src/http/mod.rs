//! The HTTP surface: upstream laya-serve 0.4.15's `/v1/systemone` API on axum.
//!
//! [`app`] builds the router from plain state ([`AppState`]), so tests drive it in process
//! (`tower::ServiceExt::oneshot`) and [`crate::server`] serves it on a socket. Every check
//! runs in upstream's order: method and path, auth, admission, body, then
//! [`laya_core::request`] (JSON, shape, limits, controls), the engine worker
//! ([`laya_core::decide`]: routing, question checks, inference) and [`laya_core::render`].
//! Errors of every step are [`ApiError`]s, whose one `IntoResponse` picks the status.

pub mod body;
mod error;
mod info;
mod jev;
mod metrics;
mod openapi;
pub mod ready;
pub mod request_log;
mod unwind;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use laya_core::checkpoints::Resident;
use laya_core::decide::Decision;
use laya_core::render::{self, Output};
use laya_core::request::{self, Limits};
use laya_core::routing::RoutingConfig;
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;

pub use error::{json_response, ApiError};
pub use metrics::Metrics;
pub use ready::{Readiness, Stage};

use crate::dispatch::Pool;
use crate::worker::Answer;
use request_log::Facts;

/// Upstream's body cap: 2 MiB, exactly 2 097 152 bytes accepted.
pub const BODY_LIMIT: usize = 2 * 1024 * 1024;

/// Everything the handlers read, fixed at start.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Bearer token; `None` leaves the API open (and serves `/openapi.json` and `/metrics`).
    pub api_key: Option<String>,
    pub body_timeout: Duration,
    pub limits: Limits,
    /// Full answers, or strict Jev output (upstream's `LAYA_JEV_STRICT`).
    pub output: Output,
    /// The checkpoint registry `model` fields are resolved against.
    pub routing: RoutingConfig,
    /// `LAYA_IDLE_UNLOAD_SECONDS` when idle unload is on (`/health` reports it).
    pub idle_unload_seconds: Option<f64>,
    /// `--request-timeout`: admission to answer, queue wait included (504 after).
    pub request_timeout: Option<Duration>,
}

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    pub cfg: Arc<HttpConfig>,
    /// The engine workers (one per GPU).
    pub worker: Pool,
    pub admission: Arc<Semaphore>,
    pub metrics: Arc<Metrics>,
    pub readiness: Arc<Readiness>,
}

impl AppState {
    /// The state of a server still loading; `loading_device` is what `/health` names until
    /// [`Readiness::loaded`].
    pub fn new(
        cfg: HttpConfig,
        worker: Pool,
        max_concurrent: usize,
        loading_device: String,
    ) -> AppState {
        AppState {
            cfg: Arc::new(cfg),
            worker,
            admission: Arc::new(Semaphore::new(
                max_concurrent.clamp(1, Semaphore::MAX_PERMITS),
            )),
            metrics: Arc::new(Metrics::default()),
            readiness: Arc::new(Readiness::new(loading_device)),
        }
    }
}

fn only(method: &'static str, route: MethodRouter<AppState>) -> MethodRouter<AppState> {
    route.fallback(move || async move { ApiError::MethodNotAllowed(method) })
}

/// The application: routes, upstream's 404/405/307 behaviour, and the handlers.
pub fn app(state: AppState) -> Router {
    let open = state.cfg.api_key.is_none();
    let mut router = Router::new()
        .route("/v1/systemone", only("POST", post(single)))
        .route("/v1/systemone/batch", only("POST", post(batch)))
        // axum answers HEAD for GET routes; upstream (Starlette) does not, so HEAD is a 405.
        // Its headers are the JSON 405's (content type and length, as uvicorn sends them);
        // the body is dropped because the request is a HEAD.
        .route(
            "/health",
            only(
                "GET",
                get(health).head(|| async { ApiError::MethodNotAllowed("GET") }),
            ),
        )
        .route("/metrics", only("GET", get(metrics)))
        .route("/ready", only("GET", get(ready::ready)))
        .route("/info", only("GET", get(info::info)))
        .route("/drain", only("POST", post(ready::drain)));
    if open {
        router = router.route("/openapi.json", only("GET", get(openapi::document)));
    }
    let output = state.cfg.output;
    let strict = output == Output::JevStrict;
    if strict {
        router = router.route("/v1/models", only("GET", get(jev::models)));
    }
    let router = router
        .fallback(not_found)
        .with_state(state)
        .layer(axum::middleware::from_fn(move |req, next| {
            unwind::layer(output, req, next)
        }))
        .layer(axum::middleware::from_fn(request_log::layer));
    if strict {
        router.layer(axum::middleware::from_fn(jev::request_id))
    } else {
        router
    }
}

/// Unknown paths are 404, except that a trailing slash on a known route redirects (307) to
/// the route, as Starlette's `redirect_slashes` does, before any auth.
async fn not_found(State(state): State<AppState>, headers: HeaderMap, uri: Uri) -> Response {
    let path = uri.path();
    if let Some(trimmed) = path.strip_suffix('/') {
        let known = matches!(
            trimmed,
            "/v1/systemone"
                | "/v1/systemone/batch"
                | "/health"
                | "/metrics"
                | "/ready"
                | "/info"
                | "/drain"
        ) || (trimmed == "/openapi.json" && state.cfg.api_key.is_none());
        if known {
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("localhost");
            let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
            let location = format!("http://{host}{trimmed}{query}");
            let mut resp = StatusCode::TEMPORARY_REDIRECT.into_response();
            if let Ok(v) = HeaderValue::from_str(&location) {
                resp.headers_mut().insert(header::LOCATION, v);
            }
            return resp;
        }
    }
    ApiError::NotFound.into_response()
}

/// Upstream's bearer rule: the first `Authorization` header, whitespace-trimmed by the HTTP
/// parser, must equal `Bearer <key>` byte for byte (constant-time).
pub(crate) fn authorized(cfg: &HttpConfig, headers: &HeaderMap) -> bool {
    let Some(key) = &cfg.api_key else { return true };
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return false;
    };
    let given = value.as_bytes().trim_ascii();
    let expected = format!("Bearer {key}");
    given.len() == expected.len() && bool::from(given.ct_eq(expected.as_bytes()))
}

/// A decision's 200: the body, and `Server-Timing` / `X-Inference-Time-Ms` (`%.2f` ms).
fn answered(body: String, inference_ms: f64) -> Response {
    let mut resp = json_response(StatusCode::OK, body);
    let ms = format!("{inference_ms:.2}");
    if let Ok(v) = HeaderValue::from_str(&format!("inference;dur={ms}")) {
        resp.headers_mut().insert("server-timing", v);
    }
    if let Ok(v) = HeaderValue::from_str(&ms) {
        resp.headers_mut().insert("x-inference-time-ms", v);
    }
    resp
}

/// An admission slot, counted in the `sys1_queue_depth` gauge for as long as it is held.
struct Admitted {
    _permit: tokio::sync::OwnedSemaphorePermit,
    _gauge: metrics::InFlight,
}

/// Auth, then a non-blocking admission slot, then the body: the part both decision routes
/// share. The gauge counts the slot from admission on, so uploads still in progress are
/// included (what a saturated server is waiting on).
async fn admit_and_read(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Arc<Admitted>, Vec<u8>), ApiError> {
    if !authorized(&state.cfg, headers) {
        return Err(ApiError::Unauthorized);
    }
    let permit = state
        .admission
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::Busy)?;
    let admitted = Arc::new(Admitted {
        _permit: permit,
        _gauge: state.metrics.admitted(),
    });
    // Upstream's `_mark_request()`: once admitted, before the body (idle unload, `/health`).
    state.worker.mark_request();
    let bytes = body::read(headers, body, BODY_LIMIT, state.cfg.body_timeout).await?;
    Ok((admitted, bytes))
}

/// Which decision route.
#[derive(Clone, Copy)]
enum Route {
    Single,
    Batch,
}

impl Route {
    fn label(self) -> &'static str {
        match self {
            Route::Single => "single",
            Route::Batch => "batch",
        }
    }
}

/// Both decision routes: admission and body, validation, the worker, rendering.
async fn decision(
    state: &AppState,
    route: Route,
    headers: &HeaderMap,
    body: Body,
    facts: &mut Facts,
) -> Result<Response, ApiError> {
    let admitted_at = Instant::now();
    let (admitted, bytes) = admit_and_read(state, headers, body).await?;
    let cfg = &state.cfg;
    let mut decision: Decision = match route {
        Route::Single => request::parse_decision(&bytes, &cfg.limits, &cfg.routing)?.into(),
        Route::Batch => request::parse_batch(&bytes, &cfg.limits, &cfg.routing)?.into(),
    };
    if cfg.output == Output::JevStrict {
        request::jev::apply(&mut decision.questions)?;
    }
    // The slot is held by this handler and by the queued job, until both are done.
    let answer = state.worker.decide(decision, admitted.clone());
    let Answer {
        decided,
        inference_ms,
    } = match cfg.request_timeout {
        None => answer.await?,
        // Dropping the wait drops the job's reply: a job still queued is then never run.
        Some(limit) => tokio::time::timeout(limit.saturating_sub(admitted_at.elapsed()), answer)
            .await
            .map_err(|_| ApiError::Timeout)??,
    };
    facts.inference_ms = Some(inference_ms);
    facts.input_tokens = Some(decided.input_tokens());
    facts.states = Some(decided.states.len());
    for s in &decided.states {
        let name = s.routing.model.name();
        if !facts.checkpoints.iter().any(|c| c == name) {
            facts.checkpoints.push(name.to_owned());
        }
    }
    state.metrics.inference(
        route.label(),
        inference_ms / 1e3,
        decided.input_tokens() as u64,
        decided.truncated_states() as u64,
        decided.answers() as u64,
    );
    let body = match route {
        Route::Single => render::single_body(&decided, cfg.output)?,
        Route::Batch => render::batch_body(&decided, cfg.output)?,
    };
    drop(admitted);
    Ok(answered(body, inference_ms))
}

/// A decision route's count in the metrics when its future ends before the answer: its
/// client left (under [`request_log::CLIENT_CLOSED`], as the request's log line has it), or it
/// panicked (500, as the panic layer answers).
struct Unanswered<'a> {
    state: &'a AppState,
    route: Route,
    started: Instant,
    armed: bool,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if self.armed {
            // The panic layer answers a panicked handler with a 500 (`unwind`).
            let status = if unwind::dropping_panicked() {
                500
            } else {
                request_log::CLIENT_CLOSED
            };
            self.state.metrics.request(
                self.route.label(),
                status,
                self.started.elapsed().as_secs_f64(),
            );
        }
    }
}

/// Runs a decision route, turning its error into upstream's response and counting the
/// answer in the metrics.
async fn counted(state: AppState, route: Route, headers: HeaderMap, body: Body) -> Response {
    let started = Instant::now();
    let mut unanswered = Unanswered {
        state: &state,
        route,
        started,
        armed: true,
    };
    let mut facts = Facts::default();
    let mut resp = decision(&state, route, &headers, body, &mut facts)
        .await
        .unwrap_or_else(|e| e.respond(state.cfg.output));
    // An error's response carries its cause; the decision's facts join it.
    if let Some(cause) = resp
        .extensions_mut()
        .remove::<Facts>()
        .and_then(|f| f.error)
    {
        facts.error = Some(cause);
    }
    resp.extensions_mut().insert(facts);
    unanswered.armed = false;
    state.metrics.request(
        route.label(),
        resp.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    resp
}

async fn single(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    counted(state, Route::Single, headers, body).await
}

async fn batch(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    counted(state, Route::Batch, headers, body).await
}

/// `GET /health`: never refused and never queued. Without the bearer (when a key is set) only
/// `{"status":"ok"}`; otherwise upstream's full payload (§8): the resident checkpoints least
/// recently used first, their revisions in load order, where each computes.
async fn health(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !authorized(&state.cfg, &headers) {
        return json_response(StatusCode::OK, "{\"status\":\"ok\"}".to_owned());
    }
    let resident = state.worker.resident();
    let mut out = String::from("{\"status\":\"ok\",\"loaded\":[");
    let list = |out: &mut String, f: &dyn Fn(&mut String, &Resident)| {
        for (i, r) in resident.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            f(out, r);
        }
    };
    list(&mut out, &|out, r| pyjson::write_str(out, r.name.name()));
    out.push_str("],\"revisions\":{");
    let mut by_load: Vec<&Resident> = resident.iter().collect();
    by_load.sort_by_key(|r| r.loaded);
    for (i, r) in by_load.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        pyjson::write_str(&mut out, r.name.name());
        out.push(':');
        match &r.revision {
            Some(rev) => pyjson::write_str(&mut out, rev),
            None => out.push_str("null"),
        }
    }
    out.push_str("},\"device\":");
    match resident.first() {
        Some(r) => pyjson::write_str(&mut out, &r.device),
        None => pyjson::write_str(&mut out, state.readiness.device()),
    }
    out.push_str(if resident.is_empty() {
        ",\"device_is_preference\":true,\"checkpoint_devices\":{"
    } else {
        ",\"device_is_preference\":false,\"checkpoint_devices\":{"
    });
    list(&mut out, &|out, r| {
        pyjson::write_str(out, r.name.name());
        out.push(':');
        pyjson::write_str(out, &r.device);
    });
    out.push_str("},\"cpu_fallbacks\":{");
    list(&mut out, &|out, r| {
        pyjson::write_str(out, r.name.name());
        out.push_str(":{\"count\":0,\"last_reason\":null}");
    });
    out.push('}');
    if let Some(idle) = state.cfg.idle_unload_seconds {
        out.push_str(",\"idle_unload_seconds\":");
        pyjson::write_float(&mut out, idle);
        out.push_str(",\"idle_seconds\":");
        let seconds = state.worker.idle_for().as_secs_f64();
        pyjson::write_float(
            &mut out,
            pyjson::round_ndigits(seconds, 1).unwrap_or(seconds),
        );
    }
    // `--int8` (not in upstream): said wherever the server describes itself.
    if state
        .readiness
        .started()
        .is_some_and(|s| s.info.precision.starts_with("int8"))
    {
        out.push_str(",\"int8\":true");
    }
    // Several engine workers (`--gpus`, not in upstream): each one's GPU and load.
    let workers = state.worker.workers();
    if workers.len() > 1 {
        out.push_str(",\"gpus\":[");
        for (i, w) in workers.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&format!(
                "{{\"worker\":{},\"gpu\":{},\"in_flight\":{},\"answered\":{},\"alive\":{}}}",
                w.index, w.ordinal, w.in_flight, w.answered, w.alive
            ));
        }
        out.push(']');
    }
    out.push('}');
    json_response(StatusCode::OK, out)
}

/// `GET /metrics` (Prometheus text). Behind the bearer whenever a key is set.
async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !authorized(&state.cfg, &headers) {
        return ApiError::Unauthorized.respond(state.cfg.output);
    }
    let mut resp = state
        .metrics
        .render(state.worker.cancelled(), &state.worker.workers())
        .into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}
