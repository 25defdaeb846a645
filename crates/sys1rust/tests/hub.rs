//! End to end: the real `sys1rust` binary gets a model from a (mock) Hugging Face hub by repo
//! id, serves it, lists it, serves it again offline from the cache, refuses an uncached model
//! offline with advice, and `pull` reports what it has.
//!
//! The hub is laya-hub's own mock (`crates/laya-hub/tests/support/mock.rs`, std only): it
//! answers `/{repo}/resolve/{revision}/{path}` with `X-Repo-Commit`, git blob ids as `ETag`
//! and, for LFS files, a 302 to a second "CDN" origin carrying `X-Linked-Etag` (sha256) and
//! `X-Linked-Size`. It serves the fixture checkpoint `checkpoints/tiny` (read into memory at
//! test time; nothing is written into the repo) as `test-org/tiny`, branch `main` = [`COMMIT`].
//! The cache (`HF_HOME`) is a fresh directory under the target directory.

#[allow(dead_code)]
#[path = "../../laya-hub/tests/support/mock.rs"]
mod mock;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use laya_hub::CHECKPOINT_FILES;
use mock::{Fault, MockHub, MockRepo};

const REPO: &str = "test-org/tiny";
/// What `main` of `test-org/tiny` points at.
const COMMIT: &str = "7e5700000000000000000000000000000dec1de1";
/// How long any one process may take (start, download, load, answer).
const STEP_LIMIT: Duration = Duration::from_secs(45);

const DECISION: &str = r#"{"state":"I was charged twice","questions":{"dept":{"type":"choice","instructions":"which team?","criteria":{"billing":"refunds","tech":"bugs"}}}}"#;

// ---- the two hashes the mock needs (`super::{git_blob_id, sha256_hex}`), without crates ----

fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    for block in padded(data).chunks(64) {
        let mut w = [0u32; 64];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            (hh, g, f, e, d, c, b, a) = (g, f, e, d.wrapping_add(t1), c, b, a, t1.wrapping_add(t2));
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (o, x) in out.chunks_mut(4).zip(h) {
        o.copy_from_slice(&x.to_be_bytes());
    }
    out
}

fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0];
    for block in padded(data).chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5a827999),
                20..=39 => (b ^ c ^ d, 0x6ed9eba1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8f1bbcdc),
                _ => (b ^ c ^ d, 0xca62c1d6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, t);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (o, x) in out.chunks_mut(4).zip(h) {
        o.copy_from_slice(&x.to_be_bytes());
    }
    out
}

/// Merkle–Damgård padding shared by SHA-1 and SHA-256.
fn padded(data: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(data.len() + 72);
    m.extend_from_slice(data);
    m.push(0x80);
    while m.len() % 64 != 56 {
        m.push(0);
    }
    m.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    m
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(&sha256(bytes))
}

/// `git hash-object`: sha1 of `"blob <len>\0"` + bytes.
fn git_blob_id(bytes: &[u8]) -> String {
    let mut m = format!("blob {}\0", bytes.len()).into_bytes();
    m.extend_from_slice(bytes);
    hex(&sha1(&m))
}

// ---- processes ----

/// A scratch directory under the target directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    /// A directory of its own for each caller: the tests of this module run in parallel.
    fn new() -> Scratch {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("sys1rust-models-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `sys1rust <args>` with a scrubbed Hugging Face / sys1rust environment plus `env`.
fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sys1rust"));
    cmd.args(args);
    for k in [
        "HF_HOME",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HF_ENDPOINT",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_TOKEN_PATH",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "SYS1_MODEL",
        "SYS1_REVISION",
        "SYS1_DEVICE",
        "SYS1_REPO_LABEL",
        "LAYA_HOST",
        "LAYA_PORT",
        "LAYA_API_KEY",
        // The mock is on loopback: no proxy may stand between.
        "NO_PROXY",
        "no_proxy",
        "ALL_PROXY",
        "all_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
    ] {
        cmd.env_remove(k);
    }
    cmd.env("RUST_LOG", "warn").envs(env.iter().copied());
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Collects a pipe's lines on a thread (echoed to the test's stderr for failures).
fn collect<R: Read + Send + 'static>(pipe: R, tag: &'static str) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            eprintln!("[{tag}] {line}");
            sink.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        }
    });
    lines
}

fn joined(lines: &Arc<Mutex<Vec<String>>>) -> String {
    lines.lock().unwrap_or_else(|p| p.into_inner()).join("\n")
}

/// What a finished command printed.
struct Finished {
    success: bool,
    stdout: String,
    stderr: String,
}

