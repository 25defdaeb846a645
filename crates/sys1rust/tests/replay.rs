//! The replay test: the server on each stored checkpoint answers every recorded request of
//! `references/<checkpoint>/{smoke,short,edge}.jsonl` with upstream's status, recorded headers
//! (timing values aside) and body bytes, through `app()` in process.
//!
//! On the recorded-logits engine (upstream's own logits) every body must be upstream's text,
//! up to a number on a 4th-decimal rounding boundary (within 1e-6 of it); raw-body requests,
//! for which upstream recorded no logits, must match in everything but the model's numbers. On MLX in f32 the body must equal upstream's text except a number
//! one unit off in the 4th decimal whose unrounded upstream value lies on a rounding boundary
//! (for raw-body requests, whose unrounded values are unknown, any one-unit difference)
//! (the engine parity rule, see crates/laya-mlx/tests/answers.rs for the tolerance); in f16
//! every probability must be within 1e-2 of upstream's and the choice equal except near ties,
//! with everything else in the body (usage, routing, errors, key order) exact.

use laya_core::agent::Agent;
use laya_fixtures::{check_f32, checkpoints, references, unrounded_body, Replay, WORKLOADS};
use pyjson::{Object, Style, Value};

use crate::support::{checkpoint, Server};

/// See crates/laya-mlx/tests/answers.rs: MLX's and PyTorch's f32 differ by summation order.
const BOUNDARY: f64 = 1e-5;
/// Where upstream's unrounded value is unknown: any 4-decimal number is within 5e-5 of a
/// rounding boundary.
const UNKNOWN_BOUNDARY: f64 = 5.0e-5 + 1e-9;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// laya-fixtures' recorded-logits engine.
    Recorded,
    /// MLX on the CPU.
    F32,
    F16,
}

fn header_matches(expected: &str, got: Option<&str>) -> bool {
    let Some(got) = got else { return false };
    if !expected.contains("<ms>") {
        return expected == got;
    }
    // `<ms>` stands for a `%.2f` number.
    let (prefix, suffix) = expected.split_once("<ms>").unwrap_or((expected, ""));
    let Some(number) = got
        .strip_prefix(prefix)
        .and_then(|g| g.strip_suffix(suffix))
    else {
        return false;
    };
    let (int, frac) = number.split_once('.').unwrap_or(("", ""));
    !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.len() == 2
        && frac.bytes().all(|b| b.is_ascii_digit())
}

fn compact(v: &Value) -> String {
    pyjson::dumps(v, Style::Compact).expect("finite")
}

/// The f16 rule on one answer object; everything but the numbers is compared exactly.
fn compare_answer_f16(mine: &Object, up: &Object, ctx: &str, worst: &mut f64, flips: &mut usize) {
    let keys = |o: &Object| o.keys().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(keys(mine), keys(up), "{ctx}: answer keys");
    let number = |v: Option<&Value>| v.and_then(Value::as_number_f64).unwrap_or(f64::NAN);
    let probs = |o: &Object| -> Vec<f64> {
        match o.get("probabilities") {
            Some(Value::Object(p)) => p
                .values()
                .map(|v| v.as_number_f64().unwrap_or(f64::NAN))
                .collect(),
            _ => vec![1.0 - number(o.get("noul")), number(o.get("noul"))],
        }
    };
    let (pm, pu) = (probs(mine), probs(up));
    assert_eq!(pm.len(), pu.len(), "{ctx}: probability count");
    for (m, u) in pm.iter().zip(&pu) {
        let e = (m - u).abs();
        *worst = worst.max(e);
        assert!(e <= 1e-2, "{ctx}: probability {m} vs upstream {u}");
    }
    if let (Some(cm), Some(cu)) = (mine.get("choice"), up.get("choice")) {
        if compact(cm) != compact(cu) {
            let mut sorted = pu.clone();
            sorted.sort_by(|a, b| b.total_cmp(a));
            let gap = sorted[0] - sorted.get(1).copied().unwrap_or(0.0);
            assert!(
                gap <= 0.02,
                "{ctx}: choice {} vs upstream {} with a gap of {gap}",
                compact(cm),
                compact(cu)
            );
            *flips += 1;
        }
    }
    for key in ["type", "legend"] {
        assert_eq!(
            mine.get(key).map(compact),
            up.get(key).map(compact),
            "{ctx}: {key}"
        );
    }
}

