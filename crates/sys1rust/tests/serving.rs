//! What operators and orchestrators see: one log line per request (text and JSON), request
//! ids, `/ready` during a drain (hub.rs has it across a start that downloads), SIGTERM's drain and grace period, `POST /drain`,
//! `--version`, `sys1rust health` and upstream's `LAYA_LOG_LEVEL` rule.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use std::io::Write;

use crate::support::{checkpoint, read_response, serial, Server};

const BODY: &str = r#"{"state":"I was charged twice for my subscription this month","questions":{"dept":{"type":"choice","instructions":"which team?","criteria":{"billing":"refunds","tech":"bugs"}},"urgent":{"type":"noul","instructions":"is it urgent?"}}}"#;

/// A file under the test binary's scratch directory, fresh for each caller.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("serving");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir_all(&path);
    path
}

fn tiny_dir() -> String {
    checkpoint("tiny").to_str().expect("utf-8 path").to_owned()
}

fn sigterm(s: &mut Server) {
    let pid = s.child().id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill")
        .success());
}

fn exit_within(s: &mut Server, limit: Duration) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = s.child().try_wait().expect("try_wait") {
            return status;
        }
        assert!(started.elapsed() < limit, "still running after {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `"request"` events of a JSON log.
fn request_events(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["fields"]["message"] == "request")
        .collect()
}

fn post(s: &Server, headers: &[(&str, &str)], body: &str) -> crate::support::Response {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    s.send("POST", "/v1/systemone", &all, Some(body.as_bytes()))
}

/// A 200, a 400 and a 503, each logged once at INFO as JSON with its id, status and facts;
/// neither the bearer nor the body reaches the log.
#[test]
fn json_log_line_per_request() {
    let _serial = serial();
    let log = scratch("json.log");
    let key = "k3y-never-logged";
    let bearer = format!("Bearer {key}");
    let auth = [("authorization", bearer.as_str())];
    let tiny = tiny_dir();
    let mut s = Server::process_logged(
        &[
            "--model",
            &tiny,
            "--log-format",
            "json",
            "--max-concurrent",
            "1",
        ],
        &[("LAYA_API_KEY", key)],
        &log,
    );
    let mut headers = auth.to_vec();
    headers.push(("x-request-id", "client-id-1"));
    let ok = post(&s, &headers, BODY);
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.header("x-request-id"), Some("client-id-1"));
    let answer: serde_json::Value = serde_json::from_slice(&ok.body).expect("json");
    let routed = answer["routing"]["model"].as_str().expect("routing.model");

    let bad = post(&s, &auth, "{");
    assert_eq!(bad.status, 400, "{}", bad.text());
    let bad_id = bad
        .header("x-request-id")
        .expect("a generated id")
        .to_owned();

    // An upload holding the only admission slot: the next request is refused.
    // The 400's slot can still be held for a moment after its answer.
    s.wait_admitted(0, Some(&bearer));
    let held = s.stall("/v1/systemone", &auth, BODY.len(), b"{");
    s.wait_admitted(1, Some(&bearer));
    let busy = post(&s, &auth, BODY);
    assert_eq!(busy.status, 503, "{}", busy.text());
    let busy_id = busy
        .header("x-request-id")
        .expect("a generated id")
        .to_owned();
    drop(held);

    sigterm(&mut s);
    assert!(exit_within(&mut s, Duration::from_secs(15)).success());
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(!text.contains(key), "the bearer token was logged");
    assert!(!text.contains("charged twice"), "the body was logged");
    let events = request_events(&text);
    let by_id = |id: &str| {
        let found: Vec<&serde_json::Value> =
            events.iter().filter(|e| e["span"]["id"] == id).collect();
        assert_eq!(found.len(), 1, "one line for {id}: {text}");
        found[0].clone()
    };
    let e = by_id("client-id-1");
    assert_eq!(e["level"], "INFO");
    let f = &e["fields"];
    assert_eq!(f["method"], "POST");
    assert_eq!(f["route"], "/v1/systemone");
    assert_eq!(f["status"], 200);
    assert_eq!(f["states"], 1);
    assert_eq!(f["checkpoint"], routed);
    assert_eq!(
        f["input_tokens"], answer["usage"]["input_tokens"],
        "{answer}"
    );
    let inference = f["inference_ms"].as_f64().expect("inference_ms");
    let header_ms: f64 = ok
        .header("x-inference-time-ms")
        .expect("header")
        .parse()
        .expect("ms");
    assert!(
        (inference - header_ms).abs() <= 0.01,
        "{inference} vs {header_ms}"
    );
    assert!(f["total_ms"].as_f64().expect("total_ms") >= inference);

    let e = by_id(&bad_id);
    assert_eq!(e["fields"]["status"], 400);
    assert_eq!(e["fields"]["error"], "request body must be valid JSON");
    assert!(e["fields"].get("inference_ms").is_none());
    let e = by_id(&busy_id);
    assert_eq!(e["fields"]["status"], 503);
    assert_eq!(e["fields"]["error"], "server busy, try again later");
}

