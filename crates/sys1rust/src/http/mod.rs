//! The HTTP surface: upstream laya-serve 0.4.15's `/v1/systemone` API on axum.
//!
//! [`app`] builds the router from plain state, so tests drive it over a real socket the same
//! way `serve` does. Every check runs in upstream's order: method and path, auth, admission,
//! body, JSON and shape, limits, then the engine worker (routing, question checks, inference).

mod body;
mod error;
mod metrics;
mod openapi;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use laya_core::confidence;
use laya_core::engine_api::{StateResult, Truncated};
use laya_core::render;
use laya_core::request::{self, Limits};
use laya_core::routing::{self, Routing, RoutingConfig};
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;

pub use error::{json_response, ApiError};
pub use metrics::Metrics;

use crate::tournament;
use crate::worker::{Decided, Decision, Failure, WorkerHandle, WorkerInfo};

/// Upstream's body cap: 2 MiB, exactly 2 097 152 bytes accepted.
pub const BODY_LIMIT: usize = 2 * 1024 * 1024;

/// Everything the handlers read, fixed at start.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Bearer token; `None` leaves the API open (and serves `/openapi.json` and `/metrics`).
    pub api_key: Option<String>,
    pub body_timeout: Duration,
    pub limits: Limits,
    /// Strict Jev output: only the contracted keys (upstream's `LAYA_JEV_STRICT`).
    pub jev_strict: bool,
    pub routing: RoutingConfig,
    /// Commit of the served checkpoint, when known (`/health` `revisions`).
    pub revision: Option<String>,
    /// `LAYA_TOURNAMENT_GROUP` (0 = off): choices over this many options are narrowed by
    /// elimination (and `limits` admits up to 255 options).
    pub tournament_group: usize,
}

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    pub cfg: Arc<HttpConfig>,
    pub worker: WorkerHandle,
    pub admission: Arc<Semaphore>,
    pub metrics: Arc<Metrics>,
    pub info: Arc<WorkerInfo>,
}

impl AppState {
    pub fn new(
        cfg: HttpConfig,
        worker: WorkerHandle,
        max_concurrent: usize,
        info: WorkerInfo,
    ) -> AppState {
        AppState {
            cfg: Arc::new(cfg),
            worker,
            admission: Arc::new(Semaphore::new(
                max_concurrent.clamp(1, Semaphore::MAX_PERMITS),
            )),
            metrics: Arc::new(Metrics::default()),
            info: Arc::new(info),
        }
    }
}

fn only(method: &'static str, route: MethodRouter<AppState>) -> MethodRouter<AppState> {
    route.fallback(move || async move { ApiError::method_not_allowed(method) })
}

/// The application: routes, upstream's 404/405/307 behaviour, and the handlers.
pub fn app(state: AppState) -> Router {
    let open = state.cfg.api_key.is_none();
    let mut router = Router::new()
        .route("/v1/systemone", only("POST", post(decide)))
        .route("/v1/systemone/batch", only("POST", post(batch)))
        // axum answers HEAD for GET routes; upstream (Starlette) does not, so HEAD is a 405.
        // Its headers are the JSON 405's (content type and length, as uvicorn sends them);
        // the body is dropped because the request is a HEAD.
        .route(
            "/health",
            only(
                "GET",
                get(health).head(|| async { ApiError::method_not_allowed("GET") }),
            ),
        )
        .route("/metrics", only("GET", get(metrics)));
    if open {
        router = router.route("/openapi.json", only("GET", get(openapi::document)));
    }
    router.fallback(not_found).with_state(state)
}

