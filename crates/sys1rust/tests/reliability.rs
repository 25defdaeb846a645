//! What clients that misbehave cannot do, over real sockets on 127.0.0.1: pin connections by
//! never reading, hold up a shutdown, get a connection closed under them without being
//! told, or have the engine spend its time on work nobody waits for.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use crate::support::{post_fresh, read_response, request_bytes, serial, Server};

const BODY: &str = r#"{"state":"I was charged twice for my subscription this month","questions":{"dept":{"type":"choice","instructions":"which team?","criteria":{"billing":"refunds","tech":"bugs"}},"urgent":{"type":"noul","instructions":"is it urgent?"}}}"#;

/// A client that sends `count` pipelined `GET /openapi.json` in one go and never reads:
/// its answers fill both sockets' buffers. The returned stream keeps it connected; the write
/// goes on in a thread (it blocks once the server stops reading).
fn non_reading_client(addr: std::net::SocketAddr, count: usize) -> TcpStream {
    let conn = TcpStream::connect(addr).expect("connect");
    let mut writer = conn.try_clone().expect("clone");
    std::thread::spawn(move || {
        let one = request_bytes("GET", "/openapi.json", &[], None, true);
        let all: Vec<u8> = one.repeat(count);
        // The server closes the connection in the end: the rest of the write fails.
        let _ = writer.write_all(&all);
    });
    conn
}

/// Whether a fresh connection gets an answer to `GET /health` (a reset or a close without
/// one is no answer).
fn answered(addr: std::net::SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(&request_bytes("GET", "/health", &[], None, false))
        .is_err()
    {
        return false;
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    buf.starts_with(b"HTTP/1.1 200")
}

fn exit_within(s: &mut Server, limit: Duration) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = s.child().try_wait().expect("try_wait") {
            return status;
        }
        assert!(
            started.elapsed() < limit,
            "the server did not exit within {limit:?} of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sigterm(s: &mut Server) {
    let pid = s.child().id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill")
        .success());
}

/// A metric's value from `/metrics`.
fn metric(s: &Server, name: &str) -> u64 {
    let resp = s.send("GET", "/metrics", &[], None);
    assert_eq!(resp.status, 200);
    resp.text()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in /metrics"))
}

/// (1) 64 clients that pipeline requests and never read fill `--max-connections 64`. Between
/// their answers no request of theirs is in flight, so once they have been idle a second a
/// new client is served at once, in place of one of them; that one is closed once its answers are out or its write deadline
/// passes, and once the deadline has passed every one of them is closed.
#[test]
fn clients_that_never_read_lose_their_connections() {
    let _serial = serial();
    let write_timeout = Duration::from_secs(2);
    let s = Server::tiny(&["--max-connections", "64", "--write-timeout", "2"]);
    let mut pinned: Vec<TcpStream> = (0..64).map(|_| non_reading_client(s.addr, 3000)).collect();
    let filled = Instant::now();
    // A connection that took requests gives way once idle for a second.
    std::thread::sleep(Duration::from_millis(1200));
    let started = Instant::now();
    let mut conn = s.connect();
    conn.write_all(&request_bytes(
        "POST",
        "/v1/systemone",
        &[("content-type", "application/json")],
        Some(BODY.as_bytes()),
        false,
    ))
    .expect("request");
    let r = read_response(&mut conn);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "answered {:?} after it connected, with the cap held by clients that never read",
        started.elapsed()
    );
    // Past the write deadline the server has closed every one of them: reading what it sent
    // ends.
    std::thread::sleep((write_timeout + Duration::from_secs(1)).saturating_sub(filled.elapsed()));
    for c in &mut pinned {
        c.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut buf = vec![0u8; 1 << 16];
        let closed = loop {
            match c.read(&mut buf) {
                Ok(0) => break true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
                Err(_) => break false,
            }
        };
        assert!(
            closed,
            "a client that never read is closed after the deadline"
        );
    }
}

/// (1b) The same past the idle timeout, with the write deadline far later (the defaults: 5 s
/// against 10 s): connections closing on their idle timeout, each still blocked writing to a
/// client that does not read, give way to new ones instead of holding the cap until their
/// write deadline.
#[test]
fn clients_that_never_read_give_way_after_their_idle_timeout() {
    let _serial = serial();
    let s = Server::tiny(&[
        "--max-connections",
        "8",
        "--keep-alive-timeout",
        "1",
        "--write-timeout",
        "60",
    ]);
    let _pinned: Vec<TcpStream> = (0..8).map(|_| non_reading_client(s.addr, 3000)).collect();
    // Past the idle timeout every one of them is closing, its answers unread.
    std::thread::sleep(Duration::from_millis(2500));
    for attempt in 0..3 {
        let started = Instant::now();
        assert!(
            answered(s.addr),
            "attempt {attempt}: a new client got no answer with the cap held by clients that never read"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "attempt {attempt}: answered after {:?}",
            started.elapsed()
        );
    }
}

