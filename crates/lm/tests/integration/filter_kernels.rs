//! The top-k and min-p kernels must give MLX-LM's masks bit for bit (top-k:
//! MLX's argpartition, value then index order; min-p: MLX's max, add and
//! compare): over real-like, tied, signed-zero, masked, bf16, batched and NaN
//! rows, for k from 1 to the whole vocabulary.
use lm::min_p::min_p;
use lm::top_k::{top_k, top_k_partitioned};
use mlx::{random, Array, Dtype};

const VOCAB: i32 = 151_936;

fn normal_row(seed: u64, n: i32, scale: f32) -> Array {
    let key = random::key(seed).unwrap();
    random::normal(&[1, n], Dtype::Float32, 0.0, scale, Some(&key)).unwrap()
}

fn bits(a: &Array) -> Vec<u32> {
    a.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
}

/// Kept entries of the kernel's result, after checking it against MLX's.
fn assert_same(name: &str, x: &Array, k: i32) -> usize {
    let fast = top_k(x, k, true).unwrap();
    let slow = top_k_partitioned(x, k).unwrap();
    assert_eq!(fast.shape(), slow.shape(), "{name}, k {k}");
    assert_eq!(fast.dtype(), slow.dtype(), "{name}, k {k}");
    let (a, b) = (bits(&fast), bits(&slow));
    let diff = a.iter().zip(&b).filter(|(p, q)| p != q).count();
    assert_eq!(diff, 0, "{name}, k {k}: {diff} entries differ");
    b.iter().filter(|v| f32::from_bits(**v).is_finite()).count()
}

const KS: [i32; 7] = [1, 2, 5, 40, 100, 1000, VOCAB];

#[test]
fn same_mask_as_argpartition() {
    assert!(mlx::cpu::kernel::cpu_default(), "these tests run on the CPU backend");
    for (i, scale) in [0.5f32, 2.0, 20.0].iter().enumerate() {
        let x = normal_row(200 + i as u64, VOCAB, *scale);
        for k in KS {
            assert_eq!(assert_same("normal", &x, k), k as usize);
        }
    }
}

#[test]
fn ties_go_to_the_lowest_indices() {
    // Coarse values: hundreds of exact ties at every k-th value.
    let coarse = normal_row(210, VOCAB, 3.0).round().unwrap();
    for k in KS {
        assert_same("coarse", &coarse, k);
    }
    // -0 and +0 are equal in MLX's comparison: their ties also go by index.
    let mut zeros: Vec<f32> = (0..4096).map(|i| if i % 3 == 0 { -0.0 } else { 0.0 }).collect();
    zeros[100] = 1.0;
    zeros[4000] = -1.0;
    let z = Array::from_slice(&zeros, &[1, 4096]).unwrap();
    for k in [1, 2, 3, 50, 4095, 4096] {
        assert_same("signed zeros", &z, k);
    }
}

#[test]
fn masked_rows_bf16_batches_and_one_d() {
    // After min-p or top-p: few finite entries, fewer than k or exactly k.
    let row = normal_row(220, VOCAB, 2.0);
    let keep = normal_row(221, VOCAB, 1.0).greater_scalar(3.0).unwrap();
    let masked = Array::where_(&keep, &row, &row.scalar_like(f64::NEG_INFINITY).unwrap()).unwrap();
    let finite = bits(&masked).iter().filter(|v| f32::from_bits(**v).is_finite()).count() as i32;
    assert!(finite > 40 && finite < 1000, "{finite} finite entries");
    for k in [1, 40, finite - 1, finite, finite + 1, 1000, VOCAB] {
        assert_same("masked", &masked, k);
    }
    let none = Array::full(&[1, 1000], f64::NEG_INFINITY, Dtype::Float32).unwrap();
    assert_eq!(assert_same("all -inf", &none, 40), 0);
    let bf = normal_row(222, VOCAB, 3.0).astype(Dtype::Bfloat16).unwrap();
    for k in [1, 40, 1000] {
        assert_same("bf16", &bf, k);
    }
    let two = Array::concatenate(&[&normal_row(223, 4096, 1.0), &normal_row(224, 4096, 6.0).round().unwrap()], 0).unwrap();
    for k in [1, 40, 4096] {
        assert_same("two rows", &two, k);
    }
    assert_same("1-d", &normal_row(225, 5000, 1.0).reshape(&[5000]).unwrap(), 40);
}

#[test]
fn nan_entries_are_never_kept_while_other_values_remain() {
    let mut v: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).collect();
    for i in [3, 500, 999] {
        v[i] = f32::NAN;
    }
    let x = Array::from_slice(&v, &[1, 1000]).unwrap();
    for k in [1, 40, 997] {
        assert_same("NaN", &x, k);
    }
    // Fewer values than k besides the NaNs: MLX keeps some NaNs (which ones is
    // not defined); the kernel keeps the first and must not fail.
    let out = bits(&top_k(&x, 999, true).unwrap());
    assert_eq!(out.iter().filter(|b| f32::from_bits(**b).is_nan()).count(), 2);
    let all_nan = Array::full(&[1, 64], f64::NAN, Dtype::Float32).unwrap();
    top_k(&all_nan, 5, true).unwrap().eval().unwrap();
}

fn assert_same_min_p(name: &str, x: &Array, p: f32) -> usize {
    let (fast, slow) = (min_p(x, p, 1, true).unwrap(), min_p(x, p, 1, false).unwrap());
    assert_eq!(fast.shape(), slow.shape(), "{name}, min_p {p}");
    let (a, b) = (bits(&fast), bits(&slow));
    let diff = a.iter().zip(&b).filter(|(p, q)| p != q).count();
    assert_eq!(diff, 0, "{name}, min_p {p}: {diff} entries differ");
    b.iter().filter(|v| f32::from_bits(**v).is_finite()).count()
}

#[test]
fn min_p_same_mask_as_mlx_ops() {
    let mut kept = Vec::new();
    for (i, scale) in [0.5f32, 2.0, 20.0].iter().enumerate() {
        let lp = normal_row(230 + i as u64, VOCAB, *scale);
        let lp = lp.subtract(&lp.logsumexp(&[-1], true).unwrap()).unwrap();
        for p in [0.001f32, 0.05, 0.1, 0.5, 0.9, 1.0] {
            kept.push(assert_same_min_p("normal", &lp, p));
        }
    }
    // From most of the vocabulary down to the top token alone.
    assert!(kept.contains(&1) && kept.iter().any(|&k| k > 100_000), "{kept:?}");
    // Values on the threshold itself (max + ln(min_p) is exactly representable here).
    let edge = Array::from_slice(&[0.0f32, -1.0, -1.0, -0.5, -2.0, f32::NEG_INFINITY], &[1, 6]).unwrap();
    assert_eq!(assert_same_min_p("edge", &edge, std::f32::consts::E.recip()), 4);
    let two = Array::concatenate(&[&normal_row(240, 4096, 1.0), &normal_row(241, 4096, 6.0)], 0).unwrap();
    assert_same_min_p("two rows", &two, 0.05);
    assert_same_min_p("1-d", &normal_row(242, 5000, 3.0).reshape(&[5000]).unwrap(), 0.05);
    let none = Array::full(&[1, 1000], f64::NEG_INFINITY, Dtype::Float32).unwrap();
    assert_same_min_p("all -inf", &none, 0.05);
    let mut v: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).collect();
    v[77] = f32::NAN;
    assert_same_min_p("NaN", &Array::from_slice(&v, &[1, 1000]).unwrap(), 0.05);
}
