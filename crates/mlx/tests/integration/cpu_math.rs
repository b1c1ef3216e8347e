//! `mlx::cpu::math` must equal MLX's own CPU `exp` bit for bit: the top-p
//! kernel's probabilities (and so MLX-LM parity) rest on it.
use mlx::cpu::math::{cpu_cos, cpu_exp, cpu_sin, gelu, logsumexp_last, sin, softmax_last_kernel, swiglu, swiglu_halves};
use mlx::{Array, Dtype};

fn check(xs: &[f32]) {
    let dev: Vec<f32> = Array::from_slice(xs, &[xs.len() as i32]).unwrap().exp().unwrap().to_vec().unwrap();
    for (x, d) in xs.iter().zip(&dev) {
        let c = cpu_exp(*x);
        assert!(c.to_bits() == d.to_bits() || (c.is_nan() && d.is_nan()), "exp({x:e}) = {d:e} on MLX, {c:e} here");
    }
}

/// Every float32 with one of 2^13 mantissa patterns, over the whole exponent
/// range, both signs.
fn float_sweep() -> Vec<f32> {
    let mut xs = Vec::new();
    for exp_bits in 0u32..256 {
        for m in (0u32..(1 << 23)).step_by(1 << 10) {
            for sign in [0u32, 1] {
                xs.push(f32::from_bits(sign << 31 | exp_bits << 23 | m | (m >> 13)));
            }
        }
    }
    xs
}

#[test]
fn equals_mlx_exp_bit_for_bit() {
    assert_eq!(Dtype::Float32, Array::scalar(1.0, Dtype::Float32).unwrap().dtype());
    // The sweep, plus the edges of the clamps.
    let mut xs = float_sweep();
    // Dense in the range log-probabilities live in.
    let mut v = -104.0f32;
    while v < 1.0 {
        xs.push(v);
        v += 1.0 / 4096.0;
    }
    // Around every x where x * log2(e) lies just below n + 0.5: MLX rounds
    // there with a double sum, which a float sum would round up.
    for n in -128i32..128 {
        let c = (n as f32 + 0.5) / 1.442695;
        let mut b = c.to_bits().wrapping_sub(64);
        for _ in 0..128 {
            xs.push(f32::from_bits(b));
            b = b.wrapping_add(1);
        }
    }
    xs.extend([88.0, 88.000_01, -88.0, -88.000_01, 0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN, f32::MAX]);
    check(&xs);
}

#[test]
fn logsumexp_equals_mlx_bit_for_bit() {
    use mlx::random;
    let cases: Vec<Array> = vec![
        random::normal(&[1, 151_936], Dtype::Float32, 0.0, 3.0, Some(&random::key(1).unwrap())).unwrap(),
        random::normal(&[1, 151_936], Dtype::Float32, -40.0, 30.0, Some(&random::key(2).unwrap())).unwrap(),
        random::normal(&[3, 1000], Dtype::Float32, 5.0, 100.0, Some(&random::key(3).unwrap())).unwrap(),
        random::normal(&[2, 4096], Dtype::Bfloat16, 0.0, 4.0, Some(&random::key(4).unwrap())).unwrap(),
        Array::from_slice(&[f32::NEG_INFINITY, 0.0, -88.0, -88.000_01, 1e-30], &[1, 5]).unwrap(),
        Array::from_slice(&[f32::NEG_INFINITY; 4], &[1, 4]).unwrap(),
        Array::from_slice(&[1.0, f32::INFINITY, 2.0], &[1, 3]).unwrap(),
    ];
    for (i, x) in cases.iter().enumerate() {
        let ours = logsumexp_last(x).unwrap();
        let theirs = x.logsumexp(&[-1], true).unwrap();
        assert_eq!(ours.dtype(), theirs.dtype(), "case {i}");
        assert_eq!(ours.shape(), theirs.shape(), "case {i}");
        let a: Vec<u32> = ours.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect();
        let b: Vec<u32> = theirs.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect();
        assert_eq!(a, b, "case {i}");
    }
}

