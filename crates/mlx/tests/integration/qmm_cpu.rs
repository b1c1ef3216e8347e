//! The CPU quantized-matmul kernel behind `quant::quantized_matmul` must give
//! MLX's own op's bits (4-bit models' parity with MLX-LM rests on it).
use mlx::nn::{Embedding, Linear, QuantParams};
use mlx::quant::{dequantize, for_device, gather_qmm, quantize, quantized_matmul, quantized_matmul_mlx, Mode, Precision, Repacked};
use mlx::{random, Array, Dtype};

/// Affine quantization: (packed, scales, biases).
fn affine(w: &Array, group_size: i32, bits: i32) -> mlx::Result<(Array, Array, Array)> {
    let (q, s, b) = quantize(w, group_size, bits, Mode::Affine)?;
    Ok((q, s, b.expect("affine quantization has biases")))
}

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
        // A batch of six to eight rows (rows in lanes where the CPU has AVX-512).
        (&[8, 256], 70, 64, 4),
        (&[2, 3, 128], 40, 32, 2),
        (&[7, 512], 33, 128, 4),
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
        let (wq, s, b) = affine(&w, group_size, bits).unwrap();
        let ours = quantized_matmul(&x, &wq, &s, Some(&b), true, group_size, bits, Mode::Affine, Precision::Exact).unwrap();
        let mlx = quantized_matmul_mlx(&x, &wq, &s, Some(&b), true, group_size, bits, Mode::Affine).unwrap();
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
        let (wq, s, b) = affine(&w, group_size, bits).unwrap();
        let (wide, wide_bits) = for_device(wq.clone(), bits, Mode::Affine).unwrap();
        assert_eq!(wide_bits, 8, "{what}: re-packed");
        assert_eq!(wide.shape(), [n, k / 4], "{what}: one integer per byte");
        let same = |a: Array, b: Array, part: &str| {
            assert_same_bits(&a.astype(Dtype::Float32).unwrap(), &b.astype(Dtype::Float32).unwrap(), &format!("{what}: {part}"))
        };
        same(
            dequantize(&wide, &s, Some(&b), group_size, 8, Mode::Affine).unwrap(),
            dequantize(&wq, &s, Some(&b), group_size, bits, Mode::Affine).unwrap(),
            "dequantized",
        );
        same(
            quantized_matmul(&x, &wide, &s, Some(&b), true, group_size, 8, Mode::Affine, Precision::Exact).unwrap(),
            quantized_matmul_mlx(&x, &wq, &s, Some(&b), true, group_size, bits, Mode::Affine).unwrap(),
            "matmul",
        );
    }
    // Widths the kernel runs stay as they are.
    let (wq, _, _) = affine(&normal(&[8, 64], 0.1, 9), 64, 4).unwrap();
    assert_eq!(for_device(wq, 4, Mode::Affine).unwrap().1, 4);
}

#[test]
fn special_values_propagate_as_in_mlx() {
    let (k, n) = (64i32, 40);
    let mut xs: Vec<f32> = (0..3 * k).map(|i| (i as f32 * 0.37).sin()).collect();
    xs[5] = f32::NAN;
    xs[k as usize + 7] = f32::INFINITY;
    xs[2 * k as usize + 9] = 1e30;
    let x = Array::from_slice(&xs, &[3, k]).unwrap();
    let (wq, s, b) = affine(&normal(&[n, k], 1.0, 7), 64, 4).unwrap();
    let ours = quantized_matmul(&x, &wq, &s, Some(&b), true, 64, 4, Mode::Affine, Precision::Exact).unwrap();
    let mlx = quantized_matmul_mlx(&x, &wq, &s, Some(&b), true, 64, 4, Mode::Affine).unwrap();
    assert_same_bits(&ours, &mlx, "NaN, inf and huge inputs");
}

