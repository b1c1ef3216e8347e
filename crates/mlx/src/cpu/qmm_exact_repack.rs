//! `cpu::qmm`'s arithmetic, with MLX's bits, on weights repacked once at
//! load (`qmm_repack`'s layout): the exact-precision layers of a model hold
//! their weights this way, so that no call lays them out again.
//!
//! `cpu::qmm` computes each output as MLX's `_qmm_t` does, one sum in index
//! order, `sum += x[k] * (scale * q[k] + bias)`, every operation rounded to
//! the compute type (float32, or bfloat16 after every operation), no fused
//! multiply-add; on MLX's layout it first gathers eight columns' words into
//! the lanes of a vector, per call. The repacked layout already holds a
//! tile's eight columns in the eight lanes, so one column's weight `k` for
//! all eight is a load, a shift and a mask. The dequantized vector (`scale *
//! q + bias`, rounded as MLX rounds it) is computed once per `k` and used for
//! every row of `x`, several tiles' sums in flight; each lane still sums its own
//! column in index order with the same roundings, so every output keeps
//! MLX's value (tested below against `cpu::qmm` and MLX's op, on every path
//! this CPU has).
use std::ops::Range;

use crate::cpu::half::round_bf16;
use crate::cpu::kernel::{par_ranges, KernelF32, OutPtr};
use crate::cpu::qmm::PARALLEL_MIN;
use crate::cpu::qmm_int8::{Isa, TILE};
use crate::cpu::qmm_repack::{operands, repacked_weight, scale_bias, SbFormat};

/// Tiles per block of columns, the unit split over the cores (`cpu::qmm`'s
/// 32-column blocks, whose row loop takes four tiles).
const BLOCK_TILES: usize = 4;

/// `params`: `[k, n, group_size, bits, format, c, bf16, fused]` (`format, c`:
/// `SbFormat::params`; `bf16` 1 to round every operation to bfloat16; `fused`,
/// optional, 1 for fast precision's fused multiply-adds, see `Exact::fused`);
/// `inputs`: `x` (float32), the repacked weights and scales; `out`: `x`'s
/// rows by `n`.
pub(crate) const QMM_EXACT_REPACKED: KernelF32 = |params, inputs, out| {
    let (Some(([k, n, group_size, bits], format, x, w, sb)), Some(&bf16)) = (operands(params, inputs, out.len()), params.get(6)) else {
        return out.fill(f32::NAN);
    };
    let bf16 = bf16 == 1.0;
    let fused = !bf16 && params.get(7) == Some(&1.0);
    let p = Exact { x, xp: &[], w, sb, format, m: x.len() / k, n, k, group_size, bits, bf16, fused };
    run(&p, Isa::detect(), out)
};

/// The whole call on `isa`'s paths: `x`'s rows interleaved first where the
/// 512-bit panel will read them (`Exact::xp`), then the columns split over
/// the cores.
fn run(p: &Exact, isa: Isa, out: &mut [f32]) {
    let parallel = p.m * p.n * p.k >= PARALLEL_MIN;
    #[cfg(target_arch = "x86_64")]
    let wide_panel = matches!(isa, Isa::Avx512Vnni | Isa::Amx) && !p.bf16 && !p.fused && p.m > x86::WIDE_ROWS;
    #[cfg(target_arch = "x86_64")]
    let xp = if wide_panel { x86::interleave_passes(p, parallel) } else { Vec::new() };
    #[cfg(not(target_arch = "x86_64"))]
    let xp: Vec<f32> = Vec::new();
    let p = &Exact { xp: &xp, ..*p };
    let out = OutPtr(out.as_mut_ptr());
    let tiles = p.n.div_ceil(TILE);
    par_ranges(tiles.div_ceil(BLOCK_TILES), parallel, |blocks| {
        let tiles = blocks.start * BLOCK_TILES..(blocks.end * BLOCK_TILES).min(tiles);
        run_tiles(p, tiles, out, isa)
    });
}

/// One call's operands, as the kernel sees them.
#[derive(Clone, Copy)]
pub(super) struct Exact<'a> {
    x: &'a [f32],
    /// `x` again, each pass of the 512-bit panel's rows interleaved (`x86::interleave_passes`),
    /// where that panel runs (`run`); empty elsewhere. Only the x86 path reads it.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    xp: &'a [f32],
    w: &'a [u32],
    sb: &'a [f32],
    format: SbFormat,
    m: usize,
    n: usize,
    k: usize,
    group_size: usize,
    bits: usize,
    /// Round every operation to bfloat16 (MLX's `_MLX_BFloat16` arithmetic).
    bf16: bool,
    /// Fast precision's prompt chunks (`quant::fast_prompt_runs_exact`, float32 only): the same
    /// dequantized weights and order, but each step one fused multiply-add, `sum = fma(x[k],
    /// w[k], sum)` (not MLX's bits; the same bits on every CPU). On AVX2 the panel path's loop
    /// then issues half the instructions: 408 x 1024 -> 3072 at 4 bits in groups of 32, two
    /// threads, Zen 3: 15.6-19.4 against 22.5-23.4 ms.
    fused: bool,
}

impl Exact<'_> {
    fn groups(&self) -> usize {
        self.k / self.group_size
    }
}

