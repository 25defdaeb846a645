//! `sys1rust bench`: in-process timing of the decision pipeline on a workload, one JSON
//! report on stdout (and a table on a terminal). `bench/` drives it next to upstream and
//! writes the write-ups in `results/`.
//!
//! Every workload line goes through the server's validation and decision path; a line the
//! server would refuse is skipped and named in the report. A timed run is one
//! [`laya_core::decide::decide`] call: routing, layout, forward passes, decoding.

use std::io::IsTerminal;
use std::time::Instant;

use anyhow::Context;
use laya_core::decide::{self, Decision};
use laya_core::engine::Forward;
use laya_core::request::{self, Limits};
use laya_core::routing::RoutingConfig;
use pyjson::Value;

use crate::cli::BenchArgs;
use crate::http::ApiError;

/// Peak resident set size of this process (`VmHWM`), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// The id group a line belongs to without `--shapes`: its id up to the last `_`
/// (`s128_q1_000` → `s128_q1`), or the whole id.
fn group_of(id: &str) -> &str {
    id.rsplit_once('_').map_or(id, |(group, _)| group)
}

/// One workload line, validated.
struct Line {
    id: String,
    decision: Decision,
}

/// Reads the workload: the valid lines, and `(id, reason)` for the others.
fn read_workload(bytes: &[u8], routing: &RoutingConfig) -> (Vec<Line>, Vec<(String, String)>) {
    let limits = Limits::default();
    let mut lines = Vec::new();
    let mut skipped = Vec::new();
    for (n, raw) in bytes
        .split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, l)| !l.trim_ascii().is_empty())
    {
        let fallback = format!("line {}", n + 1);
        let value = match pyjson::loads(raw) {
            Ok(p) => p.value,
            Err(e) => {
                skipped.push((fallback, format!("not JSON: {e}")));
                continue;
            }
        };
        let Value::Object(o) = value else {
            skipped.push((fallback, "not an object".into()));
            continue;
        };
        let id = o
            .get("id")
            .and_then(Value::as_str)
            .map_or(fallback, str::to_owned);
        let body = match (o.get("raw_body"), o.get("body")) {
            (Some(Value::Str(raw)), _) => raw.as_bytes().to_vec(),
            (_, Some(body)) => pyjson::dumps_spaced(body).into_bytes(),
            _ => {
                skipped.push((id, "no body".into()));
                continue;
            }
        };
        let path = o
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or("/v1/systemone");
        let parsed: Result<Decision, ApiError> = match path {
            "/v1/systemone" => request::parse_decision(&body, &limits, routing)
                .map(Decision::from)
                .map_err(ApiError::from),
            "/v1/systemone/batch" => request::parse_batch(&body, &limits, routing)
                .map(Decision::from)
                .map_err(ApiError::from),
            other => {
                skipped.push((id, format!("not a decision route: {other}")));
                continue;
            }
        };
        match parsed {
            Ok(decision) => lines.push(Line { id, decision }),
            Err(e) => skipped.push((id, e.to_string())),
        }
    }
    (lines, skipped)
}

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let bytes = std::fs::read(&args.workload)
        .with_context(|| format!("reading {}", args.workload.display()))?;
    let resolved = args.model.resolve()?;
    let settings = decide::Settings {
        routing: RoutingConfig::single_source(&super::repo_label(&resolved)),
        tournament_group: 0,
        pass_tokens: 0,
    };
    let (lines, mut skipped) = read_workload(&bytes, &settings.routing);

    let start = Instant::now();
    let (mut checkpoints, _) = super::load_single(&args.model, &resolved, false)?;
    let load_ms = start.elapsed().as_secs_f64() * 1e3;

    // Shapes: the ones asked for (prefixes), else every id group in workload order.
    let mut shapes: Vec<(String, Vec<&Line>)> = Vec::new();
    if args.shapes.is_empty() {
        for line in &lines {
            let group = group_of(&line.id);
            match shapes.iter_mut().find(|(g, _)| g == group) {
                Some((_, members)) => members.push(line),
                None => shapes.push((group.to_owned(), vec![line])),
            }
        }
    } else {
        for shape in &args.shapes {
            let prefix = format!("{shape}_");
            let members: Vec<&Line> = lines
                .iter()
                .filter(|l| l.id.starts_with(&prefix) || l.id == *shape)
                .collect();
            anyhow::ensure!(
                !members.is_empty(),
                "no valid request of shape {shape} in the workload"
            );
            shapes.push((shape.clone(), members));
        }
    }
    anyhow::ensure!(!shapes.is_empty(), "the workload has no valid request");

    let mut reports = Vec::new();
    for (shape, members) in &shapes {
        let mut times = Vec::with_capacity(args.runs);
        let mut tokens = 0;
        let mut failed = None;
        for i in 0..args.warmup + args.runs {
            let line = members[i % members.len()];
            let t = Instant::now();
            let decided = match decide::decide(&mut checkpoints, &settings, &line.decision) {
                Ok(d) => d,
                Err(e) => {
                    failed = Some((line.id.clone(), ApiError::from(e).to_string()));
                    break;
                }
            };
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if i >= args.warmup {
                times.push(ms);
                tokens = decided.input_tokens();
            }
            tracing::info!(shape = %shape, run = i, ms = format!("{ms:.1}"), "request");
        }
        if let Some(failure) = failed {
            skipped.push(failure);
            continue;
        }
        times.sort_by(f64::total_cmp);
        reports.push(serde_json::json!({
            "shape": shape,
            "runs": times.len(),
            "median_ms": percentile(&times, 0.5),
            "p99_ms": percentile(&times, 0.99),
            "min_ms": times.first(),
            "input_tokens": tokens,
        }));
    }
    let info = checkpoints.agent.forward.info();
    if std::io::stderr().is_terminal() {
        eprint!("{}", table(&reports, &skipped));
    }
    let report = serde_json::json!({
        "contender": "sys1rust",
        "precision": info.precision,
        "device": info.device,
        "engine": info.engine,
        "load_ms": load_ms,
        "peak_rss_mib": peak_rss_mib(),
        "shapes": reports,
        "skipped": skipped
            .iter()
            .map(|(id, reason)| serde_json::json!({"id": id, "reason": reason}))
            .collect::<Vec<_>>(),
    });
    println!("{report}");
    Ok(())
}

