//! The one error type of the HTTP layer and the one place that chooses an error's status:
//! upstream's `{"detail": "..."}` (or Starlette's plain-text 500) for every way a request
//! can fail, from routing to rendering.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use laya_core::decide::DecideError;
use laya_core::render::{NonFinite, Output};
use laya_core::request::{RequestError, RequestErrorKind};

use super::request_log::Facts;
use crate::worker::WorkerError;

/// Every failure a request can meet.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Bearer missing or wrong (api.md §11).
    #[error("invalid or missing bearer token")]
    Unauthorized,
    /// No admission slot free (§10).
    #[error("server busy, try again later")]
    Busy,
    #[error("Not Found")]
    NotFound,
    /// A known path with another method; the method it takes.
    #[error("Method Not Allowed")]
    MethodNotAllowed(&'static str),
    /// Over 2 MiB, by `Content-Length`, while streaming or after decompression.
    #[error("request body too large")]
    BodyTooLarge,
    /// The whole body did not arrive within the deadline.
    #[error("request body was not received in time")]
    BodyTimeout,
    /// No answer within `--request-timeout` (queue wait included).
    #[error("request was not answered in time")]
    Timeout,
    /// Validation before inference refused the body.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// Inference failed.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// The answer holds a non-finite float (a `NaN` choice label).
    #[error(transparent)]
    Render(#[from] NonFinite),
    /// A handler panicked: a bug, answered as upstream answers an uncaught exception.
    #[error("Internal Server Error")]
    Panicked,
}

impl From<DecideError> for ApiError {
    fn from(e: DecideError) -> ApiError {
        ApiError::Worker(WorkerError::Decide(e))
    }
}

/// What an error answers: status, the `detail` text, and whether it is Starlette's plain text.
struct Answer {
    status: StatusCode,
    detail: String,
    plain_text: bool,
}

impl ApiError {
    fn answer(&self) -> Answer {
        let json = |status: StatusCode, detail: String| Answer {
            status,
            detail,
            plain_text: false,
        };
        let text = self.to_string();
        match self {
            ApiError::Unauthorized => json(StatusCode::UNAUTHORIZED, text),
            ApiError::Busy => json(StatusCode::SERVICE_UNAVAILABLE, text),
            ApiError::NotFound => json(StatusCode::NOT_FOUND, text),
            ApiError::MethodNotAllowed(_) => json(StatusCode::METHOD_NOT_ALLOWED, text),
            ApiError::BodyTooLarge => json(StatusCode::PAYLOAD_TOO_LARGE, text),
            ApiError::BodyTimeout => json(StatusCode::REQUEST_TIMEOUT, text),
            ApiError::Timeout => json(StatusCode::GATEWAY_TIMEOUT, text),
            ApiError::Request(e) => match e.kind() {
                RequestErrorKind::Malformed => json(StatusCode::BAD_REQUEST, text),
                RequestErrorKind::TooLarge => json(StatusCode::PAYLOAD_TOO_LARGE, text),
                RequestErrorKind::Invalid => json(StatusCode::UNPROCESSABLE_ENTITY, text),
                RequestErrorKind::Uncaught => Answer {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    detail: text,
                    plain_text: true,
                },
            },
            // Upstream returns a ValueError's text; every other failure is a fixed 500 whose
            // cause only the log sees.
            ApiError::Worker(WorkerError::Decide(e)) if e.is_caller_error() => {
                json(StatusCode::UNPROCESSABLE_ENTITY, text)
            }
            ApiError::Worker(_) => json(
                StatusCode::INTERNAL_SERVER_ERROR,
                "inference failed".to_owned(),
            ),
            ApiError::Render(_) => json(StatusCode::UNPROCESSABLE_ENTITY, text),
            ApiError::Panicked => Answer {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                detail: text,
                plain_text: true,
            },
        }
    }
}

/// An error and its sources, `outer: inner: ...`.
fn cause_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        let text = inner.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = inner.source();
    }
    out
}