/// Unknown paths are 404, except that a trailing slash on a known route redirects (307) to
/// the route, as Starlette's `redirect_slashes` does, before any auth.
async fn not_found(State(state): State<AppState>, headers: HeaderMap, uri: Uri) -> Response {
    let path = uri.path();
    if let Some(trimmed) = path.strip_suffix('/') {
        let known = matches!(
            trimmed,
            "/v1/systemone" | "/v1/systemone/batch" | "/health" | "/metrics"
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
    ApiError::not_found().into_response()
}

/// Upstream's bearer rule: the first `Authorization` header, whitespace-trimmed by the HTTP
/// parser, must equal `Bearer <key>` byte for byte (constant-time).
fn authorized(cfg: &HttpConfig, headers: &HeaderMap) -> bool {
    let Some(key) = &cfg.api_key else { return true };
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return false;
    };
    let given = value.as_bytes().trim_ascii();
    let expected = format!("Bearer {key}");
    given.len() == expected.len() && bool::from(given.ct_eq(expected.as_bytes()))
}

fn timing_headers(resp: &mut Response, ms: f64) {
    let ms = format!("{ms:.2}");
    if let Ok(v) = HeaderValue::from_str(&format!("inference;dur={ms}")) {
        resp.headers_mut().insert("server-timing", v);
    }
    if let Ok(v) = HeaderValue::from_str(&ms) {
        resp.headers_mut().insert("x-inference-time-ms", v);
    }
}

/// Renders one state's result as upstream does, `x_jev_confidence` added after inference.
/// A choice narrowed by a tournament gets `x_tournament` after its gate keys and before
/// `x_jev_confidence` (upstream adds it to the answer dict between the two).
fn write_result(
    out: &mut String,
    r: &mut StateResult,
    routing: &Routing,
    tournament: &[(String, tournament::Report)],
    strict: bool,
) -> Result<(), render::NonFinite> {
    if strict {
        return render::write_result_strict(out, r);
    }
    confidence::add_jev_confidence(std::slice::from_mut(r));
    if tournament.is_empty() {
        render::write_result_open(out, r)?;
    } else {
        out.push_str("{\"model\":\"laya-rl-agent\",\"answers\":{");
        for (i, (qid, answer)) in r.answers.iter_mut().enumerate() {
            if i > 0 {
                out.push(',');
            }
            laya_core::pyjson::write_str(out, qid);
            out.push(':');
            let Some((_, report)) = tournament.iter().find(|(id, _)| id == qid) else {
                render::write_answer(out, answer)?;
                continue;
            };
            let jev = answer.x_jev_confidence.take();
            let mut text = String::new();
            render::write_answer(&mut text, answer)?;
            answer.x_jev_confidence = jev;
            // `write_answer` closes the object last; reopen it for the two trailing keys.
            text.pop();
            out.push_str(&text);
            out.push_str(",\"x_tournament\":");
            report.write_json(out);
            if let Some(x) = jev {
                out.push_str(",\"x_jev_confidence\":");
                laya_core::pyjson::write_json_float(out, x, false)
                    .map_err(|_| render::NonFinite)?;
            }
            out.push('}');
        }
        out.push_str("},\"usage\":");
        render::write_usage(out, &r.usage);
    }
    out.push_str(",\"routing\":");
    routing.write_json(out);
    out.push('}');
    Ok(())
}

fn failure(f: Failure) -> ApiError {
    match f {
        Failure::Invalid(text) => ApiError::new(422, text),
        Failure::Internal(cause) => {
            tracing::error!(%cause, "inference failed");
            ApiError::inference_failed()
        }
    }
}

/// An admission slot, counted in the `sys1_queue_depth` gauge for as long as it is held.
struct Admitted<'a> {
    _permit: tokio::sync::OwnedSemaphorePermit,
    _gauge: metrics::InFlight<'a>,
}

/// Auth, then a non-blocking admission slot, then the body: the part both decision routes share.
/// The gauge counts the slot from admission on, so uploads still in progress are included
/// (what a saturated server is waiting on).
async fn admit_and_read<'a>(
    state: &'a AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Admitted<'a>, Vec<u8>), ApiError> {
    if !authorized(&state.cfg, headers) {
        return Err(ApiError::unauthorized());
    }
    let permit = state
        .admission
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::busy())?;
    let admitted = Admitted {
        _permit: permit,
        _gauge: state.metrics.admitted(),
    };
    let bytes = body::read(headers, body, BODY_LIMIT, state.cfg.body_timeout).await?;
    Ok((admitted, bytes))
}

/// Upstream's step 11, run by the validator in its place in the order: resolves the `model`
/// field and keeps the pinned checkpoint for routing.
fn model_check<'a>(
    cfg: &'a HttpConfig,
    pin: &'a mut Option<routing::Checkpoint>,
) -> impl FnOnce(&laya_core::pyjson::Value) -> Result<(), request::ApiError> + 'a {
    move |model| {
        *pin = routing::resolve_model_field(model, &cfg.routing).map_err(|detail| {
            request::ApiError {
                status: 422,
                detail,
            }
        })?;
        Ok(())
    }
}

fn record_inference(state: &AppState, route: &'static str, decided: &Decided) {
    let tokens: usize = decided
        .results
        .iter()
        .map(|(r, _)| r.usage.input_tokens)
        .sum();
    let truncated = decided
        .results
        .iter()
        .filter(|(r, _)| {
            r.usage
                .state
                .as_ref()
                .is_some_and(|s| matches!(s.truncated, Truncated::Flag(true)))
        })
        .count();
    let answers: usize = decided.results.iter().map(|(r, _)| r.answers.len()).sum();
    state.metrics.inference(
        route,
        decided.inference_ms / 1e3,
        tokens as u64,
        truncated as u64,
        answers as u64,
    );
}

