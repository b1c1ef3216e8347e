//! Affine quantized matmul (`x @ dequantize(w).T`) for `precision: 'fast'`:
//! integer dot products on activations held as two 8-bit parts (llama.cpp's
//! CPU path holds one).
//!
//! MLX's exact op dequantizes every weight in float (`scale * q + bias`) and
//! sums in index order with a rounding after each operation, five float
//! operations per weight: compute-bound on a CPU (`cpu::qmm`). Here each row
//! of `x` is quantized per weight group to about 12 or 15 bits in two 8-bit
//! parts (`quantize_rows_body`: `x ~ d' * xq`, `xq = 2^s * hi + lo`), and per
//! group and output column
//!
//! `y += (sum_k xq[k] * q[k]) * (scale * d') + bias * sum_k x[k]`
//!
//! with `sum_k x[k]` taken as `d' * sum_k xq[k]`. The integer sums are exact
//! (AVX-VNNI/AVX-512 VNNI `vpdpbusd`, AVX2's `vpmaddubsw`, AMX's `tdpbsud`),
//! so only the rounding of `x` differs from exact arithmetic. The float steps
//! run in one fixed order with no fused multiply-add in every code path, so
//! the result has the same bits on every CPU (each path is checked against
//! the portable one in the tests below). Quality against the exact kernel on
//! a trained model is measured by `npm run bench:llama -- --quality-only`.
use std::ops::Range;

use crate::cpu::kernel::{cpu_kernel_f32, par_ranges, Kernel, KernelF32, OutPtr};
use crate::cpu::qmm::compute_dtype;
use crate::cpu::qmm_quantize::{lo_shift, quantize_rows};
use crate::{Array, Dtype, Result};

/// The kernel's result for `quantized_matmul(x, w, scales, biases, transpose =
/// true, group_size, bits)` in fast precision, or `None` where it does not
/// apply (another device, a batched `w`, other widths or group sizes, the
/// kernel switched off): the caller then runs the exact op.
pub(crate) fn quantized_matmul(x: &Array, w: &Array, scales: &Array, biases: &Array, group_size: i32, bits: i32) -> Result<Option<Array>> {
    // MLX's result dtype: x's and the scales' promotion.
    let Some(out_dtype) = compute_dtype(x.dtype(), scales.dtype()) else {
        return Ok(None);
    };
    if !matches!(bits, 2 | 4 | 8)
        || !matches!(group_size, 32 | 64 | 128)
        || w.dtype() != Dtype::Uint32
        || w.ndim() != 2
        || x.ndim() == 0
        || !matches!(biases.dtype(), Dtype::Float32 | Dtype::Float16 | Dtype::Bfloat16)
        || !Kernel::QmmInt8.enabled()
    {
        return Ok(None);
    }
    let (n, k) = (w.dim(0), x.dim(-1));
    let groups = k / group_size;
    let fits = |a: &Array| a.shape() == [n, groups];
    // 4-bit weights are unpacked 64 at a time.
    if bits == 4 && k % UNIT as i32 != 0 {
        return Ok(None);
    }
    if n <= 0 || k <= 0 || k % group_size != 0 || w.dim(1) * (32 / bits) != k || !fits(scales) || !fits(biases) || n >= 1 << 24 || k >= 1 << 24
        // Gathers use 32-bit offsets.
        || n as i64 * groups as i64 > i32::MAX as i64
    {
        return Ok(None);
    }
    let mut out_shape = x.shape();
    *out_shape.last_mut().expect("x has a last axis") = n;
    let params = [k as f32, n as f32, group_size as f32, bits as f32];
    let y = cpu_kernel_f32("QuantizedMatmulInt8", QMM_INT8, &params, &[x, w, scales, biases], &out_shape)?;
    Ok(Some(if out_dtype == Dtype::Float32 { y } else { y.astype(out_dtype)? }))
}

/// Up to this many rows of `x` (decode, small batches) the vector paths unpack
/// a tile's weights once for all rows and sum each row's products across the
/// vector afterwards; more rows (prompts) take the prompt path
/// (`x86::prompt_*`), which first lays the tile's weights out column per lane.
/// Both give the portable path's bits, which treats each row alone, so a row's
/// result does not depend on how many rows came with it (batch invariance: the
/// last row of a prompt gets the decode step's bits).
const ROWS: usize = 8;
/// Rows of `x` the prompt path runs against every tile before the next rows
/// (their quantized values stay in L2: 128 KiB at `k` = 1024). Only the x86
/// prompt paths use it.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) const CHUNK: usize = 64;

/// Output columns per tile (one vector lane each).
pub(super) const TILE: usize = 8;
/// Weights per block: what one vector holds unpacked (one byte each).
pub(super) const BLOCK: usize = 32;
/// Weights per unit of the activations' layout: 64, as one 32-byte load of
/// 4-bit weights unpacks into two blocks.
pub(super) const UNIT: usize = 64;
/// Below this many multiply-adds one thread does it all.
pub(super) const PARALLEL_MIN: usize = 1 << 21;

/// One call's operands, with `x` already quantized.
struct Problem<'a> {
    w: &'a [u32],
    scales: &'a [f32],
    biases: &'a [f32],
    /// `x` quantized (`quantize_rows`): per row its `hi` part then its `lo`
    /// part, `k` values each, every unit of 64 in `position` order.
    xq: &'a [i8],
    /// Per row and group: the scale `d / 2^s` of `2^s * hi + lo` (`s =
    /// lo_shift(bits)`), and the group's sum of the rounded `x`.
    xd: &'a [f32],
    xsum: &'a [f32],
    m: usize,
    n: usize,
    k: usize,
    group_size: usize,
    bits: usize,
}

impl Problem<'_> {
    fn groups(&self) -> usize {
        self.k / self.group_size
    }
    fn row_words(&self) -> usize {
        self.k * self.bits / 32
    }
    /// Row `m`'s part (0: `hi`, 1: `lo`) of the quantized `x`.
    fn xq(&self, m: usize, part: usize) -> &[i8] {
        &self.xq[(2 * m + part) * self.k..][..self.k]
    }
}

