//! MLX's affine `quantized_matmul` (`x @ dequantize(w).T`) on the CPU backend,
//! for float32 and bfloat16, as one kernel with MLX's exact bits.
//!
//! MLX's CPU op (`_qmm_t` in `backend/cpu/quantized.cpp`) computes each output
//! as one sum in index order, `sum += x[k] * (scale * q[k] + bias)`, rounding
//! after every operation (no fused multiply-add) to the compute type: float32,
//! or for bfloat16 MLX's `_MLX_BFloat16`, whose every operation is a float
//! operation rounded back to bfloat16. On x86 the CPU wheel's SIMD width is 1,
//! so that is a scalar loop on one thread, the whole time of a 4-bit model
//! there. Here eight outputs sit in the eight lanes of a vector, each lane
//! still summing its own row in index order with the same roundings, so every
//! output keeps MLX's value; each group's dequantized weights are computed
//! once and used for every row of `x`, and the output columns are split over
//! the cores. A batch of six to eight rows on a CPU with AVX-512 puts the rows
//! in the lanes instead (`avx2::rows_in_lanes`), each lane still one output's
//! sum in the same order.
use std::ops::Range;

use crate::cpu::half::round_bf16;
use crate::cpu::kernel::{cpu_kernel_f32, par_ranges, Kernel, KernelF32, OutPtr};
use crate::{Array, Dtype, Result};

/// The kernel's result for `quantized_matmul(x, w, scales, biases, transpose =
/// true, group_size, bits)`, or `None` where it does not apply (another dtype
/// or device, a batched `w`, 3/5/6 bits (see `widen_packed`), shapes MLX would
/// reject): MLX's op runs those. `MLX_NODE_QMM_KERNEL=0` turns it off.
pub(crate) fn quantized_matmul(x: &Array, w: &Array, scales: &Array, biases: &Array, group_size: i32, bits: i32) -> Result<Option<Array>> {
    // The compute type is MLX's promotion of x's and the scales' dtypes; the
    // kernel is fed float32 copies (exact) and, for bfloat16, rounds as MLX.
    let bf16 = match compute_dtype(x.dtype(), scales.dtype()) {
        Some(Dtype::Float32) => false,
        Some(Dtype::Bfloat16) if biases.dtype() == Dtype::Bfloat16 => true,
        _ => return Ok(None),
    };
    if !matches!(bits, 2 | 4 | 8)
        || !matches!(group_size, 32 | 64 | 128)
        || w.dtype() != Dtype::Uint32
        || w.ndim() != 2
        || x.ndim() == 0
        || !enabled()
    {
        return Ok(None);
    }
    let (n, k) = (w.dim(0), x.dim(-1));
    let groups = k / group_size;
    let fits = |a: &Array| a.shape() == [n, groups];
    // Sizes travel as float parameters (exact below 2^24).
    if n <= 0 || k <= 0 || k % group_size != 0 || w.dim(1) * (32 / bits) != k || !fits(scales) || !fits(biases) || n >= 1 << 24 || k >= 1 << 24
        // The kernel gathers with 32-bit offsets.
        || n as i64 * w.dim(1) as i64 > i32::MAX as i64
    {
        return Ok(None);
    }
    let mut out_shape = x.shape();
    *out_shape.last_mut().expect("x has a last axis") = n;
    // The packed words reach the kernel as their bits (`cpu_kernel_f32` passes
    // uint32 inputs through), which it only ever reads as integers.
    let params = [k as f32, n as f32, group_size as f32, bits as f32, bf16 as u8 as f32];
    let y = cpu_kernel_f32("QuantizedMatmul", QMM, &params, &[x, w, scales, biases], &out_shape)?;
    // bfloat16 results are exact in float32: the cast back loses nothing.
    Ok(Some(if bf16 { y.astype(Dtype::Bfloat16)? } else { y }))
}

/// Packed weights of 3, 5 or 6 bits re-packed at 8 bits (the same integers, one
/// per byte) where this kernel runs, `None` elsewhere or for other widths. The
/// kernel covers 2, 4 and 8 bits, and MLX's CPU op gives the same bits at
/// either width: it packs those widths as one little-endian bit stream, and
/// dequantizes and sums the integers the same way whatever their width
/// (`tests/integration/qmm_cpu.rs`). Costs 8/bits the memory of the packed weights.
pub(crate) fn widen_packed(w: &Array, bits: i32) -> Result<Option<Array>> {
    if !matches!(bits, 3 | 5 | 6) || w.dtype() != Dtype::Uint32 || w.ndim() != 2 || !enabled() {
        return Ok(None);
    }
    let (rows, words) = (w.dim(0) as usize, w.dim(1) as usize);
    let bits = bits as usize;
    if words * 32 % bits != 0 || !(words * 32 / bits).is_multiple_of(4) {
        return Ok(None);
    }
    let per_row = words * 32 / bits;
    let packed = w.to_vec::<u32>()?;
    let mask = (1u64 << bits) - 1;
    let mut out = vec![0u32; rows * per_row / 4];
    for (src, dst) in packed.chunks_exact(words).zip(out.chunks_exact_mut(per_row / 4)) {
        for i in 0..per_row {
            let (word, shift) = ((i * bits) / 32, (i * bits) % 32);
            let window = src[word] as u64 | src.get(word + 1).map_or(0, |&v| (v as u64) << 32);
            dst[i / 4] |= (((window >> shift) & mask) as u32) << (8 * (i % 4));
        }
    }
    Ok(Some(Array::from_slice(&out, &[rows as i32, (per_row / 4) as i32])?))
}