#[test]
fn softmax_equals_mlx_bit_for_bit() {
    use mlx::random;
    let normal =
        |shape: &[i32], mean: f32, std: f32, seed: u64| random::normal(shape, Dtype::Float32, mean, std, Some(&random::key(seed).unwrap())).unwrap();
    // Attention scores with a causal mask: -inf above the diagonal.
    let scores = normal(&[2, 3, 37, 37], 0.0, 4.0, 7);
    let idx: Vec<i32> = (0..37).collect();
    let i = Array::from_slice(&idx, &[37, 1]).unwrap();
    let j = Array::from_slice(&idx, &[1, 37]).unwrap();
    let masked = Array::where_(&j.greater(&i).unwrap(), &scores.scalar_like(f64::NEG_INFINITY).unwrap(), &scores).unwrap();
    let cases: Vec<Array> = vec![
        // S3Gen's flow decoder at a 10 s prompt: 8 heads, 566 frames, two threads.
        normal(&[2, 8, 566, 566], 0.0, 3.0, 1),
        normal(&[13, 5], -3.0, 50.0, 2),
        normal(&[1, 151_936], 0.0, 3.0, 3),
        normal(&[7, 1], 0.0, 1.0, 4),
        masked,
        Array::from_slice(&[f32::NEG_INFINITY, 0.0, -88.0, -88.000_01, 1e-30, 3.0], &[2, 3]).unwrap(),
        Array::from_slice(&[f32::NEG_INFINITY; 4], &[2, 2]).unwrap(),
        Array::from_slice(&[1.0, f32::INFINITY, 2.0, 1.0, f32::NAN, -1.0, 0.0, -0.0, 0.0], &[3, 3]).unwrap(),
    ];
    for (n, x) in cases.iter().enumerate() {
        let ours = softmax_last_kernel(x).unwrap();
        let theirs = x.softmax(&[-1], false).unwrap();
        assert_eq!(ours.shape(), theirs.shape(), "case {n}");
        let a: Vec<u32> = ours.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect();
        let b: Vec<u32> = theirs.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect();
        let same = a.iter().zip(&b).all(|(p, q)| p == q || (f32::from_bits(*p).is_nan() && f32::from_bits(*q).is_nan()));
        assert!(same, "case {n}: first difference at {:?}", a.iter().zip(&b).position(|(p, q)| p != q));
    }
}

/// `-limit..limit` in steps of `step` (where an activation bends), then one of
/// 2^10 mantissa patterns over every exponent, both signs.
fn bend_and_exponents(limit: f32, step: f32) -> Vec<f32> {
    let mut xs: Vec<f32> = Vec::new();
    let mut v = -limit;
    while v < limit {
        xs.push(v);
        v += step;
    }
    for exp_bits in 0u32..256 {
        for m in (0u32..(1 << 23)).step_by(1 << 13) {
            for sign in [0u32, 1] {
                xs.push(f32::from_bits(sign << 31 | exp_bits << 23 | m | (m >> 11)));
            }
        }
    }
    xs
}

#[test]
fn gelu_equals_mlx_ops_bit_for_bit() {
    // Dense over where GELU bends, then one of 2^10 mantissa patterns over every exponent.
    let mut xs = bend_and_exponents(12.0, 1.0 / 2048.0);
    xs.extend([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN, f32::MAX]);
    // Past the threshold where the kernel runs on several threads.
    while xs.len() < 1 << 17 || xs.len() % 2 == 1 {
        xs.push(xs.len() as f32 * 1e-4 - 3.0);
    }
    let x = Array::from_slice(&xs, &[2, xs.len() as i32 / 2]).unwrap();
    let cdf = x.divide_scalar(std::f64::consts::SQRT_2).unwrap().erf().unwrap().add_scalar(1.0).unwrap();
    let theirs: Vec<f32> = x.multiply(&cdf).unwrap().divide_scalar(2.0).unwrap().to_vec().unwrap();
    let ours: Vec<f32> = gelu(&x).unwrap().to_vec().unwrap();
    for ((x, a), b) in xs.iter().zip(&ours).zip(&theirs) {
        assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "gelu({x:e}) = {b:e} by MLX's ops, {a:e} here");
    }
}

