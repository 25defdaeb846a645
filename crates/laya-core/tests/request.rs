//! Request validation (`laya_core::request`): spec api.md §5.1 steps 6-14 and the batch route's
//! checks (§7), against upstream's recorded references and the numbered §13 cases.

use laya_core::confidence::MinConfidence;
use laya_core::request::{
    batch_chunk_size, laya_port, parse_batch, parse_decision, state_length, tournament_group,
    BatchRequest, DecisionRequest, Limits, RequestError, RequestErrorKind, DEFAULT_PORT,
};
use laya_core::routing::RoutingConfig;
use laya_fixtures::fixtures_dir;
use pyjson::Value;

// ---------------------------------------------------------------------------------------------
// helpers

/// The status the server answers each class of refusal with (sys1rust's `ApiError`; spec
/// api.md §5.1), so the cases below read as the spec's tables do.
fn status(e: &RequestError) -> u16 {
    match e.kind() {
        RequestErrorKind::Malformed => 400,
        RequestErrorKind::TooLarge => 413,
        RequestErrorKind::Invalid => 422,
        RequestErrorKind::Uncaught => 500,
    }
}

/// The registry of the three built-in names (what `model` is resolved against).
fn registry() -> RoutingConfig {
    RoutingConfig::default()
}

/// Upstream's refusal of a `model` naming a path (§4.5), for the value `'a/b'`.
const MODEL_A_B: &str = "unknown model 'a/b'; choose one of ['english', 'multilingual', 'typed-decisions'] (or an alias: ['decisions', 'default', 'en', 'laya', 'laya-multilingual', 'laya-typed-decisions', 'ml', 'multi', 'typed', 'typed_decisions']), or omit model to let the router choose";

fn dec(body: impl AsRef<[u8]>) -> Result<DecisionRequest, RequestError> {
    parse_decision(body.as_ref(), &Limits::default(), &registry())
}

fn batch(body: impl AsRef<[u8]>) -> Result<BatchRequest, RequestError> {
    parse_batch(body.as_ref(), &Limits::default(), &registry())
}

#[track_caller]
fn expect_err<T: std::fmt::Debug>(r: Result<T, RequestError>, want: u16, detail: &str) {
    match r {
        Ok(v) => panic!("expected {want} {detail:?}, got Ok({v:?})"),
        Err(e) => assert_eq!((status(&e), e.to_string().as_str()), (want, detail)),
    }
}

#[track_caller]
fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("expected Ok, got {e}"),
    }
}

/// The response body upstream renders for a refusal: `{"detail": ...}`, or Starlette's text.
fn body_of(e: &RequestError) -> String {
    if e.kind() == RequestErrorKind::Uncaught {
        return e.to_string();
    }
    format!("{{\"detail\":{}}}", json_str(&e.to_string()))
}

const Q1: &str = r#"{"dept":{"type":"choice","instructions":"which team?","criteria":{"billing":"refunds","tech":"bugs"}}}"#;

/// `{"state":"x","questions":Q1, <extra>}`.
fn with_q1(extra: &str) -> String {
    format!(
        r#"{{"state":"x","questions":{Q1}{}{extra}}}"#,
        if extra.is_empty() { "" } else { "," }
    )
}

fn json_str(s: &str) -> String {
    let mut out = String::new();
    pyjson::write_str(&mut out, s);
    out
}

fn choice(n: usize) -> String {
    let labels: Vec<String> = (0..n).map(|i| format!("\"o{i}\"")).collect();
    format!(
        r#"{{"type":"choice","instructions":"p","criteria":[{}]}}"#,
        labels.join(",")
    )
}

fn score(n: usize) -> String {
    let levels: Vec<String> = (0..n).map(|i| format!("\"l{i}\"")).collect();
    format!(
        r#"{{"type":"score","instructions":"p","criteria":[{}]}}"#,
        levels.join(",")
    )
}

const HOOKS_TAIL: &str =
    " run inside the server process and cannot be sent to this endpoint; install them where laya-serve runs, or drop them";
const SURROGATE: &str =
    "request body contains an unpaired surrogate escape; those cannot be encoded as UTF-8";
const DIAGNOSTICS: &str = "diagnostics is filled in place for an in-process caller and cannot be returned over HTTP; read the per-group report from the CLI or a local Router";

// ---------------------------------------------------------------------------------------------
// upstream references

fn read_references(checkpoint: &str, workload: &str) -> Vec<Value> {
    let path = fixtures_dir()
        .join("references")
        .join(checkpoint)
        .join(format!("{workload}.jsonl"));
    let text =
        std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.split(|&b| b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        // Parsed with Python's rules so duplicate keys and big ints in bodies stay exact.
        .map(|l| {
            pyjson::loads(l)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                .value
        })
        .collect()
}

fn field<'a>(v: &'a Value, key: &str) -> &'a Value {
    v.as_object()
        .and_then(|o| o.get(key))
        .unwrap_or(&Value::Null)
}

/// The bytes the reference harness sent: `json.dumps(body, ensure_ascii=False)`, or `raw_body`.
fn request_bytes(req: &Value) -> Vec<u8> {
    if let Some(raw) = field(req, "raw_body").as_str() {
        return raw.as_bytes().to_vec();
    }
    pyjson::dumps_spaced(field(req, "body")).into_bytes()
}

/// References whose failure comes after step 14 (question validation, `task`, option overflow,
/// non-finite rendering: steps 16-18): validation must let them through.
const FAIL_LATER: &[&str] = &[
    "x12_unknown_type",
    "x13_missing_instructions",
    "x14_blank_instructions",
    "x15_choice_empty_criteria",
    "x16_choice_label_collision",
    "x17_choice_label_null",
    "x18_noul_bad_criteria_keys",
    "x19_labels_on_choice",
    "x20_noul_labels_equal",
    "x21_option_order_bad",
    "x30_markers_do_not_fit",
    // Unknown `task`: resolved by routing inside inference (step 16), not checked here.
    "x31_unknown_task",
    "x32_choice_nan_label",
    "x33_empty_question_id",
    "x34_question_not_dict",
];

