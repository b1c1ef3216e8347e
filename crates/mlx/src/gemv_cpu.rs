//! `x @ w.T (+ bias)` in float32 for one or two rows of `x` (a decode step, or
//! T3's guidance pair) with the very bits OpenBLAS's `sgemm` gives, without
//! its packing.
//!
//! MLX's CPU matmul is always `cblas_sgemm`. For so few rows OpenBLAS spends
//! most of the call copying the whole weight matrix into its packed layout
//! (`sgemm_incopy`: 44% of a 0.6B float32 decode here, the multiply-adds 19%),
//! so every weight is read twice and written once per step. This kernel reads
//! each weight once. It keeps OpenBLAS's arithmetic: `k` is cut into blocks of
//! at most `Q` (the level-3 driver's rule: `Q` while two more would fit, else
//! the rest in two halves), each block is summed from zero in
//! order with fused multiply-adds, and each block's sum is added to the output
//! (zero, or the bias for `addmm`).
//!
//! The blocking depends on OpenBLAS's build and CPU, so it is not assumed: the
//! first call compares the kernel with MLX's matmul on probe shapes for a few
//! candidate blockings, and the kernel is used only if one of them gives the
//! same bits on every probe (with any other BLAS, or none matching, MLX's
//! matmul runs as before). `MLX_NODE_GEMV_KERNEL=0` switches it off.
use std::sync::OnceLock;

use crate::kernel::{cpu_default, cpu_kernel_f32, par_ranges, KernelF32, OutPtr};
use crate::{Array, Dtype, Result};

/// Output columns per block: four vectors of eight.
const BLOCK: usize = 32;

/// OpenBLAS's K blocking: blocks of `q`, the last two halves of the rest.
/// (The halves are rounded up to the kernel's unroll, 4 or 8 depending on the
/// threaded or single-threaded driver; with `k` a multiple of 64 they are
/// multiples of 32 and need no rounding, so only such `k` take the kernel.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Blocking {
    q: usize,
}

/// Candidates tried by the calibration, the one of this machine's OpenBLAS
/// (0.3.21, Zen) first.
const CANDIDATES: [Blocking; 4] = [Blocking { q: 320 }, Blocking { q: 384 }, Blocking { q: 256 }, Blocking { q: 512 }];

/// `x @ w.T`, plus `bias` when given (MLX's `addmm(bias, x, w.T)`), by the
/// kernel; `None` where it does not apply: another dtype or device, more than
/// two rows, `k` not a multiple of 64 (see `Blocking`), no calibrated blocking.
pub fn matmul_t(x: &Array, w: &Array, bias: Option<&Array>) -> Result<Option<Array>> {
    if x.dtype() != Dtype::Float32 || w.dtype() != Dtype::Float32 || w.ndim() != 2 || x.ndim() == 0 {
        return Ok(None);
    }
    let (n, k) = (w.dim(0), w.dim(1));
    let rows = if k > 0 { x.size() / k as usize } else { 0 };
    let bias_ok = bias.map_or(true, |b| b.dtype() == Dtype::Float32 && b.shape() == [n]);
    if x.dim(-1) != k || !(1..=2).contains(&rows) || k % 64 != 0 || n <= 0 || !bias_ok || n >= 1 << 24 || k >= 1 << 24
        // Rows are addressed with 32-bit offsets.
        || n as i64 * k as i64 > i32::MAX as i64
    {
        return Ok(None);
    }
    let Some(b) = blocking() else { return Ok(None) };
    Ok(Some(run(x, w, bias, b)?))
}

/// Whether the kernel is in use in this process (its calibration passed).
pub fn active() -> bool {
    blocking().is_some()
}

fn run(x: &Array, w: &Array, bias: Option<&Array>, b: Blocking) -> Result<Array> {
    let (n, k) = (w.dim(0), w.dim(1));
    let mut out_shape = x.shape();
    *out_shape.last_mut().expect("x has a last axis") = n;
    let params = [k as f32, n as f32, b.q as f32];
    let mut inputs = vec![x, w];
    inputs.extend(bias);
    cpu_kernel_f32("MatmulFewRows", GEMV, &params, &inputs, &out_shape)
}

fn blocking() -> Option<Blocking> {
    static CHOSEN: OnceLock<Option<Blocking>> = OnceLock::new();
    *CHOSEN.get_or_init(|| {
        let on = cpu_default() && std::env::var("MLX_NODE_GEMV_KERNEL").map_or(true, |v| v != "0") && has_avx2_fma();
        if !on {
            return None;
        }
        CANDIDATES.into_iter().find(|&b| calibrate(b).unwrap_or(false))
    })
}

fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The kernel with blocking `b` against MLX's matmul on probe shapes: one and
/// two rows, one block, several, and halves, below and above OpenBLAS's
/// threading threshold, with and without a bias.
fn calibrate(b: Blocking) -> Result<bool> {
    const PROBES: [(i32, i32, i32, bool); 9] = [
        (1, 64, 40, false),
        (1, 1024, 64, false),
        (2, 1024, 40, true),
        (1, 960, 24, false),
        (2, 3072, 16, false),
        (1, 1536, 520, true),
        (2, 4096, 70, false),
        (1, 2048, 300, false),
        (1, 5120, 24, false),
    ];
    for (i, &(m, k, n, with_bias)) in PROBES.iter().enumerate() {
        let data = |len: i32, seed: u64| -> Result<Array> {
            let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let v: Vec<f32> = (0..len)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    (s >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
                })
                .collect();
            Array::from_slice(&v, &[len])
        };
        let x = data(m * k, 3 * i as u64 + 1)?.reshape(&[m, k])?;
        let w = data(n * k, 3 * i as u64 + 2)?.reshape(&[n, k])?;
        let bias = if with_bias { Some(data(n, 3 * i as u64 + 3)?) } else { None };
        let want = match &bias {
            Some(c) => c.addmm(&x, &w.t()?, 1.0, 1.0)?,
            None => x.matmul(&w.t()?)?,
        };
        let got = run(&x, &w, bias.as_ref(), b)?;
        let (want, got) = (want.to_vec::<f32>()?, got.to_vec::<f32>()?);
        if want.iter().zip(&got).any(|(a, b)| a.to_bits() != b.to_bits()) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The `(start, len)` blocks OpenBLAS's level-3 driver cuts `k` into.
fn k_blocks(k: usize, b: Blocking) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < k {
        let rest = k - start;
        let len = if rest >= 2 * b.q {
            b.q
        } else if rest > b.q {
            rest / 2
        } else {
            rest
        };
        out.push((start, len));
        start += len;
    }
    out
}

