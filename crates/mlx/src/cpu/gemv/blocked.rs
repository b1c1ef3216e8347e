//! The blocked path: OpenBLAS's level-3 driver with its Haswell-type or
//! AVX-512 micro-kernel, which sum each output's K block in `k` order.
use std::arch::x86_64::*;
use std::ops::Range;

use super::{OutPtr, Problem, BLOCK};

const TILES: usize = BLOCK / 8;
/// 64-byte lines of the next column block prefetched per step (eight `k`
/// of one tile): a block is `BLOCK * k` floats and takes `TILES * k / 8`
/// steps, so four lines a step reach its end as this block ends.
const PREFETCH_LINES: usize = 4;

/// Rows of `x` summed against a tile at once: their two K blocks' sums (eight
/// vectors), the tile's eight transposed `k` and a broadcast fill AVX2's sixteen
/// vector registers. More rows are taken in turns while the tile is in L1 or L2.
const CHUNK: usize = 4;

/// Column blocks of 32 outputs for every row of `x`: each lane sums its own
/// column's K block in `k` order with fused multiply-adds, and adds each
/// block's sum to its output in block order (so a row's bits do not depend on
/// the other rows, as in OpenBLAS). Eight `k` of eight weight rows are read as
/// eight row loads and a transpose. Columns past `n` repeat the last column
/// and are not written.
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
///
/// # Safety
/// The CPU has AVX2 and FMA.
pub(super) unsafe fn blocks(p: &Problem, blocks: Range<usize>, out: OutPtr) {
    if p.m > CHUNK && crate::cpu::math::has_avx512_vl() {
        // SAFETY: the CPU has AVX-512 F and VL, checked just above.
        return unsafe { blocks_wide(p, blocks, out) };
    }
    blocks_in(p, blocks, out)
}

/// Five to eight rows of `x` against each tile in one turn, where AVX-512 VL's
/// 32 registers hold their sixteen sums (two K blocks each) beside the tile's
/// eight transposed `k`: each tile is loaded and transposed once instead of
/// once per turn of four rows. The same sums, so the same bits. Measured here
/// (2-core Zen 4, `sampling-bench --gemv`, one call, least of 20): 8 x 512 ->
/// 151936 (the 100M model's LM head for a batch of eight) 17.7 -> 11.6 ms, 8 x
/// 1024 -> 3072 0.70 -> 0.46 ms. Its own loop rather than `blocks_in` made
/// generic over the turn's rows and called from here: written that way, the
/// eight-row case measured 16-17 ms (its tiles' code did not get the 32
/// registers).
#[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
unsafe fn blocks_wide(p: &Problem, blocks: Range<usize>, out: OutPtr) {
    let w = p.w.as_ptr();
    let w_end = w.add(p.w.len()).cast::<u8>();
    for block in blocks {
        let n0 = block * BLOCK;
        let mut ahead = Ahead { next: w.add((n0 + BLOCK).min(p.n) * p.k).cast(), end: w_end };
        for t in 0..TILES {
            let cols: [usize; 8] = std::array::from_fn(|j| (n0 + t * 8 + j).min(p.n - 1));
            match p.m {
                5 => tile::<5>(p, &cols, 0, n0 + t * 8, &mut ahead, PREFETCH_LINES, out),
                6 => tile::<6>(p, &cols, 0, n0 + t * 8, &mut ahead, PREFETCH_LINES, out),
                7 => tile::<7>(p, &cols, 0, n0 + t * 8, &mut ahead, PREFETCH_LINES, out),
                _ => tile::<8>(p, &cols, 0, n0 + t * 8, &mut ahead, PREFETCH_LINES, out),
            }
        }
    }
}

/// Rows in turns of `CHUNK`.
#[target_feature(enable = "avx2,fma")]
unsafe fn blocks_in(p: &Problem, blocks: Range<usize>, out: OutPtr) {
    let w = p.w.as_ptr();
    let w_end = w.add(p.w.len()).cast::<u8>();
    for block in blocks {
        let n0 = block * BLOCK;
        let mut ahead = Ahead { next: w.add((n0 + BLOCK).min(p.n) * p.k).cast(), end: w_end };
        for t in 0..TILES {
            let cols: [usize; 8] = std::array::from_fn(|j| (n0 + t * 8 + j).min(p.n - 1));
            // The turns share the prefetching, so that the next block streams in
            // while the later turns, which find this tile in cache, compute.
            let lines = PREFETCH_LINES / p.m.div_ceil(CHUNK);
            let mut r0 = 0;
            while r0 < p.m {
                match p.m - r0 {
                    1 => tile::<1>(p, &cols, r0, n0 + t * 8, &mut ahead, lines, out),
                    2 => tile::<2>(p, &cols, r0, n0 + t * 8, &mut ahead, lines, out),
                    3 => tile::<3>(p, &cols, r0, n0 + t * 8, &mut ahead, lines, out),
                    _ => tile::<CHUNK>(p, &cols, r0, n0 + t * 8, &mut ahead, lines, out),
                }
                r0 += CHUNK.min(p.m - r0);
            }
        }
    }
}

/// Rows `r0..r0 + R` of `x` against the tile of weight rows `cols`, written to
/// outputs `col0..col0 + 8` (those below `n`).
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn tile<const R: usize>(p: &Problem, cols: &[usize; 8], r0: usize, col0: usize, ahead: &mut Ahead, lines: usize, out: OutPtr) {
    let rows: [*const f32; 8] = std::array::from_fn(|j| p.w.as_ptr().add(cols[j] * p.k));
    let x = p.x.as_ptr().add(r0 * p.k);
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
            ahead.prefetch(2 * lines);
            step(p.k, x, &rows, s0 + i, &mut a0);
            step(p.k, x, &rows, s1 + i, &mut a1);
        }
        for i in (both..l0).step_by(8) {
            ahead.prefetch(lines);
            step(p.k, x, &rows, s0 + i, &mut a0);
        }
        for i in (both..l1).step_by(8) {
            ahead.prefetch(lines);
            step(p.k, x, &rows, s1 + i, &mut a1);
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
            if col0 + j < p.n {
                *out.0.add((r0 + r) * p.n + col0 + j) = v;
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

/// `k` = `kk..kk + 8` of the tile `rows` into the sums `acc`, one per row of
/// `x` from `x` on (rows `k` apart).
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn step<const R: usize>(k: usize, x: *const f32, rows: &[*const f32; 8], kk: usize, acc: &mut [__m256; R]) {
    let v = transposed(rows, kk);
    for (i, &wv) in v.iter().enumerate() {
        for (r, a) in acc.iter_mut().enumerate() {
            let xv = _mm256_broadcast_ss(&*x.add(r * k + kk + i));
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
        if i % 2 == 0 {
            _mm256_unpacklo_ps(a, b)
        } else {
            _mm256_unpackhi_ps(a, b)
        }
    });
    // u[0..4]: rows 0-3 (k 0/4, 1/5, 2/6, 3/7 in the two halves); u[4..8]: rows 4-7.
    let u: [__m256; 8] = std::array::from_fn(|i| {
        let (a, b) = (t[4 * (i / 4) + (i % 4) / 2], t[4 * (i / 4) + (i % 4) / 2 + 2]);
        if i % 2 == 0 {
            _mm256_shuffle_ps::<0x44>(a, b)
        } else {
            _mm256_shuffle_ps::<0xEE>(a, b)
        }
    });
    std::array::from_fn(|i| if i < 4 { _mm256_permute2f128_ps::<0x20>(u[i], u[i + 4]) } else { _mm256_permute2f128_ps::<0x31>(u[i - 4], u[i]) })
}
