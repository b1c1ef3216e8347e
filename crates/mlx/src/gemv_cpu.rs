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

use crate::cpu_math::has_avx2_fma;
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
    // `k % 64 == 0` (as `matmul_t` asks) makes every K block a multiple of eight.
    let ok = k > 0 && k % 64 == 0 && q % 64 == 0 && n > 0 && q > 0 && w.len() == n * k && x.len() % k == 0 && out.len() == x.len() / k * n
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

    const TILES: usize = BLOCK / 8;
    /// 64-byte lines of the next column block prefetched per step (eight `k`
    /// of one tile): a block is `BLOCK * k` floats and takes `TILES * k / 8`
    /// steps, so four lines a step reach its end as this block ends.
    const PREFETCH_LINES: usize = 4;

    /// Column blocks of 32 outputs for `R` rows: each lane sums its own
    /// column's K block in `k` order with fused multiply-adds, and adds each
    /// block's sum to its output in block order. Eight `k` of eight rows are
    /// read as eight row loads and a transpose. Columns past `n` repeat the
    /// last column and are not written.
    ///
    /// What makes it fast is which memory is touched at once. Rows are `k`
    /// floats apart, a multiple of 4 KiB in every model, so the same `k` of
    /// many rows falls in one L1 set; more than eight such rows (its ways) in
    /// flight evict each other. So one tile (eight rows) is summed at a time,
    /// and the independent sums that keep the multiply-adds busy come from
    /// two K blocks at once (other sets) rather than from more rows. And as
    /// the hardware prefetcher follows many short row streams poorly, the
    /// next column block, one contiguous run, is prefetched in address order
    /// into L2 meanwhile. (Measured here: about twice the rate of sixteen
    /// rows side by side.)
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn blocks<const R: usize>(p: &Problem, blocks: Range<usize>, out: OutPtr) {
        let w = p.w.as_ptr();
        let w_end = w.add(p.w.len()).cast::<u8>();
        for block in blocks {
            let n0 = block * BLOCK;
            let mut ahead = Ahead { next: w.add((n0 + BLOCK).min(p.n) * p.k).cast(), end: w_end };
            for t in 0..TILES {
                let cols: [usize; 8] = std::array::from_fn(|j| (n0 + t * 8 + j).min(p.n - 1));
                let rows: [*const f32; 8] = std::array::from_fn(|j| w.add(cols[j] * p.k));
                let mut c = [_mm256_setzero_ps(); R];
                if let Some(b) = p.bias {
                    let v: [f32; 8] = std::array::from_fn(|j| b[cols[j]]);
                    c = [_mm256_loadu_ps(v.as_ptr()); R];
                }
                // K blocks in pairs (the last alone when their count is odd).
                for pair in p.blocks.chunks(2) {
                    let (s0, l0) = pair[0];
                    let (s1, l1) = pair.get(1).copied().unwrap_or((s0, 0));
                    let (mut a0, mut a1) = ([_mm256_setzero_ps(); R], [_mm256_setzero_ps(); R]);
                    let both = l0.min(l1);
                    for i in (0..both).step_by(8) {
                        ahead.prefetch(2 * PREFETCH_LINES);
                        step(p, &rows, s0 + i, &mut a0);
                        step(p, &rows, s1 + i, &mut a1);
                    }
                    for i in (both..l0).step_by(8) {
                        ahead.prefetch(PREFETCH_LINES);
                        step(p, &rows, s0 + i, &mut a0);
                    }
                    for i in (both..l1).step_by(8) {
                        ahead.prefetch(PREFETCH_LINES);
                        step(p, &rows, s1 + i, &mut a1);
                    }
                    for r in 0..R {
                        c[r] = _mm256_add_ps(c[r], a0[r]);
                        // Not `+ 0.0` for a missing block: that would turn a -0 sum into +0.
                        if pair.len() == 2 {
                            c[r] = _mm256_add_ps(c[r], a1[r]);
                        }
                    }
                }
                for (r, &cr) in c.iter().enumerate() {
                    let mut lanes = [0f32; 8];
                    _mm256_storeu_ps(lanes.as_mut_ptr(), cr);
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

    /// Prefetches memory in address order up to `end`.
    struct Ahead {
        next: *const u8,
        end: *const u8,
    }

    impl Ahead {
        #[inline]
        unsafe fn prefetch(&mut self, lines: usize) {
            for _ in 0..lines {
                if self.next < self.end {
                    _mm_prefetch::<_MM_HINT_T1>(self.next.cast());
                    self.next = self.next.add(64);
                }
            }
        }
    }

    /// `k` = `kk..kk + 8` of the tile `rows` into the sums `acc` (one per row of `x`).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn step<const R: usize>(p: &Problem, rows: &[*const f32; 8], kk: usize, acc: &mut [__m256; R]) {
        let v = transposed(rows, kk);
        for (i, &wv) in v.iter().enumerate() {
            for (r, a) in acc.iter_mut().enumerate() {
                let xv = _mm256_broadcast_ss(p.x.get_unchecked(r * p.k + kk + i));
                *a = _mm256_fmadd_ps(xv, wv, *a);
            }
        }
    }

    /// `k` = `kk..kk + 8` of eight rows as eight vectors of one value per row:
    /// eight row loads and an 8x8 transpose (AMD's gathers are microcoded and
    /// cost several times as much).
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn transposed(rows: &[*const f32; 8], kk: usize) -> [__m256; 8] {
        let r: [__m256; 8] = std::array::from_fn(|j| _mm256_loadu_ps(rows[j].add(kk)));
        let t: [__m256; 8] = std::array::from_fn(|i| {
            let (a, b) = (r[2 * (i / 2)], r[2 * (i / 2) + 1]);
            if i % 2 == 0 { _mm256_unpacklo_ps(a, b) } else { _mm256_unpackhi_ps(a, b) }
        });
        // u[0..4]: rows 0-3 (k 0/4, 1/5, 2/6, 3/7 in the two halves); u[4..8]: rows 4-7.
        let u: [__m256; 8] = std::array::from_fn(|i| {
            let (a, b) = (t[4 * (i / 4) + (i % 4) / 2], t[4 * (i / 4) + (i % 4) / 2 + 2]);
            if i % 2 == 0 { _mm256_shuffle_ps::<0x44>(a, b) } else { _mm256_shuffle_ps::<0xEE>(a, b) }
        });
        std::array::from_fn(|i| {
            if i < 4 {
                _mm256_permute2f128_ps::<0x20>(u[i], u[i + 4])
            } else {
                _mm256_permute2f128_ps::<0x31>(u[i - 4], u[i])
            }
        })
    }
}

