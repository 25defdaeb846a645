//! The host's share of a decision: [`decide`] over a workload's requests with the
//! recorded-logits engine ([`Recorded`]), so everything a request costs but the model's forward
//! pass (routing and language detection, tokenization, layout, decoding) is timed alone, one
//! JSON line per shape.
//!
//! ```text
//! decide-host [SHAPE ...]     (default s128_q1 s512_q10; RUNS, default 2000)
//! ```
//! Requests are smoke's (`s128_q1_*` …) that pass validation, parsed once ahead; the fixture checkpoint `tiny`
//! has the real ModernBERT tokenizer, so its tokenization costs what the real checkpoints' do.

use std::time::Instant;

use laya_core::agent::Agent;
use laya_core::checkpoints::Single;
use laya_core::decide::{decide, Decision, Settings};
use laya_core::routing::RoutingConfig;
use laya_fixtures::{fixture_workload, fixtures_dir, workload_decisions, Recorded};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut shapes: Vec<String> = std::env::args().skip(1).collect();
    if shapes.is_empty() {
        shapes = vec!["s128_q1".into(), "s512_q10".into()];
    }
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let dir = fixtures_dir().join("checkpoints").join("tiny");
    let agent = Agent::load(&dir, Recorded::for_checkpoint("tiny"))?;
    let mut checkpoints = Single::new(agent, None);
    let routing = RoutingConfig::single_source("tiny");
    let settings = Settings {
        routing: routing.clone(),
        tournament_group: 0,
        pass_tokens: 0,
    };
    let smoke = workload_decisions(&fixture_workload("smoke"), &routing);
    for shape in &shapes {
        let prefix = format!("{shape}_");
        let requests: Vec<&Decision> = smoke
            .iter()
            .filter(|(id, _)| id.starts_with(&prefix))
            .map(|(_, d)| d)
            .collect();
        if requests.is_empty() {
            return Err(format!("no request of shape {shape} in smoke").into());
        }
        let mut times = Vec::with_capacity(runs);
        for i in 0..runs.max(1) {
            let t = Instant::now();
            let decided = decide(&mut checkpoints, &settings, requests[i % requests.len()])?;
            times.push(t.elapsed().as_secs_f64() * 1e6);
            std::hint::black_box(decided);
        }
        times.sort_by(f64::total_cmp);
        let at = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
        println!(
            "{{\"shape\":\"{shape}\",\"runs\":{},\"median_us\":{:.1},\"p90_us\":{:.1},\"min_us\":{:.1}}}",
            times.len(),
            at(0.5),
            at(0.9),
            times[0]
        );
    }
    Ok(())
}
