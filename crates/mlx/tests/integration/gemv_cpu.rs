//! The few-rows float32 matmul kernel (`gemv_cpu`) against MLX's own matmul,
//! bit for bit, through `nn::Linear` (where models call it).
use mlx::cpu::gemv as gemv_cpu;
use mlx::cpu::gemv::Blocking;
use mlx::nn::Linear;
use mlx::{info, random, Array, Dtype};

fn normal(shape: &[i32], seed: u64) -> Array {
    random::normal(shape, Dtype::Float32, 0.0, 1.0, Some(&random::key(seed).unwrap())).unwrap()
}

fn bits(a: &Array) -> Vec<u32> {
    a.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
}

/// Linux CPU builds link OpenBLAS ahead of libmlx (unless MLX_NODE_OPENBLAS=none);
/// asking for the BLAS also keeps it in this test's needed libraries.
fn openblas() -> bool {
    info::blas_name().unwrap() == "openblas"
}

/// What must hold for the OpenBLAS core type at hand (not the CPU): the kernel
/// reproduces the core types x86-64 machines get with AVX2 and FMA kernels,
/// and stays off where OpenBLAS sums without fused multiply-adds.
#[test]
fn kernel_use_follows_the_openblas_core_type() {
    let on_switch = mlx::cpu::kernel::Kernel::Gemv.enabled();
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) || !openblas() {
        return assert!(!gemv_cpu::active() || openblas(), "the kernel reproduces OpenBLAS only");
    }
    let core = info::openblas_core().unwrap();
    let chosen = gemv_cpu::chosen();
    eprintln!("OpenBLAS core {core}: gemv kernel {chosen:?}");
    if !on_switch || !mlx::cpu::math::has_avx2_fma() {
        return assert_eq!(chosen, None, "switched off, or no AVX2 and FMA");
    }
    // OpenBLAS 0.3.21 (Debian 12): GEMM_Q and the AVX-512 small-matrix kernel.
    let expected = match core.as_str() {
        "Haswell" | "Zen" => Some(Blocking { q: 320, small: false }),
        "SkylakeX" => Some(Blocking { q: 448, small: true }),
        "Cooperlake" | "SapphireRapids" => Some(Blocking { q: 320, small: true }),
        // No fused multiply-adds in their sgemm: no blocking gives their bits.
        "Sandybridge" | "Prescott" | "Nehalem" | "Core2" | "Atom" => None,
        other => return eprintln!("core type {other} has no expectation here; the bit-for-bit test below decides"),
    };
    assert_eq!(chosen, expected, "OpenBLAS core {core}");
    // Each of these core types sums a few more rows as it sums one or two.
    assert_eq!(gemv_cpu::more_rows(), expected.is_some(), "OpenBLAS core {core}: three to eight rows");
}

#[test]
fn linear_equals_mlx_matmul_bit_for_bit() {
    let _ = openblas();
    // (rows as x's leading shape, k, n, bias)
    let cases: [(&[i32], i32, i32, bool); 25] = [
        (&[1], 1024, 3072, false),
        (&[1, 1], 3072, 1024, false),
        (&[2], 1024, 1024, false),
        (&[2, 1], 4096, 1024, true),
        (&[1], 1024, 151_936, false),
        (&[1], 640, 37, true),
        (&[1], 64, 5, false),
        (&[2], 1536, 300, false),
        (&[1], 512, 1, true),
        // Three to eight rows (a batch decoding together), the LM head included,
        // with the tile's rows taken in turns of four and of fewer.
        (&[3], 512, 64, false),
        (&[5, 1], 1024, 1000, true),
        (&[8], 512, 151_936, false),
        (&[7], 3072, 1024, false),
        (&[6, 1], 640, 200, true),
        (&[4], 1024, 1025, false),
        // Not the kernel's: nine rows, k not a multiple of 64. Still MLX's bits.
        (&[9], 1024, 512, true),
        (&[1], 1000, 64, false),
        (&[91], 1024, 256, true),
        // AVX-512 OpenBLAS: the small-matrix kernel's last columns (n % 4), its
        // limits (1200 outputs, 1e6 multiply-adds) from both sides, and a K
        // that its GEMM_Q (448) cuts in two halves.
        (&[1], 2048, 487, true),
        (&[2], 384, 600, false),
        (&[2], 448, 601, true),
        (&[1], 832, 1202, false),
        (&[1], 1024, 1201, true),
        (&[2], 960, 64, false),
        (&[2], 1152, 2048, true),
    ];
    for (i, &(lead, k, n, with_bias)) in cases.iter().enumerate() {
        let mut xs = lead.to_vec();
        xs.push(k);
        let x = normal(&xs, 10 + i as u64);
        let w = normal(&[n, k], 40 + i as u64).multiply_scalar(0.05).unwrap();
        let bias = with_bias.then(|| normal(&[n], 70 + i as u64));
        let want = match &bias {
            Some(b) => b.addmm(&x, &w.t().unwrap(), 1.0, 1.0).unwrap(),
            None => x.matmul(&w.t().unwrap()).unwrap(),
        };
        let got = Linear::Dense { weight: w, bias }.forward(&x).unwrap();
        assert_eq!(got.shape(), want.shape(), "case {i}");
        assert_eq!(bits(&got), bits(&want), "case {i}: (lead {lead:?}, k {k}, n {n}, bias {with_bias})");
    }
}

#[test]
fn non_finite_inputs_propagate_as_in_mlx() {
    let _ = openblas();
    let mut xv: Vec<f32> = (0..1024).map(|i| (i as f32 * 0.37).sin()).collect();
    xv[5] = f32::NAN;
    xv[700] = f32::INFINITY;
    xv[900] = -1e30;
    let x = Array::from_slice(&xv, &[1, 1024]).unwrap();
    let w = normal(&[64, 1024], 3);
    let want = x.matmul(&w.t().unwrap()).unwrap();
    let got = Linear::Dense { weight: w, bias: None }.forward(&x).unwrap();
    let same = bits(&got).iter().zip(bits(&want)).all(|(a, b)| *a == b || (f32::from_bits(*a).is_nan() && f32::from_bits(b).is_nan()));
    assert!(same);
}
