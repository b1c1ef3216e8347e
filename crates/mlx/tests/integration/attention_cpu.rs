//! The few-query attention kernel (`attention_cpu::attend_after`) against the
//! same attention written as MLX ops (two score matmuls, one softmax, two
//! weighted sums added), as S3Gen's estimator writes it.
use mlx::cpu::attention::attend_after;
use mlx::cpu::math as cpu_math;
use mlx::{random, Array, Dtype};

fn normal(shape: &[i32], seed: u64) -> Array {
    random::normal(shape, Dtype::Float32, 0.0, 1.0, Some(&random::key(seed).unwrap())).unwrap()
}

/// `(B, T, H * D)` to `(B, H, T, D)`.
fn heads_first(a: &Array, heads: i32) -> Array {
    let (b, t, w) = (a.dim(0), a.dim(1), a.dim(2));
    a.reshape(&[b, t, heads, w / heads]).unwrap().transpose(&[0, 2, 1, 3]).unwrap()
}

fn composed(q: &Array, k: &Array, v: &Array, pk: &Array, pv: &Array, heads: i32, scale: f64) -> Array {
    let (q, k, v) = (heads_first(q, heads), heads_first(k, heads), heads_first(v, heads));
    let scores_with = |k: &Array| q.matmul(&k.transpose(&[0, 1, 3, 2]).unwrap()).unwrap();
    let scores = Array::concatenate(&[&scores_with(pk), &scores_with(&k)], 3).unwrap().multiply_scalar(scale).unwrap();
    let attn = cpu_math::softmax_last(&scores).unwrap();
    let n = pk.dim(2);
    let earlier = attn.slice_axis(3, 0, n).unwrap().matmul(pv).unwrap();
    let y = earlier.add(&attn.slice_axis(3, n, attn.dim(3)).unwrap().matmul(&v).unwrap()).unwrap();
    let (b, t) = (y.dim(0), y.dim(2));
    y.transpose(&[0, 2, 1, 3]).unwrap().reshape(&[b, t, -1]).unwrap()
}

fn has_kernel() -> bool {
    mlx::cpu::math::has_avx2_fma() && mlx::cpu::kernel::Kernel::Attention.enabled()
}

#[test]
fn attend_after_equals_the_composed_ops() {
    // (B, T, H, D, N): the estimator's shapes (two guidance rows, 8 heads of 64;
    // a first chunk, a later one, the fixture's 40-frame prompt, the real 500),
    // and odd ones: one query, a head of 8, queries not a multiple of 4, keys
    // not a multiple of 16, no earlier keys.
    let cases: [(i32, i32, i32, i32, i32); 8] = [
        (2, 10, 8, 64, 40),
        (2, 20, 8, 64, 500),
        (2, 97, 8, 64, 500),
        (1, 1, 2, 64, 17),
        (1, 7, 3, 8, 5),
        (2, 5, 1, 128, 300),
        (1, 6, 4, 16, 0),
        (2, 3, 8, 64, 320),
    ];
    for (i, &(b, t, h, d, n)) in cases.iter().enumerate() {
        let s = 10 * i as u64;
        let (q, k, v) = (normal(&[b, t, h * d], s + 1), normal(&[b, t, h * d], s + 2), normal(&[b, t, h * d], s + 3));
        let (pk, pv) = (normal(&[b, h, n, d], s + 4), normal(&[b, h, n, d], s + 5));
        let scale = (d as f64).powf(-0.5);
        let want = composed(&q, &k, &v, &pk, &pv, h, scale).to_vec::<f32>().unwrap();
        let Some(got) = attend_after(&q, &k, &v, &pk, &pv, h, scale as f32).unwrap() else {
            assert!(!has_kernel(), "case {i}: the kernel declined on a CPU with AVX2 and FMA");
            continue;
        };
        assert_eq!(got.shape(), vec![b, t, h * d], "case {i}");
        let got = got.to_vec::<f32>().unwrap();
        // Inputs and outputs are of order one; OpenBLAS splits its sums by
        // tile (one, two or more partial sums), the kernel does not, so only
        // the last bits may differ.
        let worst = want.iter().zip(&got).map(|(a, g)| (a - g).abs()).fold(0f32, f32::max);
        assert!(worst <= 1e-5, "case {i}: off by {worst}");
        assert!(got.iter().all(|g| g.is_finite()), "case {i}");
    }
}

#[test]
fn attend_after_declines_what_it_does_not_fit() {
    let q = normal(&[1, 4, 64], 1);
    let pk = normal(&[1, 8, 10, 8], 2);
    // Earlier keys of another head count and size than the queries'.
    assert!(attend_after(&q, &q, &q, &pk, &pk, 4, 0.5).unwrap().is_none());
    // Not float32.
    let half = q.astype(Dtype::Float16).unwrap();
    assert!(attend_after(&half, &half, &half, &pk, &pk, 8, 0.5).unwrap().is_none());
    // Head dimension not a multiple of 8.
    let q12 = normal(&[1, 4, 24], 3);
    let pk12 = normal(&[1, 2, 10, 12], 4);
    assert!(attend_after(&q12, &q12, &q12, &pk12, &pk12, 2, 0.5).unwrap().is_none());
}
