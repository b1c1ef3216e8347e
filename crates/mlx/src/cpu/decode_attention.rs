//! Attention for the new query positions of each sequence against its KV
//! cache, as one float32 CPU kernel: the query scaling, the grouped heads
//! (GQA), the scores, the causal cut, the softmax, the weighted sums and the
//! heads back to rows, which MLX's ops make about a dozen graph nodes per
//! layer (docs/decode-profile.md). A decode step has one new position per
//! sequence; a prompt's chunk has several, each seeing the cache's earlier
//! positions and the chunk's up to its own (MLX's causal mode), so the
//! masked-out half of the scores is never computed.
//!
//! It reads the keys and values where the cache holds them: the cache's whole
//! buffers `[rows, n_kv, capacity, D]`, of which the first `len` positions are
//! attended (the fetched slice of a buffer is not one block, and reading it
//! as one would cost a copy of the cache per step). A bfloat16 or float16
//! cache (a 16-bit model's) arrives as its bits and each head is widened
//! exactly as it is read (a decode step's on x86 as each vector is loaded,
//! with no buffer between), so the arithmetic is float32's whatever the cache
//! holds, and a step reads half the bytes.
//!
//! Not MLX's bits: each score is eight lanes of fused multiply-adds over the
//! head dimension, added in a fixed tree, and the weighted sums are divided
//! by the softmax's sum at the end. MLX's path sums through OpenBLAS, whose
//! order depends on its core type, so no one order equals it on every CPU:
//! the model uses this kernel in `precision: 'fast'` only
//! (`lm::models::attention`). Each query position is computed the same way
//! whatever came with it, so a prompt's last position gets the bits a decode
//! step would give it. Written once in portable Rust and compiled twice
//! (`avx2_fma_dispatch!`: AVX2 and FMA, and without), so it gives the same
//! bits on every CPU.
use std::cell::RefCell;
use std::ops::Range;

use crate::cpu::half::f16_value;
use crate::cpu::kernel::{cpu_kernel_f32_bits16, par_ranges, Kernel, KernelF32, OutPtr};
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
/// rayon's pool costs tens of microseconds). Since the AVX2 loops (`x86`),
/// Qwen3-0.6B's shape at 220 positions (0.9M) is 44-66 µs on both cores
/// against 88 on one (`sampling-bench --attention`, least of 400).
const PARALLEL_MIN: usize = 1 << 18;
/// Parameters before the per-cache ones, and per cache.
const FIXED: usize = 7;
/// A prompt's query positions per unit of work (units are spread over the
/// cores; later positions see more keys, so the units are dealt out from
/// both ends, see `DECODE`).
const QUERIES: usize = 16;
const PER_CACHE: usize = 3;

/// `q` `[B, n_q, T, D]` (after RoPE) against `kv`, whose rows add up to `B`
/// in batch order and whose last `T` held positions are the queries' own:
/// query `t` sees the first `len - T + 1 + t` positions (MLX's causal mode;
/// with `T` = 1, all of them). Returns `[B, T, n_q * D]`: the heads' outputs
/// side by side, as the output projection takes them. `None` where the kernel
/// does not apply (switched off, not the CPU, not float32, `D` not a multiple
/// of 8, `n_q` not a multiple of `n_kv`, a cache holding fewer than `T`
/// positions, shapes that do not fit): the caller then runs MLX's ops.
pub fn decode_attention(q: &Array, kv: &[CachedKv], scale: f32) -> Result<Option<Array>> {
    if kv.is_empty() || !Kernel::DecodeAttention.enabled() {
        return Ok(None);
    }
    let float = |d: Dtype| matches!(d, Dtype::Float32 | Dtype::Bfloat16 | Dtype::Float16);
    if !float(q.dtype()) || q.ndim() != 4 || q.dim(2) < 1 || kv[0].keys.ndim() != 4 {
        return Ok(None);
    }
    // Every cache in one dtype; 16-bit caches reach the kernel as their bits (a view, no copy)
    // and are widened per head as they are read, so a step reads half the bytes.
    let cache_dtype = kv[0].keys.dtype();
    let half = match cache_dtype {
        Dtype::Float32 => Half::None,
        Dtype::Bfloat16 => Half::Bf16,
        Dtype::Float16 => Half::F16,
        _ => return Ok(None),
    };
    let (b, n_q, t, d) = (q.dim(0), q.dim(1), q.dim(2), q.dim(3));
    let n_kv = kv[0].keys.dim(1);
    // Sizes travel as float parameters: exact below 2^24.
    let small = |s: i64| (0..1 << 24).contains(&s);
    let fits_cache = |c: &CachedKv| {
        let (k, v) = (c.keys, c.values);
        k.dtype() == cache_dtype
            && v.dtype() == cache_dtype
            && k.ndim() == 4
            && k.shape() == v.shape()
            && k.dim(1) == n_kv
            && k.dim(3) == d
            && c.len >= t
            && c.len <= k.dim(2)
            && small(k.dim(2) as i64)
    };
    let rows: i64 = kv.iter().map(|c| c.keys.dim(0) as i64).sum();
    let fits = d > 0
        && d % 8 == 0
        && n_kv > 0
        && n_q % n_kv == 0
        && rows == b as i64
        && small(b as i64 * n_q as i64 * t as i64 * d as i64)
        && kv.iter().all(fits_cache);
    if !fits {
        return Ok(None);
    }
    let mut params = vec![b as f32, n_q as f32, n_kv as f32, d as f32, scale, t as f32, half as u8 as f32];
    for c in kv {
        params.extend([c.keys.dim(0) as f32, c.keys.dim(2) as f32, c.len as f32]);
    }
    // 16-bit caches reach the kernel as their bits (`cpu_kernel_f32_bits16`: no view node per
    // cache, two per sequence and layer of a batched step), so a 16-bit `q` is cast here; the
    // result goes back to `q`'s dtype.
    let q32 = if q.dtype() == Dtype::Float32 { q.clone() } else { q.astype(Dtype::Float32)? };
    let inputs: Vec<&Array> = std::iter::once(&q32).chain(kv.iter().flat_map(|c| [c.keys, c.values])).collect();
    let o = cpu_kernel_f32_bits16("DecodeAttention", DECODE, &params, &inputs, &[b, t, n_q * d])?;
    Ok(Some(if q.dtype() == Dtype::Float32 { o } else { o.astype(q.dtype())? }))
}

