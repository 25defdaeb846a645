//! `--int8` against f32 on one checkpoint: decides every request of the given workloads with
//! f32 and each int8 activation mode and prints how many picks agree and the largest probability difference
//! (`laya_fixtures::Agreement`), with the time each engine took.
//!
//! ```text
//! cargo run --release -p laya-mlx --example int8-agreement -- <checkpoint dir> <workload.jsonl>...
//! ```

use std::path::PathBuf;
use std::time::Instant;

use laya_core::agent::Agent;
use laya_core::checkpoints::Single;
use laya_core::decide::{decide, Settings};
use laya_core::routing::RoutingConfig;
use laya_fixtures::{workload_decisions, Agreement};
use laya_mlx::int8::{Activations, Int8};
use laya_mlx::{EngineSettings, MlxEngine, Precision};

type BoxError = Box<dyn std::error::Error>;

fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .ok_or("usage: int8-agreement <checkpoint dir> <workload.jsonl>...")?,
    );
    let workloads: Vec<PathBuf> = args.map(PathBuf::from).collect();
    for (name, value) in laya_mlx::backend::configure_process() {
        println!("{name}={value}");
    }
    let settings = Settings {
        routing: RoutingConfig::single_source("checkpoint"),
        tournament_group: 0,
        pass_tokens: 0,
    };
    let load = |int8: Option<Int8>| -> Result<Single<MlxEngine>, BoxError> {
        let engine = MlxEngine::load(
            &dir,
            &EngineSettings {
                precision: Some(Precision::F32),
                int8,
                ..EngineSettings::default()
            },
        )?;
        Ok(Single::new(Agent::load(&dir, engine)?, None))
    };
    let mut f32 = load(None)?;
    let mut modes = Vec::new();
    for acts in [Activations::Int8, Activations::Mixed, Activations::Split] {
        modes.push((
            Int8::detect(acts),
            load(Some(Int8::detect(acts)))?,
            Agreement::default(),
            0.0,
        ));
    }
    let mut f32_ms = 0.0;
    for path in &workloads {
        for (id, decision) in workload_decisions(path, &settings.routing) {
            let started = Instant::now();
            let a = decide(&mut f32, &settings, &decision)?;
            f32_ms += started.elapsed().as_secs_f64() * 1e3;
            for (_, engine, agreement, ms) in &mut modes {
                let started = Instant::now();
                let b = decide(engine, &settings, &decision)?;
                *ms += started.elapsed().as_secs_f64() * 1e3;
                agreement.add(&id, &a, &b);
            }
        }
    }
    println!("f32: {f32_ms:.0} ms in all");
    for (int8, _, agreement, ms) in &modes {
        println!(
            "{} ({}): {} of {} picks agree with f32 ({:.2} %), flips within a margin of {:.4} {:?}; largest probability difference {:.4} at {}; {ms:.0} ms in all",
            int8.precision(),
            int8.kernel.name(),
            agreement.answers - agreement.flipped.len(),
            agreement.answers,
            100.0 * agreement.rate(),
            agreement.widest_flip_margin,
            agreement.flipped,
            agreement.max_probability_diff,
            agreement.max_at,
        );
    }
    if let Some((_, _, agreement, _)) = modes.first() {
        let mut m = agreement.margins.clone();
        m.sort_by(f64::total_cmp);
        let below = |t: f64| m.iter().filter(|&&x| x < t).count();
        println!(
            "f32 margins (two best probabilities apart): {} answers; under 0.005: {}, 0.01: {}, 0.02: {}, 0.05: {}; median {:.4}",
            m.len(),
            below(0.005),
            below(0.01),
            below(0.02),
            below(0.05),
            m.get(m.len() / 2).copied().unwrap_or(0.0)
        );
    }
    Ok(())
}
