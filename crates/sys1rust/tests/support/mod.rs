//! Test support: a server to talk to, in process or as the real binary, and raw HTTP/1.1 so
//! requests go out byte for byte as written (raw bodies, odd headers, stalls).
//!
//! An in-process [`Server`] runs the library's app on the `tiny` fixture with laya-fixtures'
//! [`Recorded`] engine (upstream's logits, no model): [`Server::send`] drives `app()` with
//! `tower::ServiceExt::oneshot`, and the same app also listens on a real socket on port 0 for
//! the transport checks ([`Server::exchange`], [`Server::stall`], [`Server::connect`]). A
//! process server ([`Server::process`]) starts `sys1rust serve` for what only a process
//! shows: environment variables and signals.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use axum::Router;
use clap::Parser;
use http_body_util::BodyExt;
use laya_core::agent::Agent;
use laya_core::checkpoints::Single;
use laya_core::engine::Forward;
use sys1rust::cli::{Cli, Command as Sub, ServeArgs};
use sys1rust::config::{self, ServeConfig, Served};
use sys1rust::worker::{Owned, Started};
use tower::ServiceExt;

pub use laya_fixtures::fixtures_dir;
use laya_fixtures::Recorded;

/// Runs tests one at a time that measure time (deadlines, latencies) or keep both cores
/// busy: on a small machine one would make the other miss its deadlines.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The app in process: a runtime serving it on a socket, and the router for `oneshot`.
struct InProcess {
    runtime: tokio::runtime::Runtime,
    app: Router,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// A running server; stopped (or killed) when dropped.
pub struct Server {
    pub addr: SocketAddr,
    /// The ready line (a process) or its `address` (in process).
    pub ready: String,
    child: Option<Child>,
    local: Option<InProcess>,
}

/// The `serve` command line of `args`.
pub fn serve_args(args: &[&str]) -> ServeArgs {
    let mut argv = vec!["sys1rust", "serve"];
    argv.extend_from_slice(args);
    match Cli::try_parse_from(argv) {
        Ok(Cli {
            command: Sub::Serve(args),
            ..
        }) => *args,
        Ok(_) => panic!("not a serve command line"),
        Err(e) => panic!("serve {args:?}: {e}"),
    }
}

impl Server {
    /// `sys1rust serve --model <tiny> <extra>` in process on the recorded-logits engine.
    pub fn tiny(extra: &[&str]) -> Server {
        Server::recorded("tiny", extra)
    }

    /// The fixture checkpoint `name` in process on the recorded-logits engine, with `extra`
    /// flags.
    pub fn recorded(name: &str, extra: &[&str]) -> Server {
        let dir = checkpoint(name);
        let engine = Recorded::for_checkpoint(name);
        Server::in_process(extra, &dir, move |dir| {
            let agent = Agent::load(dir, engine).expect("tokenizer and configs");
            Single::new(agent, None)
        })
    }

    /// The fixture checkpoint `name` in process on MLX (the CPU here), `precision` being
    /// `--f32` or `--f16`, with `extra` flags.
    pub fn mlx(name: &str, precision: &str, extra: &[&str]) -> Server {
        let dir = checkpoint(name);
        // What `main` does before MLX starts (on the CUDA backend it sets MLX's settings; the
        // GPU harness runs these tests alone).
        static MLX_SETTINGS: std::sync::Once = std::sync::Once::new();
        MLX_SETTINGS.call_once(|| {
            laya_mlx::backend::configure_process();
        });
        let engine = serve_args(&["--model", dir.to_str().expect("utf-8"), precision])
            .model
            .engine;
        let mut flags = vec![precision];
        flags.extend_from_slice(extra);
        Server::in_process(&flags, &dir, move |dir| {
            Single::new(engine.load_agent(dir).expect("the checkpoint loads"), None)
        })
    }

    /// [`Server::tiny`] whose engine waits at a [`Gate`] before every forward pass.
    pub fn gated(extra: &[&str]) -> (Server, std::sync::Arc<Gate>) {
        Server::gated_as(extra, |engine| engine)
    }

    /// [`Server::gated`] on an [`Unshared`] engine: every request runs alone.
    pub fn gated_unshared(extra: &[&str]) -> (Server, std::sync::Arc<Gate>) {
        Server::gated_as(extra, Unshared)
    }

    /// [`Server::gated`] with its engine wrapped by `wrap`.
    fn gated_as<F: Forward + Send + 'static>(
        extra: &[&str],
        wrap: impl FnOnce(Gated<Recorded>) -> F,
    ) -> (Server, std::sync::Arc<Gate>) {
        let gate = std::sync::Arc::new(Gate::default());
        let engine = wrap(Gated {
            inner: Recorded::for_checkpoint("tiny"),
            gate: gate.clone(),
        });
        let server = Server::in_process(extra, &checkpoint("tiny"), move |dir| {
            let agent = Agent::load(dir, engine).expect("tokenizer and configs");
            Single::new(agent, None)
        });
        (server, gate)
    }

