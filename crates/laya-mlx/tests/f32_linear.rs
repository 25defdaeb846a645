//! The host's f32 linear layers: every kernel this CPU runs gives the f32 product, as close as
//! the FMA chain, the FMA kernels the same bits, and a row's output does not depend on the
//! rows beside it.

use laya_mlx::f32_linear::{F32Linear, Kernel};

use crate::common::{same_bits, Values};

/// Shapes with ragged channel blocks (`out` not a multiple of 16, 32 or 64), odd `k`, row
/// counts around every tile height (6, 12 and 16), and rows in several cache chunks (the FMA
/// kernels' 2 MB of rows: 512 at `k` = 1,024; AMX-BF16's 1 MB of split rows: 160; the last
/// one short) and packing units.
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

/// The kernels this CPU runs.
fn kernels() -> Vec<Kernel> {
    let kernels: Vec<Kernel> = Kernel::ALL.into_iter().filter(|k| k.available()).collect();
    println!(
        "f32 kernels checked on this CPU: {:?}",
        kernels.iter().map(|k| k.name()).collect::<Vec<_>>()
    );
    kernels
}

/// `n` weights that are f16 values, as a checkpoint's are (the AMX kernel's split needs it).
fn f16_values(v: &mut Values, n: usize) -> Vec<f32> {
    v.take(n)
        .into_iter()
        .map(|w| half::f16::from_f32(w).to_f32())
        .collect()
}

#[test]
fn every_kernel_gives_the_product_and_the_fma_kernels_the_same_bits() {
    let mut v = Values(0x2468_ace0_1357_9bdf);
    let kernels = kernels();
    for &(rows, out, k) in &SHAPES {
        let w = f16_values(&mut v, out * k);
        let x = v.take(rows * k);
        let bias = v.take(out);
        let mut first: Option<Vec<f32>> = None;
        for &kernel in &kernels {
            let layer = F32Linear::new(&w, out, k, Some(bias.clone()), kernel);
            assert_eq!(layer.kernel(), kernel, "f16 weights run on every kernel");
            let y = layer.forward(&x);
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
            if kernel == Kernel::AmxBf16 {
                continue;
            }
            match &first {
                None => first = Some(y),
                Some(want) => assert!(
                    same_bits(&y, want),
                    "{} differs from the first FMA kernel at {rows}x{out}x{k}",
                    kernel.name(),
                ),
            }
        }
    }
}

/// Whether this CPU runs the AMX-BF16 kernel (the tests of it say so when it does not).
fn amx() -> bool {
    let has = Kernel::AmxBf16.available();
    if !has {
        println!("no AMX-BF16 on this CPU: nothing to check");
    }
    has
}

/// Over a long `k`, the AMX kernel's sums are nearer the exact product than the FMA chain's
/// (what the split's five products leave out is below f32's rounding of each), and a layer
/// whose weights are not two bf16 values each runs on AVX-512 instead.
#[test]
fn the_amx_split_is_as_close_as_the_fma_chain_and_needs_f16_weights() {
    if !amx() {
        return;
    }
    let mut v = Values(0x0f16_b0f1_6000_0001);
    let (rows, out, k) = (48, 64, 2624);
    let w = f16_values(&mut v, out * k);
    let x: Vec<f32> = v.take(rows * k).iter().map(|x| 3.0 * x).collect();
    let zero = vec![0f32; out];
    let error = |kernel: Kernel| {
        let y = F32Linear::new(&w, out, k, None, kernel).forward(&x);
        let (mut sum, mut worst) = (0f64, 0f64);
        for r in 0..rows {
            for n in 0..out {
                let (exact, size) = reference(&x, &w, &zero, k, r, n);
                let e = (y[r * out + n] as f64 - exact).abs() / size;
                sum += e;
                worst = worst.max(e);
            }
        }
        (sum / (rows * out) as f64, worst)
    };
    let (amx, fma) = (error(Kernel::AmxBf16), error(Kernel::Avx512));
    println!(
        "error over the terms' size, mean and largest: AMX {:.3e} {:.3e}, FMA {:.3e} {:.3e}",
        amx.0, amx.1, fma.0, fma.1
    );
    assert!(
        amx.0 <= fma.0 && amx.1 <= fma.1,
        "AMX {amx:?} against FMA {fma:?}"
    );

    // One weight with more bits than two bf16 values hold (15 after the leading one).
    let mut wide = w.clone();
    wide[5] = 1.0 + 2f32.powi(-9) + 2f32.powi(-23);
    let layer = F32Linear::new(&wide, out, k, None, Kernel::AmxBf16);
    assert_eq!(layer.kernel(), Kernel::Avx512);
    let want = F32Linear::new(&wide, out, k, None, Kernel::Avx512).forward(&x);
    assert!(same_bits(&layer.forward(&x), &want));
}