#[test]
fn bfloat16_and_mixed_dtypes_equal_mlx_op() {
    // bfloat16 x with bfloat16 scales computes in bfloat16, every operation
    // rounded (MLX's `_MLX_BFloat16`); mixed with float32 it promotes to
    // float32; float16 is MLX's op itself. The exact kernel on repacked weights
    // (whatever `x` a layer gets) gives the same bits, except with float16
    // scales, which it leaves in MLX's layout.
    let cases: &[(&[i32], i32, i32, i32, Dtype, Dtype)] = &[
        (&[1, 512], 200, 64, 4, Dtype::Bfloat16, Dtype::Bfloat16),
        (&[7, 256], 72, 32, 8, Dtype::Bfloat16, Dtype::Bfloat16),
        (&[2, 2, 128], 40, 128, 2, Dtype::Bfloat16, Dtype::Bfloat16),
        (&[3, 256], 64, 64, 4, Dtype::Bfloat16, Dtype::Float32),
        (&[3, 256], 64, 64, 4, Dtype::Float32, Dtype::Bfloat16),
        (&[2, 256], 48, 64, 4, Dtype::Float16, Dtype::Float16),
        (&[2, 256], 48, 64, 4, Dtype::Float16, Dtype::Bfloat16),
        (&[2, 256], 48, 64, 4, Dtype::Float16, Dtype::Float32),
    ];
    for (i, &(x_shape, n, group_size, bits, x_dtype, w_dtype)) in cases.iter().enumerate() {
        let k = *x_shape.last().unwrap();
        let x = normal(x_shape, 1.0, 30 + i as u64).astype(x_dtype).unwrap();
        let w = normal(&[n, k], 0.05, 300 + i as u64).astype(w_dtype).unwrap();
        let (wq, s, b) = affine(&w, group_size, bits).unwrap();
        let ours = quantized_matmul(&x, &wq, &s, Some(&b), true, group_size, bits, Mode::Affine, Precision::Exact).unwrap();
        let mlx = quantized_matmul_mlx(&x, &wq, &s, Some(&b), true, group_size, bits, Mode::Affine).unwrap();
        let what = format!("case {i}: x {x_shape:?} {x_dtype:?}, weights {w_dtype:?}, {bits} bits");
        assert_same_bits(&ours.astype(Dtype::Float32).unwrap(), &mlx.astype(Dtype::Float32).unwrap(), &what);
        assert_eq!(ours.dtype(), mlx.dtype(), "{what}: dtype");
        match Repacked::new(&wq, &s, &b, group_size, bits, Precision::Exact).unwrap() {
            Some(r) => {
                let got = r.matmul(&x).unwrap();
                assert_eq!(got.dtype(), mlx.dtype(), "{what}: repacked dtype");
                assert_same_bits(&got.astype(Dtype::Float32).unwrap(), &mlx.astype(Dtype::Float32).unwrap(), &format!("{what}, repacked"));
            }
            None => assert_eq!(w_dtype, Dtype::Float16, "{what}: exact not repacked"),
        }
    }
}

#[test]
fn bad_shapes_are_mlx_errors() {
    // A shape MLX rejects is MLX's error, not a kernel's NaNs.
    let (wq, s, b) = affine(&normal(&[32, 64], 0.1, 3), 64, 4).unwrap();
    let bad = normal(&[2, 48], 1.0, 5);
    let err = quantized_matmul(&bad, &wq, &s, Some(&b), true, 64, 4, Mode::Affine, Precision::Exact).and_then(|y| y.to_vec::<f32>().map(|_| ()));
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
    let (wq, s, b) = affine(&w, 64, 4).unwrap();
    let dense = dequantize(&wq, &s, Some(&b), 64, 4, Mode::Affine).unwrap().astype(Dtype::Float32).unwrap();
    let reference = x.astype(Dtype::Float32).unwrap().matmul(&dense.t().unwrap()).unwrap().to_vec::<f32>().unwrap();
    let error = |p: Precision| {
        let y = quantized_matmul(&x, &wq, &s, Some(&b), true, 64, 4, Mode::Affine, p).unwrap();
        assert_eq!(y.dtype(), Dtype::Bfloat16);
        let v = y.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap();
        v.iter().zip(&reference).map(|(a, r)| (a - r).abs()).sum::<f32>() / v.len() as f32
    };
    let (fast, exact) = (error(Precision::Fast), error(Precision::Exact));
    assert!(fast < exact / 2.0, "mean error from float32: fast {fast}, exact {exact}");
}