/// Runs a command to completion, killing it after [`STEP_LIMIT`].
fn run(args: &[&str], env: &[(&str, &str)]) -> Finished {
    let mut child = command(args, env).spawn().expect("sys1rust starts");
    let out = collect(child.stdout.take().expect("stdout"), "out");
    let err = collect(child.stderr.take().expect("stderr"), "err");
    let deadline = Instant::now() + STEP_LIMIT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "sys1rust {args:?} ran past {STEP_LIMIT:?}\n{}",
                joined(&err)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The pipes close with the process; give the readers a moment to drain them.
    std::thread::sleep(Duration::from_millis(100));
    Finished {
        success: status.success(),
        stdout: joined(&out),
        stderr: joined(&err),
    }
}

/// A running `sys1rust serve` and everything it wrote to stderr so far.
struct Serving {
    server: crate::support::Server,
    ready: serde_json::Value,
    stderr: Arc<Mutex<Vec<String>>>,
}

/// Starts `sys1rust serve --port 0 <args>` and waits (at most [`STEP_LIMIT`]) for its ready line.
fn serve(args: &[&str], env: &[(&str, &str)]) -> Serving {
    let mut all = vec!["serve", "--port", "0"];
    all.extend_from_slice(args);
    let mut child: Child = command(&all, env).spawn().expect("sys1rust starts");
    let stderr = collect(child.stderr.take().expect("stderr"), "serve");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = match rx.recv_timeout(STEP_LIMIT) {
        Ok(line) if !line.is_empty() => line,
        other => {
            let _ = child.kill();
            let _ = child.wait();
            std::thread::sleep(Duration::from_millis(100));
            panic!(
                "sys1rust {all:?}: no ready line ({other:?})\n{}",
                joined(&stderr)
            );
        }
    };
    let ready: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("ready line {line:?}: {e}"));
    let addr = ready["address"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    Serving {
        server: crate::support::Server::from_child(child, addr, line),
        ready,
        stderr,
    }
}

impl Serving {
    /// Asserts a decision request is answered (200 with the question's result) and that
    /// `/health` reports `commit`.
    fn answers(&self, commit: &str) {
        let resp = self.server.post_json("/v1/systemone", DECISION);
        assert_eq!(resp.status, 200, "{}", resp.text());
        assert!(
            resp.text()
                .contains("\"dept\":{\"type\":\"choice\",\"choice\":"),
            "{}",
            resp.text()
        );
        let health = self.server.send("GET", "/health", &[], None);
        assert_eq!(health.status, 200, "{}", health.text());
        assert!(
            health.text().contains(commit),
            "/health does not name {commit}: {}",
            health.text()
        );
    }
}

/// The checkpoint files of the fixture, by repo path, read into memory (never copied into the repo).
fn fixture_files() -> BTreeMap<String, Vec<u8>> {
    let src = crate::support::fixtures_dir()
        .join("checkpoints")
        .join("tiny");
    CHECKPOINT_FILES
        .iter()
        .map(|p| {
            let bytes = std::fs::read(src.join(p))
                .unwrap_or_else(|e| panic!("{}: {e}", src.join(p).display()));
            ((*p).to_owned(), bytes)
        })
        .collect()
}