/// Below this many multiply-adds one thread does it all.
const PARALLEL_MIN: usize = 1 << 18;

const GEMV: KernelF32 = |params, inputs, out| {
    let [k, n, q] = [params[0], params[1], params[2]].map(|v| v as usize);
    let (x, w, bias) = (inputs[0], inputs[1], inputs.get(2).copied());
    let ok = k > 0 && n > 0 && q > 0 && w.len() == n * k && x.len() % k == 0 && out.len() == x.len() / k * n
        && bias.map_or(true, |b| b.len() == n);
    if !ok {
        out.fill(f32::NAN);
        return;
    }
    let p = Problem { x, w, bias, m: x.len() / k, n, k, blocks: k_blocks(k, Blocking { q }) };
    let out = OutPtr(out.as_mut_ptr());
    par_ranges(n.div_ceil(BLOCK), p.m * n * k >= PARALLEL_MIN, |blocks| {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the kernel is only built after `has_avx2_fma` (in `blocking`).
        unsafe {
            if p.m == 1 {
                avx2::blocks::<1>(&p, blocks, out)
            } else {
                avx2::blocks::<2>(&p, blocks, out)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = blocks;
    });
};

struct Problem<'a> {
    x: &'a [f32],
    w: &'a [f32],
    bias: Option<&'a [f32]>,
    m: usize,
    n: usize,
    k: usize,
    blocks: Vec<(usize, usize)>,
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::{OutPtr, Problem, BLOCK};
    use crate::qmm_cpu::avx2::tile_words;

    const TILES: usize = BLOCK / 8;

    /// Column blocks of 32 outputs for `R` rows: each lane sums its own
    /// column's block in `k` order with fused multiply-adds, and adds each
    /// block's sum to its output. Eight `k` of eight rows are read as eight
    /// row loads and a transpose. Columns past `n` repeat the last column and
    /// are not written.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn blocks<const R: usize>(p: &Problem, blocks: Range<usize>, out: OutPtr) {
        let w = p.w.as_ptr().cast::<u32>();
        for block in blocks {
            let n0 = block * BLOCK;
            let mut rows = [[0i32; 8]; TILES];
            for (t, r) in rows.iter_mut().enumerate() {
                for (j, v) in r.iter_mut().enumerate() {
                    *v = ((n0 + t * 8 + j).min(p.n - 1) * p.k) as i32;
                }
            }
            let offsets: [__m256i; TILES] = std::array::from_fn(|t| _mm256_loadu_si256(rows[t].as_ptr().cast()));
            let mut c = [[_mm256_setzero_ps(); TILES]; R];
            if let Some(b) = p.bias {
                for t in 0..TILES {
                    let cols: [f32; 8] = std::array::from_fn(|j| b[(n0 + t * 8 + j).min(p.n - 1)]);
                    for cr in c.iter_mut() {
                        cr[t] = _mm256_loadu_ps(cols.as_ptr());
                    }
                }
            }
            for &(start, len) in &p.blocks {
                // Two tiles (16 rows) at a time: two independent sums per row of
                // `x` in flight, and few enough rows read side by side that their
                // lines stay in the L1 cache (rows 4 KiB apart share its sets).
                for tp in (0..TILES).step_by(2) {
                    let mut acc = [[_mm256_setzero_ps(); 2]; R];
                    let mut kk = start;
                    while kk < start + len {
                        let count = (start + len - kk).min(8);
                        for d in 0..2 {
                            let t = tp + d;
                            if count == 8 {
                                for &r in &rows[t] {
                                    // A prefetch past the buffer's end is harmless (it never faults).
                                    _mm_prefetch::<_MM_HINT_T0>(w.add(r as usize + kk + 64).cast());
                                }
                            }
                            let v = tile_words(w, &rows[t], offsets[t], kk, count);
                            for (i, &vi) in v.iter().enumerate().take(count) {
                                let wv = _mm256_castsi256_ps(vi);
                                for r in 0..R {
                                    let xv = _mm256_set1_ps(*p.x.get_unchecked(r * p.k + kk + i));
                                    acc[r][d] = _mm256_fmadd_ps(xv, wv, acc[r][d]);
                                }
                            }
                        }
                        kk += count;
                    }
                    for r in 0..R {
                        for d in 0..2 {
                            c[r][tp + d] = _mm256_add_ps(c[r][tp + d], acc[r][d]);
                        }
                    }
                }
            }
            for (r, cr) in c.iter().enumerate() {
                for (t, &ct) in cr.iter().enumerate() {
                    let mut lanes = [0f32; 8];
                    _mm256_storeu_ps(lanes.as_mut_ptr(), ct);
                    for (j, &v) in lanes.iter().enumerate() {
                        let col = n0 + t * 8 + j;
                        if col < p.n {
                            *out.0.add(r * p.n + col) = v;
                        }
                    }
                }
            }
        }
    }
}