/// (2) SIGTERM while a client that never reads is connected: the connection, only blocked
/// writing, is closed and the process exits 0 within the grace period (here well before the
/// 60 s write deadline would close it).
#[test]
fn sigterm_with_a_client_that_never_reads_exits_zero() {
    let _serial = serial();
    let grace = Duration::from_secs(10);
    let mut s = Server::process_tiny(&["--write-timeout", "60", "--shutdown-grace", "10"], &[]);
    let pinned = non_reading_client(s.addr, 3000);
    std::thread::sleep(Duration::from_millis(500));
    sigterm(&mut s);
    let status = exit_within(&mut s, grace);
    assert!(status.success(), "exit status after SIGTERM: {status:?}");
    drop(pinned);
}

/// (3) A 413 (a declared body over the limit) and a 503 (no admission slot) are answered
/// before the body arrives; the server then closes the connection, and says so.
#[test]
fn early_errors_announce_the_close() {
    let _serial = serial();
    let s = Server::tiny(&["--max-concurrent", "1", "--body-timeout", "30"]);
    let early = |headers: &[(&str, &str)]| {
        let mut conn = s.connect();
        conn.write_all(&request_bytes("POST", "/v1/systemone", headers, None, true))
            .expect("head");
        let r = read_response(&mut conn);
        // The connection is closed after the answer.
        let mut rest = Vec::new();
        let _ = conn.read_to_end(&mut rest);
        assert!(rest.is_empty(), "nothing follows the answer");
        r
    };
    let r = early(&[("content-length", "100000000")]);
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(
        r.header("connection"),
        Some("close"),
        "413: {:?}",
        r.headers
    );

    // One upload holds the only slot; the next request is refused before its body is read.
    let _held = s.stall("/v1/systemone", &[], BODY.len(), b"{");
    s.wait_admitted(1, None);
    let len = BODY.len().to_string();
    let r = early(&[("content-length", &len)]);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(
        r.header("connection"),
        Some("close"),
        "503: {:?}",
        r.headers
    );

    // An answer given after the whole body was read keeps the connection.
    let mut conn = s.connect();
    conn.write_all(&request_bytes("GET", "/health", &[], None, true))
        .expect("write");
    let r = read_response(&mut conn);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), None);
    conn.write_all(&request_bytes("GET", "/health", &[], None, false))
        .expect("a second request on the kept connection");
    assert_eq!(read_response(&mut conn).status, 200);
}

/// A client that sends its next request as soon as it has read an answer finds the slot that
/// answer held free again, as upstream's handler leaves its semaphore before it responds.
#[test]
fn back_to_back_requests_never_find_their_own_slot_held() {
    let _serial = serial();
    let s = Server::tiny(&["--max-concurrent", "1"]);
    let mut conn = s.connect();
    let headers = [("content-type", "application/json")];
    for i in 0..500 {
        conn.write_all(&request_bytes(
            "POST",
            "/v1/systemone",
            &headers,
            Some(BODY.as_bytes()),
            true,
        ))
        .expect("write");
        let r = read_response(&mut conn);
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
    }
}