/// `Precision::Fast` takes a prompt's rows too (more than a row tile of 8):
/// each row of a 20-row call has the bits of that row's own call (batch
/// invariance), and they are not exact mode's (the int8 kernel ran).
#[test]
fn fast_precision_on_a_prompt_gives_each_row_its_own_bits() {
    let (m, k, n) = (20, 128, 40);
    let x = normal(&[m, k], 1.0, 30);
    let (wq, s, b) = affine(&normal(&[n, k], 0.05, 31), 64, 4).unwrap();
    let fast = |x: &Array| quantized_matmul(x, &wq, &s, Some(&b), true, 64, 4, Mode::Affine, Precision::Fast).unwrap();
    let all = fast(&x);
    for r in 0..m {
        let row = x.slice_axis(0, r, r + 1).unwrap();
        assert_same_bits(&all.slice_axis(0, r, r + 1).unwrap(), &fast(&row), &format!("row {r}"));
    }
    let exact = quantized_matmul(&x, &wq, &s, Some(&b), true, 64, 4, Mode::Affine, Precision::Exact).unwrap();
    let (f, e) = (all.to_vec::<f32>().unwrap(), exact.to_vec::<f32>().unwrap());
    assert!(f.iter().zip(&e).any(|(f, e)| f.to_bits() != e.to_bits()), "fast mode ran the exact kernel");
}

/// Fast precision computes a prompt chunk (64 positions or more) of float32
/// `x` on 8-bit weights, or 4-bit ones in groups of 32, by the exact kernel
/// with fused multiply-adds (one `mul_add` per weight, in index order, on
/// the weights dequantized as MLX does) where the CPU's integer path is
/// AVX2's or the portable one, else by the integer kernel (each position
/// the bits it gets alone), on MLX's layout and on the repacked one alike;
/// 63 positions, a batched decode step (`[B, 1, K]`), 4-bit
/// weights in groups of 64, 2-bit ones and bfloat16 `x` keep the integer
/// kernel. Neither gives MLX's bits.
#[test]
fn fast_precision_runs_some_prompts_fused() {
    let (k, n) = (256, 44);
    for (bits, gs) in [(8, 64), (4, 32), (4, 64), (2, 32)] {
        let (wq, s, b) = affine(&normal(&[n, k], 0.05, 810 + bits as u64 + gs as u64), gs, bits).unwrap();
        let r = Repacked::new(&wq, &s, &b, gs, bits, Precision::Fast).unwrap().expect("the fast kernel applies");
        let per_call = |x: &Array| quantized_matmul(x, &wq, &s, Some(&b), true, gs, bits, Mode::Affine, Precision::Fast).unwrap();
        let mlx = |x: &Array| quantized_matmul_mlx(x, &wq, &s, Some(&b), true, gs, bits, Mode::Affine).unwrap();
        let same = |a: &Array, b: &[f32]| {
            let a = a.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap();
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits())
        };
        // The weights as MLX dequantizes them (`scale * q + bias`, two roundings), from its layout.
        let (words, scales, biases) = (wq.to_vec::<u32>().unwrap(), s.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        let per_word = 32 / bits as usize;
        let (k_, gs_) = (k as usize, gs as usize);
        let weight = |col: usize, e: usize| {
            let q = (words[col * k_ / per_word + e / per_word] >> (e % per_word * bits as usize)) & ((1u32 << bits) - 1);
            let g = col * (k_ / gs_) + e / gs_;
            scales[g] * q as f32 + biases[g]
        };
        let fused = |x: &Array| -> Vec<f32> {
            let x = x.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap();
            (0..x.len() / k_ * n as usize)
                .map(|o| (0..k_).fold(0f32, |sum, e| x[o / n as usize * k_ + e].mul_add(weight(o % n as usize, e), sum)))
                .collect()
        };
        for (shape, dtype) in [
            ([1, 64, k], Dtype::Float32),
            ([1, 70, k], Dtype::Float32),
            ([1, 63, k], Dtype::Float32),
            ([64, 1, k], Dtype::Float32),
            ([1, 64, k], Dtype::Bfloat16),
        ] {
            let x = normal(&shape, 1.0, 820 + shape[1] as u64).astype(dtype).unwrap();
            let (fast, repacked) = (per_call(&x), r.matmul(&x).unwrap());
            let what = format!("{bits} bits, groups of {gs}, x {shape:?} {dtype:?}");
            assert_same_bits(&repacked.astype(Dtype::Float32).unwrap(), &fast.astype(Dtype::Float32).unwrap(), &what);
            // Only where the CPU's integer path is slower than the panel (`fast_prompts_fused`).
            let expect_fused = (bits == 8 || gs == 32 && bits == 4) && shape[1] >= 64 && dtype == Dtype::Float32 && mlx::info::fast_prompts_fused();
            assert_eq!(same(&fast, &fused(&x)), expect_fused, "{what}: fused sums expected: {expect_fused}");
            let mlx_bits = mlx(&x).astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap();
            assert!(!same(&fast, &mlx_bits), "{what}: MLX's bits");
            if !expect_fused {
                // The integer kernel: a batch keeps each sequence's bits alone, and a prompt each
                // position's.
                let axis = if shape[0] > 1 { 0 } else { 1 };
                for row in (0..shape[axis]).step_by(9) {
                    let one = x.slice_axis(axis as i32, row, row + 1).unwrap();
                    let got = fast.slice_axis(axis as i32, row, row + 1).unwrap();
                    assert_same_bits(&got, &per_call(&one), &format!("{what}, row {row}"));
                }
            }
        }
    }
}

