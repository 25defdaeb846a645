//! `GET /info` (not in upstream, whose `/health` has no version): what this server is, for
//! operators and fleet inventories — the release, the commit and MLX it was built with, the
//! bundle flavor, the engine and precision answering, and the stage. `/health` keeps
//! upstream's exact payload, so the version lives here instead.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{authorized, json_response, ApiError, AppState};

/// Behind the bearer when a key is set, like every route that says more than "ok".
pub async fn info(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !authorized(&state.cfg, &headers) {
        return ApiError::Unauthorized.into_response();
    }
    let mut out = String::from("{\"name\":\"sys1rust\",\"version\":");
    pyjson::write_str(&mut out, crate::RELEASE);
    for (key, value) in [
        ("commit", crate::COMMIT),
        ("mlx", crate::MLX_VERSION),
        ("bundle", crate::BUNDLE),
        ("stage", state.readiness.stage().word()),
    ] {
        out.push_str(",\"");
        out.push_str(key);
        out.push_str("\":");
        pyjson::write_str(&mut out, value);
    }
    out.push_str(",\"engine\":");
    match state.readiness.started() {
        Some(started) => {
            pyjson::write_str(&mut out, started.info.engine);
            out.push_str(",\"device\":");
            pyjson::write_str(&mut out, &started.info.device);
            out.push_str(",\"precision\":");
            pyjson::write_str(&mut out, started.info.precision);
        }
        None => {
            out.push_str("null,\"device\":");
            pyjson::write_str(&mut out, state.readiness.device());
            out.push_str(",\"precision\":null");
        }
    }
    out.push_str(&format!(",\"workers\":{}}}", state.worker.workers().len()));
    json_response(StatusCode::OK, out)
}
