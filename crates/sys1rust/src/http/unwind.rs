//! A handler's panic answered as a response instead of a closed connection.
//!
//! A panic in a handler is a bug. Left alone it unwinds the connection's task, and the client
//! sees its connection dropped with no status at all; upstream answers every uncaught
//! exception with Starlette's plain-text 500. [`layer`] gives that answer (or the Jev shape
//! in strict mode) and the request's log line records it.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use laya_core::render::Output;

use super::ApiError;

/// The middleware, for `axum::middleware::from_fn` (with the server's output contract).
pub async fn layer(output: Output, req: Request, next: Next) -> Response {
    match Caught(Some(Box::pin(next.run(req)))).await {
        Some(resp) => resp,
        None => ApiError::Panicked.respond(output),
    }
}

thread_local! {
    /// Set while a panicked handler's future is dropped.
    static DROPPING_PANICKED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the handler future being dropped on this thread is one that panicked, for guards
/// that count a request whose future ends early: a panic is a 500, not a client that left.
pub fn dropping_panicked() -> bool {
    DROPPING_PANICKED.with(std::cell::Cell::get)
}

/// A future whose panic ends it with `None`; it is dropped at once, never polled again.
struct Caught<F>(Option<Pin<Box<F>>>);

impl<F: Future> Future for Caught<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(inner) = self.0.as_mut() else {
            return Poll::Ready(None);
        };
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.as_mut().poll(cx))) {
            Ok(Poll::Ready(out)) => Poll::Ready(Some(out)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => {
                DROPPING_PANICKED.with(|d| d.set(true));
                // A drop that panics again is the handler's bug twice over: still a 500.
                let _ = std::panic::catch_unwind(AssertUnwindSafe(|| self.0 = None));
                DROPPING_PANICKED.with(|d| d.set(false));
                Poll::Ready(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use axum::Router;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    async fn ask(output: Output, path: &str) -> (u16, String, String) {
        let app = Router::new()
            .route(
                "/boom",
                get(|| async {
                    tokio::task::yield_now().await;
                    panic!("a bug in a handler");
                    #[allow(unreachable_code)]
                    "never"
                }),
            )
            .route("/fine", get(|| async { "fine" }))
            .layer(axum::middleware::from_fn(move |req, next| {
                layer(output, req, next)
            }));
        let req = axum::http::Request::get(path)
            .body(Body::empty())
            .expect("a request");
        let resp = app.oneshot(req).await.expect("a response");
        let status = resp.status().as_u16();
        let kind = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = resp.into_body().collect().await.expect("a body").to_bytes();
        (status, kind, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn a_panicking_handler_gets_starlettes_500() {
        let (status, kind, body) = ask(Output::Full, "/boom").await;
        assert_eq!(status, 500);
        assert_eq!(kind, "text/plain; charset=utf-8");
        assert_eq!(body, "Internal Server Error");
        let (status, kind, body) = ask(Output::JevStrict, "/boom").await;
        assert_eq!(status, 500);
        assert_eq!(kind, "application/json");
        assert_eq!(
            body,
            r#"{"detail":{"error_type":"api_error","message":"Internal Server Error"}}"#
        );
        assert_eq!(ask(Output::Full, "/fine").await.2, "fine");
    }
}
