//! A connection's socket with a write deadline: a response that makes no progress for the
//! deadline fails the connection, which closes it. Without it a client that never reads (it
//! pipelines requests and leaves the answers in the socket) keeps its connection, and its
//! place under the connection cap, forever, and holds up a graceful shutdown.
//!
//! Once the server is draining, the deadline shrinks to [`DRAINING_LIMIT`]: a connection that
//! is only waiting for its client to read does not hold the shutdown for the full limit.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{sleep_until, Instant, Sleep};

/// How long a blocked write may wait once the server is shutting down.
pub const DRAINING_LIMIT: Duration = Duration::from_secs(1);

/// `inner` whose writes fail with `TimedOut` once one has been blocked for `limit`.
pub struct WriteDeadline<T> {
    inner: T,
    limit: Duration,
    /// Set when the server starts its shutdown.
    draining: Arc<AtomicBool>,
    /// Running while a write (or flush) waits for the peer to read: when the wait began,
    /// whether the timer already has the draining limit, and the timer.
    blocked: Option<(Instant, bool, Pin<Box<Sleep>>)>,
}

impl<T> WriteDeadline<T> {
    pub fn new(inner: T, limit: Duration, draining: Arc<AtomicBool>) -> WriteDeadline<T> {
        WriteDeadline {
            inner,
            limit,
            draining,
            blocked: None,
        }
    }

    /// After the inner write answered: progress clears the clock, a wait starts (or keeps)
    /// it, and a wait past the limit is an error.
    fn track<R>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        match polled {
            Poll::Ready(r) => {
                self.blocked = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let limit = self.limit;
                let draining = self.draining.load(Ordering::SeqCst);
                let (since, shortened, timer) = self.blocked.get_or_insert_with(|| {
                    let now = Instant::now();
                    (now, false, Box::pin(sleep_until(now + limit)))
                });
                if draining && !*shortened {
                    *shortened = true;
                    let sooner = (*since + DRAINING_LIMIT).min(timer.deadline());
                    timer.as_mut().reset(sooner);
                }
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the client read nothing for {:?}", since.elapsed()),
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    /// When the current write will fail, if it is waiting.
    #[cfg(test)]
    fn blocked_until(&self) -> Option<Instant> {
        self.blocked.as_ref().map(|(_, _, s)| s.deadline())
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.track(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.track(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.track(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.track(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test(start_paused = true)]
    async fn a_write_nobody_reads_fails_after_the_limit() {
        // A pipe whose reader never reads: 64 KiB of buffer, then writes wait.
        let (client, _server) = tokio::io::duplex(64 * 1024);
        let mut io = WriteDeadline::new(client, Duration::from_secs(2), Arc::default());
        let started = Instant::now();
        let err = io
            .write_all(&vec![0u8; 1 << 20])
            .await
            .expect_err("the write must fail");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_secs(2));
        assert!(io.blocked_until().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_is_not_cut_off() {
        let (client, mut server) = tokio::io::duplex(1024);
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let mut total = 0;
            while total < 8 * 1024 {
                tokio::time::sleep(Duration::from_millis(900)).await;
                total += tokio::io::AsyncReadExt::read(&mut server, &mut buf)
                    .await
                    .expect("read");
            }
        });
        let mut io = WriteDeadline::new(client, Duration::from_secs(1), Arc::default());
        io.write_all(&vec![1u8; 8 * 1024])
            .await
            .expect("progress within the limit keeps the connection");
        reader.await.expect("reader");
    }

    #[tokio::test(start_paused = true)]
    async fn draining_cuts_a_blocked_write_short() {
        let (client, _server) = tokio::io::duplex(1024);
        let draining = Arc::new(AtomicBool::new(false));
        let mut io = WriteDeadline::new(client, Duration::from_secs(60), draining.clone());
        let started = Instant::now();
        let flag = draining.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            flag.store(true, Ordering::SeqCst);
        });
        // The write wakes to re-check only when polled; a flush loop stands in for hyper,
        // which polls its connection again after `graceful_shutdown`.
        let bytes = vec![0u8; 1 << 16];
        let write = io.write_all(&bytes);
        tokio::pin!(write);
        let err = loop {
            tokio::select! {
                r = &mut write => break r.expect_err("the write must fail"),
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(5) && took < Duration::from_secs(7),
            "{took:?}"
        );
    }
}
