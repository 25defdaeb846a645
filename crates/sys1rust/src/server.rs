//! The listener: HTTP/1.1 connections with limits upstream (uvicorn) does not have, and a
//! graceful shutdown that loses no admitted request.
//!
//! * a cap on open connections: past it, new connections are closed at once;
//! * a header-read timeout (hyper's, from the start of each request head);
//! * an idle keep-alive timeout: a connection with no request in flight for that long is
//!   closed, so idle or slow clients cannot pin the process's sockets.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
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
/// A SIGINT/SIGTERM while waiting returns at once with an error instead.
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
    }
}

async fn connection(
    stream: tokio::net::TcpStream,
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
        async move {
            let resp = app.oneshot(req.map(axum::body::Body::new)).await;
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
