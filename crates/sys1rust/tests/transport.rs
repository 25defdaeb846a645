//! Load tests on 127.0.0.1, each bounded to a few seconds: admission under a burst of slow
//! uploads, many idle half-open connections, and SIGTERM with requests in flight.
//!
//! They run one at a time (a process-wide lock): they measure latencies, and on a small
//! machine one test's server would slow the other's. The SIGTERM tests run the real binary;
//! the others the app in process on a real socket.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::support::{read_response, request_bytes, serial, Response, Server};

const BODY: &str = r#"{"state":"I was charged twice for my subscription this month","questions":{"dept":{"type":"choice","instructions":"which team?","criteria":{"billing":"refunds","tech":"bugs"}},"urgent":{"type":"noul","instructions":"is it urgent?"}}}"#;

fn detail(r: &Response) -> String {
    r.text()
}

/// The `q`-quantile (0.5 = median) of `v`.
fn quantile(mut v: Vec<Duration>, q: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// One real decision request on a fresh connection: how long it took, and how much of that
/// the server spent outside inference (total minus its `X-Inference-Time-Ms`).
fn timed_decision(s: &Server) -> (Duration, Duration) {
    let started = Instant::now();
    let r = s.post_json("/v1/systemone", BODY);
    let took = started.elapsed();
    assert_eq!(r.status, 200, "decision: {}", r.text());
    let inference = r
        .header("x-inference-time-ms")
        .and_then(|v| v.parse::<f64>().ok())
        .expect("x-inference-time-ms");
    (
        took,
        took.saturating_sub(Duration::from_secs_f64(inference / 1e3)),
    )
}

/// (a) `--max-concurrent 16`: 20 slow uploads at once (headers and part of the body, then
/// nothing). 16 are admitted and wait for their bodies; the other 4 get 503 with
/// `Retry-After: 1` at once (under 200 ms). The 16 get 408 when the body deadline passes, and
/// their slots are free again afterwards.
#[test]
fn burst_of_slow_uploads_is_refused_at_once() {
    let _serial = serial();
    let deadline = Duration::from_secs(3);
    let s = Server::tiny(&["--max-concurrent", "16", "--body-timeout", "3"]);
    timed_decision(&s); // warm
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(20));
    let threads: Vec<_> = (0..20)
        .map(|_| {
            let mut conn = TcpStream::connect(s.addr).expect("connect");
            conn.set_read_timeout(Some(Duration::from_secs(30)))
                .expect("timeout");
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let len = BODY.len().to_string();
                let mut bytes = request_bytes(
                    "POST",
                    "/v1/systemone",
                    &[("content-length", &len)],
                    None,
                    false,
                );
                bytes.extend_from_slice(&BODY.as_bytes()[..20]);
                barrier.wait();
                conn.write_all(&bytes).expect("write slow request");
                let sent = Instant::now();
                let r = read_response(&mut conn);
                (r, sent.elapsed())
            })
        })
        .collect();
    let results: Vec<(Response, Duration)> = threads
        .into_iter()
        .map(|t| t.join().expect("client thread"))
        .collect();

    let refused: Vec<_> = results.iter().filter(|(r, _)| r.status == 503).collect();
    let timed_out: Vec<_> = results.iter().filter(|(r, _)| r.status == 408).collect();
    assert_eq!(
        refused.len(),
        4,
        "4 of 20 refused: {:?}",
        results
            .iter()
            .map(|(r, t)| (r.status, *t))
            .collect::<Vec<_>>()
    );
    assert_eq!(timed_out.len(), 16, "16 of 20 admitted, then timed out");
    for (r, took) in &refused {
        assert_eq!(detail(r), r#"{"detail":"server busy, try again later"}"#);
        assert_eq!(r.header("retry-after"), Some("1"));
        assert!(
            *took < Duration::from_millis(200),
            "503 at once, took {took:?}"
        );
    }
    for (r, took) in &timed_out {
        assert_eq!(
            detail(r),
            r#"{"detail":"request body was not received in time"}"#
        );
        assert!(
            *took >= deadline - Duration::from_millis(100)
                && *took < deadline + Duration::from_secs(3),
            "408 after the deadline, took {took:?}"
        );
    }

    // Every slot is free again: 16 requests at once are all admitted and answered.
    s.wait_admitted(0, None);
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let addr = s.addr;
            std::thread::spawn(move || {
                let mut conn = TcpStream::connect(addr).expect("connect");
                conn.set_read_timeout(Some(Duration::from_secs(30)))
                    .expect("timeout");
                conn.write_all(&request_bytes(
                    "POST",
                    "/v1/systemone",
                    &[],
                    Some(BODY.as_bytes()),
                    false,
                ))
                .expect("write");
                read_response(&mut conn).status
            })
        })
        .collect();
    let statuses: Vec<u16> = threads
        .into_iter()
        .map(|t| t.join().expect("client"))
        .collect();
    assert_eq!(statuses, vec![200; 16], "slots freed after the 408s");
    s.wait_admitted(0, None);
}