/// The text format: one line naming the request's id, route and status, for a 200, a 404,
/// a 400 and a 503 (the last two with their cause).
#[test]
fn text_log_line_per_request() {
    let _serial = serial();
    let log = scratch("text.log");
    let tiny = tiny_dir();
    let mut s = Server::process_logged(
        &["--model", &tiny, "--max-concurrent", "1"],
        &[("SYS1_LOG_FORMAT", "text")],
        &log,
    );
    let ok = post(&s, &[], BODY);
    assert_eq!(ok.status, 200, "{}", ok.text());
    let id = ok.header("x-request-id").expect("id").to_owned();
    let missing = s.send("GET", "/nowhere", &[], None);
    assert_eq!(missing.status, 404);
    let missing_id = missing.header("x-request-id").expect("id").to_owned();
    let bad = post(&s, &[], "{");
    assert_eq!(bad.status, 400, "{}", bad.text());
    let bad_id = bad.header("x-request-id").expect("id").to_owned();
    // The 400's slot can still be held for a moment after its answer.
    s.wait_admitted(0, None);
    let held = s.stall("/v1/systemone", &[], BODY.len(), b"{");
    s.wait_admitted(1, None);
    let busy = post(&s, &[], BODY);
    assert_eq!(busy.status, 503, "{}", busy.text());
    let busy_id = busy.header("x-request-id").expect("id").to_owned();
    drop(held);
    sigterm(&mut s);
    assert!(exit_within(&mut s, Duration::from_secs(15)).success());
    let text = std::fs::read_to_string(&log).expect("log");
    let line = |id: &str| {
        let found: Vec<&str> = text
            .lines()
            .filter(|l| l.contains(&format!("request{{id={id}}}")) && l.contains(" request "))
            .collect();
        assert_eq!(found.len(), 1, "one line for {id}: {text}");
        found[0].to_owned()
    };
    let l = line(&id);
    assert!(l.contains("INFO"), "{l}");
    for part in [
        "method=POST",
        "route=/v1/systemone",
        "status=200",
        "states=1",
    ] {
        assert!(l.contains(part), "{part} in {l}");
    }
    let l = line(&missing_id);
    // The route pattern, never the client's path.
    assert!(
        l.contains("route=unmatched") && l.contains("status=404"),
        "{l}"
    );
    assert!(!text.contains("/nowhere"), "a client's path was logged");
    for (id, status, cause) in [
        (&bad_id, 400, "request body must be valid JSON"),
        (&busy_id, 503, "server busy, try again later"),
    ] {
        let l = line(id);
        assert!(
            l.contains(&format!("status={status}")) && l.contains(cause),
            "{l}"
        );
        assert!(!l.contains("inference_ms"), "{l}");
    }
}