/// The exact kernel has a portable path and an AVX2 one: any `Isa` but the
/// portable one (each needs AVX2 and F16C, as this path does) runs AVX2, and
/// the AVX-512 ones run float32 rows on 512-bit vectors where they can.
fn run_tiles(p: &Exact, tiles: Range<usize>, out: OutPtr, isa: Isa) {
    match isa {
        Isa::Scalar => scalar_tiles(p, tiles, out),
        // An AVX2 CPU without FMA (none is known) sums fused steps in the portable loop.
        #[cfg(target_arch = "x86_64")]
        _ if p.fused && !crate::cpu::math::has_avx2_fma() => scalar_tiles(p, tiles, out),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::detect` (or the tests' `available`) chose it: the CPU has AVX2 and F16C
        // (and FMA, checked above, for fused sums), and AVX-512 F for the AVX-512 ones.
        _ => unsafe { x86::tiles_avx2(p, tiles, out, matches!(isa, Isa::Avx512Vnni | Isa::Amx)) },
    }
}

/// `cpu::qmm`'s portable loop on the repacked layout (CPUs without AVX2, and
/// the reference in tests): each column's weights dequantized once, then
/// every row's sum in index order.
fn scalar_tiles(p: &Exact, tiles: Range<usize>, out: OutPtr) {
    let groups = p.groups();
    let r = |v: f32| if p.bf16 { round_bf16(v) } else { v };
    let mut wd = vec![0f32; p.k];
    for col in tiles.start * TILE..(tiles.end * TILE).min(p.n) {
        for (e, v) in wd.iter_mut().enumerate() {
            let (scale, bias) = scale_bias(p.sb, p.format, groups, col, e / p.group_size);
            *v = r(r(scale * repacked_weight(p.w, p.k, p.bits, col, e) as f32) + bias);
        }
        for m in 0..p.m {
            let row = p.x[m * p.k..][..p.k].iter().zip(&wd);
            let sum = if p.fused { row.fold(0f32, |sum, (&x, &w)| x.mul_add(w, sum)) } else { row.fold(0f32, |sum, (&x, &w)| r(sum + r(x * w))) };
            // SAFETY: (m, col) is inside `out`, and the column belongs to this call.
            unsafe { *out.0.add(m * p.n + col) = sum };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::Exact;
    use crate::cpu::kernel::{par_ranges, OutPtr};
    use crate::cpu::qmm::avx2::{dequant, mac, mac_all_rows, store_lanes, MAX_GROUP, TILES};
    use crate::cpu::qmm_int8::TILE;
    use crate::cpu::qmm_repack::tile_words;
    use crate::cpu::qmm_repack::x86::{pair_scale_bias, pair_vector, prefetch_tiles, scale_bias};

    /// Tiles per column panel of the many-rows path, and rows per pass over
    /// it: 6 x 2 sums, two weights and a broadcast fill 15 of AVX2's 16
    /// registers. Fewer rows than `ROWS` keep `few_rows` (`cpu::qmm`'s loop,
    /// four tiles), which was faster for two and three rows (1024 -> 3072,
    /// 4 bits, one thread, Zen 3: 0.45-0.75 against 1.02-1.08 ms at two).
    const PANEL: usize = 2;
    const ROWS: usize = 6;

    /// Rows per pass over a panel on 512-bit vectors: twelve sums, a weight
    /// vector and a broadcast in AVX-512's 32 registers with room to spare.
    pub(super) const WIDE_ROWS: usize = 12;

    /// The panel's passes over `m` rows, at most `rows` each, as even as they
    /// go (8 rows: 4 + 4, not 6 + 2; at least three where `m >= ROWS`: a pass
    /// of one or two rows has too few sums in flight to hide the adds'
    /// latency): each pass's first row and count.
    fn passes(m: usize, rows: usize) -> impl Iterator<Item = (usize, usize)> {
        let count = m.div_ceil(rows);
        (0..count).scan(0, move |m0, pass| {
            let r = (m - *m0).div_ceil(count - pass);
            *m0 += r;
            Some((*m0 - r, r))
        })
    }

    /// `x` with each 512-bit panel pass's rows interleaved, position by
    /// position (a pass of `r` rows from `m0`: `x[m0 + j][e]` at
    /// `m0 * k + e * r + j`), so that a pass reads one stream. Read in place,
    /// its rows' streams were `k` floats apart, and at the models' `k`
    /// (multiples of 1024) all twelve fell in the same L1 set, more lines than
    /// its ways: 408 x 1024 -> 3072 at 4 bits, one thread, Zen 4, 34.5 ms
    /// against 23.9 at `k` = 1056 (docs/kernels.md). Threads take whole passes.
    pub(super) fn interleave_passes(p: &Exact, parallel: bool) -> Vec<f32> {
        let k = p.k;
        let mut xp = vec![0f32; p.x.len()];
        let passes: Vec<_> = passes(p.m, WIDE_ROWS).collect();
        let dst = OutPtr(xp.as_mut_ptr());
        par_ranges(passes.len(), parallel, |range| {
            let dst: OutPtr = dst;
            for &(m0, r) in &passes[range] {
                // Sixteen positions (a line of each row) at a time.
                for e0 in (0..k).step_by(16) {
                    for j in 0..r {
                        for e in e0..(e0 + 16).min(k) {
                            // SAFETY: `m0 * k + e * r + j` < `(m0 + r) * k` <= `x.len()`, and
                            // each pass writes only its own rows' span.
                            unsafe { *dst.0.add(m0 * k + e * r + j) = p.x[(m0 + j) * k + e] };
                        }
                    }
                }
            }
        });
        xp
    }

    /// # Safety
    /// The CPU must have AVX2 and F16C, FMA for `p.fused`, and AVX-512 F
    /// for `wide` (float32 exact rows on 512-bit vectors: `rows_wide`,
    /// `panel_rows_wide`).
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn tiles_avx2(p: &Exact, tiles: Range<usize>, out: OutPtr, wide: bool) {
        match (p.bits, p.bf16, p.fused) {
            (2, false, false) => all::<2, false, false>(p, tiles, out, wide),
            (4, false, false) => all::<4, false, false>(p, tiles, out, wide),
            (8, false, false) => all::<8, false, false>(p, tiles, out, wide),
            (2, true, _) => all::<2, true, false>(p, tiles, out, false),
            (4, true, _) => all::<4, true, false>(p, tiles, out, false),
            (8, true, _) => all::<8, true, false>(p, tiles, out, false),
            (2, false, true) => all::<2, false, true>(p, tiles, out, false),
            (4, false, true) => all::<4, false, true>(p, tiles, out, false),
            _ => all::<8, false, true>(p, tiles, out, false),
        }
    }

    /// The tiles two at a time (a panel) for `ROWS` rows or more (any number with fused
    /// sums, `F`), four at a time for fewer, two at a time for one (then one, at the end of `n`).
    /// `wide`: up to `WIDE_ROWS` rows run `rows_wide` (an odd last tile as above), more the
    /// panel.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn all<const B: usize, const BF: bool, const F: bool>(p: &Exact, tiles: Range<usize>, out: OutPtr, wide: bool) {
        let mut wd = Vec::new();
        let mut acc = vec![_mm256_setzero_ps(); if (2..ROWS).contains(&p.m) { p.m * TILES } else { 0 }];
        let mut t = tiles.start;
        while t < tiles.end {
            let left = tiles.end - t;
            t += if wide && p.m <= WIDE_ROWS && left >= 2 {
                rows_wide_all::<B>(p, t, left, out)
            } else if p.m >= ROWS || F {
                panel::<B, BF, F>(p, t, left.min(PANEL), &mut wd, out, wide);
                left.min(PANEL)
            } else if p.m > 1 {
                few_rows::<B, BF>(p, t, left.min(TILES), &mut acc, out);
                left.min(TILES)
            } else {
                match left {
                    1 => single_row::<1, B, BF>(p, t, out),
                    _ => single_row::<2, B, BF>(p, t, out),
                }
            };
        }
    }

    /// Group `g`'s share of `tiles`' weights and scales, read ahead
    /// (`prefetch_tiles`, one share per group of the tiles computing now).
    #[inline(always)]
    unsafe fn prefetch(p: &Exact, tiles: Range<usize>, g: usize) {
        let groups = p.groups();
        prefetch_tiles(p.w, p.sb, (tile_words(p.k, p.bits), groups * p.format.group_words()), tiles, g, groups);
    }

    /// Weight `e` of a tile's vector of words `v` (slot `e / 4` of the
    /// vector's, byte `e % 4`) in each lane: a shift and a mask.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn unpack<const B: usize>(v: __m256i, j: usize, i: usize) -> __m256i {
        let q = _mm256_srl_epi32(v, _mm_cvtsi32_si128((8 * i + j * B) as i32));
        if B == 8 && i == 3 {
            q
        } else {
            _mm256_and_si256(q, _mm256_set1_epi32(((1u32 << B) - 1) as i32))
        }
    }

    /// One row of `x` (a decode step) against `T` tiles from `tile0`: each
    /// weight vector dequantized and added straight into its tile's sum, `T`
    /// sums in flight. Two tiles: four spilled the sums and scales out of
    /// AVX2's 16 registers (0.81 against 0.62 ns per eight weights on one
    /// thread, 1024 -> 3072 at 4 bits; four on AVX-512's 32 registers, 0.60,
    /// gained nothing more).
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn single_row<const T: usize, const B: usize, const BF: bool>(p: &Exact, tile0: usize, out: OutPtr) -> usize {
        let (groups, per) = (p.groups(), 8 / B);
        // Vectors of words per group: each holds 32 / B weights of every column.
        let vpg = p.group_size * B / 32;
        let tw = tile_words(p.k, B);
        let wt: [*const u32; T] = std::array::from_fn(|t| p.w.as_ptr().add((tile0 + t) * tw));
        let sbt: [*const f32; T] = std::array::from_fn(|t| p.sb.as_ptr().add((tile0 + t) * groups * p.format.group_words()));
        let x = p.x.as_ptr();
        let mut acc = [_mm256_setzero_ps(); T];
        let ahead = tile0 + T..tile0 + 2 * T;
        for g in 0..groups {
            prefetch(p, ahead.clone(), g);
            let sb: [(__m256, __m256); T] = std::array::from_fn(|t| scale_bias(sbt[t], p.format, g));
            for u in g * vpg..(g + 1) * vpg {
                let v: [__m256i; T] = std::array::from_fn(|t| _mm256_loadu_si256(wt[t].add(u * TILE).cast()));
                for j in 0..per {
                    for i in 0..4 {
                        let xv = _mm256_set1_ps(*x.add(4 * (u * per + j) + i));
                        for t in 0..T {
                            acc[t] = mac::<BF>(acc[t], xv, dequant::<BF>(sb[t].0, unpack::<B>(v[t], j, i), sb[t].1));
                        }
                    }
                }
            }
        }
        for (t, a) in acc.iter().enumerate() {
            store(p, 0, tile0 + t, *a, out);
        }
        T
    }

    /// `R` rows of `x` (a decode step, or a batch of up to `WIDE_ROWS`)
    /// against `P` pairs of tiles from `tile0` on 512-bit vectors: each pair's
    /// sixteen columns in one vector (the first tile's eight lanes low, the
    /// next's high). Each weight vector is dequantized once, in registers, and
    /// added into every row's sums: no panel goes through memory (for a batch
    /// of eight, storing and reloading `panel`'s panel stalled more than its
    /// sums took). Each lane has `dequant`'s and `mac`'s operations in their
    /// order, so the same bits. Float32 only; loops, not closures, so that all
    /// of it is compiled with this function's CPU features. Measured:
    /// docs/kernels.md#exact-precision-on-repacked-weights.
    #[target_feature(enable = "avx2,f16c,avx512f")]
    #[inline]
    unsafe fn rows_wide<const P: usize, const R: usize, const B: usize>(p: &Exact, tile0: usize, out: OutPtr) -> usize {
        let (groups, per) = (p.groups(), 8 / B);
        let vpg = p.group_size * B / 32;
        let (tw, gw) = (tile_words(p.k, B), groups * p.format.group_words());
        let (mut wt, mut sbt) = ([[std::ptr::null::<u32>(); 2]; P], [[std::ptr::null::<f32>(); 2]; P]);
        for t in 0..P {
            for h in 0..2 {
                wt[t][h] = p.w.as_ptr().add((tile0 + 2 * t + h) * tw);
                sbt[t][h] = p.sb.as_ptr().add((tile0 + 2 * t + h) * gw);
            }
        }
        let mut x = [std::ptr::null::<f32>(); R];
        for (r, x) in x.iter_mut().enumerate() {
            *x = p.x.as_ptr().add(r * p.k);
        }
        let (mask, shift_b) = (_mm512_set1_epi32(((1u32 << B) - 1) as i32), _mm_cvtsi32_si128(B as i32));
        let mut acc = [[_mm512_setzero_ps(); P]; R];
        let ahead = tile0 + 2 * P..tile0 + 4 * P;
        for g in 0..groups {
            prefetch(p, ahead.clone(), g);
            let mut sb = [[_mm512_setzero_ps(); 2]; P];
            for t in 0..P {
                sb[t] = pair_scale_bias(sbt[t][0], sbt[t][1], p.format, g);
            }
            for u in g * vpg..(g + 1) * vpg {
                let mut v = [_mm512_setzero_si512(); P];
                for t in 0..P {
                    v[t] = pair_vector(wt[t][0], wt[t][1], u);
                }
                // Weight `e` of a word sits at bit `8 * i + j * B`: each slot `j` starts from the
                // words shifted by `B` once more, and each byte `i` by 8 (an immediate shift: a
                // shift by a register count is two more instructions a weight, and the loops are
                // too long to unroll).
                for j in 0..per {
                    let mut cur = v;
                    for i in 0..4 {
                        let e = 4 * (u * per + j) + i;
                        for t in 0..P {
                            let q = if B == 8 && i == 3 { cur[t] } else { _mm512_and_si512(cur[t], mask) };
                            let [scale, bias] = sb[t];
                            let w = _mm512_add_ps(_mm512_mul_ps(scale, _mm512_cvtepi32_ps(q)), bias);
                            for r in 0..R {
                                acc[r][t] = _mm512_add_ps(acc[r][t], _mm512_mul_ps(_mm512_set1_ps(*x[r].add(e)), w));
                            }
                            cur[t] = _mm512_srli_epi32::<8>(cur[t]);
                        }
                    }
                    for v in v.iter_mut() {
                        *v = _mm512_srl_epi32(*v, shift_b);
                    }
                }
            }
        }
        for (r, a) in acc.iter().enumerate() {
            for (t, &a) in a.iter().enumerate() {
                store_wide(p, r, tile0 + 2 * t, a, out);
            }
        }
        2 * P
    }

    /// `rows_wide` for all of `p`'s rows (at most `WIDE_ROWS`) from `tile0`,
    /// `left` (at least two) tiles to go: two pairs at a time for one to
    /// three rows (more sums in flight), one pair for more.
    #[target_feature(enable = "avx2,f16c,avx512f")]
    #[inline]
    unsafe fn rows_wide_all<const B: usize>(p: &Exact, tile0: usize, left: usize, out: OutPtr) -> usize {
        let two = left >= 4;
        match p.m {
            1 if two => rows_wide::<2, 1, B>(p, tile0, out),
            1 => rows_wide::<1, 1, B>(p, tile0, out),
            2 if two => rows_wide::<2, 2, B>(p, tile0, out),
            2 => rows_wide::<1, 2, B>(p, tile0, out),
            3 if two => rows_wide::<2, 3, B>(p, tile0, out),
            3 => rows_wide::<1, 3, B>(p, tile0, out),
            4 => rows_wide::<1, 4, B>(p, tile0, out),
            5 => rows_wide::<1, 5, B>(p, tile0, out),
            6 => rows_wide::<1, 6, B>(p, tile0, out),
            7 => rows_wide::<1, 7, B>(p, tile0, out),
            8 => rows_wide::<1, 8, B>(p, tile0, out),
            9 => rows_wide::<1, 9, B>(p, tile0, out),
            10 => rows_wide::<1, 10, B>(p, tile0, out),
            11 => rows_wide::<1, 11, B>(p, tile0, out),
            _ => rows_wide::<1, WIDE_ROWS, B>(p, tile0, out),
        }
    }

    /// Row `m`'s sums of tiles `tile` and `tile + 1` (low and high half).
    #[target_feature(enable = "avx2,avx512f")]
    #[inline]
    unsafe fn store_wide(p: &Exact, m: usize, tile: usize, sums: __m512, out: OutPtr) {
        store(p, m, tile, _mm512_castps512_ps256(sums), out);
        store(p, m, tile + 1, _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(sums))), out);
    }

    /// Rows of `x` (a small batch) against `count` (at most four) tiles
    /// from `tile0`: per group, the tiles' weights dequantized once into a
    /// buffer (`cpu::qmm`'s `[tile][k]`), then every row's sums gain them,
    /// two rows at a time, by `cpu::qmm`'s own loop. Tiles past `count` are
    /// zeros, their sums not stored.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn few_rows<const B: usize, const BF: bool>(p: &Exact, tile0: usize, count: usize, acc: &mut [__m256], out: OutPtr) {
        let (groups, per, gs) = (p.groups(), 8 / B, p.group_size);
        let vpg = gs * B / 32;
        let tw = tile_words(p.k, B);
        let mut wd = [_mm256_setzero_ps(); TILES * MAX_GROUP];
        acc.fill(_mm256_setzero_ps());
        for g in 0..groups {
            prefetch(p, tile0 + TILES..tile0 + 2 * TILES, g);
            for t in 0..count {
                let wt = p.w.as_ptr().add((tile0 + t) * tw);
                let (scale, bias) = scale_bias(p.sb.as_ptr().add((tile0 + t) * groups * p.format.group_words()), p.format, g);
                for u in 0..vpg {
                    let v = _mm256_loadu_si256(wt.add((g * vpg + u) * TILE).cast());
                    for j in 0..per {
                        for i in 0..4 {
                            *wd.get_unchecked_mut(t * MAX_GROUP + 4 * (u * per + j) + i) = dequant::<BF>(scale, unpack::<B>(v, j, i), bias);
                        }
                    }
                }
            }
            mac_all_rows::<BF>(&wd, gs, p.x.as_ptr().add(g * gs), p.k, p.m, acc.as_mut_ptr());
        }
        for m in 0..p.m {
            for t in 0..count {
                store(p, m, tile0 + t, acc[m * TILES + t], out);
            }
        }
    }

    /// `ROWS` or more rows of `x` (a prompt, a batch) against `count` (one or two) tiles
    /// from `tile0`: the tiles' weights dequantized once, for all of `k`, into
    /// `wd` (a column panel: `[k][PANEL]`, 64 bytes a weight position, 192 KB at
    /// `k` = 3072, which stays in L2), then `ROWS` rows at a time sum them
    /// over all of `k` in registers (`ROWS * PANEL` sums, two weight loads
    /// and `ROWS` broadcasts per position: the multiplies and adds, not the
    /// loads, set the pace). A tile past `count` is zeros, its sums not stored.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn panel<const B: usize, const BF: bool, const F: bool>(
        p: &Exact,
        tile0: usize,
        count: usize,
        wd: &mut Vec<__m256>,
        out: OutPtr,
        wide: bool,
    ) {
        let (groups, per, gs) = (p.groups(), 8 / B, p.group_size);
        let vpg = gs * B / 32;
        let tw = tile_words(p.k, B);
        // Sized once per call; only a tile past `count` (the last panel of an odd number of
        // tiles) is zeroed, as the others are overwritten: zeroing all of it cost 6% of a prompt.
        wd.resize(p.k * PANEL, _mm256_setzero_ps());
        for t in count..PANEL {
            for e in 0..p.k {
                *wd.get_unchecked_mut(e * PANEL + t) = _mm256_setzero_ps();
            }
        }
        // `wide` only for float32 (`all`), a whole panel (its tiles side by side), and rows
        // interleaved for it (`run` does so wherever this can be reached).
        let wide = wide && count == PANEL && p.xp.len() == p.x.len();
        if wide {
            dequant_panel_wide::<B>(p, tile0, wd);
        } else {
            for t in 0..count {
                let wt = p.w.as_ptr().add((tile0 + t) * tw);
                let sbt = p.sb.as_ptr().add((tile0 + t) * groups * p.format.group_words());
                for g in 0..groups {
                    prefetch(p, tile0 + PANEL + t..tile0 + PANEL + t + 1, g);
                    let (scale, bias) = scale_bias(sbt, p.format, g);
                    for u in 0..vpg {
                        let v = _mm256_loadu_si256(wt.add((g * vpg + u) * TILE).cast());
                        for j in 0..per {
                            for i in 0..4 {
                                let e = g * gs + 4 * (u * per + j) + i;
                                *wd.get_unchecked_mut(e * PANEL + t) = dequant::<BF>(scale, unpack::<B>(v, j, i), bias);
                            }
                        }
                    }
                }
            }
        }
        for (m, r) in passes(p.m, if wide { WIDE_ROWS } else { ROWS }) {
            if wide {
                pass_rows_wide(p, m, r, wd, tile0, out);
                continue;
            }
            match r {
                // Exact sums reach these only past `ROWS` rows (see above); fused ones, any count.
                1 => pass_rows::<1, BF, F>(p, m, wd, tile0, count, out),
                2 => pass_rows::<2, BF, F>(p, m, wd, tile0, count, out),
                3 => pass_rows::<3, BF, F>(p, m, wd, tile0, count, out),
                4 => pass_rows::<4, BF, F>(p, m, wd, tile0, count, out),
                5 => pass_rows::<5, BF, F>(p, m, wd, tile0, count, out),
                _ => pass_rows::<ROWS, BF, F>(p, m, wd, tile0, count, out),
            }
        }
    }

    /// The panel's two tiles (`PANEL`) dequantized into `wd` on 512-bit
    /// vectors, both tiles' eight columns of a position in one (as
    /// `rows_wide` takes them): `dequant`'s operations per lane, half
    /// the instructions (the 256-bit dequantizing was more of a batch of
    /// eight's time than its sums). Float32 only.
    #[target_feature(enable = "avx2,f16c,avx512f")]
    #[inline]
    unsafe fn dequant_panel_wide<const B: usize>(p: &Exact, tile0: usize, wd: &mut [__m256]) {
        let (groups, per, gs) = (p.groups(), 8 / B, p.group_size);
        let vpg = gs * B / 32;
        let (tw, gw) = (tile_words(p.k, B), groups * p.format.group_words());
        let [wa, wb] = [0, 1].map(|t| p.w.as_ptr().add((tile0 + t) * tw));
        let [sa, sb] = [0, 1].map(|t| p.sb.as_ptr().add((tile0 + t) * gw));
        let mask = _mm512_set1_epi32(((1u32 << B) - 1) as i32);
        let out = wd.as_mut_ptr().cast::<f32>();
        for g in 0..groups {
            prefetch(p, tile0 + PANEL..tile0 + 2 * PANEL, g);
            let [scale, bias] = pair_scale_bias(sa, sb, p.format, g);
            for u in g * vpg..(g + 1) * vpg {
                let v = pair_vector(wa, wb, u);
                for j in 0..per {
                    for i in 0..4 {
                        let shifted = _mm512_srl_epi32(v, _mm_cvtsi32_si128((8 * i + j * B) as i32));
                        let q = if B == 8 && i == 3 { shifted } else { _mm512_and_si512(shifted, mask) };
                        let w = _mm512_add_ps(_mm512_mul_ps(scale, _mm512_cvtepi32_ps(q)), bias);
                        let e = 4 * (u * per + j) + i;
                        _mm512_storeu_ps(out.add(e * PANEL * TILE), w);
                    }
                }
            }
        }
    }

    /// `panel_rows_wide::<r>` (`r` from `ROWS` to `WIDE_ROWS`: the panel runs
    /// for `ROWS` rows or more, and passes split them evenly).
    #[inline(always)]
    unsafe fn pass_rows_wide(p: &Exact, m0: usize, r: usize, wd: &[__m256], tile0: usize, out: OutPtr) {
        match r {
            6 => panel_rows_wide::<6>(p, m0, wd, tile0, out),
            7 => panel_rows_wide::<7>(p, m0, wd, tile0, out),
            8 => panel_rows_wide::<8>(p, m0, wd, tile0, out),
            9 => panel_rows_wide::<9>(p, m0, wd, tile0, out),
            10 => panel_rows_wide::<10>(p, m0, wd, tile0, out),
            11 => panel_rows_wide::<11>(p, m0, wd, tile0, out),
            _ => panel_rows_wide::<WIDE_ROWS>(p, m0, wd, tile0, out),
        }
    }

    /// `panel_rows` (float32, MLX's steps) on 512-bit vectors: a panel
    /// position's two tiles are adjacent in `wd`, so one 512-bit load holds
    /// them (the first low, the second high) and each row's step is one
    /// multiply and one add for sixteen columns. The rows' `x` come
    /// interleaved (`interleave_passes`). Each lane keeps its column's
    /// operations and order: the same bits.
    #[target_feature(enable = "avx2,avx512f")]
    unsafe fn panel_rows_wide<const R: usize>(p: &Exact, m0: usize, wd: &[__m256], tile0: usize, out: OutPtr) {
        let x = p.xp.as_ptr().add(m0 * p.k);
        let w = wd.as_ptr().cast::<f32>();
        let mut acc = [_mm512_setzero_ps(); R];
        for e in 0..p.k {
            let wv = _mm512_loadu_ps(w.add(e * PANEL * TILE));
            for (r, acc) in acc.iter_mut().enumerate() {
                *acc = _mm512_add_ps(*acc, _mm512_mul_ps(_mm512_set1_ps(*x.add(e * R + r)), wv));
            }
        }
        for (r, &a) in acc.iter().enumerate() {
            store_wide(p, m0 + r, tile0, a, out);
        }
    }

    /// `panel_rows` with MLX's steps, or `panel_rows_fused` (`F`).
    #[inline(always)]
    unsafe fn pass_rows<const R: usize, const BF: bool, const F: bool>(p: &Exact, m0: usize, wd: &[__m256], tile0: usize, count: usize, out: OutPtr) {
        if F {
            panel_rows_fused::<R>(p, m0, wd, tile0, count, out)
        } else {
            panel_rows::<R, BF>(p, m0, wd, tile0, count, out)
        }
    }

    /// Rows `m0..m0 + R` against the dequantized panel `wd`: each lane sums
    /// its column in index order, `sum += x[k] * w[k]` (`cpu::qmm`'s `mac`).
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn panel_rows<const R: usize, const BF: bool>(p: &Exact, m0: usize, wd: &[__m256], tile0: usize, count: usize, out: OutPtr) {
        panel_rows_with::<R, BF, false>(p, m0, wd, tile0, count, out)
    }

    /// As `panel_rows`, each step one fused multiply-add (`Exact::fused`; float32).
    #[target_feature(enable = "avx2,fma")]
    unsafe fn panel_rows_fused<const R: usize>(p: &Exact, m0: usize, wd: &[__m256], tile0: usize, count: usize, out: OutPtr) {
        panel_rows_with::<R, false, true>(p, m0, wd, tile0, count, out)
    }

    #[inline(always)]
    unsafe fn panel_rows_with<const R: usize, const BF: bool, const F: bool>(
        p: &Exact,
        m0: usize,
        wd: &[__m256],
        tile0: usize,
        count: usize,
        out: OutPtr,
    ) {
        let x: [*const f32; R] = std::array::from_fn(|r| p.x.as_ptr().add((m0 + r) * p.k));
        let w = wd.as_ptr();
        let mut acc = [[_mm256_setzero_ps(); PANEL]; R];
        for e in 0..p.k {
            let wv: [__m256; PANEL] = std::array::from_fn(|t| *w.add(e * PANEL + t));
            for r in 0..R {
                let xv = _mm256_set1_ps(*x[r].add(e));
                for t in 0..PANEL {
                    acc[r][t] = if F { _mm256_fmadd_ps(xv, wv[t], acc[r][t]) } else { mac::<BF>(acc[r][t], xv, wv[t]) };
                }
            }
        }
        for (r, a) in acc.iter().enumerate() {
            for (t, &sums) in a.iter().enumerate().take(count) {
                store(p, m0 + r, tile0 + t, sums, out);
            }
        }
    }

    /// Row `m`'s sums of tile `tile` into `out` (its columns below `n`).
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn store(p: &Exact, m: usize, tile: usize, sums: __m256, out: OutPtr) {
        store_lanes(out.0.add(m * p.n + tile * TILE), sums, p.n - tile * TILE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::half::round_f16;
    use crate::cpu::qmm_repack::tests::repack;
    use crate::quant::{quantize, quantized_matmul_mlx, Mode};
    use crate::{random, Array, Dtype};

    /// Every path this CPU has, on the repacked layout, gives the bits of
    /// MLX's op and of `cpu::qmm` on MLX's layout: float32 and bfloat16,
    /// every width and group size, 1 to 12, 25 and 70 rows and a prompt, `n`
    /// a multiple of the tile and not, the scales and biases held in each
    /// format; a NaN and an infinity in `x` included. The whole kernel (its
    /// split over the cores too) gives them as well. With fused sums (fast
    /// precision, float32), every path gives the bits of one `mul_add` per
    /// step in index order on the same dequantized weights.
    #[test]
    fn every_path_gives_mlxs_bits() {
        // (rows, k, n, group size, bits, bfloat16)
        let cases = [
            (1, 256, 70, 64, 4, false),
            (2, 128, 33, 32, 8, false),
            (3, 256, 40, 128, 2, false),
            (4, 192, 17, 64, 8, true),
            (5, 128, 9, 32, 4, false),
            (6, 256, 20, 128, 4, true),
            (7, 96, 12, 32, 2, false),
            // 96-wide 4-bit rows, which the fast kernel declines.
            (8, 96, 10, 32, 4, true),
            (9, 128, 24, 64, 2, true),
            (11, 128, 13, 64, 8, false),
            (70, 64, 13, 32, 4, false),
            (1, 512, 44, 128, 8, true),
            (1, 64, 5, 32, 2, false),
            // One row on 512-bit vectors: four tiles at a time then two, at each width; 12 and 25
            // rows: a whole and an even split of AVX-512's passes.
            (1, 128, 48, 32, 8, false),
            (1, 256, 32, 64, 4, false),
            (1, 128, 24, 32, 2, false),
            (12, 128, 32, 32, 8, false),
            (25, 64, 17, 32, 4, false),
            // Enough work to split over the cores (`PARALLEL_MIN`).
            (200, 128, 44, 32, 4, false),
            // Float32 batches on 512-bit vectors (`rows_wide`): one pair at a time for 4 to 12
            // rows (8: a decode step of eight sequences), two for 2 and 3, each with an odd
            // last tile.
            (8, 256, 44, 64, 4, false),
            (4, 128, 40, 32, 2, false),
            (6, 128, 24, 128, 8, false),
            (10, 64, 40, 32, 4, false),
            (2, 128, 72, 64, 4, false),
            (9, 64, 17, 64, 8, false),
        ];
        for (i, &(m, k, n, gs, bits, bf16)) in cases.iter().enumerate() {
            let dt = if bf16 { Dtype::Bfloat16 } else { Dtype::Float32 };
            let key = |s: u64| random::key(s).unwrap();
            let mut x = random::normal(&[m, k], Dtype::Float32, 0.0, 1.0, Some(&key(300 + i as u64))).unwrap().astype(dt).unwrap();
            let w = random::normal(&[n, k], Dtype::Float32, 0.0, 0.1, Some(&key(400 + i as u64))).unwrap().astype(dt).unwrap();
            let (wq, s, b) = quantize(&w, gs, bits, Mode::Affine).unwrap();
            let host = |a: &Array| a.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap();
            let (mut s, mut b) = (host(&s), host(&b.unwrap()));
            // Float32 scales in each format in turn, rounded to it first (for scales alone, the
            // biases -8 times the scales, as a GGUF Q4_0 block's); bfloat16 ones as bfloat16, and
            // the same values as float32.
            let formats = if bf16 {
                vec![SbFormat::Bf16, SbFormat::F32]
            } else {
                let format = [SbFormat::F32, SbFormat::F16, SbFormat::Bf16, SbFormat::F16Scaled(-8.0)][i % 4];
                let round = [|v: f32| v, round_f16, round_bf16, round_f16][i % 4];
                s.iter_mut().chain(b.iter_mut()).for_each(|v| *v = round(*v));
                if let SbFormat::F16Scaled(c) = format {
                    b.iter_mut().zip(&s).for_each(|(b, s)| *b = s * c);
                }
                vec![format]
            };
            if m >= 3 {
                let mut xs = host(&x);
                xs[3] = f32::NAN;
                xs[(m as usize - 1) * k as usize + k as usize / 2] = f32::INFINITY;
                x = Array::from_slice(&xs, &[m, k]).unwrap().astype(dt).unwrap();
            }
            let arr = |v: &[f32]| Array::from_slice(v, &[n, k / gs]).unwrap().astype(dt).unwrap();
            let (sa, ba) = (arr(&s), arr(&b));
            let want = host(&quantized_matmul_mlx(&x, &wq, &sa, Some(&ba), true, gs, bits, Mode::Affine).unwrap());
            let per_call = crate::cpu::qmm::quantized_matmul(&x, &wq, &sa, &ba, gs, bits).unwrap().expect("cpu::qmm applies");
            let same = |got: &[f32], want: &[f32]| got.len() == want.len() && got.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same(&host(&per_call), &want), "case {i}: cpu::qmm differs from MLX's op");
            let xs = host(&x);
            let dims = [m, k, n, gs, bits].map(|d| d as usize);
            let [m, k, n, gs, bits] = dims;
            for format in formats {
                let (w, sb, format) = repack(&wq.to_vec::<u32>().unwrap(), &s, &b, (k, n, gs, bits), format);
                let p = Exact { x: &xs, xp: &[], w: &w, sb: &sb, format, m, n, k, group_size: gs, bits, bf16, fused: false };
                // Every `Isa` this CPU has (the VNNI ones run the AVX2 path too, and the AVX-512
                // ones its float32 rows on 512-bit vectors).
                for isa in Isa::available() {
                    let mut got = vec![f32::NAN; m * n];
                    run(&p, isa, &mut got);
                    assert!(same(&got, &want), "case {i}, {isa:?}, {format:?}: differs from MLX's op");
                }
                let [code, c] = format.params();
                let params = [k, n, gs, bits].map(|v| v as f32).into_iter().chain([code, c, bf16 as u8 as f32]).collect::<Vec<_>>();
                // SAFETY: u32 and f32 have the same size and alignment (the kernel's input is the words' bits).
                let wf = unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<f32>(), w.len()) };
                let mut got = vec![f32::NAN; m * n];
                QMM_EXACT_REPACKED(&params, &[&xs, wf, &sb], &mut got);
                assert!(same(&got, &want), "case {i}, {format:?}: the kernel differs from MLX's op");
                // Inputs of the wrong size make NaN rather than reading out of bounds.
                QMM_EXACT_REPACKED(&params, &[&xs, &wf[1..], &sb], &mut got);
                assert!(got.iter().all(|v| v.is_nan()), "case {i}: a short weight was read");
                if bf16 {
                    continue;
                }
                let groups = k / gs;
                let dequantized = |col: usize, e: usize| {
                    let (scale, bias) = scale_bias(&sb, format, groups, col, e / gs);
                    scale * repacked_weight(&w, k, bits, col, e) as f32 + bias
                };
                let fused_want: Vec<f32> =
                    (0..m * n).map(|o| (0..k).fold(0f32, |sum, e| xs[o / n * k + e].mul_add(dequantized(o % n, e), sum))).collect();
                let fused = Exact { fused: true, ..p };
                for isa in Isa::available() {
                    let mut got = vec![f32::NAN; m * n];
                    run(&fused, isa, &mut got);
                    assert!(same(&got, &fused_want), "case {i}, {isa:?}, {format:?}: fused sums differ");
                }
                let fused_params = [params.as_slice(), &[1.0]].concat();
                QMM_EXACT_REPACKED(&fused_params, &[&xs, wf, &sb], &mut got);
                assert!(same(&got, &fused_want), "case {i}, {format:?}: the kernel's fused sums differ");
                if m * n * k >= 1 << 16 {
                    assert!(!same(&fused_want, &want), "case {i}: fused sums round like MLX's everywhere");
                }
            }
        }
    }
}