/// (b) 500 connections that send part of a request head and then nothing do not slow a real
/// request by more than 50 ms. (`--header-timeout 30` keeps them open for the whole
/// measurement.) The two conditions alternate over three rounds of five requests, so a change
/// in the machine's background load affects both sides alike, and two robust statistics are
/// compared: the median time the server spends outside inference (what idle connections could
/// slow: accepting, parsing, scheduling) and the fastest whole request (a delay the idle
/// connections cause applies to every request, the fastest included, while inference on a
/// shared CPU is at times ten times slower for a while, which would swamp a median of a few).
#[test]
fn idle_half_open_connections_do_not_delay_requests() {
    let _serial = serial();
    let s = Server::tiny(&["--header-timeout", "30"]);
    for _ in 0..3 {
        timed_decision(&s); // warm
    }
    let (mut alone, mut loaded) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        alone.extend((0..5).map(|_| timed_decision(&s)));
        let idle: Vec<TcpStream> = (0..500)
            .map(|i| {
                let mut c = TcpStream::connect(s.addr)
                    .unwrap_or_else(|e| panic!("idle connection {i}: {e}"));
                c.write_all(b"POST /v1/systemone HTTP/1.1\r\nhost: test\r\ncontent-ty")
                    .expect("partial head");
                c
            })
            .collect();
        // Let the server accept all of them.
        std::thread::sleep(Duration::from_millis(300));
        loaded.extend((0..5).map(|_| timed_decision(&s)));
        // They are all still open (none was dropped to make room).
        for c in &idle {
            c.set_nonblocking(true).expect("nonblocking");
            let mut buf = [0u8; 1];
            match c.peek(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                other => panic!("an idle connection was closed or answered: {other:?}"),
            }
        }
        drop(idle);
        std::thread::sleep(Duration::from_millis(200));
    }
    let total = |v: &[(Duration, Duration)]| quantile(v.iter().map(|t| t.0).collect(), 0.0);
    let outside = |v: &[(Duration, Duration)]| quantile(v.iter().map(|t| t.1).collect(), 0.5);
    println!(
        "decision latency, fastest: {:?} alone, {:?} with 500 idle connections; median outside inference: {:?} / {:?}",
        total(&alone),
        total(&loaded),
        outside(&alone),
        outside(&loaded)
    );
    let bound = Duration::from_millis(50);
    assert!(
        total(&loaded) < total(&alone) + bound,
        "500 idle connections delayed requests: {:?} vs {:?}",
        total(&loaded),
        total(&alone)
    );
    assert!(
        outside(&loaded) < outside(&alone) + bound,
        "500 idle connections delayed request handling: {:?} vs {:?}",
        outside(&loaded),
        outside(&alone)
    );
}

