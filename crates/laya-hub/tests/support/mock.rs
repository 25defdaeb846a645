//! A mock Hugging Face hub on 127.0.0.1, speaking enough of the hub's protocol for
//! huggingface_hub itself to download from it:
//!
//! * `HEAD|GET /{org}/{name}/resolve/{revision}/{path}` on the hub origin: `X-Repo-Commit`,
//!   plain files answered directly with `ETag: "<git blob id>"`, LFS files (`*.safetensors`,
//!   `tokenizer.json`) answered with a 302 to the CDN origin carrying `X-Linked-Etag:
//!   "<sha256>"` and `X-Linked-Size`; 404s with `X-Error-Code`; 401 for a private repo
//!   without the right bearer token.
//! * `GET /lfs/{sha256}?file=<path>&sig=…` on the CDN origin (a second listener = a second
//!   origin).
//!
//! Both honour `Range: bytes=N-` (206 / 416) and record every request's headers. Faults
//! (close mid-body, corrupt a byte, trickle, stall, status) are queued per file path and
//! used up by the next GET that serves that file's bytes.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::{git_blob_id, sha256_hex};

/// One recorded request.
#[derive(Debug, Clone)]
pub struct Logged {
    pub method: String,
    pub target: String,
    /// Lowercase names.
    pub headers: Vec<(String, String)>,
}

impl Logged {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    /// The path part of the target, without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

type Handler = Arc<dyn Fn(&Logged, &mut TcpStream) + Send + Sync>;

/// A thread-per-connection HTTP/1.1 server; one request per connection (`Connection: close`).
pub struct Server {
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<Logged>>>,
    stop: Arc<AtomicBool>,
}

impl Server {
    pub fn start(handler: Handler) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (log2, stop2) = (log.clone(), stop.clone());
        thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut stream) = conn else { continue };
                let (log, handler) = (log2.clone(), handler.clone());
                thread::spawn(move || {
                    let Some(req) = read_request(&stream) else {
                        return;
                    };
                    log.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(req.clone());
                    handler(&req, &mut stream);
                    let _ = stream.flush();
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        Server { addr, log, stop }
    }

    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn log(&self) -> Vec<Logged> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn read_request(stream: &TcpStream) -> Option<Logged> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let target = parts.next()?.to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            break;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    Some(Logged {
        method,
        target,
        headers,
    })
}

/// What can go wrong with the next GET that serves a file's bytes.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Send the headers (full Content-Length) and this many body bytes, then close.
    CloseAfter(usize),
    /// Flip one byte in the middle of the body.
    Corrupt,
    /// Send the body in chunks of `chunk` bytes, sleeping `delay` after each.
    Slow { chunk: usize, delay: Duration },
    /// Send this many body bytes, then go silent for `pause` before the rest.
    StallAfter { bytes: usize, pause: Duration },
    /// (CDN only) redirect back to the hub origin, which then serves the bytes.
    BounceToHub,
    /// (CDN, and the hub after a bounce) answer with this status and no body, as a CDN
    /// refusing an expired signed link does.
    Status(u16),
}

/// One repo: commits with their files, `main`, and whether a token is needed.
#[derive(Clone)]
pub struct MockRepo {
    pub commits: HashMap<String, BTreeMap<String, Vec<u8>>>,
    pub main: String,
    pub private: bool,
}

impl MockRepo {
    pub fn new(commit: &str, files: BTreeMap<String, Vec<u8>>) -> MockRepo {
        MockRepo {
            commits: HashMap::from([(commit.to_owned(), files)]),
            main: commit.to_owned(),
            private: false,
        }
    }
}

struct State {
    repos: HashMap<String, MockRepo>,
    token: String,
    cdn: Mutex<String>,
    hub: Mutex<String>,
    faults: Mutex<Vec<(String, Fault)>>,
}

impl State {
    fn take_fault(&self, path: &str) -> Option<Fault> {
        let mut faults = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        let i = faults.iter().position(|(p, _)| p == path)?;
        Some(faults.remove(i).1)
    }

    fn blob_by_sha256(&self, sha: &str) -> Option<Vec<u8>> {
        self.repos
            .values()
            .flat_map(|r| r.commits.values())
            .flat_map(|files| files.values())
            .find(|b| sha256_hex(b) == sha)
            .cloned()
    }
}

/// The hub origin plus its CDN origin.
pub struct MockHub {
    pub hub: Server,
    pub cdn: Server,
    state: Arc<State>,
}

/// Files served through the CDN redirect, like LFS files on the real hub.
pub fn is_lfs(path: &str) -> bool {
    path.ends_with(".safetensors") || path.ends_with("tokenizer.json")
}

