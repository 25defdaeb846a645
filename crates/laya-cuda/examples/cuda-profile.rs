//! Where a forward pass's time goes on the GPU: for each shape, the host wall time of
//! `CudaEngine::run` (graph replay, median) and the GPU time of every step (events between
//! the steps of a captured pass, median), as one JSON line per shape.
//!
//! ```text
//! cuda-profile <checkpoint dir> [ROWSxTOKENS ...]     (default 1x80 1x150 1x600 4x600 10x600)
//! ```
//! Rows are synthetic: token ids 1000 + i, four option markers at positions 1-4. `ITERS`
//! (default 50) sets the repetitions, `TUNE=1` times cuBLASLt's candidates for every GEMM shape,
//! `SHORT=N` sets the passes that take faster GEMM kernels of the same bits (`gemm_short_tokens`),
//! `OWN=1` times our own GEMM kernels among those on Hopper in every pass and `OWN=0` in none
//! (by default in the timed passes of 2,048 tokens or more, `gemm_own`; `OWN_TOKENS=N` sets
//! that bound), `ATTENTION=mma` runs `attention_mma` there instead of `attention_wg`. The
//! engine's logs go to stderr as `RUST_LOG` says (e.g. `laya_cuda=debug` for each short
//! pass's GEMM timings).

use std::path::PathBuf;
use std::time::Instant;

use laya_core::config::QType;
use laya_core::engine::Row;
use laya_cuda::{Attention, CudaEngine, CudaSettings};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .ok_or("usage: cuda-profile <checkpoint dir> [RxT ...]")?,
    );
    let mut shapes: Vec<String> = args.collect();
    if shapes.is_empty() {
        shapes = ["1x80", "1x150", "1x600", "4x600", "10x600"]
            .map(String::from)
            .to_vec();
    }
    let iters: usize = std::env::var("ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let defaults = CudaSettings::default();
    // OWN=1 keeps the meaning it had before the engine timed our kernels by default: every pass.
    let (gemm_own, gemm_own_tokens) = match std::env::var("OWN").as_deref() {
        Ok("0") => (false, defaults.gemm_own_tokens),
        Ok("1") => (true, 0),
        _ => (defaults.gemm_own, defaults.gemm_own_tokens),
    };
    let settings = CudaSettings {
        tune_gemms: std::env::var("TUNE").is_ok_and(|v| v == "1"),
        gemm_own,
        gemm_own_tokens: std::env::var("OWN_TOKENS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(gemm_own_tokens),
        gemm_short_tokens: std::env::var("SHORT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(defaults.gemm_short_tokens),
        attention: if std::env::var("ATTENTION").is_ok_and(|v| v == "mma") {
            Attention::Mma
        } else {
            Attention::TensorCore
        },
        ..defaults
    };
    let mut engine = CudaEngine::load(&dir, &settings)?;
    for shape in shapes {
        let (r, t) = shape.split_once('x').ok_or("a shape is ROWSxTOKENS")?;
        let (r, t): (usize, usize) = (r.parse()?, t.parse()?);
        let rows: Vec<Row> = (0..r)
            .map(|i| Row {
                ids: (0..t - i.min(t / 2)).map(|j| 1000 + j as u32).collect(),
                markers: vec![1, 2, 3, 4],
                qtype: QType::Choice,
            })
            .collect();
        engine.run(&rows)?;
        engine.run(&rows)?;
        let mut wall = Vec::with_capacity(iters);
        for _ in 0..iters {
            let started = Instant::now();
            engine.run(&rows)?;
            wall.push(started.elapsed().as_secs_f64() * 1e3);
        }
        wall.sort_by(f64::total_cmp);
        let (steps, gpu_us) = engine.profile(&rows, iters)?;
        let steps: serde_json::Map<String, serde_json::Value> = steps
            .into_iter()
            .map(|(l, us)| (l, serde_json::json!((us * 10.0).round() / 10.0)))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "shape": shape,
                "tokens": rows.iter().map(|r| r.ids.len()).sum::<usize>(),
                "run_ms_median": wall[wall.len() / 2],
                "gpu_pass_us": (gpu_us * 10.0).round() / 10.0,
                "steps_us": steps,
            })
        );
    }
    Ok(())
}