/// (5a) A request whose client disconnects while it waits in the queue is dropped before it
/// reaches the engine, and counted in `/metrics`.
#[test]
fn a_queued_request_whose_client_left_never_runs() {
    let _serial = serial();
    let (s, gate) = Server::gated(&["--max-concurrent", "4"]);
    let post = request_bytes(
        "POST",
        "/v1/systemone",
        &[("content-type", "application/json")],
        Some(BODY.as_bytes()),
        false,
    );
    // Request A reaches the engine and is held there.
    let mut a = s.connect();
    a.write_all(&post).expect("write A");
    gate.wait_calls(1);

    // Request B queues behind it, then its client goes away.
    let mut b = s.connect();
    b.write_all(&post).expect("write B");
    s.wait_admitted(2, None);
    b.shutdown(Shutdown::Both).expect("shutdown");
    drop(b);
    // The server notices the close while B waits.
    std::thread::sleep(Duration::from_millis(300));

    gate.open();
    let r = read_response(&mut a);
    assert_eq!(r.status, 200, "{}", r.text());
    s.wait_admitted(0, None);
    assert_eq!(metric(&s, "sys1_cancelled_total"), 1);
    // This body's two questions go to the engine in one forward pass.
    assert_eq!(gate.calls(), 1, "only A reached the engine");
    // Both are counted: A answered, B under the status of a client that left.
    assert_eq!(
        metric(&s, r#"sys1_requests_total{route="single",status="200"}"#),
        1
    );
    assert_eq!(
        metric(&s, r#"sys1_requests_total{route="single",status="499"}"#),
        1
    );
}

/// (5b) `--request-timeout` bounds the time from admission to answer, queue wait included:
/// a request stuck in the engine and one queued behind it both get 504 with a `detail`, and
/// the queued one is then never run.
#[test]
fn the_request_deadline_gives_504() {
    let _serial = serial();
    let (s, gate) = Server::gated(&["--request-timeout", "1"]);
    let started = Instant::now();
    let post = || {
        let addr = s.addr;
        std::thread::spawn(move || {
            let r = post_fresh(
                addr,
                &[("content-type", "application/json")],
                BODY.as_bytes(),
            );
            (r, Instant::now())
        })
    };
    let a = post();
    gate.wait_calls(1);
    let b = post();
    let (ra, at) = a.join().expect("A");
    let (rb, bt) = b.join().expect("B");
    for (r, t) in [(&ra, at), (&rb, bt)] {
        assert_eq!(r.status, 504, "{}", r.text());
        assert_eq!(r.text(), r#"{"detail":"request was not answered in time"}"#);
        let took = t - started;
        assert!(
            took >= Duration::from_millis(950) && took < Duration::from_secs(4),
            "504 after the deadline, took {took:?}"
        );
    }
    gate.open();
    s.wait_admitted(0, None);
    assert_eq!(metric(&s, "sys1_cancelled_total"), 1);
    assert_eq!(gate.calls(), 1, "the queued request never ran");
}

/// Settings that upstream's parsers take, at their extremes: the server starts and answers.
/// A timeout of `1e20` seconds (Python's `float()` reads it) once panicked at start, and
/// 10^14 admission slots (`int()`) aborted it on an up-front allocation.
#[test]
fn settings_at_their_extremes_start_and_serve() {
    let _serial = serial();
    let s = Server::process_tiny(
        &[],
        &[
            ("LAYA_BODY_READ_TIMEOUT", "1e20"),
            ("LAYA_MAX_CONCURRENT", "100000000000000"),
            ("SYS1_HEADER_TIMEOUT", "inf"),
            ("SYS1_KEEP_ALIVE_TIMEOUT", "1e300"),
            ("SYS1_WRITE_TIMEOUT", "1e20"),
            ("SYS1_REQUEST_TIMEOUT", "1e20"),
        ],
    );
    let r = s.post_json("/v1/systemone", BODY);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.send("GET", "/health", &[], None).status, 200);
}

/// (4) At the connection cap with a request in flight on every connection (bodies still
/// arriving), a new connection is closed at once, without an answer; once one of them is
/// answered and its connection has been idle for a second, it gives its place to the next
/// new one.
#[test]
fn at_the_cap_only_idle_connections_give_way() {
    let _serial = serial();
    let s = Server::tiny(&["--max-connections", "8"]);
    let head = format!(
        "POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        BODY.len()
    );
    let (first, rest) = BODY.split_at(10);
    let mut busy: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut c = s.connect();
            c.write_all(head.as_bytes()).expect("head");
            c.write_all(first.as_bytes()).expect("part of the body");
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let mut extra = s.connect();
    let _ = extra.write_all(&request_bytes("GET", "/health", &[], None, false));
    let _ = extra.set_read_timeout(Some(Duration::from_secs(5)));
    let mut got = Vec::new();
    let _ = extra.read_to_end(&mut got);
    assert!(
        got.is_empty(),
        "a ninth connection is closed without an answer, got {:?}",
        String::from_utf8_lossy(&got)
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "closed at once, took {:?}",
        started.elapsed()
    );
    // The first request completes; its connection stays open, idle.
    busy[0]
        .write_all(rest.as_bytes())
        .expect("rest of the body");
    let r = read_response(&mut busy[0]);
    assert_eq!(r.status, 200, "{}", r.text());
    // Not at once: a connection that took requests gives way after a second idle.
    assert!(
        !answered(s.addr),
        "a connection that has just answered keeps its place"
    );
    std::thread::sleep(Duration::from_millis(1100));
    assert!(
        answered(s.addr),
        "a new connection is served in the place of the idle one"
    );
    drop(busy);
}
