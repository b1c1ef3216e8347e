//! The few-row float32 matmul kernel (`rows_cpu`, `Linear::forward_rows`)
//! against MLX's matmul, within float32 rounding of the sums.
use mlx::cpu::rows as rows_cpu;
use mlx::nn::Linear;
use mlx::{random, Array, Dtype};

fn normal(shape: &[i32], seed: u64) -> Array {
    random::normal(shape, Dtype::Float32, 0.0, 1.0, Some(&random::key(seed).unwrap())).unwrap()
}

fn has_kernel() -> bool {
    mlx::cpu::math::has_avx2_fma() && mlx::cpu::kernel::Kernel::Rows.enabled()
}

#[test]
fn forward_rows_equals_mlx_matmul_within_rounding() {
    // (x's leading shape, k, n, bias): S3Gen chunk shapes, and rows and
    // columns that leave partial blocks of four rows and three columns.
    let cases: [(&[i32], i32, i32, bool); 8] = [
        (&[2, 10], 256, 512, false),
        (&[2, 20], 960, 256, true),
        (&[1, 13], 512, 2048, true),
        (&[7], 64, 5, true),
        (&[1], 8, 1, false),
        (&[3, 3], 1024, 7, false),
        (&[45], 320, 1024, true),
        (&[2, 1], 16, 2, true),
    ];
    for (i, &(lead, k, n, with_bias)) in cases.iter().enumerate() {
        let mut xs = lead.to_vec();
        xs.push(k);
        let x = normal(&xs, 10 + i as u64);
        let w = normal(&[n, k], 40 + i as u64);
        let bias = with_bias.then(|| normal(&[n], 70 + i as u64));
        let want = Linear::Dense { weight: w.clone(), bias: bias.clone() }.forward(&x).unwrap();
        let got = Linear::Dense { weight: w, bias }.forward_rows(&x).unwrap();
        assert_eq!(got.shape(), want.shape(), "case {i}");
        let (want, got) = (want.to_vec::<f32>().unwrap(), got.to_vec::<f32>().unwrap());
        // Sums of k products of unit normals: of order sqrt(k), rounding of order k * 2^-24 * sqrt(k).
        let bound = 4.0 * (k as f32).powf(1.5) * f32::EPSILON;
        let worst = want.iter().zip(&got).map(|(a, g)| (a - g).abs()).fold(0f32, f32::max);
        assert!(worst <= bound, "case {i}: off by {worst} (bound {bound})");
        assert!(got.iter().all(|g| g.is_finite()), "case {i}");
        if !has_kernel() {
            assert_eq!(want, got, "case {i}: without the kernel forward_rows is forward");
        }
    }
}

#[test]
fn matmul_t_declines_what_it_does_not_fit() {
    let w = normal(&[4, 12], 1);
    // k not a multiple of 8.
    assert!(rows_cpu::matmul_t(&normal(&[3, 12], 2), &w, None).unwrap().is_none());
    // Not float32.
    let w16 = normal(&[4, 16], 3).astype(Dtype::Float16).unwrap();
    let x16 = normal(&[3, 16], 4).astype(Dtype::Float16).unwrap();
    assert!(rows_cpu::matmul_t(&x16, &w16, None).unwrap().is_none());
    // x's last axis is not w's.
    assert!(rows_cpu::matmul_t(&normal(&[3, 16], 5), &normal(&[4, 8], 6), None).unwrap().is_none());
    // A bias of the wrong length.
    assert!(rows_cpu::matmul_t(&normal(&[3, 8], 7), &normal(&[4, 8], 8), Some(&normal(&[5], 9))).unwrap().is_none());
    // Where it fits, it is used (on a CPU with AVX2 and FMA).
    let used = rows_cpu::matmul_t(&normal(&[3, 8], 7), &normal(&[4, 8], 8), None).unwrap().is_some();
    assert_eq!(used, has_kernel());
}
