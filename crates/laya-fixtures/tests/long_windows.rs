//! `predict_long`'s scan against upstream's library-level references: the same window texts
//! (decoded and re-tokenized exactly as transformers 5.24 does), the same token count, and
//! upstream's error text where it refuses. The answers over those windows need a model and are
//! checked by the engine crates.

use laya_core::agent::{Agent, LongOptions};
use laya_core::question::parse_questions;
use laya_fixtures::{checkpoints, fixtures_dir, read_jsonl, Replay};
use pyjson::Value;

fn int(call: &pyjson::Object, key: &str) -> Option<usize> {
    match call.get(key) {
        Some(Value::Int(i)) => i.as_i64().map(|x| x as usize),
        _ => None,
    }
}

#[test]
fn long_scan_matches_upstream() {
    let fixtures = fixtures_dir();
    let mut checked = 0;
    for ckpt in &checkpoints() {
        let engine = Agent::load(&fixtures.join("checkpoints").join(ckpt), Replay::default())
            .expect("loads");
        for case in read_jsonl(
            &fixtures
                .join("references")
                .join(ckpt)
                .join("long-windows.jsonl"),
        ) {
            let Value::Object(case) = case else {
                panic!("case must be an object")
            };
            let id = format!("{ckpt} {:?}", case.get("id"));
            let Some(Value::Object(call)) = case.get("call") else {
                panic!("{id}: no call")
            };
            let Some(Value::Object(questions)) = call.get("questions") else {
                panic!("{id}: no questions")
            };
            let questions = parse_questions(questions).expect("valid questions");
            let opts = LongOptions {
                window: int(call, "window"),
                stride: int(call, "stride"),
                batch_size: int(call, "batch_size"),
                ..LongOptions::default()
            };
            let state = call.get("state").expect("state");
            let scan = engine.long_scan(state, &questions, &opts);
            if let Some(Value::Object(err)) = case.get("error") {
                let Some(Value::Str(message)) = err.get("message") else {
                    panic!("{id}: error without message")
                };
                assert_eq!(
                    scan.expect_err("upstream refused this call").to_string(),
                    *message,
                    "{id}"
                );
            } else {
                let scan = scan.unwrap_or_else(|e| panic!("{id}: {e}"));
                let Some(Value::Int(tokens)) = case.get("state_tokens") else {
                    panic!("{id}: no state_tokens")
                };
                assert_eq!(
                    Some(scan.state_tokens as i64),
                    tokens.as_i64(),
                    "{id}: state tokens"
                );
                let Some(Value::Array(windows)) = case.get("windows") else {
                    panic!("{id}: no windows")
                };
                let upstream: Vec<&str> = windows
                    .iter()
                    .map(|w| match w {
                        Value::Str(s) => s.as_str(),
                        _ => panic!("{id}: window text must be a string"),
                    })
                    .collect();
                let single = upstream.len() <= 1 && scan.windows.is_empty();
                assert!(
                    single || scan.windows == upstream,
                    "{id}: window texts differ"
                );
            }
            checked += 1;
        }
    }
    // Ten cases per checkpoint (crates/laya-fixtures/oracle/regen.py `long_cases`).
    assert_eq!(
        checked,
        10 * checkpoints().len(),
        "every long-window case is checked"
    );
}