const QMM_INT8: KernelF32 = |params, inputs, out| {
    let [k, n, group_size, bits] = [params[0], params[1], params[2], params[3]].map(|v| v as usize);
    let (x, scales, biases) = (inputs[0], inputs[2], inputs[3]);
    let Some(w) = crate::cpu::qmm::mlx_words([k, n, group_size, bits], inputs, out.len()) else { return out.fill(f32::NAN) };
    let m = x.len() / k;
    let groups = k / group_size;
    let mut compute = |(xq, xd, xsum, _): &mut Scratch| {
        xq.resize(2 * m * k, 0);
        xd.resize(m * groups, 0.0);
        xsum.resize(m * groups, 0.0);
        quantize_rows(x, k, group_size, (bits, lo_shift(bits)), xq, xd, xsum);
        let p = Problem { w, scales, biases, xq, xd, xsum, m, n, k, group_size, bits };
        let out_ptr = OutPtr(out.as_mut_ptr());
        let isa = Isa::detect();
        par_ranges(n.div_ceil(TILE), m * n * k >= PARALLEL_MIN, |tiles| run_tiles(&p, tiles, out_ptr, isa));
    };
    if m <= ROWS {
        SCRATCH.with(|scratch| compute(&mut scratch.borrow_mut()));
    } else {
        // A prompt's rows: allocated per call (cheap next to its work), so that a long prompt
        // does not leave megabytes held by each thread.
        compute(&mut Default::default());
    }
};

/// The quantized rows of `x`, their scales and sums (`quantize_rows`), and
/// the repacked kernel's integer group sums (`qmm_repack::group_sums`).
pub(super) type Scratch = (Vec<i8>, Vec<f32>, Vec<f32>, Vec<i32>);

thread_local! {
    /// The quantized rows of a decode step's or small batch's `x`, kept per
    /// thread from call to call: a decode step makes about 200 of these
    /// calls, and allocating them each time showed up as malloc lock
    /// contention with the thread building the next graph.
    pub(super) static SCRATCH: std::cell::RefCell<Scratch> = const { std::cell::RefCell::new((Vec::new(), Vec::new(), Vec::new(), Vec::new())) };
}

/// `position(bits, i)` for every `i` of a unit.
pub(super) fn positions(bits: usize) -> [usize; UNIT] {
    std::array::from_fn(|i| position(bits, i))
}

/// Where weight `i` of a unit of 64 lands when unpacked. 8 bits: in order.
/// 4 bits (a 32-byte load): the low nibbles (even `i`) then the high ones (odd
/// `i`). 2 bits, per block of 32 (an 8-byte load): four runs of 8 by the
/// pair's place in its byte.
fn position(bits: usize, i: usize) -> usize {
    match bits {
        8 => i,
        4 => (i % 2) * BLOCK + i / 2,
        _ => (i / BLOCK) * BLOCK + (i % 4) * 8 + (i % BLOCK) / 4,
    }
}

/// Weight `e` of a packed row.
pub(super) fn weight(row: &[u32], bits: usize, e: usize) -> i32 {
    ((row[e * bits / 32] >> ((e * bits) % 32)) & ((1u32 << bits) - 1)) as i32
}

/// The instruction set a call runs on; every one gives the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    AvxVnni,
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
    /// Avx512Vnni's CPU with AMX-INT8 granted by the OS: the repacked
    /// kernel's rows of a batch or prompt run on tiles (`qmm_repack::amx`);
    /// everything else runs as on Avx512Vnni.
    #[cfg(target_arch = "x86_64")]
    Amx,
}

impl Isa {
    pub(crate) fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            // F16C (every AVX2 CPU has it) widens the repacked layout's 16-bit scales.
            use crate::cpu::math::beyond_avx2;
            let has_avx2 = || crate::cpu::math::has_avx2() && is_x86_feature_detected!("f16c");
            if has_avx2()
                && beyond_avx2()
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vnni")
                && is_x86_feature_detected!("avx512vl")
            {
                return match crate::cpu::qmm_repack::amx_usable() {
                    true => Isa::Amx,
                    false => Isa::Avx512Vnni,
                };
            }
            if has_avx2() && beyond_avx2() && is_x86_feature_detected!("avxvnni") {
                return Isa::AvxVnni;
            }
            if has_avx2() {
                return Isa::Avx2;
            }
        }
        Isa::Scalar
    }

    /// Its name in `mlxInfo().fastKernelPath`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "portable",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Isa::AvxVnni => "avx-vnni",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => "avx512-vnni",
            #[cfg(target_arch = "x86_64")]
            Isa::Amx => "amx",
        }
    }

    /// Whether this path's prompt rows beat the exact kernel's fused panel
    /// on the shapes where `quant::fast_prompt_runs_exact` weighs them: AVX-512
    /// VNNI's 512-bit rows and AMX's tiles do; AVX2's `vpmaddubsw` pairs and
    /// the portable loop do not (AVX-VNNI's 256-bit rows are unmeasured and
    /// count as not).
    pub(crate) fn prompts_beat_panel(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            matches!(self, Isa::Avx512Vnni | Isa::Amx)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Every path this CPU can run (for the tests).
    #[cfg(test)]
    pub(super) fn available() -> Vec<Isa> {
        #[allow(unused_mut)]
        let mut v = vec![Isa::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            use crate::cpu::math::beyond_avx2;
            if crate::cpu::math::has_avx2() && is_x86_feature_detected!("f16c") {
                v.push(Isa::Avx2);
                if beyond_avx2() && is_x86_feature_detected!("avxvnni") {
                    v.push(Isa::AvxVnni);
                }
                if beyond_avx2()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vnni")
                    && is_x86_feature_detected!("avx512vl")
                {
                    v.push(Isa::Avx512Vnni);
                    if crate::cpu::qmm_repack::amx_usable() {
                        v.push(Isa::Amx);
                    }
                }
            }
        }
        v
    }
}