impl MockHub {
    /// `token` is what private repos require (`Authorization: Bearer <token>`).
    pub fn start(repos: HashMap<String, MockRepo>, token: &str) -> MockHub {
        let state = Arc::new(State {
            repos,
            token: token.to_owned(),
            cdn: Mutex::new(String::new()),
            hub: Mutex::new(String::new()),
            faults: Mutex::new(Vec::new()),
        });
        let s = state.clone();
        let cdn = Server::start(Arc::new(move |req, stream| cdn_handler(&s, req, stream)));
        *state.cdn.lock().unwrap_or_else(|p| p.into_inner()) = cdn.origin();
        let s = state.clone();
        let hub = Server::start(Arc::new(move |req, stream| hub_handler(&s, req, stream)));
        *state.hub.lock().unwrap_or_else(|p| p.into_inner()) = hub.origin();
        MockHub { hub, cdn, state }
    }

    pub fn endpoint(&self) -> String {
        self.hub.origin()
    }

    pub fn fault(&self, path: &str, fault: Fault) {
        self.state
            .faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((path.to_owned(), fault));
    }

    /// GETs (on either origin) that served `path`'s bytes.
    pub fn body_gets(&self, path: &str) -> Vec<Logged> {
        let on_hub = self.hub.log().into_iter().filter(|r| {
            r.method == "GET" && !is_lfs(path) && r.path().ends_with(&format!("/{path}"))
        });
        let on_cdn = self.cdn.log().into_iter().filter(|r| {
            r.method == "GET"
                && r.target
                    .contains(&format!("file={}", path.replace('/', "%2F")))
        });
        on_hub.chain(on_cdn).collect()
    }
}

/// The `file=` query parameter of a download link.
fn file_param(req: &Logged) -> String {
    req.target
        .split_once("file=")
        .map(|(_, rest)| percent_decode(rest.split('&').next().unwrap_or("")))
        .unwrap_or_default()
}

fn hub_handler(state: &State, req: &Logged, stream: &mut TcpStream) {
    if let Some(sha) = req.path().strip_prefix("/bounced/") {
        let Some(bytes) = state.blob_by_sha256(sha) else {
            return respond(stream, 404, &[], b"", req);
        };
        let fault = if req.method == "GET" {
            state.take_fault(&file_param(req))
        } else {
            None
        };
        if let Some(Fault::Status(code)) = fault {
            return respond(stream, code, &[], b"", req);
        }
        return serve_bytes(stream, req, &bytes, &[], fault);
    }
    let segs: Vec<String> = req
        .path()
        .trim_start_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    if segs.len() < 5 || segs[2] != "resolve" {
        return respond(stream, 404, &[], b"", req);
    }
    let repo_id = format!("{}/{}", segs[0], segs[1]);
    let (rev, path) = (&segs[3], segs[4..].join("/"));
    let Some(repo) = state.repos.get(&repo_id) else {
        return respond(
            stream,
            404,
            &[("X-Error-Code", "RepoNotFound".into())],
            b"",
            req,
        );
    };
    if repo.private && req.header("authorization") != Some(&format!("Bearer {}", state.token)) {
        return respond(
            stream,
            401,
            &[("X-Error-Code", "RepoNotFound".into())],
            b"",
            req,
        );
    }
    let commit = if rev == "main" {
        repo.main.clone()
    } else {
        rev.clone()
    };
    let Some(files) = repo.commits.get(&commit) else {
        return respond(
            stream,
            404,
            &[("X-Error-Code", "RevisionNotFound".into())],
            b"",
            req,
        );
    };
    let Some(bytes) = files.get(&path) else {
        let h = [
            ("X-Error-Code", "EntryNotFound".to_owned()),
            ("X-Repo-Commit", commit),
        ];
        return respond(stream, 404, &h, b"", req);
    };
    if is_lfs(&path) {
        let sha = sha256_hex(bytes);
        let cdn = state.cdn.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let location = format!("{cdn}/lfs/{sha}?file={}&sig=abc", path.replace('/', "%2F"));
        let h = [
            ("X-Repo-Commit", commit),
            ("X-Linked-Etag", format!("\"{sha}\"")),
            ("X-Linked-Size", bytes.len().to_string()),
            ("ETag", format!("\"{sha}\"")),
            ("Location", location),
        ];
        return respond(stream, 302, &h, b"", req);
    }
    let h = [
        ("X-Repo-Commit", commit),
        ("ETag", format!("\"{}\"", git_blob_id(bytes))),
    ];
    let fault = if req.method == "GET" {
        state.take_fault(&path)
    } else {
        None
    };
    serve_bytes(stream, req, bytes, &h, fault);
}

fn cdn_handler(state: &State, req: &Logged, stream: &mut TcpStream) {
    let sha = req.path().strip_prefix("/lfs/").unwrap_or("");
    let file = file_param(req);
    let Some(bytes) = state.blob_by_sha256(sha) else {
        return respond(stream, 404, &[], b"", req);
    };
    let fault = if req.method == "GET" {
        state.take_fault(&file)
    } else {
        None
    };
    match fault {
        Some(Fault::BounceToHub) => {
            let hub = state.hub.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let location = format!(
                "{hub}/bounced/{sha}?file={}&sig=bounced",
                file.replace('/', "%2F")
            );
            return respond(stream, 302, &[("Location", location)], b"", req);
        }
        Some(Fault::Status(code)) => return respond(stream, code, &[], b"", req),
        _ => {}
    }
    serve_bytes(
        stream,
        req,
        &bytes,
        &[("ETag", format!("\"{sha}\""))],
        fault,
    );
}