#[test]
fn a_row_gives_the_same_bits_alone_and_among_others() {
    let mut v = Values(0x0ddb_a11c_afe5_eed6);
    let (rows, out, k) = (157, 96, 300);
    let w = f16_values(&mut v, out * k);
    let x = v.take(rows * k);
    for kernel in kernels() {
        let layer = F32Linear::new(&w, out, k, None, kernel);
        let all = layer.forward(&x);
        for r in 0..rows {
            let alone = layer.forward(&x[r * k..(r + 1) * k]);
            let among = &all[r * out..(r + 1) * out];
            assert!(
                same_bits(&alone, among),
                "row {r} changed with its neighbours ({})",
                kernel.name()
            );
        }
    }
}

#[test]
fn adding_into_the_output_gives_the_bits_of_a_separate_add() {
    let mut v = Values(0x5eed_0fad_d1e5_0001);
    for kernel in kernels() {
        for &(rows, out, k) in &SHAPES {
            let w = f16_values(&mut v, out * k);
            let layer = F32Linear::new(&w, out, k, Some(v.take(out)), kernel);
            let x = v.take(rows * k);
            let residual = v.take(rows * out);
            let want: Vec<f32> = residual
                .iter()
                .zip(layer.forward(&x))
                .map(|(r, y)| r + y)
                .collect();
            let mut got = residual.clone();
            layer.forward_add_into(&x, &mut got);
            assert!(
                same_bits(&got, &want),
                "{} at {rows}x{out}x{k}",
                kernel.name()
            );
        }
    }
}

/// On AMX-BF16 as on the FMA chain: a NaN in a row makes its outputs NaN, an infinity makes
/// them non-finite, and activations near f32's largest values (which do not round to bf16)
/// give the product, not an overflow.
#[test]
fn non_finite_and_huge_activations_keep_their_meaning_on_amx() {
    if !amx() {
        return;
    }
    let mut v = Values(0x1a2b_3c4d_5e6f_7081);
    let (out, k) = (40, 64);
    let w: Vec<f32> = v
        .take(out * k)
        .iter()
        .map(|w| half::f16::from_f32(w * 1e-3).to_f32())
        .collect();
    let mut x = v.take(4 * k);
    x[5] = f32::NAN;
    x[k + 7] = f32::INFINITY;
    for (i, value) in x[2 * k..3 * k].iter_mut().enumerate() {
        *value = if i % 2 == 0 { f32::MAX } else { -3.3e38 };
    }
    let amx = F32Linear::new(&w, out, k, None, Kernel::AmxBf16);
    assert_eq!(amx.kernel(), Kernel::AmxBf16);
    let y = amx.forward(&x);
    let fma = F32Linear::new(&w, out, k, None, Kernel::Avx512).forward(&x);
    for n in 0..out {
        assert!(y[n].is_nan(), "channel {n}: {} after a NaN", y[n]);
        assert!(
            !y[out + n].is_finite(),
            "channel {n}: {} after an inf",
            y[out + n]
        );
        let (got, want) = (y[2 * out + n], fma[2 * out + n]);
        assert!(
            got.is_finite() && (got - want).abs() <= 1e-5 * want.abs().max(1e30),
            "channel {n}: {got:e} against the FMA chain's {want:e}"
        );
        assert_eq!(y[3 * out + n].is_finite(), fma[3 * out + n].is_finite());
    }
}
