//! Attention for one new query position per sequence against its KV cache,
//! as one float32 CPU kernel: the query scaling, the grouped heads (GQA), the
//! scores, the softmax, the weighted sums and the heads back to rows, which
//! MLX's ops make about a dozen graph nodes per layer of a decode step, each
//! with its dispatch, thread wake-up and allocation (docs/decode-profile.md).
//!
//! It reads the keys and values where the cache holds them: the cache's whole
//! buffers `[rows, n_kv, capacity, D]`, of which the first `len` positions are
//! attended (the fetched slice of a buffer is not one block, and reading it
//! as one would cost a copy of the cache per step).
//!
//! Not MLX's bits: each score is eight lanes of fused multiply-adds over the
//! head dimension, added in a fixed tree, and the weighted sums are divided
//! by the softmax's sum at the end. MLX's path sums through OpenBLAS, whose
//! order depends on its core type, so no one order equals it on every CPU:
//! the model uses this kernel in `precision: 'fast'` only
//! (`lm::models::attention`). Written once in portable Rust and compiled
//! twice (`avx2_fma_dispatch!`: AVX2 and FMA, and without), so it gives the
//! same bits on every CPU.
use std::cell::RefCell;

use crate::cpu::kernel::{cpu_kernel_f32, par_ranges, Kernel, KernelF32, OutPtr};
use crate::cpu::math::cpu_exp;
use crate::cpu::row_ops::row_max_of_numbers;
use crate::{Array, Dtype, Result};

/// A cache's keys and values `[rows, n_kv, capacity, D]` for `rows`
/// consecutive sequences of the batch, of which the first `len` positions
/// are attended.
pub struct CachedKv<'a> {
    pub keys: &'a Array,
    pub values: &'a Array,
    pub len: i32,
}

/// Below this many multiply-adds one thread does it all (a hand-off to
/// rayon's pool costs tens of microseconds).
const PARALLEL_MIN: usize = 1 << 20;
/// Parameters before the per-cache ones, and per cache.
const FIXED: usize = 5;
const PER_CACHE: usize = 3;

/// `q` `[B, n_q, 1, D]` (after RoPE) against `kv`, whose rows add up to `B`
/// in batch order; returns `[B, 1, n_q * D]`: the heads' outputs side by side,
/// as the output projection takes them. `None` where the kernel does not
/// apply (switched off, not the CPU, not float32, more than
/// one query position, `D` not a multiple of 8, `n_q` not a multiple of
/// `n_kv`, an empty cache, shapes that do not fit): the caller then runs
/// MLX's ops.
pub fn decode_attention(q: &Array, kv: &[CachedKv], scale: f32) -> Result<Option<Array>> {
    if kv.is_empty() || !Kernel::DecodeAttention.enabled() {
        return Ok(None);
    }
    if q.dtype() != Dtype::Float32 || q.ndim() != 4 || q.dim(2) != 1 || kv[0].keys.ndim() != 4 {
        return Ok(None);
    }
    let (b, n_q, d) = (q.dim(0), q.dim(1), q.dim(3));
    let n_kv = kv[0].keys.dim(1);
    // Sizes travel as float parameters: exact below 2^24.
    let small = |s: i64| (0..1 << 24).contains(&s);
    let fits_cache = |c: &CachedKv| {
        let (k, v) = (c.keys, c.values);
        k.dtype() == Dtype::Float32
            && v.dtype() == Dtype::Float32
            && k.ndim() == 4
            && k.shape() == v.shape()
            && k.dim(1) == n_kv
            && k.dim(3) == d
            && c.len > 0
            && c.len <= k.dim(2)
            && small(k.dim(2) as i64)
    };
    let rows: i64 = kv.iter().map(|c| c.keys.dim(0) as i64).sum();
    let fits = d > 0
        && d % 8 == 0
        && n_kv > 0
        && n_q % n_kv == 0
        && rows == b as i64
        && small(b as i64 * n_q as i64 * d as i64)
        && kv.iter().all(fits_cache);
    if !fits {
        return Ok(None);
    }
    let mut params = vec![b as f32, n_q as f32, n_kv as f32, d as f32, scale];
    let mut inputs = vec![q];
    for c in kv {
        params.extend([c.keys.dim(0) as f32, c.keys.dim(2) as f32, c.len as f32]);
        inputs.extend([c.keys, c.values]);
    }
    cpu_kernel_f32("DecodeAttention", DECODE, &params, &inputs, &[b, 1, n_q * d]).map(Some)
}

