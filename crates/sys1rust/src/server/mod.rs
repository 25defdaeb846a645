//! The listener: HTTP/1.1 connections with limits upstream (uvicorn) does not have, and a
//! graceful shutdown that loses no admitted request.
//!
//! * a cap on open connections: past it, new connections are closed at once;
//! * a header-read timeout (hyper's, from the start of each request head);
//! * an idle keep-alive timeout: a connection with no request in flight for that long is
//!   closed, so idle or slow clients cannot pin the process's sockets;
//! * a write deadline ([`io::WriteDeadline`]): a response the client does not read for that
//!   long closes the connection, so a client that pipelines and never reads cannot pin it;
//! * `Connection: close` on every answer given before the request body was read (an early
//!   401, 503, 413 or 408): the connection is closed after it, and the client is told;
//! * a shutdown grace period: in-flight requests get that long after the signal, while a
//!   connection only waiting for its client to read is closed within a second.

mod io;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{header, HeaderValue};
use axum::Router;
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;
use tower::ServiceExt;

/// Connection-level limits.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub keep_alive_timeout: Duration,
    /// How long a response may wait for the client to read it.
    pub write_timeout: Duration,
    /// How long a shutdown waits for in-flight requests.
    pub shutdown_grace: Duration,
}

/// A request body that records whether it was read to its end.
struct Tracked {
    inner: Incoming,
    done: Arc<AtomicBool>,
}

impl hyper::body::Body for Tracked {
    type Data = hyper::body::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.done.store(true, Ordering::SeqCst);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Requests in flight on one connection and when it last finished one.
struct ConnActivity {
    in_flight: AtomicUsize,
    last_done: std::sync::Mutex<Instant>,
}

struct InFlightGuard(Arc<ConnActivity>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        *self.0.last_done.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting, lets every
/// in-flight request finish (idle keep-alive connections are closed at once) and returns.
/// A SIGINT/SIGTERM while waiting, or the grace period running out, returns at once with an
/// error instead.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(
        limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let (stop_tx, stop_rx) = watch::channel(false);
    let draining = Arc::new(AtomicBool::new(false));
    let open = Arc::new(AtomicUsize::new(0));
    let all_closed = Arc::new(tokio::sync::Notify::new());
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%peer, max = limits.max_connections, "connection limit reached; closing new connection");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        open.fetch_add(1, Ordering::SeqCst);
        let stream = io::WriteDeadline::new(stream, limits.write_timeout, draining.clone());
        let conn_task = connection(stream, peer, app.clone(), limits, stop_rx.clone());
        let (open, all_closed) = (open.clone(), all_closed.clone());
        tokio::spawn(async move {
            conn_task.await;
            drop(permit);
            if open.fetch_sub(1, Ordering::SeqCst) == 1 {
                all_closed.notify_waiters();
            }
        });
    }
    drop(listener);
    tracing::info!(
        connections = open.load(Ordering::SeqCst),
        "shutting down: finishing in-flight requests"
    );
    draining.store(true, Ordering::SeqCst);
    let _ = stop_tx.send(true);
    let drained = async {
        loop {
            let notified = all_closed.notified();
            if open.load(Ordering::SeqCst) == 0 {
                break;
            }
            notified.await;
        }
    };
    // As uvicorn does, a second signal stops waiting: whatever is still in flight is dropped.
    tokio::select! {
        () = drained => Ok(()),
        () = shutdown_signal() => {
            let left = open.load(Ordering::SeqCst);
            tracing::warn!(connections = left, "second signal: exiting without waiting for in-flight requests");
            Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                format!("stopped by a second signal with {left} connection(s) still open"),
            ))
        }
        () = tokio::time::sleep(limits.shutdown_grace) => {
            let left = open.load(Ordering::SeqCst);
            tracing::warn!(connections = left, grace_s = limits.shutdown_grace.as_secs_f64(), "shutdown grace period ran out");
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the shutdown grace period of {:?} ran out with {left} connection(s) still open",
                    limits.shutdown_grace
                ),
            ))
        }
    }
}

async fn connection(
    stream: io::WriteDeadline<tokio::net::TcpStream>,
    peer: SocketAddr,
    app: Router,
    limits: ConnLimits,
    mut stop: watch::Receiver<bool>,
) {
    let activity = Arc::new(ConnActivity {
        in_flight: AtomicUsize::new(0),
        last_done: std::sync::Mutex::new(Instant::now()),
    });
    let svc_activity = activity.clone();
    let svc = tower::service_fn(move |req: hyper::Request<Incoming>| {
        svc_activity.in_flight.fetch_add(1, Ordering::SeqCst);
        let guard = InFlightGuard(svc_activity.clone());
        let app = app.clone();
        let (parts, inner) = req.into_parts();
        let expects_body = !inner.is_end_stream();
        let done = Arc::new(AtomicBool::new(false));
        let body = Tracked {
            inner,
            done: done.clone(),
        };
        let req = hyper::Request::from_parts(parts, axum::body::Body::new(body));
        async move {
            let mut resp = app.oneshot(req).await;
            if let Ok(resp) = &mut resp {
                if expects_body && !done.load(Ordering::SeqCst) {
                    // hyper will not read the rest of this body: the connection ends here.
                    resp.headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
            }
            drop(guard);
            resp
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc));
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        // While a request runs the connection is not idle: look again a full timeout later.
        let idle_deadline = if activity.in_flight.load(Ordering::SeqCst) > 0 {
            Instant::now() + limits.keep_alive_timeout
        } else {
            *activity.last_done.lock().unwrap_or_else(|e| e.into_inner())
                + limits.keep_alive_timeout
        };
        tokio::select! {
            res = conn.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            _ = stop.changed(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            () = tokio::time::sleep_until(idle_deadline), if !closing => {
                let idle = activity.in_flight.load(Ordering::SeqCst) == 0
                    && activity.last_done.lock().unwrap_or_else(|e| e.into_inner()).elapsed() >= limits.keep_alive_timeout;
                if idle {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("signal received");
}
