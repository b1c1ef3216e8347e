//! Attention for a few queries against a long run of earlier keys, as one
//! float32 CPU kernel: `softmax(scale q [K_earlier; K_own]^T) [V_earlier; V_own]`
//! with no mask, heads side by side in the last axis.
//!
//! Written as MLX ops this is two batched matmuls per side, and MLX's CPU
//! matmul makes one `cblas_sgemm` call per batch and head: 64 calls of a few
//! rows each per layer for S3Gen's streamed chunks (two guidance rows, eight
//! heads), where the calls' own overhead outweighs their arithmetic (1.1 s of
//! a full-size chunk's 3.4 s mel went to attending to the voice prompt). Here
//! every head is one task on its own core, its keys transposed once, and the
//! softmax is `cpu::math`'s row softmax (MLX's). Each score and weighted sum
//! is one run of fused multiply-adds in order, from zero (each side's weighted
//! sum apart, then the two added, as the two matmuls and their sum do).
//! OpenBLAS splits such sums differently by output tile (two partial sums for
//! some rows, one for others), so the results differ from the matmuls' in the
//! last bits: streamed chunks are compared with whole renders within a
//! tolerance anyway, and whole renders do not take this path.
// These kernels are built only on x86-64 with AVX2 and FMA (the instructions whose
// results they must equal); elsewhere MLX's own op runs and their parts go unused.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_variables))]
use crate::cpu::kernel::{cpu_kernel_f32, par_ranges, Kernel, KernelF32, OutPtr};
use crate::cpu::math::has_avx2_fma;
use crate::{Array, Dtype, Result};

/// Queries per pass over a head's keys.
const ROWS: usize = 4;
/// Keys per group of score lanes (two vectors of eight).
const KEYS: usize = 16;
/// Below this many multiply-adds one thread does it all.
const PARALLEL_MIN: usize = 1 << 17;

/// `q`, `k`, `v`: `(B, T, H * D)` (the projections, heads not yet split);
/// `earlier_k`, `earlier_v`: `(B, H, N, D)`. Returns `(B, T, H * D)`, or
/// `None` where the kernel does not apply (not float32, not the CPU, no AVX2
/// and FMA, `D` not a multiple of 8, shapes that do not fit): the caller then
/// uses MLX's ops.
pub fn attend_after(q: &Array, k: &Array, v: &Array, earlier_k: &Array, earlier_v: &Array, heads: i32, scale: f32) -> Result<Option<Array>> {
    let all = [q, k, v, earlier_k, earlier_v];
    if all.iter().any(|a| a.dtype() != Dtype::Float32) || !Kernel::Attention.enabled() || !has_avx2_fma() {
        return Ok(None);
    }
    if q.ndim() != 3 || earlier_k.ndim() != 4 || heads <= 0 {
        return Ok(None);
    }
    let (b, t, width) = (q.dim(0), q.dim(1), q.dim(2));
    let d = width / heads;
    let n = earlier_k.dim(2);
    let fits = d > 0
        && d % 8 == 0
        && d * heads == width
        && k.shape() == q.shape()
        && v.shape() == q.shape()
        && earlier_k.shape() == [b, heads, n, d]
        && earlier_v.shape() == earlier_k.shape()
        && t > 0
        // Sizes travel as float parameters: exact below 2^24.
        && [b, t, width, n].iter().all(|&s| (s as i64) < 1 << 24);
    if !fits {
        return Ok(None);
    }
    let params = [b as f32, t as f32, heads as f32, d as f32, n as f32, scale];
    let out = cpu_kernel_f32("AttendAfter", ATTEND, &params, &[q, k, v, earlier_k, earlier_v], &q.shape())?;
    Ok(Some(out))
}

/// One attention problem, the kernel's inputs as slices.
struct Problem<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    earlier_k: &'a [f32],
    earlier_v: &'a [f32],
    t: usize,
    heads: usize,
    d: usize,
    n: usize,
    scale: f32,
}