#[test]
fn hashes_match_git_and_sha256sum() {
    // `printf 'hello\n' | git hash-object --stdin`, `printf 'hello\n' | sha256sum`
    assert_eq!(
        git_blob_id(b"hello\n"),
        "ce013625030ba8dba906f756967f9e9ca394464a"
    );
    assert_eq!(
        sha256_hex(b"hello\n"),
        "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
    );
    assert_eq!(
        sha256_hex(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    // Two blocks (the padding spills over).
    assert_eq!(
        sha256_hex(&[b'a'; 60]),
        "11ee391211c6256460b6ed375957fadd8061cafbb31daf967db875aebd5aaad4"
    );
    assert_eq!(
        hex(&sha1(b"abc")),
        "a9993e364706816aba3e25717850c26c9cd0d89d"
    );
}

#[test]
fn serve_by_repo_id_downloads_lists_and_serves_offline() {
    let started = Instant::now();
    assert!(COMMIT.len() == 40 && COMMIT.bytes().all(|b| b.is_ascii_hexdigit()));
    let scratch = Scratch::new();
    let home = scratch.0.join("hf-home");
    let kernels = scratch.0.join("kernels");
    let (home_s, kernels_s) = (
        home.to_str().expect("utf-8"),
        kernels.to_str().expect("utf-8"),
    );
    let snapshot = home
        .join("hub")
        .join("models--test-org--tiny")
        .join("snapshots")
        .join(COMMIT);

    let files = fixture_files();
    let hub = MockHub::start(
        HashMap::from([(REPO.to_owned(), MockRepo::new(COMMIT, files.clone()))]),
        "unused-token",
    );
    let endpoint = hub.endpoint();
    let online = [("HF_HOME", home_s), ("HF_ENDPOINT", endpoint.as_str())];

    // (1) First run: downloads with progress on stderr, then serves the commit `main` is.
    let first = serve(
        &["--model", REPO, "--f32", "--kernel-cache", kernels_s],
        &online,
    );
    assert_eq!(first.ready["event"], "ready");
    assert_eq!(first.ready["revision"], COMMIT, "{}", first.server.ready);
    assert_eq!(first.ready["model"], REPO);
    assert_eq!(
        Path::new(first.ready["dir"].as_str().expect("dir")),
        snapshot
    );
    first.answers(COMMIT);
    let progress = joined(&first.stderr);
    for needle in [
        format!("pulling {REPO}@main"),
        "model.safetensors: downloading".to_owned(),
        "model.safetensors: verifying".to_owned(),
        "model.safetensors: ok".to_owned(),
        "tokenizer/tokenizer_config.json: ok".to_owned(),
    ] {
        assert!(
            progress.contains(&needle),
            "{needle:?} not in the serve stderr:\n{progress}"
        );
    }
    for (path, bytes) in &files {
        assert_eq!(hub.body_gets(path).len(), 1, "{path} downloaded once");
        assert!(
            std::fs::read(snapshot.join(path)).expect("cached file") == *bytes,
            "{path} differs"
        );
    }
    drop(first);

    // (2) `models` lists it as complete at the commit's prefix.
    let models = run(&["models"], &online);
    assert!(models.success, "{}", models.stderr);
    let mut lines = models.stdout.lines();
    assert!(
        lines.next().is_some_and(|h| h.starts_with("NAME")),
        "{}",
        models.stdout
    );
    let row: Vec<&str> = lines
        .find(|l| l.starts_with(REPO))
        .unwrap_or_else(|| panic!("{REPO} not listed:\n{}", models.stdout))
        .split_whitespace()
        .collect();
    // NAME REVISION SIZE(number unit) STATUS PATH
    assert_eq!(row.len(), 6, "{row:?}");
    assert_eq!(
        (row[0], row[1], row[4]),
        (REPO, &COMMIT[..7], "complete"),
        "{row:?}"
    );
    assert_eq!(Path::new(row[5]), snapshot);

    // (5) `pull` (hub up) says name, revision and path; the cached files are only re-verified.
    let pull = run(&["pull", REPO], &online);
    assert!(pull.success, "{}", pull.stderr);
    assert_eq!(
        pull.stdout.trim(),
        format!("{REPO} {COMMIT} {}", snapshot.display())
    );
    for path in files.keys() {
        assert_eq!(hub.body_gets(path).len(), 1, "pull downloaded {path} again");
    }

    // (3) Hub gone: `--offline` serves from the cache.
    drop(hub);
    let offline = serve(
        &["--model", REPO, "--offline", "--kernel-cache", kernels_s],
        &online,
    );
    assert_eq!(
        offline.ready["revision"], COMMIT,
        "{}",
        offline.server.ready
    );
    assert_eq!(
        Path::new(offline.ready["dir"].as_str().expect("dir")),
        snapshot
    );
    offline.answers(COMMIT);
    let text = joined(&offline.stderr);
    assert!(
        !text.contains("downloading"),
        "offline serve downloaded:\n{text}"
    );
    // (3b) `ps` names what the server has loaded; `rm` refuses a model a server holds.
    let url = format!("http://{}", offline.server.addr);
    let ps = run(&["ps", "--url", &url], &online);
    assert!(ps.success, "{}", ps.stderr);
    let rows: Vec<Vec<&str>> = ps
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["NAME", "REVISION", "DEVICE"], "{}", ps.stdout);
    // `--model` serves one checkpoint under all three names.
    assert_eq!(rows.len(), 4, "{}", ps.stdout);
    assert!(
        rows[1..].iter().all(|r| r[1] == COMMIT && r[2] == "cpu"),
        "{}",
        ps.stdout
    );
    let busy = run(&["rm", "--yes", REPO], &online);
    assert!(!busy.success, "rm deleted a served model");
    assert!(
        busy.stderr.contains("in use by a running server"),
        "{}",
        busy.stderr
    );
    assert!(snapshot.join("model.safetensors").is_file());
    drop(offline);

    // (3c) `models --json`, then `rm`: asks for --yes off a terminal, then deletes it all.
    let listed = run(&["models", "--json"], &online);
    assert!(listed.success, "{}", listed.stderr);
    let rows: serde_json::Value = serde_json::from_str(&listed.stdout).expect("JSON");
    let row = rows
        .as_array()
        .and_then(|r| r.iter().find(|m| m["name"] == REPO))
        .unwrap_or_else(|| panic!("{REPO} not listed: {}", listed.stdout));
    assert_eq!(
        (&row["revision"], &row["complete"], &row["pinned"]),
        (
            &serde_json::json!(COMMIT),
            &serde_json::json!(true),
            &serde_json::json!(false)
        )
    );
    assert_eq!(Path::new(row["path"].as_str().expect("path")), snapshot);
    let total: u64 = files.values().map(|b| b.len() as u64).sum();
    assert_eq!(row["size"], total, "{}", listed.stdout);
    let unconfirmed = run(&["rm", REPO], &online);
    assert!(!unconfirmed.success);
    assert!(
        unconfirmed.stderr.contains("pass --yes"),
        "{}",
        unconfirmed.stderr
    );
    let removed = run(&["rm", "--yes", REPO], &online);
    assert!(removed.success, "{}", removed.stderr);
    assert!(
        removed.stdout.starts_with(&format!("deleted {REPO} (")),
        "{}",
        removed.stdout
    );
    assert!(!snapshot.exists());
    let after = run(&["models", "--json"], &online);
    assert_eq!(after.stdout.trim(), "[]", "{}", after.stdout);
    let again = run(&["rm", "--yes", REPO], &online);
    assert!(
        again.stderr.contains("is not in the cache"),
        "{}",
        again.stderr
    );

    // (4) HF_HUB_OFFLINE=1 and a model not in the cache: a clear error, no server.
    let other = run(
        &[
            "serve",
            "--model",
            "test-org/other",
            "--port",
            "0",
            "--kernel-cache",
            kernels_s,
        ],
        &[
            ("HF_HOME", home_s),
            ("HF_ENDPOINT", endpoint.as_str()),
            ("HF_HUB_OFFLINE", "1"),
        ],
    );
    assert!(
        !other.success,
        "serving an uncached model offline succeeded:\n{}",
        other.stdout
    );
    for needle in [
        "test-org/other",
        "sys1rust pull test-org/other",
        "--model DIR",
    ] {
        assert!(
            other.stderr.contains(needle),
            "{needle:?} not in:\n{}",
            other.stderr
        );
    }
    assert!(!other.stdout.contains("\"ready\""), "{}", other.stdout);

    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}

/// `serve` preloading the mock hub's repo (the model "slow") into `home`, its weights sent
/// `chunk` bytes every `delay`; its stderr collected.
fn serve_slow_preload(
    home: &Path,
    hub: &MockHub,
    chunk: usize,
    delay: Duration,
) -> (Child, Arc<Mutex<Vec<String>>>) {
    hub.fault("model.safetensors", Fault::Slow { chunk, delay });
    let endpoint = hub.endpoint();
    let extra = format!(r#"{{"slow": "{REPO}"}}"#);
    let mut child = command(
        &[
            "serve",
            "--port",
            "0",
            "--extra-models",
            &extra,
            "--models",
            "slow",
        ],
        &[
            ("HF_HOME", home.to_str().expect("utf-8")),
            ("HF_ENDPOINT", endpoint.as_str()),
            ("RUST_LOG", "info"),
        ],
    )
    .spawn()
    .expect("sys1rust starts");
    let stderr = collect(child.stderr.take().expect("stderr"), "serve");
    (child, stderr)
}

/// The router downloads what it preloads after the port has opened: while the download runs
/// `/ready` is 503 `loading` and `/health` 200; once the checkpoint is loaded `/ready` is 200
/// and the checkpoint answers.
#[test]
fn ready_is_503_while_the_preload_downloads() {
    let scratch = Scratch::new();
    let home = scratch.0.join("hf-home");
    let hub = MockHub::start(
        HashMap::from([(REPO.to_owned(), MockRepo::new(COMMIT, fixture_files()))]),
        "unused-token",
    );
    // About 4 s for the 7 MB of weights.
    let (mut child, stderr) =
        serve_slow_preload(&home, &hub, 512 * 1024, Duration::from_millis(300));
    let stdout = collect(child.stdout.take().expect("stdout"), "out");
    let deadline = Instant::now() + STEP_LIMIT;
    let addr: std::net::SocketAddr = loop {
        let found = joined(&stderr)
            .lines()
            .find(|l| l.contains("listening"))
            .and_then(|l| l.split("addr=").nth(1))
            .and_then(|a| a.split_whitespace().next())
            .and_then(|a| a.parse().ok());
        if let Some(addr) = found {
            break addr;
        }
        if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
            let _ = child.kill();
            panic!("no listening line:\n{}", joined(&stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let server = crate::support::Server::from_child(child, addr, String::new());
    let ready = server.send("GET", "/ready", &[], None);
    assert_eq!(
        (ready.status, ready.text().as_str()),
        (503, r#"{"status":"loading"}"#),
        "{}",
        joined(&stderr)
    );
    assert!(joined(&stdout).is_empty(), "a ready line before the load");
    let health = server.send("GET", "/health", &[], None);
    assert_eq!(health.status, 200, "{}", health.text());
    assert!(
        health.text().starts_with(r#"{"status":"ok","loaded":[]"#),
        "{}",
        health.text()
    );

    let deadline = Instant::now() + STEP_LIMIT;
    loop {
        let ready = server.send("GET", "/ready", &[], None);
        if ready.status == 200 {
            assert_eq!(ready.text(), r#"{"status":"ready"}"#);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never ready:\n{}",
            joined(&stderr)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        joined(&stdout).contains(r#""event":"ready""#),
        "the ready line follows the load"
    );
    let body = DECISION.replacen('{', r#"{"model":"slow","#, 1);
    let resp = server.post_json("/v1/systemone", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(resp.text().contains(r#""model":"slow""#), "{}", resp.text());
}

/// A SIGTERM while the preload downloads ends the process at once, as upstream (which has no
/// signal handlers while it preloads) ends: the download is abandoned, not waited for.
#[test]
fn sigterm_while_the_preload_downloads_exits_at_once() {
    let scratch = Scratch::new();
    let home = scratch.0.join("hf-home");
    let hub = MockHub::start(
        HashMap::from([(REPO.to_owned(), MockRepo::new(COMMIT, fixture_files()))]),
        "unused-token",
    );
    // Minutes for the 7 MB of weights, each chunk well inside the read timeout.
    let (mut child, stderr) = serve_slow_preload(&home, &hub, 64 * 1024, Duration::from_secs(2));
    let deadline = Instant::now() + STEP_LIMIT;
    while !joined(&stderr).contains("model.safetensors") {
        if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
            let _ = child.kill();
            panic!("the download never started:\n{}", joined(&stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let signalled = Instant::now();
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill")
        .success());
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if signalled.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!(
                "still running 10 s after SIGTERM, mid-download:\n{}",
                joined(&stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}\n{}", joined(&stderr));
    assert!(
        joined(&stderr).contains("stopped while loading"),
        "{}",
        joined(&stderr)
    );
}

/// No network: a host name that does not resolve fails at once (no retries), says so once,
/// and suggests what works offline; an unknown model name instead lists the names and
/// aliases.
#[test]
fn unreachable_hub_fails_fast_with_advice() {
    let scratch = Scratch::new();
    let home = scratch.0.join("hf-home");
    let home = home.to_str().expect("utf-8");
    let started = Instant::now();
    let out = run(
        &["pull", REPO],
        &[("HF_HOME", home), ("HF_ENDPOINT", "http://hub.invalid")],
    );
    assert!(!out.success);
    // Three retries would wait 1 + 2 + 3 s.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(!out.stderr.contains("retrying"), "{}", out.stderr);

    let out = run(
        &["serve", "--port", "0", "--model", REPO],
        &[("HF_HOME", home), ("HF_ENDPOINT", "http://hub.invalid")],
    );
    assert!(!out.success);
    for advice in [
        "cannot be reached",
        "--offline",
        "HF_ENDPOINT",
        "--model DIR",
    ] {
        assert!(out.stderr.contains(advice), "{advice}: {}", out.stderr);
    }
    let url = "http://hub.invalid/test-org/tiny/resolve";
    assert_eq!(out.stderr.matches(url).count(), 1, "{}", out.stderr);

    let out = run(
        &["serve", "--port", "0", "--model", "nosuchmodel"],
        &[("HF_HOME", home)],
    );
    assert!(!out.success);
    assert!(out.stderr.contains("english (en, "), "{}", out.stderr);
    assert!(!out.stderr.contains("cannot be reached"), "{}", out.stderr);
}

// ---- the pull display on a terminal ----

/// The screen a terminal would show after `bytes`: enough of VT100 for what indicatif
/// writes (cursor up/down, column, erase line, erase below, carriage return, newline); other
/// escapes (colours, cursor visibility) change nothing visible here.
fn screen(bytes: &[u8]) -> Vec<String> {
    const SCREEN_COLUMNS: usize = 120;
    let text = String::from_utf8_lossy(bytes);
    let mut rows: Vec<Vec<char>> = vec![Vec::new()];
    let (mut row, mut col) = (0usize, 0usize);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => col = 0,
            '\n' => {
                row += 1;
                if rows.len() <= row {
                    rows.push(Vec::new());
                }
            }
            '\x1b' => {
                if chars.peek() != Some(&'[') {
                    chars.next();
                    continue;
                }
                chars.next();
                let mut params = String::new();
                let mut command = ' ';
                for p in chars.by_ref() {
                    if p.is_ascii_alphabetic() || p == '~' {
                        command = p;
                        break;
                    }
                    params.push(p);
                }
                let n = params.trim_start_matches('?').parse::<usize>().ok();
                match command {
                    'A' => row = row.saturating_sub(n.unwrap_or(1).max(1)),
                    'B' => {
                        row += n.unwrap_or(1).max(1);
                        while rows.len() <= row {
                            rows.push(Vec::new());
                        }
                    }
                    'G' => col = n.unwrap_or(1).max(1) - 1,
                    'K' => match n.unwrap_or(0) {
                        0 => rows[row].truncate(col),
                        1 => (0..col.min(rows[row].len())).for_each(|i| rows[row][i] = ' '),
                        _ => rows[row].clear(),
                    },
                    'J' if n.unwrap_or(0) == 0 => {
                        rows[row].truncate(col);
                        rows.truncate(row + 1);
                    }
                    _ => {}
                }
            }
            c if c.is_control() => {}
            c => {
                // Deferred autowrap: the character after the last column starts the next row.
                if col >= SCREEN_COLUMNS {
                    col = 0;
                    row += 1;
                    if rows.len() <= row {
                        rows.push(Vec::new());
                    }
                }
                let line = &mut rows[row];
                while line.len() < col {
                    line.push(' ');
                }
                if col < line.len() {
                    line[col] = c;
                } else {
                    line.push(c);
                }
                col += 1;
            }
        }
    }
    rows.into_iter()
        .map(|r| r.into_iter().collect::<String>().trim_end().to_owned())
        .filter(|r| !r.is_empty())
        .collect()
}

/// Runs `sys1rust <args>` with stderr (and stdin) on a pseudo-terminal 120 columns wide and
/// returns (success, stdout, everything written to the terminal). `kill_when` is polled;
/// when it returns true the process is killed (an interrupted pull).
fn on_terminal(
    args: &[&str],
    env: &[(&str, &str)],
    kill_when: &dyn Fn() -> bool,
) -> (bool, String, Vec<u8>) {
    use std::os::fd::{FromRawFd, OwnedFd};
    let (mut master, mut slave) = (-1, -1);
    let size = libc::winsize {
        ws_row: 40,
        ws_col: 120, // screen()'s SCREEN_COLUMNS
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two descriptors; the name buffer and termios are not asked for.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned by nothing else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let mut cmd = command(args, env);
    cmd.stdin(Stdio::from(slave.try_clone().expect("dup")))
        .stderr(Stdio::from(slave));
    let mut child = cmd.spawn().expect("sys1rust starts");
    drop(cmd);
    let out = collect(child.stdout.take().expect("stdout"), "out");
    let screen_bytes = Arc::new(Mutex::new(Vec::new()));
    let sink = screen_bytes.clone();
    let mut reader = std::fs::File::from(master);
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        // EIO once the last writer of the terminal has gone.
        while let Ok(n @ 1..) = reader.read(&mut buf) {
            sink.lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(&buf[..n]);
        }
    });
    let deadline = Instant::now() + STEP_LIMIT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if kill_when() {
            let _ = child.kill();
            break child.wait().expect("wait");
        }
        assert!(
            Instant::now() < deadline,
            "sys1rust {args:?} ran past {STEP_LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    std::thread::sleep(Duration::from_millis(200));
    let bytes = screen_bytes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    (status.success(), joined(&out), bytes)
}

/// The last line of `screen` that starts with `prefix`, and that it is the only one.
fn only_line<'a>(screen: &'a [String], prefix: &str) -> &'a str {
    let lines: Vec<&String> = screen.iter().filter(|l| l.starts_with(prefix)).collect();
    assert_eq!(
        lines.len(),
        1,
        "one line for {prefix:?} in:\n{}",
        screen.join("\n")
    );
    lines[0]
}

/// MiB/s in a line's `(… MiB/s)`, or KiB/s or B/s scaled to MiB/s.
fn rate_mib(line: &str) -> f64 {
    let end = line
        .rfind("/s)")
        .unwrap_or_else(|| panic!("no rate in {line:?}"));
    let start = line[..end]
        .rfind('(')
        .unwrap_or_else(|| panic!("no rate in {line:?}"))
        + 1;
    let (value, unit) = line[start..end]
        .split_once(' ')
        .unwrap_or_else(|| panic!("{line:?}"));
    let v: f64 = value.parse().unwrap_or_else(|_| panic!("{line:?}"));
    v / match unit {
        "B" => 1048576.0,
        "KiB" => 1024.0,
        "MiB" => 1.0,
        "GiB" => 1.0 / 1024.0,
        other => panic!("unit {other} in {line:?}"),
    }
}

/// On a terminal, `pull` shows one line per file and a total line; finished, each file line
/// says `ok` with its full size, no bar or `verifying` line is left, log lines stand on lines
/// of their own, and an interrupted pull run again says where it resumes and reports the
/// speed of the bytes it fetched, not of those already on disk. `show` then reports the
/// files as cached.
#[test]
fn pull_display_on_a_terminal_slow_then_resumed() {
    let scratch = Scratch::new();
    let home = scratch.0.join("hf-home");
    let home_s = home.to_str().expect("utf-8");
    let files = fixture_files();
    let model_len = files["model.safetensors"].len() as u64;
    let hub = MockHub::start(
        HashMap::from([(REPO.to_owned(), MockRepo::new(COMMIT, files.clone()))]),
        "unused-token",
    );
    let endpoint = hub.endpoint();
    let env = [
        ("HF_HOME", home_s),
        ("HF_ENDPOINT", endpoint.as_str()),
        ("RUST_LOG", "info"),
    ];
    // About 12 MiB/s: the first run is interrupted part-way.
    let slow = Fault::Slow {
        chunk: 64 * 1024,
        delay: Duration::from_millis(5),
    };
    hub.fault("model.safetensors", slow.clone());
    let blobs = home.join("hub/models--test-org--tiny/blobs");
    let partial = || {
        std::fs::read_dir(&blobs)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".incomplete"))
            .any(|e| e.metadata().is_ok_and(|m| m.len() >= 2 << 20))
    };
    let (ok, _, _) = on_terminal(&["pull", REPO], &env, &partial);
    assert!(!ok, "the first pull was to be interrupted");

    hub.fault("model.safetensors", slow);
    let (ok, stdout, bytes) = on_terminal(&["pull", REPO], &env, &|| false);
    let shown = screen(&bytes);
    let text = shown.join("\n");
    assert!(ok, "{text}");
    assert!(stdout.contains(COMMIT), "{stdout}");
    assert!(text.contains(&format!("pulling {REPO}@main")), "{text}");
    for path in CHECKPOINT_FILES {
        let line = only_line(&shown, &format!("{path} "));
        assert!(line.contains(" ok  "), "{line}");
    }
    let model = only_line(&shown, "model.safetensors ");
    let size = laya_hub::format_size(model_len);
    assert!(model.contains(&format!(" ok  {size}, fetched ")), "{model}");
    assert!(model.contains(", resumed at "), "{model}");
    // The mock sends about 12 MiB/s; counting the resumed bytes would read far more.
    let rate = rate_mib(model);
    assert!(rate > 0.0 && rate < 40.0, "{rate} MiB/s: {model}");
    let total = only_line(&shown, "total ");
    assert!(total.contains(" ok  5 files, "), "{total}");
    for line in &shown {
        assert!(
            !line.contains("verifying"),
            "a verifying line is left: {text}"
        );
        assert!(!line.contains("=>"), "an unfinished bar is left: {text}");
        if line.contains("INFO") {
            assert!(
                !CHECKPOINT_FILES.iter().any(|p| line.starts_with(p)) && !line.contains(" ok  "),
                "a log line inside the display: {text}"
            );
        }
    }
    assert!(
        text.contains("INFO") && text.contains("verified"),
        "the INFO log lines were to be shown: {text}"
    );
    // The terminal saw the resume while it happened, not just in the result.
    let raw = String::from_utf8_lossy(&bytes);
    assert!(
        raw.contains("resuming at ") && raw.contains(&format!(" of {size}")),
        "{raw}"
    );

    // `show` reads the cache only: every file cached, configs from the snapshot.
    let out = run(&["show", REPO, "--json"], &[("HF_HOME", home_s)]);
    assert!(out.success, "{}", out.stderr);
    let shown: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(shown["revision"], COMMIT);
    assert_eq!(shown["complete"], true);
    assert_eq!(shown["pinned"], false);
    let listed = shown["files"].as_array().expect("files");
    assert_eq!(listed.len(), CHECKPOINT_FILES.len());
    for f in listed {
        let path = f["path"].as_str().expect("path");
        assert_eq!(f["state"], "cached", "{f}");
        assert_eq!(f["size"], files[path].len() as u64, "{f}");
    }
    let encoder: serde_json::Value =
        serde_json::from_slice(&files["encoder/config.json"]).expect("encoder config");
    assert_eq!(shown["encoder"], encoder);
    let out = run(&["show", REPO], &[("HF_HOME", home_s)]);
    assert!(out.success, "{}", out.stderr);
    assert!(
        out.stdout.contains("  cached      complete, "),
        "{}",
        out.stdout
    );
    let hidden = out
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("hidden_size "));
    assert_eq!(
        hidden.map(|l| l.split_whitespace().collect::<Vec<_>>()),
        Some(vec!["hidden_size", &encoder["hidden_size"].to_string()]),
        "{}",
        out.stdout
    );
}

/// `show` of a known model with nothing cached lists its pinned files as missing and says
/// how to get them, without touching the network.
#[test]
fn show_a_known_model_before_any_pull() {
    let scratch = Scratch::new();
    let home = scratch.0.join("hf-home");
    let home = home.to_str().expect("utf-8");
    let env = [("HF_HOME", home), ("HF_ENDPOINT", "http://hub.invalid")];
    let out = run(&["show", "typed-decisions", "--json"], &env);
    assert!(out.success, "{}", out.stderr);
    let shown: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(shown["name"], "typed-decisions");
    assert_eq!(shown["pinned"], true);
    assert_eq!(shown["complete"], false);
    assert_eq!(shown["checkpoint"], serde_json::Value::Null);
    let files = shown["files"].as_array().expect("files");
    assert_eq!(files.len(), CHECKPOINT_FILES.len());
    assert!(files
        .iter()
        .all(|f| f["state"] == "missing" && f["size"].is_u64()));
    let out = run(&["show", "typed-decisions"], &env);
    assert!(out.success, "{}", out.stderr);
    assert!(
        out.stdout
            .contains("nothing yet: sys1rust pull typed-decisions"),
        "{}",
        out.stdout
    );
    let out = run(&["show", "test-org/uncached"], &env);
    assert!(!out.success);
    assert!(
        out.stderr.contains("sys1rust pull test-org/uncached"),
        "{}",
        out.stderr
    );
}

/// `pull` without a model pulls what `serve` would preload: the router's registry narrowed
/// by `LAYA_MODELS` (here to two repos the mock hub serves, registered through
/// `LAYA_EXTRA_MODELS`; the built-in names are narrowed away, so nothing else is asked of the
/// network). One name pulls one repo; both names pull the second one too, and the first is
/// already cached.
#[test]
fn pull_without_a_model_pulls_what_serve_would_preload() {
    let scratch = Scratch::new();
    let home = scratch.0.join("hf-home");
    let other = "test-org/other";
    let other_commit = "0be570000000000000000000000000000dec1de2";
    let hub = MockHub::start(
        HashMap::from([
            (REPO.to_owned(), MockRepo::new(COMMIT, fixture_files())),
            (
                other.to_owned(),
                MockRepo::new(other_commit, fixture_files()),
            ),
        ]),
        "unused-token",
    );
    let endpoint = hub.endpoint();
    let extra = format!(r#"{{"first": "{REPO}", "second": "{other}"}}"#);
    let env = |models: &'static str| {
        vec![
            ("HF_HOME", home.to_str().expect("utf-8").to_owned()),
            ("HF_ENDPOINT", endpoint.clone()),
            ("LAYA_EXTRA_MODELS", extra.clone()),
            ("LAYA_MODELS", models.to_owned()),
        ]
    };
    let pull = |models: &'static str| {
        let env = env(models);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let done = run(&["pull"], &env);
        assert!(done.success, "pull ({models}):\n{}", done.stderr);
        let lines: Vec<String> = done.stdout.lines().map(str::to_owned).collect();
        lines
    };
    let cached = || {
        let env = env("");
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let listed = run(&["models", "--json"], &env);
        assert!(listed.success, "{}", listed.stderr);
        let rows: serde_json::Value = serde_json::from_str(&listed.stdout).expect("json");
        let mut repos: Vec<(String, bool)> = rows
            .as_array()
            .expect("array")
            .iter()
            .map(|r| {
                (
                    r["repo"].as_str().expect("repo").to_owned(),
                    r["complete"].as_bool().expect("complete"),
                )
            })
            .collect();
        repos.sort();
        repos
    };

    let one = pull("second");
    assert_eq!(one.len(), 1, "{one:?}");
    assert!(
        one[0].contains(&other_commit[..7]) || one[0].contains(other_commit),
        "{one:?}"
    );
    assert_eq!(cached(), [(other.to_owned(), true)]);

    let both = pull("first,second");
    assert_eq!(both.len(), 2, "{both:?}");
    assert_eq!(
        cached(),
        [(other.to_owned(), true), (REPO.to_owned(), true)],
        "every preloaded repo, complete"
    );
    // The second pull fetched the first repo's weights once and the second's not again.
    assert_eq!(hub.body_gets("model.safetensors").len(), 2);
}
