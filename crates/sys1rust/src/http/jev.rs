//! What strict Jev mode serves beyond upstream's routes: `GET /v1/models`, the model ids a
//! Jev client may send, and the `x-typesafe-request-id` header Jev's SDK reads a response's
//! id from.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use super::{authorized, json_response, request_log, ApiError, AppState};

/// The day laya 0.4.15, whose System 1 checkpoints these names serve, was built.
const RELEASED: &str = "2026-10-24";

/// `(name, description)` of every id `GET /v1/models` lists: Jev's alias for the router's
/// choice first, then the checkpoints a request may pin.
const MODELS: [(&str, &str); 4] = [
    (
        "jev-latest",
        "Laya System 1 (laya 0.4.15): each request answered by the checkpoint upstream's router picks for it",
    ),
    (
        "english",
        "Laya System 1 english checkpoint (ModernBERT-large encoder)",
    ),
    (
        "multilingual",
        "Laya System 1 multilingual checkpoint (mmBERT-base encoder)",
    ),
    (
        "typed-decisions",
        "Laya System 1 typed-decisions checkpoint (ModernBERT-large encoder)",
    ),
];

/// `GET /v1/models` (Jev's `{"models": [{"name", "description", "release_date"}]}`), behind
/// the bearer when a key is set.
pub async fn models(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !authorized(&state.cfg, &headers) {
        return ApiError::Unauthorized.respond(state.cfg.output);
    }
    let mut body = String::from("{\"models\":[");
    for (i, (name, description)) in MODELS.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str("{\"name\":");
        pyjson::write_str(&mut body, name);
        body.push_str(",\"description\":");
        pyjson::write_str(&mut body, description);
        body.push_str(",\"release_date\":");
        pyjson::write_str(&mut body, RELEASED);
        body.push('}');
    }
    body.push_str("]}");
    json_response(StatusCode::OK, body)
}

/// Copies the request id into `x-typesafe-request-id`, where Jev's SDK looks for it (its
/// `request_id` accessors fail without it).
pub async fn request_id(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let id: Option<HeaderValue> = resp.headers().get(request_log::HEADER).cloned();
    if let Some(id) = id {
        resp.headers_mut().insert("x-typesafe-request-id", id);
    }
    resp
}