/// The SwiGLU kernel against MLX's compiled `silu(gate) * up` (what MLX-LM
/// runs), bit for bit: a dense sweep where the sigmoid bends, every exponent,
/// the special values, on one thread and past the split over the cores.
#[test]
fn swiglu_equals_mlx_compiled_bit_for_bit() {
    let mut gate = bend_and_exponents(20.0, 1.0 / 1024.0);
    gate.extend([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN, f32::MAX, 88.5, -88.5, 87.9, -87.9]);
    let up: Vec<f32> = (0..gate.len()).map(|i| ((i * 7919) % 2001) as f32 / 250.0 - 4.0).collect();
    for n in [1536, gate.len()] {
        let g = Array::from_slice(&gate[..n], &[1, n as i32]).unwrap();
        let u = Array::from_slice(&up[..n], &[1, n as i32]).unwrap();
        let theirs: Vec<f32> = mlx::nn::swiglu_mlx(&g, &u).unwrap().to_vec().unwrap();
        let ours: Vec<f32> = swiglu(&g, &u).unwrap().expect("the kernel takes float32 inputs of one shape").to_vec().unwrap();
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "swiglu({:e}, {:e}) = {b:e} compiled by MLX, {a:e} here",
                gate[i],
                up[i]
            );
        }
    }
    // Gate and up as the halves of one array (a fused gate/up layer's output), a few rows, on
    // one thread and split over the cores.
    for (rows, h) in [(1usize, 1536usize), (7, 4096)] {
        let n = rows * 2 * h;
        let y = Array::from_slice(&gate[..n], &[rows as i32, 2 * h as i32]).unwrap();
        let halves = y.split_equal(2, -1).unwrap();
        let theirs: Vec<f32> = mlx::nn::swiglu_mlx(&halves[0], &halves[1]).unwrap().to_vec().unwrap();
        let ours: Vec<f32> = swiglu_halves(&y).unwrap().expect("float32 with an even last axis").to_vec().unwrap();
        assert_eq!(ours.len(), rows * h);
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "halves, row {} column {}: {b:e} compiled by MLX, {a:e} here",
                i / h,
                i % h
            );
        }
    }
    assert!(swiglu_halves(&Array::from_slice(&gate[..9], &[1, 9]).unwrap()).unwrap().is_none(), "an odd last axis");
    // Other dtypes (float16, or two dtypes) and mismatched shapes are left to MLX.
    let h = Array::from_slice(&gate[..8], &[8]).unwrap().astype(Dtype::Float16).unwrap();
    assert!(swiglu(&h, &h).unwrap().is_none());
    let b = Array::from_slice(&gate[..8], &[8]).unwrap().astype(Dtype::Bfloat16).unwrap();
    assert!(swiglu(&b, &Array::from_slice(&gate[..8], &[8]).unwrap()).unwrap().is_none());
    let a = Array::from_slice(&gate[..8], &[8]).unwrap();
    assert!(swiglu(&a, &Array::from_slice(&up[..4], &[4]).unwrap()).unwrap().is_none());
}