/// A sane client id is echoed on every response; a missing or unsafe one is replaced by a
/// fresh 32-digit hex id.
#[test]
fn request_ids_pass_through_or_are_generated() {
    let s = Server::tiny(&["--api-key", "k"]);
    for (path, status) in [("/health", 200), ("/v1/systemone", 405), ("/nope", 404)] {
        let r = s.send("GET", path, &[("x-request-id", "trace-42.a:b")], None);
        assert_eq!(r.status, status, "{path}");
        assert_eq!(r.header("x-request-id"), Some("trace-42.a:b"), "{path}");
    }
    let r = post(&s, &[("x-request-id", "unauthorized-1")], BODY);
    assert_eq!(r.status, 401);
    assert_eq!(r.header("x-request-id"), Some("unauthorized-1"));

    let long = "x".repeat(129);
    let mut seen = Vec::new();
    for given in [
        None,
        Some("has space"),
        Some("quote\"d"),
        Some(long.as_str()),
    ] {
        let headers: Vec<(&str, &str)> =
            given.map(|g| vec![("x-request-id", g)]).unwrap_or_default();
        let r = s.send("GET", "/health", &headers, None);
        let id = r.header("x-request-id").expect("an id").to_owned();
        assert_eq!(id.len(), 32, "{given:?} → {id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        assert!(!seen.contains(&id), "ids repeat");
        seen.push(id);
    }
    let longest = "y".repeat(128);
    let r = s.send("GET", "/health", &[("x-request-id", &longest)], None);
    assert_eq!(r.header("x-request-id"), Some(longest.as_str()));
}

/// `POST /drain`: behind the bearer; afterwards `/ready` is 503 while decisions (and
/// `/health`) are still answered.
#[test]
fn drain_turns_ready_off_and_keeps_answering() {
    let s = Server::tiny(&["--api-key", "k"]);
    let ready = s.send("GET", "/ready", &[], None);
    assert_eq!(
        (ready.status, ready.text().as_str()),
        (200, r#"{"status":"ready"}"#)
    );
    assert_eq!(ready.header("content-type"), Some("application/json"));

    let refused = s.send("POST", "/drain", &[], None);
    assert_eq!(refused.status, 401);
    assert_eq!(
        refused.text(),
        r#"{"detail":"invalid or missing bearer token"}"#
    );
    assert_eq!(s.send("GET", "/ready", &[], None).status, 200);
    assert_eq!(s.send("GET", "/drain", &[], None).status, 405);

    let auth = [("authorization", "Bearer k")];
    // A decision in flight across the drain: admitted, its body half sent.
    let half = BODY.len() / 2;
    let mut in_flight = s.stall("/v1/systemone", &auth, BODY.len(), &BODY.as_bytes()[..half]);
    s.wait_admitted(1, Some("Bearer k"));
    let drained = s.send("POST", "/drain", &auth, None);
    assert_eq!(
        (drained.status, drained.text().as_str()),
        (200, r#"{"status":"draining"}"#)
    );
    let ready = s.send("GET", "/ready", &[], None);
    assert_eq!(
        (ready.status, ready.text().as_str()),
        (503, r#"{"status":"draining"}"#)
    );
    in_flight
        .write_all(&BODY.as_bytes()[half..])
        .expect("the rest of the body");
    let finished = read_response(&mut in_flight);
    assert_eq!(finished.status, 200, "{}", finished.text());
    let r = post(&s, &auth, BODY);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.send("GET", "/health", &[], None).status, 200);
}

/// SIGTERM with `--drain-delay`: `/ready` turns 503 at once while new requests are still
/// answered; then the server exits 0.
#[test]
fn sigterm_drains_before_closing() {
    let _serial = serial();
    let tiny = tiny_dir();
    let mut s = Server::process(&["--model", &tiny, "--drain-delay", "3"], &[]);
    assert_eq!(s.send("GET", "/ready", &[], None).status, 200);
    sigterm(&mut s);
    let signalled = Instant::now();
    let deadline = signalled + Duration::from_secs(2);
    loop {
        let r = s.send("GET", "/ready", &[], None);
        if r.status == 503 {
            assert_eq!(r.text(), r#"{"status":"draining"}"#);
            break;
        }
        assert!(Instant::now() < deadline, "/ready still {}", r.status);
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = post(&s, &[], BODY);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        signalled.elapsed() < Duration::from_secs(3),
        "the test was too slow to check"
    );
    let status = exit_within(&mut s, Duration::from_secs(15));
    assert!(status.success(), "{status:?}");
    assert!(
        signalled.elapsed() >= Duration::from_secs(3),
        "exited before the drain delay"
    );
}

/// An in-flight request that outlasts `--shutdown-grace`: the process gives up, says so and
/// exits non-zero.
#[test]
fn shutdown_grace_running_out_exits_nonzero() {
    let _serial = serial();
    let log = scratch("grace.log");
    let tiny = tiny_dir();
    let mut s = Server::process_logged(
        &[
            "--model",
            &tiny,
            "--shutdown-grace",
            "1",
            "--body-timeout",
            "30",
        ],
        &[],
        &log,
    );
    // The 400's slot can still be held for a moment after its answer.
    s.wait_admitted(0, None);
    let held = s.stall("/v1/systemone", &[], BODY.len(), b"{");
    s.wait_admitted(1, None);
    sigterm(&mut s);
    let status = exit_within(&mut s, Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{status:?}");
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(text.contains("shutdown grace period ran out"), "{text}");
    drop(held);
}

/// `--version` names the commit, the MLX release and the bundle flavor; `sys1rust health`
/// exits 0 only on a 200.
#[test]
fn version_and_health_probe() {
    let bin = env!("CARGO_BIN_EXE_sys1rust");
    let out = Command::new(bin).arg("--version").output().expect("runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let prefix = format!("sys1rust {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(text.starts_with(&prefix), "{text}");
    assert!(text.contains(", MLX 0."), "{text}");
    assert!(
        ["bundle cpu)", "bundle cuda13)", "bundle metal)"]
            .iter()
            .any(|b| text.trim_end().ends_with(b)),
        "{text}"
    );

    let s = Server::tiny(&["--api-key", "k"]);
    // `/info`: the version `/health` (upstream's payload) has no room for; behind the key.
    assert_eq!(s.send("GET", "/info", &[], None).status, 401);
    let info = s.send("GET", "/info", &[("authorization", "Bearer k")], None);
    assert_eq!(info.status, 200, "{}", info.text());
    assert_eq!(info.header("content-type"), Some("application/json"));
    let v: serde_json::Value = serde_json::from_slice(&info.body).expect("json");
    let keys: Vec<&str> = v
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "name",
            "version",
            "commit",
            "mlx",
            "bundle",
            "stage",
            "engine",
            "device",
            "precision",
            "workers"
        ]
    );
    let reported = format!(
        "sys1rust {} (commit {}, MLX {}, bundle {})",
        v["version"].as_str().expect("version"),
        v["commit"].as_str().expect("commit"),
        v["mlx"].as_str().expect("mlx"),
        v["bundle"].as_str().expect("bundle")
    );
    assert_eq!(reported, text.trim_end(), "/info against --version");
    assert_eq!(v["stage"], "ready");
    assert_eq!(v["workers"], 1);
    let probe = |path: &str| {
        Command::new(bin)
            .args(["health", "--url", &format!("http://{}{path}", s.addr)])
            .output()
            .expect("runs")
    };
    let ok = probe("/ready");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&ok.stdout).trim(),
        r#"{"status":"ready"}"#
    );
    assert_eq!(
        s.send("POST", "/drain", &[("authorization", "Bearer k")], None)
            .status,
        200
    );
    let drained = probe("/ready");
    assert_eq!(drained.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&drained.stderr).contains("503"));
    assert!(probe("/health").status.success());
    // Without --url the probe asks the port serve binds without --port: LAYA_PORT's, as a
    // container's health check does.
    let by_env = |value: &str| {
        Command::new(bin)
            .arg("health")
            .env("LAYA_PORT", value)
            .output()
            .expect("runs")
    };
    let ok = by_env(&s.addr.port().to_string());
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).starts_with(r#"{"status":"ok""#));
    let bad = by_env("0");
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr)
            .contains("invalid LAYA_PORT '0': must be an integer 1-65535"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// Upstream's `LAYA_PORT` (api.md §12.1): a value that is not a port in 1-65535 stops
/// `serve` before it binds, with upstream's message; `--port` (ours, where 0 picks a free
/// port) wins over it.
#[test]
fn laya_port_follows_upstream() {
    let serve = |port_flag: Option<&str>, value: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sys1rust"));
        cmd.args(["serve", "--model"]).arg(checkpoint("tiny"));
        if let Some(p) = port_flag {
            cmd.args(["--port", p]);
        }
        cmd.env("LAYA_PORT", value)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("runs")
    };
    for (value, shown) in [("abc", "'abc'"), ("0", "'0'"), ("70000", "'70000'")] {
        let out = serve(None, value).wait_with_output().expect("exits");
        assert_eq!(out.status.code(), Some(1), "{value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "invalid LAYA_PORT {shown}: must be an integer 1-65535"
            )),
            "{value}: {err}"
        );
    }
    // With --port the variable is not read: the server starts (and is stopped here).
    let mut child = serve(Some("0"), "abc");
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).expect("reads");
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.contains("\"event\":\"ready\""), "{line}");
}

