//! Reading the shared fixtures and upstream's reference lines.

use std::collections::HashMap;
use std::path::PathBuf;

use laya_core::agent::BatchOptions;
use laya_core::confidence::MinConfidence;
use laya_core::config::QType;
use laya_core::decide::Decision;
use laya_core::engine::{EngineError, EngineInfo, Forward, Row, RowLogits};
use laya_core::request::{parse_batch, parse_decision, Limits};
use laya_core::routing::RoutingConfig;
use pyjson::{Object, Value};

/// The HTTP workloads recorded for each checkpoint.
pub const WORKLOADS: [&str; 3] = ["smoke", "short", "edge"];

/// The fixtures: `$SYS1_FIXTURES` when set, else the ones in this crate (`data/`). A missing
/// directory is a hard failure: a parity suite that skips silently proves nothing.
pub fn fixtures_dir() -> PathBuf {
    let dir = match std::env::var_os("SYS1_FIXTURES") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data"),
    };
    assert!(
        dir.join("references").is_dir() && dir.join("checkpoints").is_dir(),
        "fixtures not found at {} (SYS1_FIXTURES names another fixtures directory)",
        dir.display()
    );
    dir
}

/// The checkpoints that have upstream's references of every [`WORKLOADS`] entry, by name,
/// sorted (`tiny`, `tiny-english`, `tiny-multilingual-shape` here).
pub fn checkpoints() -> Vec<String> {
    let dir = fixtures_dir();
    let mut names: Vec<String> = std::fs::read_dir(dir.join("references"))
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter(|e| {
            WORKLOADS
                .iter()
                .all(|w| e.path().join(format!("{w}.jsonl")).is_file())
                && dir.join("checkpoints").join(e.file_name()).is_dir()
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(
        !names.is_empty(),
        "no checkpoint with references in {}",
        dir.display()
    );
    names
}

/// Every line of a JSONL file, parsed with Python's rules.
pub fn read_jsonl(path: &std::path::Path) -> Vec<Value> {
    let text =
        std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.split(|&b| b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .enumerate()
        .map(|(i, l)| {
            pyjson::loads(l)
                .unwrap_or_else(|e| panic!("{} line {}: {e:?}", path.display(), i + 1))
                .value
        })
        .collect()
}

/// One model row as upstream built and ran it.
#[derive(Debug, Clone, PartialEq)]
pub struct RefRow {
    /// Index into `states` (batch route only).
    pub state: Option<usize>,
    pub qid: String,
    pub row: Row,
    pub logits: Vec<f32>,
    pub act_logits: Vec<f32>,
}

impl RefRow {
    /// Upstream's outputs for this row, as an engine returns them.
    pub fn output(&self) -> RowLogits {
        RowLogits {
            logits: self.logits.clone(),
            act_logits: self.act_logits.clone(),
        }
    }
}

/// One recorded request and upstream's answer.
#[derive(Debug, Clone)]
pub struct Reference {
    pub id: String,
    pub method: String,
    pub path: String,
    pub request_headers: Vec<(String, String)>,
    /// The request body exactly as sent.
    pub request_body: Option<Vec<u8>>,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// Forward passes in the order the server ran them.
    pub passes: Vec<Vec<RefRow>>,
}

fn get<'a>(o: &'a Object, key: &str) -> Option<&'a Value> {
    o.get(key)
}

fn as_str(v: Option<&Value>) -> String {
    match v {
        Some(Value::Str(s)) => s.clone(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn as_usize(v: &Value) -> usize {
    match v {
        Value::Int(i) => i
            .as_i64()
            .and_then(|x| usize::try_from(x).ok())
            .expect("a small non-negative int"),
        other => panic!("expected an int, got {other:?}"),
    }
}

fn as_f32(v: &Value) -> f32 {
    match v {
        Value::Float(x) => *x as f32,
        Value::Int(i) => i.as_i64().expect("a small int") as f32,
        other => panic!("expected a number, got {other:?}"),
    }
}

fn list(v: Option<&Value>) -> &[Value] {
    match v {
        Some(Value::Array(a)) => a,
        other => panic!("expected a list, got {other:?}"),
    }
}

fn pairs(v: Option<&Value>) -> Vec<(String, String)> {
    match v {
        Some(Value::Object(o)) => o
            .iter()
            .map(|(k, v)| (k.to_owned(), as_str(Some(v))))
            .collect(),
        _ => Vec::new(),
    }
}

fn qtype(v: &Value) -> QType {
    match as_usize(v) {
        0 => QType::Choice,
        1 => QType::Score,
        2 => QType::Noul,
        n => panic!("unknown qtype {n}"),
    }
}

impl Reference {
    /// One reference line, as read from a reference file.
    pub fn from_value(v: &Value) -> Reference {
        let Value::Object(o) = v else {
            panic!("a reference line must be an object")
        };
        let Some(Value::Object(req)) = get(o, "request") else {
            panic!("reference without request")
        };
        let request_body = match (get(req, "raw_body"), get(req, "body")) {
            (Some(Value::Str(raw)), _) => Some(raw.as_bytes().to_vec()),
            (_, Some(Value::Null)) | (_, None) => None,
            (_, Some(body)) => Some(pyjson::dumps_spaced(body).into_bytes()),
        };
        let passes = match get(o, "rows") {
            Some(Value::Array(passes)) => passes
                .iter()
                .map(|pass| {
                    list(Some(pass))
                        .iter()
                        .map(|r| {
                            let Value::Object(r) = r else {
                                panic!("a row must be an object")
                            };
                            RefRow {
                                state: get(r, "state").map(as_usize),
                                qid: as_str(get(r, "qid")),
                                row: Row {
                                    ids: list(get(r, "input_ids"))
                                        .iter()
                                        .map(|x| as_usize(x) as u32)
                                        .collect(),
                                    markers: list(get(r, "markers")).iter().map(as_usize).collect(),
                                    qtype: qtype(get(r, "qtype").expect("qtype")),
                                },
                                logits: list(get(r, "logits")).iter().map(as_f32).collect(),
                                act_logits: list(get(r, "act_logits")).iter().map(as_f32).collect(),
                            }
                        })
                        .collect()
                })
                .collect(),
            _ => Vec::new(),
        };
        Reference {
            id: as_str(get(o, "id")),
            method: as_str(get(req, "method")),
            path: as_str(get(req, "path")),
            request_headers: pairs(get(req, "headers")),
            request_body,
            status: as_usize(get(o, "status").expect("status")) as u16,
            headers: pairs(get(o, "headers")),
            body: as_str(get(o, "body")),
            passes,
        }
    }

    /// The row upstream ran for question `qid` of state `state` (0 on the single route).
    pub fn row(&self, state: usize, qid: &str) -> Option<&RefRow> {
        self.passes
            .iter()
            .flatten()
            .find(|r| r.qid == qid && r.state.unwrap_or(0) == state)
    }

    /// The parsed request body (Python `json.loads` rules), if any.
    pub fn request_value(&self) -> Option<Value> {
        self.request_body
            .as_ref()
            .and_then(|b| pyjson::loads(b).ok())
            .map(|p| p.value)
    }

    /// The decision call a 200 answer of a decision route made: the request read by
    /// laya-core's own validation, as the server reads it.
    pub fn decision_call(&self) -> Option<DecisionCall> {
        if self.status != 200 || !self.path.starts_with("/v1/systemone") {
            return None;
        }
        let body = self.request_body.as_deref()?;
        let (limits, routing) = (Limits::default(), RoutingConfig::default());
        let batch = self.path == "/v1/systemone/batch";
        let decision: Decision = if batch {
            parse_batch(body, &limits, &routing).ok()?.into()
        } else {
            parse_decision(body, &limits, &routing).ok()?.into()
        };
        Some(DecisionCall {
            batch,
            states: decision.states,
            questions: decision.questions,
            opts: decision.opts,
            min_confidence: decision.min_confidence,
        })
    }
}

/// What a 200 answer of a decision route asked the engine.
#[derive(Debug, Clone)]
pub struct DecisionCall {
    pub batch: bool,
    pub states: Vec<Value>,
    pub questions: Object,
    pub opts: BatchOptions,
    pub min_confidence: Option<MinConfidence>,
}

/// Every reference line of one workload of one checkpoint.
pub fn references(checkpoint: &str, workload: &str) -> Vec<Reference> {
    let path = fixtures_dir()
        .join("references")
        .join(checkpoint)
        .join(format!("{workload}.jsonl"));
    read_jsonl(&path)
        .iter()
        .map(Reference::from_value)
        .collect()
}

/// Upstream's recorded outputs per row (`ids`, `markers`, type), in recording order.
type RowTable = HashMap<(Vec<u32>, Vec<usize>, usize), Vec<RowLogits>>;

fn row_key(r: &Row) -> (Vec<u32>, Vec<usize>, usize) {
    (r.ids.clone(), r.markers.clone(), r.qtype.index())
}

fn row_table<'a>(rows: impl Iterator<Item = &'a RefRow>) -> RowTable {
    let mut table: RowTable = HashMap::new();
    for r in rows {
        table.entry(row_key(&r.row)).or_default().push(r.output());
    }
    for v in table.values_mut() {
        v.reverse();
    }
    table
}

/// A row upstream never ran (a layout difference, for [`Replay`]).
#[derive(Debug, thiserror::Error)]
#[error("row not in the reference ({tokens} tokens)")]
pub struct UnknownRow {
    pub tokens: usize,
}

/// A [`Forward`] that answers each row with upstream's recorded logits, so layout and
/// decoding can be checked without a model.
#[derive(Debug, Default)]
pub struct Replay {
    rows: RowTable,
    /// Rows asked for that upstream never ran (a layout difference).
    pub unknown: Vec<Row>,
}

impl Replay {
    pub fn new(passes: &[Vec<RefRow>]) -> Replay {
        Replay {
            rows: row_table(passes.iter().flatten()),
            unknown: Vec::new(),
        }
    }
}

impl Forward for Replay {
    fn forward(&mut self, rows: &[Row]) -> Result<Vec<RowLogits>, EngineError> {
        rows.iter()
            .map(
                |r| match self.rows.get_mut(&row_key(r)).and_then(Vec::pop) {
                    Some(out) => Ok(out),
                    None => {
                        self.unknown.push(r.clone());
                        Err(EngineError::backend(
                            "replay",
                            UnknownRow {
                                tokens: r.ids.len(),
                            },
                        ))
                    }
                },
            )
            .collect()
    }

    fn info(&self) -> EngineInfo {
        EngineInfo {
            engine: "replay",
            device: "cpu".to_owned(),
            precision: "f32",
        }
    }
}

/// An engine for tests of everything but the model: every row upstream ran for a checkpoint
/// is answered with upstream's logits (several recordings of one row in recording order, the
/// last one repeated), any other row with logits derived from its tokens — fixed, different
/// per row and per option, within the spread real logits have. Never fails.
#[derive(Debug, Default)]
pub struct Recorded {
    rows: RowTable,
}

impl Recorded {
    /// Every row of every recorded workload of `checkpoint` (smoke, short, edge).
    pub fn for_checkpoint(checkpoint: &str) -> Recorded {
        let references: Vec<Reference> = WORKLOADS
            .iter()
            .flat_map(|w| references(checkpoint, w))
            .collect();
        Recorded {
            rows: row_table(references.iter().flat_map(|r| r.passes.iter().flatten())),
        }
    }

    fn stand_in(r: &Row) -> RowLogits {
        // FNV-1a over the row, then one xorshift step per value.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for x in r
            .ids
            .iter()
            .map(|&i| i as u64)
            .chain(r.markers.iter().map(|&m| m as u64))
        {
            h = (h ^ x).wrapping_mul(0x0100_0000_01b3);
        }
        h ^= r.qtype.index() as u64;
        let mut next = || {
            h ^= h << 13;
            h ^= h >> 7;
            h ^= h << 17;
            // In [-4, 4).
            ((h >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0
        };
        RowLogits {
            logits: r.markers.iter().map(|_| next()).collect(),
            act_logits: vec![next(), next()],
        }
    }
}

impl Forward for Recorded {
    fn forward(&mut self, rows: &[Row]) -> Result<Vec<RowLogits>, EngineError> {
        Ok(rows
            .iter()
            .map(|r| match self.rows.get_mut(&row_key(r)) {
                Some(outs) if outs.len() > 1 => outs.pop().unwrap_or_else(|| Self::stand_in(r)),
                Some(outs) => outs.last().cloned().unwrap_or_else(|| Self::stand_in(r)),
                None => Self::stand_in(r),
            })
            .collect())
    }

    fn info(&self) -> EngineInfo {
        EngineInfo {
            engine: "recorded",
            device: "cpu".to_owned(),
            precision: "f32",
        }
    }

    /// Each row's logits come from its own tokens (or its own recording), never from its
    /// batch mates.
    fn batch_invariant(&self) -> bool {
        true
    }
}

/// One decision request of the references, ready to run.
#[derive(Debug)]
pub struct DecisionCase {
    /// `checkpoint/workload id`, for messages.
    pub ctx: String,
    pub reference: Reference,
    pub call: DecisionCall,
    pub questions: Vec<laya_core::question::Question>,
}

/// Every decision request of checkpoint `checkpoint` over all [`WORKLOADS`], with its
/// questions parsed. Panics, naming the reference, if one does not parse: upstream answered
/// them all.
pub fn decision_cases(checkpoint: &str) -> Vec<DecisionCase> {
    let mut out = Vec::new();
    for workload in WORKLOADS {
        for reference in references(checkpoint, workload) {
            let Some(call) = reference.decision_call() else {
                continue;
            };
            let ctx = format!("{checkpoint}/{workload} {}", reference.id);
            let questions = laya_core::question::parse_questions(&call.questions)
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            out.push(DecisionCase {
                ctx,
                reference,
                call,
                questions,
            });
        }
    }
    out
}