pub(crate) fn compare_result_f16(
    mine: &Value,
    up: &Value,
    ctx: &str,
    worst: &mut f64,
    flips: &mut usize,
) {
    let (Value::Object(m), Value::Object(u)) = (mine, up) else {
        panic!("{ctx}: result is not an object")
    };
    let keys = |o: &Object| o.keys().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(keys(m), keys(u), "{ctx}: result keys");
    for (k, uv) in u.iter() {
        let mv = m.get(k).expect("same keys");
        match (k, mv, uv) {
            ("answers", Value::Object(ma), Value::Object(ua)) => {
                assert_eq!(keys(ma), keys(ua), "{ctx}: answer ids");
                for (qid, ua) in ua.iter() {
                    let (Some(Value::Object(ma)), Value::Object(ua)) = (ma.get(qid), ua) else {
                        panic!("{ctx}: answer")
                    };
                    compare_answer_f16(ma, ua, &format!("{ctx} {qid}"), worst, flips);
                }
            }
            ("results", Value::Array(mr), Value::Array(ur)) => {
                assert_eq!(mr.len(), ur.len(), "{ctx}: results");
                for (i, (a, b)) in mr.iter().zip(ur).enumerate() {
                    compare_result_f16(a, b, &format!("{ctx} result {i}"), worst, flips);
                }
            }
            _ => assert_eq!(compact(mv), compact(uv), "{ctx}: {k}"),
        }
    }
}

/// The same shape: equal keys everywhere and equal values, except the model's numbers
/// (answers' probabilities and confidences), which upstream did not record for this request.
fn compare_shape(mine: &Value, up: &Value, ctx: &str, in_answer: bool) {
    match (mine, up) {
        (Value::Object(m), Value::Object(u)) => {
            let keys = |o: &Object| o.keys().map(str::to_owned).collect::<Vec<_>>();
            assert_eq!(keys(m), keys(u), "{ctx}: keys");
            for (k, uv) in u.iter() {
                let mv = m.get(k).expect("same keys");
                compare_shape(mv, uv, &format!("{ctx}.{k}"), in_answer || k == "answers");
            }
        }
        (Value::Array(m), Value::Array(u)) => {
            assert_eq!(m.len(), u.len(), "{ctx}: length");
            for (i, (a, b)) in m.iter().zip(u).enumerate() {
                compare_shape(a, b, &format!("{ctx}[{i}]"), in_answer);
            }
        }
        (Value::Float(_), Value::Float(_)) if in_answer => {}
        // A choice may land on another label with other numbers.
        _ if in_answer && ctx.ends_with(".choice") => {}
        _ => assert_eq!(compact(mine), compact(up), "{ctx}"),
    }
}

fn server(ckpt: &str, mode: Mode) -> Server {
    match mode {
        Mode::Recorded => Server::recorded(ckpt, &[]),
        Mode::F32 => Server::mlx(ckpt, "--f32", &[]),
        Mode::F16 => Server::mlx(ckpt, "--f16", &[]),
    }
}