fn run_tiles(p: &Problem, tiles: Range<usize>, out: OutPtr, isa: Isa) {
    match isa {
        Isa::Scalar => scalar_tiles(p, tiles, out),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::detect` (or the tests' `available`) chose it: the CPU has AVX2.
        Isa::Avx2 if p.m > ROWS => unsafe { x86::prompt_avx2(p, tiles, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above: the CPU has AVX2 and AVX-VNNI.
        Isa::AvxVnni if p.m > ROWS => unsafe { x86::prompt_avxvnni(p, tiles, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above: the CPU has AVX2, AVX-512 VNNI and AVX-512 VL.
        Isa::Avx512Vnni | Isa::Amx if p.m > ROWS => unsafe { x86::prompt_avx512(p, tiles, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above: the CPU has AVX2.
        Isa::Avx2 => unsafe { x86::tiles_avx2(p, tiles, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above: the CPU has AVX2 and AVX-VNNI.
        Isa::AvxVnni => unsafe { x86::tiles_avxvnni(p, tiles, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above: the CPU has AVX2, AVX-512 VNNI and AVX-512 VL.
        Isa::Avx512Vnni | Isa::Amx => unsafe { x86::tiles_avx512vnni(p, tiles, out) },
    }
}

/// The portable path, and the definition of the result: per row, column and
/// group, `isum = 2^s * (q . hi) + q . lo` with `s = lo_shift(bits)` (exact in
/// i32: at most 256 * 128 * 255 * 127 in magnitude), `acc = acc + isum * (scale * xd)`,
/// then `acc = acc + bias * xsum`.
fn scalar_tiles(p: &Problem, tiles: Range<usize>, out: OutPtr) {
    let (rw, groups, gs) = (p.row_words(), p.groups(), p.group_size);
    let (order, shift) = (positions(p.bits), lo_shift(p.bits));
    for n in tiles.start * TILE..(tiles.end * TILE).min(p.n) {
        let row = &p.w[n * rw..(n + 1) * rw];
        for m in 0..p.m {
            let (xh, xl) = (p.xq(m, 0), p.xq(m, 1));
            let mut acc = 0f32;
            for g in 0..groups {
                let (mut hi, mut lo) = (0i32, 0i32);
                for e in g * gs..(g + 1) * gs {
                    let (q, at) = (weight(row, p.bits, e), e / UNIT * UNIT + order[e % UNIT]);
                    hi += q * xh[at] as i32;
                    lo += q * xl[at] as i32;
                }
                let isum = (hi << shift) + lo;
                let (scale, bias) = (p.scales[n * groups + g], p.biases[n * groups + g]);
                let (d, xs) = (p.xd[m * groups + g], p.xsum[m * groups + g]);
                acc += isum as f32 * (scale * d);
                acc += bias * xs;
            }
            // SAFETY: (m, n) is inside `out`, and column n belongs to this call.
            unsafe { *out.0.add(m * p.n + n) = acc };
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::{lo_shift, OutPtr, Problem, BLOCK, CHUNK, ROWS, TILE, UNIT};
    use crate::cpu::qmm::avx2::store_lanes;

    /// `acc` plus the dot products of 4-byte runs of `w` (u8) and `x` (i8),
    /// per i32 lane, with AVX2 only: `vpmaddubsw` + `vpmaddwd` for 2- and
    /// 4-bit weights (no pair sum reaches i16's limit), widening to i16 for
    /// 8-bit ones.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn dot_avx2(acc: __m256i, w: __m256i, x: __m256i, bits: usize) -> __m256i {
        if bits < 8 {
            return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
        }
        let lo = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(w)), _mm256_cvtepi8_epi16(_mm256_castsi256_si128(x)));
        let hi = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(w)), _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(x)));
        _mm256_add_epi32(acc, _mm256_add_epi32(lo, hi))
    }

    /// As `dot_avx2`, with each i32 lane `c` the sum over bytes `4c..4c + 4`
    /// only (the prompt path keeps a column per lane); `dot_avx2` is already
    /// that for 2- and 4-bit weights, and 8-bit ones are split into their even
    /// and odd bytes.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(in crate::cpu) unsafe fn dot_lanes_avx2(acc: __m256i, w: __m256i, x: __m256i, bits: usize) -> __m256i {
        if bits < 8 {
            return dot_avx2(acc, w, x, bits);
        }
        let (we, wo) = (_mm256_and_si256(w, _mm256_set1_epi16(0x00FF)), _mm256_srli_epi16::<8>(w));
        let (xe, xo) = (_mm256_srai_epi16::<8>(_mm256_slli_epi16::<8>(x)), _mm256_srai_epi16::<8>(x));
        _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(we, xe), _mm256_madd_epi16(wo, xo)))
    }

    /// As `dot_avx2`, in one `vpdpbusd` (AVX-VNNI).
    #[target_feature(enable = "avx2,avxvnni")]
    #[inline]
    pub(in crate::cpu) unsafe fn dot_avxvnni(acc: __m256i, w: __m256i, x: __m256i, _bits: usize) -> __m256i {
        _mm256_dpbusd_avx_epi32(acc, w, x)
    }

    /// As `dot_avx2`, in one `vpdpbusd` (AVX-512 VNNI on 256-bit vectors).
    #[target_feature(enable = "avx2,avx512vnni,avx512vl")]
    #[inline]
    pub(in crate::cpu) unsafe fn dot_avx512vnni(acc: __m256i, w: __m256i, x: __m256i, _bits: usize) -> __m256i {
        _mm256_dpbusd_epi32(acc, w, x)
    }

    /// Block `b` (32 weights) of a row of 2- or 8-bit weights as 32 bytes in
    /// `super::position` order.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn unpack_block(row: *const u32, bits: usize, b: usize) -> __m256i {
        if bits == 8 {
            return _mm256_loadu_si256(row.add(b * 8).cast());
        }
        let v = _mm256_set1_epi64x((row.add(b * 2) as *const i64).read_unaligned());
        let shifted = _mm256_srlv_epi64(v, _mm256_set_epi64x(6, 4, 2, 0));
        _mm256_and_si256(shifted, _mm256_set1_epi8(0x03))
    }

    /// Unit `u` (64 weights) of a row of 4-bit weights, as its low nibbles
    /// (even weights) and high nibbles (odd weights): `super::position` order.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn unpack_unit4(row: *const u32, u: usize) -> [__m256i; 2] {
        let v = _mm256_loadu_si256(row.add(u * 8).cast());
        let mask = _mm256_set1_epi8(0x0F);
        [_mm256_and_si256(v, mask), _mm256_and_si256(_mm256_srli_epi16::<4>(v), mask)]
    }

    /// The eight columns' sums of eight vectors, by 128-bit half: lane `c` of
    /// the first result sums lanes 0-3 of `v[c]`, of the second lanes 4-7
    /// (integer adds: exact in any order).
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn halves(v: &[__m256i; TILE]) -> [__m256i; 2] {
        let h01 = _mm256_hadd_epi32(v[0], v[1]);
        let h23 = _mm256_hadd_epi32(v[2], v[3]);
        let h45 = _mm256_hadd_epi32(v[4], v[5]);
        let h67 = _mm256_hadd_epi32(v[6], v[7]);
        let a = _mm256_hadd_epi32(h01, h23);
        let b = _mm256_hadd_epi32(h45, h67);
        [_mm256_permute2x128_si256::<0x20>(a, b), _mm256_permute2x128_si256::<0x31>(a, b)]
    }

    /// The 8 x 8 transpose of eight vectors as 32-bit elements: element `j`
    /// of vector `c` becomes element `c` of vector `j`.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn transpose(v: [__m256i; TILE]) -> [__m256i; TILE] {
        let t: [__m256i; TILE] = std::array::from_fn(|i| {
            let (a, b) = (v[i / 2 * 2], v[i / 2 * 2 + 1]);
            if i % 2 == 0 {
                _mm256_unpacklo_epi32(a, b)
            } else {
                _mm256_unpackhi_epi32(a, b)
            }
        });
        // u[4h + e]: elements e and e + 4 of columns 4h..4h + 4.
        let u: [__m256i; TILE] = std::array::from_fn(|i| {
            let (h, e) = (i / 4, i % 4);
            let (a, b) = (t[4 * h + e / 2], t[4 * h + 2 + e / 2]);
            if e % 2 == 0 {
                _mm256_unpacklo_epi64(a, b)
            } else {
                _mm256_unpackhi_epi64(a, b)
            }
        });
        std::array::from_fn(
            |j| if j < 4 { _mm256_permute2x128_si256::<0x20>(u[j], u[4 + j]) } else { _mm256_permute2x128_si256::<0x31>(u[j - 4], u[j]) },
        )
    }

    /// The prompt path's order of a row's 4-byte elements (of the quantized
    /// `x`, in `super::position` order): by group, so that a group's products
    /// are summed apart from the next group's (4-bit groups of 32 share their
    /// units). Returns each element's slot and, per slot, the element's byte
    /// offset in the row.
    fn element_order(k: usize, gs: usize, bits: usize) -> (Vec<usize>, Vec<usize>) {
        let order = super::positions(bits);
        let mut index_at = [0usize; UNIT];
        for (i, &at) in order.iter().enumerate() {
            index_at[at] = i;
        }
        // The 4 bytes of an element lie in one group for every width.
        let group = |e: usize| (e * 4 / UNIT * UNIT + index_at[e * 4 % UNIT]) / gs;
        let mut by_group: Vec<usize> = (0..k / 4).collect();
        by_group.sort_by_key(|&e| (group(e), e));
        let mut slots = vec![0; k / 4];
        for (slot, &e) in by_group.iter().enumerate() {
            slots[e] = slot;
        }
        (slots, by_group.iter().map(|e| e * 4).collect())
    }

    /// Adds one group's integer sums `isum` (eight columns) to a row's float
    /// sums, in the portable path's order.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(in crate::cpu) unsafe fn add_group(acc: &mut __m256, isum: __m256i, scale: __m256, bias: __m256, d: f32, xsum: f32) {
        let t = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(scale, _mm256_set1_ps(d)));
        *acc = _mm256_add_ps(*acc, t);
        *acc = _mm256_add_ps(*acc, _mm256_mul_ps(bias, _mm256_set1_ps(xsum)));
    }

    /// A prompt tile's weights, column per lane: block `b`'s eight 4-byte
    /// elements of each of the tile's columns (`rows_w`), transposed so that
    /// vector `j` holds element `j` of every column.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn tile_block(p: &Problem, rows_w: &[*const u32; TILE], b: usize) -> [__m256i; TILE] {
        transpose(std::array::from_fn(|c| match p.bits {
            4 => unpack_unit4(rows_w[c], b / 2)[b % 2],
            bits => unpack_block(rows_w[c], bits, b),
        }))
    }

    /// The weight rows of the tile starting at column `n0` (the last column
    /// repeated past `n`), and each group's scales and biases of those columns
    /// into `sb`.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn tile_columns(p: &Problem, n0: usize, sb: &mut [[__m256; 2]]) -> [*const u32; TILE] {
        let (rw, groups) = (p.row_words(), p.groups());
        let col = |c: usize| (n0 + c).min(p.n - 1);
        let offs_g: [i32; TILE] = std::array::from_fn(|c| (col(c) * groups) as i32);
        let g_off = _mm256_loadu_si256(offs_g.as_ptr().cast());
        for (g, v) in sb.iter_mut().enumerate() {
            *v = [_mm256_i32gather_ps::<4>(p.scales.as_ptr().add(g), g_off), _mm256_i32gather_ps::<4>(p.biases.as_ptr().add(g), g_off)];
        }
        std::array::from_fn(|c| p.w.as_ptr().add(col(c) * rw))
    }

    /// Rows `m0..` of a prompt tile's float sums into `out`, the columns
    /// that exist.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn store_rows(p: &Problem, m0: usize, n0: usize, acc: &[__m256], out: OutPtr) {
        for (r, a) in acc.iter().enumerate() {
            store_lanes(out.0.add((m0 + r) * p.n + n0), *a, p.n - n0);
        }
    }

    /// The per-tile loop, once per instruction set (a target feature cannot
    /// be a generic parameter): tiles of eight output columns. The weights go
    /// a step at a time, a group or (4 bits, groups of 32) two groups: the
    /// tile's weights for the step are unpacked once, then every row of `x`
    /// takes its eight columns' integer sums (`2^s * hi + lo`, lane by lane)
    /// and adds them to its float sums in the portable path's order.
    macro_rules! tiles {
        ($name:ident, $features:literal, $dot:ident) => {
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $name(p: &Problem, tiles: Range<usize>, out: OutPtr) {
                let (rw, groups, gs) = (p.row_words(), p.groups(), p.group_size);
                let four = p.bits == 4;
                let shift = _mm256_set1_epi32(lo_shift(p.bits) as i32);
                // Weights per step, and the vectors of one column's unpacked step.
                let step = if four { gs.max(UNIT) } else { gs };
                let per_col = step / BLOCK;
                // Cache lines in a tile's rows.
                let lines = (TILE * rw * 4).div_ceil(64);
                let mut acc = [_mm256_setzero_ps(); ROWS];
                let acc = &mut acc[..p.m];
                // The tile's unpacked step: [column][vector].
                let mut wb = [_mm256_setzero_si256(); TILE * 4];
                for tile in tiles {
                    let n0 = tile * TILE;
                    let cols: [usize; TILE] = std::array::from_fn(|c| (n0 + c).min(p.n - 1));
                    let rows: [*const u32; TILE] = std::array::from_fn(|c| p.w.as_ptr().add(cols[c] * rw));
                    let offs: [i32; TILE] = std::array::from_fn(|c| (cols[c] * groups) as i32);
                    let g_off = _mm256_loadu_si256(offs.as_ptr().cast());
                    acc.fill(_mm256_setzero_ps());
                    for s0 in (0..p.k).step_by(step) {
                        let g0 = s0 / gs;
                        // The next tile's rows (one contiguous run) in address order, spread
                        // over this tile's steps: one tile ahead of use; and its scales and
                        // biases. (A prefetch past the buffer's end never faults.)
                        let next = p.w.as_ptr().wrapping_add((n0 + TILE) * rw).cast::<u8>();
                        let (st, steps) = (s0 / step, p.k / step);
                        for line in st * lines / steps..(st + 1) * lines / steps {
                            _mm_prefetch::<_MM_HINT_T1>(next.wrapping_add(line * 64).cast());
                        }
                        if st * 2 < groups {
                            let at = (n0 + TILE) * groups + st * 2 * 16;
                            _mm_prefetch::<_MM_HINT_T1>(p.scales.as_ptr().wrapping_add(at).cast());
                            _mm_prefetch::<_MM_HINT_T1>(p.biases.as_ptr().wrapping_add(at).cast());
                        }
                        for (c, &row) in rows.iter().enumerate() {
                            if four {
                                for u in 0..step / UNIT {
                                    let [lo, hi] = unpack_unit4(row, s0 / UNIT + u);
                                    *wb.get_unchecked_mut(c * 4 + 2 * u) = lo;
                                    *wb.get_unchecked_mut(c * 4 + 2 * u + 1) = hi;
                                }
                            } else if p.bits == 2 {
                                for b in 0..per_col {
                                    *wb.get_unchecked_mut(c * 4 + b) = unpack_block(row, 2, s0 / BLOCK + b);
                                }
                            }
                            // 8-bit blocks are read in place below (a copy here became a
                            // `memcpy` call per block).
                        }
                        // Scales and biases of the step's groups (one, or two for 4-bit groups of 32).
                        let two = four && gs == BLOCK;
                        let gather = |g: usize| {
                            [_mm256_i32gather_ps::<4>(p.scales.as_ptr().add(g), g_off), _mm256_i32gather_ps::<4>(p.biases.as_ptr().add(g), g_off)]
                        };
                        let sb = [gather(g0), if two { gather(g0 + 1) } else { [_mm256_setzero_ps(); 2] }];
                        for (m, a) in acc.iter_mut().enumerate() {
                            let mut s = [_mm256_setzero_si256(); TILE];
                            for part in 0..2 {
                                if part == 1 {
                                    for sc in s.iter_mut() {
                                        *sc = _mm256_sllv_epi32(*sc, shift);
                                    }
                                }
                                let xp = p.xq(m, part).as_ptr().add(s0);
                                for b in 0..per_col {
                                    let x = _mm256_loadu_si256(xp.add(b * BLOCK).cast());
                                    for (c, sc) in s.iter_mut().enumerate() {
                                        let w = if p.bits == 8 { unpack_block(rows[c], 8, s0 / BLOCK + b) } else { *wb.get_unchecked(c * 4 + b) };
                                        *sc = $dot(*sc, w, x, p.bits);
                                    }
                                }
                            }
                            let [first, second] = halves(&s);
                            let xd = |g: usize| *p.xd.get_unchecked(m * groups + g);
                            let xs = |g: usize| *p.xsum.get_unchecked(m * groups + g);
                            if two {
                                // Lanes 0-3 held group g0's weights, lanes 4-7 group g0 + 1's.
                                add_group(a, first, sb[0][0], sb[0][1], xd(g0), xs(g0));
                                add_group(a, second, sb[1][0], sb[1][1], xd(g0 + 1), xs(g0 + 1));
                            } else {
                                add_group(a, _mm256_add_epi32(first, second), sb[0][0], sb[0][1], xd(g0), xs(g0));
                            }
                        }
                    }
                    for (m, a) in acc.iter().enumerate() {
                        store_lanes(out.0.add(m * p.n + n0), *a, p.n - n0);
                    }
                }
            }
        };
    }

    /// The prompt path, once per instruction set on 256-bit vectors (AVX-512
    /// has its own, `prompt_avx512`).
    macro_rules! prompt {
        ($prompt:ident, $features:literal, $lane_dot:ident) => {
            /// The prompt path (more than `ROWS` rows): per `CHUNK` rows and
            /// tile, the tile's weights are unpacked once into `element_order`'s
            /// slots, each vector holding one 4-byte element of each of the
            /// eight columns (a column per lane); each row then multiplies
            /// them by its own element broadcast, so that the integer sums
            /// come out a column per lane, with no sum across the vector.
            /// Rows go four at a time (eight independent integer sums).
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $prompt(p: &Problem, tiles: Range<usize>, out: OutPtr) {
                #[target_feature(enable = $features)]
                #[inline]
                unsafe fn rows<const R: usize>(p: &Problem, m0: usize, n0: usize, wt: &[__m256i], sb: &[[__m256; 2]], offs: &[usize], out: OutPtr) {
                    let (groups, per_group) = (p.groups(), p.group_size / 4);
                    let shift = _mm256_set1_epi32(lo_shift(p.bits) as i32);
                    let xh: [*const i8; R] = std::array::from_fn(|r| p.xq(m0 + r, 0).as_ptr());
                    let xl: [*const i8; R] = std::array::from_fn(|r| p.xq(m0 + r, 1).as_ptr());
                    let bcast = |x: *const i8, o: usize| _mm256_set1_epi32(x.add(o).cast::<i32>().read_unaligned());
                    let mut acc = [_mm256_setzero_ps(); R];
                    for (g, &[scale, bias]) in sb.iter().enumerate() {
                        let (mut hi, mut lo) = ([_mm256_setzero_si256(); R], [_mm256_setzero_si256(); R]);
                        for v in g * per_group..(g + 1) * per_group {
                            let (w, o) = (*wt.get_unchecked(v), *offs.get_unchecked(v));
                            for r in 0..R {
                                hi[r] = $lane_dot(hi[r], w, bcast(xh[r], o), p.bits);
                                lo[r] = $lane_dot(lo[r], w, bcast(xl[r], o), p.bits);
                            }
                        }
                        for r in 0..R {
                            let isum = _mm256_add_epi32(_mm256_sllv_epi32(hi[r], shift), lo[r]);
                            let at = (m0 + r) * groups + g;
                            add_group(&mut acc[r], isum, scale, bias, *p.xd.get_unchecked(at), *p.xsum.get_unchecked(at));
                        }
                    }
                    store_rows(p, m0, n0, &acc, out);
                }

                let groups = p.groups();
                let (slots, offs) = element_order(p.k, p.group_size, p.bits);
                let mut wt = vec![_mm256_setzero_si256(); p.k / 4];
                let mut sb = vec![[_mm256_setzero_ps(); 2]; groups];
                for r0 in (0..p.m).step_by(CHUNK) {
                    let end = (r0 + CHUNK).min(p.m);
                    for tile in tiles.clone() {
                        let n0 = tile * TILE;
                        let rows_w = tile_columns(p, n0, &mut sb);
                        for b in 0..p.k / BLOCK {
                            for (j, t) in tile_block(p, &rows_w, b).into_iter().enumerate() {
                                *wt.get_unchecked_mut(slots[b * TILE + j]) = t;
                            }
                        }
                        let mut m = r0;
                        while m < end {
                            if end - m >= 4 {
                                rows::<4>(p, m, n0, &wt, &sb, &offs, out);
                                m += 4;
                            } else {
                                rows::<1>(p, m, n0, &wt, &sb, &offs, out);
                                m += 1;
                            }
                        }
                    }
                }
            }
        };
    }

    /// The prompt path on AVX-512 VNNI: as `prompt_*` above, with a row's two
    /// parts in one 512-bit vector: lane `2c` sums column `c`'s products with
    /// `hi`, lane `2c + 1` with `lo` (each weight element in both lanes, and the
    /// row's `hi` and `lo` elements side by side, broadcast as one 8-byte
    /// value), so that one `vpdpbusd` and one load do what two of each do on
    /// 256 bits. Eight rows at a time.
    #[target_feature(enable = "avx2,avx512f,avx512vnni,avx512vl")]
    pub(super) unsafe fn prompt_avx512(p: &Problem, tiles: Range<usize>, out: OutPtr) {
        /// Rows `m0..m0 + R` of the chunk's interleaved `x` (`xi`, from row `c0`).
        #[target_feature(enable = "avx2,avx512f,avx512vnni,avx512vl")]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        unsafe fn rows<const R: usize>(p: &Problem, m0: usize, c0: usize, n0: usize, wt: &[__m512i], sb: &[[__m256; 2]], xi: &[u64], out: OutPtr) {
            let (groups, per_group, per_row) = (p.groups(), p.group_size / 4, p.k / 4);
            let shift = _mm512_set1_epi32(lo_shift(p.bits) as i32);
            let mut acc = [_mm256_setzero_ps(); R];
            for (g, &[scale, bias]) in sb.iter().enumerate() {
                let mut s = [_mm512_setzero_si512(); R];
                for v in g * per_group..(g + 1) * per_group {
                    let w = *wt.get_unchecked(v);
                    for (r, sr) in s.iter_mut().enumerate() {
                        let x = *xi.get_unchecked((m0 - c0 + r) * per_row + v);
                        *sr = _mm512_dpbusd_epi32(*sr, w, _mm512_set1_epi64(x as i64));
                    }
                }
                for (r, (a, sr)) in acc.iter_mut().zip(&s).enumerate() {
                    // Lane 2c: hi shifted up by `lo_shift` plus lo (lane 2c + 1 shifted down), then the even lanes.
                    let isum = _mm512_cvtepi64_epi32(_mm512_add_epi32(_mm512_sllv_epi32(*sr, shift), _mm512_srli_epi64::<32>(*sr)));
                    let at = (m0 + r) * groups + g;
                    add_group(a, isum, scale, bias, *p.xd.get_unchecked(at), *p.xsum.get_unchecked(at));
                }
            }
            store_rows(p, m0, n0, &acc, out);
        }

        let (groups, per_row) = (p.groups(), p.k / 4);
        let (slots, offs) = element_order(p.k, p.group_size, p.bits);
        let twice = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
        let mut wt = vec![_mm512_setzero_si512(); per_row];
        let mut sb = vec![[_mm256_setzero_ps(); 2]; groups];
        let mut xi = vec![0u64; CHUNK * per_row];
        for r0 in (0..p.m).step_by(CHUNK) {
            let end = (r0 + CHUNK).min(p.m);
            for m in r0..end {
                let (h, l) = (p.xq(m, 0).as_ptr(), p.xq(m, 1).as_ptr());
                for (v, &o) in offs.iter().enumerate() {
                    let (h, l) = (h.add(o).cast::<u32>().read_unaligned(), l.add(o).cast::<u32>().read_unaligned());
                    *xi.get_unchecked_mut((m - r0) * per_row + v) = h as u64 | (l as u64) << 32;
                }
            }
            for tile in tiles.clone() {
                let n0 = tile * TILE;
                let rows_w = tile_columns(p, n0, &mut sb);
                for b in 0..p.k / BLOCK {
                    for (j, t) in tile_block(p, &rows_w, b).into_iter().enumerate() {
                        *wt.get_unchecked_mut(slots[b * TILE + j]) = _mm512_permutexvar_epi32(twice, _mm512_castsi256_si512(t));
                    }
                }
                let mut m = r0;
                while m < end {
                    if end - m >= 8 {
                        rows::<8>(p, m, r0, n0, &wt, &sb, &xi, out);
                        m += 8;
                    } else {
                        rows::<1>(p, m, r0, n0, &wt, &sb, &xi, out);
                        m += 1;
                    }
                }
            }
        }
    }

    tiles!(tiles_avx2, "avx2", dot_avx2);
    tiles!(tiles_avxvnni, "avx2,avxvnni", dot_avxvnni);
    tiles!(tiles_avx512vnni, "avx2,avx512vnni,avx512vl", dot_avx512vnni);
    prompt!(prompt_avx2, "avx2", dot_lanes_avx2);
    prompt!(prompt_avxvnni, "avx2,avxvnni", dot_avxvnni);
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::quant::{quantize, quantized_matmul_mlx, Mode};
    use crate::random;

    pub(in crate::cpu) struct Data {
        pub x: Vec<f32>,
        pub w: Vec<u32>,
        pub s: Vec<f32>,
        pub b: Vec<f32>,
        /// MLX's op on `x`.
        pub exact: Vec<f32>,
        /// MLX's op on `x` rounded as the kernel rounds it (`d * xq`).
        pub rounded: Vec<f32>,
    }

    pub(in crate::cpu) fn problem_data(m: i32, k: i32, n: i32, gs: i32, bits: i32, seed: u64) -> Data {
        let key = |s: u64| random::key(s).unwrap();
        let x = random::normal(&[m, k], Dtype::Float32, 0.0, 1.0, Some(&key(seed))).unwrap();
        let w = random::normal(&[n, k], Dtype::Float32, 0.0, 0.1, Some(&key(seed + 100))).unwrap();
        let (wq, s, b) = quantize(&w, gs, bits, Mode::Affine).unwrap();
        let b = b.expect("affine quantization has biases");
        let exact = quantized_matmul_mlx(&x, &wq, &s, Some(&b), true, gs, bits, Mode::Affine).unwrap().to_vec::<f32>().unwrap();
        let xs: Vec<f32> = x.to_vec().unwrap();
        let (ku, gu) = (k as usize, gs as usize);
        let mut xq = vec![0i8; 2 * xs.len()];
        let (mut xd, mut xsum) = (vec![0f32; xs.len() / gu], vec![0f32; xs.len() / gu]);
        quantize_rows(&xs, ku, gu, (bits as usize, lo_shift(bits as usize)), &mut xq, &mut xd, &mut xsum);
        let xr: Vec<f32> = (0..xs.len())
            .map(|i| {
                let (r, e) = (i / ku, i % ku);
                let at = 2 * r * ku + e / UNIT * UNIT + position(bits as usize, e % UNIT);
                xd[i / gu] * (((xq[at] as i32) << lo_shift(bits as usize)) + xq[at + ku] as i32) as f32
            })
            .collect();
        let xr = Array::from_slice(&xr, &[m, ku as i32]).unwrap();
        let rounded = quantized_matmul_mlx(&xr, &wq, &s, Some(&b), true, gs, bits, Mode::Affine).unwrap().to_vec::<f32>().unwrap();
        Data { x: xs, w: wq.to_vec().unwrap(), s: s.to_vec().unwrap(), b: b.to_vec().unwrap(), exact, rounded }
    }

    pub(in crate::cpu) fn run(
        isa: Isa,
        x: &[f32],
        w: &[u32],
        s: &[f32],
        b: &[f32],
        (m, k, n, gs, bits): (usize, usize, usize, usize, usize),
    ) -> Vec<f32> {
        let groups = k / gs;
        let mut xq = vec![0i8; 2 * m * k];
        let (mut xd, mut xsum) = (vec![0f32; m * groups], vec![0f32; m * groups]);
        quantize_rows(x, k, gs, (bits, lo_shift(bits)), &mut xq, &mut xd, &mut xsum);
        let p = Problem { w, scales: s, biases: b, xq: &xq, xd: &xd, xsum: &xsum, m, n, k, group_size: gs, bits };
        let mut got = vec![0f32; m * n];
        run_tiles(&p, 0..n.div_ceil(TILE), OutPtr(got.as_mut_ptr()), isa);
        got
    }

    /// Every instruction set this CPU has gives the portable path's bits, and
    /// the result is within 8-bit activation rounding of MLX's exact op.
    #[test]
    fn every_path_gives_the_portable_bits_and_stays_close_to_mlx() {
        // Every width and group size; 4-bit groups of 32 (two per unpacked unit) and of 128 (two
        // units per group); 2 and 8 bits with `k` not a multiple of 64; up to 8 rows.
        let cases = [
            (1, 256, 70, 64, 4),
            (3, 128, 33, 32, 8),
            (2, 256, 40, 128, 2),
            (5, 576, 17, 32, 4),
            (1, 512, 24, 128, 8),
            (4, 64, 9, 32, 2),
            (2, 256, 20, 128, 4),
            (8, 192, 12, 64, 4),
            (2, 96, 10, 32, 8),
            (2, 96, 10, 32, 2),
        ];
        for (i, &(m, k, n, gs, bits)) in cases.iter().enumerate() {
            let Data { x, w, s, b, exact, rounded } = problem_data(m, k, n, gs, bits, i as u64);
            let dims = (m as usize, k as usize, n as usize, gs as usize, bits as usize);
            let portable = run(Isa::Scalar, &x, &w, &s, &b, dims);
            for isa in Isa::available() {
                let got = run(isa, &x, &w, &s, &b, dims);
                assert!(got.iter().zip(&portable).all(|(a, b)| a.to_bits() == b.to_bits()), "case {i}: {isa:?} differs from the portable path");
            }
            let scale = exact.iter().fold(0f32, |a, v| a.max(v.abs()));
            let worst = |want: &[f32]| portable.iter().zip(want).fold(0f32, |a, (g, w)| a.max((g - w).abs())) / scale;
            // The product of the rounded `x` and the weights, up to float32 rounding in another order.
            assert!(worst(&rounded) <= 2e-6, "case {i}: {} from MLX on the rounded x", worst(&rounded));
            // About 15-bit activations for 8-bit weights (here up to 0.0035% of the largest
            // output), about 12-bit ones for narrower weights (`lo_shift`; up to 0.03%).
            let bound = if lo_shift(bits as usize) == 8 { 1e-4 } else { 1e-3 };
            assert!(worst(&exact) <= bound, "case {i}: {} from MLX's exact result", worst(&exact));
        }
    }

    /// Prompts: any number of rows, each with the bits it gets alone (the
    /// portable path on that one row), on every path; a row with a NaN or an
    /// infinity is NaN and leaves its row tile's other rows alone.
    #[test]
    fn a_rows_result_does_not_depend_on_the_rows_with_it() {
        // Row counts around and across row tiles (a partial tile after a full one, whole tiles,
        // SmolLM2's benchmark prompt), with each width.
        let cases = [(9, 128, 20, 64, 4), (17, 96, 12, 32, 8), (64, 128, 9, 128, 2), (380, 64, 17, 32, 4)];
        for (i, &(m, k, n, gs, bits)) in cases.iter().enumerate() {
            let Data { mut x, w, s, b, .. } = problem_data(m, k, n, gs, bits, 20 + i as u64);
            let (m, k, n, gs, bits) = (m as usize, k as usize, n as usize, gs as usize, bits as usize);
            // Row 10 of the second tile (where there is one) gets a NaN, the last row an infinity.
            let bad = [10.min(m - 2), m - 1];
            x[bad[0] * k + 3] = f32::NAN;
            x[bad[1] * k + k / 2] = f32::INFINITY;
            let alone: Vec<f32> = x.chunks_exact(k).flat_map(|row| run(Isa::Scalar, row, &w, &s, &b, (1, k, n, gs, bits))).collect();
            for isa in Isa::available() {
                let got = run(isa, &x, &w, &s, &b, (m, k, n, gs, bits));
                for (r, (g, a)) in got.chunks_exact(n).zip(alone.chunks_exact(n)).enumerate() {
                    if bad.contains(&r) {
                        assert!(g.iter().chain(a).all(|v| v.is_nan()), "case {i}, {isa:?}: row {r} of {m} is not NaN");
                    } else {
                        let same = g.iter().zip(a).all(|(g, a)| g.is_finite() && g.to_bits() == a.to_bits());
                        assert!(same, "case {i}, {isa:?}: row {r} of {m} differs from that row alone");
                    }
                }
            }
        }
    }

    #[test]
    fn a_nan_or_infinity_in_a_row_makes_that_row_nan() {
        let Data { mut x, w, s, b, .. } = problem_data(3, 128, 20, 64, 4, 9);
        x[5] = f32::NAN;
        x[2 * 128 + 70] = f32::INFINITY;
        for isa in Isa::available() {
            let got = run(isa, &x, &w, &s, &b, (3, 128, 20, 64, 4));
            assert!(got[..20].iter().all(|v| v.is_nan()), "{isa:?}: row 0");
            assert!(got[20..40].iter().all(|v| v.is_finite()), "{isa:?}: row 1");
            assert!(got[40..].iter().all(|v| v.is_nan()), "{isa:?}: row 2");
        }
    }

    #[test]
    fn positions_are_permutations_and_weights_read_mlx_packing() {
        for bits in [2usize, 4, 8] {
            let mut seen = positions(bits).to_vec();
            seen.sort_unstable();
            assert_eq!(seen, (0..UNIT).collect::<Vec<_>>(), "bits {bits}");
            // Value i at bit bits * i of the stream, as MLX packs.
            let vals: Vec<u32> = (0..UNIT as u32).map(|i| (i * 7 + 3) % (1 << bits)).collect();
            let mut words = vec![0u32; UNIT * bits / 32];
            for (i, &v) in vals.iter().enumerate() {
                words[i * bits / 32] |= v << ((i * bits) % 32);
            }
            for (i, &v) in vals.iter().enumerate() {
                assert_eq!(weight(&words, bits, i) as u32, v, "bits {bits}, weight {i}");
            }
        }
    }
}