/// Not this module's: x37/x38 are framework routing (step 0) and GET requests.
const NOT_OURS: &[&str] = &["x37_get_systemone", "x38_not_found"];

/// Every failure of steps 6-14 / the batch checks the edge workload records.
const OURS: &[&str] = &[
    "x01_invalid_json",
    "x02_empty_body",
    "x03_body_is_array",
    "x04_missing_state",
    "x05_questions_array",
    "x06_65_questions",
    "x07_choice_101_options",
    "x08_score_33_levels",
    "x09_state_50001_chars",
    "x10_dict_state_too_large",
    "x11_too_many_options_total",
    "x22_score_null_level",
    "x23_hooks",
    "x24_lone_surrogate",
    "x25_model_path",
    "x26_max_len_string",
    "x27_max_len_over_cap",
    "x28_lang_not_string",
    "x29_min_confidence_bad",
    "x35_batch_65_states",
    "x36_batch_null_state",
];

fn check_references(checkpoint: &str, workload: &str) -> Vec<String> {
    let mut compared = Vec::new();
    let mut passed = 0usize;
    for rec in read_references(checkpoint, workload) {
        let id = field(&rec, "id").as_str().unwrap_or("?").to_owned();
        let req = field(&rec, "request");
        let path = field(req, "path").as_str().unwrap_or("");
        if field(req, "method").as_str() != Some("POST") || NOT_OURS.contains(&id.as_str()) {
            continue;
        }
        let status = match field(&rec, "status") {
            Value::Int(i) => i.as_i64().unwrap_or(0),
            other => panic!("{id}: status {other:?}"),
        };
        let bytes = request_bytes(req);
        let result: Result<(), RequestError> = match path {
            "/v1/systemone" => parse_decision(&bytes, &Limits::default(), &registry()).map(drop),
            "/v1/systemone/batch" => parse_batch(&bytes, &Limits::default(), &registry()).map(drop),
            other => panic!("{id}: unexpected path {other}"),
        };
        if status == 200 || FAIL_LATER.contains(&id.as_str()) {
            if let Err(e) = result {
                panic!("{checkpoint}/{workload} {id}: expected to pass validation, got {e}");
            }
            passed += 1;
            continue;
        }
        let want = field(&rec, "body")
            .as_str()
            .unwrap_or_else(|| panic!("{id}: no body"));
        match result {
            Ok(()) => {
                panic!("{checkpoint}/{workload} {id}: expected {status} {want}, validation passed")
            }
            Err(e) => {
                assert_eq!(
                    i64::from(self::status(&e)),
                    status,
                    "{checkpoint}/{workload} {id}: status ({e})"
                );
                assert_eq!(body_of(&e), want, "{checkpoint}/{workload} {id}: body");
            }
        }
        compared.push(id);
    }
    assert!(
        passed > 0,
        "{checkpoint}/{workload}: no passing references seen"
    );
    compared
}

#[test]
fn edge_references_match_upstream() {
    for checkpoint in ["tiny", "tiny-multilingual-shape"] {
        let compared = check_references(checkpoint, "edge");
        let want: Vec<String> = OURS.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            compared, want,
            "{checkpoint}: the set of step 6-14 failures compared"
        );
    }
}