const ATTEND: KernelF32 = |params, inputs, out| {
    let [b, t, heads, d, n] = [0, 1, 2, 3, 4].map(|i| params[i] as usize);
    let width = heads * d;
    let ok = inputs.len() == 5
        && d % 8 == 0
        && d > 0
        && [0, 1, 2].iter().all(|&i| inputs[i].len() == b * t * width)
        && inputs[3].len() == b * heads * n * d
        && inputs[4].len() == inputs[3].len()
        && out.len() == b * t * width;
    if !ok {
        out.fill(f32::NAN);
        return;
    }
    let p = Problem { q: inputs[0], k: inputs[1], v: inputs[2], earlier_k: inputs[3], earlier_v: inputs[4], t, heads, d, n, scale: params[5] };
    let out = OutPtr(out.as_mut_ptr());
    let work = b * heads * t * (n + t) * d;
    par_ranges(b * heads, work >= PARALLEL_MIN, |units| {
        for unit in units {
            // SAFETY: `attend_after` builds this kernel only on a CPU with AVX2
            // and FMA; each unit writes only its own head's columns.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                avx2::head(&p, unit / p.heads, unit % p.heads, out)
            };
        }
    });
};

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{OutPtr, Problem, KEYS, ROWS};
    use crate::cpu::math::softmax_rows;

    /// Head `h` of batch row `b`: its keys transposed (`D` rows of `N + T`),
    /// then the scores of `ROWS` queries at a time, the softmax, the weighted sums.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn head(p: &Problem, b: usize, h: usize, out: OutPtr) {
        let (t, d, n) = (p.t, p.d, p.n);
        let m = n + t;
        let width = p.heads * d;
        let own = |x: &[f32], j: usize| x.as_ptr().add((b * t + j) * width + h * d);
        let earlier = b * p.heads * n * d + h * n * d;
        // Keys transposed, padded to a whole group of lanes with zeros.
        let cols = m.div_ceil(KEYS) * KEYS;
        let mut kt = vec![0f32; d * cols];
        for j in 0..m {
            let key = if j < n { p.earlier_k.as_ptr().add(earlier + j * d) } else { own(p.k, j - n) };
            for c in 0..d {
                *kt.get_unchecked_mut(c * cols + j) = *key.add(c);
            }
        }
        // Every query's scores first, so that the softmax sums eight rows side by side.
        let mut scores = vec![0f32; t * m];
        for i0 in (0..t).step_by(ROWS) {
            let rows = ROWS.min(t - i0);
            // Missing rows repeat the last one; their results are not used.
            let queries: [*const f32; ROWS] = std::array::from_fn(|r| own(p.q, i0 + r.min(rows - 1)));
            for j0 in (0..cols).step_by(KEYS) {
                let acc = score_lanes(&queries, &kt, cols, j0, d);
                for (r, lanes) in acc.iter().enumerate().take(rows) {
                    for (half, &vec) in lanes.iter().enumerate() {
                        let mut s = [0f32; 8];
                        _mm256_storeu_ps(s.as_mut_ptr(), vec);
                        for (l, &x) in s.iter().enumerate() {
                            let j = j0 + half * 8 + l;
                            if j < m {
                                // The matmul's sum, then the separate scale multiply.
                                scores[(i0 + r) * m + j] = x * p.scale;
                            }
                        }
                    }
                }
            }
        }
        softmax_rows(&mut scores, m);
        for (i, weights) in scores.chunks_exact(m).enumerate() {
            let dst = out.0.add((b * t + i) * width + h * d);
            let mut c0 = 0;
            while c0 < d {
                if d - c0 >= 64 {
                    weighted_sums::<8>(p, weights, b, h, c0, dst);
                    c0 += 64;
                } else {
                    weighted_sums::<1>(p, weights, b, h, c0, dst);
                    c0 += 8;
                }
            }
        }
    }

    /// Scores of `ROWS` queries against keys `j0..j0 + KEYS`: each lane sums
    /// its key's products over the head dimension in order, from zero, with
    /// fused multiply-adds.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn score_lanes(queries: &[*const f32; ROWS], kt: &[f32], cols: usize, j0: usize, d: usize) -> [[__m256; 2]; ROWS] {
        let mut acc = [[_mm256_setzero_ps(); 2]; ROWS];
        let kt = kt.as_ptr().add(j0);
        for c in 0..d {
            let k0 = _mm256_loadu_ps(kt.add(c * cols));
            let k1 = _mm256_loadu_ps(kt.add(c * cols + 8));
            for (r, a) in acc.iter_mut().enumerate() {
                let qv = _mm256_broadcast_ss(&*queries[r].add(c));
                a[0] = _mm256_fmadd_ps(qv, k0, a[0]);
                a[1] = _mm256_fmadd_ps(qv, k1, a[1]);
            }
        }
        acc
    }

    /// Columns `c0..c0 + 8 V` of one query's weighted sum into `dst`: the
    /// earlier values' terms in key order from zero with fused multiply-adds,
    /// the own values' likewise, then the two added. `V` independent sums keep
    /// the multiply-adds from waiting on each other.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn weighted_sums<const V: usize>(p: &Problem, weights: &[f32], b: usize, h: usize, c0: usize, dst: *mut f32) {
        let (t, d, n) = (p.t, p.d, p.n);
        let width = p.heads * d;
        let mut earlier = [_mm256_setzero_ps(); V];
        let ev = p.earlier_v.as_ptr().add(b * p.heads * n * d + h * n * d + c0);
        for (j, w) in weights[..n].iter().enumerate() {
            let wv = _mm256_broadcast_ss(w);
            for (u, a) in earlier.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(wv, _mm256_loadu_ps(ev.add(j * d + 8 * u)), *a);
            }
        }
        let mut own = [_mm256_setzero_ps(); V];
        let ov = p.v.as_ptr().add(b * t * width + h * d + c0);
        for (j, w) in weights[n..].iter().enumerate() {
            let wv = _mm256_broadcast_ss(w);
            for (u, a) in own.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(wv, _mm256_loadu_ps(ov.add(j * width + 8 * u)), *a);
            }
        }
        for u in 0..V {
            _mm256_storeu_ps(dst.add(c0 + 8 * u), _mm256_add_ps(earlier[u], own[u]));
        }
    }
}
