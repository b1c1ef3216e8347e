//! `x @ w.T (+ bias)` in float32 for one to eight rows of `x` (a decode step,
//! T3's guidance pair, a batch of sequences decoding together) with the very
//! bits OpenBLAS's `sgemm` gives, without its packing.
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
//! OpenBLAS's AVX-512 core types (SkylakeX, Cooperlake, SapphireRapids) use
//! another `Q`, and send small products to a kernel with another summation
//! order (`lanes16`), reproduced too.
//!
//! The blocking depends on OpenBLAS's build and CPU, so it is not assumed: the
//! first call compares the kernel with MLX's matmul on probe shapes for a few
//! candidate blockings, and the kernel is used only if one of them gives the
//! same bits on every probe (with any other BLAS, or none matching, MLX's
//! matmul runs as before). `MLX_NODE_GEMV_KERNEL=0` switches it off.
// These kernels are built only on x86-64 with AVX2 and FMA (the instructions whose
// results they must equal); elsewhere MLX's own op runs and their parts go unused.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_variables))]
use std::sync::OnceLock;

use crate::cpu::kernel::{cpu_kernel_f32, par_ranges, Kernel, KernelF32, OutPtr};
use crate::cpu::math::has_avx2_fma;
use crate::{Array, Dtype, Result};

#[cfg(target_arch = "x86_64")]
mod blocked;
#[cfg(target_arch = "x86_64")]
mod lanes16;

/// Output columns per block: four vectors of eight.
const BLOCK: usize = 32;

/// The most rows of `x` the kernel takes. Up to here a product reads its
/// weights once and does little arithmetic per weight; longer inputs (prompts)
/// are arithmetic-bound, where `sgemm`'s packing pays for itself.
pub const MAX_ROWS: usize = 8;

/// How OpenBLAS sums `x @ w.T` here.
///
/// `q`: its K blocking, blocks of `q`, the last two halves of the rest.
/// (The halves are rounded up to the kernel's unroll, 4 to 16 depending on
/// the core type and driver; with `k` a multiple of 64 they are multiples of
/// 32 and need no rounding, so only such `k` take the kernel.)
///
/// `small`: whether products with at most 1200 outputs (`n * rows`) and 1e6
/// multiply-adds go to the AVX-512 small-matrix kernel (`lanes16`) instead,
/// as `sgemm_small_kernel_permit` decides for the TN case MLX's call becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocking {
    pub q: usize,
    pub small: bool,
}

impl Blocking {
    fn takes_small_path(&self, rows: usize, n: usize, k: usize) -> bool {
        self.small && rows * n <= 1200 && (rows * n * k) as f64 <= 1e6 && k >= 32
    }
}

/// Candidates tried by the calibration. OpenBLAS 0.3.21's GEMM_Q: 320 on Zen
/// and Haswell, 448 on SkylakeX, 320 on Cooperlake and SapphireRapids (which
/// also have the small-matrix kernel); 256, 384 and 512 as other builds set.
const CANDIDATES: [Blocking; 6] = [
    Blocking { q: 320, small: false },
    Blocking { q: 448, small: true },
    Blocking { q: 320, small: true },
    Blocking { q: 384, small: false },
    Blocking { q: 256, small: false },
    Blocking { q: 512, small: false },
];

