//! Strict Jev mode (`--jev-strict`) as Jev's contract: jevcompat's verdict on the real binary
//! with no other flags (with and without a key), Jev's Python client parsing every answer and
//! error, and each rule where strict mode goes beyond upstream's strict mode.
//!
//! jevcompat and typesafe-sdk come from scripts/setup-jev.sh (pinned, in target/jev-venv;
//! scripts/test.sh runs it). `SYS1_JEV_PYTHON` may name another environment's python.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use pyjson::{Object, Value};

use crate::support::{checkpoint, Response, Server};

fn python() -> PathBuf {
    let path = std::env::var_os("SYS1_JEV_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/jev-venv/bin/python")
        });
    assert!(
        path.exists(),
        "{} is missing: run scripts/setup-jev.sh (jevcompat and typesafe-sdk, pinned)",
        path.display()
    );
    path
}

/// The real binary on the `tiny` checkpoint with `--jev-strict` and `extra`, loaded.
fn strict_process(extra: &[&str]) -> Server {
    let dir = checkpoint("tiny");
    let mut args = vec!["--model", dir.to_str().expect("utf-8"), "--jev-strict"];
    args.extend_from_slice(extra);
    let s = Server::process(&args, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while s.send("GET", "/ready", &[], None).status != 200 {
        assert!(Instant::now() < deadline, "the server never became ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    s
}

fn object(text: &str) -> Object {
    match pyjson::loads(text.as_bytes()).map(|p| p.value) {
        Ok(Value::Object(o)) => o,
        other => panic!("not a JSON object: {other:?}: {text}"),
    }
}

fn count(summary: &Object, level: &str, what: &str) -> i64 {
    match summary
        .get(level)
        .and_then(Value::as_object)
        .and_then(|l| l.get(what))
    {
        Some(Value::Int(n)) => n.as_i64().expect("small"),
        other => panic!("{level}.{what}: {other:?}"),
    }
}

#[test]
fn jevcompat_finds_strict_mode_conformant() {
    let _serial = crate::support::serial();
    let jevcompat = python().with_file_name("jevcompat");
    // (flags, jevcompat's --key, SHOULDs it can test)
    for (extra, key, shoulds) in [
        (vec![], None, 12),
        (vec!["--api-key", "k3y"], Some("k3y"), 14),
    ] {
        let s = strict_process(&extra);
        let report = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("jevcompat.json");
        let mut cmd = Command::new(&jevcompat);
        cmd.arg("test").arg(format!("http://{}", s.addr));
        if let Some(key) = key {
            cmd.args(["--key", key]);
        }
        let out = cmd
            .arg("--json")
            .arg(&report)
            .output()
            .expect("jevcompat runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "key {key:?}: jevcompat says\n{text}");
        let report = object(&std::fs::read_to_string(&report).expect("report"));
        let Some(Value::Object(summary)) = report.get("summary") else {
            panic!("no summary")
        };
        assert_eq!(
            summary.get("verdict").and_then(Value::as_str),
            Some("conformant"),
            "{text}"
        );
        assert_eq!(
            (
                count(summary, "MUST", "passed"),
                count(summary, "MUST", "tested")
            ),
            (32, 32),
            "key {key:?}: MUST\n{text}"
        );
        // The issue asks for 11 of 12; every one that can be tested passes.
        assert_eq!(
            (
                count(summary, "SHOULD", "passed"),
                count(summary, "SHOULD", "tested")
            ),
            (shoulds, shoulds),
            "key {key:?}: SHOULD\n{text}"
        );
    }
}

#[test]
fn jevs_client_parses_every_answer_and_error() {
    let _serial = crate::support::serial();
    let s = strict_process(&["--api-key", "k3y"]);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/jev_sdk.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(format!("http://{}", s.addr))
        .arg("k3y")
        .output()
        .expect("the client script runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "typesafe-sdk:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every check ran (the script stops at the first failure).
    assert_eq!(
        text.lines().filter(|l| l.starts_with("ok ")).count(),
        12,
        "{text}"
    );
}

fn post(s: &Server, headers: &[(&str, &str)], body: &str) -> Response {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    s.send("POST", "/v1/systemone", &all, Some(body.as_bytes()))
}

const TICKET: &str = "I was billed twice for my Pro plan this month; refund one charge.";

fn request(questions: &str) -> String {
    format!(r#"{{"model":"jev-latest","state":"{TICKET}","questions":{questions}}}"#)
}

fn probabilities(answer: &Object) -> Vec<f64> {
    match answer.get("probabilities") {
        Some(Value::Object(p)) => p
            .values()
            .map(|v| v.as_number_f64().expect("a number"))
            .collect(),
        other => panic!("probabilities: {other:?}"),
    }
}

/// Jev's confidence (jevcompat's reference): choice `(max - 1/n) / (1 - 1/n)`; score
/// `max(0, 1 - sum p_i |i - k| / D)`, `k` the first most likely level and
/// `D = sum |i - (n-1)/2| / n`, over the probabilities as sent (normalised by their sum).
fn jev_confidence(kind: &str, p: &[f64]) -> f64 {
    let n = p.len() as f64;
    let total: f64 = p.iter().sum();
    let p: Vec<f64> = p.iter().map(|x| x / total).collect();
    let max = p.iter().cloned().fold(f64::MIN, f64::max);
    if kind == "choice" {
        return (max - 1.0 / n) / (1.0 - 1.0 / n);
    }
    let k = p.iter().position(|&x| x == max).expect("a mode") as f64;
    let spread: f64 = p
        .iter()
        .enumerate()
        .map(|(i, x)| x * (i as f64 - k).abs())
        .sum();
    let d: f64 = (0..p.len())
        .map(|i| (i as f64 - (n - 1.0) / 2.0).abs())
        .sum::<f64>()
        / n;
    (1.0 - spread / d).max(0.0)
}

#[test]
fn strict_mode_answers_by_jevs_rules() {
    let _serial = crate::support::serial();
    let s = Server::mlx("tiny", "--f32", &["--jev-strict", "--api-key", "k3y"]);
    let auth = [("authorization", "Bearer k3y")];

    // The model ids a client may send.
    let models = s.send("GET", "/v1/models", &auth, None);
    assert_eq!(models.status, 200);
    let listed = object(&models.text());
    let names: Vec<String> = match listed.get("models") {
        Some(Value::Array(m)) => m
            .iter()
            .map(|e| {
                let e = e.as_object().expect("an object");
                for key in ["description", "release_date"] {
                    assert!(e.get(key).and_then(Value::as_str).is_some(), "{key}");
                }
                e.get("name")
                    .and_then(Value::as_str)
                    .expect("name")
                    .to_owned()
            })
            .collect(),
        other => panic!("models: {other:?}"),
    };
    assert_eq!(
        names,
        ["jev-latest", "english", "multilingual", "typed-decisions"]
    );

    // Authentication errors say their kind, and the response id is where Jev's SDK reads it.
    let unauthorized = r#"{"detail":{"error_type":"authentication_error","message":"invalid or missing bearer token"}}"#;
    for headers in [vec![], vec![("authorization", "Bearer nope")]] {
        let r = post(
            &s,
            &headers,
            &request(r#"{"q":{"type":"noul","instructions":"Refund?"}}"#),
        );
        assert_eq!((r.status, r.text().as_str()), (401, unauthorized));
        assert!(r.header("x-typesafe-request-id").is_some());
        assert_eq!(r.header("x-typesafe-request-id"), r.header("x-request-id"));
        let m = s.send("GET", "/v1/models", &headers, None);
        assert_eq!((m.status, m.text().as_str()), (401, unauthorized));
    }

    // A noul without instructions reads its criteria as its instructions.
    let criteria = r#"{"true":"The customer threatens a chargeback","false":null}"#;
    let bare = post(
        &s,
        &auth,
        &request(&format!(
            r#"{{"t":{{"type":"noul","criteria":{criteria}}}}}"#
        )),
    );
    let explicit = post(
        &s,
        &auth,
        &request(&format!(
            r#"{{"t":{{"type":"noul","instructions":{criteria},"criteria":{criteria}}}}}"#
        )),
    );
    assert_eq!(bare.status, 200, "{}", bare.text());
    assert_eq!(bare.text(), explicit.text());

    // `confidence` is Jev's formula over the probabilities sent (4 decimals).
    let asked = request(
        r#"{"team":{"type":"choice","instructions":"Which team?","criteria":{"Billing":null,"Technical":null,"Sales":null,"Legal":null}},
            "anger":{"type":"score","instructions":"How frustrated?","criteria":["Calm","Frustrated","Very angry","Furious","Beyond"]}}"#,
    );
    let r = post(&s, &auth, &asked);
    assert_eq!(r.status, 200, "{}", r.text());
    let answers = object(&r.text());
    let answers = answers
        .get("answers")
        .and_then(Value::as_object)
        .expect("answers");
    for (qid, kind) in [("team", "choice"), ("anger", "score")] {
        let a = answers.get(qid).and_then(Value::as_object).expect("answer");
        let sent = a
            .get("confidence")
            .and_then(Value::as_number_f64)
            .expect("confidence");
        let want = jev_confidence(kind, &probabilities(a));
        assert!(
            (sent - want).abs() <= 1e-4 + 1e-9,
            "{qid}: {sent} vs {want}"
        );
    }

    // Content refusals are 422s listing where the problem is; `msg` is upstream's text.
    let base = r#""model":"jev-latest","state":"x","questions":{"refund":{"type":"noul","instructions":"Refund?"}}"#;
    for (body, loc, msg) in [
        (
            r#"{"model": "jev-latest", "state": "x", "questions": {"#.to_owned(),
            "[\"body\"]",
            "request body must be valid JSON",
        ),
        (
            r#"{"model":"jev-latest","questions":{"refund":{"type":"noul","instructions":"Refund?"}}}"#.to_owned(),
            "[\"body\",\"state\"]",
            "'state' is required",
        ),
        (
            r#"{"model":"jev-latest","state":"x"}"#.to_owned(),
            "[\"body\",\"questions\"]",
            "request body must be an object with a 'questions' field",
        ),
        (
            r#"{"model":"jev-latest","state":"x","questions":{}}"#.to_owned(),
            "[\"body\",\"questions\"]",
            "questions must hold at least one question",
        ),
        (
            format!("{{{base},\"max_len\":0}}"),
            "[\"body\",\"max_len\"]",
            "max_len must be a positive integer",
        ),
        (
            request(r#"{"refund":{"type":"boolean","instructions":"Refund?"}}"#),
            "[\"body\",\"questions\"]",
            "question 'refund': unknown type 'boolean'; use one of ['choice', 'noul', 'score']",
        ),
        (
            request(r#"{"anger":{"type":"score","instructions":"How?","criteria":["Calm",null]}}"#),
            "[\"body\",\"questions\",\"anger\",\"criteria\",\"1\"]",
            "score question 'anger' has a null level at index 1; give every level a description",
        ),
    ] {
        let r = post(&s, &auth, &body);
        let mut msg_json = String::new();
        pyjson::write_str(&mut msg_json, msg);
        assert_eq!(r.status, 422, "{body}: {}", r.text());
        let text = r.text();
        assert!(
            text.starts_with(&format!(r#"{{"detail":[{{"loc":{loc},"msg":{msg_json},"type":""#))
                && text.ends_with("\"}]}"),
            "{body}: {text}"
        );
    }

    // Choices up to Jev's 255 options are answered with every option; 256 are too many.
    let options = |n: usize| {
        let mut crit = Object::new();
        for i in 0..n {
            crit.insert(format!("Queue {i:03}"), Value::Null);
        }
        pyjson::dumps(&Value::Object(crit), pyjson::Style::Compact).expect("finite")
    };
    for n in [128, 255] {
        let r = post(
            &s,
            &auth,
            &request(&format!(
                r#"{{"queue":{{"type":"choice","instructions":"Which queue?","criteria":{}}}}}"#,
                options(n)
            )),
        );
        assert_eq!(r.status, 200, "{n} options: {}", r.text());
        let o = object(&r.text());
        let a = o
            .get("answers")
            .and_then(Value::as_object)
            .and_then(|a| a.get("queue"))
            .and_then(Value::as_object)
            .expect("the answer");
        let p = probabilities(a);
        assert_eq!(p.len(), n);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 0.05, "{n} options");
        assert_eq!(
            a.keys().collect::<Vec<_>>(),
            ["type", "choice", "confidence", "probabilities"],
            "Jev's keys only"
        );
    }
    let r = post(
        &s,
        &auth,
        &request(&format!(
            r#"{{"queue":{{"type":"choice","instructions":"Which queue?","criteria":{}}}}}"#,
            options(256)
        )),
    );
    assert_eq!(
        (r.status, r.text().as_str()),
        (
            413,
            r#"{"detail":{"error_type":"request_too_large","message":"too many choice options for 'queue' (256 > 255)"}}"#
        )
    );
}

/// Without `--jev-strict` nothing of the above is served: upstream has no `/v1/models`.
#[test]
fn the_default_mode_keeps_upstreams_routes() {
    let s = Server::tiny(&[]);
    let r = s.send("GET", "/v1/models", &[], None);
    assert_eq!(
        (r.status, r.text().as_str()),
        (404, r#"{"detail":"Not Found"}"#)
    );
    assert!(r.header("x-typesafe-request-id").is_none());
}
