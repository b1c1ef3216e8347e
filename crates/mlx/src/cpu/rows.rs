//! `x @ w.T (+ bias)` in float32 for a few dozen rows of `x`, as one CPU
//! kernel that reads each weight row where it lies: no packing, no transpose.
//!
//! For a few dozen rows OpenBLAS's `sgemm` runs at about 45 GFLOPS on this
//! machine's two cores (measured: 20 x 256 by 256 x 1024 in 223 us), most of
//! it packing and edge tiles. Here four rows of `x` and three rows of `w` are
//! multiplied eight `k` at a time into twelve vector sums (the multiply-adds,
//! not the loads, bound the loop), reduced across lanes at the end. The sums
//! run in another order than OpenBLAS's, so the results differ from MLX's
//! matmul in the last bits: callers use this only where results are compared
//! within a tolerance (S3Gen's streamed chunks), never where a model must
//! match its reference bit for bit (`cpu::gemv` keeps OpenBLAS's bits for one
//! or two rows).
// These kernels are built only on x86-64 with AVX2 and FMA (the instructions whose
// results they must equal); elsewhere MLX's own op runs and their parts go unused.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_variables))]
use crate::cpu::kernel::{cpu_kernel_f32, par_ranges, Kernel, KernelF32, OutPtr};
use crate::cpu::math::has_avx2_fma;
use crate::{Array, Dtype, Result};

/// Rows of `x` and of `w` per block of sums.
const X_ROWS: usize = 4;
const W_ROWS: usize = 3;
/// Below this many multiply-adds one thread does it all.
const PARALLEL_MIN: usize = 1 << 17;

/// `x @ w.T`, plus `bias` when given; `x` is `(..., k)`, `w` `(n, k)`, `bias`
/// `(n,)`. `None` where the kernel does not apply (another dtype or device, no
/// AVX2 and FMA, `k` not a multiple of 8, sizes past 2^24): use MLX's matmul.
pub fn matmul_t(x: &Array, w: &Array, bias: Option<&Array>) -> Result<Option<Array>> {
    if x.dtype() != Dtype::Float32 || w.dtype() != Dtype::Float32 || w.ndim() != 2 || x.ndim() == 0 {
        return Ok(None);
    }
    let (n, k) = (w.dim(0), w.dim(1));
    let bias_ok = bias.is_none_or(|b| b.dtype() == Dtype::Float32 && b.shape() == [n]);
    let rows = if k > 0 { x.size() / k as usize } else { 0 };
    // Sizes travel as float parameters: exact below 2^24.
    if x.dim(-1) != k || k % 8 != 0 || k <= 0 || n <= 0 || rows == 0 || !bias_ok || n >= 1 << 24 || k >= 1 << 24 {
        return Ok(None);
    }
    if !Kernel::Rows.enabled() || !has_avx2_fma() {
        return Ok(None);
    }
    let mut shape = x.shape();
    *shape.last_mut().expect("x has a last axis") = n;
    let mut inputs = vec![x, w];
    inputs.extend(bias);
    Ok(Some(cpu_kernel_f32("MatmulRows", MATMUL, &[k as f32, n as f32], &inputs, &shape)?))
}

struct Problem<'a> {
    x: &'a [f32],
    w: &'a [f32],
    bias: Option<&'a [f32]>,
    m: usize,
    n: usize,
    k: usize,
}

const MATMUL: KernelF32 = |params, inputs, out| {
    let [k, n] = [params[0], params[1]].map(|v| v as usize);
    let (x, w, bias) = (inputs[0], inputs[1], inputs.get(2).copied());
    let ok =
        k > 0 && k % 8 == 0 && n > 0 && w.len() == n * k && x.len() % k == 0 && out.len() == x.len() / k * n && bias.is_none_or(|b| b.len() == n);
    if !ok {
        out.fill(f32::NAN);
        return;
    }
    let p = Problem { x, w, bias, m: x.len() / k, n, k };
    let out = OutPtr(out.as_mut_ptr());
    par_ranges(n.div_ceil(W_ROWS), p.m * n * k >= PARALLEL_MIN, |groups| {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `matmul_t` builds this kernel only on a CPU with AVX2 and
        // FMA; each range writes only its own columns.
        unsafe {
            avx2::columns(&p, groups.start * W_ROWS..(groups.end * W_ROWS).min(p.n), out)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = groups;
    });
};

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::{OutPtr, Problem, W_ROWS, X_ROWS};

    /// Output columns `cols` for every row, `W_ROWS` columns by `X_ROWS` rows
    /// at a time (the weight rows stay in L1 while all rows of `x` pass).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn columns(p: &Problem, cols: Range<usize>, out: OutPtr) {
        let mut j0 = cols.start;
        while j0 < cols.end {
            let width = W_ROWS.min(cols.end - j0);
            let mut i0 = 0;
            while i0 < p.m {
                let rows = X_ROWS.min(p.m - i0);
                match (rows, width) {
                    (4, 3) => block::<4, 3>(p, i0, j0, out),
                    (4, 2) => block::<4, 2>(p, i0, j0, out),
                    (4, _) => block::<4, 1>(p, i0, j0, out),
                    (3, 3) => block::<3, 3>(p, i0, j0, out),
                    (3, 2) => block::<3, 2>(p, i0, j0, out),
                    (3, _) => block::<3, 1>(p, i0, j0, out),
                    (2, 3) => block::<2, 3>(p, i0, j0, out),
                    (2, 2) => block::<2, 2>(p, i0, j0, out),
                    (2, _) => block::<2, 1>(p, i0, j0, out),
                    (_, 3) => block::<1, 3>(p, i0, j0, out),
                    (_, 2) => block::<1, 2>(p, i0, j0, out),
                    _ => block::<1, 1>(p, i0, j0, out),
                }
                i0 += rows;
            }
            j0 += width;
        }
    }

    /// Rows `i0..i0 + R` by columns `j0..j0 + C`: `R * C` vector sums over
    /// `k`, each reduced across its lanes, plus the bias.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn block<const R: usize, const C: usize>(p: &Problem, i0: usize, j0: usize, out: OutPtr) {
        let k = p.k;
        let x: [*const f32; R] = std::array::from_fn(|r| p.x.as_ptr().add((i0 + r) * k));
        let w: [*const f32; C] = std::array::from_fn(|c| p.w.as_ptr().add((j0 + c) * k));
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for kk in (0..k).step_by(8) {
            let wv: [__m256; C] = std::array::from_fn(|c| _mm256_loadu_ps(w[c].add(kk)));
            for r in 0..R {
                let xv = _mm256_loadu_ps(x[r].add(kk));
                for c in 0..C {
                    acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
                }
            }
        }
        for r in 0..R {
            for c in 0..C {
                let mut v = lanes_sum(acc[r][c]);
                if let Some(b) = p.bias {
                    v += b[j0 + c];
                }
                *out.0.add((i0 + r) * p.n + j0 + c) = v;
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn lanes_sum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
        _mm_cvtss_f32(s)
    }
}