/// Runs a decision route's handler, turning its error into upstream's response and counting
/// the answer in the metrics.
async fn counted(
    state: &AppState,
    route: &'static str,
    handler: impl std::future::Future<Output = Result<Response, ApiError>>,
) -> Response {
    let started = Instant::now();
    let resp = handler.await.unwrap_or_else(IntoResponse::into_response);
    state.metrics.request(
        route,
        resp.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    resp
}

async fn decide(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    counted(&state, "single", decide_inner(&state, &headers, body)).await
}

async fn decide_inner(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (_admitted, bytes) = admit_and_read(state, headers, body).await?;
    let cfg = &state.cfg;
    let mut pin = None;
    let req = request::parse_decision(&bytes, &cfg.limits, model_check(cfg, &mut pin))?;
    let decision = Decision {
        states: vec![req.state],
        questions: req.questions,
        opts: req.opts,
        min_confidence: req.min_confidence,
        pin,
        task: req.task,
        lang: req.lang,
        lang_guess: req.lang_guess,
        tournament_group: cfg.tournament_group,
    };
    let mut decided = state.worker.decide(decision).await.map_err(failure)?;
    record_inference(state, "single", &decided);
    let mut out = String::with_capacity(1024);
    let (result, routing) = decided
        .results
        .first_mut()
        .ok_or_else(ApiError::inference_failed)?;
    let tournament = decided
        .tournaments
        .first()
        .map(Vec::as_slice)
        .unwrap_or_default();
    write_result(&mut out, result, routing, tournament, cfg.jev_strict)
        .map_err(|e| ApiError::new(422, e.to_string()))?;
    let mut resp = json_response(StatusCode::OK, out);
    timing_headers(&mut resp, decided.inference_ms);
    Ok(resp)
}

async fn batch(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    counted(&state, "batch", batch_inner(&state, &headers, body)).await
}

async fn batch_inner(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (_admitted, bytes) = admit_and_read(state, headers, body).await?;
    let cfg = &state.cfg;
    let mut pin = None;
    let req = request::parse_batch(&bytes, &cfg.limits, model_check(cfg, &mut pin))?;
    // `opts.batch_size` already holds upstream's pass size (the client's, capped by
    // LAYA_MAX_BATCH_TOKENS chunking).
    let opts = req.opts;
    let decision = Decision {
        states: req.states,
        questions: req.questions,
        opts,
        min_confidence: req.min_confidence,
        pin,
        task: req.task,
        lang: req.lang,
        lang_guess: req.lang_guess,
        tournament_group: cfg.tournament_group,
    };
    let mut decided = state.worker.decide(decision).await.map_err(failure)?;
    record_inference(state, "batch", &decided);
    let mut out = String::with_capacity(4096);
    out.push_str("{\"results\":[");
    let (mut input_tokens, mut output_tokens) = (0, 0);
    for (i, (result, routing)) in decided.results.iter_mut().enumerate() {
        if i > 0 {
            out.push(',');
        }
        input_tokens += result.usage.input_tokens;
        output_tokens += result.usage.output_tokens;
        let tournament = decided
            .tournaments
            .get(i)
            .map(Vec::as_slice)
            .unwrap_or_default();
        write_result(&mut out, result, routing, tournament, cfg.jev_strict)
            .map_err(|e| ApiError::new(422, e.to_string()))?;
    }
    out.push_str(&format!(
        "],\"total_usage\":{{\"input_tokens\":{input_tokens},\"output_tokens\":{output_tokens}}}}}"
    ));
    let mut resp = json_response(StatusCode::OK, out);
    timing_headers(&mut resp, decided.inference_ms);
    Ok(resp)
}

/// `GET /health`: never refused and never queued. Without the bearer (when a key is set) only
/// `{"status":"ok"}`; otherwise upstream's full payload.
async fn health(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !authorized(&state.cfg, &headers) {
        return json_response(StatusCode::OK, "{\"status\":\"ok\"}".to_owned());
    }
    let resident = state.worker.resident().snapshot();
    let device = &state.info.device;
    let mut out = String::from("{\"status\":\"ok\",\"loaded\":[");
    let list = |out: &mut String, f: &dyn Fn(&mut String, &str)| {
        for (i, name) in resident.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            f(out, name);
        }
    };
    list(&mut out, &|out, name| {
        laya_core::pyjson::write_str(out, name)
    });
    // Load order (upstream's `revisions`): the three names as preloaded.
    out.push_str("],\"revisions\":{");
    let revision = match &state.cfg.revision {
        Some(r) => {
            let mut s = String::new();
            laya_core::pyjson::write_str(&mut s, r);
            s
        }
        None => "null".to_owned(),
    };
    out.push_str(&format!(
        "\"english\":{revision},\"multilingual\":{revision},\"typed-decisions\":{revision}}},\"device\":"
    ));
    laya_core::pyjson::write_str(&mut out, device);
    out.push_str(",\"device_is_preference\":false,\"checkpoint_devices\":{");
    list(&mut out, &|out, name| {
        laya_core::pyjson::write_str(out, name);
        out.push(':');
        laya_core::pyjson::write_str(out, device);
    });
    out.push_str("},\"cpu_fallbacks\":{");
    list(&mut out, &|out, name| {
        laya_core::pyjson::write_str(out, name);
        out.push_str(":{\"count\":0,\"last_reason\":null}");
    });
    out.push_str("}}");
    json_response(StatusCode::OK, out)
}

/// `GET /metrics` (Prometheus text). Behind the bearer whenever a key is set.
async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !authorized(&state.cfg, &headers) {
        return ApiError::unauthorized().into_response();
    }
    let mut resp = state.metrics.render().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}