/// The SwiGLU kernels on bfloat16 inputs (MLX-community's models) against
/// MLX's compiled function in bfloat16, bit for bit: every bfloat16 gate
/// value (NaN and infinities included) against a spread of `up` values, on one
/// thread and past the split, and as the halves of one array.
#[test]
fn swiglu_bfloat16_equals_mlx_compiled_bit_for_bit() {
    let gate: Vec<f32> = (0..=u16::MAX).map(|b| f32::from_bits((b as u32) << 16)).collect();
    let up: Vec<f32> = (0..gate.len()).map(|i| ((i * 7919) % 2001) as f32 / 250.0 - 4.0).collect();
    let bf16 = |v: &[f32], shape: &[i32]| Array::from_slice(v, shape).unwrap().astype(Dtype::Bfloat16).unwrap();
    let bits = |a: &Array| -> Vec<u32> { a.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect() };
    let same = |ours: &Array, theirs: &Array, what: &str| {
        assert_eq!(ours.dtype(), Dtype::Bfloat16, "{what}");
        for (i, (a, b)) in bits(ours).iter().zip(bits(theirs)).enumerate() {
            let (fa, fb) = (f32::from_bits(*a), f32::from_bits(b));
            assert!(*a == b || (fa.is_nan() && fb.is_nan()), "{what}, element {i}: {fb:e} compiled by MLX, {fa:e} here");
        }
    };
    for n in [1536, gate.len()] {
        let (g, u) = (bf16(&gate[..n], &[1, n as i32]), bf16(&up[..n], &[1, n as i32]));
        let ours = swiglu(&g, &u).unwrap().expect("the kernel takes bfloat16 inputs of one shape");
        same(&ours, &mlx::nn::swiglu_mlx(&g, &u).unwrap(), &format!("{n} values"));
    }
    for (rows, h) in [(1usize, 1536usize), (8, 4096)] {
        let y = bf16(&gate[..rows * 2 * h], &[rows as i32, 2 * h as i32]);
        let halves = y.split_equal(2, -1).unwrap();
        let ours = swiglu_halves(&y).unwrap().expect("bfloat16 with an even last axis");
        same(&ours, &mlx::nn::swiglu_mlx(&halves[0], &halves[1]).unwrap(), &format!("halves, {rows} rows"));
    }
}

#[test]
fn attention_equals_mlx_bit_for_bit() {
    use mlx::fast::{scaled_dot_product_attention as ours, scaled_dot_product_attention_mlx as theirs, AttentionMask};
    use mlx::random;
    let normal = |shape: &[i32], seed: u64| random::normal(shape, Dtype::Float32, 0.0, 1.0, Some(&random::key(seed).unwrap())).unwrap();
    // (batch, query heads, kv heads, queries, keys, head dim): prefill (queries =
    // keys), a decode step, a chunk after cached keys, grouped and not; the
    // causal softmax's kernel from 65536 scores up (a chunk after cached keys,
    // rows not a multiple of its groups of eight, two batch rows).
    let cases = [
        (1, 8, 4, 91, 91, 64),
        (1, 8, 4, 200, 200, 64),
        (2, 16, 16, 1, 300, 64),
        (1, 8, 2, 5, 40, 32),
        (2, 4, 4, 33, 33, 16),
        (1, 8, 2, 101, 357, 64),
        (2, 6, 3, 67, 67, 32),
    ];
    for (n, &(b, hq, hkv, l, s, d)) in cases.iter().enumerate() {
        let q = normal(&[b, hq, l, d], 10 + n as u64);
        let k = normal(&[b, hkv, s, d], 20 + n as u64);
        let v = normal(&[b, hkv, s, d], 30 + n as u64);
        let scale = (d as f32).powf(-0.5);
        for causal in [false, true] {
            let mask = || if causal { AttentionMask::Causal } else { AttentionMask::None };
            let a: Vec<u32> = ours(&q, &k, &v, scale, mask()).unwrap().to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()).collect();
            let t = theirs(&q, &k, &v, scale, mask()).unwrap();
            assert_eq!(t.shape(), vec![b, hq, l, d], "case {n}");
            let b: Vec<u32> = t.to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()).collect();
            assert!(a == b, "case {n} causal {causal}: first difference at {:?}", a.iter().zip(&b).position(|(p, q)| p != q));
        }
    }
}

