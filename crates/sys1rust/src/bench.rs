//! `sys1rust bench`: in-process timing of the engine on a workload, one JSON report on stdout.
//! `bench/` drives it next to upstream and writes the write-ups in `results/`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use laya_core::pyjson::Value;
use laya_core::question::parse_questions;

use crate::decide::Request;
use crate::ModelArgs;

#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A workload file (JSONL, lines `{"id", "body"}` as in shared/seed-workloads).
    #[arg(long)]
    pub workload: PathBuf,
    /// Request id prefixes to time, e.g. `s128_q1,s512_q10` (all lines whose id starts so).
    #[arg(long, value_delimiter = ',')]
    pub shapes: Vec<String>,
    /// Timed requests per shape (cycling through that shape's lines).
    #[arg(long, default_value_t = 10)]
    pub runs: usize,
    /// Untimed requests per shape before timing.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
}

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

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let lines = std::fs::read(&args.workload)
        .with_context(|| format!("reading {}", args.workload.display()))?;
    let mut requests: Vec<(String, Request)> = Vec::new();
    for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v = laya_core::pyjson::loads(line)
            .map_err(|e| anyhow::anyhow!("workload line: {e:?}"))?
            .value;
        let Value::Object(o) = v else { continue };
        let (Some(Value::Str(id)), Some(body)) = (o.get("id"), o.get("body")) else {
            continue;
        };
        let body = laya_core::pyjson::dumps_spaced(body);
        requests.push((id.clone(), Request::parse(body.as_bytes())?));
    }

    let start = Instant::now();
    let mut engine = args.model.load()?;
    let load_ms = start.elapsed().as_secs_f64() * 1e3;
    let mut shapes = Vec::new();
    for shape in &args.shapes {
        let prefix = format!("{shape}_");
        let picked: Vec<&Request> = requests
            .iter()
            .filter(|(id, _)| id.starts_with(&prefix))
            .map(|(_, r)| r)
            .collect();
        anyhow::ensure!(
            !picked.is_empty(),
            "no request of shape {shape} in the workload"
        );
        let mut times = Vec::with_capacity(args.runs);
        let mut tokens = 0;
        for i in 0..args.warmup + args.runs {
            let r = picked[i % picked.len()];
            let questions = parse_questions(&r.questions)?;
            let t = Instant::now();
            let results =
                engine.predict_batch(std::slice::from_ref(&r.state), &questions, &r.opts)?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if i >= args.warmup {
                times.push(ms);
                tokens = results[0].usage.input_tokens;
            }
            tracing::info!(shape = %shape, run = i, ms = format!("{ms:.1}"), "request");
        }
        times.sort_by(f64::total_cmp);
        shapes.push(serde_json::json!({
            "shape": shape,
            "runs": times.len(),
            "median_ms": percentile(&times, 0.5),
            "p99_ms": percentile(&times, 0.99),
            "min_ms": times.first(),
            "input_tokens": tokens,
        }));
    }
    let report = serde_json::json!({
        "contender": "sys1rust",
        "precision": engine.forward.precision_name(),
        "device": engine.forward.device_name(),
        "engine": engine.forward.engine_name(),
        "load_ms": load_ms,
        "peak_rss_mib": peak_rss_mib(),
        "shapes": shapes,
    });
    println!("{report}");
    Ok(())
}