/// (c) SIGTERM while 8 requests are in flight: new connections are refused from then on, the
/// 8 still get complete 200 answers, and the process exits with status 0.
#[test]
fn sigterm_finishes_in_flight_requests() {
    let _serial = serial();
    let mut s = Server::process_tiny(&[], &[]);
    timed_decision(&s);

    // Eight requests, each admitted with all but the last byte of its body sent, so they are
    // certainly in flight when the signal arrives.
    let mut conns: Vec<TcpStream> = (0..8)
        .map(|_| {
            s.stall(
                "/v1/systemone",
                &[("content-type", "application/json")],
                BODY.len(),
                &BODY.as_bytes()[..BODY.len() - 1],
            )
        })
        .collect();
    s.wait_admitted(8, None);

    let pid = s.child().id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -TERM");

    // The listener closes: new connections are refused (within a moment of the signal).
    let refused_by = Instant::now() + Duration::from_secs(3);
    loop {
        match TcpStream::connect(s.addr) {
            // Refused once the listener is gone; reset when it closes mid-handshake, with the
            // connection still in its queue: either way it was not taken.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset
                ) =>
            {
                break
            }
            Err(e) => panic!("unexpected connect error {e}"),
            Ok(_) => {
                assert!(
                    Instant::now() < refused_by,
                    "still accepting connections after SIGTERM"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    assert!(
        s.child().try_wait().expect("try_wait").is_none(),
        "the server waits for its in-flight requests"
    );

    // The in-flight requests finish normally.
    for c in &mut conns {
        c.write_all(&BODY.as_bytes()[BODY.len() - 1..])
            .expect("last byte");
    }
    for (i, c) in conns.iter_mut().enumerate() {
        let r = read_response(c);
        assert_eq!(r.status, 200, "in-flight request {i}: {}", r.text());
        assert_eq!(
            r.header("content-length").and_then(|v| v.parse().ok()),
            Some(r.body.len()),
            "request {i}: complete body"
        );
        assert!(
            r.text()
                .starts_with(r#"{"model":"laya-rl-agent","answers":{"dept":"#)
                && r.text().ends_with('}'),
            "request {i}: {}",
            r.text()
        );
    }

    let exit_by = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = s.child().try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            Instant::now() < exit_by,
            "the server did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status after SIGTERM: {status:?}");
}

/// A second SIGTERM while the server waits for in-flight work stops waiting (uvicorn's
/// behaviour): the process exits at once with a failure status, the stalled upload dropped.
#[test]
fn second_sigterm_exits_at_once() {
    let _serial = serial();
    let mut s = Server::process_tiny(&["--body-timeout", "30"], &[]);
    let mut stalled = s.stall("/v1/systemone", &[], BODY.len(), b"{");
    s.wait_admitted(1, None);
    let pid = s.child().id().to_string();
    let term = || {
        assert!(std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success())
    };
    term();
    // The first signal is being handled once new connections are refused.
    let refused_by = Instant::now() + Duration::from_secs(3);
    while TcpStream::connect(s.addr).is_ok() {
        assert!(
            Instant::now() < refused_by,
            "still accepting connections after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        s.child().try_wait().expect("try_wait").is_none(),
        "the first signal waits for the stalled upload"
    );
    let signalled = Instant::now();
    term();
    let status = loop {
        if let Some(status) = s.child().try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(5),
            "the second signal did not stop the server"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        !status.success(),
        "abandoning in-flight work is a failure exit: {status:?}"
    );
    stalled
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = Vec::new();
    let _ = std::io::Read::read_to_end(&mut stalled, &mut buf);
    assert!(buf.is_empty(), "the dropped request got no answer");
}

/// Over a socket, as uvicorn routes: the path is percent-decoded first (`/%68ealth` is
/// `/health`, `/health%2F` redirects), a head of 40 KiB is read, and an unfinished one is
/// refused once it passes 64 KiB instead of buffered.
#[test]
fn paths_are_decoded_and_heads_bounded_as_uvicorn_does() {
    let s = Server::tiny(&[]);
    let ask = |path: &str, headers: &[(&str, &str)], body: Option<&[u8]>| {
        let mut conn = s.connect();
        let method = if body.is_some() { "POST" } else { "GET" };
        conn.write_all(&request_bytes(method, path, headers, body, false))
            .expect("request");
        read_response(&mut conn)
    };
    let r = ask("/%68ealth", &[], None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().starts_with(r#"{"status":"ok""#), "{}", r.text());
    let r = ask(
        "/v1/%73ystemone",
        &[("content-type", "application/json")],
        Some(BODY.as_bytes()),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = ask("/health%2F", &[], None);
    assert_eq!(r.status, 307);
    assert!(
        r.header("location").is_some_and(|l| l.ends_with("/health")),
        "{:?}",
        r.header("location")
    );
    assert_eq!(ask("/health%20", &[], None).status, 404);

    let big = "a".repeat(40 * 1024);
    let r = ask("/health", &[("x-big", &big)], None);
    assert_eq!(r.status, 200, "a 40 KiB head is read");
    // A head that keeps coming, 16 KiB at a time, never finished: refused once the buffer
    // is full, where the connection used to hold ~400 KB of it.
    let mut conn = s.connect();
    let _ = conn.write_all(b"GET /health HTTP/1.1\r\nhost: test\r\nx-big: ");
    for _ in 0..16 {
        if conn.write_all(&[b'a'; 16 * 1024]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = read_response(&mut conn);
    assert_eq!(r.status, 431, "an unfinished head past 64 KiB is refused");
}
