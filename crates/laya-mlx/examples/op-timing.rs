//! Where a CPU forward's time goes: times the operations one ModernBERT-large layer runs at a
//! given row length (the four weight matmuls, the exact-erf GELU of the GeGLU, the attention
//! softmax) on MLX's default device, and prints ms per layer for each.
//!
//! ```text
//! cargo run --release -p laya-mlx --example op-timing -- [tokens=207] [iterations=5]
//! ```

use std::time::Instant;

use mlx_rs::error::Exception;
use mlx_rs::{ops, random, Array};

/// ModernBERT-large: hidden, intermediate, heads.
const D: i32 = 1024;
const I: i32 = 2624;
const H: i32 = 16;

fn time(
    label: &str,
    iters: usize,
    mut f: impl FnMut() -> Result<Array, Exception>,
) -> Result<f64, Exception> {
    f()?.eval()?; // warm-up (and any JIT compilation)
    let start = Instant::now();
    for _ in 0..iters {
        f()?.eval()?;
    }
    let ms = start.elapsed().as_secs_f64() * 1e3 / iters as f64;
    println!("{label:<42} {ms:>9.2} ms");
    Ok(ms)
}

fn main() -> Result<(), Exception> {
    let mut args = std::env::args().skip(1);
    let t: i32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(207);
    let iters: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let x = random::normal::<f32>(&[t, D], None, None, None)?;
    let wqkv = random::normal::<f32>(&[D, 3 * D], None, None, None)?;
    let wo = random::normal::<f32>(&[D, D], None, None, None)?;
    let wi = random::normal::<f32>(&[D, 2 * I], None, None, None)?;
    let wmo = random::normal::<f32>(&[I, D], None, None, None)?;
    let hidden = random::normal::<f32>(&[t, I], None, None, None)?;
    let scores = random::normal::<f32>(&[H, t, t], None, None, None)?;
    println!("one encoder layer at {t} tokens, f32, mean of {iters}:");
    let mut matmul = 0.0;
    matmul += time("Wqkv  [t,1024]x[1024,3072]", iters, || x.matmul(&wqkv))?;
    matmul += time("Wo    [t,1024]x[1024,1024]", iters, || x.matmul(&wo))?;
    matmul += time("Wi    [t,1024]x[1024,5248]", iters, || x.matmul(&wi))?;
    matmul += time("mlp Wo [t,2624]x[2624,1024]", iters, || hidden.matmul(&wmo))?;
    let erf = time("erf   [t,2624] (exact GELU's cost)", iters, || {
        ops::erf(&hidden)
    })?;
    let softmax = time("softmax [16,t,t] (full attention)", iters, || {
        ops::softmax_axis(&scores, -1, None)
    })?;
    let flops = 2.0
        * t as f64
        * (D as f64 * 3.0 * D as f64
            + D as f64 * D as f64
            + D as f64 * 2.0 * I as f64
            + I as f64 * D as f64);
    println!(
        "matmuls: {matmul:.2} ms ({:.0} GFLOP/s); erf {erf:.2} ms; softmax {softmax:.2} ms",
        flops / matmul / 1e6
    );
    Ok(())
}
