//! The listener: HTTP/1.1 connections with limits upstream (uvicorn) does not have, and a
//! graceful shutdown that loses no admitted request.
//!
//! * a cap on open connections: at it, a new connection takes the place of an idle one (no
//!   request in flight: one that never sent a whole head first, else the one idle longest
//!   between keep-alive requests, after a second idle), which is closed; only when none
//!   is idle is the new one closed at once. So idle connections, however many a client
//!   opens, cannot lock out the others;
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
use tokio::sync::watch;
use tokio::time::Instant;
use tower::ServiceExt;

/// The most of a request head a connection buffers: hyper answers a longer head 431 and
/// closes the connection. uvicorn's parser (h11) refuses a head still incomplete past 16 KiB
/// with a 400 and parses a longer one that arrives whole; 64 KiB keeps such heads and holds
/// at most 64 MiB at the default connection cap, where hyper's default (~400 KB a
/// connection) let slow heads hold ~400 MiB.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

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
    /// Requests the connection has taken.
    served: AtomicUsize,
    /// When the last request ended, or the connection opened.
    last_done: std::sync::Mutex<Instant>,
    /// Asks the connection to close if it is idle: a new one wants its place.
    evict: tokio::sync::Notify,
    /// Set once the connection was picked to close, so that it is picked only once.
    evicted: AtomicBool,
    /// Picked after it had taken a request: it may take until its write deadline to close.
    lingers: AtomicBool,
    /// Closing already (idle timeout, shutdown or a pick). One closing on its idle timeout
    /// may still be writing its last answer to a client that does not read, until its write
    /// deadline: that one may be picked, and is then dropped at once.
    closing: AtomicBool,
}

/// How long a connection that has taken requests must have been idle before a new one may
/// take its place: its client may be sending the next request right after an answer, and a
/// close then loses that request. A connection that never took one has no such grace.
const PICK_AFTER_IDLE: Duration = Duration::from_secs(1);

/// Which connections a new one takes the place of first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Pick {
    /// Never took a request (a client that opened and waits, or sends its head slowly).
    Unused,
    /// Past its idle timeout, closing once its client reads the last answer.
    TimedOut,
    /// Idle between keep-alive requests.
    Idle,
}

impl ConnActivity {
    /// Whether a new connection may take this one's place, and in what order: by [`Pick`],
    /// then those idle longest.
    fn pick_order(&self, now: Instant) -> Option<(Pick, Instant)> {
        if self.evicted.load(Ordering::SeqCst) || self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let since = *self.last_done.lock().unwrap_or_else(|e| e.into_inner());
        if self.closing.load(Ordering::SeqCst) {
            // A connection closes on its own only after its idle timeout (or at shutdown,
            // when nothing is admitted): its client has had that long to read.
            return Some((Pick::TimedOut, since));
        }
        if self.served.load(Ordering::SeqCst) == 0 {
            return Some((Pick::Unused, since));
        }
        if now.saturating_duration_since(since) < PICK_AFTER_IDLE {
            return None;
        }
        Some((Pick::Idle, since))
    }
}

/// The open connections, for the cap: at it, a new connection is let in only in place of an
/// idle one, which is picked to close.
#[derive(Default)]
struct Open {
    table: std::sync::Mutex<Table>,
}

#[derive(Default)]
struct Table {
    next_id: usize,
    conns: std::collections::HashMap<usize, Arc<ConnActivity>>,
    /// Open connections not picked to close: what the cap counts.
    live: usize,
    /// Picked connections that may take until their write deadline to close.
    lingering: usize,
}