/// A batch decode step's attention (`attention_rows`: one query per sequence,
/// each against its own keys) gives every row the bits it gets alone.
#[test]
fn attention_rows_equal_each_row_alone() {
    use mlx::fast::{attention_rows, scaled_dot_product_attention, AttentionMask};
    use mlx::random;
    let normal = |shape: &[i32], seed: u64| random::normal(shape, Dtype::Float32, 0.0, 1.0, Some(&random::key(seed).unwrap())).unwrap();
    let bits = |a: &Array| a.to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    // (query heads, kv heads, head dim, keys per sequence): grouped and not.
    for (n, (hq, hkv, d, lens)) in
        [(8, 4, 64, vec![5, 300, 77]), (4, 4, 32, vec![1, 12]), (16, 2, 64, vec![40, 41, 42, 500, 3, 9, 128, 64])].into_iter().enumerate()
    {
        let b = lens.len() as i32;
        let q = normal(&[b, hq, 1, d], 100 + n as u64);
        let kv: Vec<(Array, Array)> =
            lens.iter().enumerate().map(|(r, &s)| (normal(&[1, hkv, s, d], 200 + r as u64), normal(&[1, hkv, s, d], 300 + r as u64))).collect();
        let scale = (d as f32).powf(-0.5);
        let got = attention_rows(&q, &kv, scale).unwrap();
        assert_eq!(got.shape(), vec![b, hq, 1, d], "case {n}");
        for (r, (k, v)) in kv.iter().enumerate() {
            let alone = scaled_dot_product_attention(&q.slice_axis(0, r as i32, r as i32 + 1).unwrap(), k, v, scale, AttentionMask::None).unwrap();
            assert_eq!(bits(&got.slice_axis(0, r as i32, r as i32 + 1).unwrap()), bits(&alone), "case {n}, row {r}");
        }
    }
}

/// RoPE for a batch at one position per row gives each row the bits it gets
/// alone, in every variant (dynamic NTK goes row by row).
#[test]
fn rope_per_row_equals_each_row_alone() {
    use mlx::nn::Rope;
    use mlx::random;
    let x = random::normal(&[5, 4, 1, 64], Dtype::Float32, 0.0, 1.0, Some(&random::key(9).unwrap())).unwrap();
    let offsets = [0, 17, 4095, 3, 260];
    let bits = |a: &Array| a.to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let freqs = Array::arange(1.0, 33.0, 1.0, Dtype::Float32).unwrap().multiply_scalar(3.5).unwrap();
    let ropes = [
        Rope::Standard { dims: 64, traditional: false, base: 10000.0, scale: 1.0 },
        Rope::Standard { dims: 32, traditional: true, base: 500000.0, scale: 0.25 },
        Rope::Freqs { dims: 64, traditional: false, freqs: freqs.clone() },
        Rope::Scaled { dims: 48, traditional: false, freqs: freqs.slice_axis(0, 0, 24).unwrap(), scale: 1.19 },
        Rope::DynamicNtk { dims: 64, traditional: false, base: 10000.0, factor: 2.0, max_positions: 256 },
        Rope::Identity,
    ];
    for (i, rope) in ropes.iter().enumerate() {
        let got = rope.forward_rows(&x, &offsets).unwrap();
        for (r, &o) in offsets.iter().enumerate() {
            let alone = rope.forward(&x.slice_axis(0, r as i32, r as i32 + 1).unwrap(), o).unwrap();
            assert_eq!(bits(&got.slice_axis(0, r as i32, r as i32 + 1).unwrap()), bits(&alone), "rope {i}, row {r}");
        }
    }
}

