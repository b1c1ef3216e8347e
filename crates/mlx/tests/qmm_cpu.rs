//! The CPU quantized-matmul kernel behind `quant::quantized_matmul` must give
//! MLX's own op's bits (4-bit models' parity with MLX-LM rests on it).
use mlx::quant::{dequantize, for_device, quantize, quantized_matmul, quantized_matmul_mlx, Precision};
use mlx::{random, Array, Dtype};

fn normal(shape: &[i32], std: f32, seed: u64) -> Array {
    random::normal(shape, Dtype::Float32, 0.0, std, Some(&random::key(seed).unwrap())).unwrap()
}

fn assert_same_bits(ours: &Array, mlx: &Array, what: &str) {
    assert_eq!(ours.shape(), mlx.shape(), "{what}: shape");
    assert_eq!(ours.dtype(), mlx.dtype(), "{what}: dtype");
    let (a, b) = (ours.to_vec::<f32>().unwrap(), mlx.to_vec::<f32>().unwrap());
    let differ = a.iter().zip(&b).filter(|(x, y)| x.to_bits() != y.to_bits() && !(x.is_nan() && y.is_nan())).count();
    assert_eq!(
        differ,
        0,
        "{what}: {differ} of {} outputs differ from MLX's op (first: {:?})",
        a.len(),
        a.iter().zip(&b).find(|(x, y)| x.to_bits() != y.to_bits())
    );
}

#[test]
fn equals_mlx_op_bit_for_bit() {
    // Shapes: decode (one row), prefill (odd and even rows), batched rows,
    // output counts that are not a multiple of the 32-column block, and an
    // LM-head-like wide output; every supported width and group size.
    let cases: &[(&[i32], i32, i32, i32)] = &[
        (&[1, 256], 96, 64, 4),
        (&[1, 1, 512], 1000, 64, 4),
        (&[7, 256], 40, 32, 4),
        (&[2, 3, 128], 33, 128, 4),
        (&[5, 384], 70, 64, 8),
        (&[4, 256], 64, 32, 2),
        (&[1, 1024], 3000, 128, 8),
        (&[9, 64], 1, 64, 2),
        (&[64, 256], 130, 64, 4),
        // One row with groups smaller than eight words, taken several at a time.
        (&[1, 576], 70, 32, 4),
        (&[1, 256], 40, 32, 2),
        (&[1, 128], 33, 64, 2),
        (&[1, 96], 20, 32, 4),
    ];
    for (i, &(x_shape, n, group_size, bits)) in cases.iter().enumerate() {
        let k = *x_shape.last().unwrap();
        let x = normal(x_shape, 1.0, 10 + i as u64);
        let w = normal(&[n, k], 0.05, 100 + i as u64);
        let (wq, s, b) = quantize(&w, group_size, bits).unwrap();
        let ours = quantized_matmul(&x, &wq, &s, Some(&b), true, group_size, bits, Precision::Exact).unwrap();
        let mlx = quantized_matmul_mlx(&x, &wq, &s, Some(&b), true, group_size, bits).unwrap();
        assert_same_bits(&ours, &mlx, &format!("case {i}: x {x_shape:?}, n {n}, group {group_size}, {bits} bits"));
    }
}

#[test]
fn three_five_and_six_bits_run_at_8_bits_with_mlx_op_bits() {
    // MLX-community also publishes 3-, 5- and 6-bit models: their weights are
    // re-packed at 8 bits for the kernel, which must give MLX's op's bits at
    // the original width.
    let cases: &[(&[i32], i32, i32, i32, Dtype)] = &[
        (&[1, 512], 96, 64, 6, Dtype::Float32),
        (&[7, 256], 40, 32, 6, Dtype::Float32),
        (&[3, 1024], 33, 128, 5, Dtype::Float32),
        (&[2, 256], 64, 64, 3, Dtype::Float32),
        (&[1, 512], 72, 64, 6, Dtype::Bfloat16),
        (&[5, 256], 48, 32, 3, Dtype::Bfloat16),
    ];
    for (i, &(x_shape, n, group_size, bits, dtype)) in cases.iter().enumerate() {
        let what = format!("case {i}: x {x_shape:?} {dtype:?}, n {n}, group {group_size}, {bits} bits");
        let k = *x_shape.last().unwrap();
        let x = normal(x_shape, 1.0, 50 + i as u64).astype(dtype).unwrap();
        let w = normal(&[n, k], 0.05, 500 + i as u64).astype(dtype).unwrap();
        let (wq, s, b) = quantize(&w, group_size, bits).unwrap();
        let (wide, wide_bits) = for_device(wq.clone(), bits).unwrap();
        assert_eq!(wide_bits, 8, "{what}: re-packed");
        assert_eq!(wide.shape(), [n, k / 4], "{what}: one integer per byte");
        let same = |a: Array, b: Array, part: &str| {
            assert_same_bits(&a.astype(Dtype::Float32).unwrap(), &b.astype(Dtype::Float32).unwrap(), &format!("{what}: {part}"))
        };
        same(dequantize(&wide, &s, Some(&b), group_size, 8).unwrap(), dequantize(&wq, &s, Some(&b), group_size, bits).unwrap(), "dequantized");
        same(
            quantized_matmul(&x, &wide, &s, Some(&b), true, group_size, 8, Precision::Exact).unwrap(),
            quantized_matmul_mlx(&x, &wq, &s, Some(&b), true, group_size, bits).unwrap(),
            "matmul",
        );
    }
    // Widths the kernel runs stay as they are.
    let (wq, _, _) = quantize(&normal(&[8, 64], 0.1, 9), 64, 4).unwrap();
    assert_eq!(for_device(wq, 4).unwrap().1, 4);
}