    /// `serve --model <dir> <extra>` in process, the checkpoints built by `build` on the
    /// engine worker.
    pub fn in_process<C, B>(extra: &[&str], dir: &std::path::Path, build: B) -> Server
    where
        C: Owned + 'static,
        B: FnOnce(&std::path::Path) -> C + Send + 'static,
    {
        let build = std::sync::Mutex::new(Some(build));
        Server::in_process_pool(extra, dir, &[0], true, move |dir, _| {
            let build = build
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .ok_or_else(|| anyhow::anyhow!("one worker builds once"))?;
            Ok(build(dir))
        })
    }

    /// [`Server::in_process`] with one engine worker per entry of `ordinals`, each built by
    /// `build(dir, ordinal)` on its own thread (an `Err` is a worker that failed to load).
    /// Without `wait_for_load` it listens at once, while the workers still load (as `serve`
    /// does): requests then wait in their worker's queue.
    pub fn in_process_pool<C, B>(
        extra: &[&str],
        dir: &std::path::Path,
        ordinals: &[usize],
        wait_for_load: bool,
        build: B,
    ) -> Server
    where
        C: Owned + 'static,
        B: Fn(&std::path::Path, usize) -> anyhow::Result<C> + Send + Sync + 'static,
    {
        Server::in_process_configured(extra, dir, ordinals, wait_for_load, |_| {}, build)
    }

