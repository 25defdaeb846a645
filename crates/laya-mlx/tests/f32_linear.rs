//! The host's f32 linear layers: every kernel this CPU runs gives the same bits, a row's
//! output does not depend on the rows beside it, and the result is the f32 product.

use laya_mlx::f32_linear::{F32Linear, Kernel};

use crate::common::{same_bits, Values};

/// Shapes with ragged channel blocks (`out` not a multiple of 16 or 32), odd `k`, row counts
/// around every tile height (6 and 12), and rows in several cache chunks (2 MB of rows
/// each: 512 at `k` = 1,024, the last one short) and packing units.
const SHAPES: [(usize, usize, usize); 8] = [
    (1100, 40, 1024),
    (150, 40, 1024),
    (1, 8, 4),
    (7, 37, 13),
    (13, 100, 64),
    (12, 64, 1024),
    (25, 80, 131),
    (200, 1040, 96),
];

/// The exact product (in f64), and how big its terms are (`sqrt(Σ (x w)²)`), which bounds
/// f32 rounding where the sum itself is near 0.
fn reference(x: &[f32], w: &[f32], bias: &[f32], k: usize, r: usize, n: usize) -> (f64, f64) {
    let (xr, wn) = (&x[r * k..(r + 1) * k], &w[n * k..(n + 1) * k]);
    let exact: f64 = xr.iter().zip(wn).map(|(a, b)| *a as f64 * *b as f64).sum();
    let size: f64 = xr
        .iter()
        .zip(wn)
        .map(|(a, b)| (*a as f64 * *b as f64).powi(2))
        .sum::<f64>()
        .sqrt();
    (exact + bias[n] as f64, size + bias[n].abs() as f64)
}

#[test]
fn every_kernel_gives_the_same_bits_and_the_product() {
    let mut v = Values(0x2468_ace0_1357_9bdf);
    let kernels: Vec<Kernel> = Kernel::ALL.into_iter().filter(|k| k.available()).collect();
    println!(
        "f32 kernels checked on this CPU: {:?}",
        kernels.iter().map(|k| k.name()).collect::<Vec<_>>()
    );
    for &(rows, out, k) in &SHAPES {
        let w = v.take(out * k);
        let x = v.take(rows * k);
        let bias = v.take(out);
        let layer = F32Linear::new(&w, out, k, Some(bias.clone()));
        let mut first: Option<Vec<f32>> = None;
        for &kernel in &kernels {
            let y = layer.forward(&x, kernel);
            for r in 0..rows {
                for n in 0..out {
                    let (exact, size) = reference(&x, &w, &bias, k, r, n);
                    let err = (y[r * out + n] as f64 - exact).abs();
                    // k roundings of at most half an ulp of the running sum.
                    assert!(
                        err <= 1e-6 * size * (k as f64).sqrt() + 1e-30,
                        "{} at {rows}x{out}x{k}, row {r} channel {n}: {} against {exact}",
                        kernel.name(),
                        y[r * out + n]
                    );
                }
            }
            match &first {
                None => first = Some(y),
                Some(want) => assert!(
                    same_bits(&y, want),
                    "{} differs from {} at {rows}x{out}x{k}",
                    kernel.name(),
                    kernels[0].name()
                ),
            }
        }
    }
}

#[test]
fn a_row_gives_the_same_bits_alone_and_among_others() {
    let Some(kernel) = Kernel::detect() else {
        println!("no f32 kernel on this CPU: MLX's GEMM runs");
        return;
    };
    let mut v = Values(0x0ddb_a11c_afe5_eed6);
    let (rows, out, k) = (157, 96, 300);
    let layer = F32Linear::new(&v.take(out * k), out, k, None);
    let x = v.take(rows * k);
    let all = layer.forward(&x, kernel);
    for r in 0..rows {
        let alone = layer.forward(&x[r * k..(r + 1) * k], kernel);
        let among = &all[r * out..(r + 1) * out];
        assert!(
            same_bits(&alone, among),
            "row {r} changed with its neighbours ({})",
            kernel.name()
        );
    }
}

#[test]
fn adding_into_the_output_gives_the_bits_of_a_separate_add() {
    let mut v = Values(0x5eed_0fad_d1e5_0001);
    for kernel in Kernel::ALL.into_iter().filter(|k| k.available()) {
        for &(rows, out, k) in &SHAPES {
            let layer = F32Linear::new(&v.take(out * k), out, k, Some(v.take(out)));
            let x = v.take(rows * k);
            let residual = v.take(rows * out);
            let want: Vec<f32> = residual
                .iter()
                .zip(layer.forward(&x, kernel))
                .map(|(r, y)| r + y)
                .collect();
            let mut got = residual.clone();
            layer.forward_add_into(&x, kernel, &mut got);
            assert!(
                same_bits(&got, &want),
                "{} at {rows}x{out}x{k}",
                kernel.name()
            );
        }
    }
}