fn serve_bytes(
    stream: &mut TcpStream,
    req: &Logged,
    bytes: &[u8],
    headers: &[(&str, String)],
    fault: Option<Fault>,
) {
    let len = bytes.len();
    let from = req
        .header("range")
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse::<usize>().ok());
    let mut h: Vec<(&str, String)> = headers.to_vec();
    h.push(("Accept-Ranges", "bytes".into()));
    let (status, start) = match from {
        Some(n) if n >= len => {
            h.push(("Content-Range", format!("bytes */{len}")));
            return respond(stream, 416, &h, b"", req);
        }
        Some(n) => {
            h.push(("Content-Range", format!("bytes {n}-{}/{len}", len - 1)));
            (206, n)
        }
        None => (200, 0),
    };
    let mut body = bytes[start..].to_vec();
    if let (Some(Fault::Corrupt), false) = (&fault, body.is_empty()) {
        let mid = body.len() / 2;
        body[mid] ^= 0xff;
    }
    h.push(("Content-Length", body.len().to_string()));
    if write_head(stream, status, &h).is_err() || req.method == "HEAD" {
        return;
    }
    let _ = match fault {
        Some(Fault::CloseAfter(n)) => stream.write_all(&body[..n.min(body.len())]),
        Some(Fault::Slow { chunk, delay }) => body.chunks(chunk.max(1)).try_for_each(|c| {
            stream.write_all(c)?;
            stream.flush()?;
            thread::sleep(delay);
            Ok(())
        }),
        Some(Fault::StallAfter { bytes: n, pause }) => {
            let n = n.min(body.len());
            let _ = stream.write_all(&body[..n]).and_then(|_| stream.flush());
            thread::sleep(pause);
            stream.write_all(&body[n..])
        }
        _ => stream.write_all(&body),
    };
}

fn respond(
    stream: &mut TcpStream,
    status: u16,
    headers: &[(&str, String)],
    body: &[u8],
    req: &Logged,
) {
    let mut h = headers.to_vec();
    h.push(("Content-Length", body.len().to_string()));
    if write_head(stream, status, &h).is_ok() && req.method != "HEAD" {
        let _ = stream.write_all(body);
    }
}

fn write_head(
    stream: &mut TcpStream,
    status: u16,
    headers: &[(&str, String)],
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        _ => "Other",
    };
    let mut head = format!("HTTP/1.1 {status} {reason}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.flush()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Some(v) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A forward HTTP proxy: `CONNECT host:port` is tunnelled, an absolute-form request
/// (`GET http://host:port/path`) is passed on in origin form. Records each target.
pub struct ForwardProxy {
    pub addr: SocketAddr,
    targets: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl ForwardProxy {
    pub fn start() -> ForwardProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let targets = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (targets2, stop2) = (targets.clone(), stop.clone());
        thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = conn else { continue };
                let targets = targets2.clone();
                thread::spawn(move || {
                    let _ = forward(stream, &targets);
                });
            }
        });
        ForwardProxy {
            addr,
            targets,
            stop,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request target seen, in order.
    pub fn targets(&self) -> Vec<String> {
        self.targets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for ForwardProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn forward(client: TcpStream, targets: &Mutex<Vec<String>>) -> std::io::Result<()> {
    let mut reader = BufReader::new(client.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Ok(());
    };
    let (method, target) = (method.to_owned(), target.to_owned());
    targets
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(format!("{method} {target}"));
    let mut head = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim_end().is_empty() {
            break;
        }
        head.push(h);
    }
    let mut client_w = client.try_clone()?;
    let (authority, origin_form) = if method == "CONNECT" {
        (target.clone(), None)
    } else {
        let rest = target.strip_prefix("http://").unwrap_or(&target);
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        (
            authority.to_owned(),
            Some(format!("{method} {path} HTTP/1.1\r\n")),
        )
    };
    let mut upstream = TcpStream::connect(&authority)?;
    match origin_form {
        None => client_w.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?,
        Some(request_line) => {
            upstream.write_all(request_line.as_bytes())?;
            for h in &head {
                upstream.write_all(h.as_bytes())?;
            }
            upstream.write_all(b"\r\n")?;
        }
    }
    // Whatever the client sends next (a tunnelled request) goes up; the answer comes back.
    let mut up_w = upstream.try_clone()?;
    let pump = thread::spawn(move || {
        let _ = std::io::copy(&mut reader, &mut up_w);
        let _ = up_w.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut upstream, &mut client_w);
    let _ = client_w.shutdown(std::net::Shutdown::Both);
    let _ = pump.join();
    Ok(())
}
