//! The small-matrix path of OpenBLAS's AVX-512 core types (SkylakeX,
//! Cooperlake, SapphireRapids): for small products (see `Blocking::small`)
//! OpenBLAS skips packing and blocking and runs `sgemm_small_kernel_tn`, which
//! sums each output in sixteen partial sums (the lanes of one 512-bit
//! register: lane `l` takes the `k` with `k % 16 == l`, in order, by fused
//! multiply-adds) and then adds the sixteen up by one of two fixed trees:
//! - outputs in the leading multiple of four columns go through a 4x4
//!   transpose: pairs, then pairs of pairs within each group of four lanes,
//!   then the four groups as (0 + 1) + (2 + 3);
//! - the last `n % 4` columns go through the compiler's horizontal add:
//!   lane `i` with `i + 8`, then with `+ 4`, then (0 + 2) + (1 + 3).
//!
//! The bias (beta = 1) is added to the total in one rounding; with no bias the
//! total is stored as it is (a -0 stays -0).
//!
//! These products are small (at most 1200 outputs and 1e6 multiply-adds), so
//! two eight-lane registers stand in for the sixteen lanes, one column at a time.
use std::arch::x86_64::*;
use std::ops::Range;

use super::{OutPtr, Problem};

/// Columns `cols` of all rows of `p` into `out` (row-major, `p.n` wide).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn columns(p: &Problem, cols: Range<usize>, out: OutPtr) {
    let tree4_end = p.n & !3;
    for col in cols {
        let w = p.w.as_ptr().add(col * p.k);
        for r in 0..p.m {
            let x = p.x.as_ptr().add(r * p.k);
            let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            for kk in (0..p.k).step_by(16) {
                lo = _mm256_fmadd_ps(_mm256_loadu_ps(w.add(kk)), _mm256_loadu_ps(x.add(kk)), lo);
                hi = _mm256_fmadd_ps(_mm256_loadu_ps(w.add(kk + 8)), _mm256_loadu_ps(x.add(kk + 8)), hi);
            }
            let mut a = [0f32; 16];
            _mm256_storeu_ps(a.as_mut_ptr(), lo);
            _mm256_storeu_ps(a.as_mut_ptr().add(8), hi);
            let sum = if col < tree4_end { transpose_tree(&a) } else { halving_tree(&a) };
            *out.0.add(r * p.n + col) = match p.bias {
                Some(b) => b[col] + sum,
                None => sum,
            };
        }
    }
}

/// The sum `REDUCE_4` gives: within each group of four lanes (a0 + a1) + (a2 + a3),
/// then the groups as (g0 + g1) + (g2 + g3).
fn transpose_tree(a: &[f32; 16]) -> f32 {
    let g: [f32; 4] = std::array::from_fn(|l| (a[4 * l] + a[4 * l + 1]) + (a[4 * l + 2] + a[4 * l + 3]));
    (g[0] + g[1]) + (g[2] + g[3])
}

/// The sum GCC's `_mm512_reduce_add_ps` gives: halves added lane by lane down
/// to four lanes, then (c0 + c2) + (c1 + c3).
fn halving_tree(a: &[f32; 16]) -> f32 {
    let b: [f32; 8] = std::array::from_fn(|i| a[i + 8] + a[i]);
    let c: [f32; 4] = std::array::from_fn(|i| b[i + 4] + b[i]);
    (c[0] + c[2]) + (c[1] + c[3])
}
