//! The router: `sys1rust serve` without `--model`, the three fixture checkpoints behind the
//! three names through `LAYA_EXTRA_MODELS` (the working directory their parent), started the
//! way upstream's references were recorded (`references/router/servers.json`: one server per
//! configuration, its environment), answers every recorded request with upstream's status,
//! headers and body: f32 on the CPU, a number on a 4th-decimal rounding boundary aside. With
//! `SYS1_ROUTER_F16=1` (the GPU harness) the servers run in f16 on the GPU and the numbers
//! follow the f16 rule, everything else exact.
//!
//! Beside the bytes: a checkpoint evicted and loaded again shows in the inference time, and a
//! checkpoint that cannot load fails only the requests routed to it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use laya_core::agent::Agent;
use laya_fixtures::{
    check_f32, fixtures_dir, read_jsonl, unrounded_body_routed, Reference, Replay,
};
use pyjson::Value;

use crate::replay::compare_result_f16;
use crate::support::{serial, Server};

/// See replay.rs: MLX's and PyTorch's f32 differ by summation order.
const BOUNDARY: f64 = 1e-5;

fn servers_json() -> Value {
    let path = fixtures_dir()
        .join("references")
        .join("router")
        .join("servers.json");
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    pyjson::loads(&text).expect("servers.json").value
}

fn obj<'a>(v: &'a Value, key: &str) -> &'a pyjson::Object {
    v.as_object()
        .and_then(|o| o.get(key))
        .and_then(Value::as_object)
        .unwrap_or_else(|| panic!("servers.json: no object {key}"))
}

/// Upstream's references were made on the CPU: on the GPU `/health` names the GPU where they
/// say `cpu` (`device` and every `checkpoint_devices` entry).
fn on_the_gpu(mut health: Value) -> Value {
    if let Value::Object(o) = &mut health {
        if let Some(d) = o.get_mut("device") {
            *d = Value::Str("cuda".into());
        }
        if let Some(Value::Object(devices)) = o.get("checkpoint_devices").cloned() {
            let mut on_gpu = pyjson::Object::new();
            for name in devices.keys() {
                on_gpu.insert(name.to_owned(), Value::Str("cuda".into()));
            }
            o.insert("checkpoint_devices".into(), Value::Object(on_gpu));
        }
    }
    health
}

