//! Long states over HTTP: `"overflow": "windows"` answers with upstream `predict_long`.
//!
//! Every case of `references/<checkpoint>/long-windows.jsonl` (upstream laya 0.4.15's library
//! `predict_long`) is sent to the server on MLX in f32 and must give upstream's result under
//! the library test's rule (crates/laya-mlx/tests/answers.rs): the text equal except a number
//! one unit off in the 4th decimal whose unrounded value lies on a rounding boundary. The
//! server adds what it adds to every answer (`x_jev_confidence`, `routing`); those are taken
//! off before comparing. Then the new fields' refusals, the batch route, strict mode, and a
//! request without the fields answered as before.

use laya_core::agent::LongOptions;
use laya_core::question::parse_questions;
use laya_core::render;
use laya_fixtures::{check_f32, checkpoints, fixtures_dir, long_unrounded, read_jsonl};
use pyjson::{Object, Style, Value};

use crate::support::{checkpoint, serve_args, Response, Server};

/// As crates/laya-mlx/tests/answers.rs: MLX's and PyTorch's f32 differ by summation order.
const BOUNDARY: f64 = 1e-5;

fn object(text: &str, ctx: &str) -> Object {
    match pyjson::loads(text.as_bytes()).map(|p| p.value) {
        Ok(Value::Object(o)) => o,
        other => panic!("{ctx}: not a JSON object: {other:?}: {text}"),
    }
}

/// `o` without the members `drop`, order kept.
fn without(o: &Object, drop: &[&str]) -> Object {
    let mut out = Object::new();
    for (k, v) in o.iter() {
        if !drop.contains(&k) {
            out.insert(k.to_owned(), v.clone());
        }
    }
    out
}

fn member(o: &Object, key: &str) -> Value {
    o.get(key)
        .cloned()
        .unwrap_or_else(|| panic!("no {key:?} in {}", compact(o)))
}

fn compact(v: &Object) -> String {
    pyjson::dumps(&Value::Object(v.clone()), Style::Compact).expect("finite")
}

fn int(call: &Object, key: &str) -> Option<usize> {
    match call.get(key) {
        Some(Value::Int(i)) => i.as_i64().map(|x| x as usize),
        _ => None,
    }
}

/// The request a client sends for a library call `{"state", "questions", "window"?, ...}`.
fn windows_request(call: &Object) -> String {
    let mut body = Object::new();
    body.insert("state".into(), call.get("state").expect("state").clone());
    body.insert(
        "questions".into(),
        call.get("questions").expect("questions").clone(),
    );
    body.insert("overflow".into(), Value::Str("windows".into()));
    for key in ["window", "stride"] {
        if let Some(v) = call.get(key) {
            body.insert(key.into(), v.clone());
        }
    }
    compact(&body)
}

/// The body without what the server adds to every result: `routing`, and each answer's
/// `x_jev_confidence` (which must be there for choice and score answers, as always).
fn as_library_result(resp: &Response, ctx: &str) -> String {
    assert_eq!(resp.status, 200, "{ctx}: {}", resp.text());
    let body = object(&resp.text(), ctx);
    assert!(body.contains_key("routing"), "{ctx}: no routing");
    let mut body = without(&body, &["routing"]);
    let Some(Value::Object(answers)) = body.get("answers") else {
        panic!("{ctx}: no answers")
    };
    let mut stripped = Object::new();
    for (qid, a) in answers.iter() {
        let Value::Object(a) = a else {
            panic!("{ctx}: answer {qid} is not an object")
        };
        let noul = matches!(a.get("type"), Some(Value::Str(t)) if t == "noul");
        assert_eq!(
            a.contains_key("x_jev_confidence"),
            !noul,
            "{ctx}: {qid}: x_jev_confidence"
        );
        stripped.insert(
            qid.to_owned(),
            Value::Object(without(a, &["x_jev_confidence"])),
        );
    }
    body.insert("answers".into(), Value::Object(stripped));
    compact(&body)
}