/// MLX's type promotion for pairs of floating dtypes (float32 with anything,
/// each with itself; bfloat16 with float16 is float32). This kernel takes
/// float32 and bfloat16 results; `qmm_int8` any.
pub(crate) fn compute_dtype(a: Dtype, b: Dtype) -> Option<Dtype> {
    use Dtype::*;
    match (a, b) {
        (Float32, Float32 | Float16 | Bfloat16) | (Float16 | Bfloat16, Float32) => Some(Float32),
        (Bfloat16, Float16) | (Float16, Bfloat16) => Some(Float32),
        (Bfloat16, Bfloat16) => Some(Bfloat16),
        (Float16, Float16) => Some(Float16),
        _ => None,
    }
}

fn enabled() -> bool {
    Kernel::Qmm.enabled()
}

/// One call's operands, as the kernel sees them.
struct Problem<'a> {
    x: &'a [f32],
    w: &'a [u32],
    scales: &'a [f32],
    biases: &'a [f32],
    m: usize,
    n: usize,
    k: usize,
    group_size: usize,
    bits: usize,
    /// Round every operation to bfloat16 (MLX's `_MLX_BFloat16` arithmetic).
    bf16: bool,
}

impl Problem<'_> {
    /// Packed words per row of `w`.
    fn row_words(&self) -> usize {
        self.k * self.bits / 32
    }
    fn groups(&self) -> usize {
        self.k / self.group_size
    }
}

/// The packed words of `w` (`inputs[1]`) of a quantized matmul's inputs in
/// MLX's layout (`x`, `w`, `scales`, `biases`), if the shapes agree with
/// `[k, n, group_size, bits]` and an output of `out_len` values and the
/// kernels take them; else `None` (the kernel then writes NaN).
pub(super) fn mlx_words<'a>([k, n, group_size, bits]: [usize; 4], inputs: &[&'a [f32]], out_len: usize) -> Option<&'a [u32]> {
    let (x, w, scales, biases) = (inputs[0], inputs[1], inputs[2], inputs[3]);
    let ok = k > 0
        && n > 0
        && matches!(bits, 2 | 4 | 8)
        && matches!(group_size, 32 | 64 | 128)
        && k % group_size == 0
        && x.len() % k == 0
        && out_len == x.len() / k * n
        && w.len() == n * k * bits / 32
        && scales.len() == n * (k / group_size)
        && biases.len() == scales.len();
    // SAFETY: f32 and u32 have the same size and alignment; the words are only read as integers.
    ok.then(|| unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u32>(), w.len()) })
}

/// Output columns per block: four vectors of eight.
const BLOCK: usize = 32;

const QMM: KernelF32 = |params, inputs, out| {
    let [k, n, group_size, bits, bf16] = [params[0], params[1], params[2], params[3], params[4]].map(|v| v as usize);
    let (x, scales, biases) = (inputs[0], inputs[2], inputs[3]);
    let Some(w) = mlx_words([k, n, group_size, bits], inputs, out.len()) else { return out.fill(f32::NAN) };
    let p = Problem { x, w, scales, biases, m: x.len() / k, n, k, group_size, bits, bf16: bf16 == 1 };
    run_parallel(&p, out);
};

/// Below this many multiply-adds one thread does it all (handing work to
/// another thread costs microseconds).
pub(crate) const PARALLEL_MIN: usize = 1 << 20;

/// Splits the column blocks over the cores; each part writes only its own
/// columns of `out`.
fn run_parallel(p: &Problem, out: &mut [f32]) {
    let out = OutPtr(out.as_mut_ptr());
    par_ranges(p.n.div_ceil(BLOCK), p.m * p.n * p.k >= PARALLEL_MIN, |blocks| run_blocks(p, blocks, out));
}

fn run_blocks(p: &Problem, blocks: Range<usize>, out: OutPtr) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::math::has_avx2() {
        if rows_in_lanes(p) {
            // SAFETY: `rows_in_lanes` checked AVX-512 F and VL (and AVX2 above).
            unsafe { avx512_rows(p, blocks, out) };
        } else {
            // SAFETY: the CPU has AVX2, checked just above.
            unsafe { avx2_blocks(p, blocks, out) };
        }
        return;
    }
    scalar_blocks(p, blocks, out);
}