/// How a cache holds its values: float32, or 16-bit values two to a word
/// (lower-indexed in the low half, as memory holds them).
#[derive(Clone, Copy, PartialEq, Debug)]
enum Half {
    None = 0,
    Bf16 = 1,
    F16 = 2,
}

impl Half {
    fn from_param(v: f32) -> Option<Half> {
        [Half::None, Half::Bf16, Half::F16].into_iter().find(|h| *h as u8 as f32 == v)
    }
    /// Words per value: 1 for float32, 1/2 for 16 bits (as a divisor of the values).
    fn per_word(self) -> usize {
        if self == Half::None {
            1
        } else {
            2
        }
    }
}

/// Values `at..at + n` of a cache buffer (its words `words`) as float32: the
/// buffer itself for float32, else widened (exactly) into `scratch`.
#[inline(always)]
fn values_f32<'s>(words: &'s [f32], half: Half, at: usize, n: usize, scratch: &'s mut Vec<f32>) -> &'s [f32] {
    if half == Half::None {
        return &words[at..at + n];
    }
    // SAFETY: the words are the 16-bit buffer's bytes (a view of it); u16 has a smaller
    // alignment than f32 and twice the count covers the same bytes.
    let bits = unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u16>(), words.len() * 2) };
    // Grown only (every value read is written first: no fill per call).
    if scratch.len() < n {
        scratch.resize(n, 0.0);
    }
    let dst = &mut scratch[..n];
    widen(&bits[at..at + n], half, dst);
    dst
}

/// 16-bit values to float32 (exact): bfloat16 by a shift, float16 by F16C
/// where the CPU has it. Inlined into the kernel's AVX2 copy (a shift loop).
#[inline(always)]
fn widen(src: &[u16], half: Half, dst: &mut [f32]) {
    match half {
        Half::None => unreachable!("float32 values are read in place"),
        Half::Bf16 => {
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = f32::from_bits((s as u32) << 16);
            }
        }
        Half::F16 => {
            #[cfg(target_arch = "x86_64")]
            if crate::cpu::math::has_avx2() && is_x86_feature_detected!("f16c") {
                // SAFETY: the CPU has AVX and F16C, checked just above.
                return unsafe { widen_f16c(src, dst) };
            }
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = f16_value(s);
            }
        }
    }
}

/// # Safety
/// The CPU must have AVX and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn widen_f16c(src: &[u16], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: `i + 8 <= n` elements of both slices.
        let h = _mm_loadu_si128(src.as_ptr().add(i).cast());
        _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        i += 8;
    }
    for j in i..n {
        dst[j] = f16_value(src[j]);
    }
}

/// One cache's buffers as the kernel sees them.
struct Cached<'a> {
    /// The buffers' words: float32 values, or two 16-bit values each (`Problem::half`).
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
    /// Query positions per sequence.
    t: usize,
    half: Half,
}