fn replay(mode: Mode) {
    // MLX keeps both cores busy: the timed tests would miss their deadlines beside it.
    let _serial = (mode != Mode::Recorded).then(crate::support::serial);
    let label = match mode {
        Mode::Recorded => "recorded",
        Mode::F32 => "--f32",
        Mode::F16 => "--f16",
    };
    let mut checked = 0;
    let mut boundary = 0;
    let mut shapes = 0;
    let (mut worst, mut flips) = (0.0f64, 0usize);
    for ckpt in &checkpoints() {
        let dir = checkpoint(ckpt);
        let mut oracle = Agent::load(&dir, Replay::default()).expect("tokenizer and configs");
        // One server for the three files in order, as upstream's references were recorded
        // (shared/oracle/make_references.py runs every workload on one server): /health lists
        // checkpoints least recently used first, so it depends on every request before it.
        let server = server(ckpt, mode);
        for workload in WORKLOADS {
            for reference in references(ckpt, workload) {
                let ctx = format!("{label} {ckpt}/{workload} {}", reference.id);
                let headers: Vec<(&str, &str)> = reference
                    .request_headers
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let headers = if headers.is_empty() && reference.request_body.is_some() {
                    vec![("content-type", "application/json")]
                } else {
                    headers
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
                for (name, value) in &reference.headers {
                    assert!(
                        header_matches(value, resp.header(name)),
                        "{ctx}: header {name}: {:?} vs upstream {value:?}",
                        resp.header(name)
                    );
                }
                let mut body = resp.text();
                if reference.path == "/health" {
                    // The references were recorded on the CPU; a GPU server names its device.
                    body = body
                        .replace("\"cuda\"", "\"cpu\"")
                        .replace("\"mps\"", "\"cpu\"");
                }
                let decision =
                    reference.status == 200 && reference.path.starts_with("/v1/systemone");
                if !decision || body == reference.body {
                    assert_eq!(body, reference.body, "{ctx}: body");
                } else if mode == Mode::Recorded && !reference.passes.is_empty() {
                    // Upstream's logits, decoded here: its text up to a 4th-decimal rounding
                    // boundary (f32 softmax summation order), as laya-fixtures'
                    // layout_decode test allows.
                    let unrounded = unrounded_body(&mut oracle, &reference)
                        .unwrap_or_else(|| reference.body.clone());
                    boundary += check_f32(&body, &reference.body, &unrounded, 1e-6)
                        .unwrap_or_else(|e| panic!("{ctx}: {e}"))
                        .len();
                } else if mode == Mode::Recorded {
                    let mine = pyjson::loads(body.as_bytes())
                        .expect("our body is JSON")
                        .value;
                    let up = pyjson::loads(reference.body.as_bytes())
                        .expect("upstream body is JSON")
                        .value;
                    compare_shape(&mine, &up, &ctx, false);
                    shapes += 1;
                } else if mode == Mode::F32 {
                    // A raw-body request has no recorded logits, so its unrounded values are
                    // unknown: a 4-decimal number is 5e-5 from the nearest boundary at most,
                    // and one unit off is all f32 summation order (which differs between the
                    // BLAS kernels of different CPUs) may move it.
                    let (unrounded, tolerance) = match unrounded_body(&mut oracle, &reference) {
                        Some(unrounded) => (unrounded, BOUNDARY),
                        None => (reference.body.clone(), UNKNOWN_BOUNDARY),
                    };
                    boundary += check_f32(&body, &reference.body, &unrounded, tolerance)
                        .unwrap_or_else(|e| panic!("{ctx}: {e}"))
                        .len();
                } else {
                    let mine = pyjson::loads(body.as_bytes())
                        .expect("our body is JSON")
                        .value;
                    let up = pyjson::loads(reference.body.as_bytes())
                        .expect("upstream body is JSON")
                        .value;
                    compare_result_f16(&mine, &up, &ctx, &mut worst, &mut flips);
                }
                checked += 1;
            }
        }
    }
    println!("{label}: {checked} requests replayed; {shapes} without upstream logits compared by shape; {boundary} numbers on a rounding boundary; f16 max probability error {worst:.5}, near-tie flips {flips}");
    let recorded: usize = checkpoints()
        .iter()
        .flat_map(|c| WORKLOADS.map(|w| references(c, w).len()))
        .sum();
    assert!(recorded > 100, "only {recorded} references");
    assert_eq!(checked, recorded, "every recorded request is replayed");
}

#[test]
fn replay_recorded_logits_give_upstream_bytes() {
    replay(Mode::Recorded);
}

#[test]
fn replay_f32_matches_upstream_bytes() {
    replay(Mode::F32);
}

#[test]
fn replay_f16_within_tolerance() {
    replay(Mode::F16);
}
