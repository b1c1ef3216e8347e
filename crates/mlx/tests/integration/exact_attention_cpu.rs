//! The exact decode-attention kernel (`cpu::exact_attention`) against MLX's
//! own `scaled_dot_product_attention`, bit for bit, on the positions each
//! cache holds.
use mlx::cpu::decode_attention::CachedKv;
use mlx::cpu::exact_attention::{active, exact_decode_attention, rule};
use mlx::{info, Array, Dtype};

use super::decode_attention_cpu::{buffer, normal};

/// MLX's attention (no mask), batch row by batch row, as `[B, 1, n_q * d]` values.
fn reference(q: &Array, kv: &[CachedKv], scale: f32) -> Vec<f32> {
    super::decode_attention_cpu::reference(q, kv, scale, false)
}

/// Equal bits, or both NaN (MLX's and the kernel's NaN may differ in payload).
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Where `cpu::gemv` reproduces OpenBLAS (the core types it is known to
/// match on: AVX2 and FMA kernels), this kernel's calibration must pass too.
#[test]
fn kernel_use_follows_the_gemv_calibration() {
    assert!(info::blas_name().is_ok());
    let gemv = mlx::cpu::gemv::chosen();
    let switched_on = mlx::cpu::kernel::Kernel::Attention.enabled();
    if gemv.is_none() || !switched_on {
        return assert!(!active(), "needs the gemv kernel and the attention switch");
    }
    let core = info::openblas_core().unwrap();
    eprintln!("OpenBLAS core {core}: exact attention {}, {:?}", active(), rule());
    // Debian's OpenBLAS 0.3.21 on every core type its x86-64 CPUs pick (the AVX-512
    // ones sum short calls in one chain, the others block them).
    if matches!(core.as_str(), "Haswell" | "Zen" | "SkylakeX" | "Cooperlake" | "SapphireRapids") {
        assert!(active(), "OpenBLAS core {core}: the weighted sum's blocking is calibrated");
    }
}

#[test]
fn equals_mlx_attention_bit_for_bit() {
    // (n_q, n_kv, d, [(rows, len, capacity)]): one cache or several (a batch), grouped heads
    // (1, 2, 3, 7 queries per key head), positions below, at and past OpenBLAS's K block
    // (320), odd rests it halves, past its threading threshold, and on both sides of
    // the AVX-512 core types' limits for one chain (358,400 and 1e6 multiply-adds).
    let cases: [(i32, i32, i32, &[(i32, i32, i32)]); 11] = [
        (16, 8, 128, &[(1, 1, 256)]),
        (16, 8, 128, &[(1, 408, 512)]),
        (14, 2, 64, &[(1, 333, 512)]),
        (8, 8, 128, &[(1, 700, 768)]),
        (12, 4, 64, &[(2, 320, 320), (1, 37, 64)]),
        (21, 3, 128, &[(1, 411, 512), (1, 5, 256), (2, 641, 700)]),
        (16, 8, 128, &[(1, 1283, 1536)]),
        (16, 8, 128, &[(1, 2501, 2560)]),
        (4, 1, 256, &[(1, 1001, 1024)]),
        (32, 8, 64, &[(1, 4133, 4352)]),
        (8, 2, 128, &[(1, 8203, 8320)]),
    ];
    for (i, &(n_q, n_kv, d, caches)) in cases.iter().enumerate() {
        let seed = 10 * i as u64;
        let b: i32 = caches.iter().map(|c| c.0).sum();
        let q = normal(&[b, n_q, 1, d], seed);
        let held: Vec<(Array, Array, i32)> = caches
            .iter()
            .enumerate()
            .map(|(j, &(rows, len, cap))| {
                (buffer(rows, n_kv, len, cap, d, seed + 2 * j as u64 + 1), buffer(rows, n_kv, len, cap, d, seed + 2 * j as u64 + 2), len)
            })
            .collect();
        let kv: Vec<CachedKv> = held.iter().map(|(k, v, len)| CachedKv { keys: k, values: v, len: *len }).collect();
        let scale = 1.0 / (d as f32).sqrt();
        let got = exact_decode_attention(&q, &kv, scale).unwrap();
        let Some(got) = got else {
            assert!(!active(), "case {i}: declined while calibrated");
            continue;
        };
        assert_eq!(got.shape(), [b, 1, n_q * d], "case {i}");
        let (want, got) = (reference(&q, &kv, scale), got.to_vec::<f32>().unwrap());
        let differ = want.iter().zip(&got).filter(|(a, b)| !same(**a, **b)).count();
        assert_eq!(differ, 0, "case {i} ({n_q} heads over {n_kv}, d {d}, caches {caches:?}): {differ} of {} values differ", want.len());
    }
}

#[test]
fn non_finite_values_propagate_as_in_mlx() {
    let (n_q, n_kv, d, len) = (4, 2, 64, 50);
    let q = normal(&[1, n_q, 1, d], 1);
    // An infinite key (scores of +-inf: a NaN softmax row in MLX too) and a NaN value.
    let mut k = normal(&[1, n_kv, len, d], 2).to_vec::<f32>().unwrap();
    k[3 * d as usize + 5] = f32::INFINITY;
    let mut v = normal(&[1, n_kv, len, d], 3).to_vec::<f32>().unwrap();
    v[(len as usize + 7) * d as usize + 2] = f32::NAN;
    let keys = Array::from_slice(&k, &[1, n_kv, len, d]).unwrap();
    let values = Array::from_slice(&v, &[1, n_kv, len, d]).unwrap();
    let kv = [CachedKv { keys: &keys, values: &values, len }];
    let Some(got) = exact_decode_attention(&q, &kv, 0.125).unwrap() else {
        return assert!(!active(), "declined while calibrated");
    };
    let (want, got) = (reference(&q, &kv, 0.125), got.to_vec::<f32>().unwrap());
    assert!(want.iter().any(|v| v.is_nan()), "the case reaches a NaN");
    assert!(want.iter().zip(&got).all(|(a, b)| same(*a, *b)));
}

#[test]
fn declines_what_it_does_not_reproduce() {
    let keys = buffer(1, 2, 10, 16, 64, 1);
    let values = buffer(1, 2, 10, 16, 64, 2);
    let kv = [CachedKv { keys: &keys, values: &values, len: 10 }];
    let none = |q: &Array, kv: &[CachedKv]| exact_decode_attention(q, kv, 0.125).unwrap().is_none();
    // Two query positions (a prompt chunk: causal), bfloat16 queries, heads not a multiple.
    assert!(none(&normal(&[1, 4, 2, 64], 3), &kv));
    assert!(none(&normal(&[1, 4, 1, 64], 3).astype(Dtype::Bfloat16).unwrap(), &kv));
    assert!(none(&normal(&[1, 3, 1, 64], 3), &kv));
    // A head size that is not a multiple of 64, a bfloat16 cache, an empty cache, a batch
    // that does not match the caches' rows.
    let (k80, v80) = (buffer(1, 2, 10, 16, 80, 1), buffer(1, 2, 10, 16, 80, 2));
    assert!(none(&normal(&[1, 4, 1, 80], 3), &[CachedKv { keys: &k80, values: &v80, len: 10 }]));
    let (kb, vb) = (keys.astype(Dtype::Bfloat16).unwrap(), values.astype(Dtype::Bfloat16).unwrap());
    assert!(none(&normal(&[1, 4, 1, 64], 3), &[CachedKv { keys: &kb, values: &vb, len: 10 }]));
    assert!(none(&normal(&[1, 4, 1, 64], 3), &[CachedKv { keys: &keys, values: &values, len: 0 }]));
    assert!(none(&normal(&[2, 4, 1, 64], 3), &kv));
}