/// `x @ w.T`, plus `bias` when given (MLX's `addmm(bias, x, w.T)`), by the
/// kernel; `None` where it does not apply: another dtype or device, more than
/// `MAX_ROWS` rows (more than two where `more_rows` is false), `k` not a
/// multiple of 64 (see `Blocking`), no calibrated blocking.
pub fn matmul_t(x: &Array, w: &Array, bias: Option<&Array>) -> Result<Option<Array>> {
    if x.dtype() != Dtype::Float32 || w.dtype() != Dtype::Float32 || w.ndim() != 2 || x.ndim() == 0 {
        return Ok(None);
    }
    let (n, k) = (w.dim(0), w.dim(1));
    let rows = if k > 0 { x.size() / k as usize } else { 0 };
    let bias_ok = bias.is_none_or(|b| b.dtype() == Dtype::Float32 && b.shape() == [n]);
    let rows_ok = (1..=2).contains(&rows) || ((3..=MAX_ROWS).contains(&rows) && more_rows());
    if x.dim(-1) != k || !rows_ok || k % 64 != 0 || n <= 0 || !bias_ok || n >= 1 << 24 || k >= 1 << 24
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

/// The blocking the calibration found, `None` when the kernel is off.
pub fn chosen() -> Option<Blocking> {
    blocking()
}

/// Whether the kernel also takes three to `MAX_ROWS` rows: its blocking gave
/// OpenBLAS's bits on probes of that many rows too (checked apart, so that a
/// BLAS that sums more rows otherwise keeps the kernel for one and two).
pub fn more_rows() -> bool {
    static MORE: OnceLock<bool> = OnceLock::new();
    *MORE.get_or_init(|| blocking().is_some_and(|b| calibrate(b, &MORE_ROWS_PROBES).unwrap_or(false)))
}

fn run(x: &Array, w: &Array, bias: Option<&Array>, b: Blocking) -> Result<Array> {
    let (n, k) = (w.dim(0), w.dim(1));
    let mut out_shape = x.shape();
    *out_shape.last_mut().expect("x has a last axis") = n;
    let params = [k as f32, n as f32, b.q as f32, b.small as u8 as f32];
    let mut inputs = vec![x, w];
    inputs.extend(bias);
    cpu_kernel_f32("MatmulFewRows", GEMV, &params, &inputs, &out_shape)
}

fn blocking() -> Option<Blocking> {
    static CHOSEN: OnceLock<Option<Blocking>> = OnceLock::new();
    *CHOSEN.get_or_init(|| {
        let on = Kernel::Gemv.enabled() && has_avx2_fma();
        if !on {
            return None;
        }
        CANDIDATES.into_iter().find(|&b| calibrate(b, &PROBES).unwrap_or(false))
    })
}

/// Probe shapes `(rows, k, n, bias)`: one and two rows, one block, several,
/// and halves, below and above OpenBLAS's threading threshold, with and
/// without a bias. The first nine are small enough for the AVX-512
/// small-matrix kernel (with columns past a multiple of four in two of them);
/// the last three are not, and tell its `q` apart.
const PROBES: [(i32, i32, i32, bool); 12] = [
    (1, 64, 40, false),
    (1, 1024, 64, false),
    (2, 1024, 40, true),
    (1, 960, 24, false),
    (2, 3072, 16, false),
    (1, 1536, 520, true),
    (2, 4096, 70, false),
    (1, 2048, 300, false),
    (1, 256, 7, true),
    (1, 1024, 1300, false),
    (2, 2048, 700, true),
    (1, 5120, 260, false),
];

/// Three to `MAX_ROWS` rows, on both sides of the small-matrix kernel's limits
/// (1200 outputs, 1e6 multiply-adds) and of its `q`.
const MORE_ROWS_PROBES: [(i32, i32, i32, bool); 7] = [
    (3, 1024, 300, false),
    (5, 1024, 64, false),
    (6, 512, 200, true),
    (4, 2048, 500, true),
    (7, 4096, 130, false),
    (8, 960, 150, false),
    (8, 1536, 700, true),
];

/// The kernel with blocking `b` against MLX's matmul on `probes`, bit for bit.
fn calibrate(b: Blocking, probes: &[(i32, i32, i32, bool)]) -> Result<bool> {
    for (i, &(m, k, n, with_bias)) in probes.iter().enumerate() {
        let data = |len: i32, seed: u64| probe_data(len, seed, -2.0, 2.0);
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

/// `x @ w.T` for `m` rows of `x` (`k` apart) against the `n` rows of `w` into
/// `out` (`m` x `n`), on the calling thread, each row with the bits of its own
/// one-row `sgemm` (a row's sums never depend on the others): for kernels that
/// run such products inside themselves (`cpu::exact_attention`). False, with
/// `out` untouched, where the kernel is off or the sizes do not fit (`k` a
/// multiple of 64, as `matmul_t` asks).
pub(crate) fn rows_times_t(x: &[f32], w: &[f32], m: usize, n: usize, k: usize, out: &mut [f32]) -> bool {
    let Some(b) = blocking() else { return false };
    if k == 0 || !k.is_multiple_of(64) || n == 0 || x.len() != m * k || w.len() < n * k || out.len() != m * n {
        return false;
    }
    let p = Problem { x, w: &w[..n * k], bias: None, m, n, k, blocks: k_blocks(k, b) };
    let dst = OutPtr(out.as_mut_ptr());
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `blocking` is only Some after `has_avx2_fma`; `out` holds `m * n` values.
    unsafe {
        if b.takes_small_path(1, n, k) {
            lanes16::columns(&p, 0..n, dst)
        } else {
            blocked::blocks(&p, 0..n.div_ceil(BLOCK), dst)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, dst);
    true
}

/// The `(start, len)` blocks OpenBLAS's level-3 driver cuts `k` into (with
/// `k` a multiple of 64, the half needs no rounding: see `Blocking`).
fn k_blocks(k: usize, b: Blocking) -> Vec<(usize, usize)> {
    blocks_of(k, b.q, |rest| rest / 2)
}

/// Blocks of `q` while two more would fit, then a rest of more than one
/// block in two, the first `half(rest)` long (how the driver rounds it
/// depends on the driver and the core type), else the rest whole.
pub(crate) fn blocks_of(k: usize, q: usize, half: impl Fn(usize) -> usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < k {
        let rest = k - start;
        let len = if rest >= 2 * q {
            q
        } else if rest > q {
            half(rest).clamp(1, rest)
        } else {
            rest
        };
        out.push((start, len));
        start += len;
    }
    out
}

/// `len` values in `lo..hi` from a fixed xorshift sequence (calibration probes).
pub(crate) fn probe_data(len: i32, seed: u64, lo: f32, hi: f32) -> Result<Array> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let v: Vec<f32> = (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (s >> 40) as f32 / (1u64 << 24) as f32 * (hi - lo)
        })
        .collect();
    Array::from_slice(&v, &[len])
}

/// Below this many multiply-adds one thread does it all.
const PARALLEL_MIN: usize = 1 << 18;

const GEMV: KernelF32 = |params, inputs, out| {
    let [k, n, q, small] = [params[0], params[1], params[2], params[3]].map(|v| v as usize);
    let (x, w, bias) = (inputs[0], inputs[1], inputs.get(2).copied());
    // `k % 64 == 0` (as `matmul_t` asks) makes every K block a multiple of eight.
    let ok = k > 0
        && k % 64 == 0
        && q % 64 == 0
        && n > 0
        && q > 0
        && w.len() == n * k
        && x.len() % k == 0
        && out.len() == x.len() / k * n
        && bias.is_none_or(|b| b.len() == n);
    if !ok {
        out.fill(f32::NAN);
        return;
    }
    let b = Blocking { q, small: small != 0 };
    let m = x.len() / k;
    let p = Problem { x, w, bias, m, n, k, blocks: k_blocks(k, b) };
    let out = OutPtr(out.as_mut_ptr());
    let small = b.takes_small_path(m, n, k);
    par_ranges(n.div_ceil(BLOCK), m * n * k >= PARALLEL_MIN, |blocks| {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the kernel is only built after `has_avx2_fma` (in `blocking`).
        unsafe {
            if small {
                lanes16::columns(&p, blocks.start * BLOCK..(blocks.end * BLOCK).min(p.n), out)
            } else {
                blocked::blocks(&p, blocks, out)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (blocks, small);
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