/// A layer repacked at load (`Linear::repacked`) gives the bits of its
/// precision's kernel on MLX's layout (fast: `qmm_int8`; exact: `cpu::qmm`,
/// and MLX's op), for one row, a small batch and a prompt, float32 and
/// bfloat16, with a bias and `n` not a multiple of 8, and reports its
/// precision; an `x` of the wrong width or not a float, and a dense weight
/// asked of it, are errors.
#[test]
fn a_repacked_layer_gives_its_precisions_bits() {
    for (i, &(n, k, gs, bits, dtype)) in
        [(44, 256, 64, 4, Dtype::Float32), (17, 128, 32, 8, Dtype::Bfloat16), (24, 256, 128, 2, Dtype::Float32)].iter().enumerate()
    {
        let seed = 700 + 10 * i as u64;
        let (wq, s, b) = affine(&normal(&[n, k], 0.05, seed).astype(dtype).unwrap(), gs, bits).unwrap();
        let bias = normal(&[n], 1.0, seed + 1).astype(dtype).unwrap();
        let layer = |precision| {
            let q = QuantParams { group_size: gs, bits, mode: Mode::Affine, precision };
            Linear::Quantized { weight: wq.clone(), scales: s.clone(), biases: Some(b.clone()), bias: Some(bias.clone()), q }
        };
        let repacked = layer(Precision::Fast).repacked().unwrap();
        assert!(matches!(repacked, Linear::Repacked { .. }), "case {i}: not repacked");
        for rows in [1, 2, 5, 8, 30] {
            let x = normal(&[1, rows, k], 1.0, seed + 2 + rows as u64).astype(dtype).unwrap();
            let (got, want) = (repacked.forward(&x).unwrap(), layer(Precision::Fast).forward(&x).unwrap());
            assert_same_bits(&got.astype(Dtype::Float32).unwrap(), &want.astype(Dtype::Float32).unwrap(), &format!("case {i}, {rows} rows"));
            assert_eq!(got.dtype(), want.dtype(), "case {i}");
        }
        assert_eq!(repacked.precision(), Precision::Fast, "case {i}");
        let exact = layer(Precision::Exact).repacked().unwrap();
        assert!(matches!(exact, Linear::Repacked { .. }), "case {i}: exact precision not repacked");
        assert_eq!(exact.precision(), Precision::Exact, "case {i}");
        for rows in [1, 2, 5, 8, 30] {
            let x = normal(&[1, rows, k], 1.0, seed + 3 + rows as u64).astype(dtype).unwrap();
            let (got, want) = (exact.forward(&x).unwrap(), layer(Precision::Exact).forward(&x).unwrap());
            let mlx = quantized_matmul_mlx(&x, &wq, &s, Some(&b), true, gs, bits, Mode::Affine).unwrap().add(&bias).unwrap();
            assert_eq!((got.dtype(), mlx.dtype()), (want.dtype(), want.dtype()), "case {i}");
            let what = format!("case {i}, exact, {rows} rows");
            assert_same_bits(&got.astype(Dtype::Float32).unwrap(), &want.astype(Dtype::Float32).unwrap(), &what);
            assert_same_bits(&got.astype(Dtype::Float32).unwrap(), &mlx.astype(Dtype::Float32).unwrap(), &what);
        }
    }
    // 4-bit rows not of whole units of 64 (96 wide) stay in MLX's layout in fast precision, as
    // the fast kernel declines them too; the exact kernel takes them.
    let (wq, s, b) = affine(&normal(&[16, 96], 0.05, 789), 32, 4).unwrap();
    let layer = |precision| {
        let q = QuantParams { group_size: 32, bits: 4, mode: Mode::Affine, precision };
        Linear::Quantized { weight: wq.clone(), scales: s.clone(), biases: Some(b.clone()), bias: None, q }
    };
    assert!(matches!(layer(Precision::Fast).repacked().unwrap(), Linear::Quantized { .. }), "a 96-wide 4-bit layer was repacked");
    assert!(matches!(layer(Precision::Exact).repacked().unwrap(), Linear::Repacked { .. }), "exact: a 96-wide 4-bit layer not repacked");
    // Exact precision keeps MLX's layout with float16 scales (x in float16 would compute in
    // float16), or scales and biases of two dtypes.
    let (wq, s, b) = affine(&normal(&[16, 128], 0.05, 792), 64, 4).unwrap();
    let half = |a: &Array| a.astype(Dtype::Float16).unwrap();
    let bf = |a: &Array| a.astype(Dtype::Bfloat16).unwrap();
    for (what, s, b) in [("float16", half(&s), half(&b)), ("mixed", bf(&s), b.clone())] {
        assert!(Repacked::new(&wq, &s, &b, 64, 4, Precision::Exact).unwrap().is_none(), "exact, {what} scales: repacked");
        assert!(Repacked::new(&wq, &s, &b, 64, 4, Precision::Fast).unwrap().is_some(), "fast, {what} scales: not repacked");
    }
    let (wq, s, b) = affine(&normal(&[16, 128], 0.05, 790), 64, 4).unwrap();
    let r = Repacked::new(&wq, &s, &b, 64, 4, Precision::Fast).unwrap().expect("the kernel applies");
    let err = r.matmul(&normal(&[2, 96], 1.0, 791)).expect_err("a 96-wide x against a 128-wide w must fail");
    assert!(err.message.contains("takes 128 inputs"), "{}", err.message);
    let err = r.matmul(&Array::from_slice(&[1i32; 128], &[1, 128]).unwrap()).expect_err("an int32 x must fail");
    assert!(err.message.contains("a float is needed"), "{}", err.message);
    // The layer holds only the kernel's layout: no dense weight to give.
    let layer = Linear::Repacked { weight: Box::new(r), bias: None };
    let err = layer.dense_weight().expect_err("a repacked layer has no dense weight");
    assert!(err.message.contains("repacked kernels' layout"), "{}", err.message);
    let r = Repacked::new(&wq, &s, &b, 64, 4, Precision::Exact).unwrap().expect("the exact kernel applies");
    let err = r.matmul(&normal(&[2, 96], 1.0, 791)).expect_err("exact: a 96-wide x against a 128-wide w must fail");
    assert!(err.message.contains("takes 128 inputs"), "{}", err.message);
    let err = r.matmul(&Array::from_slice(&[1i32; 128], &[1, 128]).unwrap()).expect_err("exact: an int32 x must fail");
    assert!(err.message.contains("a float is needed"), "{}", err.message);
}

