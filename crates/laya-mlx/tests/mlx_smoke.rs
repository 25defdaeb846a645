//! Smoke test of the MLX link: mlx-rs, over the vendored mlx-sys and its mlx-c, computing on
//! the prebuilt libmlx. Expected values are worked out by hand or by a plain loop in this file,
//! so a libmlx that does not load, a BLAS bound wrongly, or an ABI mismatch in the half-precision
//! types (vendor/mlx-sys's `half.h` patch) fails here.

use std::mem::MaybeUninit;

use mlx_rs::{ops::indexing::IndexOp, Array, Dtype};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// `[[1, 2, 3], [4, 5, 6]]` times `[[7, 8], [9, 10], [11, 12]]`, by hand:
/// `[[1*7 + 2*9 + 3*11, 1*8 + 2*10 + 3*12], [4*7 + 5*9 + 6*11, 4*8 + 5*10 + 6*12]]`.
const A: [f32; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
const B: [f32; 6] = [7.0, 8.0, 9.0, 10.0, 11.0, 12.0];
const A_TIMES_B: [f32; 4] = [58.0, 64.0, 139.0, 154.0];

#[test]
fn f32_matmul_matches_hand_computed_values() -> TestResult {
    let a = Array::from_slice(&A, &[2, 3]);
    let b = Array::from_slice(&B, &[3, 2]);
    let c = a.matmul(&b)?;
    assert_eq!(c.shape(), &[2, 2]);
    assert_eq!(c.dtype(), Dtype::Float32);
    assert_eq!(c.as_slice::<f32>(), &A_TIMES_B);
    Ok(())
}

/// Large enough for the BLAS path with several blocks; small integer entries keep every partial
/// sum exact in f32, so any summation order must give the plain loop's result exactly.
#[test]
fn f32_matmul_matches_a_plain_loop() -> TestResult {
    let (m, k, n) = (37, 53, 29);
    let lhs: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    let rhs: Vec<f32> = (0..k * n).map(|i| ((i * 5) % 13) as f32 - 6.0).collect();
    let mut expected = vec![0.0f32; m * n];
    for row in 0..m {
        for col in 0..n {
            expected[row * n + col] = (0..k).map(|i| lhs[row * k + i] * rhs[i * n + col]).sum();
        }
    }
    let shape = |rows: usize, cols: usize| [rows as i32, cols as i32];
    let c = Array::from_slice(&lhs, &shape(m, k)).matmul(Array::from_slice(&rhs, &shape(k, n)))?;
    assert_eq!(c.shape(), &shape(m, n));
    assert_eq!(c.as_slice::<f32>(), expected.as_slice());
    Ok(())
}

/// The same product in f16, read back through mlx-c's `mlx_array_data_float16` and
/// `mlx_array_item_float16`, the functions the `half.h` patch declares off ARM. The inputs and
/// results are small integers, exact in f16.
#[test]
fn f16_matmul_matches_hand_computed_values() -> TestResult {
    let a = Array::from_slice(&A, &[2, 3]).as_dtype(Dtype::Float16)?;
    let b = Array::from_slice(&B, &[3, 2]).as_dtype(Dtype::Float16)?;
    let c = a.matmul(&b)?;
    c.eval()?;
    assert_eq!(c.dtype(), Dtype::Float16);
    assert_eq!(c.shape(), &[2, 2]);

    // SAFETY: `c` is evaluated, row-major contiguous (a fresh matmul result) and float16 with 4
    // elements, and it outlives the slice.
    let data = unsafe {
        let ptr = mlx_sys::mlx_array_data_float16(c.as_ptr());
        assert!(!ptr.is_null(), "mlx_array_data_float16 returned null");
        std::slice::from_raw_parts(ptr, 4)
    };
    let values: Vec<f32> = data.iter().map(|half| f16_to_f32(half.0)).collect();
    assert_eq!(values, A_TIMES_B);

    // A scalar through mlx_array_item_float16: 139 = 0 10110 0001011000 in binary16.
    let item = c.index((1, 0));
    let mut value = MaybeUninit::<mlx_sys::float16_t>::uninit();
    // SAFETY: `item` is a float16 scalar array and `value` has room for one float16; it is read
    // only after mlx-c reports that it wrote it.
    let bits = unsafe {
        let status = mlx_sys::mlx_array_item_float16(value.as_mut_ptr(), item.as_ptr());
        assert_eq!(status, 0, "mlx_array_item_float16 failed");
        value.assume_init().0
    };
    assert_eq!(bits, 0x5858);
    Ok(())
}

/// bfloat16 through `mlx_array_data_bfloat16`, the other half of the `half.h` patch: a bf16 is
/// the upper 16 bits of the f32 (exact here), 1.5 = 0x3fc0_0000 and -2 = 0xc000_0000 in f32.
#[test]
fn bf16_data_has_the_expected_bits() -> TestResult {
    let x = Array::from_slice(&[1.5f32, -2.0], &[2]).as_dtype(Dtype::Bfloat16)?;
    x.eval()?;
    assert_eq!(x.dtype(), Dtype::Bfloat16);
    // SAFETY: `x` is evaluated, contiguous and bfloat16 with 2 elements, and it outlives the
    // slice.
    let bits = unsafe {
        let ptr = mlx_sys::mlx_array_data_bfloat16(x.as_ptr());
        assert!(!ptr.is_null(), "mlx_array_data_bfloat16 returned null");
        std::slice::from_raw_parts(ptr, 2)
    };
    assert_eq!(bits, &[0x3fc0, 0xc000]);
    Ok(())
}

/// mlx-rs's default random key is seeded through `mach_approximate_time`, which vendor/mlx-sys
/// stands in for off Apple platforms: without it this test binary does not link.
#[test]
fn uniform_random_numbers_without_an_explicit_key() -> TestResult {
    let samples = mlx_rs::random::uniform::<_, f32>(0.0, 1.0, &[4096], None)?;
    let samples = samples.as_slice::<f32>();
    assert!(samples.iter().all(|x| (0.0..1.0).contains(x)));
    let mean = samples.iter().sum::<f32>() / samples.len() as f32;
    assert!(
        (mean - 0.5).abs() < 0.05,
        "mean of U(0, 1) samples is {mean}"
    );
    Ok(())
}

/// IEEE binary16 bits to f32, for the normal numbers and zero this test expects.
fn f16_to_f32(bits: u16) -> f32 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((bits >> 10) & 0x1f);
    let mantissa = f32::from(bits & 0x3ff);
    match exponent {
        0 => sign * mantissa * 2f32.powi(-24),
        _ => sign * (1.0 + mantissa / 1024.0) * 2f32.powi(exponent - 15),
    }
}