impl<'a> Problem<'a> {
    fn new(params: &[f32], inputs: &[&'a [f32]], out_len: usize) -> Option<Problem<'a>> {
        let n = params.len().checked_sub(FIXED)? / PER_CACHE;
        if params.len() != FIXED + PER_CACHE * n || inputs.len() != 1 + 2 * n || n == 0 {
            return None;
        }
        let [b, n_q, n_kv, d] = [0, 1, 2, 3].map(|i| params[i] as usize);
        let t = params[5] as usize;
        let half = Half::from_param(params[6])?;
        let mut caches = Vec::with_capacity(n);
        for (i, p) in params[FIXED..].chunks_exact(PER_CACHE).enumerate() {
            let [rows, capacity, len] = [0, 1, 2].map(|j| p[j] as usize);
            let (keys, values) = (inputs[1 + 2 * i], inputs[2 + 2 * i]);
            if keys.len() * half.per_word() != rows * n_kv * capacity * d || values.len() != keys.len() || len < t || len > capacity {
                return None;
            }
            caches.push(Cached { keys, values, rows, capacity, len });
        }
        let ok = d > 0
            && d % 8 == 0
            && t > 0
            && n_kv > 0
            && n_q % n_kv == 0
            && inputs[0].len() == b * n_q * t * d
            && out_len == b * n_q * t * d
            && caches.iter().map(|c| c.rows).sum::<usize>() == b;
        ok.then_some(Problem { q: inputs[0], caches, b, n_q, n_kv, d, scale: params[4], t, half })
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
    // Positions scored, over every query (a prompt's queries see half of them on average).
    let positions: usize = p.caches.iter().map(|c| c.rows * (c.len - p.t / 2)).sum::<usize>() * p.t;
    let work = 2 * positions * p.n_q * p.d;
    let blocks = p.t.div_ceil(QUERIES);
    let out = OutPtr(out.as_mut_ptr());
    let parallel = work >= PARALLEL_MIN;
    // A prompt's keys transposed once per sequence and key head (`[D][kcols]` each, zeros
    // past a cache's positions), for every block of its queries to score from.
    let kcols = if p.t > 1 { p.caches.iter().map(|c| c.len).max().unwrap_or(0).next_multiple_of(KEYS) } else { 0 };
    let per_head = p.d * kcols;
    let mut kt = vec![0f32; p.b * p.n_kv * per_head];
    if p.t > 1 {
        let dst = OutPtr(kt.as_mut_ptr());
        par_ranges(p.b * p.n_kv, parallel, |units| units.for_each(|unit| transpose_keys(&p, unit, kcols, dst)));
    }
    // Units by block first, dealt from both ends (block 0, the last, 1, the one before ...),
    // so that any run of them, as `par_ranges` hands out, has early and late queries alike.
    let per_block = p.b * p.n_kv;
    par_ranges(blocks * per_block, parallel, |units| {
        for unit in units {
            let (i, head) = (unit / per_block, unit % per_block);
            let block = if i % 2 == 0 { i / 2 } else { blocks - 1 - i / 2 };
            let queries = block * QUERIES..((block + 1) * QUERIES).min(p.t);
            let kt = Transposed { keys: &kt[head * per_head..(head + 1) * per_head], cols: kcols };
            group(&p, head / p.n_kv, head % p.n_kv, queries, kt, out);
        }
    });
};

/// Key head `unit` (batch row `unit / n_kv`, head `unit % n_kv`) of `p`'s caches
/// into `kt`'s `unit`-th block of `D * kcols` floats, element `e` of key `j` at
/// `e * kcols + j`.
fn transpose_keys(p: &Problem, unit: usize, kcols: usize, kt: OutPtr) {
    let (c, row) = p.cache_of(unit / p.n_kv);
    let at = (row * p.n_kv + unit % p.n_kv) * c.capacity * p.d;
    let per_head = p.d * kcols;
    // SAFETY: `kt` holds `B * n_kv` blocks of `per_head` floats (allocated so by the
    // caller); this unit alone writes its own.
    let kt = unsafe { std::slice::from_raw_parts_mut(kt.0.add(unit * per_head), per_head) };
    let mut wide = Vec::new();
    for (j, k) in values_f32(c.keys, p.half, at, c.len * p.d, &mut wide).chunks_exact(p.d).enumerate() {
        for (e, &v) in k.iter().enumerate() {
            kt[e * kcols + j] = v;
        }
    }
}

/// One key head's keys transposed: `keys[e * cols + j]` is element `e` of key `j`.
struct Transposed<'a> {
    keys: &'a [f32],
    cols: usize,
}

thread_local! {
    /// Scaled queries, then scores and weights: reused from call to call
    /// (no allocation per layer).
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// A 16-bit cache's keys and values of one head, widened.
    static WIDE: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

crate::avx2_fma_dispatch!(fn group_avx2(p: &Problem, b: usize, g: usize, queries: Range<usize>, kt: Transposed, out: OutPtr) => group_body);

/// `group_body` compiled for AVX-512 where a prompt's queries run on a CPU
/// with it: the compiler's 16-lane vectors for the scores (`scores_prompt`'s
/// sixteen keys one register, eight rows a pass) and `x86::weighted_sum_rows_512`
/// for the sums (four rows at once).
/// Each value is the same chain of operations in the same order as on AVX2,
/// so the same bits (`the_avx2_and_portable_paths_give_the_same_bits`).
fn group(p: &Problem, b: usize, g: usize, queries: Range<usize>, kt: Transposed, out: OutPtr) {
    #[cfg(target_arch = "x86_64")]
    if p.t > 1 && x86::avx512() {
        // SAFETY: the CPU has AVX-512 F (and so AVX2, FMA and F16C), checked by `avx512`.
        return unsafe { group_avx512(p, b, g, queries, kt, out) };
    }
    group_avx2(p, b, g, queries, kt, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
unsafe fn group_avx512(p: &Problem, b: usize, g: usize, queries: Range<usize>, kt: Transposed, out: OutPtr) {
    group_body(p, b, g, queries, kt, out)
}

/// Batch row `b`, key/value head `g`, query positions `queries`: per position,
/// its `n_q / n_kv` query heads, each scored against the keys it sees, the
/// softmax's exponentials, the weighted values, divided by the exponentials'
/// sum. One position (a decode step) scores key by key; several (a prompt)
/// score sixteen keys per pass from the keys transposed once (`kt`,
/// `scores_prompt`).
#[inline(always)]
fn group_body(p: &Problem, b: usize, g: usize, queries: Range<usize>, kt: Transposed, out: OutPtr) {
    let (c, row) = p.cache_of(b);
    let (d, t) = (p.d, p.t);
    let rep = p.n_q / p.n_kv;
    let at = (row * p.n_kv + g) * c.capacity * d;
    // A 16-bit cache's head widened once here (the keys only where scored from the cache:
    // a prompt scores from `kt`); taken out of its cell as `SCRATCH` below. A decode step
    // where AVX2, FMA and F16C run reads the head in place instead, each 16-bit value widened
    // as it is loaded (the same values, so the same bits; `x86::InPlace`).
    let in_place = t == 1 && d % 64 == 0 && avx2_fma_f16c();
    let mut wide = WIDE.with(RefCell::take);
    let (wide_keys, wide_values) = (&mut wide.0, &mut wide.1);
    let keys = if t == 1 && !in_place { values_f32(c.keys, p.half, at, c.len * d, wide_keys) } else { &[] };
    let values = if in_place { &[] } else { values_f32(c.values, p.half, at, c.len * d, wide_values) };
    // The positions query `pos` sees: the cache's earlier ones and its chunk's up to its own.
    let seen = |pos: usize| c.len - t + 1 + pos;
    let (first, last) = (queries.start, queries.end - 1);
    let rows = (last + 1 - first) * rep;
    let cols = seen(last).next_multiple_of(KEYS);
    // Taken out of its cell and put back after: the arithmetic must not run in a
    // closure, which may not be inlined into the AVX2 copy (`avx2_fma_dispatch!`).
    let mut s = SCRATCH.with(RefCell::take);
    s.clear();
    s.resize(rows * d + rows * cols, 0.0);
    let (qs, scores) = s.split_at_mut(rows * d);
    // The queries times the scale, once (`q` is `[B, n_q, T, D]`); row `i * rep + r` is
    // position `first + i`, head `r` of the group.
    for (i, dst) in qs.chunks_exact_mut(d).enumerate() {
        let (pos, r) = (first + i / rep, i % rep);
        let from = ((b * p.n_q + g * rep + r) * t + pos) * d;
        for (dst, &x) in dst.iter_mut().zip(&p.q[from..from + d]) {
            *dst = x * p.scale;
        }
    }
    if in_place {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `in_place`: the CPU has AVX2, FMA and F16C and `d` is a multiple of 64; the
        // cache's buffers hold `len` keys and values of this head from `at` (`Problem::new`).
        unsafe {
            x86::InPlace::new(c.keys, p.half, at).scores(qs, c.len, d, cols, scores)
        };
    } else if t == 1 {
        scores_decode(qs, keys, d, cols, scores);
    } else {
        scores_prompt(qs, &kt, d, cols, scores);
    }
    // Row `i`'s position and output (head `g * rep + r` of position `pos` of batch row `b`).
    let out_row = |i: usize| {
        let (pos, r) = (first + i / rep, i % rep);
        // SAFETY: `out` holds `B * T * n_q * d` floats (checked by `Problem::new`), and this unit
        // alone writes this head of this position; distinct rows are distinct heads or positions.
        (pos, unsafe { std::slice::from_raw_parts_mut(out.0.add(((b * t + pos) * p.n_q + g * rep + r) * d), d) })
    };
    // A prompt's rows two at a time where AVX2 runs: each value read once for both (a row's
    // weighted sum reads every value it sees, from L2 for a long context).
    #[cfg(target_arch = "x86_64")]
    let paired = t > 1 && d % 32 == 0 && crate::cpu::math::avx2_fma();
    #[cfg(target_arch = "x86_64")]
    let paired_512 = paired && d % 64 == 0 && x86::avx512();
    #[cfg(not(target_arch = "x86_64"))]
    let paired = false;
    let rows = scores.len() / cols;
    let mut i = 0;
    while i < rows {
        #[cfg(target_arch = "x86_64")]
        if paired_512 && i + 3 < rows {
            // Four rows at once on AVX-512: the values, from L2 for a long context, read once
            // for four rows' sums.
            let (r0, rest) = scores[i * cols..].split_at_mut(cols);
            let (r1, rest) = rest.split_at_mut(cols);
            let (r2, r3) = rest.split_at_mut(cols);
            let outs = [out_row(i), out_row(i + 1), out_row(i + 2), out_row(i + 3)];
            let mut ws = [r0, r1, r2, &mut r3[..cols]];
            // Loops, not closures (`map`): a closure would not take this copy's CPU features.
            let mut inv = [0f32; 4];
            for ((w, (pos, _)), inv) in ws.iter_mut().zip(&outs).zip(&mut inv) {
                *w = &mut std::mem::take(w)[..seen(*pos)];
                *inv = 1.0 / exp_in_place(w);
            }
            let [(_, o0), (_, o1), (_, o2), (_, o3)] = outs;
            let [w0, w1, w2, w3] = ws;
            // SAFETY: `paired_512`: the CPU has AVX-512 F, and `d` is a multiple of 64.
            unsafe { x86::weighted_sum_rows_512([w0, w1, w2, w3], values, [&mut *o0, &mut *o1, &mut *o2, &mut *o3]) };
            for (o, inv) in [o0, o1, o2, o3].into_iter().zip(inv) {
                scale(o, inv);
            }
            i += 4;
            continue;
        }
        if paired && i + 1 < rows {
            let (first_row, rest) = scores[i * cols..].split_at_mut(cols);
            let ((pos0, o0), (pos1, o1)) = (out_row(i), out_row(i + 1));
            let (w0, w1) = (&mut first_row[..seen(pos0)], &mut rest[..seen(pos1)]);
            let (inv0, inv1) = (1.0 / exp_in_place(w0), 1.0 / exp_in_place(w1));
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `paired`: the CPU has AVX2 and FMA, and `d` is a multiple of 32.
            unsafe {
                match paired_512 {
                    // SAFETY: the CPU has AVX-512 F, and `d` is a multiple of 64.
                    true => x86::weighted_sum_rows_512([w0, w1], values, [o0, o1]),
                    false => x86::weighted_sum_pair(w0, w1, values, o0, o1),
                }
            };
            scale(o0, inv0);
            scale(o1, inv1);
            i += 2;
            continue;
        }
        let (pos, o) = out_row(i);
        let weights = &mut scores[i * cols..][..seen(pos)];
        let inv = 1.0 / exp_in_place(weights);
        match d {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as for the scores above.
            _ if in_place => unsafe { x86::InPlace::new(c.values, p.half, at).weighted_sum(weights, o) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX2, FMA and F16C, checked in the guard.
            _ if d % 64 == 0 && avx2_fma_f16c() => unsafe { x86::weighted_sum(weights, x86::F32Lanes(values.as_ptr()), o) },
            64 => weighted_sum::<8>(weights, values, o),
            128 => weighted_sum::<16>(weights, values, o),
            _ => {
                o.fill(0.0);
                for (&w, v) in weights.iter().zip(values.chunks_exact(d)) {
                    for (o, &v) in o.iter_mut().zip(v) {
                        *o = w.mul_add(v, *o);
                    }
                }
            }
        }
        scale(o, inv);
        i += 1;
    }
    SCRATCH.with(|cell| cell.replace(s));
    WIDE.with(|cell| cell.replace(wide));
}

/// `o = sum_j weights[j] * values[j]` for a head dimension of `8 * V`, each
/// element one multiply-add chain from zero in key order (the general loop's
/// bits), held in registers rather than read and written back per key.
#[inline(always)]
fn weighted_sum<const V: usize>(weights: &[f32], values: &[f32], o: &mut [f32]) {
    let mut acc = [[0f32; 8]; V];
    for (&w, v) in weights.iter().zip(values.chunks_exact(8 * V)) {
        for (a, v) in acc.iter_mut().zip(v.chunks_exact(8)) {
            for l in 0..8 {
                a[l] = w.mul_add(v[l], a[l]);
            }
        }
    }
    for (o, a) in o.chunks_exact_mut(8).zip(&acc) {
        o.copy_from_slice(a);
    }
}

/// `o *= inv`: the weighted sum divided by the exponentials' sum.
#[inline(always)]
fn scale(o: &mut [f32], inv: f32) {
    for o in o.iter_mut() {
        *o *= inv;
    }
}

/// Keys per pass of `scores_prompt` (two vectors of eight).
const KEYS: usize = 16;

/// Whether the x86 loops run: AVX2, FMA and F16C (false elsewhere).
#[inline(always)]
fn avx2_fma_f16c() -> bool {
    #[cfg(target_arch = "x86_64")]
    return crate::cpu::math::avx2_fma() && is_x86_feature_detected!("f16c");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// A decode step's scores: each query row against every key, four keys at a
/// time (four independent sums, so the multiply-adds do not wait on each
/// other; each score's own order is `dot`'s). `scores` is `[rows][cols]`.
#[inline(always)]
fn scores_decode(qs: &[f32], keys: &[f32], d: usize, cols: usize, scores: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma_f16c() {
        // SAFETY: the CPU has AVX2, FMA and F16C, checked just above.
        return unsafe { x86::scores_decode(qs, x86::F32Lanes(keys.as_ptr()), keys.len() / d, d, cols, scores) };
    }
    let len = keys.len() / d;
    let quads = len / 4;
    for (q, row) in qs.chunks_exact(d).zip(scores.chunks_exact_mut(cols)) {
        for j in 0..quads {
            let k = |i: usize| &keys[(4 * j + i) * d..(4 * j + i + 1) * d];
            row[4 * j..4 * j + 4].copy_from_slice(&dot4(q, [k(0), k(1), k(2), k(3)]));
        }
        for j in 4 * quads..len {
            row[j] = dot(q, &keys[j * d..(j + 1) * d]);
        }
    }
}

/// A prompt's scores for the first `cols` keys of `kt`: per four query rows
/// and sixteen keys, one fused multiply-add chain per score over the head
/// dimension in order, a key per lane (no sums across lanes; the key loads
/// serve four rows). `scores` is `[rows][cols]`; a score's bits do not depend
/// on which rows or keys came with it.
#[inline(always)]
fn scores_prompt(qs: &[f32], kt: &Transposed, d: usize, cols: usize, scores: &mut [f32]) {
    // Eight rows a pass where AVX-512's 32 registers hold their sums: the transposed keys,
    // read from L2 for a long context, are read half as often.
    #[cfg(target_arch = "x86_64")]
    if x86::avx512() {
        return scores_prompt_rows::<8>(qs, kt, d, cols, scores);
    }
    scores_prompt_rows::<4>(qs, kt, d, cols, scores)
}

/// `scores_prompt` `R` query rows a pass: each score one multiply-add chain
/// over the head's elements in order, whatever `R`.
#[inline(always)]
fn scores_prompt_rows<const R: usize>(qs: &[f32], kt: &Transposed, d: usize, cols: usize, scores: &mut [f32]) {
    let rows = qs.len() / d;
    let mut r0 = 0;
    while r0 < rows {
        let n = (rows - r0).min(R);
        // Rows past the last are the last again (computed, not stored).
        // A loop, not `array::from_fn`: a closure would not take the caller's CPU features.
        let mut q: [&[f32]; R] = [&[]; R];
        for (i, q) in q.iter_mut().enumerate() {
            *q = &qs[(r0 + i.min(n - 1)) * d..][..d];
        }
        for j0 in (0..cols).step_by(KEYS) {
            let mut acc = [[0f32; KEYS]; R];
            for e in 0..d {
                let k = &kt.keys[e * kt.cols + j0..][..KEYS];
                for (a, q) in acc.iter_mut().zip(&q) {
                    let x = q[e];
                    for l in 0..KEYS {
                        a[l] = x.mul_add(k[l], a[l]);
                    }
                }
            }
            for (i, a) in acc.iter().enumerate().take(n) {
                scores[(r0 + i) * cols + j0..][..KEYS].copy_from_slice(a);
            }
        }
        r0 += n;
    }
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
    // The exponentials as a loop of their own, which vectorizes (computed lane by lane
    // beside the sums, their branches stayed scalar code).
    for v in x.iter_mut() {
        *v = cpu_exp(*v - max);
    }
    let mut lanes = [0f32; 8];
    let mut chunks = x.chunks_exact(8);
    for chunk in &mut chunks {
        for l in 0..8 {
            lanes[l] += chunk[l];
        }
    }
    for (&v, lane) in chunks.remainder().iter().zip(lanes.iter_mut()) {
        *lane += v;
    }
    lanes_sum(&lanes)
}

/// `scores_decode` and `weighted_sum` written with AVX2 and FMA intrinsics:
/// the compiler's own vectorization of the portable loops put the four keys
/// of `dot4` across the lanes (128-bit shuffles per multiply-add) and spilled
/// sixteen accumulators of a 128-wide head. Each lane runs the portable
/// code's fused multiply-add chain in its order, and the lanes are added in
/// `lanes_sum`'s tree, so the bits are the portable path's.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{lanes_sum, Half};

    /// Where a head's keys or values are read from: float32, or a 16-bit
    /// cache's bits widened as they are loaded (exactly, as `widen` does), so
    /// that a decode step reads the cache in place instead of widening it into
    /// a buffer first (a batch of eight spent 6% of its step there).
    pub(super) trait Lanes: Copy {
        /// Values `at..at + 8`.
        unsafe fn load8(self, at: usize) -> __m256;
    }

    #[derive(Clone, Copy)]
    pub(super) struct F32Lanes(pub(super) *const f32);
    #[derive(Clone, Copy)]
    pub(super) struct F16Lanes(*const u16);
    #[derive(Clone, Copy)]
    pub(super) struct Bf16Lanes(*const u16);

    impl Lanes for F32Lanes {
        #[inline(always)]
        unsafe fn load8(self, at: usize) -> __m256 {
            _mm256_loadu_ps(self.0.add(at))
        }
    }

    impl Lanes for F16Lanes {
        #[inline(always)]
        unsafe fn load8(self, at: usize) -> __m256 {
            _mm256_cvtph_ps(_mm_loadu_si128(self.0.add(at).cast()))
        }
    }

    impl Lanes for Bf16Lanes {
        #[inline(always)]
        unsafe fn load8(self, at: usize) -> __m256 {
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(self.0.add(at).cast()))))
        }
    }

    /// A head's keys or values read in place from a cache buffer's words.
    #[derive(Clone, Copy)]
    pub(super) enum InPlace {
        F32(F32Lanes),
        F16(F16Lanes),
        Bf16(Bf16Lanes),
    }

    impl InPlace {
        /// Values from `at` on of a buffer (its words) held as `half` says.
        ///
        /// # Safety
        /// `at` lies within the buffer's values.
        pub(super) unsafe fn new(words: &[f32], half: Half, at: usize) -> InPlace {
            match half {
                Half::None => InPlace::F32(F32Lanes(words.as_ptr().add(at))),
                Half::F16 => InPlace::F16(F16Lanes(words.as_ptr().cast::<u16>().add(at))),
                Half::Bf16 => InPlace::Bf16(Bf16Lanes(words.as_ptr().cast::<u16>().add(at))),
            }
        }

        /// `scores_decode` with these as the keys.
        ///
        /// # Safety
        /// As `scores_decode`'s, these holding `len` keys.
        pub(super) unsafe fn scores(self, qs: &[f32], len: usize, d: usize, cols: usize, scores: &mut [f32]) {
            match self {
                InPlace::F32(k) => scores_decode(qs, k, len, d, cols, scores),
                InPlace::F16(k) => scores_decode(qs, k, len, d, cols, scores),
                InPlace::Bf16(k) => scores_decode(qs, k, len, d, cols, scores),
            }
        }

        /// `weighted_sum` with these as the values.
        ///
        /// # Safety
        /// As `weighted_sum`'s.
        pub(super) unsafe fn weighted_sum(self, weights: &[f32], o: &mut [f32]) {
            match self {
                InPlace::F32(v) => weighted_sum(weights, v, o),
                InPlace::F16(v) => weighted_sum(weights, v, o),
                InPlace::Bf16(v) => weighted_sum(weights, v, o),
            }
        }
    }

    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `d` a multiple of 8, `qs` rows of
    /// `d`, `keys` `len` whole keys of `d`, `scores` rows of `cols` >= `len`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn scores_decode<K: Lanes>(qs: &[f32], keys: K, len: usize, d: usize, cols: usize, scores: &mut [f32]) {
        for (q, row) in qs.chunks_exact(d).zip(scores.chunks_exact_mut(cols)) {
            let mut j = 0;
            while j + 4 <= len {
                let mut acc = [_mm256_setzero_ps(); 4];
                for c in (0..d).step_by(8) {
                    let qv = _mm256_loadu_ps(q.as_ptr().add(c));
                    for (i, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(qv, keys.load8((j + i) * d + c), *a);
                    }
                }
                for (i, a) in acc.iter().enumerate() {
                    row[j + i] = sum(*a);
                }
                j += 4;
            }
            for j in j..len {
                let mut a = _mm256_setzero_ps();
                for c in (0..d).step_by(8) {
                    a = _mm256_fmadd_ps(_mm256_loadu_ps(q.as_ptr().add(c)), keys.load8(j * d + c), a);
                }
                row[j] = sum(a);
            }
        }
    }

    #[inline(always)]
    unsafe fn sum(a: __m256) -> f32 {
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), a);
        lanes_sum(&lanes)
    }