/// A tied embedding table repacked (`Embedding::repacked`) gives the bits of
/// the table in MLX's layout both ways: token lookups (MLX's `take` then
/// `dequantize`) and the LM head (its precision's kernel per call), with
/// float32 scales (any, float16 values, and float16 values with biases -8
/// times them, as a GGUF Q4_0 model's), float16 and bfloat16 ones; in exact
/// precision float16 scales stay in MLX's layout; ids that are not integers
/// are an error.
#[test]
fn a_repacked_tied_embedding_gives_the_tables_bits() {
    let (n, k) = (37, 128);
    let ids = Array::from_slice(&[3i32, 0, 36, 3, -2, 17], &[2, 3]).unwrap();
    let cases = [
        (Dtype::Float32, None, 64, 4),
        (Dtype::Float32, Some(Dtype::Float16), 32, 4),
        (Dtype::Float32, Some(Dtype::Float16), 32, 4),
        (Dtype::Float16, None, 32, 8),
        (Dtype::Bfloat16, None, 64, 4),
    ];
    for (i, &(dtype, values_of, gs, bits)) in cases.iter().enumerate() {
        let w = normal(&[n, k], 0.05, 900 + i as u64).astype(values_of.unwrap_or(dtype)).unwrap();
        let (wq, s, b) = affine(&w, gs, bits).unwrap();
        let (s, b) = (s.astype(dtype).unwrap(), b.astype(dtype).unwrap());
        // Case 2: Q4_0's biases, -8 times the scales (held as the scales alone).
        let b = if i == 2 { s.multiply_scalar(-8.0).unwrap() } else { b };
        let table = |precision| {
            let q = QuantParams { group_size: gs, bits, mode: Mode::Affine, precision };
            Embedding::Quantized { weight: wq.clone(), scales: s.clone(), biases: Some(b.clone()), q }
        };
        let exact = table(Precision::Exact).repacked().unwrap();
        assert_eq!(matches!(exact, Embedding::Repacked { .. }), dtype != Dtype::Float16, "case {i}: exact precision repacked");
        let repacked = table(Precision::Fast).repacked().unwrap();
        assert!(matches!(repacked, Embedding::Repacked { .. }), "case {i}: not repacked");
        let what = format!("case {i}, {dtype:?} scales");
        // Scales and biases of 16-bit values are held in 16 bits: per tile of 8 columns and group,
        // 16 values in 8 float32 words (else 16; the scales alone in 4).
        let words = [16, 8, 4, 8, 8][i];
        assert_eq!(repacked.arrays()[1].size(), (n as usize).div_ceil(8) * (k / gs) as usize * words, "{what}: scales' size");
        let (got, want) = (repacked.forward(&ids).unwrap(), table(Precision::Fast).forward(&ids).unwrap());
        assert_eq!((got.dtype(), got.shape()), (want.dtype(), want.shape()), "{what}: lookup");
        assert_same_bits(&got.astype(Dtype::Float32).unwrap(), &want.astype(Dtype::Float32).unwrap(), &format!("{what}: lookup"));
        let got = exact.forward(&ids).unwrap();
        assert_same_bits(&got.astype(Dtype::Float32).unwrap(), &want.astype(Dtype::Float32).unwrap(), &format!("{what}: exact lookup"));
        for rows in [1, 9] {
            let x = normal(&[1, rows, k], 1.0, 950 + i as u64).astype(dtype).unwrap();
            for (p, t) in [(Precision::Fast, &repacked), (Precision::Exact, &exact)] {
                let (got, want) = (t.as_linear(&x).unwrap(), table(p).as_linear(&x).unwrap());
                assert_eq!(got.dtype(), want.dtype(), "{what}: head");
                let what = format!("{what}: {p:?} head, {rows} rows");
                assert_same_bits(&got.astype(Dtype::Float32).unwrap(), &want.astype(Dtype::Float32).unwrap(), &what);
            }
        }
    }
    let (wq, s, b) = affine(&normal(&[n, k], 0.05, 990), 64, 4).unwrap();
    let q = QuantParams { group_size: 64, bits: 4, mode: Mode::Affine, precision: Precision::Fast };
    let repacked = Embedding::Quantized { weight: wq, scales: s, biases: Some(b), q }.repacked().unwrap();
    let err = repacked.forward(&Array::from_slice(&[1.0f32, 2.0], &[2]).unwrap()).expect_err("float ids must fail");
    assert!(err.message.contains("an integer type is needed"), "{}", err.message);
}

