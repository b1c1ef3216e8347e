//! A decode step's attention over float32 KV caches with the bits of MLX's
//! own CPU attention (`precision: 'exact'`), as one node reading the caches'
//! buffers in place.
//!
//! MLX runs attention on the CPU as its `fast.cpp` fallback: the queries
//! times the scale, then per batch row, key head and query head sharing it
//! one `cblas_sgemm` for the scores (one row against the held keys), MLX's
//! softmax, and one more `sgemm` for the weighted sum of the values. For a
//! decode step every call is a single row, and OpenBLAS spends it packing the
//! keys or values (at 408 positions, 23% of an exact Qwen3-0.6B step went to
//! `sgemm_incopy`/`itcopy`, on one thread). Here each key head is one task:
//! the scores by `cpu::gemv` (OpenBLAS's sums for that call, calibrated),
//! `cpu::math`'s row softmax (MLX's), and the weighted sum in OpenBLAS's
//! order for the values' call: the positions cut into its K blocks, each
//! block summed from zero in position order by fused multiply-adds, the
//! block sums added in order (OpenBLAS's AVX-512 core types sum short calls
//! as one such chain, see `Split::whole`).
//!
//! How OpenBLAS cuts an odd count of positions into blocks is not assumed:
//! the first call compares the weighted sum with MLX's matmul on probe
//! shapes for a few candidate rules, and the kernel runs only if one gives
//! MLX's bits on all of them (and `cpu::gemv` is calibrated); otherwise the
//! caller runs MLX's ops. `MLX_NODE_GEMV_KERNEL=0` or
//! `MLX_NODE_ATTENTION_KERNEL=0` switch it off.
// These kernels are built only on x86-64 with AVX2 and FMA (the instructions whose
// results they must equal); elsewhere MLX's own op runs and their parts go unused.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_variables))]
use std::sync::OnceLock;

use crate::cpu::decode_attention::CachedKv;
use crate::cpu::gemv;
use crate::cpu::kernel::{cpu_kernel_f32, par_ranges, Kernel, KernelF32, OutPtr};
use crate::cpu::math::softmax_rows;
use crate::{Array, Dtype, Result};

/// Below this many multiply-adds one thread does it all.
const PARALLEL_MIN: usize = 1 << 17;
/// Parameters before the per-cache ones, and per cache.
const FIXED: usize = 5;
const PER_CACHE: usize = 3;

/// How OpenBLAS's level-3 driver cuts `k` (here: the positions) into blocks:
/// blocks of `q` while two more would fit, then the rest in two, the first
/// half rounded as below (its single-threaded and threaded drivers round
/// differently, and the unroll differs by core type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Halves {
    /// `(rest / 2)` rounded up to a multiple of this.
    Up(usize),
    /// `(rest + 1) / 2`.
    Ceil,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Split {
    q: usize,
    /// Calls of at most `THREADED_MIN` multiply-adds (one thread).
    halves: Halves,
    /// Longer calls (OpenBLAS's threaded driver, where it has threads).
    threaded: Halves,
    /// Calls of at most this many multiply-adds are one chain over all the
    /// positions (0: none). OpenBLAS's AVX-512 core types send small
    /// `NoTrans x NoTrans` products to kernels that skip the blocking: its
    /// "direct" `sgemm` (up to 2 * 350 * 512 multiply-adds with threads, up to
    /// 28 * 512 * 512 without) and then its small-matrix kernel (up to 1e6);
    /// both sum each output from zero in order by fused multiply-adds.
    whole: usize,
}

/// The candidates for `Split::whole`: none (Haswell, Zen), the small-matrix
/// limit (AVX-512 with threads) and the direct limit (AVX-512, one thread).
const WHOLE: [usize; 3] = [0, 1_000_000, 28 * 512 * 512 - 1];

/// OpenBLAS's `sgemm` runs its threaded driver above this many multiply-adds
/// (`SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD`, 65536 * 4).
const THREADED_MIN: usize = 262_144;