/// Upstream's `LAYA_LOG_LEVEL`: trimmed and lower-cased; anything but its six levels stops
/// the process with upstream's message (api.md §12.1).
#[test]
fn laya_log_level_follows_upstream() {
    let bin = env!("CARGO_BIN_EXE_sys1rust");
    let run = |value: &str| {
        Command::new(bin)
            .args(["health", "--url", "http://127.0.0.1:9/"])
            .env_remove("RUST_LOG")
            .env("LAYA_LOG_LEVEL", value)
            .output()
            .expect("runs")
    };
    let bad = run("verbose");
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&bad.stderr).trim_end(),
        "invalid LAYA_LOG_LEVEL 'verbose': must be one of critical, debug, error, info, trace, warning"
    );
    // Accepted levels get as far as the probe (which finds nothing on port 9).
    for good in [" WARNING ", "critical", "", "Trace"] {
        let out = run(good);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("invalid LAYA_LOG_LEVEL"), "{good:?}: {err}");
    }
    // sys1rust's own flag wins over upstream's variable, and its refusal names the flag.
    let out = Command::new(bin)
        .args([
            "--log-level",
            "loud",
            "health",
            "--url",
            "http://127.0.0.1:9/",
        ])
        .env_remove("RUST_LOG")
        .env("LAYA_LOG_LEVEL", "debug")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        "invalid --log-level (SYS1_LOG_LEVEL) 'loud': must be one of critical, debug, error, info, trace, warning"
    );
}

