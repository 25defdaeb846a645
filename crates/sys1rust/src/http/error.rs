//! The one error type of the HTTP layer: upstream's `{"detail": "..."}` with its status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// An error response exactly as upstream renders it: compact JSON, `application/json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub detail: String,
    /// `Retry-After: 1` (the admission refusal only).
    pub retry_after: bool,
    /// `Allow: <method>` (405 only).
    pub allow: Option<&'static str>,
    /// Starlette's own plain-text 500 (an exception upstream's app never catches).
    pub plain_text: bool,
}

impl ApiError {
    pub fn new(status: u16, detail: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            detail: detail.into(),
            retry_after: false,
            allow: None,
            plain_text: false,
        }
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(401, "invalid or missing bearer token")
    }

    pub fn busy() -> ApiError {
        ApiError {
            retry_after: true,
            ..ApiError::new(503, "server busy, try again later")
        }
    }

    pub fn not_found() -> ApiError {
        ApiError::new(404, "Not Found")
    }

    pub fn method_not_allowed(allow: &'static str) -> ApiError {
        ApiError {
            allow: Some(allow),
            ..ApiError::new(405, "Method Not Allowed")
        }
    }

    pub fn inference_failed() -> ApiError {
        ApiError::new(500, "inference failed")
    }
}

impl From<laya_core::request::ApiError> for ApiError {
    fn from(e: laya_core::request::ApiError) -> Self {
        let plain_text = e.is_unhandled();
        ApiError {
            plain_text,
            ..ApiError::new(e.status, e.detail)
        }
    }
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

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.plain_text {
            let mut resp = (self.status, self.detail).into_response();
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            return resp;
        }
        let mut body = String::with_capacity(self.detail.len() + 12);
        body.push_str("{\"detail\":");
        laya_core::pyjson::write_str(&mut body, &self.detail);
        body.push('}');
        let mut resp = json_response(self.status, body);
        if self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if let Some(allow) = self.allow {
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        resp
    }
}