impl Open {
    /// Registers a new connection, picking one to close when `max` are live: one that never
    /// took a request, else the one idle longest, if for at least [`PICK_AFTER_IDLE`].
    /// `None` (the new one is to be closed) when none is idle, or when as many picks as the
    /// cap are still closing (one that had taken a request may be writing to a client that
    /// stopped reading, and closes only at its write deadline), so that open connections
    /// stay near twice the cap at most, whatever clients do.
    fn admit(&self, max: usize) -> Option<(usize, Arc<ConnActivity>)> {
        let mut t = self.lock();
        if t.lingering >= max {
            return None;
        }
        if t.live >= max {
            let now = Instant::now();
            let idlest = t
                .conns
                .values()
                .filter_map(|a| a.pick_order(now).map(|order| (order, a)))
                .min_by_key(|(order, _)| *order)
                .map(|(_, a)| a.clone())?;
            idlest.evicted.store(true, Ordering::SeqCst);
            // One already closing is dropped at once; one between requests may first have
            // to finish writing its last answer.
            if idlest.served.load(Ordering::SeqCst) > 0 && !idlest.closing.load(Ordering::SeqCst) {
                idlest.lingers.store(true, Ordering::SeqCst);
                t.lingering += 1;
            }
            idlest.evict.notify_one();
            t.live -= 1;
        }
        let id = t.next_id;
        t.next_id += 1;
        let activity = Arc::new(ConnActivity {
            in_flight: AtomicUsize::new(0),
            served: AtomicUsize::new(0),
            last_done: std::sync::Mutex::new(Instant::now()),
            evict: tokio::sync::Notify::new(),
            evicted: AtomicBool::new(false),
            lingers: AtomicBool::new(false),
            closing: AtomicBool::new(false),
        });
        t.conns.insert(id, activity.clone());
        t.live += 1;
        Some((id, activity))
    }

    /// A connection picked to close took a request first: it stays, and counts again.
    fn keep(&self, activity: &ConnActivity) {
        let mut t = self.lock();
        if activity.evicted.swap(false, Ordering::SeqCst) {
            t.live += 1;
        }
        if activity.lingers.swap(false, Ordering::SeqCst) {
            t.lingering -= 1;
        }
    }