/// The shapes as a plain table, then the skipped lines.
fn table(reports: &[serde_json::Value], skipped: &[(String, String)]) -> String {
    let mut out = format!(
        "{:<24} {:>5} {:>11} {:>11} {:>8}\n",
        "SHAPE", "RUNS", "MEDIAN MS", "P99 MS", "TOKENS"
    );
    for r in reports {
        out.push_str(&format!(
            "{:<24} {:>5} {:>11.2} {:>11.2} {:>8}\n",
            r["shape"].as_str().unwrap_or("?"),
            r["runs"],
            r["median_ms"].as_f64().unwrap_or(f64::NAN),
            r["p99_ms"].as_f64().unwrap_or(f64::NAN),
            r["input_tokens"],
        ));
    }
    for (id, reason) in skipped {
        out.push_str(&format!("skipped {id}: {reason}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_and_skips() {
        assert_eq!(group_of("s128_q1_000"), "s128_q1");
        assert_eq!(group_of("plain"), "plain");
        let workload = br#"{"id":"a_1","body":{"state":"x","questions":{}}}
not json
{"id":"bad_1","body":{"questions":{}}}
{"id":"b_1","path":"/v1/systemone/batch","body":{"states":["x"],"questions":{}}}
{"id":"h","path":"/health","method":"GET"}
"#;
        let (lines, skipped) = read_workload(workload, &RoutingConfig::default());
        assert_eq!(
            lines.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
            ["a_1", "b_1"]
        );
        assert_eq!(lines[1].decision.states.len(), 1);
        let ids: Vec<&str> = skipped.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["line 2", "bad_1", "h"]);
        assert_eq!(skipped[1].1, "'state' is required");
    }
}