#[test]
fn long_window_cases_give_upstream_predict_long_over_http() {
    let _serial = crate::support::serial();
    let mut checked = 0;
    let mut refused = 0;
    for ckpt in &checkpoints() {
        let server = Server::mlx(ckpt, "--f32", &[]);
        // Our own unrounded values of the deciding windows, for the boundary rule.
        let dir = checkpoint(ckpt);
        let mut oracle = serve_args(&["--model", dir.to_str().expect("utf-8"), "--f32"])
            .model
            .engine
            .load_agent(&dir)
            .expect("the checkpoint loads");
        for case in read_jsonl(
            &fixtures_dir()
                .join("references")
                .join(ckpt)
                .join("long-windows.jsonl"),
        ) {
            let Value::Object(case) = case else {
                panic!("case must be an object")
            };
            let ctx = format!("{ckpt} {:?}", case.get("id"));
            let Some(Value::Object(call)) = case.get("call") else {
                panic!("{ctx}: no call")
            };
            let resp = server.post_json("/v1/systemone", &windows_request(call));
            if let Some(Value::Object(err)) = case.get("error") {
                let Some(Value::Str(message)) = err.get("message") else {
                    panic!("{ctx}: error without message")
                };
                assert_eq!(resp.status, 422, "{ctx}: {}", resp.text());
                let detail = object(&resp.text(), &ctx);
                assert_eq!(
                    detail.get("detail"),
                    Some(&Value::Str(message.clone())),
                    "{ctx}"
                );
                refused += 1;
                continue;
            }
            let Some(Value::Object(expected)) = case.get("result") else {
                panic!("{ctx}: neither result nor error")
            };
            let mine = as_library_result(&resp, &ctx);
            let upstream = compact(expected);
            let Some(Value::Object(questions)) = call.get("questions") else {
                panic!("{ctx}: no questions")
            };
            let questions = parse_questions(questions).expect("valid questions");
            let opts = LongOptions {
                window: int(call, "window"),
                stride: int(call, "stride"),
                ..LongOptions::default()
            };
            let state = call.get("state").expect("state");
            let library = oracle
                .predict_long(state, &questions, &opts)
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let raw = long_unrounded(&mut oracle, state, &questions, &opts, &library);
            let raw_text = render::result_json(&raw).expect("finite");
            check_f32(&mine, &upstream, &raw_text, BOUNDARY)
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            checked += 1;
        }
    }
    // Per checkpoint: nine results and one refused stride.
    assert_eq!(checked, 9 * checkpoints().len(), "results checked");
    assert_eq!(refused, checkpoints().len(), "refusals checked");
}

/// The first long-window case of the `tiny` references: a 1,213-token state read in three
/// windows by default.
fn long_call() -> Object {
    let case = read_jsonl(
        &fixtures_dir()
            .join("references")
            .join("tiny")
            .join("long-windows.jsonl"),
    )
    .into_iter()
    .next()
    .expect("a case");
    match case {
        Value::Object(c) => match member(&c, "call") {
            Value::Object(call) => call,
            _ => panic!("no call"),
        },
        _ => panic!("case must be an object"),
    }
}

fn with(call: &Object, extra: &[(&str, &str)]) -> String {
    let mut body = object(&windows_request(call), "request");
    for (k, v) in extra {
        body.insert(
            (*k).into(),
            pyjson::loads(v.as_bytes()).expect("json").value,
        );
    }
    compact(&body)
}

fn detail(resp: &Response, status: u16) -> String {
    assert_eq!(resp.status, status, "{}", resp.text());
    match object(&resp.text(), "error").get("detail") {
        Some(Value::Str(s)) => s.clone(),
        other => panic!("detail: {other:?}"),
    }
}

