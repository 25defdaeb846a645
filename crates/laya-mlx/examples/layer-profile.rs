//! Where a real forward's time goes, layer by layer: loads a checkpoint on the CPU, runs rows
//! of the given lengths through the engine with a tap that evaluates the residual stream
//! after the embeddings and after each half of each layer, and prints the median time of
//! each part, per layer kind (global or sliding attention), over the runs.
//!
//! The attention half is `attn_norm`, `Wqkv`, RoPE, attention and `Wo` plus the residual add;
//! the MLP half is `mlp_norm`, `Wi`, the GeGLU, `mlp.Wo` and the add; `head` is what follows
//! the last layer (the final norm and the decision head). Evaluating at every tap adds one
//! synchronisation per half (~µs), so the sum is a little above the plain forward, which is
//! printed beside it.
//!
//! ```text
//! cargo run --release -p laya-mlx --example layer-profile -- <checkpoint dir> [lengths=207] [runs=5] [int8]
//! ```
//!
//! `int8` profiles `--int8`'s engine (int8 linear layers with the CPU's best kernel).
//!
//! `lengths` is a comma-separated list of row lengths run together in one forward (e.g.
//! `590,590,590` for three rows of s512's length).

use std::path::PathBuf;
use std::time::Instant;

use laya_core::config::{LayerKind, QType};
use laya_core::engine::Row;
use laya_mlx::{DeviceKind, EngineSettings, MlxEngine, Precision};

type BoxError = Box<dyn std::error::Error>;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .ok_or("usage: layer-profile <checkpoint dir> [lengths] [runs]")?,
    );
    let lengths: Vec<usize> = args
        .next()
        .unwrap_or_else(|| "207".into())
        .split(',')
        .map(|s| s.trim().parse())
        .collect::<Result<_, _>>()?;
    let runs: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(5)
        .max(1);
    let int8 = args
        .next()
        .is_some_and(|a| a == "int8")
        .then(|| laya_mlx::int8::Int8::detect(laya_mlx::int8::Activations::Int8));
    for (name, value) in laya_mlx::backend::configure_process() {
        println!("{name}={value}");
    }
    let engine = MlxEngine::load(
        &dir,
        &EngineSettings {
            device: DeviceKind::Cpu,
            precision: Some(Precision::F32),
            int8,
            ..Default::default()
        },
    )?;
    let kinds: Vec<LayerKind> = engine.config().encoder.layer_kinds.clone();
    let vocab = engine.config().encoder.vocab_size as u32;
    // Deterministic ids away from the special tokens; two markers a row, as a two-option choice.
    let rows: Vec<Row> = lengths
        .iter()
        .enumerate()
        .map(|(r, &len)| {
            let len = len.max(6);
            let ids = (0..len)
                .map(|i| 1000 + ((i * 7919 + r * 104729) as u32 % (vocab - 2000)))
                .collect();
            Row {
                ids,
                markers: vec![2, 3],
                qtype: QType::Choice,
            }
        })
        .collect();
    let tokens: usize = rows.iter().map(|r| r.ids.len()).sum();

    // Warm-up, then plain forwards.
    engine.run(&rows)?;
    let mut plain = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        engine.run(&rows)?;
        plain.push(t.elapsed().as_secs_f64() * 1e3);
    }

    // Tapped forwards: the time between consecutive taps is the part that just ran.
    let parts = 1 + 2 * kinds.len() + 1;
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); parts];
    for _ in 0..runs {
        let mut times = Vec::with_capacity(parts);
        let mut last = Instant::now();
        engine.run_tapped(&rows, &mut |_, x| {
            x.eval()?;
            let now = Instant::now();
            times.push((now - last).as_secs_f64() * 1e3);
            last = now;
            Ok(())
        })?;
        let now = Instant::now();
        times.push((now - last).as_secs_f64() * 1e3);
        for (s, t) in samples.iter_mut().zip(times) {
            s.push(t);
        }
    }
    let med: Vec<f64> = samples.into_iter().map(median).collect();
    let (embed, head) = (med[0], med[parts - 1]);
    let mut sums = [[0f64; 2]; 2]; // [global, sliding] × [attention, mlp]
    let mut counts = [0usize; 2];
    for (l, kind) in kinds.iter().enumerate() {
        let k = usize::from(*kind == LayerKind::Sliding);
        counts[k] += 1;
        sums[k][0] += med[1 + 2 * l];
        sums[k][1] += med[2 + 2 * l];
    }
    let total: f64 = med.iter().sum();
    println!(
        "{} rows, {tokens} tokens ({lengths:?}), f32 CPU, median of {runs}",
        rows.len()
    );
    println!(
        "plain forward                       {:>9.1} ms",
        median(plain)
    );
    println!("tapped forward (sum of parts)       {total:>9.1} ms");
    println!("embeddings                          {embed:>9.2} ms");
    for (k, name) in ["global", "sliding"].iter().enumerate() {
        if counts[k] == 0 {
            continue;
        }
        let n = counts[k] as f64;
        println!(
            "{name:<8} layers ({:>2}): attention half {:>7.2} ms/layer, MLP half {:>7.2} ms/layer, {:>8.1} ms in all",
            counts[k],
            sums[k][0] / n,
            sums[k][1] / n,
            sums[k][0] + sums[k][1]
        );
    }
    println!("final norm and decision head        {head:>9.2} ms");
    Ok(())
}