/// One cache's buffers as the kernel sees them.
struct Cached<'a> {
    keys: &'a [f32],
    values: &'a [f32],
    rows: usize,
    capacity: usize,
    len: usize,
}

/// The kernel's inputs, checked against its parameters.
struct Problem<'a> {
    q: &'a [f32],
    caches: Vec<Cached<'a>>,
    b: usize,
    n_q: usize,
    n_kv: usize,
    d: usize,
    scale: f32,
}

impl<'a> Problem<'a> {
    fn new(params: &[f32], inputs: &[&'a [f32]], out_len: usize) -> Option<Problem<'a>> {
        let n = params.len().checked_sub(FIXED)? / PER_CACHE;
        if params.len() != FIXED + PER_CACHE * n || inputs.len() != 1 + 2 * n || n == 0 {
            return None;
        }
        let [b, n_q, n_kv, d] = [0, 1, 2, 3].map(|i| params[i] as usize);
        let mut caches = Vec::with_capacity(n);
        for (i, p) in params[FIXED..].chunks_exact(PER_CACHE).enumerate() {
            let [rows, capacity, len] = [0, 1, 2].map(|j| p[j] as usize);
            let (keys, values) = (inputs[1 + 2 * i], inputs[2 + 2 * i]);
            if keys.len() != rows * n_kv * capacity * d || values.len() != keys.len() || len == 0 || len > capacity {
                return None;
            }
            caches.push(Cached { keys, values, rows, capacity, len });
        }
        let ok = d > 0
            && d % 8 == 0
            && n_kv > 0
            && n_q % n_kv == 0
            && inputs[0].len() == b * n_q * d
            && out_len == b * n_q * d
            && caches.iter().map(|c| c.rows).sum::<usize>() == b;
        ok.then_some(Problem { q: inputs[0], caches, b, n_q, n_kv, d, scale: params[4] })
    }

    /// The cache of batch row `row` and that row's place in it.
    fn cache_of(&self, mut row: usize) -> (&Cached<'a>, usize) {
        for c in &self.caches {
            if row < c.rows {
                return (c, row);
            }
            row -= c.rows;
        }
        unreachable!("Problem::new checked that the caches' rows add up to B")
    }
}

const DECODE: KernelF32 = |params, inputs, out| {
    let Some(p) = Problem::new(params, inputs, out.len()) else {
        out.fill(f32::NAN);
        return;
    };
    let positions: usize = p.caches.iter().map(|c| c.rows * c.len).sum();
    let work = 2 * positions * p.n_q * p.d;
    let out = OutPtr(out.as_mut_ptr());
    par_ranges(p.b * p.n_kv, work >= PARALLEL_MIN, |units| {
        for unit in units {
            group(&p, unit / p.n_kv, unit % p.n_kv, out);
        }
    });
};

thread_local! {
    /// Scaled queries, then scores and weights: reused from call to call
    /// (no allocation per layer).
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

crate::avx2_fma_dispatch!(fn group(p: &Problem, b: usize, g: usize, out: OutPtr) => group_body);

/// Batch row `b`, key/value head `g`: its `n_q / n_kv` query heads, each
/// scored against the cache's keys, the softmax's exponentials, the weighted
/// values, divided by the exponentials' sum.
#[inline(always)]
fn group_body(p: &Problem, b: usize, g: usize, out: OutPtr) {
    let (c, row) = p.cache_of(b);
    let (d, len) = (p.d, c.len);
    let rep = p.n_q / p.n_kv;
    let head0 = b * p.n_q + g * rep;
    let at = (row * p.n_kv + g) * c.capacity * d;
    let (keys, values) = (&c.keys[at..at + len * d], &c.values[at..at + len * d]);
    // SAFETY: `out` holds `B * n_q * d` floats (checked by `Problem::new`),
    // and this unit alone writes its heads' `rep * d` of them.
    let out = unsafe { std::slice::from_raw_parts_mut(out.0.add(head0 * d), rep * d) };
    // Taken out of its cell and put back after: the arithmetic must not run in a
    // closure, which may not be inlined into the AVX2 copy (`avx2_fma_dispatch!`).
    let mut s = SCRATCH.with(RefCell::take);
    s.clear();
    s.resize(rep * (d + len), 0.0);
    let (qs, scores) = s.split_at_mut(rep * d);
    // The queries times the scale, once.
    for (dst, &x) in qs.iter_mut().zip(&p.q[head0 * d..(head0 + rep) * d]) {
        *dst = x * p.scale;
    }
    // Four keys at a time: four independent sums, so the multiply-adds do not
    // wait on each other (each score's own order is `dot`'s).
    let quads = len / 4;
    for (r, q) in qs.chunks_exact(d).enumerate() {
        let row = &mut scores[r * len..(r + 1) * len];
        for j in 0..quads {
            let k = |i: usize| &keys[(4 * j + i) * d..(4 * j + i + 1) * d];
            row[4 * j..4 * j + 4].copy_from_slice(&dot4(q, [k(0), k(1), k(2), k(3)]));
        }
        for j in 4 * quads..len {
            row[j] = dot(q, &keys[j * d..(j + 1) * d]);
        }
    }
    for (weights, o) in scores.chunks_exact_mut(len).zip(out.chunks_exact_mut(d)) {
        let inv = 1.0 / exp_in_place(weights);
        o.fill(0.0);
        for (&w, v) in weights.iter().zip(values.chunks_exact(d)) {
            for (o, &v) in o.iter_mut().zip(v) {
                *o = w.mul_add(v, *o);
            }
        }
        for o in o.iter_mut() {
            *o *= inv;
        }
    }
    SCRATCH.with(|cell| cell.replace(s));
}

/// Eight lanes of fused multiply-adds over `q` and `k` (a multiple of 8
/// long), then `lanes_sum`.
#[inline(always)]
fn dot(q: &[f32], k: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    for (q, k) in q.chunks_exact(8).zip(k.chunks_exact(8)) {
        for l in 0..8 {
            acc[l] = q[l].mul_add(k[l], acc[l]);
        }
    }
    lanes_sum(&acc)
}

/// `dot` of `q` with four keys at once.
#[inline(always)]
fn dot4(q: &[f32], k: [&[f32]; 4]) -> [f32; 4] {
    let mut acc = [[0f32; 8]; 4];
    for c in (0..q.len()).step_by(8) {
        let q = &q[c..c + 8];
        for (a, k) in acc.iter_mut().zip(k) {
            let k = &k[c..c + 8];
            for l in 0..8 {
                a[l] = q[l].mul_add(k[l], a[l]);
            }
        }
    }
    acc.map(|a| lanes_sum(&a))
}

/// Eight lanes added in a fixed tree (as a vector's halves are added).
#[inline(always)]
fn lanes_sum(a: &[f32; 8]) -> f32 {
    ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

/// `exp(score - max)` in place (MLX's CPU `exp`); returns their sum: eight
/// lanes of sums, then `lanes_sum`.
#[inline(always)]
fn exp_in_place(x: &mut [f32]) -> f32 {
    let max = row_max_of_numbers(x);
    let mut lanes = [0f32; 8];
    // Whole groups of eight apart, so that they vectorize.
    let mut chunks = x.chunks_exact_mut(8);
    for chunk in &mut chunks {
        for l in 0..8 {
            chunk[l] = cpu_exp(chunk[l] - max);
            lanes[l] += chunk[l];
        }
    }
    for (v, lane) in chunks.into_remainder().iter_mut().zip(lanes.iter_mut()) {
        *v = cpu_exp(*v - max);
        *lane += *v;
    }
    lanes_sum(&lanes)
}