/// MLX's floating-point modes (uint8 scales, no biases) never reach our affine
/// kernels: in either precision, float32 and bfloat16, one row and several,
/// `quantized_matmul` is MLX's op bit for bit, and that op is `x @ dequantize(w).T`.
#[test]
fn floating_point_modes_run_as_mlx_op() {
    let (n, k) = (48, 128);
    for (m, mode) in [Mode::Mxfp4, Mode::Nvfp4, Mode::Mxfp8].into_iter().enumerate() {
        let (group_size, bits) = mode.fixed_format().unwrap();
        for (i, (rows, dtype)) in [(1, Dtype::Float32), (7, Dtype::Float32), (1, Dtype::Bfloat16), (5, Dtype::Bfloat16)].into_iter().enumerate() {
            let seed = 40 * m as u64 + i as u64;
            let x = normal(&[rows, k], 1.0, 500 + seed).astype(dtype).unwrap();
            let w = normal(&[n, k], 0.05, 600 + seed).astype(dtype).unwrap();
            let (wq, s, b) = quantize(&w, group_size, bits, mode).unwrap();
            let what = format!("{mode:?}, {rows} rows, {dtype:?}");
            assert!(b.is_none(), "{what}: no biases");
            assert_eq!((wq.shape(), s.shape(), s.dtype()), (vec![n, k * bits / 32], vec![n, k / group_size], Dtype::Uint8), "{what}");
            let mlx = quantized_matmul_mlx(&x, &wq, &s, None, true, group_size, bits, mode).unwrap();
            for p in [Precision::Exact, Precision::Fast] {
                let ours = quantized_matmul(&x, &wq, &s, None, true, group_size, bits, mode, p).unwrap();
                assert_eq!(ours.dtype(), dtype, "{what}");
                assert_same_bits(&ours.astype(Dtype::Float32).unwrap(), &mlx.astype(Dtype::Float32).unwrap(), &format!("{what}, {p:?}"));
            }
            if dtype == Dtype::Float32 {
                let dense = dequantize(&wq, &s, None, group_size, bits, mode).unwrap();
                let want = x.matmul(&dense.t().unwrap()).unwrap().to_vec::<f32>().unwrap();
                let got = mlx.to_vec::<f32>().unwrap();
                let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                assert!(worst < 1e-4, "{what}: differs from x @ dequantize(w).T by {worst}");
            }
        }
    }
}