/// `sys1rust completions SHELL` prints a script that completes every subcommand; an unknown
/// shell is refused.
#[test]
fn completions_name_every_subcommand() {
    for (shell, marker) in [
        ("bash", "complete -F _sys1rust"),
        ("zsh", "#compdef sys1rust"),
        ("fish", "complete -c sys1rust"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_sys1rust"))
            .args(["completions", shell])
            .output()
            .expect("runs");
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(marker), "{shell}: {marker:?} missing");
        for sub in [
            "serve", "decide", "bench", "pull", "models", "rm", "ps", "health",
        ] {
            assert!(text.contains(sub), "{shell}: no {sub}");
        }
    }
    let bad = Command::new(env!("CARGO_BIN_EXE_sys1rust"))
        .args(["completions", "tcsh"])
        .output()
        .expect("runs");
    assert!(!bad.status.success());
}

/// `--help` names every flag's environment variable, takes `--f32` as a plain flag, says what
/// `--revision` does for each command and where `pull` downloads from.
#[test]
fn help_names_the_environment() {
    let help = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_sys1rust"))
            .args(args)
            .output()
            .expect("runs");
        assert!(out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let serve = help(&["serve", "--help"]);
    for needle in [
        "[env: HF_HUB_OFFLINE=]",
        "[env: SYS1_F32=]",
        "[env: SYS1_F16=]",
    ] {
        assert!(serve.contains(needle), "serve --help lacks {needle}");
    }
    assert!(!serve.contains("[<F32>]"), "--f32 takes no value");
    for cmd in ["decide", "bench"] {
        let text = help(&[cmd, "--help"]);
        assert!(text.contains("Use another cached revision"), "{cmd}");
        assert!(!text.contains("Serve another"), "{cmd}");
    }
    let pull = help(&["pull", "--help"]);
    for needle in ["HF_ENDPOINT", "HF_TOKEN", "HF_HOME", "HF_HUB_OFFLINE"] {
        assert!(pull.contains(needle), "pull --help lacks {needle}");
    }
}

/// `--int8` (and `SYS1_INT8`) says so in the ready line, `/info` and `/health`, answers, and
/// is refused with the GPU engines; without it `/health` has upstream's keys only.
#[test]
fn int8_is_said_wherever_the_server_describes_itself() {
    let _serial = serial();
    for (args, env, precision) in [
        (vec!["--int8"], vec![], "int8"),
        (vec![], vec![("SYS1_INT8", "1")], "int8"),
        (
            vec!["--int8", "--int8-activations", "split"],
            vec![],
            "int8-split",
        ),
        (
            vec!["--int8"],
            vec![("SYS1_INT8_ACTIVATIONS", "mixed")],
            "int8-mixed",
        ),
    ] {
        let s = Server::process_tiny(&args, &env);
        let ready: serde_json::Value = serde_json::from_str(&s.ready).expect("ready line");
        assert_eq!(ready["precision"], precision, "{args:?} {env:?}");
        assert_eq!(ready["device"], "cpu");
        let info: serde_json::Value =
            serde_json::from_slice(&s.send("GET", "/info", &[], None).body).expect("info");
        assert_eq!(info["precision"], precision);
        let health: serde_json::Value =
            serde_json::from_slice(&s.send("GET", "/health", &[], None).body).expect("health");
        assert_eq!(health["int8"], true, "{health}");
        let ok = post(&s, &[], BODY);
        assert_eq!(ok.status, 200, "{}", ok.text());
    }
    let plain = Server::process_tiny(&[], &[]);
    let health: serde_json::Value =
        serde_json::from_slice(&plain.send("GET", "/health", &[], None).body).expect("health");
    assert!(health.get("int8").is_none(), "{health}");
    drop(plain);

    let bin = env!("CARGO_BIN_EXE_sys1rust");
    for refused in [&["--engine", "cuda"][..], &["--device", "gpu"][..]] {
        let out = Command::new(bin)
            .args(["serve", "--port", "0", "--int8"])
            .args(refused)
            .args(["--model", &tiny_dir()])
            .output()
            .expect("runs");
        assert!(!out.status.success(), "{refused:?} was taken");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--int8 runs on the CPU"), "{refused:?}: {err}");
    }
    let out = Command::new(bin)
        .args([
            "serve",
            "--port",
            "0",
            "--int8",
            "--f16",
            "--model",
            &tiny_dir(),
        ])
        .output()
        .expect("runs");
    assert!(!out.status.success(), "--int8 --f16 was taken");
}

/// The fixture checkpoint answering every name, unloadable as the router's checkpoints are:
/// counts its idle unloads, and is resident again once a request needs it.
struct Unloadable {
    inner: laya_core::checkpoints::Single<laya_fixtures::Recorded>,
    resident: bool,
    unloads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl laya_core::checkpoints::Checkpoints for Unloadable {
    type Forward = laya_fixtures::Recorded;

    fn agent(
        &mut self,
        name: &laya_core::routing::Checkpoint,
    ) -> Result<&mut laya_core::agent::Agent<Self::Forward>, laya_core::checkpoints::LoadError>
    {
        self.resident = true;
        self.inner.agent(name)
    }

    fn resident(&self) -> Vec<laya_core::checkpoints::Resident> {
        if self.resident {
            self.inner.resident()
        } else {
            Vec::new()
        }
    }

    fn agent_key(&self, name: &laya_core::routing::Checkpoint) -> Option<u64> {
        self.inner.agent_key(name).filter(|_| self.resident)
    }

    fn peek(&mut self, key: u64) -> Option<&mut laya_core::agent::Agent<Self::Forward>> {
        self.inner.peek(key)
    }
}

impl sys1rust::worker::Owned for Unloadable {
    fn unload_all(&mut self) {
        self.resident = false;
        self.unloads
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The tiny fixture in process with `LAYA_IDLE_UNLOAD_SECONDS=idle` and `extra` flags, its
/// load taking `load`; once loaded, with its unload count.
fn idle_unloading(
    idle: f64,
    load: Duration,
    extra: &[&str],
) -> (Server, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let unloads = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = unloads.clone();
    let s = Server::in_process_configured(
        extra,
        &checkpoint("tiny"),
        &[0],
        true,
        |cfg| {
            cfg.idle_unload = Some(Duration::from_secs_f64(idle));
            cfg.http.idle_unload_seconds = Some(idle);
        },
        move |dir, _| {
            std::thread::sleep(load);
            let engine = laya_fixtures::Recorded::for_checkpoint("tiny");
            Ok(Unloadable {
                inner: laya_core::checkpoints::Single::new(
                    laya_core::agent::Agent::load(dir, engine)?,
                    None,
                ),
                resident: true,
                unloads: counted.clone(),
            })
        },
    );
    (s, unloads)
}

/// `/health`'s `idle_seconds` and whether anything is loaded.
fn idle_health(s: &Server, auth: &[(&str, &str)]) -> (f64, bool) {
    let h = s.send("GET", "/health", auth, None);
    let v: serde_json::Value = serde_json::from_slice(&h.body).expect("JSON");
    let idle = v["idle_seconds"].as_f64().unwrap_or_else(|| panic!("{v}"));
    let loaded = !v["loaded"].as_array().expect("loaded").is_empty();
    (idle, loaded)
}

/// Waits (up to `limit`) for `n` idle unloads.
fn wait_unloads(unloads: &std::sync::atomic::AtomicUsize, n: usize, limit: Duration) {
    let deadline = Instant::now() + limit;
    while unloads.load(std::sync::atomic::Ordering::SeqCst) < n {
        assert!(Instant::now() < deadline, "no idle unload within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The idle clock starts when the checkpoints are loaded, as upstream's starts after its
/// preload: a load longer than `LAYA_IDLE_UNLOAD_SECONDS` does not unload them as it ends.
#[test]
fn idle_unload_counts_from_the_end_of_the_load() {
    let _serial = serial();
    let (s, unloads) = idle_unloading(1.0, Duration::from_millis(1500), &[]);
    let ready = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    let (idle, loaded) = idle_health(&s, &[]);
    assert_eq!(
        unloads.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "unloaded as the load ended"
    );
    assert!(loaded, "nothing loaded just after the load");
    assert!(idle < 1.0, "idle_seconds {idle} counts the load");
    wait_unloads(&unloads, 1, Duration::from_secs(5));
    assert!(ready.elapsed() >= Duration::from_millis(900));
    assert!(
        !idle_health(&s, &[]).1,
        "unloaded, yet /health lists checkpoints"
    );
    // The next request loads them again.
    let r = post(&s, &[], BODY);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(idle_health(&s, &[]).1);
}

/// Upstream marks a request once it is admitted, before its body is read (`_mark_request()`):
/// an admitted request restarts the idle clock even when it fails validation, and an unload
/// waits for it; one refused at auth does not count.
#[test]
fn an_admitted_request_restarts_the_idle_clock() {
    let _serial = serial();
    let (s, unloads) = idle_unloading(2.0, Duration::ZERO, &["--api-key", "k"]);
    let auth = [("authorization", "Bearer k")];
    let ready = Instant::now();
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(post(&s, &[], BODY).status, 401);
    let (idle, _) = idle_health(&s, &auth);
    assert!(
        idle >= 0.9,
        "a request refused at auth reset the clock ({idle})"
    );
    let marked = Instant::now();
    let r = post(&s, &auth, "{\"questions\":");
    assert_eq!(r.status, 400, "{}", r.text());
    let (idle, loaded) = idle_health(&s, &auth);
    assert!(
        idle <= 0.5,
        "an admitted request left the clock running ({idle})"
    );
    assert!(loaded);
    // Past when the worker would have unloaded without that request, not yet two seconds
    // after it.
    let unmarked = ready + Duration::from_millis(2400);
    std::thread::sleep(unmarked.saturating_duration_since(Instant::now()));
    assert!(
        marked.elapsed() < Duration::from_millis(1900),
        "too slow to tell"
    );
    assert_eq!(
        unloads.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "unloaded under a request that had just arrived"
    );
    wait_unloads(&unloads, 1, Duration::from_secs(5));
    assert!(marked.elapsed() >= Duration::from_millis(1900));
}

/// An engine that panics in its first forward pass, and checkpoints that then panic outside
/// the worker's guard: the worker thread ends.
struct Doomed {
    inner: laya_core::checkpoints::Single<Panicking>,
    dead: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

struct Panicking {
    inner: laya_fixtures::Recorded,
    dead: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl laya_core::engine::Forward for Panicking {
    fn forward(
        &mut self,
        _rows: &[laya_core::engine::Row],
    ) -> Result<Vec<laya_core::engine::RowLogits>, laya_core::engine::EngineError> {
        self.dead.store(true, std::sync::atomic::Ordering::SeqCst);
        panic!("the engine panics (a test)");
    }

    fn info(&self) -> laya_core::engine::EngineInfo {
        self.inner.info()
    }

    fn batch_invariant(&self) -> bool {
        self.inner.batch_invariant()
    }
}

impl laya_core::checkpoints::Checkpoints for Doomed {
    type Forward = Panicking;

    fn agent(
        &mut self,
        name: &laya_core::routing::Checkpoint,
    ) -> Result<&mut laya_core::agent::Agent<Panicking>, laya_core::checkpoints::LoadError> {
        self.inner.agent(name)
    }

    fn resident(&self) -> Vec<laya_core::checkpoints::Resident> {
        assert!(
            !self.dead.load(std::sync::atomic::Ordering::SeqCst),
            "the checkpoints panic too (a test)"
        );
        self.inner.resident()
    }

    fn agent_key(&self, name: &laya_core::routing::Checkpoint) -> Option<u64> {
        self.inner.agent_key(name)
    }

    fn peek(&mut self, key: u64) -> Option<&mut laya_core::agent::Agent<Panicking>> {
        self.inner.peek(key)
    }
}

impl sys1rust::worker::Owned for Doomed {}

/// Once no engine worker is left, decisions can only fail: `/ready` says so (503
/// `{"status":"worker stopped"}`) instead of 200, so that traffic moves elsewhere.
#[test]
fn ready_turns_off_when_the_worker_has_stopped() {
    let dead = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = Server::in_process(&[], &checkpoint("tiny"), move |dir| {
        let engine = Panicking {
            inner: laya_fixtures::Recorded::for_checkpoint("tiny"),
            dead: dead.clone(),
        };
        Doomed {
            inner: laya_core::checkpoints::Single::new(
                laya_core::agent::Agent::load(dir, engine).expect("the fixture loads"),
                None,
            ),
            dead,
        }
    });
    let ready = s.send("GET", "/ready", &[], None);
    assert_eq!(
        (ready.status, ready.text().as_str()),
        (200, r#"{"status":"ready"}"#)
    );
    let r = post(&s, &[], BODY);
    assert_eq!(
        (r.status, r.text().as_str()),
        (500, r#"{"detail":"inference failed"}"#)
    );
    let ready = s.send("GET", "/ready", &[], None);
    assert_eq!(
        (ready.status, ready.text().as_str()),
        (503, r#"{"status":"worker stopped"}"#)
    );
    assert_eq!(ready.header("content-type"), Some("application/json"));
    // A drain still says draining.
    assert_eq!(s.send("POST", "/drain", &[], None).status, 200);
    assert_eq!(
        s.send("GET", "/ready", &[], None).text(),
        r#"{"status":"draining"}"#
    );
}