impl Split {
    /// The blocks of `k` positions for a weighted sum of `d` outputs.
    fn blocks(self, k: usize, d: usize) -> Vec<(usize, usize)> {
        if k * d <= self.whole {
            return vec![(0, k)];
        }
        let halves = if k * d > THREADED_MIN { self.threaded } else { self.halves };
        gemv::blocks_of(k, self.q, |rest| match halves {
            Halves::Up(u) => (rest / 2).div_ceil(u) * u,
            Halves::Ceil => rest.div_ceil(2),
        })
    }
}

/// `q` `[B, n_q, 1, D]` (after RoPE) against `kv`, whose rows add up to `B`
/// in batch order, each row seeing its cache's first `len` positions: MLX's
/// `scaled_dot_product_attention(q, keys, values, scale)` with no mask, bit
/// for bit, as `[B, 1, n_q * D]` (the heads side by side, as the output
/// projection takes them). `None` where the kernel does not apply: switched
/// off, not calibrated, not the CPU, not float32, more than one query
/// position, `D` not a multiple of 64, `n_q` not a multiple of `n_kv`, an
/// empty cache, shapes that do not fit.
pub fn exact_decode_attention(q: &Array, kv: &[CachedKv], scale: f32) -> Result<Option<Array>> {
    if kv.is_empty() || !Kernel::Attention.enabled() || q.dtype() != Dtype::Float32 || q.ndim() != 4 || q.dim(2) != 1 {
        return Ok(None);
    }
    let (b, n_q, d) = (q.dim(0), q.dim(1), q.dim(3));
    let n_kv = kv[0].keys.dim(1).max(1);
    let small = |s: i64| (0..1 << 24).contains(&s);
    let fits_cache = |c: &CachedKv| {
        let (k, v) = (c.keys, c.values);
        k.dtype() == Dtype::Float32
            && v.dtype() == Dtype::Float32
            && k.ndim() == 4
            && k.shape() == v.shape()
            && k.dim(1) == n_kv
            && k.dim(3) == d
            && c.len >= 1
            && c.len <= k.dim(2)
            && small(k.dim(2) as i64)
            && small(k.size() as i64)
    };
    let rows: i64 = kv.iter().map(|c| c.keys.dim(0) as i64).sum();
    let fits = d > 0 && d % 64 == 0 && n_q % n_kv == 0 && rows == b as i64 && small(q.size() as i64) && kv.iter().all(fits_cache);
    if !fits || split().is_none() {
        return Ok(None);
    }
    let mut params = vec![b as f32, n_q as f32, n_kv as f32, d as f32, scale];
    let mut inputs = vec![q];
    for c in kv {
        params.extend([c.keys.dim(0) as f32, c.keys.dim(2) as f32, c.len as f32]);
        inputs.extend([c.keys, c.values]);
    }
    Ok(Some(cpu_kernel_f32("ExactDecodeAttention", EXACT, &params, &inputs, &[b, 1, n_q * d])?))
}

/// Whether the kernel is calibrated in this process (it may still decline an input).
pub fn active() -> bool {
    Kernel::Attention.enabled() && split().is_some()
}

/// The rule the calibration found, for reports: `None` where it found none.
pub fn rule() -> Option<String> {
    split().map(|s| format!("{s:?}"))
}

fn split() -> Option<Split> {
    static CHOSEN: OnceLock<Option<Split>> = OnceLock::new();
    *CHOSEN.get_or_init(|| {
        let q = gemv::chosen()?.q;
        let candidates = [Halves::Up(8), Halves::Ceil, Halves::Up(16), Halves::Up(4), Halves::Up(1), Halves::Up(32)];
        let splits = WHOLE
            .into_iter()
            .flat_map(|whole| candidates.into_iter().flat_map(move |halves| candidates.map(|threaded| Split { q, halves, threaded, whole })));
        let probes = probes().ok()?;
        splits.into_iter().find(|&s| fits(s, &probes))
    })
}