/// `gather_qmm` in mxfp4 mode: each row against the expert its index names,
/// as `quantized_matmul` with that expert's weights.
#[test]
fn gather_qmm_in_mxfp4_mode_picks_each_rows_expert() {
    let (experts, n, k, mode) = (3, 40, 64, Mode::Mxfp4);
    let packed: Vec<(Array, Array)> = (0..experts)
        .map(|e| {
            let (wq, s, _) = quantize(&normal(&[n, k], 0.05, 700 + e as u64), 32, 4, mode).unwrap();
            (wq, s)
        })
        .collect();
    let w = Array::stack(&packed.iter().map(|p| &p.0).collect::<Vec<_>>(), 0).unwrap();
    let s = Array::stack(&packed.iter().map(|p| &p.1).collect::<Vec<_>>(), 0).unwrap();
    let experts_of_rows = [2u32, 0, 2, 1];
    let x = normal(&[4, 1, 1, k], 1.0, 710);
    let idx = Array::from_slice(&experts_of_rows, &[4, 1]).unwrap();
    let y = gather_qmm(&x, &w, &s, None, &idx, true, 32, 4, mode, false).unwrap();
    assert_eq!(y.shape(), [4, 1, 1, n]);
    for (row, &e) in experts_of_rows.iter().enumerate() {
        let xr = x.slice_axis(0, row as i32, row as i32 + 1).unwrap().reshape(&[1, k]).unwrap();
        let want = quantized_matmul_mlx(&xr, &packed[e as usize].0, &packed[e as usize].1, None, true, 32, 4, mode).unwrap();
        let got = y.slice_axis(0, row as i32, row as i32 + 1).unwrap().reshape(&[1, n]).unwrap();
        assert_same_bits(&got, &want, &format!("row {row}, expert {e}"));
    }
    // Affine mode on mxfp4-packed experts (no biases) is MLX's error, not garbage.
    assert!(gather_qmm(&x, &w, &s, None, &idx, true, 32, 4, Mode::Affine, false).and_then(|y| y.eval()).is_err());
}
