//! The `routing` block of every 200 answer of both decision routes in the upstream references,
//! and the `unknown model` 422 details, reproduced byte for byte.
//!
//! References: `references/<checkpoint>/{smoke,short,edge}.jsonl` of the fixtures
//! (`crates/laya-fixtures/data`, or `$SYS1_FIXTURES`). They were recorded with every
//! checkpoint name registered to the one checkpoint directory, so `routing.repo` is that
//! directory's name (`"tiny"`, `"tiny-multilingual-shape"`) for all three names; the router
//! default (`multilingual`) and `LAYA_AUTO_TASK` off.

use laya_core::routing::{resolve_model_field, route, Routing, RoutingConfig};
use laya_fixtures::fixtures_dir;
use pyjson::{dumps, loads, Object, Style, Value};

fn get<'a>(o: &'a Object, key: &str) -> &'a Value {
    o.get(key)
        .unwrap_or_else(|| panic!("reference lacks {key:?}"))
}

fn obj(v: &Value) -> &Object {
    v.as_object()
        .unwrap_or_else(|| panic!("expected an object, got {}", v.type_name()))
}

fn text(v: &Value) -> &str {
    v.as_str()
        .unwrap_or_else(|| panic!("expected a string, got {}", v.type_name()))
}

/// The request body as upstream parsed it: `body` (a JSON value) or `raw_body` (the bytes).
fn request_body(request: &Object) -> Option<Value> {
    if let Some(b) = request.get("body") {
        return Some(b.clone());
    }
    let raw = request.get("raw_body")?;
    loads(text(raw).as_bytes()).ok().map(|p| p.value)
}

/// Upstream's routing for one state of a request body (same controls for every state).
fn route_body(body: &Object, state: &Value, cfg: &RoutingConfig) -> Result<Routing, String> {
    let pin = resolve_model_field(body.get("model").unwrap_or(&Value::Null), cfg)?;
    let ids: Vec<&str> = body
        .get("questions")
        .and_then(Value::as_object)
        .map(|q| q.keys().collect())
        .unwrap_or_default();
    let lang = body.get("lang").and_then(Value::as_str);
    let lang_guess = body.get("lang_guess").and_then(Value::as_str);
    route(
        state,
        &ids,
        pin.as_ref(),
        body.get("task"),
        lang,
        lang_guess,
        cfg,
    )
}

#[derive(Default, Debug)]
struct Tally {
    single: usize,
    batch_states: usize,
    errors: usize,
}

#[test]
fn routing_matches_upstream_references() {
    let dir = fixtures_dir();
    let mut tally = Tally::default();
    let mut failures = Vec::new();
    for ckpt in ["tiny", "tiny-multilingual-shape"] {
        let cfg = RoutingConfig::single_source(ckpt);
        for set in ["smoke", "short", "edge"] {
            let path = dir
                .join("references")
                .join(ckpt)
                .join(format!("{set}.jsonl"));
            let data = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            for line in data.lines().filter(|l| !l.trim().is_empty()) {
                let rec = loads(line.as_bytes())
                    .unwrap_or_else(|e| panic!("{}: {e:?}", path.display()))
                    .value;
                let rec = obj(&rec);
                let id = rec
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_string();
                let where_ = format!("{ckpt}/{set} {id}");
                let request = obj(get(rec, "request"));
                let path_ = text(get(request, "path"));
                if path_ != "/v1/systemone" && path_ != "/v1/systemone/batch" {
                    continue;
                }
                let status = get(rec, "status").as_number_f64().unwrap_or(0.0) as u16;
                let resp_text = text(get(rec, "body"));
                let resp = loads(resp_text.as_bytes())
                    .unwrap_or_else(|e| panic!("{where_}: response {e:?}"))
                    .value;
                let resp = obj(&resp);

                if status == 422 {
                    let detail = text(get(resp, "detail"));
                    if !detail.starts_with("unknown model") {
                        continue;
                    }
                    let body = request_body(request)
                        .unwrap_or_else(|| panic!("{where_}: unreadable body"));
                    let body = obj(&body);
                    let got = route_body(body, get(body, "state"), &cfg);
                    match got {
                        Err(e) if e == detail => tally.errors += 1,
                        other => {
                            failures.push(format!("{where_}: want Err({detail:?}), got {other:?}"))
                        }
                    }
                    continue;
                }
                if status != 200 {
                    continue;
                }
                let body =
                    request_body(request).unwrap_or_else(|| panic!("{where_}: unreadable body"));
                let body = obj(&body);
                if path_ == "/v1/systemone" {
                    let want = dumps(get(resp, "routing"), Style::Compact).expect("finite");
                    match route_body(body, get(body, "state"), &cfg) {
                        Ok(r) => {
                            let got = r.to_json();
                            // Exact text: the block is the body's last key.
                            if got == want && resp_text.ends_with(&format!("\"routing\":{got}}}")) {
                                tally.single += 1;
                            } else {
                                failures.push(format!("{where_}:\n  want {want}\n  got  {got}"));
                            }
                        }
                        Err(e) => failures.push(format!("{where_}: unexpected error {e:?}")),
                    }
                } else {
                    let states = get(body, "states")
                        .as_array()
                        .unwrap_or_else(|| panic!("{where_}: states"));
                    let results = get(resp, "results")
                        .as_array()
                        .unwrap_or_else(|| panic!("{where_}: results"));
                    assert_eq!(states.len(), results.len(), "{where_}");
                    let mut from = 0usize;
                    for (i, (state, result)) in states.iter().zip(results).enumerate() {
                        let want =
                            dumps(get(obj(result), "routing"), Style::Compact).expect("finite");
                        match route_body(body, state, &cfg) {
                            Ok(r) => {
                                let got = r.to_json();
                                let needle = format!("\"routing\":{got}}}");
                                match resp_text[from..].find(&needle) {
                                    Some(at) if got == want => {
                                        from += at + needle.len();
                                        tally.batch_states += 1;
                                    }
                                    _ => failures.push(format!(
                                        "{where_} state {i}:\n  want {want}\n  got  {got}"
                                    )),
                                }
                            }
                            Err(e) => {
                                failures.push(format!("{where_} state {i}: unexpected error {e:?}"))
                            }
                        }
                    }
                }
            }
        }
    }
    eprintln!("routing references matched: {tally:?}");
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        tally.single > 200 && tally.batch_states > 0,
        "too few references read: {tally:?}"
    );
    assert_eq!(
        tally.errors, 4,
        "expected the x25/x31 unknown-model 422s of both checkpoints"
    );
}