/// Inputs that are views (a transpose, a broadcast, a slice across rows) reach
/// the kernels as row-major copies (made by the kernel's node), and a slice of
/// whole rows in place: the same values as MLX's ops.
#[test]
fn strided_inputs_give_mlx_values() {
    use mlx::random;
    let key = random::key(5).unwrap();
    let base = random::normal(&[48, 64], Dtype::Float32, 0.0, 3.0, Some(&key)).unwrap();
    let row = random::normal(&[1, 64], Dtype::Float32, 0.0, 3.0, Some(&random::key(6).unwrap())).unwrap();
    let views = [
        base.transpose(&[1, 0]).unwrap(),
        row.broadcast_to(&[48, 64]).unwrap(),
        base.slice_axis(1, 5, 37).unwrap(),
        base.slice_axis(0, 5, 37).unwrap(),
    ];
    let bits = |a: Array| a.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for (i, v) in views.iter().enumerate() {
        assert_eq!(bits(softmax_last_kernel(v).unwrap()), bits(v.softmax(&[-1], false).unwrap()), "softmax, view {i}");
        let cdf = v.divide_scalar(std::f64::consts::SQRT_2).unwrap().erf().unwrap().add_scalar(1.0).unwrap();
        assert_eq!(bits(gelu(v).unwrap()), bits(v.multiply(&cdf).unwrap().divide_scalar(2.0).unwrap()), "gelu, view {i}");
        assert_eq!(bits(logsumexp_last(v).unwrap()), bits(v.logsumexp(&[-1], true).unwrap()), "logsumexp, view {i}");
    }
}