    /// `o = sum_j weights[j] * values[j]` for a head of `d` (a multiple of
    /// 64), 64 elements at a time in eight registers: each element one
    /// multiply-add chain from zero in key order, as the portable loop.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `values` holds `weights.len()`
    /// rows of `o.len()` = `d`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn weighted_sum<V: Lanes>(weights: &[f32], values: V, o: &mut [f32]) {
        let d = o.len();
        for e0 in (0..d).step_by(64) {
            let mut acc = [_mm256_setzero_ps(); 8];
            for (j, &w) in weights.iter().enumerate() {
                let w = _mm256_set1_ps(w);
                for (i, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(w, values.load8(j * d + e0 + 8 * i), *a);
                }
            }
            for (i, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(o.as_mut_ptr().add(e0 + 8 * i), *a);
            }
        }
    }

    /// `weighted_sum` for two rows at once, 32 elements at a time (eight
    /// registers of sums, each value loaded once for both): over the keys
    /// both see, then each row alone over the rest of its own, so each element
    /// is still one multiply-add chain from zero in key order.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `o0` and `o1` hold `d` (a multiple of
    /// 32), and `values` as many rows of `d` as the longer weights.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn weighted_sum_pair(w0: &[f32], w1: &[f32], values: &[f32], o0: &mut [f32], o1: &mut [f32]) {
        let d = o0.len();
        let common = w0.len().min(w1.len());
        for e0 in (0..d).step_by(32) {
            let (mut a0, mut a1) = ([_mm256_setzero_ps(); 4], [_mm256_setzero_ps(); 4]);
            for j in 0..common {
                let v = values.as_ptr().add(j * d + e0);
                let (b0, b1) = (_mm256_set1_ps(*w0.get_unchecked(j)), _mm256_set1_ps(*w1.get_unchecked(j)));
                for i in 0..4 {
                    let x = _mm256_loadu_ps(v.add(8 * i));
                    a0[i] = _mm256_fmadd_ps(b0, x, a0[i]);
                    a1[i] = _mm256_fmadd_ps(b1, x, a1[i]);
                }
            }
            alone(w0, common, values, d, e0, &mut a0);
            alone(w1, common, values, d, e0, &mut a1);
            for i in 0..4 {
                _mm256_storeu_ps(o0.as_mut_ptr().add(e0 + 8 * i), a0[i]);
                _mm256_storeu_ps(o1.as_mut_ptr().add(e0 + 8 * i), a1[i]);
            }
        }
    }

    /// Whether prompts may take the AVX-512 copies (the CPU has AVX-512 F and
    /// `MLX_NODE_CPU_FEATURES` allows it).
    pub(super) fn avx512() -> bool {
        is_x86_feature_detected!("avx512f") && crate::cpu::math::beyond_avx2()
    }

    /// `weighted_sum_pair` for `R` rows (2 or 4), 64 elements at a time in
    /// 512-bit registers: each value loaded once for all of them, the same
    /// multiply-add chain per element (over the keys all rows see, then each
    /// row alone over the rest of its own).
    ///
    /// # Safety
    /// The CPU must have AVX-512 F; every `os` holds `d` (a multiple of 64),
    /// and `values` as many rows of `d` as the longest weights.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn weighted_sum_rows_512<const R: usize>(ws: [&[f32]; R], values: &[f32], mut os: [&mut [f32]; R]) {
        let d = os[0].len();
        let common = ws.iter().map(|w| w.len()).min().unwrap_or(0);
        for e0 in (0..d).step_by(64) {
            let mut acc = [[_mm512_setzero_ps(); 4]; R];
            for j in 0..common {
                let v = values.as_ptr().add(j * d + e0);
                // Spelled out: a closure (`array::from_fn`) would not take this function's features.
                let x = [_mm512_loadu_ps(v), _mm512_loadu_ps(v.add(16)), _mm512_loadu_ps(v.add(32)), _mm512_loadu_ps(v.add(48))];
                for (w, a) in ws.iter().zip(acc.iter_mut()) {
                    let b = _mm512_set1_ps(*w.get_unchecked(j));
                    for i in 0..4 {
                        a[i] = _mm512_fmadd_ps(b, x[i], a[i]);
                    }
                }
            }
            for (w, a) in ws.iter().zip(acc.iter_mut()) {
                for (j, &w) in w.iter().enumerate().skip(common) {
                    let (w, v) = (_mm512_set1_ps(w), values.as_ptr().add(j * d + e0));
                    for (i, a) in a.iter_mut().enumerate() {
                        *a = _mm512_fmadd_ps(w, _mm512_loadu_ps(v.add(16 * i)), *a);
                    }
                }
            }
            for (o, a) in os.iter_mut().zip(&acc) {
                for (i, a) in a.iter().enumerate() {
                    _mm512_storeu_ps(o.as_mut_ptr().add(e0 + 16 * i), *a);
                }
            }
        }
    }

    /// One row's sums of elements `e0..e0 + 32` continued over its keys from `from` on.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn alone(w: &[f32], from: usize, values: &[f32], d: usize, e0: usize, acc: &mut [__m256; 4]) {
        for (j, &w) in w.iter().enumerate().skip(from) {
            let (w, v) = (_mm256_set1_ps(w), values.as_ptr().add(j * d + e0));
            for (i, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(w, _mm256_loadu_ps(v.add(8 * i)), *a);
            }
        }
    }
}