#[test]
fn short_and_smoke_references_pass_validation() {
    for checkpoint in ["tiny", "tiny-multilingual-shape"] {
        for workload in ["short", "smoke"] {
            let compared = check_references(checkpoint, workload);
            assert!(
                compared.is_empty(),
                "{checkpoint}/{workload}: unexpected failures {compared:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// §13: body, parsing, shape (400)

#[test]
fn c09_to_c14_invalid_json() {
    let bad = "request body must be valid JSON";
    expect_err(dec(""), 400, bad); // 9
    expect_err(dec("{not json"), 400, bad); // 10
    expect_err(dec(r#"{"state":"x","questions":{}} xx"#), 400, bad); // 11
    expect_err(dec(b"{\"state\": \"\xe9\", \"questions\": {}}"), 400, bad); // 12
    expect_err(
        dec(format!(
            r#"{{"state": {}, "questions": {{}}}}"#,
            "1".repeat(5000)
        )),
        400,
        bad,
    ); // 13
    let deep = format!(
        r#"{{"state": {}{}, "questions": {{}}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    expect_err(dec(deep), 400, bad); // 14
}

#[test]
fn c15_to_c18_not_an_object_with_questions() {
    let d = "request body must be an object with a 'questions' field";
    expect_err(dec("[1,2]"), 400, d);
    expect_err(dec(r#""hello""#), 400, d);
    expect_err(dec("{}"), 400, d);
    expect_err(dec(r#"{"state":"x"}"#), 400, d);
}

#[test]
fn c19_c20_state_required() {
    expect_err(
        dec(format!(r#"{{"questions": {Q1}}}"#)),
        400,
        "'state' is required",
    );
    expect_err(
        dec(format!(r#"{{"state": null, "questions": {Q1}}}"#)),
        400,
        "'state' is required",
    );
}

#[test]
fn c21_c22_questions_must_be_object() {
    expect_err(
        dec(r#"{"state":"x","questions":[]}"#),
        400,
        "'questions' must be an object",
    );
    expect_err(
        dec(r#"{"state":"x","questions":null}"#),
        400,
        "'questions' must be an object",
    );
}

#[test]
fn c23_c24_lone_surrogate() {
    expect_err(dec(r#"{"state":"\ud800","questions":{}}"#), 400, SURROGATE);
    expect_err(
        dec(r#"{"state":"x","questions":{},"zz":"\udc00"}"#),
        400,
        SURROGATE,
    );
    // Keys are scanned too.
    expect_err(
        dec(r#"{"state":"x","questions":{},"\udc00":1}"#),
        400,
        SURROGATE,
    );
    // Where sys1rust differs (sys1rust's tests/DIFFERENCES.md): the escape anywhere in the
    // body's text refuses it, also in a value a later duplicate key replaced, which
    // upstream's parsed body no longer holds (200 there).
    expect_err(
        dec(r#"{"state":"x","questions":{},"z":"\ud800","z":"ok"}"#),
        400,
        SURROGATE,
    );
}

#[test]
fn c25_paired_surrogates_accepted() {
    let r = ok(dec(r#"{"state":"\ud83d\ude00","questions":{}}"#));
    assert_eq!(r.state, Value::from("\u{1F600}"));
}

// §13: lenient JSON accepted (200)

#[test]
fn c26_to_c31_lenient_json() {
    assert!(
        matches!(ok(dec(r#"{"state": NaN, "questions": {}}"#)).state, Value::Float(x) if x.is_nan())
    ); // 26
    ok(dec(r#"{"state":"x","questions":{},"z": Infinity}"#)); // 27
    ok(dec(b"\xef\xbb\xbf{\"state\":\"x\",\"questions\":{}}")); // 28
    let utf16: Vec<u8> = [0xFF, 0xFE]
        .into_iter()
        .chain(r#"{"state":"x","questions":{}}"#.encode_utf16().flat_map(u16::to_le_bytes))
        .collect();
    assert_eq!(ok(dec(utf16)).state, Value::from("x")); // 29
    let r = ok(dec(
        r#"{"state":"a","questions":{"q":{"type":"noul","instructions":"x"}},"questions":{}}"#,
    ));
    assert!(r.questions.is_empty()); // 30: last duplicate wins
    let r = ok(dec(
        r#"{"state":"a","questions":{"q":{"type":"choice","instructions":"x","criteria":{"a":"1","b":"2","a":"3"}}}}"#,
    ));
    let crit = field(r.questions.get("q").unwrap_or(&Value::Null), "criteria");
    let crit = crit.as_object().map(|o| {
        o.iter()
            .map(|(k, v)| (k.to_owned(), v.clone()))
            .collect::<Vec<_>>()
    });
    assert_eq!(
        crit,
        Some(vec![
            ("a".into(), Value::from("3")),
            ("b".into(), Value::from("2"))
        ])
    ); // 31
}

// §13 cases 32 (content type) and 33 (chunked) are HTTP-layer; the body is the same bytes.

// §13: limits (413)

#[test]
fn c34_c35_question_count() {
    let qs = |n: usize| {
        (0..n)
            .map(|i| format!(r#""q{i}":{{"type":"noul","instructions":"x"}}"#))
            .collect::<Vec<_>>()
            .join(",")
    };
    expect_err(
        dec(format!(r#"{{"state":"x","questions":{{{}}}}}"#, qs(65))),
        413,
        "too many questions (65 > 64)",
    );
    assert_eq!(
        ok(dec(format!(
            r#"{{"state":"x","questions":{{{}}}}}"#,
            qs(64)
        )))
        .questions
        .len(),
        64
    );
}

#[test]
fn c36_c37_choice_options() {
    expect_err(
        dec(format!(
            r#"{{"state":"x","questions":{{"q":{}}}}}"#,
            choice(101)
        )),
        413,
        "too many choice options for 'q' (101 > 100)",
    );
    expect_err(
        dec(format!(
            r#"{{"state":"x","questions":{{"it's":{}}}}}"#,
            choice(101)
        )),
        413,
        "too many choice options for \"it's\" (101 > 100)",
    );
    // Object criteria count too; 100 is fine.
    let obj: Vec<String> = (0..101).map(|i| format!(r#""o{i}":null"#)).collect();
    expect_err(
        dec(format!(
            r#"{{"state":"x","questions":{{"q":{{"type":"choice","criteria":{{{}}}}}}}}}"#,
            obj.join(",")
        )),
        413,
        "too many choice options for 'q' (101 > 100)",
    );
    ok(dec(format!(
        r#"{{"state":"x","questions":{{"q":{}}}}}"#,
        choice(100)
    )));
}

#[test]
fn tournament_raises_choice_cap() {
    let limits = Limits::from_lookup(|k| (k == "LAYA_TOURNAMENT_GROUP").then(|| "8".to_owned()));
    assert_eq!(limits.max_choice_options, 255);
    let body = |n| format!(r#"{{"state":"x","questions":{{"q":{}}}}}"#, choice(n));
    ok(parse_decision(body(255).as_bytes(), &limits, &registry()));
    expect_err(
        parse_decision(body(256).as_bytes(), &limits, &registry()),
        413,
        "too many choice options for 'q' (256 > 255)",
    );
}

#[test]
fn c38_score_levels() {
    expect_err(
        dec(format!(
            r#"{{"state":"x","questions":{{"q":{}}}}}"#,
            score(33)
        )),
        413,
        "too many score levels for 'q' (33 > 32)",
    );
    ok(dec(format!(
        r#"{{"state":"x","questions":{{"q":{}}}}}"#,
        score(32)
    )));
}

#[test]
fn c39_c40_c41_total_options() {
    let qs = |parts: Vec<String>| {
        let entries: Vec<String> = parts
            .into_iter()
            .enumerate()
            .map(|(i, q)| format!(r#""c{i}":{q}"#))
            .collect();
        format!(r#"{{"state":"x","questions":{{{}}}}}"#, entries.join(","))
    };
    expect_err(
        dec(qs(vec![choice(100); 6])),
        413,
        "too many answer options across questions (600 > 512)",
    );
    let mut five_plus = vec![choice(100); 5];
    five_plus.push(score(13));
    expect_err(
        dec(qs(five_plus)),
        413,
        "too many answer options across questions (513 > 512)",
    );
    let mut exact = vec![choice(100); 5];
    exact.push(score(12));
    ok(dec(qs(exact)));
    // noul criteria, non-object questions and unknown types count nothing.
    let mut with_noise = vec![choice(100); 5];
    with_noise.push(score(12));
    with_noise.push(r#"{"type":"noul","criteria":{"true":"a","false":"b"}}"#.into());
    with_noise.push(r#"{"type":"Choice","criteria":["a","b"]}"#.into());
    with_noise.push(r#""not an object""#.into());
    ok(dec(qs(with_noise)));
}

#[test]
fn c42_to_c48_state_size() {
    let s = |state: String| format!(r#"{{"state": {state}, "questions": {{}}}}"#);
    ok(dec(s(json_str(&"a".repeat(50_000))))); // 42
    expect_err(
        dec(s(json_str(&"a".repeat(50_001)))),
        413,
        "state too large (50001 > 50000 chars)",
    ); // 43
    expect_err(
        dec(s(json_str(&"é".repeat(50_001)))),
        413,
        "state too large (50001 > 50000 chars)",
    ); // 44
    expect_err(
        dec(s(format!(r#"{{"k": {}}}"#, json_str(&"a".repeat(49_995))))),
        413,
        "state too large (50004 > 50000 chars)",
    ); // 45
    expect_err(
        dec(s(format!(r#"{{"k": {}}}"#, json_str(&"a".repeat(60_000))))),
        413,
        "state too large (60000 > 50000 chars)",
    ); // 46
    expect_err(
        dec(s(format!(
            r#"{{"a": {}, "b": "yy"}}"#,
            json_str(&"x".repeat(60_000))
        ))),
        413,
        "state too large (60002 > 50000 chars)",
    ); // 47
    expect_err(
        dec(s(format!("[{}]", vec![r#""aa""#; 10_000].join(", ")))),
        413,
        "state too large (60000 > 50000 chars)",
    ); // 48
}

#[test]
fn state_measure_details() {
    let v = |text: &str| ok(pyjson::loads(text.as_bytes())).value;
    // `{"k": "\"" * 30000}`: escaping doubles each quote (§5.4 example).
    assert_eq!(
        state_length(
            &v(&format!(r#"{{"k": {}}}"#, json_str(&"\"".repeat(30_000)))),
            50_000
        ),
        60_009
    );
    // Upstream's pre-scan gives up on the first number/bool/null it pops (its `else: return 0`),
    // so this state is measured exactly (60017), not by the running total (60000).
    assert_eq!(
        state_length(
            &v(&format!(
                r#"{{"a": {}, "b": 1}}"#,
                json_str(&"x".repeat(60_000))
            )),
            50_000
        ),
        60_017
    );
    assert_eq!(
        state_length(
            &v(&format!(r#"[null, {}]"#, json_str(&"x".repeat(60_000)))),
            50_000
        ),
        60_000
    );
    // Non-string scalars are their JSON text.
    assert_eq!(state_length(&v("1e400"), 50_000), "Infinity".len());
    assert_eq!(
        state_length(&v("[1.0, -0.0, 1e-05, 1e16]"), 50_000),
        "[1.0, -0.0, 1e-05, 1e+16]".len()
    );
    // A lone surrogate is one code point (upstream refuses the body later, step 10).
    assert_eq!(state_length(&v(r#""\ud800ab""#), 50_000), 3);
    // The 64-value pre-scan budget: 64 short strings then a long one is measured exactly.
    let mut items = vec![r#""a""#.to_owned(); 64];
    items.insert(0, json_str(&"b".repeat(60_000)));
    let text = format!("[{}]", items.join(", "));
    assert_eq!(state_length(&v(&text), 50_000), text.chars().count());
    // Deep nesting is walked without recursion.
    let deep = format!("{}\"x\"{}", "[".repeat(3000), "]".repeat(3000));
    assert_eq!(state_length(&v(&deep), 50_000), deep.len());
}

#[test]
fn c51_body_at_the_byte_cap_hits_the_state_limit() {
    let body = format!(
        r#"{{"state": {}, "questions": {{}}}}"#,
        json_str(&"a".repeat(2_097_122))
    );
    assert_eq!(body.len(), 2_097_152);
    expect_err(dec(body), 413, "state too large (2097122 > 50000 chars)");
}

// §13 cases 49, 50, 52 (body byte cap) are steps 3-4, in the HTTP layer.

// §13: ordering

#[test]
fn c53_c54_null_score_level() {
    let q = r#"{"q":{"type":"score","instructions":"x","criteria":["a",null]}}"#;
    let d = "score question 'q' has a null level at index 1; give every level a description";
    expect_err(dec(format!(r#"{{"state":"x","questions":{q}}}"#)), 422, d);
    expect_err(
        dec(format!(
            r#"{{"state":{},"questions":{q}}}"#,
            json_str(&"x".repeat(60_000))
        )),
        422,
        d,
    );
}

#[test]
fn c55_choice_and_null_level_order() {
    let null_score = r#"{"type":"score","instructions":"x","criteria":[null,"a",null]}"#;
    expect_err(
        dec(format!(
            r#"{{"state":"x","questions":{{"a":{},"b":{null_score}}}}}"#,
            choice(101)
        )),
        413,
        "too many choice options for 'a' (101 > 100)",
    );
    expect_err(
        dec(format!(
            r#"{{"state":"x","questions":{{"b":{null_score},"a":{}}}}}"#,
            choice(101)
        )),
        422,
        "score question 'b' has a null level at index 0; give every level a description",
    );
}

#[test]
fn c56_hooks_before_surrogate() {
    expect_err(
        dec(r#"{"state":"\ud800","questions":{},"hooks":1}"#),
        422,
        &format!("hooks{HOOKS_TAIL}"),
    );
}

#[test]
fn c57_c58_model_check_runs_after_surrogate_and_before_max_len() {
    let run = |body: &str| parse_decision(body.as_bytes(), &Limits::default(), &registry());
    expect_err(
        run(r#"{"state":"\ud800","questions":{},"model":"a/b"}"#),
        400,
        SURROGATE,
    ); // 57
    expect_err(
        run(r#"{"state":"x","questions":{},"model":"a/b","max_len":"z"}"#),
        422,
        MODEL_A_B,
    ); // 58
       // ... and after the limits and hooks.
    expect_err(
        run(r#"{"state":"x","questions":{},"model":"a/b","hooks":0}"#),
        422,
        &format!("hooks{HOOKS_TAIL}"),
    );
}

#[test]
fn model_check_reads_the_raw_value() {
    use laya_core::routing::Checkpoint;
    // Absent and null pin nothing and keep nothing.
    for body in [
        r#"{"state":"x","questions":{}}"#,
        r#"{"state":"x","questions":{},"model":null}"#,
    ] {
        let r = ok(dec(body));
        assert_eq!((r.model, r.pin), (None, None));
    }
    // An alias pins its checkpoint; the raw value is kept as sent.
    let r = ok(dec(r#"{"state":"x","questions":{},"model":" LAYA "}"#));
    assert_eq!(
        (r.model, r.pin),
        (Some(Value::from(" LAYA ")), Some(Checkpoint::english()))
    );
    // A list is read through Python's str(): `['a/b']` holds a slash, so it names a source.
    expect_err(
        dec(r#"{"state":"x","questions":{},"model":["a/b"]}"#),
        422,
        &MODEL_A_B.replace("'a/b'", "['a/b']"),
    );
}

#[test]
fn c59_c60_control_order() {
    expect_err(
        dec(with_q1(r#""max_len":"z","lang":1,"min_confidence":5"#)),
        422,
        "max_len must be an integer",
    );
    expect_err(
        dec(with_q1(r#""lang":1,"min_confidence":5"#)),
        422,
        "lang must be a language code string such as \"de\", or null",
    );
    // max_len before head_max_len, lang before lang_guess.
    expect_err(
        dec(with_q1(r#""head_max_len":0,"max_len":0"#)),
        422,
        "max_len must be a positive integer",
    );
    expect_err(
        dec(with_q1(r#""lang_guess":1,"lang":2"#)),
        422,
        "lang must be a language code string such as \"de\", or null",
    );
}

#[test]
fn c61_c62_task_and_question_errors_pass_validation() {
    // Their 422s come from step 16 (inside inference), not from here.
    let r = ok(dec(
        r#"{"state":"x","questions":{"q":{"type":"zz","instructions":"x"}},"task":"zz"}"#,
    ));
    assert_eq!(r.task, Some(Value::from("zz")));
    ok(dec(
        r#"{"state":"x","questions":{"q1":{"type":"noul"},"q2":{"type":"zz","instructions":"x"}}}"#,
    ));
}

// §13: controls (422 unless noted)

#[test]
fn c63_c64_hooks() {
    expect_err(
        dec(with_q1(r#""hooks":[1],"hooks_timeout":3"#)),
        422,
        &format!("hooks, hooks_timeout{HOOKS_TAIL}"),
    );
    ok(dec(with_q1(r#""hooks":null"#)));
    // All five, sorted by name whatever the body order.
    expect_err(
        dec(with_q1(
            r#""on_predict_start":0,"hooks_timeout":false,"on_predict_end":"","hooks_raise":[],"hooks":{}"#,
        )),
        422,
        &format!("hooks, hooks_raise, hooks_timeout, on_predict_end, on_predict_start{HOOKS_TAIL}"),
    );
}

// §13 cases 65-71 resolve `model` (§4.5): the routing module's, not validated here. The raw value
// is what the callback sees (`model_check_gets_the_raw_value`).

#[test]
fn c68_to_c71_model_values_pass_through() {
    for (extra, want) in [
        (r#""model":"jev-1""#, Some(Value::from("jev-1"))),
        (r#""model":5"#, Some(Value::from(5))),
        (r#""model":"ml""#, Some(Value::from("ml"))),
        (r#""model":null"#, None),
    ] {
        assert_eq!(ok(dec(with_q1(extra))).model, want);
    }
}

#[test]
fn c72_to_c75_token_budgets() {
    for v in [r#""512""#, "512.0", "true"] {
        expect_err(
            dec(with_q1(&format!(r#""max_len":{v}"#))),
            422,
            "max_len must be an integer",
        );
    }
    expect_err(
        dec(with_q1(r#""max_len":0"#)),
        422,
        "max_len must be a positive integer",
    );
    expect_err(
        dec(with_q1(r#""max_len":-99999999999999999999999"#)),
        422,
        "max_len must be a positive integer",
    );
    expect_err(
        dec(with_q1(r#""max_len":9000"#)),
        422,
        "max_len exceeds server limit (9000 > 8192)",
    );
    expect_err(
        dec(with_q1(r#""head_max_len":9000"#)),
        422,
        "head_max_len exceeds server limit (9000 > 8192)",
    );
    expect_err(
        dec(with_q1(
            r#""max_len":100000000000000000000000000000000000000000"#,
        )),
        422,
        "max_len exceeds server limit (100000000000000000000000000000000000000000 > 8192)",
    );
    let r = ok(dec(with_q1(r#""max_len":8192,"head_max_len":1"#)));
    assert_eq!(
        (r.opts.max_len, r.opts.head_max_len, r.opts.batch_size),
        (Some(8192), Some(1), None)
    );
    let r = ok(dec(with_q1(r#""max_len":null"#)));
    assert_eq!((r.opts.max_len, r.opts.head_max_len), (None, None));
    // LAYA_MAX_TOKEN_BUDGET moves the cap.
    let limits =
        Limits::from_lookup(|k| (k == "LAYA_MAX_TOKEN_BUDGET").then(|| " 16_384 ".to_owned()));
    assert_eq!(limits.max_token_budget, 16_384);
    let r = ok(parse_decision(
        with_q1(r#""max_len":9000"#).as_bytes(),
        &limits,
        &registry(),
    ));
    assert_eq!(r.opts.max_len, Some(9000));
}

#[test]
fn c76_to_c79_lang() {
    expect_err(
        dec(with_q1(r#""lang_guess":true"#)),
        422,
        "lang_guess must be a language code string such as \"de\", or null",
    );
    let r = ok(dec(with_q1(r#""lang":"de","lang_guess":"en_US.UTF-8""#)));
    assert_eq!(
        (r.lang.as_deref(), r.lang_guess.as_deref()),
        (Some("de"), Some("en_US.UTF-8"))
    );
    let r = ok(dec(with_q1(r#""lang":"","lang_guess":null"#)));
    assert_eq!((r.lang.as_deref(), r.lang_guess), (Some(""), None));
}

#[test]
fn c80_to_c84_min_confidence() {
    let bad = |v: &str| format!("min_confidence must be a float in [0.0, 1.0], got {v}");
    expect_err(dec(with_q1(r#""min_confidence":1.5"#)), 422, &bad("1.5"));
    expect_err(dec(with_q1(r#""min_confidence":true"#)), 422, &bad("True"));
    expect_err(
        dec(with_q1(r#""min_confidence":"0.5""#)),
        422,
        &bad("'0.5'"),
    );
    expect_err(dec(with_q1(r#""min_confidence":-1"#)), 422, &bad("-1"));
    expect_err(dec(with_q1(r#""min_confidence":NaN"#)), 422, &bad("nan"));
    expect_err(
        dec(with_q1(r#""min_confidence":[0.5]"#)),
        422,
        &bad("[0.5]"),
    );
    expect_err(
        dec(with_q1(r#""min_confidence":{}"#)),
        422,
        "a min_confidence map must be a non-empty dict of bucket -> float, got {}",
    ); // 81
    expect_err(
        dec(with_q1(r#""min_confidence":{"x":0.5}"#)),
        422,
        "min_confidence map keys must be a bucket like 'choice:3-5' or 'default', got 'x'",
    ); // 82
       // Map entries are checked in order, key then value.
    expect_err(
        dec(with_q1(r#""min_confidence":{"choice:2":null,"x":0.5}"#)),
        422,
        &bad("None"),
    );
    assert_eq!(
        ok(dec(with_q1(r#""min_confidence":0.9"#))).min_confidence,
        Some(MinConfidence::Scalar(0.9))
    ); // 83
    assert_eq!(
        ok(dec(with_q1(r#""min_confidence":0"#))).min_confidence,
        Some(MinConfidence::Scalar(0.0))
    ); // 84
    assert_eq!(
        ok(dec(with_q1(r#""min_confidence":null"#))).min_confidence,
        None
    );
    assert_eq!(
        ok(dec(with_q1(
            r#""min_confidence":{"score:11+":1,"default":0.25,"noul:2":0.5}"#
        )))
        .min_confidence,
        Some(MinConfidence::Buckets(vec![
            ("score:11+".into(), 1.0),
            ("default".into(), 0.25),
            ("noul:2".into(), 0.5)
        ]))
    );
}

#[test]
fn min_confidence_int_beyond_float_is_an_unhandled_500() {
    // Upstream's `math.isfinite(10**400)` raises OverflowError, which nothing catches.
    let e = match dec(with_q1(&format!(
        r#""min_confidence":1{}"#,
        "0".repeat(400)
    ))) {
        Err(e) => e,
        Ok(r) => panic!("expected an error, got {r:?}"),
    };
    assert_eq!(
        (e.kind(), body_of(&e).as_str()),
        (RequestErrorKind::Uncaught, "Internal Server Error")
    );
    // A big int that still fits a float is an ordinary 422 with its full digits.
    let big = format!("1{}", "0".repeat(300));
    expect_err(
        dec(with_q1(&format!(r#""min_confidence":{big}"#))),
        422,
        &format!("min_confidence must be a float in [0.0, 1.0], got {big}"),
    );
}

#[test]
fn c85_c86_c87_task_and_unknown_fields_pass() {
    assert_eq!(
        ok(dec(with_q1(r#""task":"Typed-Decisions""#))).task,
        Some(Value::from("Typed-Decisions"))
    );
    assert_eq!(ok(dec(with_q1(r#""task":5"#))).task, Some(Value::from(5))); // 422 later, at step 16
    assert_eq!(ok(dec(with_q1(r#""task":null"#))).task, None);
    let r = ok(dec(
        r#"{"state":"x","temperature":2,"foo":{"a":[1]},"questions":{"q":{"type":"noul","instructions":"x","weight":3}}}"#,
    ));
    assert_eq!(r.questions.len(), 1);
}

// §13 cases 88-111 are question validation (step 16, `question::parse_question`); 112-124 are
// response shape; 125-142 auth/admission/deadlines (HTTP layer).

// §13: batch route

const STATES2: &str = r#"["I was charged twice",{"body":"Mein Konto wurde zweimal belastet"}]"#;

#[test]
fn c143_batch_ok() {
    let r = ok(batch(format!(r#"{{"states":{STATES2},"questions":{Q1}}}"#)));
    assert_eq!(r.states.len(), 2);
    assert_eq!(r.questions.len(), 1);
    assert_eq!(r.opts, Default::default());
    assert!(!r.sort_by_length);
}

#[test]
fn c144_batch_needs_both_keys() {
    let d = "request body must be an object with 'states' and 'questions' fields";
    expect_err(batch(format!(r#"{{"questions":{Q1}}}"#)), 400, d);
    expect_err(batch(format!(r#"{{"states":{STATES2}}}"#)), 400, d);
    expect_err(batch("[]"), 400, d);
    expect_err(batch("{oops"), 400, "request body must be valid JSON");
}

#[test]
fn c145_c146_states_list() {
    let d = "'states' must be a non-empty list";
    expect_err(
        batch(format!(r#"{{"states":"x","questions":{Q1}}}"#)),
        400,
        d,
    );
    expect_err(
        batch(format!(r#"{{"states":[],"questions":{Q1}}}"#)),
        400,
        d,
    );
    expect_err(
        batch(format!(r#"{{"states":null,"questions":{Q1}}}"#)),
        400,
        d,
    );
    let states = |n| format!("[{}]", vec![r#""s""#; n].join(","));
    expect_err(
        batch(format!(r#"{{"states":{},"questions":{Q1}}}"#, states(65))),
        413,
        "too many states in batch (65 > 64)",
    );
    assert_eq!(
        ok(batch(format!(
            r#"{{"states":{},"questions":{Q1}}}"#,
            states(64)
        )))
        .states
        .len(),
        64
    );
    // The state count comes before any per-state check.
    expect_err(
        batch(format!(r#"{{"states":{},"questions":[]}}"#, states(65))),
        413,
        "too many states in batch (65 > 64)",
    );
}

#[test]
fn c147_c148_per_state_checks() {
    expect_err(
        batch(format!(r#"{{"states":["x",null],"questions":{Q1}}}"#)),
        400,
        "'state' is required",
    );
    expect_err(
        batch(format!(
            r#"{{"states":["x",{}],"questions":{Q1}}}"#,
            json_str(&"a".repeat(50_001))
        )),
        413,
        "state too large (50001 > 50000 chars)",
    );
    // Per state, in order: the first state's null check beats the question checks ...
    expect_err(
        batch(r#"{"states":[null],"questions":[]}"#),
        400,
        "'state' is required",
    );
    // ... which beat the first state's size and every later state.
    expect_err(
        batch(format!(
            r#"{{"states":[{},null],"questions":[]}}"#,
            json_str(&"a".repeat(50_001))
        )),
        400,
        "'questions' must be an object",
    );
    expect_err(
        batch(format!(
            r#"{{"states":["x",{},null],"questions":{{}}}}"#,
            json_str(&"a".repeat(50_001))
        )),
        413,
        "state too large (50001 > 50000 chars)",
    );
}

#[test]
fn c149_c150_diagnostics() {
    expect_err(
        batch(format!(
            r#"{{"states":{STATES2},"questions":{Q1},"diagnostics":{{}}}}"#
        )),
        422,
        DIAGNOSTICS,
    );
    expect_err(
        batch(format!(
            r#"{{"states":{STATES2},"questions":{Q1},"on_predict_end":1,"diagnostics":{{}}}}"#
        )),
        422,
        &format!("on_predict_end{HOOKS_TAIL}"),
    );
    ok(batch(format!(
        r#"{{"states":{STATES2},"questions":{Q1},"diagnostics":null}}"#
    )));
    // Diagnostics before the surrogate scan; the surrogate before the controls.
    expect_err(
        batch(format!(
            r#"{{"states":["\udc00"],"questions":{Q1},"diagnostics":0,"max_len":"z"}}"#
        )),
        422,
        DIAGNOSTICS,
    );
    expect_err(
        batch(format!(
            r#"{{"states":["\udc00"],"questions":{Q1},"max_len":"z"}}"#
        )),
        400,
        SURROGATE,
    );
}

#[test]
fn c151_c152_batch_size_and_sort_by_length() {
    let b = |extra: &str| {
        batch(format!(
            r#"{{"states":{STATES2},"questions":{Q1},{extra}}}"#
        ))
    };
    expect_err(
        b(r#""batch_size":0"#),
        422,
        "batch_size must be a positive integer, got 0",
    );
    expect_err(
        b(r#""batch_size":-12345678901234567890123"#),
        422,
        "batch_size must be a positive integer, got -12345678901234567890123",
    );
    expect_err(
        b(r#""batch_size":"2""#),
        422,
        "batch_size must be an integer",
    );
    expect_err(
        b(r#""batch_size":true"#),
        422,
        "batch_size must be an integer",
    );
    expect_err(
        b(r#""batch_size":2.0"#),
        422,
        "batch_size must be an integer",
    );
    expect_err(
        b(r#""sort_by_length":"yes""#),
        422,
        "sort_by_length must be a boolean",
    );
    expect_err(
        b(r#""sort_by_length":1"#),
        422,
        "sort_by_length must be a boolean",
    );
    // Order: min_confidence, batch_size, sort_by_length, after the shared controls.
    expect_err(
        b(r#""sort_by_length":1,"batch_size":0"#),
        422,
        "batch_size must be a positive integer, got 0",
    );
    expect_err(
        b(r#""batch_size":0,"min_confidence":2"#),
        422,
        "min_confidence must be a float in [0.0, 1.0], got 2",
    );
    expect_err(
        b(r#""batch_size":0,"lang_guess":2"#),
        422,
        "lang_guess must be a language code string such as \"de\", or null",
    );
    let r = ok(b(
        r#""batch_size":1,"sort_by_length":true,"min_confidence":0.5,"lang":"de","max_len":64"#,
    ));
    assert_eq!(r.opts.batch_size, Some(1));
    assert_eq!(r.opts.max_len, Some(64));
    assert!(r.sort_by_length);
    assert_eq!(r.min_confidence, Some(MinConfidence::Scalar(0.5)));
    assert_eq!(r.lang.as_deref(), Some("de"));
    assert!(!ok(b(r#""sort_by_length":false"#)).sort_by_length);
    // A huge batch_size is valid and means "one pass".
    assert_eq!(
        ok(b(r#""batch_size":100000000000000000000000000000"#))
            .opts
            .batch_size,
        Some(usize::MAX)
    );
}

#[test]
fn c153_batch_empty_questions() {
    let r = ok(batch(r#"{"states":["a",{"b":1}],"questions":{}}"#));
    assert!(r.questions.is_empty());
    assert_eq!(r.opts.batch_size, None);
}

#[test]
fn batch_model_check_order() {
    let run = |body: &str| parse_batch(body.as_bytes(), &Limits::default(), &registry());
    expect_err(
        run(r#"{"states":["\udc00"],"questions":{},"model":"a/b"}"#),
        400,
        SURROGATE,
    );
    expect_err(
        run(r#"{"states":["x"],"questions":{},"model":"a/b","max_len":"z"}"#),
        422,
        MODEL_A_B,
    );
}

#[test]
fn batch_chunking_caps_batch_size() {
    // 64 states × 64 questions × 512 = 2 097 152 tokens > 131 072: passes of (131072/512)/64 = 4.
    let qs: Vec<String> = (0..64)
        .map(|i| format!(r#""q{i}":{{"type":"noul","instructions":"x"}}"#))
        .collect();
    let states = format!("[{}]", vec![r#""s""#; 64].join(","));
    let body = |extra: &str| {
        format!(
            r#"{{"states":{states},"questions":{{{}}}{extra}}}"#,
            qs.join(",")
        )
    };
    assert_eq!(ok(batch(body(""))).opts.batch_size, Some(4));
    assert_eq!(
        ok(batch(body(r#","batch_size":2"#))).opts.batch_size,
        Some(2)
    );
    assert_eq!(
        ok(batch(body(r#","batch_size":50"#))).opts.batch_size,
        Some(4)
    );
    // max_len sets the row width: 64 × 64 × 32 = 131 072 fits in one pass.
    assert_eq!(ok(batch(body(r#","max_len":32"#))).opts.batch_size, None);
    assert_eq!(
        ok(batch(body(r#","max_len":32,"batch_size":7"#)))
            .opts
            .batch_size,
        Some(7)
    );
    // LAYA_MAX_BATCH_TOKENS.
    let limits = Limits::from_lookup(|k| (k == "LAYA_MAX_BATCH_TOKENS").then(|| "1".to_owned()));
    let r = ok(parse_batch(body("").as_bytes(), &limits, &registry()));
    assert_eq!(r.opts.batch_size, Some(1));
    assert_eq!(batch_chunk_size(3, 2, Some(8192), 131_072), None); // 49 152 tokens
    assert_eq!(batch_chunk_size(64, 1, Some(8192), 131_072), Some(16));
    assert_eq!(batch_chunk_size(64, 64, Some(8192), 131_072), Some(1));
    assert_eq!(batch_chunk_size(5, 0, None, 1), None);
}

#[test]
fn env_limits() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        Limits::from_lookup(move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    };
    assert_eq!(env(&[]), Limits::default());
    let l = env(&[
        ("LAYA_MAX_TOKEN_BUDGET", "0"),
        ("LAYA_MAX_BATCH_TOKENS", "abc"),
        ("LAYA_TOURNAMENT_GROUP", "101"),
    ]);
    assert_eq!(l, Limits::default());
    let l = env(&[
        ("LAYA_MAX_TOKEN_BUDGET", "+4096"),
        ("LAYA_MAX_BATCH_TOKENS", "1_000"),
        ("LAYA_TOURNAMENT_GROUP", " 2 "),
    ]);
    assert_eq!(
        (l.max_token_budget, l.max_batch_tokens, l.max_choice_options),
        (4096, 1000, 255)
    );
    assert_eq!(tournament_group(Some("1")), 0);
    assert_eq!(tournament_group(Some("100")), 100);
    assert_eq!(tournament_group(Some("")), 0);
    assert_eq!(tournament_group(None), 0);
    assert_eq!(tournament_group(Some("1__0")), 0);
}

/// Upstream `_resolve_port`: unset and blank bind 8000, Python's `int` forms are read, and
/// anything else, 0 and 65536 among them, is refused with the value as given.
#[test]
fn laya_port_follows_upstream() {
    for (raw, port) in [
        (None, 8000),
        (Some(""), 8000),
        (Some(" \t "), 8000),
        (Some(" 8080 "), 8080),
        (Some("+8080"), 8080),
        (Some("8_080"), 8080),
        (Some("1"), 1),
        (Some("65535"), 65535),
    ] {
        assert_eq!(laya_port(raw), Ok(port), "{raw:?}");
    }
    for (raw, shown) in [
        ("0", "'0'"),
        ("65536", "'65536'"),
        ("-1", "'-1'"),
        ("abc", "'abc'"),
        (" 80x ", "' 80x '"),
        ("8__080", "'8__080'"),
    ] {
        assert_eq!(
            laya_port(Some(raw)),
            Err(format!(
                "invalid LAYA_PORT {shown}: must be an integer 1-65535"
            ))
        );
    }
    assert_eq!(DEFAULT_PORT, 8000);
}

#[test]
fn refusal_bodies_are_compact_json() {
    let e = RequestError::Lang { key: "lang" };
    assert_eq!(
        body_of(&e),
        r#"{"detail":"lang must be a language code string such as \"de\", or null"}"#
    );
    let e = RequestError::TooManyChoiceOptions {
        qid: "zé\n".into(),
        count: 101,
        cap: 100,
    };
    // `%r` escapes the newline (`'zé\n'`), and JSON then escapes that backslash.
    assert_eq!(
        body_of(&e),
        "{\"detail\":\"too many choice options for 'zé\\\\n' (101 > 100)\"}"
    );
}

#[test]
fn deep_values_in_controls_do_not_recurse() {
    // A deeply nested bad control value is reported with its repr, built iteratively.
    let depth = 3000;
    let v = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let want = format!("min_confidence must be a float in [0.0, 1.0], got {v}");
    expect_err(
        dec(with_q1(&format!(r#""min_confidence":{v}"#))),
        422,
        &want,
    );
    // And a deep state passes the size check.
    ok(dec(format!(r#"{{"state":{v},"questions":{{}}}}"#)));
}