/// Probe `(positions, D)`: below, at and past one block, odd rests that each
/// rounding cuts differently, long ones past OpenBLAS's threading threshold
/// (`D * positions` > 262144 multiply-adds), and on both sides of the AVX-512
/// core types' limits for one chain (`WHOLE`: 358,400 and 1e6 with threads,
/// 7,340,032 without), where another summation would show.
const PROBES: [(i32, i32); 18] = [
    (1, 64),
    (37, 128),
    (320, 128),
    (333, 64),
    (411, 128),
    (509, 128),
    (641, 64),
    (700, 128),
    (1001, 128),
    (1283, 64),
    (2501, 128),
    (3001, 256),
    (4133, 128),
    (7001, 128),
    (8203, 128),
    (15001, 64),
    (16411, 64),
    (57345, 128),
];

/// A probe's weights `p`, values `v` (`[n, d]`) and MLX's `p @ v`.
struct Probe {
    d: usize,
    p: Vec<f32>,
    v: Vec<f32>,
    want: Vec<f32>,
}

fn probes() -> Result<Vec<Probe>> {
    let mut out = Vec::with_capacity(PROBES.len());
    for (i, &(n, d)) in PROBES.iter().enumerate() {
        let p = gemv::probe_data(n, 5 * i as u64 + 1, 0.0, 1.0 / n as f32)?.reshape(&[1, n])?;
        let v = gemv::probe_data(n * d, 5 * i as u64 + 2, -2.0, 2.0)?.reshape(&[n, d])?;
        let want = p.matmul(&v)?.to_vec::<f32>()?;
        out.push(Probe { d: d as usize, p: p.to_vec::<f32>()?, v: v.to_vec::<f32>()?, want });
    }
    Ok(out)
}

/// Whether the weighted sum with `s` gives MLX's `p @ v` bit for bit on every probe.
fn fits(s: Split, probes: &[Probe]) -> bool {
    probes.iter().all(|pr| {
        let mut got = vec![0f32; pr.d];
        weighted_sum(&pr.p, &pr.v, pr.d, &s.blocks(pr.p.len(), pr.d), &mut got);
        pr.want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits())
    })
}

const EXACT: KernelF32 = |params, inputs, out| {
    if params.len() < FIXED {
        out.fill(f32::NAN);
        return;
    }
    let [b, n_q, n_kv, d] = [params[0], params[1], params[2], params[3]].map(|v| v as usize);
    let scale = params[4];
    let caches = (params.len() - FIXED) / PER_CACHE;
    let ok = b > 0
        && n_kv > 0
        && n_q % n_kv == 0
        && d % 64 == 0
        && (params.len() - FIXED).is_multiple_of(PER_CACHE)
        && inputs.len() == 1 + 2 * caches
        && inputs[0].len() == b * n_q * d
        && out.len() == b * n_q * d;
    let Some(split) = split().filter(|_| ok) else {
        out.fill(f32::NAN);
        return;
    };
    // Per batch row: its cache's keys, values, capacity, length and row within the cache.
    let mut seqs = Vec::with_capacity(b);
    for c in 0..caches {
        let at = FIXED + c * PER_CACHE;
        let [rows, cap, len] = [params[at], params[at + 1], params[at + 2]].map(|v| v as usize);
        let (keys, values) = (inputs[1 + 2 * c], inputs[2 + 2 * c]);
        if len == 0 || len > cap || keys.len() != rows * n_kv * cap * d || values.len() != keys.len() {
            out.fill(f32::NAN);
            return;
        }
        seqs.extend((0..rows).map(|r| (keys, values, cap, len, r)));
    }
    if seqs.len() != b {
        out.fill(f32::NAN);
        return;
    }
    let rep = n_q / n_kv;
    let work: usize = seqs.iter().map(|s| s.3).sum::<usize>() * n_q * d * 2;
    let dst = OutPtr(out.as_mut_ptr());
    par_ranges(b * n_kv, work >= PARALLEL_MIN, |units| {
        let (mut x, mut scores, mut sums) = (vec![0f32; rep * d], Vec::new(), vec![0f32; d]);
        for unit in units {
            let (row, h) = (unit / n_kv, unit % n_kv);
            let (keys, values, cap, len, r) = seqs[row];
            // MLX's `multiply(scale, q)`: one rounding per value.
            let q0 = (row * n_q + h * rep) * d;
            for (xi, &qi) in x.iter_mut().zip(&inputs[0][q0..q0 + rep * d]) {
                *xi = scale * qi;
            }
            let head = (r * n_kv + h) * cap * d;
            scores.resize(rep * len, 0.0);
            if !gemv::rows_times_t(&x, &keys[head..head + len * d], rep, len, d, &mut scores) {
                scores.fill(f32::NAN);
            }
            softmax_rows(&mut scores, len);
            let blocks = split.blocks(len, d);
            for (i, p) in scores.chunks_exact(len).enumerate() {
                weighted_sum(p, &values[head..head + len * d], d, &blocks, &mut sums);
                // SAFETY: each unit writes its own heads' `rep * d` outputs of its row, inside `out`.
                unsafe { write(dst, q0 + i * d, &sums) };
            }
        }
    });
};

