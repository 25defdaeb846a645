//! Readiness, for orchestrators and load balancers: `GET /ready` answers 503 while the
//! checkpoints load, 200 once they are loaded and warmed, and 503 again from `POST /drain` or
//! a shutdown signal on, so that traffic moves elsewhere while in-flight requests finish.
//! It also answers 503 (`{"status":"worker stopped"}`) once no engine worker can answer (every
//! one failed to load or its thread ended), when decisions could only fail.
//! Neither route exists upstream (whose port opens only once it is loaded); `/health` keeps
//! upstream's contract.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{authorized, json_response, ApiError, AppState};
use crate::worker::Started;

/// Where the server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Listening; the checkpoints are still loading (decisions wait for them).
    Loading,
    Ready,
    /// Drained (`POST /drain`) or shutting down: still answering, no longer taking traffic.
    Draining,
}

impl Stage {
    pub(crate) fn word(self) -> &'static str {
        match self {
            Stage::Loading => "loading",
            Stage::Ready => "ready",
            Stage::Draining => "draining",
        }
    }
}

/// The stage, and what the worker reported once loaded.
#[derive(Debug)]
pub struct Readiness {
    stage: AtomicU8,
    started: OnceLock<Started>,
    /// The device `/health` names before anything is loaded.
    loading_device: String,
}

impl Readiness {
    pub fn new(loading_device: String) -> Readiness {
        Readiness {
            stage: AtomicU8::new(Stage::Loading as u8),
            started: OnceLock::new(),
            loading_device,
        }
    }

    pub fn stage(&self) -> Stage {
        match self.stage.load(Ordering::SeqCst) {
            0 => Stage::Loading,
            1 => Stage::Ready,
            _ => Stage::Draining,
        }
    }

    /// The checkpoints are loaded and warmed: ready, unless a drain came first.
    pub fn loaded(&self, started: Started) {
        let _ = self.started.set(started);
        let _ = self.stage.compare_exchange(
            Stage::Loading as u8,
            Stage::Ready as u8,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }

    /// From now on `/ready` is 503; there is no way back but a restart.
    pub fn drain(&self) {
        self.stage.store(Stage::Draining as u8, Ordering::SeqCst);
    }

    /// What the worker reported once loaded; `None` while loading.
    pub fn started(&self) -> Option<&Started> {
        self.started.get()
    }

    /// The device of the loaded engine, else the one it will load on.
    pub fn device(&self) -> &str {
        self.started
            .get()
            .map(|s| s.info.device.as_str())
            .unwrap_or(&self.loading_device)
    }
}

/// `/ready`'s answer: the stage, unless no worker is left to answer (a drain still says
/// draining: that is what an operator asked for).
fn stage_body(stage: Stage, workers_alive: bool) -> Response {
    let (status, word) = match stage {
        Stage::Draining => (StatusCode::SERVICE_UNAVAILABLE, stage.word()),
        _ if !workers_alive => (StatusCode::SERVICE_UNAVAILABLE, "worker stopped"),
        Stage::Ready => (StatusCode::OK, stage.word()),
        Stage::Loading => (StatusCode::SERVICE_UNAVAILABLE, stage.word()),
    };
    json_response(status, format!("{{\"status\":\"{word}\"}}"))
}

/// `GET /ready`: open to probes (which carry no bearer), never queued behind inference.
pub async fn ready(State(state): State<AppState>) -> Response {
    stage_body(state.readiness.stage(), state.worker.any_alive())
}

/// `POST /drain`: behind the bearer when a key is set. Answers 200 with the new stage.
pub async fn drain(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !authorized(&state.cfg, &headers) {
        return ApiError::Unauthorized.into_response();
    }
    if state.readiness.stage() != Stage::Draining {
        tracing::info!("drain requested: /ready now answers 503");
    }
    state.readiness.drain();
    json_response(StatusCode::OK, "{\"status\":\"draining\"}".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_before_the_load_ends_stays_a_drain() {
        let r = Readiness::new("cpu".into());
        assert_eq!(r.stage(), Stage::Loading);
        assert_eq!(r.device(), "cpu");
        r.drain();
        r.loaded(Started {
            info: laya_core::engine::EngineInfo {
                engine: "test",
                device: "cuda".into(),
                precision: "f16",
            },
            load_ms: 1.0,
            warmup_ms: 0.0,
        });
        assert_eq!(r.stage(), Stage::Draining);
        assert_eq!(r.device(), "cuda");
    }
}