#[test]
fn windows_fields_refusals_batch_and_strict() {
    let _serial = crate::support::serial();
    let call = long_call();
    let s = Server::mlx("tiny", "--f32", &["--max-windows", "8"]);
    let post = |body: &str| s.post_json("/v1/systemone", body);

    // Refused before inference, in upstream's words for its own budget fields.
    for (extra, text) in [
        (
            ("overflow", "\"window\""),
            "overflow must be 'truncate' or 'windows', got 'window'",
        ),
        (
            ("overflow", "1"),
            "overflow must be 'truncate' or 'windows', got 1",
        ),
        (("window", "0"), "window must be a positive integer"),
        (("window", "\"64\""), "window must be an integer"),
        (
            ("stride", "8193"),
            "stride exceeds server limit (8193 > 8192)",
        ),
        (
            ("max_windows", "9"),
            "max_windows exceeds server limit (9 > 8)",
        ),
        (("max_windows", "2.0"), "max_windows must be an integer"),
    ] {
        assert_eq!(
            detail(&post(&with(&call, &[extra])), 422),
            text,
            "{extra:?}"
        );
    }
    // A state needing more windows than allowed is refused with the numbers and the cap.
    assert_eq!(
        detail(&post(&with(&call, &[("max_windows", "2")])), 422),
        "overflow 'windows' needs 3 windows of 760 tokens (stride 380) for this state, more \
         than max_windows (2; this server allows up to 8); send a larger window or stride, a \
         larger max_len, or overflow 'truncate'"
    );
    assert_eq!(
        detail(&post(&with(&call, &[("window", "64")])), 422),
        "overflow 'windows' needs 37 windows of 64 tokens (stride 32) for this state, more \
         than max_windows (8, this server's cap); send a larger window or stride, a larger \
         max_len, or overflow 'truncate'"
    );

    // Without `overflow` (or with "truncate") the window fields are ignored, as upstream
    // ignores every field it does not know: the answer is the truncated one.
    let plain = without(&object(&windows_request(&call), "request"), &["overflow"]);
    let truncated = post(&compact(&plain));
    assert_eq!(truncated.status, 200, "{}", truncated.text());
    assert!(truncated.text().contains("\"truncated\":true"));
    assert!(!truncated.text().contains("\"window\":{"));
    for extra in [
        vec![("window", "64"), ("max_windows", "1000")],
        vec![("overflow", "\"truncate\""), ("window", "0")],
        vec![("overflow", "null"), ("stride", "\"x\"")],
    ] {
        let mut body = plain.clone();
        for (k, v) in &extra {
            body.insert(
                (*k).into(),
                pyjson::loads(v.as_bytes()).expect("json").value,
            );
        }
        let r = post(&compact(&body));
        assert_eq!(r.text(), truncated.text(), "{extra:?}");
    }

    // The windowed answer names its window and counts the windows and their tokens.
    let windowed = post(&with(&call, &[]));
    let text = windowed.text();
    assert_eq!(windowed.status, 200, "{text}");
    assert!(text.contains("\"windows\":3}"), "{text}");
    assert!(text.contains(",\"window\":{\"index\":"), "{text}");

    // The batch route takes the fields for every state: each result is the single route's.
    let short = "I was charged twice for my subscription this month.";
    let mut batch = Object::new();
    batch.insert(
        "states".into(),
        Value::Array(vec![
            call.get("state").expect("state").clone(),
            Value::Str(short.into()),
        ]),
    );
    batch.insert(
        "questions".into(),
        call.get("questions").expect("questions").clone(),
    );
    batch.insert("overflow".into(), Value::Str("windows".into()));
    let b = s.post_json("/v1/systemone/batch", &compact(&batch));
    assert_eq!(b.status, 200, "{}", b.text());
    let mut single_short = object(&windows_request(&call), "request");
    single_short.insert("state".into(), Value::Str(short.into()));
    let short_text = post(&compact(&single_short)).text();
    assert!(short_text.contains("\"windows\":1}"), "{short_text}");
    let results = match member(&object(&b.text(), "batch"), "results") {
        Value::Array(r) => r,
        other => panic!("results: {other:?}"),
    };
    let texts: Vec<String> = results
        .iter()
        .map(|r| pyjson::dumps(r, Style::Compact).expect("finite"))
        .collect();
    assert_eq!(texts, [text, short_text], "batch results");
    drop(s);

    // Strict Jev mode keeps Jev's keys only: no window report.
    let strict = Server::mlx("tiny", "--f32", &["--jev-strict"]);
    let r = strict.post_json("/v1/systemone", &with(&call, &[]));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!r.text().contains("window"), "{}", r.text());
    drop(strict);

    // A tournament cannot run over windows.
    let t = Server::mlx("tiny", "--f32", &["--tournament-group", "2"]);
    assert_eq!(
        detail(&t.post_json("/v1/systemone", &with(&call, &[])), 422),
        "overflow 'windows' cannot be combined with a tournament (LAYA_TOURNAMENT_GROUP=2): \
         'dept' has 3 options; ask at most 2 options per choice or send overflow 'truncate'"
    );
}