#[test]
fn special_values_propagate_as_in_mlx() {
    let (k, n) = (64i32, 40);
    let mut xs: Vec<f32> = (0..3 * k).map(|i| (i as f32 * 0.37).sin()).collect();
    xs[5] = f32::NAN;
    xs[k as usize + 7] = f32::INFINITY;
    xs[2 * k as usize + 9] = 1e30;
    let x = Array::from_slice(&xs, &[3, k]).unwrap();
    let (wq, s, b) = quantize(&normal(&[n, k], 1.0, 7), 64, 4).unwrap();
    let ours = quantized_matmul(&x, &wq, &s, Some(&b), true, 64, 4, Precision::Exact).unwrap();
    let mlx = quantized_matmul_mlx(&x, &wq, &s, Some(&b), true, 64, 4).unwrap();
    assert_same_bits(&ours, &mlx, "NaN, inf and huge inputs");
}

#[test]
fn bfloat16_and_mixed_dtypes_equal_mlx_op() {
    // bfloat16 x with bfloat16 scales computes in bfloat16, every operation
    // rounded (MLX's `_MLX_BFloat16`); mixed with float32 it promotes to
    // float32; float16 is MLX's op itself.
    let cases: &[(&[i32], i32, i32, i32, Dtype, Dtype)] = &[
        (&[1, 512], 200, 64, 4, Dtype::Bfloat16, Dtype::Bfloat16),
        (&[7, 256], 72, 32, 8, Dtype::Bfloat16, Dtype::Bfloat16),
        (&[2, 2, 128], 40, 128, 2, Dtype::Bfloat16, Dtype::Bfloat16),
        (&[3, 256], 64, 64, 4, Dtype::Bfloat16, Dtype::Float32),
        (&[3, 256], 64, 64, 4, Dtype::Float32, Dtype::Bfloat16),
        (&[2, 256], 48, 64, 4, Dtype::Float16, Dtype::Float16),
        (&[2, 256], 48, 64, 4, Dtype::Float16, Dtype::Bfloat16),
    ];
    for (i, &(x_shape, n, group_size, bits, x_dtype, w_dtype)) in cases.iter().enumerate() {
        let k = *x_shape.last().unwrap();
        let x = normal(x_shape, 1.0, 30 + i as u64).astype(x_dtype).unwrap();
        let w = normal(&[n, k], 0.05, 300 + i as u64).astype(w_dtype).unwrap();
        let (wq, s, b) = quantize(&w, group_size, bits).unwrap();
        let ours = quantized_matmul(&x, &wq, &s, Some(&b), true, group_size, bits, Precision::Exact).unwrap();
        let mlx = quantized_matmul_mlx(&x, &wq, &s, Some(&b), true, group_size, bits).unwrap();
        let what = format!("case {i}: x {x_shape:?} {x_dtype:?}, weights {w_dtype:?}, {bits} bits");
        assert_same_bits(&ours.astype(Dtype::Float32).unwrap(), &mlx.astype(Dtype::Float32).unwrap(), &what);
        assert_eq!(ours.dtype(), mlx.dtype(), "{what}: dtype");
    }
}

#[test]
fn bad_shapes_are_mlx_errors() {
    // A shape MLX rejects is MLX's error, not a kernel's NaNs.
    let (wq, s, b) = quantize(&normal(&[32, 64], 0.1, 3), 64, 4).unwrap();
    let bad = normal(&[2, 48], 1.0, 5);
    let err = quantized_matmul(&bad, &wq, &s, Some(&b), true, 64, 4, Precision::Exact).and_then(|y| y.to_vec::<f32>().map(|_| ()));
    assert!(err.is_err(), "a 48-wide x against a 64-wide w must fail");
}

/// `Precision::Fast` on bfloat16 inputs sums in float32 where MLX's op (and
/// exact mode) rounds every partial sum to bfloat16: against the product
/// computed in float32 from the same bfloat16 values, fast mode is the closer
/// of the two, and it keeps bfloat16 as the result's dtype.
#[test]
fn fast_precision_on_bfloat16_is_closer_to_float32_than_exact() {
    let (m, k, n) = (3, 512, 96);
    let x = normal(&[m, k], 1.0, 7).astype(Dtype::Bfloat16).unwrap();
    let w = normal(&[n, k], 0.05, 8).astype(Dtype::Bfloat16).unwrap();
    let (wq, s, b) = quantize(&w, 64, 4).unwrap();
    let dense = dequantize(&wq, &s, Some(&b), 64, 4).unwrap().astype(Dtype::Float32).unwrap();
    let reference = x.astype(Dtype::Float32).unwrap().matmul(&dense.t().unwrap()).unwrap().to_vec::<f32>().unwrap();
    let error = |p: Precision| {
        let y = quantized_matmul(&x, &wq, &s, Some(&b), true, 64, 4, p).unwrap();
        assert_eq!(y.dtype(), Dtype::Bfloat16);
        let v = y.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap();
        v.iter().zip(&reference).map(|(a, r)| (a - r).abs()).sum::<f32>() / v.len() as f32
    };
    let (fast, exact) = (error(Precision::Fast), error(Precision::Exact));
    assert!(fast < exact / 2.0, "mean error from float32: fast {fast}, exact {exact}");
}
