//! Where a forward's time goes: times the operations one ModernBERT-large layer runs at a
//! given token count (the four weight matmuls, the exact-erf GELU of the GeGLU, the attention
//! softmax, and attention as the GPU engine runs it: `rows` rows padded to one length under a
//! bool window mask) on MLX's default device, MLX's fixed cost per operation (a chain of
//! small adds evaluated at once), the CPU engine's own host attention (global and sliding)
//! and its int8 layers, and prints ms per layer for each.
//!
//! ```text
//! cargo run --release -p laya-mlx --example op-timing -- [tokens=207] [iterations=5] [f16] [rows=1]
//! ```

use std::time::Instant;

use mlx_rs::error::Exception;
use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
use mlx_rs::{ops, random, Array, Dtype};

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
    let dtype = match args.next().as_deref() {
        Some("f16") => Dtype::Float16,
        _ => Dtype::Float32,
    };
    let rows: i32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1).max(1);
    for (name, value) in laya_mlx::backend::configure_process() {
        println!("{name}={value}");
    }
    let normal = |shape: &[i32]| -> Result<Array, Exception> {
        random::normal::<f32>(shape, None, None, None)?.as_dtype(dtype)
    };
    let x = normal(&[t, D])?;
    let wqkv = normal(&[D, 3 * D])?;
    let wo = normal(&[D, D])?;
    let wi = normal(&[D, 2 * I])?;
    let wmo = normal(&[I, D])?;
    let hidden = normal(&[t, I])?;
    let row_len = t / rows;
    let scores = normal(&[rows, H, row_len, row_len])?;
    println!(
        "one encoder layer at {t} tokens ({rows} rows of {row_len}), {dtype:?}, mean of {iters}:"
    );
    let mut matmul = 0.0;
    matmul += time("Wqkv  [t,1024]x[1024,3072]", iters, || x.matmul(&wqkv))?;
    matmul += time("Wo    [t,1024]x[1024,1024]", iters, || x.matmul(&wo))?;
    matmul += time("Wi    [t,1024]x[1024,5248]", iters, || x.matmul(&wi))?;
    matmul += time("mlp Wo [t,2624]x[2624,1024]", iters, || hidden.matmul(&wmo))?;
    let erf = time("erf   [t,2624] (exact GELU's cost)", iters, || {
        ops::erf(&hidden)
    })?;
    let softmax = time("softmax [rows,16,L,L] (full attention)", iters, || {
        ops::softmax_axis(&scores, -1, None)
    })?;
    let heads = |_: ()| normal(&[rows, H, row_len, 64]);
    let (q, k, v) = (heads(())?, heads(())?, heads(())?);
    let window: Vec<bool> = (0..row_len * row_len)
        .map(|ij| (ij / row_len - ij % row_len).abs() <= 64)
        .collect();
    let mask = Array::from_slice(&window, &[1, 1, row_len, row_len]);
    let attention = time("attention [rows,16,L,64], window mask", iters, || {
        fast::scaled_dot_product_attention(
            &q,
            &k,
            &v,
            0.125,
            Some(ScaledDotProductAttentionMask::Array(&mask)),
            None,
        )
    })?;
    let rope = time("RoPE on q and k [rows,16,L,64]", iters, || {
        let q = fast::rope(&q, 64, false, 160000.0f32, 1.0, 0, None)?;
        let k = fast::rope(&k, 64, false, 160000.0f32, 1.0, 0, None)?;
        q.add(&k)
    })?;
    let norm_w = normal(&[D])?;
    let norms = time("2 LayerNorms [t,1024] + 2 residual adds", iters, || {
        let a = fast::layer_norm(&x, &norm_w, None, 1e-5)?.add(&x)?;
        fast::layer_norm(&a, &norm_w, None, 1e-5)?.add(&a)
    })?;
    println!("rope {rope:.2} ms; norms and adds {norms:.2} ms");
    let small = normal(&[1, D])?;
    let chain = 1000;
    let per_op = time("1000 chained adds on [1,1024], one eval", iters, || {
        let mut a = small.clone();
        for _ in 0..chain {
            a = a.add(&small)?;
        }
        Ok(a)
    })? / chain as f64;
    let flops = 2.0
        * t as f64
        * (D as f64 * 3.0 * D as f64
            + D as f64 * D as f64
            + D as f64 * 2.0 * I as f64
            + I as f64 * D as f64);
    println!(
        "matmuls: {matmul:.2} ms ({:.0} GFLOP/s); erf {erf:.2} ms; softmax {softmax:.2} ms; attention {attention:.2} ms; fixed cost per op {:.1} us",
        flops / matmul / 1e6,
        per_op * 1e3
    );
    host_attention_timing(t as usize, rows as usize, iters)?;
    int8_timing(t as usize, iters)?;
    Ok(())
}