    fn remove(&self, id: usize) {
        let mut t = self.lock();
        if let Some(a) = t.conns.remove(&id) {
            if !a.evicted.load(Ordering::SeqCst) {
                t.live -= 1;
            }
            if a.lingers.load(Ordering::SeqCst) {
                t.lingering -= 1;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A connection's end, in its task: it leaves the table and the count that a shutdown waits
/// on, also when a handler's panic unwinds the task.
struct Ended {
    id: usize,
    conns: Arc<Open>,
    open: Arc<AtomicUsize>,
    all_closed: Arc<tokio::sync::Notify>,
}

impl Drop for Ended {
    fn drop(&mut self) {
        self.conns.remove(self.id);
        if self.open.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.all_closed.notify_waiters();
        }
    }
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
    let (stop_tx, stop_rx) = watch::channel(false);
    let draining = Arc::new(AtomicBool::new(false));
    let open = Arc::new(AtomicUsize::new(0));
    let all_closed = Arc::new(tokio::sync::Notify::new());
    let conns = Arc::new(Open::default());
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
        let Some((id, activity)) = conns.admit(limits.max_connections.max(1)) else {
            tracing::warn!(%peer, max = limits.max_connections, "connection limit reached with no connection idle to give way; closing new connection");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        open.fetch_add(1, Ordering::SeqCst);
        let stream = io::WriteDeadline::new(stream, limits.write_timeout, draining.clone());
        let conn_task = connection(
            stream,
            peer,
            app.clone(),
            limits,
            stop_rx.clone(),
            activity,
            conns.clone(),
        );
        let ended = Ended {
            id,
            conns: conns.clone(),
            open: open.clone(),
            all_closed: all_closed.clone(),
        };
        tokio::spawn(async move {
            conn_task.await;
            drop(ended);
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
    activity: Arc<ConnActivity>,
    conns: Arc<Open>,
) {
    let svc_activity = activity.clone();
    let svc = tower::service_fn(move |req: hyper::Request<Incoming>| {
        svc_activity.in_flight.fetch_add(1, Ordering::SeqCst);
        svc_activity.served.fetch_add(1, Ordering::SeqCst);
        let guard = InFlightGuard(svc_activity.clone());
        let app = app.clone();
        let (mut parts, inner) = req.into_parts();
        if let Some(uri) = unquoted(&parts.uri) {
            parts.uri = uri;
        }
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
        .max_buf_size(MAX_HEAD_BYTES)
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
                activity.closing.store(true, Ordering::SeqCst);
                conn.as_mut().graceful_shutdown();
            }
            () = activity.evict.notified(), if !closing => {
                // Picked while idle; a request may have come since.
                if activity.in_flight.load(Ordering::SeqCst) > 0 {
                    conns.keep(&activity);
                    continue;
                }
                tracing::debug!(%peer, "idle connection closed to make room for a new one");
                // One that never took a request has nothing of ours to send: close it now,
                // a half-sent head with it (hyper's graceful shutdown waits for that head).
                if activity.served.load(Ordering::SeqCst) == 0 {
                    return;
                }
                // Between keep-alive requests: closes at once, once the last answer is out.
                closing = true;
                activity.closing.store(true, Ordering::SeqCst);
                conn.as_mut().graceful_shutdown();
            }
            () = activity.evict.notified(), if closing => {
                // Closing on its idle timeout, yet still open: its last answer waits for a
                // client that does not read, and a new connection needs the place now.
                tracing::debug!(%peer, "connection past its idle timeout dropped to make room for a new one");
                return;
            }
            () = tokio::time::sleep_until(idle_deadline), if !closing => {
                let idle = activity.in_flight.load(Ordering::SeqCst) == 0
                    && activity.last_done.lock().unwrap_or_else(|e| e.into_inner()).elapsed() >= limits.keep_alive_timeout;
                if idle {
                    closing = true;
                    activity.closing.store(true, Ordering::SeqCst);
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// The request's URI with its path percent-decoded, as uvicorn hands the path to the app
/// (`unquote`) and Starlette routes on it: `/%68ealth` is `/health`, `/health%2F` redirects.
/// `None` when there is nothing to decode, or when the decoded path could not be a URI's
/// (a space, `?`, `%`, a non-ASCII character): no route has such a path, so it stays a
/// 404 as it would upstream.
fn unquoted(uri: &axum::http::Uri) -> Option<axum::http::Uri> {
    let path = uri.path().as_bytes();
    if !path.contains(&b'%') {
        return None;
    }
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut decoded = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        let escape = (path[i] == b'%')
            .then(|| Some((hex(*path.get(i + 1)?)?, hex(*path.get(i + 2)?)?)))
            .flatten();
        match escape {
            Some((hi, lo)) => {
                decoded.push(hi << 4 | lo);
                i += 3;
            }
            None => {
                decoded.push(path[i]);
                i += 1;
            }
        }
    }
    let routable = decoded
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b));
    if !routable {
        return None;
    }
    let mut path_and_query = String::from_utf8(decoded).ok()?;
    if let Some(q) = uri.query() {
        path_and_query.push('?');
        path_and_query.push_str(q);
    }
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path_and_query.parse().ok()?);
    axum::http::Uri::from_parts(parts).ok()
}

/// Raises the soft limit on open files to the hard one (at most 2^20), as servers do: every
/// connection takes a descriptor, and the usual soft limit (1,024, systemd's default too) sits
/// below the connection cap, where accepting would fail before the cap's turn-over of idle
/// connections starts. Returns the soft limit in force, if it can be read.
#[cfg(unix)]
pub fn raise_open_files_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write only the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        let before = limit.rlim_cur;
        let wanted = limit.rlim_max.min(1 << 20);
        // macOS refuses more than OPEN_MAX (10,240) whatever the hard limit says.
        for target in [wanted, wanted.min(10_240)] {
            if target <= before {
                break;
            }
            limit.rlim_cur = target;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                return Some(target);
            }
        }
        Some(before)
    }
}

#[cfg(not(unix))]
pub fn raise_open_files_limit() -> Option<u64> {
    None
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

#[cfg(test)]
mod tests {
    use super::*;

    fn unquote(uri: &str) -> Option<String> {
        unquoted(&uri.parse().expect("a URI")).map(|u| u.to_string())
    }

    #[test]
    fn paths_are_percent_decoded_as_uvicorn_does() {
        assert_eq!(unquote("/%68ealth").as_deref(), Some("/health"));
        assert_eq!(
            unquote("/v1/%73ystem%6Fne?x=%41").as_deref(),
            Some("/v1/systemone?x=%41")
        );
        assert_eq!(unquote("/health%2F").as_deref(), Some("/health/"));
        assert_eq!(unquote("/health%2f").as_deref(), Some("/health/"));
        // Nothing to decode, or nothing a route could be.
        assert_eq!(unquote("/health"), None);
        assert_eq!(unquote("/health%20"), None);
        assert_eq!(unquote("/health%25"), None);
        assert_eq!(unquote("/health%3Fx"), None);
        assert_eq!(unquote("/health%C3%A9"), None);
        // A `%` that starts no escape stays as it is.
        assert_eq!(unquote("/%6"), None);
        assert_eq!(unquote("/%zz%68"), None);
    }
}
