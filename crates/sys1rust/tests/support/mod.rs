//! Test support: start `sys1rust serve` as a real process and talk to it over raw HTTP/1.1,
//! so requests go out byte for byte as written (raw bodies, odd headers, stalls).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub use laya_fixtures::fixtures_dir;

/// A running server; killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub ready: String,
}

impl Server {
    /// Starts `sys1rust serve --port 0` with `args` and `env`, waiting for the ready line.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sys1rust"));
        cmd.arg("serve").args(["--port", "0"]).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("sys1rust starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("ready line");
        assert!(!line.is_empty(), "the server exited before its ready line");
        let addr = line
            .split("\"address\":\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no address in the ready line {line:?}"));
        Server {
            child,
            addr,
            ready: line,
        }
    }

    pub fn tiny(extra: &[&str]) -> Server {
        let dir = checkpoint("tiny");
        let mut args = vec!["--model", dir.to_str().expect("utf-8 path")];
        args.extend_from_slice(extra);
        Server::start(&args, &[])
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(120)))
            .expect("timeout");
        s
    }

    /// One request on a fresh connection.
    pub fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Response {
        let mut s = self.connect();
        write_request(&mut s, method, path, headers, body);
        read_response(&mut s)
    }

    pub fn post_json(&self, path: &str, body: &str) -> Response {
        self.send(
            "POST",
            path,
            &[("content-type", "application/json")],
            Some(body.as_bytes()),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn checkpoint(name: &str) -> PathBuf {
    fixtures_dir().join("checkpoints").join(name)
}

pub fn write_request(
    s: &mut TcpStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) {
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        if !headers.iter().any(|(k, _)| {
            k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("transfer-encoding")
        }) {
            head.push_str(&format!("content-length: {}\r\n", b.len()));
        }
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).expect("write head");
    if let Some(b) = body {
        s.write_all(b).expect("write body");
    }
}

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Lower-cased names, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Reads one response (Content-Length bodies, or to EOF).
pub fn read_response(s: &mut TcpStream) -> Response {
    let mut reader = BufReader::new(s);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).expect("status line");
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("header line");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let mut body = Vec::new();
    match headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
    {
        Some(n) => {
            body.resize(n, 0);
            reader.read_exact(&mut body).expect("body");
        }
        None => {
            let _ = reader.read_to_end(&mut body);
        }
    }
    Response {
        status,
        headers,
        body,
    }
}

/// The bytes of one HTTP/1.1 request: `host: test`, `connection: close` unless `keep_alive`,
/// and a `content-length` for `body` unless the headers already frame it.
pub fn request_bytes(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
    keep_alive: bool,
) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: test\r\n");
    if !keep_alive {
        head.push_str("connection: close\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        if !headers.iter().any(|(k, _)| {
            k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("transfer-encoding")
        }) {
            head.push_str(&format!("content-length: {}\r\n", b.len()));
        }
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body.unwrap_or_default());
    out
}

impl Server {
    /// Sends raw bytes on a fresh connection and reads one response. The bytes go out from
    /// another thread and write errors are ignored, so a server that answers before reading
    /// everything (413 on `Content-Length`) is read, not reported as a broken pipe.
    pub fn exchange(&self, bytes: Vec<u8>) -> Response {
        let mut s = self.connect();
        let mut w = s.try_clone().expect("clone");
        let writer = std::thread::spawn(move || {
            let _ = w.write_all(&bytes);
        });
        let resp = read_response(&mut s);
        drop(s);
        let _ = writer.join();
        resp
    }

    /// Headers plus the first part of a body whose `content-length` is `total`, then nothing:
    /// a stalled upload. The connection is returned for the caller to finish or drop.
    pub fn stall(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        total: usize,
        first: &[u8],
    ) -> TcpStream {
        let mut s = self.connect();
        let len = total.to_string();
        let mut all: Vec<(&str, &str)> = headers.to_vec();
        all.push(("content-length", &len));
        let mut bytes = request_bytes("POST", path, &all, None, false);
        bytes.extend_from_slice(first);
        s.write_all(&bytes).expect("write stalled request");
        s
    }

    /// `sys1_queue_depth` from `/metrics`: admitted decision requests (uploading, queued or running).
    pub fn queue_depth(&self, auth: Option<&str>) -> u64 {
        let headers: Vec<(&str, &str)> =
            auth.map(|a| vec![("authorization", a)]).unwrap_or_default();
        let resp = self.send("GET", "/metrics", &headers, None);
        assert_eq!(resp.status, 200, "/metrics: {}", resp.text());
        resp.text()
            .lines()
            .find_map(|l| l.strip_prefix("sys1_queue_depth "))
            .and_then(|v| v.trim().parse().ok())
            .expect("sys1_queue_depth in /metrics")
    }

    /// Waits (up to 10 s) until `n` decision requests hold an admission slot.
    pub fn wait_admitted(&self, n: u64, auth: Option<&str>) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let depth = self.queue_depth(auth);
            if depth == n {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{depth} requests admitted, expected {n}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