/// `--int8`'s three int8 layers of one encoder layer (`Wqkv`, `Wo`, `Wi`; `mlp.Wo` stays
/// f32), quantization of the activations included, with each kernel this CPU runs.
fn int8_timing(t: usize, iters: usize) -> Result<(), Exception> {
    use laya_mlx::int8::{Activations, Int8Linear, Kernel};
    let (d, i) = (D as usize, I as usize);
    let host = |shape: &[i32]| -> Result<Vec<f32>, Exception> {
        let a = random::normal::<f32>(shape, None, None, None)?;
        Ok(a.as_slice::<f32>().to_vec())
    };
    let x = host(&[t as i32, D])?;
    let layers = [
        ("Wqkv", Int8Linear::new(&host(&[3 * D, D])?, 3 * d, d, None)),
        ("Wo", Int8Linear::new(&host(&[D, D])?, d, d, None)),
        ("Wi", Int8Linear::new(&host(&[2 * I, D])?, 2 * i, d, None)),
    ];
    let macs = t as f64 * d as f64 * (3.0 * d as f64 + d as f64 + 2.0 * i as f64);
    for kernel in Kernel::ALL.into_iter().filter(|k| k.available()) {
        let mut total = 0.0;
        for (name, layer) in &layers {
            layer.forward(&x, kernel, Activations::Int8);
            let start = Instant::now();
            for _ in 0..iters {
                std::hint::black_box(layer.forward(&x, kernel, Activations::Int8));
            }
            let ms = start.elapsed().as_secs_f64() * 1e3 / iters as f64;
            println!(
                "{:<42} {ms:>9.2} ms",
                format!("{name} int8 ({})", kernel.name())
            );
            total += ms;
        }
        println!(
            "int8 Wqkv+Wo+Wi ({}): {total:.2} ms ({:.0} GOP/s)",
            kernel.name(),
            2.0 * macs / total / 1e6
        );
    }
    Ok(())
}

/// The encoder's host attention (`host_attention.rs`, what the CPU engine runs) over `rows`
/// rows of `t / rows` tokens, on a global and on a sliding layer.
fn host_attention_timing(t: usize, rows: usize, iters: usize) -> Result<(), Exception> {
    let (d, h) = (D as usize, H as usize);
    let qkv = random::normal::<f32>(&[t as i32, 3 * D], None, None, None)?;
    let qkv = qkv.as_slice::<f32>().to_vec();
    let lengths = vec![t / rows; rows];
    let tokens: usize = lengths.iter().sum();
    let qkv = &qkv[..tokens * 3 * d];
    for (name, half, theta) in [("global", None, 160_000.0), ("sliding", Some(64), 10_000.0)] {
        let run = || laya_mlx::profile::host_attention(qkv, &lengths, h, 64, theta, half);
        std::hint::black_box(run());
        let start = Instant::now();
        for _ in 0..iters {
            std::hint::black_box(run());
        }
        let ms = start.elapsed().as_secs_f64() * 1e3 / iters as f64;
        let keys: usize = lengths
            .iter()
            .map(|&l| match half {
                None => l * l,
                Some(w) => (0..l).map(|i| i.min(w) + (l - 1 - i).min(w) + 1).sum(),
            })
            .sum();
        let flops = 4.0 * keys as f64 * 64.0 * h as f64;
        println!(
            "{:<42} {ms:>9.2} ms ({:.0} GFLOP/s)",
            format!("host attention, {name} ({rows} rows)"),
            flops / ms / 1e6
        );
    }
    Ok(())
}
