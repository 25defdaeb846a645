//! GFLOP/s of the host's f32 GEMM kernels on the weight shapes of ModernBERT-large and its
//! decision head (f16 weights, as a checkpoint's), and `Wi` with GeGLU in its stores: every
//! kernel this CPU has, in turns, so that their rates compare within one run.
//!
//! `cargo run --release -p laya-mlx --example gemm-rate -- [rows] [reps] [kernel...]`

use laya_mlx::f32_linear::{F32Linear, Kernel};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let rows: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(207);
    let reps: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let named: Vec<Kernel> = args
        .map(|a| a.parse().unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let kernels: Vec<Kernel> = if named.is_empty() {
        Kernel::ALL.into_iter().filter(|k| k.available()).collect()
    } else {
        named
    };
    if kernels.is_empty() {
        eprintln!("no host f32 kernel on this CPU");
        return;
    }
    let mut s = 0x9e37_79b9_u32;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        s as f32 / u32::MAX as f32 - 0.5
    };
    let shapes = [
        ("Wqkv", 3072, 1024),
        ("Wo", 1024, 1024),
        ("Wi", 5248, 1024),
        ("mlp.Wo", 1024, 2624),
        ("linear1", 4096, 1024),
        ("linear2", 1024, 4096),
    ];
    let data: Vec<(Vec<half::f16>, Vec<f32>)> = shapes
        .iter()
        .map(|&(_, out, k)| {
            let w = (0..out * k)
                .map(|_| half::f16::from_f32(0.1 * next()))
                .collect();
            let x = (0..rows * k).map(|_| 4.0 * next()).collect();
            (w, x)
        })
        .collect();
    for &kernel in &kernels {
        let mut total = (0.0, 0.0);
        for (&(name, out, k), (w, x)) in shapes.iter().zip(&data) {
            let layer = F32Linear::new(w, out, k, None, kernel);
            let mut y = vec![0f32; rows * out];
            let med = median_seconds(reps, || layer.forward_into(x, &mut y));
            let flop = 2.0 * (rows * out * k) as f64;
            total.0 += flop;
            total.1 += med;
            println!(
                "{:<9} {name:<8} {rows}x{k}->{out}: {:.3} ms, {:.0} GFLOP/s",
                layer.kernel().name(),
                med * 1e3,
                flop / med / 1e9
            );
        }
        println!(
            "{:<9} all: {:.0} GFLOP/s",
            kernel.name(),
            total.0 / total.1 / 1e9
        );

        // `Wi` with GeGLU in its stores: what the fused epilogue costs over the plain GEMM.
        let (out, k) = (shapes[2].1, shapes[2].2);
        let layer = F32Linear::new(&data[2].0, out, k, None, kernel).pair_halves();
        if layer.fuses_geglu() {
            let mut y = vec![0f32; rows * out / 2];
            let med = median_seconds(reps, || layer.forward_geglu_into(&data[2].1, &mut y));
            println!(
                "{:<9} Wi+GeGLU {rows}x{k}->{}: {:.3} ms",
                kernel.name(),
                out / 2,
                med * 1e3
            );
        }
    }
}

/// The median of `reps` timed calls of `run`, after one untimed call (the first faults the
/// output's pages in and fills the caches).
fn median_seconds(reps: usize, mut run: impl FnMut()) -> f64 {
    run();
    let mut times: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let t = Instant::now();
            run();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}