/// Whether `avx2::rows_in_lanes` takes this call: six to eight float32 rows
/// of 2- or 4-bit weights (a batch decoding together), on a CPU with AVX-512
/// F and VL. With fewer rows the lanes it leaves empty cost more than it
/// saves (`avx2::blocks` is faster up to five rows here); in bfloat16 the
/// roundings make the multiply-adds the whole cost, and there it was no
/// faster at eight rows.
#[cfg(target_arch = "x86_64")]
fn rows_in_lanes(p: &Problem) -> bool {
    (6..=8).contains(&p.m) && !p.bf16 && matches!(p.bits, 2 | 4) && crate::cpu::math::has_avx512_vl()
}

/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
unsafe fn avx2_blocks(p: &Problem, blocks: Range<usize>, out: OutPtr) {
    match (p.bits, p.bf16) {
        (2, false) => avx2::blocks::<2, false>(p, blocks, out),
        (4, false) => avx2::blocks::<4, false>(p, blocks, out),
        (8, false) => avx2::blocks::<8, false>(p, blocks, out),
        (2, true) => avx2::blocks::<2, true>(p, blocks, out),
        (4, true) => avx2::blocks::<4, true>(p, blocks, out),
        _ => avx2::blocks::<8, true>(p, blocks, out),
    }
}

/// # Safety
/// The CPU must have AVX2, AVX-512 F and AVX-512 VL; `p` must be float32
/// with at most eight rows and 2- or 4-bit weights.
#[cfg(target_arch = "x86_64")]
unsafe fn avx512_rows(p: &Problem, blocks: Range<usize>, out: OutPtr) {
    match p.bits {
        2 => avx2::rows_in_lanes::<2>(p, blocks, out),
        _ => avx2::rows_in_lanes::<4>(p, blocks, out),
    }
}