/// `src` to `dst` from `at` on.
///
/// # Safety
/// `at + src.len()` within the buffer, which no other thread writes there.
unsafe fn write(dst: OutPtr, at: usize, src: &[f32]) {
    std::ptr::copy_nonoverlapping(src.as_ptr(), dst.0.add(at), src.len());
}

/// `out[j] = sum over i of p[i] * v[i * d + j]`, the positions in `blocks`:
/// each block summed from zero in order by fused multiply-adds, the block
/// sums added in order to an output that starts at +0 (OpenBLAS zeroes `C`
/// and adds each block's sum to it, so a -0 total comes out +0).
fn weighted_sum(p: &[f32], v: &[f32], d: usize, blocks: &[(usize, usize)], out: &mut [f32]) {
    debug_assert!(d.is_multiple_of(32) && v.len() >= p.len() * d && out.len() == d);
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::math::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA; the slices are checked by the callers' sizes
        // (`v` holds `p.len()` rows of `d`, `out` `d` values, `d` a multiple of 32).
        unsafe { x86::weighted_sum(p, v, d, blocks, out) };
        return;
    }
    for (j, o) in out.iter_mut().enumerate() {
        let mut c = 0f32;
        for &(s, l) in blocks {
            let mut a = 0f32;
            for i in s..s + l {
                a = p[i].mul_add(v[i * d + j], a);
            }
            c += a;
        }
        *o = c;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Four vectors of outputs at a time, each lane its own chain.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn weighted_sum(p: &[f32], v: &[f32], d: usize, blocks: &[(usize, usize)], out: &mut [f32]) {
        let (p, v) = (p.as_ptr(), v.as_ptr());
        for j0 in (0..d).step_by(32) {
            let mut c = [_mm256_setzero_ps(); 4];
            for &(s, l) in blocks {
                let mut a = [_mm256_setzero_ps(); 4];
                for i in s..s + l {
                    let pi = _mm256_broadcast_ss(&*p.add(i));
                    let row = v.add(i * d + j0);
                    for (t, at) in a.iter_mut().enumerate() {
                        *at = _mm256_fmadd_ps(pi, _mm256_loadu_ps(row.add(8 * t)), *at);
                    }
                }
                for t in 0..4 {
                    c[t] = _mm256_add_ps(c[t], a[t]);
                }
            }
            for (t, ct) in c.iter().enumerate() {
                _mm256_storeu_ps(out.as_mut_ptr().add(j0 + 8 * t), *ct);
            }
        }
    }
}