/// A working directory holding the three checkpoints (links to the fixtures) and, for
/// `corrupt`, a copy of one cut short, as regen.py made it.
fn workdir(name: &str, names: &pyjson::Object, corrupt: Option<&pyjson::Object>) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("router-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("workdir");
    let checkpoints = fixtures_dir().join("checkpoints");
    for source in names.values() {
        let source = source.as_str().expect("a directory name");
        let link = dir.join(source);
        if checkpoints.join(source).is_dir() && !link.exists() {
            std::os::unix::fs::symlink(checkpoints.join(source), &link).expect("symlink");
        }
    }
    if let Some(c) = corrupt {
        let field = |k: &str| c.get(k).expect("corrupt spec");
        let target = dir.join(field("name").as_str().expect("name"));
        let from = checkpoints.join(field("copy_of").as_str().expect("copy_of"));
        copy_dir(&from, &target);
        let bytes = field("bytes").as_number_f64().expect("bytes") as u64;
        std::fs::OpenOptions::new()
            .write(true)
            .open(target.join("model.safetensors"))
            .and_then(|f| f.set_len(bytes))
            .expect("truncate");
    }
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

fn header_matches(expected: &str, got: Option<&str>) -> bool {
    let Some(got) = got else { return false };
    match expected.split_once("<ms>") {
        None => expected == got,
        Some((prefix, suffix)) => got
            .strip_prefix(prefix)
            .and_then(|g| g.strip_suffix(suffix))
            .is_some_and(|n| n.parse::<f64>().is_ok()),
    }
}

/// Replays one reference file against its server; returns each decision's inference time by
/// id.
fn replay_file(
    name: &str,
    workload: &str,
    env: &[(String, String)],
    agents: &mut HashMap<String, Agent<Replay>>,
) -> HashMap<String, f64> {
    let spec = servers_json();
    let mut names = obj(&spec, "LAYA_EXTRA_MODELS").clone();
    let corrupt = (name == "corrupt-english").then(|| obj(&spec, "corrupt").clone());
    if let Some(c) = &corrupt {
        names.insert("english".into(), c.get("name").expect("name").clone());
    }
    let cwd = workdir(name, &names, corrupt.as_ref());
    let hf_home = cwd.join("hf-home");
    let extra = pyjson::dumps(&Value::Object(names), pyjson::Style::Compact).expect("finite");
    let mut all_env: Vec<(&str, &str)> = vec![
        ("LAYA_EXTRA_MODELS", extra.as_str()),
        ("HF_HUB_OFFLINE", "1"),
        ("HF_HOME", hf_home.to_str().expect("utf-8")),
    ];
    all_env.extend(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let f16 = std::env::var("SYS1_ROUTER_F16").is_ok_and(|v| v == "1");
    let precision: &[&str] = if f16 {
        &["--f16", "--device", "gpu"]
    } else {
        &["--f32"]
    };
    let server = Server::process_in(&cwd, precision, &all_env);
    let (mut worst, mut flips) = (0f64, 0usize);
    let path = fixtures_dir()
        .join("references")
        .join("router")
        .join(format!("{name}.jsonl"));
    let mut times = HashMap::new();
    let mut boundary = 0;
    let references: Vec<Reference> = read_jsonl(&path)
        .iter()
        .map(Reference::from_value)
        .collect();
    assert!(!references.is_empty(), "{name}: no references");
    for reference in &references {
        let ctx = format!("{name} ({workload}) {}", reference.id);
        let headers: Vec<(&str, &str)> = if reference.request_body.is_some() {
            vec![("content-type", "application/json")]
        } else {
            Vec::new()
        };
        let resp = server.send(
            &reference.method,
            &reference.path,
            &headers,
            reference.request_body.as_deref(),
        );
        assert_eq!(
            resp.status,
            reference.status,
            "{ctx}: status; body {}",
            resp.text()
        );
        for (header, value) in &reference.headers {
            assert!(
                header_matches(value, resp.header(header)),
                "{ctx}: header {header}: {:?} vs upstream {value:?}",
                resp.header(header)
            );
        }
        let body = resp.text();
        if body != reference.body {
            let decision = reference.status == 200 && reference.path.starts_with("/v1/systemone");
            let parse = |b: &str| pyjson::loads(b.as_bytes()).map(|p| p.value).ok();
            if f16 && !decision && parse(&body) == parse(&reference.body).map(on_the_gpu) {
                continue;
            }
            assert!(
                decision,
                "{ctx}: body\n{body}\nvs upstream\n{}",
                reference.body
            );
            if f16 {
                let parse = |b: &str| pyjson::loads(b.as_bytes()).expect("a JSON body").value;
                compare_result_f16(
                    &parse(&body),
                    &parse(&reference.body),
                    &ctx,
                    &mut worst,
                    &mut flips,
                );
            } else {
                let unrounded = unrounded_body_routed(agents, reference)
                    .unwrap_or_else(|| reference.body.clone());
                boundary += check_f32(&body, &reference.body, &unrounded, BOUNDARY)
                    .unwrap_or_else(|e| panic!("{ctx}: {e}"))
                    .len();
            }
        }
        if let Some(ms) = resp
            .header("x-inference-time-ms")
            .and_then(|v| v.parse().ok())
        {
            times.insert(reference.id.clone(), ms);
        }
    }
    println!(
        "router {name}: {} requests replayed, {boundary} numbers on a rounding boundary{}",
        references.len(),
        if f16 {
            format!(", f16 max probability error {worst:.5}, near-tie flips {flips}")
        } else {
            String::new()
        }
    );
    times
}

/// The fixture checkpoints behind the three names, for decoding upstream's logits.
fn agents() -> HashMap<String, Agent<Replay>> {
    let spec = servers_json();
    obj(&spec, "LAYA_EXTRA_MODELS")
        .iter()
        .map(|(name, dir)| {
            let dir = fixtures_dir()
                .join("checkpoints")
                .join(dir.as_str().expect("a directory name"));
            let agent = Agent::load(&dir, Replay::default()).expect("tokenizer and configs");
            (name.to_owned(), agent)
        })
        .collect()
}

fn env_of(server: &Value) -> Vec<(String, String)> {
    server
        .as_object()
        .and_then(|o| o.get("env"))
        .and_then(Value::as_object)
        .map(|env| {
            env.iter()
                .map(|(k, v)| (k.to_owned(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn every_router_configuration_answers_as_upstream() {
    let _serial = serial();
    let spec = servers_json();
    let mut agents = agents();
    let servers = obj(&spec, "servers");
    assert!(
        servers.len() >= 8,
        "{} server configurations",
        servers.len()
    );
    let started = Instant::now();
    let mut lru_times = HashMap::new();
    for (name, server) in servers.iter() {
        let workload = server
            .as_object()
            .and_then(|o| o.get("workload"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let times = replay_file(name, workload, &env_of(server), &mut agents);
        if name == "lru-no-preload-max-loaded-1" {
            lru_times = times;
        }
    }
    println!("router: every configuration in {:.1?}", started.elapsed());

    // LAYA_PRELOAD=0, LAYA_MAX_LOADED=1: each request that switches checkpoints loads one
    // again inside its inference time; l009 (multilingual after multilingual) does not.
    let reloads = [
        "l001_en",
        "l003_de",
        "l005_en",
        "l007_zh",
        "l011_en",
        "l099_typed",
    ];
    let slowest_resident = lru_times["l009_de"];
    for id in reloads {
        assert!(
            lru_times[id] > 2.0 * slowest_resident,
            "{id} loaded a checkpoint in {} ms, a resident one answered in {slowest_resident} ms",
            lru_times[id]
        );
    }
}

/// `LAYA_IDLE_UNLOAD_SECONDS` (api.md §8, §10): `/health` reports the setting and the idle
/// time; once no request has come for that long every checkpoint is unloaded (`loaded` empty,
/// `device` the preference again), and the next request pays a cold load and gets the same
/// answer it got warm.
#[test]
fn idle_unload_empties_the_router_and_the_next_request_reloads() {
    let _serial = serial();
    let spec = servers_json();
    let names = obj(&spec, "LAYA_EXTRA_MODELS").clone();
    let cwd = workdir("idle-unload", &names, None);
    let hf_home = cwd.join("hf-home");
    let extra = pyjson::dumps(&Value::Object(names), pyjson::Style::Compact).expect("finite");
    let env = [
        ("LAYA_EXTRA_MODELS", extra.as_str()),
        ("HF_HUB_OFFLINE", "1"),
        ("HF_HOME", hf_home.to_str().expect("utf-8")),
        ("LAYA_IDLE_UNLOAD_SECONDS", "1.5"),
    ];
    let server = Server::process_in(&cwd, &["--f32"], &env);
    let health = || {
        let r = server.send("GET", "/health", &[], None);
        assert_eq!(r.status, 200);
        pyjson::loads(&r.body).expect("health").value
    };
    let loaded = |h: &Value| -> Vec<String> {
        h.as_object()
            .and_then(|o| o.get("loaded"))
            .and_then(Value::as_array)
            .expect("loaded")
            .iter()
            .map(|v| v.as_str().expect("a name").to_owned())
            .collect()
    };
    let number = |h: &Value, key: &str| {
        h.as_object()
            .and_then(|o| o.get(key))
            .and_then(Value::as_number_f64)
            .unwrap_or_else(|| panic!("{key} in /health"))
    };
    let h = health();
    let keys: Vec<&str> = h.as_object().expect("object").keys().collect();
    assert_eq!(
        keys[keys.len() - 2..],
        ["idle_unload_seconds", "idle_seconds"],
        "the idle fields close the payload"
    );
    assert_eq!(number(&h, "idle_unload_seconds"), 1.5);
    assert!(!loaded(&h).is_empty(), "something is preloaded");

    let body = r#"{"state":"The customer wants a refund for the broken kettle.","questions":{"refund":{"type":"noul","instructions":"Is a refund due?"}}}"#;
    let post = || {
        let r = server.send(
            "POST",
            "/v1/systemone",
            &[("content-type", "application/json")],
            Some(body.as_bytes()),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let ms: f64 = r
            .header("x-inference-time-ms")
            .and_then(|v| v.parse().ok())
            .expect("x-inference-time-ms");
        (r.text(), ms)
    };
    // The first request after start carries one-time costs of its own (it took longer than a
    // cold load once, on a busy machine): the warm time is the fastest of three.
    let (warm, first_ms) = post();
    let warm_ms = (0..2).map(|_| post().1).fold(first_ms, f64::min);
    let answer = pyjson::loads(warm.as_bytes()).expect("answer").value;
    let routed = answer
        .as_object()
        .and_then(|o| o.get("routing"))
        .and_then(Value::as_object)
        .and_then(|o| o.get("model"))
        .and_then(Value::as_str)
        .expect("routing.model")
        .to_owned();
    let answered = Instant::now();
    assert!(number(&health(), "idle_seconds") < 1.5);

    let deadline = answered + std::time::Duration::from_secs(15);
    let h = loop {
        let h = health();
        if loaded(&h).is_empty() {
            break h;
        }
        assert!(Instant::now() < deadline, "still loaded after 15 s: {h:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(
        answered.elapsed().as_secs_f64() >= 1.5,
        "unloaded {:?} after the last request",
        answered.elapsed()
    );
    let fields = h.as_object().expect("object");
    assert_eq!(fields.get("device_is_preference"), Some(&Value::Bool(true)));
    assert!(number(&h, "idle_seconds") >= 1.5, "{h:?}");

    let (cold, cold_ms) = post();
    assert_eq!(cold, warm, "the answer after a cold load");
    assert!(
        cold_ms > 2.0 * warm_ms,
        "a cold load inside the inference time: {cold_ms} ms against {warm_ms} ms warm"
    );
    assert_eq!(loaded(&health()), [routed]);
}