/// MLX's loop as written, for CPUs without AVX2 (and the reference in tests).
fn scalar_blocks(p: &Problem, blocks: Range<usize>, out: OutPtr) {
    let mask = (1u32 << p.bits) - 1;
    let per_word = 32 / p.bits;
    let (rw, g) = (p.row_words(), p.groups());
    let cols = blocks.start * BLOCK..(blocks.end * BLOCK).min(p.n);
    for m in 0..p.m {
        let x = &p.x[m * p.k..(m + 1) * p.k];
        for n in cols.clone() {
            let mut sum = 0f32;
            for (i, &xv) in x.iter().enumerate() {
                let gi = n * g + i / p.group_size;
                let (scale, bias) = (p.scales[gi], p.biases[gi]);
                let q = (p.w[n * rw + i / per_word] >> (p.bits * (i % per_word))) & mask;
                sum = if p.bf16 {
                    let r = round_bf16;
                    r(sum + r(xv * r(r(scale * q as f32) + bias)))
                } else {
                    sum + xv * (scale * q as f32 + bias)
                };
            }
            // SAFETY: (m, n) is inside `out`, and column n belongs to this call.
            unsafe { *out.0.add(m * p.n + n) = sum };
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::{OutPtr, Problem, BLOCK};

    pub(crate) const TILES: usize = BLOCK / 8;
    pub(crate) const MAX_GROUP: usize = 128;

    /// The first `count` lanes of `v` to `dst` (`count` past eight: all eight). A whole
    /// vector is one store; a loop over the lanes compiled to a `memcpy` call per vector,
    /// 6% of a Qwen3-0.6B prompt's samples in the exact kernel's panel path.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) unsafe fn store_lanes(dst: *mut f32, v: __m256, count: usize) {
        if count >= 8 {
            return _mm256_storeu_ps(dst, v);
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), v);
        for (c, &l) in lanes.iter().enumerate().take(count) {
            *dst.add(c) = l;
        }
    }
    /// How far ahead in each row the next words are prefetched (128 bytes):
    /// the 32 rows read side by side are more streams than the hardware
    /// prefetcher follows (decode's LM head: 30 ms to 25 ms here, measured
    /// when rows were still gathered).
    const PREFETCH_WORDS: usize = 32;

    /// Column blocks of 32 outputs: per group of `k`, the block's weights are
    /// dequantized once (`scale * q + bias`, rounded as MLX rounds it) into
    /// four 8-lane vectors per `k`, then every row of `x` adds `x[k] * w` to
    /// its accumulators, `k` in order. Two rows at a time keep eight
    /// independent sums in flight. Columns past `n` repeat the last column
    /// and are not written.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn blocks<const B: usize, const BF: bool>(p: &Problem, blocks: Range<usize>, out: OutPtr) {
        let (rw, groups, gs) = (p.row_words(), p.groups(), p.group_size);
        let mut acc = vec![_mm256_setzero_ps(); p.m * TILES];
        let mut wd = [_mm256_setzero_ps(); TILES * MAX_GROUP];
        for block in blocks {
            let n0 = block * BLOCK;
            acc.fill(_mm256_setzero_ps());
            // Gather offsets of each lane's row, in words and in groups.
            let (mut w_rows, mut g_rows) = ([[0i32; 8]; TILES], [[0i32; 8]; TILES]);
            for t in 0..TILES {
                for j in 0..8 {
                    let row = (n0 + t * 8 + j).min(p.n - 1);
                    w_rows[t][j] = (row * rw) as i32;
                    g_rows[t][j] = (row * groups) as i32;
                }
            }
            let mut w_off = [_mm256_setzero_si256(); TILES];
            let mut g_off = [_mm256_setzero_si256(); TILES];
            for t in 0..TILES {
                w_off[t] = _mm256_loadu_si256(w_rows[t].as_ptr().cast());
                g_off[t] = _mm256_loadu_si256(g_rows[t].as_ptr().cast());
            }
            if p.m == 1 {
                single_row::<B, BF>(p, &w_rows, &w_off, &g_off, acc.as_mut_ptr());
            } else {
                for g in 0..groups {
                    dequantize_group::<B, BF>(p, g, &w_rows, &w_off, &g_off, &mut wd);
                    mac_all_rows::<BF>(&wd, gs, p.x.as_ptr().add(g * gs), p.k, p.m, acc.as_mut_ptr());
                }
            }
            for m in 0..p.m {
                for t in (0..TILES).filter(|t| n0 + t * 8 < p.n) {
                    store_lanes(out.0.add(m * p.n + n0 + t * 8), acc[m * TILES + t], p.n - n0 - t * 8);
                }
            }
        }
    }

    /// `scale * q + bias`, each operation rounded as MLX's compute type does.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) unsafe fn dequant<const BF: bool>(scale: __m256, q: __m256i, bias: __m256) -> __m256 {
        round::<BF>(_mm256_add_ps(round::<BF>(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(q))), bias))
    }

    /// `acc + x * w`, each operation rounded as MLX's compute type does.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) unsafe fn mac<const BF: bool>(acc: __m256, x: __m256, w: __m256) -> __m256 {
        round::<BF>(_mm256_add_ps(acc, round::<BF>(_mm256_mul_ps(x, w))))
    }

    /// For bfloat16, `super::round_bf16` on every lane; otherwise nothing.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn round<const BF: bool>(v: __m256) -> __m256 {
        if !BF {
            return v;
        }
        let u = _mm256_castps_si256(v);
        let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(u), _mm256_set1_epi32(1));
        let r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
        let r = _mm256_and_si256(r, _mm256_set1_epi32(0xFFFF_0000u32 as i32));
        let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v);
        _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC0_0000)), nan)
    }

    /// Words `start..start + count` (count at most 8) of a tile's eight rows,
    /// as vectors of one word per row: for eight words, eight row loads and
    /// an 8x8 transpose (AMD's gathers are microcoded and cost several times
    /// as much); fewer are gathered.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) unsafe fn tile_words(w: *const u32, rows: &[i32; 8], offsets: __m256i, start: usize, count: usize) -> [__m256i; 8] {
        let mut out = [_mm256_setzero_si256(); 8];
        if count == 8 {
            let r: [__m256i; 8] = std::array::from_fn(|j| _mm256_loadu_si256(w.add(rows[j] as usize + start).cast()));
            let t: [__m256i; 8] = std::array::from_fn(|i| {
                let (a, b) = (r[2 * (i / 2)], r[2 * (i / 2) + 1]);
                if i % 2 == 0 {
                    _mm256_unpacklo_epi32(a, b)
                } else {
                    _mm256_unpackhi_epi32(a, b)
                }
            });
            // u[0..4]: rows 0-3 (words 0/4, 1/5, 2/6, 3/7 in the two halves); u[4..8]: rows 4-7.
            let u: [__m256i; 8] = std::array::from_fn(|i| {
                let (a, b) = (t[4 * (i / 4) + (i % 4) / 2], t[4 * (i / 4) + (i % 4) / 2 + 2]);
                if i % 2 == 0 {
                    _mm256_unpacklo_epi64(a, b)
                } else {
                    _mm256_unpackhi_epi64(a, b)
                }
            });
            for i in 0..4 {
                out[i] = _mm256_permute2x128_si256::<0x20>(u[i], u[i + 4]);
                out[i + 4] = _mm256_permute2x128_si256::<0x31>(u[i], u[i + 4]);
            }
        } else {
            for (i, o) in out.iter_mut().enumerate().take(count) {
                *o = _mm256_i32gather_epi32::<4>(w.add(start + i).cast(), offsets);
            }
        }
        out
    }

    /// One group of the block's weights, dequantized into `wd` (`[tile][k]`).
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn dequantize_group<const B: usize, const BF: bool>(
        p: &Problem,
        g: usize,
        w_rows: &[[i32; 8]; TILES],
        w_off: &[__m256i; TILES],
        g_off: &[__m256i; TILES],
        wd: &mut [__m256; TILES * MAX_GROUP],
    ) {
        let per_word = 32 / B;
        let words_per_group = p.group_size / per_word;
        let chunk = words_per_group.min(8);
        let mask = _mm256_set1_epi32(((1u32 << B) - 1) as i32);
        for t in 0..TILES {
            // As in `single_row`: 32 rows side by side are more streams than the
            // hardware prefetcher follows (a batch of eight decoding together on
            // Qwen3-0.6B 4-bit: 5.0 to 5.6 tokens/s each, measured here).
            for &r in &w_rows[t] {
                // A prefetch past the buffer's end is harmless (it never faults).
                _mm_prefetch::<_MM_HINT_T0>(p.w.as_ptr().wrapping_add(r as usize + g * words_per_group + PREFETCH_WORDS).cast());
            }
            let scale = _mm256_i32gather_ps::<4>(p.scales.as_ptr().add(g), g_off[t]);
            let bias = _mm256_i32gather_ps::<4>(p.biases.as_ptr().add(g), g_off[t]);
            for c in (0..words_per_group).step_by(chunk) {
                let words = tile_words(p.w.as_ptr(), &w_rows[t], w_off[t], g * words_per_group + c, chunk);
                for (i, &wv) in words.iter().enumerate().take(chunk) {
                    for e in 0..per_word {
                        let q = _mm256_and_si256(_mm256_srl_epi32(wv, _mm_cvtsi32_si128((B * e) as i32)), mask);
                        *wd.get_unchecked_mut(t * MAX_GROUP + (c + i) * per_word + e) = dequant::<BF>(scale, q, bias);
                    }
                }
            }
        }
    }

    /// A single row of `x` (a decode step): nothing to reuse the dequantized
    /// weights for, so they go straight into the four tiles' sums.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn single_row<const B: usize, const BF: bool>(
        p: &Problem,
        w_rows: &[[i32; 8]; TILES],
        w_off: &[__m256i; TILES],
        g_off: &[__m256i; TILES],
        acc: *mut __m256,
    ) {
        let per_word = 32 / B;
        let words_per_group = p.group_size / per_word;
        // Words per step: a group, or several small groups together (4-bit
        // groups of 32 have 4 words) so that a tile's words come as eight row
        // loads and a transpose rather than as gathers. Each lane still sums
        // its column in `k` order, so the bits do not change.
        let span = if words_per_group < 8 && p.row_words().is_multiple_of(8) { 8 } else { words_per_group };
        let chunk = span.min(8);
        let mask = _mm256_set1_epi32(((1u32 << B) - 1) as i32);
        for first in (0..p.row_words()).step_by(span) {
            let x = p.x.as_ptr().add(first * per_word);
            for t in 0..TILES {
                for &r in &w_rows[t] {
                    // A prefetch past the buffer's end is harmless (it never faults).
                    _mm_prefetch::<_MM_HINT_T0>(p.w.as_ptr().add(r as usize + first + PREFETCH_WORDS).cast());
                }
            }
            // Two tiles at a time: two sums in flight hide most of an add's
            // latency, and few enough values are live that the sums stay in
            // registers (all four tiles at once spilled them, a store and a
            // load in every sum's chain; one at a time waits on each add).
            for t in (0..TILES).step_by(2) {
                let (mut scale, mut bias) = ([_mm256_setzero_ps(); 2], [_mm256_setzero_ps(); 2]);
                let (mut s0, mut s1) = (*acc.add(t), *acc.add(t + 1));
                for c in (0..span).step_by(chunk) {
                    let w0 = tile_words(p.w.as_ptr(), &w_rows[t], w_off[t], first + c, chunk);
                    let w1 = tile_words(p.w.as_ptr(), &w_rows[t + 1], w_off[t + 1], first + c, chunk);
                    for i in 0..chunk {
                        if (c + i) % words_per_group == 0 {
                            let g = (first + c + i) / words_per_group;
                            scale = [0, 1].map(|d| _mm256_i32gather_ps::<4>(p.scales.as_ptr().add(g), g_off[t + d]));
                            bias = [0, 1].map(|d| _mm256_i32gather_ps::<4>(p.biases.as_ptr().add(g), g_off[t + d]));
                        }
                        let (v0, v1) = (w0[i], w1[i]);
                        for e in 0..per_word {
                            let xv = _mm256_set1_ps(*x.add((c + i) * per_word + e));
                            let shift = _mm_cvtsi32_si128((B * e) as i32);
                            let q0 = _mm256_and_si256(_mm256_srl_epi32(v0, shift), mask);
                            let q1 = _mm256_and_si256(_mm256_srl_epi32(v1, shift), mask);
                            s0 = mac::<BF>(s0, xv, dequant::<BF>(scale[0], q0, bias[0]));
                            s1 = mac::<BF>(s1, xv, dequant::<BF>(scale[1], q1, bias[1]));
                        }
                    }
                }
                *acc.add(t) = s0;
                *acc.add(t + 1) = s1;
            }
        }
    }

    /// Up to eight float32 rows of `x` (a batch decoding together), one row
    /// per lane, for 2- and 4-bit weights on CPUs with AVX-512 (F and VL):
    /// each lane of a column's sum adds that column's `x[k] * w[k]` for its
    /// row, `k` in order, rounded as in `blocks`, so every output keeps MLX's
    /// value. Unlike `blocks` (eight columns per lane), a weight is then one
    /// broadcast for all the rows, and a group of a column dequantizes with
    /// no transpose or gather: `scale * q + bias` for the 16 values of `q`
    /// (`lut_table`), then per eight weights a shift and a table permute
    /// (`lut8`). The work goes in jobs of eight columns by one group; a job's
    /// weights are dequantized into one buffer while the previous job's, in
    /// the other, are multiplied and added (`mac_set`), so that the permutes
    /// and stores share the cycles of the multiply-adds, which bound it.
    /// Lanes past `m` hold zeros and are not written; columns past `n` repeat
    /// the last column and are not written.
    #[target_feature(enable = "avx2,avx512f,avx512vl")]
    pub(super) unsafe fn rows_in_lanes<const B: usize>(p: &Problem, blocks: Range<usize>, out: OutPtr) {
        const SETS: usize = BLOCK / 8;
        let (rw, groups, gs) = (p.row_words(), p.groups(), p.group_size);
        let wpg = gs * B / 32;
        // x transposed: xt[k] holds x[0..m][k].
        let mut xt = vec![_mm256_setzero_ps(); p.k];
        for (kk, v) in xt.iter_mut().enumerate() {
            let mut lanes = [0f32; 8];
            for (r, l) in lanes.iter_mut().enumerate().take(p.m) {
                *l = *p.x.get_unchecked(r * p.k + kk);
            }
            *v = _mm256_loadu_ps(lanes.as_ptr());
        }
        let mut buf = vec![0f32; 2 * 8 * gs];
        let mut acc = [_mm256_setzero_ps(); BLOCK];
        for block in blocks {
            let n0 = block * BLOCK;
            acc.fill(_mm256_setzero_ps());
            // Job i: group i / SETS of columns n0 + 8 * (i % SETS) + 0..8.
            let job = |i: usize| {
                let (g, set) = (i / SETS, i % SETS);
                let mut j = Job { w: [std::ptr::null(); 8], scale: [0.0; 8], bias: [0.0; 8] };
                for c in 0..8 {
                    let row = (n0 + set * 8 + c).min(p.n - 1);
                    let gi = row * groups + g;
                    j.w[c] = p.w.as_ptr().add(row * rw + g * wpg);
                    j.scale[c] = *p.scales.get_unchecked(gi);
                    j.bias[c] = *p.biases.get_unchecked(gi);
                    // As in `dequantize_group`; past the buffer's end it is harmless (it never faults).
                    _mm_prefetch::<_MM_HINT_T0>(j.w[c].wrapping_add(PREFETCH_WORDS).cast());
                }
                j
            };
            let jobs = groups * SETS;
            let first = job(0);
            for c in 0..8 {
                let (lo, hi) = lut_table::<B>(&first, c);
                for j in 0..gs / 8 {
                    _mm256_storeu_ps(buf.as_mut_ptr().add(c * gs + 8 * j), lut8::<B>(first.w[c], j, lo, hi));
                }
            }
            for i in 0..jobs {
                let (cur, next) = (buf.as_mut_ptr().add((i % 2) * 8 * gs), buf.as_mut_ptr().add(((i + 1) % 2) * 8 * gs));
                let x = xt.as_ptr().add((i / SETS) * gs);
                let a = acc.as_mut_ptr().add((i % SETS) * 8);
                if i + 1 < jobs {
                    mac_set::<B, true>(cur, x, gs, a, &job(i + 1), next);
                } else {
                    mac_set::<B, false>(cur, x, gs, a, &first, next);
                }
            }
            for (c, a) in acc.iter().enumerate() {
                let n = n0 + c;
                if n >= p.n {
                    break;
                }
                let mut lanes = [0f32; 8];
                _mm256_storeu_ps(lanes.as_mut_ptr(), *a);
                for (m, &v) in lanes.iter().enumerate().take(p.m) {
                    *out.0.add(m * p.n + n) = v;
                }
            }
        }
    }

    /// Eight columns' group of weights: where their words are, and their
    /// scales and biases.
    struct Job {
        w: [*const u32; 8],
        scale: [f32; 8],
        bias: [f32; 8],
    }

    /// Eight columns' sums (rows in lanes) gain one dequantized group `wd`
    /// (`[column][k]`): `acc[c] += x[k] * wd[c][k]`, `k` in order. With `NEXT`,
    /// eight weights of `next` are dequantized into `dst` (the same layout)
    /// per `k`: a job has `8 * gs` weights.
    #[target_feature(enable = "avx2,avx512f,avx512vl")]
    #[inline]
    unsafe fn mac_set<const B: usize, const NEXT: bool>(wd: *const f32, x: *const __m256, gs: usize, acc: *mut __m256, next: &Job, dst: *mut f32) {
        let mut a: [__m256; 8] = std::array::from_fn(|c| *acc.add(c));
        let mut kk = 0;
        for c in 0..8 {
            let (lo, hi) = if NEXT { lut_table::<B>(next, c) } else { (_mm256_setzero_ps(), _mm256_setzero_ps()) };
            for j in 0..gs / 8 {
                if NEXT {
                    _mm256_storeu_ps(dst.add(c * gs + 8 * j), lut8::<B>(next.w[c], j, lo, hi));
                }
                let xv = *x.add(kk);
                for (c, s) in a.iter_mut().enumerate() {
                    *s = mac::<false>(*s, xv, _mm256_broadcast_ss(&*wd.add(c * gs + kk)));
                }
                kk += 1;
            }
        }
        for (c, s) in a.iter().enumerate() {
            *acc.add(c) = *s;
        }
    }

    /// Column `c` of a job: the values `scale * q + bias` can take, rounded
    /// as `dequant` rounds them (float32), for `q` 0..8 and 8..16 (at 2 bits 0..4 twice:
    /// `lut8`'s 8-entry permute reads three bits).
    #[target_feature(enable = "avx2,avx512f,avx512vl")]
    #[inline]
    unsafe fn lut_table<const B: usize>(job: &Job, c: usize) -> (__m256, __m256) {
        let (lo, hi) = if B == 4 {
            (_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15))
        } else {
            let q = _mm256_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3);
            (q, q)
        };
        let (scale, bias) = (_mm256_set1_ps(job.scale[c]), _mm256_set1_ps(job.bias[c]));
        (dequant::<false>(scale, lo, bias), dequant::<false>(scale, hi, bias))
    }

    /// Weights `8j..8j + 8` of the group at `w`, dequantized: each lane takes
    /// its word (broadcast), shifts its value down and looks it up in the
    /// table (`vpermt2ps` reads four bits, `vpermps` three).
    #[target_feature(enable = "avx2,avx512f,avx512vl")]
    #[inline]
    unsafe fn lut8<const B: usize>(w: *const u32, j: usize, lo: __m256, hi: __m256) -> __m256 {
        if B == 4 {
            let v = _mm256_set1_epi32(*w.add(j) as i32);
            let q = _mm256_srlv_epi32(v, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
            _mm256_permutex2var_ps(lo, q, hi)
        } else {
            let v = _mm256_set1_epi32(*w.add(j / 2) as i32);
            let shifts =
                if j.is_multiple_of(2) { _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14) } else { _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30) };
            _mm256_permutevar8x32_ps(lo, _mm256_srlv_epi32(v, shifts))
        }
    }

    /// Every one of `m` rows of `x` (`k` apart, `x0` at the group's first
    /// column) against one dequantized group, two rows at a time (`mac_rows`);
    /// row `r`'s tile sums at `acc[r * TILES..]`.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) unsafe fn mac_all_rows<const BF: bool>(
        wd: &[__m256; TILES * MAX_GROUP],
        gs: usize,
        x0: *const f32,
        k: usize,
        m: usize,
        acc: *mut __m256,
    ) {
        let mut r = 0;
        while r + 2 <= m {
            mac_rows::<2, BF>(wd, gs, [x0.add(r * k), x0.add((r + 1) * k)], acc.add(r * TILES));
            r += 2;
        }
        if r < m {
            mac_rows::<1, BF>(wd, gs, [x0.add(r * k)], acc.add(r * TILES));
        }
    }

    /// `R` rows of `x` against one dequantized group: each row's four tile
    /// sums gain `x[k] * w[k]`, `k` in order.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn mac_rows<const R: usize, const BF: bool>(wd: &[__m256; TILES * MAX_GROUP], gs: usize, x: [*const f32; R], acc: *mut __m256) {
        let mut a = [[_mm256_setzero_ps(); TILES]; R];
        for r in 0..R {
            for t in 0..TILES {
                a[r][t] = *acc.add(r * TILES + t);
            }
        }
        for kk in 0..gs {
            let mut xv = [_mm256_setzero_ps(); R];
            for r in 0..R {
                xv[r] = _mm256_set1_ps(*x[r].add(kk));
            }
            for t in 0..TILES {
                let w = *wd.get_unchecked(t * MAX_GROUP + kk);
                for r in 0..R {
                    a[r][t] = mac::<BF>(a[r][t], xv[r], w);
                }
            }
        }
        for r in 0..R {
            for t in 0..TILES {
                *acc.add(r * TILES + t) = a[r][t];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{quantize, quantized_matmul_mlx, Mode};
    use crate::random;

    /// The portable loop (CPUs without AVX2) gives MLX's op's bits too, in
    /// float32 and in bfloat16.
    /// Random `x` `[m, k]` and weights `[n, k]` quantized in groups of `gs` to
    /// `bits`, as host vectors for a `Problem`, with MLX's op's output.
    struct Case {
        x: Vec<f32>,
        w: Vec<u32>,
        scales: Vec<f32>,
        biases: Vec<f32>,
        dims: [i32; 5],
        bf16: bool,
        want: Vec<f32>,
    }

    impl Case {
        fn new(dims: [i32; 5], bf16: bool, x_seed: u64, w_seed: u64) -> Case {
            let [m, k, n, gs, bits] = dims;
            let key = |s: u64| random::key(s).unwrap();
            let dt = if bf16 { Dtype::Bfloat16 } else { Dtype::Float32 };
            let x = random::normal(&[m, k], Dtype::Float32, 0.0, 1.0, Some(&key(x_seed))).unwrap().astype(dt).unwrap();
            let w = random::normal(&[n, k], Dtype::Float32, 0.0, 0.1, Some(&key(w_seed))).unwrap().astype(dt).unwrap();
            let (wq, s, b) = quantize(&w, gs, bits, Mode::Affine).unwrap();
            let b = b.expect("affine quantization has biases");
            let want = quantized_matmul_mlx(&x, &wq, &s, Some(&b), true, gs, bits, Mode::Affine).unwrap().to_vec::<f32>().unwrap();
            let host = |a: &Array| a.to_vec::<f32>().unwrap();
            Case { x: host(&x), w: wq.to_vec::<u32>().unwrap(), scales: host(&s), biases: host(&b), dims, bf16, want }
        }

        fn problem(&self) -> Problem<'_> {
            let [m, k, n, gs, bits] = self.dims.map(|d| d as usize);
            Problem { x: &self.x, w: &self.w, scales: &self.scales, biases: &self.biases, m, n, k, group_size: gs, bits, bf16: self.bf16 }
        }
    }

    #[test]
    fn scalar_loop_equals_mlx_op() {
        let cases = [(1, 256, 70, 64, 4, false), (3, 128, 33, 32, 8, false), (2, 256, 40, 128, 2, false), (3, 256, 40, 64, 4, true)];
        for (i, &(m, k, n, gs, bits, bf16)) in cases.iter().enumerate() {
            let c = Case::new([m, k, n, gs, bits], bf16, i as u64, 50 + i as u64);
            let (p, want) = (c.problem(), c.want.as_slice());
            let mut got = vec![0f32; want.len()];
            scalar_blocks(&p, 0..(n as usize).div_ceil(BLOCK), OutPtr(got.as_mut_ptr()));
            assert!(got.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()), "case {i}");
        }
    }

    /// A batch's rows (six to eight) give MLX's op's bits both on the AVX2
    /// path (which CPUs without AVX-512 take) and, where this CPU has AVX-512,
    /// on `rows_in_lanes`, whichever `run_blocks` would pick here.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn batch_rows_equal_mlx_op_on_both_x86_paths() {
        if !crate::cpu::math::has_avx2() {
            return;
        }
        let avx512 = crate::cpu::math::has_avx512_vl();
        // Column counts off the 32-column block, every group size, 2 and 4 bits.
        let cases = [(8, 256, 70, 64, 4), (6, 128, 33, 32, 4), (7, 256, 40, 128, 2), (8, 128, 64, 32, 2), (8, 256, 20, 128, 4)];
        for (i, &(m, k, n, gs, bits)) in cases.iter().enumerate() {
            let c = Case::new([m, k, n, gs, bits], false, 20 + i as u64, 70 + i as u64);
            let (p, want) = (c.problem(), c.want.as_slice());
            assert!(!avx512 || rows_in_lanes(&p), "case {i}: rows_in_lanes should take it");
            let blocks = 0..(n as usize).div_ceil(BLOCK);
            let mut got = vec![0f32; want.len()];
            // SAFETY: the CPU has AVX2, checked above.
            unsafe { avx2_blocks(&p, blocks.clone(), OutPtr(got.as_mut_ptr())) };
            assert!(got.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()), "case {i}: AVX2");
            if avx512 {
                got.fill(f32::NAN);
                // SAFETY: the CPU has AVX2 and AVX-512 F and VL; p is float32, 2 or 4 bits, at most 8 rows.
                unsafe { avx512_rows(&p, blocks, OutPtr(got.as_mut_ptr())) };
                assert!(got.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()), "case {i}: AVX-512");
            }
        }
    }
}