    /// [`Server::in_process_pool`] with its configuration changed by `configure` first (what
    /// `--model` cannot set, such as the router's idle unload).
    pub fn in_process_configured<C, B>(
        extra: &[&str],
        dir: &std::path::Path,
        ordinals: &[usize],
        wait_for_load: bool,
        configure: impl FnOnce(&mut ServeConfig),
        build: B,
    ) -> Server
    where
        C: Owned + 'static,
        B: Fn(&std::path::Path, usize) -> anyhow::Result<C> + Send + Sync + 'static,
    {
        let mut args = vec!["--model", dir.to_str().expect("utf-8 path"), "--port", "0"];
        args.extend_from_slice(extra);
        let args = serve_args(&args);
        let label = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut cfg =
            ServeConfig::from_args(&args, &Served::Single { label }).expect("configuration");
        configure(&mut cfg);
        let dir = dir.to_path_buf();
        let build = move |ordinal| Ok((build(&dir, ordinal)?, loaded_info()));
        let state = if wait_for_load {
            config::start_pool(&cfg, ordinals, build)
                .expect("the engine workers start")
                .0
        } else {
            let spawned = config::spawn(&cfg, String::from("cpu"), ordinals, build)
                .expect("the engine workers start");
            let (readiness, loaded) = (spawned.state.readiness.clone(), spawned.loaded);
            std::thread::spawn(move || {
                if let Ok(Ok(started)) = loaded.recv() {
                    readiness.loaded(started);
                }
            });
            spawned.state
        };
        let app = sys1rust::http::app(state);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind((cfg.host.as_str(), 0)))
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        runtime.spawn(sys1rust::server::serve(
            listener,
            app.clone(),
            cfg.conn,
            async move {
                let _ = stopped.await;
            },
        ));
        Server {
            addr,
            ready: format!("{{\"address\":\"{addr}\"}}"),
            child: None,
            local: Some(InProcess {
                runtime,
                app,
                stop: Some(stop),
            }),
        }
    }

    /// Starts the real `sys1rust serve --port 0` with `args` and `env`, waiting for the
    /// ready line.
    pub fn process(args: &[&str], env: &[(&str, &str)]) -> Server {
        Server::process_in(&std::env::current_dir().expect("cwd"), args, env)
    }

    /// [`Server::process`] in the working directory `cwd`.
    pub fn process_in(cwd: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sys1rust"));
        cmd.current_dir(cwd);
        cmd.env("RUST_LOG", "warn").stderr(Stdio::inherit());
        Server::spawn(cmd, args, env)
    }

    /// [`Server::process`] with its log (stderr) written to `log`, at the log settings of
    /// `args` and `env` (no `RUST_LOG`).
    pub fn process_logged(args: &[&str], env: &[(&str, &str)], log: &std::path::Path) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sys1rust"));
        let file = std::fs::File::create(log).expect("log file");
        cmd.env_remove("RUST_LOG").stderr(file);
        Server::spawn(cmd, args, env)
    }

    fn spawn(mut cmd: Command, args: &[&str], env: &[(&str, &str)]) -> Server {
        cmd.arg("serve").args(["--port", "0"]).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdout(Stdio::piped());
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
            addr,
            ready: line,
            child: Some(child),
            local: None,
        }
    }

    /// A server process started by the caller, its ready line read.
    pub fn from_child(child: Child, addr: SocketAddr, ready: String) -> Server {
        Server {
            addr,
            ready,
            child: Some(child),
            local: None,
        }
    }

    /// The real binary on the `tiny` fixture (MLX, f32 on the CPU).
    pub fn process_tiny(extra: &[&str], env: &[(&str, &str)]) -> Server {
        let dir = checkpoint("tiny");
        let mut args = vec!["--model", dir.to_str().expect("utf-8 path")];
        args.extend_from_slice(extra);
        Server::process(&args, env)
    }

    /// The process of a [`Server::process`] server.
    pub fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("a process server")
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(120)))
            .expect("timeout");
        s
    }

    /// One request: through `oneshot` in process (unless the headers frame the body
    /// themselves, which only a socket can carry), else on a fresh connection.
    pub fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Response {
        let framed = headers.iter().any(|(k, _)| {
            k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("transfer-encoding")
        });
        match &self.local {
            Some(local) if !framed => local.oneshot(method, path, headers, body),
            _ => {
                let mut s = self.connect();
                write_request(&mut s, method, path, headers, body);
                read_response(&mut s)
            }
        }
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

impl InProcess {
    fn oneshot(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Response {
        let mut req = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "test");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let bytes = body.map(<[u8]>::to_vec).unwrap_or_default();
        if body.is_some() {
            req = req.header("content-length", bytes.len());
        }
        let req = req
            .body(axum::body::Body::from(bytes))
            .expect("a valid request");
        self.runtime.block_on(async {
            let resp = self.app.clone().oneshot(req).await.expect("infallible");
            let status = resp.status().as_u16();
            let headers = resp
                .headers()
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_ascii_lowercase(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect();
            let body = resp
                .into_body()
                .collect()
                .await
                .expect("the body")
                .to_bytes()
                .to_vec();
            Response {
                status,
                headers,
                body,
            }
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(local) = &mut self.local {
            if let Some(stop) = local.stop.take() {
                let _ = stop.send(());
            }
        }
    }
}

/// Holds every forward pass until opened, and counts what reached the engine: a test can
/// keep a request running while it queues others behind it.
#[derive(Default)]
pub struct Gate {
    /// Whether it is open, and how many passes may go through while it is closed.
    open: std::sync::Mutex<(bool, usize)>,
    opened: std::sync::Condvar,
    /// Forward passes started.
    calls: std::sync::atomic::AtomicUsize,
}

impl Gate {
    pub fn open(&self) {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).0 = true;
        self.opened.notify_all();
    }

    /// Holds the passes that start from now on.
    pub fn close(&self) {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).0 = false;
    }

    /// Lets one more pass through while closed (the one held now, or the next).
    pub fn let_one(&self) {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).1 += 1;
        self.opened.notify_all();
    }

    /// Forward passes that reached the engine.
    pub fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits (up to 10 s) until `n` forward passes have reached the engine.
    pub fn wait_calls(&self, n: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.calls() < n {
            assert!(
                std::time::Instant::now() < deadline,
                "{} forward passes, expected {n}",
                self.calls()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

pub struct Gated<F> {
    pub inner: F,
    pub gate: std::sync::Arc<Gate>,
}

impl<F: Forward> Forward for Gated<F> {
    fn forward(
        &mut self,
        rows: &[laya_core::engine::Row],
    ) -> Result<Vec<laya_core::engine::RowLogits>, laya_core::engine::EngineError> {
        use std::sync::atomic::Ordering;
        self.gate.calls.fetch_add(1, Ordering::SeqCst);
        let mut open = self.gate.open.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match *open {
                (true, _) => break,
                (false, 0) => {}
                (false, ref mut passes) => {
                    *passes -= 1;
                    break;
                }
            }
            open = self
                .gate
                .opened
                .wait(open)
                .unwrap_or_else(|e| e.into_inner());
        }
        drop(open);
        self.inner.forward(rows)
    }

    fn info(&self) -> laya_core::engine::EngineInfo {
        self.inner.info()
    }

    fn batch_invariant(&self) -> bool {
        self.inner.batch_invariant()
    }
}

/// An engine that says its rows may depend on their batch mates (as MLX's does), whatever
/// the one inside gives: its requests never share a pass.
pub struct Unshared<F>(pub F);

impl<F: Forward> Forward for Unshared<F> {
    fn forward(
        &mut self,
        rows: &[laya_core::engine::Row],
    ) -> Result<Vec<laya_core::engine::RowLogits>, laya_core::engine::EngineError> {
        self.0.forward(rows)
    }

    fn info(&self) -> laya_core::engine::EngineInfo {
        self.0.info()
    }
}

/// What the ready line reports of an in-process engine.
fn loaded_info() -> Started {
    Started {
        info: Recorded::default().info(),
        load_ms: 0.0,
        warmup_ms: 0.0,
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

/// One POST on a fresh connection (for callers that each run it on a thread of their own, as
/// concurrent clients), read with a 30 s timeout.
pub fn post_fresh(addr: SocketAddr, headers: &[(&str, &str)], body: &[u8]) -> Response {
    let mut conn = TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    conn.write_all(&request_bytes(
        "POST",
        "/v1/systemone",
        headers,
        Some(body),
        false,
    ))
    .expect("write");
    read_response(&mut conn)
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