#[test]
fn sin_equals_mlx_bit_for_bit() {
    // The sweep (libm's `sinf` past 2^23, as MLX), dense over a few periods, and
    // around every multiple of pi/4 up to 2^12 (where the reduction switches).
    let mut xs = float_sweep();
    let mut v = -40.0f32;
    while v < 40.0 {
        xs.push(v);
        v += 1.0 / 1024.0;
    }
    for n in 0..5215 {
        let c = (n as f64 * std::f64::consts::FRAC_PI_4) as f32;
        let b = c.to_bits();
        for d in 0..16u32 {
            xs.push(f32::from_bits(b.wrapping_sub(8).wrapping_add(d)));
            xs.push(-f32::from_bits(b.wrapping_sub(8).wrapping_add(d)));
        }
    }
    xs.extend([8388608.0, 8388609.0, -8388608.0, -8388609.0, 0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
    let x = Array::from_slice(&xs, &[xs.len() as i32]).unwrap();
    // `cos` (RoPE's kernel): the same reduction, the other polynomial.
    let cos: Vec<f32> = x.cos().unwrap().to_vec().unwrap();
    for (v, w) in xs.iter().zip(&cos) {
        let c = cpu_cos(*v);
        assert!(w.to_bits() == c.to_bits() || (w.is_nan() && c.is_nan()), "cos({v:e}) = {w:e} on MLX, {c:e} here");
    }
    let want: Vec<f32> = x.sin().unwrap().to_vec().unwrap();
    let ours: Vec<f32> = sin(&x).unwrap().to_vec().unwrap();
    for ((v, w), o) in xs.iter().zip(&want).zip(&ours) {
        assert!(w.to_bits() == o.to_bits() || (w.is_nan() && o.is_nan()), "sin({v:e}) = {w:e} on MLX, {o:e} here");
        let c = cpu_sin(*v);
        assert!(c.to_bits() == o.to_bits() || (c.is_nan() && o.is_nan()), "cpu_sin({v:e}) = {c:e}, the kernel {o:e}");
    }
    // A shape the kernel splits over the cores, and a strided view.
    let big = mlx::random::normal(&[3, 70000], Dtype::Float32, 0.0, 30.0, None).unwrap();
    let view = big.transpose(&[1, 0]).unwrap();
    for a in [&big, &view] {
        let (w, o): (Vec<f32>, Vec<f32>) = (a.sin().unwrap().to_vec().unwrap(), sin(a).unwrap().to_vec().unwrap());
        assert!(w.iter().zip(&o).all(|(p, q)| p.to_bits() == q.to_bits()));
    }
}

fn f32_bits(a: &Array) -> Vec<u32> {
    a.to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()).collect()
}

/// The RMSNorm kernel (one node) gives the bits of MLX's CPU fallback (seven
/// ops): rows of several widths, with and without a weight, a transposed
/// view, a prompt's rows split over the cores, and zero and infinite rows.
#[test]
fn rms_norm_equals_mlx_bit_for_bit() {
    use mlx::fast::{rms_norm, rms_norm_mlx};
    use mlx::random;
    let normal = |shape: &[i32], seed: u64, sd: f32| random::normal(shape, Dtype::Float32, 0.0, sd, Some(&random::key(seed).unwrap())).unwrap();
    let mut cases = vec![
        (normal(&[1, 1, 576], 1, 1.0), 1e-5),
        (normal(&[1, 1, 16, 128], 2, 30.0), 1e-6),
        (normal(&[2, 400, 1024], 3, 0.01), 1e-6),
        (normal(&[64, 40], 4, 1.0).transpose(&[1, 0]).unwrap(), 1e-5),
        (normal(&[3, 7], 5, 1e-3), 0.5),
    ];
    let mut edge = vec![0f32; 64];
    edge.extend(std::iter::repeat_n(1e30, 64));
    edge.extend((0..64).map(|i| if i == 7 { f32::INFINITY } else { 1.0 }));
    edge.extend((0..64).map(|i| if i == 3 { f32::NAN } else { -2.0 }));
    cases.push((Array::from_slice(&edge, &[4, 64]).unwrap(), 1e-5));
    for (n, (x, eps)) in cases.iter().enumerate() {
        let d = x.dim(-1);
        let w = normal(&[d], 100 + n as u64, 1.0);
        for weight in [Some(&w), None] {
            let ours = mlx::cpu::rms_norm::rms_norm(x, weight, *eps).unwrap().expect("the kernel applies");
            let theirs = rms_norm_mlx(x, weight, *eps).unwrap();
            assert_eq!(ours.shape(), theirs.shape(), "case {n}");
            let (a, b) = (f32_bits(&ours), f32_bits(&theirs));
            let same = a.iter().zip(&b).all(|(p, q)| p == q || (f32::from_bits(*p).is_nan() && f32::from_bits(*q).is_nan()));
            assert!(same, "case {n}, weight {}: first difference at {:?}", weight.is_some(), a.iter().zip(&b).position(|(p, q)| p != q));
        }
    }
    // 16-bit rows (a bfloat16 model's), alone and with weights of each float dtype: MLX's
    // output dtype and its roundings.
    let x16 = normal(&[3, 2, 256], 9, 4.0);
    for (xd, wd) in [
        (Dtype::Bfloat16, Some(Dtype::Bfloat16)),
        (Dtype::Bfloat16, None),
        (Dtype::Float16, Some(Dtype::Float16)),
        (Dtype::Bfloat16, Some(Dtype::Float32)),
        (Dtype::Float16, Some(Dtype::Bfloat16)),
    ] {
        let x = x16.astype(xd).unwrap();
        let w = wd.map(|d| normal(&[256], 10, 1.0).astype(d).unwrap());
        let ours = mlx::cpu::rms_norm::rms_norm(&x, w.as_ref(), 1e-6).unwrap().expect("the kernel applies");
        let theirs = rms_norm_mlx(&x, w.as_ref(), 1e-6).unwrap();
        assert_eq!(ours.dtype(), theirs.dtype(), "{xd:?} with {wd:?}");
        let wide = |a: &Array| f32_bits(&a.astype(Dtype::Float32).unwrap());
        assert!(wide(&ours) == wide(&theirs), "{xd:?} with {wd:?}: values differ");
    }
    // A weight of the wrong length is MLX's error, not the kernel's NaNs.
    assert!(rms_norm(&normal(&[2, 8], 7, 1.0), Some(&normal(&[7], 8, 1.0)), 1e-5).is_err());
}

/// The RoPE kernel (one node) gives the bits of MLX's CPU fallback: halves and
/// neighbours, part of the head rotated, a base or frequencies, a scale, one
/// offset or one per row, a prompt's positions, a decode step far into the
/// context, and a transposed view as the models pass it.
#[test]
fn rope_equals_mlx_bit_for_bit() {
    use mlx::fast::{rope, rope_mlx, RopeOffset};
    use mlx::random;
    let normal = |shape: &[i32], seed: u64| random::normal(shape, Dtype::Float32, 0.0, 2.0, Some(&random::key(seed).unwrap())).unwrap();
    let freqs = Array::arange(1.0, 33.0, 1.0, Dtype::Float32).unwrap().multiply_scalar(3.5).unwrap();
    let prompt = normal(&[1, 300, 8, 64], 1).transpose(&[0, 2, 1, 3]).unwrap();
    let step = normal(&[1, 16, 1, 128], 2);
    let batch = normal(&[4, 2, 1, 64], 3);
    let offsets = Array::from_slice(&[0i32, 9, 40000, 3_000_000], &[4]).unwrap();
    type Case<'a> = (&'a Array, i32, bool, Option<f32>, f32, RopeOffset<'a>, Option<&'a Array>);
    let cases: Vec<Case> = vec![
        (&prompt, 64, false, Some(10000.0), 1.0, RopeOffset::At(0), None),
        (&prompt, 64, true, Some(500000.0), 1.0, RopeOffset::At(17), None),
        (&prompt, 32, false, Some(10000.0), 0.25, RopeOffset::At(5), None),
        (&prompt, 64, false, None, 1.0, RopeOffset::At(100), Some(&freqs)),
        (&step, 128, false, Some(1_000_000.0), 1.0, RopeOffset::At(4095), None),
        (&step, 128, false, Some(10000.0), 1.0, RopeOffset::At(9_000_000), None),
        (&step, 96, true, Some(10000.0), 1.0, RopeOffset::At(77), None),
        (&batch, 64, false, Some(10000.0), 1.0, RopeOffset::PerRow(&offsets), None),
        (&batch, 64, true, None, 1.0, RopeOffset::PerRow(&offsets), Some(&freqs)),
    ];
    for (n, &(x, dims, traditional, base, scale, offset, f)) in cases.iter().enumerate() {
        let ours = mlx::cpu::rope::rope(x, dims, traditional, base, scale, offset, f).unwrap().expect("the kernel applies");
        let theirs = rope_mlx(x, dims, traditional, base, scale, offset, f).unwrap();
        assert_eq!(ours.shape(), theirs.shape(), "case {n}");
        let (a, b) = (f32_bits(&ours), f32_bits(&theirs));
        assert!(a == b, "case {n}: first difference at {:?}", a.iter().zip(&b).position(|(p, q)| p != q));
    }
    // 16-bit heads (a bfloat16 model's): `cos`, `sin`, the products and sums rounded as MLX's.
    for dtype in [Dtype::Bfloat16, Dtype::Float16] {
        for (n, &(x, dims, traditional, base, scale, offset, f)) in cases.iter().enumerate() {
            let x = x.astype(dtype).unwrap();
            let ours = mlx::cpu::rope::rope(&x, dims, traditional, base, scale, offset, f).unwrap().expect("the kernel applies");
            let theirs = rope_mlx(&x, dims, traditional, base, scale, offset, f).unwrap();
            assert_eq!(ours.dtype(), dtype);
            let wide = |a: &Array| f32_bits(&a.astype(Dtype::Float32).unwrap());
            assert!(wide(&ours) == wide(&theirs), "{dtype:?} case {n}: values differ");
        }
    }
    // Arguments MLX refuses stay its errors: odd dims, dims past the head, base and freqs both.
    assert!(rope(&step, 7, false, Some(10000.0), 1.0, RopeOffset::At(0), None).is_err());
    assert!(rope(&step, 256, false, Some(10000.0), 1.0, RopeOffset::At(0), None).is_err());
    assert!(rope(&batch, 64, false, Some(10000.0), 1.0, RopeOffset::At(0), Some(&freqs)).is_err());
}
