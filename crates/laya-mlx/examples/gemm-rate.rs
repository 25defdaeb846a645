//! GFLOP/s of the host's f32 GEMM on ModernBERT-large's weight shapes, and `Wi` with GeGLU
//! in its stores.
//!
//! `cargo run --release -p laya-mlx --example gemm-rate -- [rows] [reps]`

use laya_mlx::f32_linear::{F32Linear, Kernel};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let rows: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(207);
    let reps: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let Some(kernel) = Kernel::detect() else {
        eprintln!("no host f32 kernel on this CPU");
        return;
    };
    let mut s = 0x9e37_79b9_u32;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        s as f32 / u32::MAX as f32 - 0.5
    };
    let mut total = (0.0, 0.0);
    for (name, out, k) in [
        ("Wqkv", 3072, 1024),
        ("Wo", 1024, 1024),
        ("Wi", 5248, 1024),
        ("mlp.Wo", 1024, 2624),
    ] {
        let w: Vec<f32> = (0..out * k).map(|_| next()).collect();
        let x: Vec<f32> = (0..rows * k).map(|_| next()).collect();
        let layer = F32Linear::new(&w, out, k, None);
        let mut y = vec![0f32; rows * out];
        let med = median_seconds(reps, || layer.forward_into(&x, kernel, &mut y));
        let flop = 2.0 * (rows * out * k) as f64;
        total.0 += flop;
        total.1 += med;
        println!(
            "{name:<8} {rows}x{k}->{out}: {:.3} ms, {:.0} GFLOP/s",
            med * 1e3,
            flop / med / 1e9
        );
    }
    println!("all: {:.0} GFLOP/s", total.0 / total.1 / 1e9);

    // `Wi` with GeGLU in its stores: what the fused epilogue costs over the plain GEMM.
    let (out, k) = (5248, 1024);
    let w: Vec<f32> = (0..out * k).map(|_| next()).collect();
    let x: Vec<f32> = (0..rows * k).map(|_| next()).collect();
    let layer = F32Linear::new(&w, out, k, None).pair_halves();
    if layer.fuses_geglu(kernel) {
        let mut y = vec![0f32; rows * out / 2];
        let med = median_seconds(reps, || layer.forward_geglu_into(&x, kernel, &mut y));
        println!("Wi+GeGLU {rows}x{k}->{}: {:.3} ms", out / 2, med * 1e3);
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