/// A JSON response with upstream's bare `application/json` content type.
pub fn json_response(status: StatusCode, body: String) -> Response {
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

impl ApiError {
    /// Strict Jev mode's answer: Jev's statuses and shapes. A refusal of the request's content
    /// is a 422 whose `detail` lists where it is (`{"loc": ["body", ...], "msg", "type"}`, the
    /// shape Jev's validation errors have); anything else keeps its status and says its kind
    /// (`{"detail": {"error_type", "message"}}`).
    fn jev_answer(&self) -> (StatusCode, String) {
        let typed = |status: StatusCode, kind: &str, message: &str| {
            let mut body = String::from("{\"detail\":{\"error_type\":");
            pyjson::write_str(&mut body, kind);
            body.push_str(",\"message\":");
            pyjson::write_str(&mut body, message);
            body.push_str("}}");
            (status, body)
        };
        let invalid = |field: laya_core::request::Field, message: &str| {
            let mut body = String::from("{\"detail\":[{\"loc\":[\"body\"");
            for part in &field.path {
                body.push(',');
                pyjson::write_str(&mut body, part);
            }
            body.push_str("],\"msg\":");
            pyjson::write_str(&mut body, message);
            body.push_str(",\"type\":");
            pyjson::write_str(&mut body, field.kind);
            body.push_str("}]}");
            (StatusCode::UNPROCESSABLE_ENTITY, body)
        };
        let text = self.to_string();
        match self {
            ApiError::Unauthorized => {
                typed(StatusCode::UNAUTHORIZED, "authentication_error", &text)
            }
            ApiError::Busy => typed(StatusCode::SERVICE_UNAVAILABLE, "overloaded_error", &text),
            ApiError::NotFound => typed(StatusCode::NOT_FOUND, "not_found_error", &text),
            ApiError::MethodNotAllowed(_) => typed(
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid_request_error",
                &text,
            ),
            ApiError::BodyTooLarge => {
                typed(StatusCode::PAYLOAD_TOO_LARGE, "request_too_large", &text)
            }
            ApiError::BodyTimeout => typed(StatusCode::REQUEST_TIMEOUT, "timeout_error", &text),
            ApiError::Timeout => typed(StatusCode::GATEWAY_TIMEOUT, "timeout_error", &text),
            ApiError::Request(e) if e.kind() == RequestErrorKind::TooLarge => {
                typed(StatusCode::PAYLOAD_TOO_LARGE, "request_too_large", &text)
            }
            ApiError::Request(e) => invalid(e.field(), &text),
            ApiError::Worker(WorkerError::Decide(e)) if e.is_caller_error() => {
                invalid(e.field(), &text)
            }
            ApiError::Worker(_) => typed(
                StatusCode::INTERNAL_SERVER_ERROR,
                "api_error",
                "inference failed",
            ),
            ApiError::Panicked => typed(StatusCode::INTERNAL_SERVER_ERROR, "api_error", &text),
            ApiError::Render(_) => invalid(
                laya_core::request::Field {
                    path: vec!["questions".to_owned()],
                    kind: "value_error",
                },
                &text,
            ),
        }
    }

    /// The response in the contract the server speaks: upstream's, or Jev's in strict mode.
    pub fn respond(self, output: Output) -> Response {
        match output {
            Output::Full => self.into_response(),
            Output::JevStrict => {
                let (status, body) = self.jev_answer();
                self.finish(json_response(status, body))
            }
        }
    }

    /// The headers an error's response carries whatever its body, and its cause for the log.
    fn finish(self, mut resp: Response) -> Response {
        // The request's log line names the cause: the full chain, which a 500's fixed detail
        // hides from the client.
        resp.extensions_mut().insert(Facts {
            error: Some(cause_chain(&self)),
            ..Facts::default()
        });
        match self {
            ApiError::Busy => {
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ApiError::MethodNotAllowed(allow) => {
                resp.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            _ => {}
        }
        resp
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let answer = self.answer();
        if answer.plain_text {
            let mut resp = (answer.status, answer.detail).into_response();
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            resp.extensions_mut().insert(Facts {
                error: Some(cause_chain(&self)),
                ..Facts::default()
            });
            return resp;
        }
        let mut body = String::with_capacity(answer.detail.len() + 12);
        body.push_str("{\"detail\":");
        pyjson::write_str(&mut body, &answer.detail);
        body.push('}');
        self.finish(json_response(answer.status, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use laya_core::agent::PredictError;
    use laya_core::decide::LoadError;
    use laya_core::engine::EngineError;
    use laya_core::question::QuestionError;

    /// Status, headers (sorted) and body of a response.
    type Parts = (u16, Vec<(String, String)>, String);

    fn parts(e: ApiError) -> Parts {
        let resp = e.into_response();
        let status = resp.status().as_u16();
        let mut headers: Vec<(String, String)> = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    v.to_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        headers.sort();
        let body = futures_body(resp.into_body());
        (status, headers, body)
    }

    fn futures_body(body: axum::body::Body) -> String {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let bytes = rt
            .block_on(body.collect())
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn json(status: u16, detail: &str) -> Parts {
        (
            status,
            vec![("content-type".into(), "application/json".into())],
            format!("{{\"detail\":{}}}", {
                let mut s = String::new();
                pyjson::write_str(&mut s, detail);
                s
            }),
        )
    }

    fn with(mut t: Parts, k: &str, v: &str) -> Parts {
        t.1.push((k.into(), v.into()));
        t.1.sort();
        t
    }

    /// Every variant, and every class of a variant, against the status and body of spec
    /// api.md §3.1, §5.1, §10 and §11.
    #[test]
    fn every_error_has_upstreams_status_and_body() {
        let backend = || EngineError::backend("test", std::io::Error::other("device lost"));
        let cases: Vec<(ApiError, Parts)> = vec![
            (
                ApiError::Unauthorized,
                json(401, "invalid or missing bearer token"),
            ),
            (
                ApiError::Busy,
                with(
                    json(503, "server busy, try again later"),
                    "retry-after",
                    "1",
                ),
            ),
            (ApiError::NotFound, json(404, "Not Found")),
            (
                ApiError::MethodNotAllowed("POST"),
                with(json(405, "Method Not Allowed"), "allow", "POST"),
            ),
            (ApiError::BodyTooLarge, json(413, "request body too large")),
            (
                ApiError::BodyTimeout,
                json(408, "request body was not received in time"),
            ),
            (
                ApiError::Timeout,
                json(504, "request was not answered in time"),
            ),
            (
                RequestError::InvalidJson.into(),
                json(400, "request body must be valid JSON"),
            ),
            (
                RequestError::TooManyQuestions { count: 65, cap: 64 }.into(),
                json(413, "too many questions (65 > 64)"),
            ),
            (
                RequestError::Lang { key: "lang" }.into(),
                json(
                    422,
                    "lang must be a language code string such as \"de\", or null",
                ),
            ),
            (
                RequestError::ConfidenceOverflow.into(),
                (
                    500,
                    vec![("content-type".into(), "text/plain; charset=utf-8".into())],
                    "Internal Server Error".into(),
                ),
            ),
            (
                DecideError::Question(QuestionError("question 'q': bad".into())).into(),
                json(422, "question 'q': bad"),
            ),
            (
                DecideError::UnknownTask("unknown model 5; choose".into()).into(),
                json(422, "unknown model 5; choose"),
            ),
            (
                DecideError::Predict(PredictError::Engine(backend())).into(),
                json(500, "inference failed"),
            ),
            (
                DecideError::Load(LoadError {
                    name: laya_core::routing::Checkpoint::english(),
                    reason: "corrupt".into(),
                })
                .into(),
                json(500, "inference failed"),
            ),
            (WorkerError::Panicked.into(), json(500, "inference failed")),
            (WorkerError::Stopped.into(), json(500, "inference failed")),
            (
                NonFinite.into(),
                json(422, "Out of range float values are not JSON compliant"),
            ),
        ];
        for (error, want) in cases {
            let name = format!("{error:?}");
            assert_eq!(parts(error), want, "{name}");
        }
    }

    /// Strict Jev mode: every variant against Jev's shapes (the contract jevcompat checks,
    /// `tests/jev.rs`): content refusals as a 422 list naming the field, the rest as
    /// `{"error_type","message"}` under upstream's status.
    #[test]
    fn every_error_in_jev_strict_mode() {
        let typed = |status: u16, kind: &str, message: &str| {
            (
                status,
                format!(r#"{{"detail":{{"error_type":"{kind}","message":"{message}"}}}}"#),
            )
        };
        let listed = |loc: &str, msg: &str, kind: &str| {
            (
                422,
                format!(r#"{{"detail":[{{"loc":["body"{loc}],"msg":"{msg}","type":"{kind}"}}]}}"#),
            )
        };
        let backend = || EngineError::backend("test", std::io::Error::other("device lost"));
        let cases: Vec<(ApiError, (u16, String))> = vec![
            (
                ApiError::Unauthorized,
                typed(
                    401,
                    "authentication_error",
                    "invalid or missing bearer token",
                ),
            ),
            (
                ApiError::Busy,
                typed(503, "overloaded_error", "server busy, try again later"),
            ),
            (
                ApiError::NotFound,
                typed(404, "not_found_error", "Not Found"),
            ),
            (
                ApiError::MethodNotAllowed("POST"),
                typed(405, "invalid_request_error", "Method Not Allowed"),
            ),
            (
                ApiError::BodyTooLarge,
                typed(413, "request_too_large", "request body too large"),
            ),
            (
                ApiError::BodyTimeout,
                typed(
                    408,
                    "timeout_error",
                    "request body was not received in time",
                ),
            ),
            (
                ApiError::Timeout,
                typed(504, "timeout_error", "request was not answered in time"),
            ),
            (
                RequestError::TooManyQuestions { count: 65, cap: 64 }.into(),
                typed(413, "request_too_large", "too many questions (65 > 64)"),
            ),
            (
                RequestError::InvalidJson.into(),
                listed("", "request body must be valid JSON", "json_invalid"),
            ),
            (
                RequestError::StateRequired.into(),
                listed(
                    r#","state""#,
                    &RequestError::StateRequired.to_string(),
                    "missing",
                ),
            ),
            (
                DecideError::UnknownTask("unknown task x".into()).into(),
                listed(r#","task""#, "unknown task x", "value_error"),
            ),
            (
                DecideError::Question(QuestionError("question 'q': bad".into())).into(),
                listed(r#","questions""#, "question 'q': bad", "value_error"),
            ),
            (
                DecideError::Predict(PredictError::Engine(backend())).into(),
                typed(500, "api_error", "inference failed"),
            ),
            (
                WorkerError::Stopped.into(),
                typed(500, "api_error", "inference failed"),
            ),
            (
                NonFinite.into(),
                listed(
                    r#","questions""#,
                    "Out of range float values are not JSON compliant",
                    "value_error",
                ),
            ),
        ];
        for (error, (status, body)) in cases {
            let name = format!("{error:?}");
            let resp = error.respond(Output::JevStrict);
            assert_eq!(resp.status().as_u16(), status, "{name}");
            assert_eq!(
                resp.headers()
                    .get(header::CONTENT_TYPE)
                    .map(|v| v.as_bytes()),
                Some(&b"application/json"[..]),
                "{name}"
            );
            assert_eq!(futures_body(resp.into_body()), body, "{name}");
        }
    }
}
