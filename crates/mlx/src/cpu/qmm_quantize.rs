//! Fast precision's activations: each row of `x` rounded per weight group to
//! two 8-bit parts, `hi` and `lo`, for the integer kernels (`qmm_int8`,
//! `qmm_repack`, `qmm_repack_amx`). One definition (`quantize_rows_body`);
//! where the CPU has AVX-512 the index-order layout takes a 16-lane copy of
//! the same operations (`x86::index_order`), so the same bytes and floats.
#[cfg(target_arch = "x86_64")]
use crate::cpu::qmm_int8::Isa;
use crate::cpu::qmm_int8::{positions, BLOCK, UNIT};
use crate::cpu::share::{share, Disjoint};

/// How many bits `lo` sits below `hi` for weights of `bits` bits: `x ~ d /
/// 2^s * (2^s * hi + lo)`. 4 (about 12 bits of `x`) for 2- and 4-bit weights,
/// whose bytes times 16 still fit in a byte, so that AMX can sum `16 q . hi +
/// q . lo` in one product (`qmm_repack_amx`); 8 (about 15 bits) for 8-bit
/// weights. Both meet the quality bar with room (docs/kernels.md).
pub(crate) fn lo_shift(bits: usize) -> u32 {
    if bits == 8 {
        8
    } else {
        4
    }
}

// Compiled for AVX2 where the CPU has it (the rounding loop then runs 8 lanes at a time; plain
// float adds and multiplies, so the same bits): it was 13% of a fast prompt on SmolLM2 as
// baseline x86-64 code (perf, Zen 4).
crate::avx2_fma_dispatch!(fn quantize_some_rows(x: &[f32], k: usize, gs: usize, layout: (usize, u32), xq: &mut [i8], xd: &mut [f32], xsum: &mut [f32]) => quantize_rows_body);

/// From this many values of `x` up (a prompt's rows, not a decode step's or a
/// small batch's) `quantize_rows` splits the rows over the cores.
const QUANTIZE_PARALLEL_MIN: usize = 1 << 16;

/// `quantize_rows_body` for every row of `x`, a prompt's rows split over the
/// cores (each row is quantized alone, so the split does not change a bit): on
/// one thread it was a tenth of a fast prompt (perf, SmolLM2-135M, Zen 4).
/// `bits` is the layout's (8: index order); `shift` is `lo_shift`'s.
pub(crate) fn quantize_rows(x: &[f32], k: usize, gs: usize, (bits, shift): (usize, u32), xq: &mut [i8], xd: &mut [f32], xsum: &mut [f32]) {
    let (m, groups) = (x.len() / k, k / gs);
    let helpers = if x.len() < QUANTIZE_PARALLEL_MIN { 0 } else { rayon::current_num_threads() - 1 };
    #[cfg(target_arch = "x86_64")]
    let wide = bits == 8 && matches!(Isa::detect(), Isa::Avx512Vnni | Isa::Amx);
    let (xq, xd, xsum) = (Disjoint::new(xq), Disjoint::new(xd), Disjoint::new(xsum));
    share(m, helpers, &|rows| {
        let (a, n) = (rows.start, rows.len());
        // SAFETY: `share` gives each range of rows to one thread only, and a row's parts of the three
        // outputs are its own.
        let (q, d, s) = unsafe { (xq.part(a * 2 * k, n * 2 * k), xd.part(a * groups, n * groups), xsum.part(a * groups, n * groups)) };
        let x = &x[a * k..][..n * k];
        #[cfg(target_arch = "x86_64")]
        if wide {
            // SAFETY: those instruction sets imply AVX-512 F and BW.
            return unsafe { x86::index_order(x, k, gs, shift, q, d, s) };
        }
        quantize_some_rows(x, k, gs, (bits, shift), q, d, s)
    });
}

/// Each row's groups as two 8-bit parts: with `d = max|x| / 127`, `f = 2^shift`
/// (`lo_shift`), `hi = round(x / d)` and `lo = round((x / d - hi) * f)` (ties
/// to even), so that `x ~ d / f * (f * hi + lo)`: about 12 bits (`f` 16) or 15
/// (`f` 256), where 8 alone moved a trained model's next-token distribution too
/// far (docs/kernels.md). Each unit of 64 values is stored in the order
/// `unpack` gives the weights (`bits`: the layout's).
/// Per group, `xd` gets `d / f` and `xsum` `d / f * sum(f * hi + lo)`
/// (the bias term takes the rounded `x` too, so the result is the product of
/// the rounded `x` and the weights; with the float sum of `x` the rounding
/// errors would meet the weights' offset, `bias`, not their centred values).
#[inline(always)]
fn quantize_rows_body(x: &[f32], k: usize, gs: usize, (bits, shift): (usize, u32), xq: &mut [i8], xd: &mut [f32], xsum: &mut [f32]) {
    let order = positions(bits);
    let f = (1u32 << shift) as f32;
    let groups = k / gs;
    for (m, (xr, qr)) in x.chunks_exact(k).zip(xq.chunks_exact_mut(2 * k)).enumerate() {
        let (hi, lo) = qr.split_at_mut(k);
        for (g, xg) in xr.chunks_exact(gs).enumerate() {
            // A NaN or infinity makes the group's outputs NaN, as it makes MLX's (they would
            // otherwise round to 0 or swamp the scale).
            let amax = if xg.iter().all(|v| v.is_finite()) { xg.iter().fold(0f32, |a, &v| a.max(v.abs())) } else { f32::NAN };
            let d = amax / 127.0;
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            let mut sum = 0i32;
            for (b, xb) in xg.chunks_exact(BLOCK).enumerate() {
                // In index order first (a loop the compiler vectorizes), then to `unpack`'s order.
                let (mut h, mut l) = ([0i32; BLOCK], [0i32; BLOCK]);
                for i in 0..BLOCK {
                    let t = xb[i] * id;
                    let r = round(t).clamp(-127.0, 127.0);
                    h[i] = r as i32;
                    l[i] = round((t - r) * f).clamp(-127.0, 127.0) as i32;
                }
                let e0 = g * gs + b * BLOCK;
                if bits == 8 {
                    // Index order (8-bit weights, and every repacked layer): plain stores that the
                    // compiler vectorizes, where the scatter below is a byte at a time (it was
                    // 8% of a fast prompt on AMX, perf, Qwen3-0.6B Q4_0).
                    let (hs, ls) = (&mut hi[e0..e0 + BLOCK], &mut lo[e0..e0 + BLOCK]);
                    for i in 0..BLOCK {
                        sum += (h[i] << shift) + l[i];
                        hs[i] = h[i] as i8;
                        ls[i] = l[i] as i8;
                    }
                    continue;
                }
                let (unit, half) = (e0 / UNIT * UNIT, e0 % UNIT);
                for i in 0..BLOCK {
                    sum += (h[i] << shift) + l[i];
                    hi[unit + order[half + i]] = h[i] as i8;
                    lo[unit + order[half + i]] = l[i] as i8;
                }
            }
            xd[m * groups + g] = d / f;
            xsum[m * groups + g] = d / f * sum as f32;
        }
    }
}

/// Round to nearest, ties to even, for |v| < 2^22 (here at most 128): adding
/// and subtracting 1.5 * 2^23 leaves no fraction bits. Plain float adds, where
/// `f32::round` is a libm call per value.
#[inline(always)]
fn round(v: f32) -> f32 {
    (v + MAGIC) - MAGIC
}

const MAGIC: f32 = 12_582_912.0;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::MAGIC;

    /// `quantize_rows_body` in index order, sixteen values a vector: per lane
    /// the same float operations in the same order (a multiply, the rounding
    /// adds, clamps that are `min`/`max` on the finite values they see, exact
    /// conversions), the integer sum in another order (exact), so the same
    /// bytes and floats. A group with a NaN or an infinity takes the portable
    /// body (its bytes are all zero there; its outputs are NaN anyway).
    /// It was 9-14% of a fast prompt on AMX (perf, Qwen3-0.6B Q4_0).
    ///
    /// # Safety
    /// The CPU has AVX-512 F and BW.
    #[target_feature(enable = "avx2,avx512f,avx512bw")]
    pub(super) unsafe fn index_order(x: &[f32], k: usize, gs: usize, shift: u32, xq: &mut [i8], xd: &mut [f32], xsum: &mut [f32]) {
        let groups = k / gs;
        let f = (1u32 << shift) as f32;
        let (magic, top, bottom) = (_mm512_set1_ps(MAGIC), _mm512_set1_ps(127.0), _mm512_set1_ps(-127.0));
        let (fv, up, inf) = (_mm512_set1_ps(f), _mm512_set1_epi32(shift as i32), _mm512_set1_ps(f32::INFINITY));
        for (m, (xr, qr)) in x.chunks_exact(k).zip(xq.chunks_exact_mut(2 * k)).enumerate() {
            let (hi, lo) = qr.split_at_mut(k);
            for g in 0..groups {
                let xg = xr.as_ptr().add(g * gs);
                let (mut amax, mut bad) = (_mm512_setzero_ps(), 0u16);
                for v in (0..gs).step_by(16) {
                    let a = _mm512_abs_ps(_mm512_loadu_ps(xg.add(v)));
                    // Not below infinity: an infinity or a NaN.
                    bad |= _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(a, inf);
                    amax = _mm512_max_ps(amax, a);
                }
                let d = _mm512_reduce_max_ps(amax) / 127.0;
                let id = if d > 0.0 { 1.0 / d } else { 0.0 };
                // A scale so small that its inverse overflows makes NaN of 0 * inf, which the
                // portable body turns to zero bytes as it does non-finite groups.
                if bad != 0 || !id.is_finite() {
                    let at = m * groups + g;
                    let mut part = vec![0i8; 2 * gs];
                    super::quantize_rows_body(&xr[g * gs..][..gs], gs, gs, (8, shift), &mut part, &mut xd[at..at + 1], &mut xsum[at..at + 1]);
                    hi[g * gs..][..gs].copy_from_slice(&part[..gs]);
                    lo[g * gs..][..gs].copy_from_slice(&part[gs..]);
                    continue;
                }
                let id = _mm512_set1_ps(id);
                let mut sum = _mm512_setzero_si512();
                for v in (0..gs).step_by(16) {
                    let t = _mm512_mul_ps(_mm512_loadu_ps(xg.add(v)), id);
                    let r = _mm512_max_ps(_mm512_min_ps(_mm512_sub_ps(_mm512_add_ps(t, magic), magic), top), bottom);
                    let u = _mm512_mul_ps(_mm512_sub_ps(t, r), fv);
                    let l = _mm512_max_ps(_mm512_min_ps(_mm512_sub_ps(_mm512_add_ps(u, magic), magic), top), bottom);
                    let (h, l) = (_mm512_cvtps_epi32(r), _mm512_cvtps_epi32(l));
                    sum = _mm512_add_epi32(sum, _mm512_add_epi32(_mm512_sllv_epi32(h, up), l));
                    _mm_storeu_si128(hi.as_mut_ptr().add(g * gs + v).cast(), _mm512_cvtepi32_epi8(h));
                    _mm_storeu_si128(lo.as_mut_ptr().add(g * gs + v).cast(), _mm512_cvtepi32_epi8(l));
                }
                xd[m * groups + g] = d / f;
                xsum[m * groups + g] = d / f * _mm512_reduce_add_epi32(sum) as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 16-lane index-order path gives the portable body's bytes and
    /// floats: groups of 32, 64 and 128 at both shifts, with a NaN, an
    /// infinity, all zeros, a subnormal largest value and values on rounding
    /// ties among the groups.
    #[test]
    fn every_path_quantizes_to_the_same_bits() {
        for (gs, shift) in [(32usize, 4u32), (64, 8), (128, 4), (32, 8)] {
            let (m, k) = (3usize, 4 * gs);
            let mut x: Vec<f32> = (0..m * k).map(|i| ((i * 2_654_435_761) % 10_007) as f32 / 997.0 - 5.0).collect();
            x[5] = f32::NAN;
            x[gs + 3] = f32::NEG_INFINITY;
            x[2 * gs..3 * gs].fill(0.0);
            x[k + 3 * gs..2 * k].iter_mut().enumerate().for_each(|(i, v)| *v = if i == 0 { 1e-40 } else { 0.0 });
            // 127 and 0.5 in the last row's first group: `lo` exactly on a tie.
            x[2 * k..2 * k + gs].iter_mut().enumerate().for_each(|(i, v)| *v = if i == 0 { 127.0 } else { i as f32 + 0.5 });
            let run = |wide: bool| {
                let (mut q, mut d, mut s) = (vec![0i8; 2 * m * k], vec![0f32; m * k / gs], vec![0f32; m * k / gs]);
                match wide {
                    // SAFETY: only where the CPU has AVX-512 (`Isa::detect`).
                    #[cfg(target_arch = "x86_64")]
                    true => unsafe { x86::index_order(&x, k, gs, shift, &mut q, &mut d, &mut s) },
                    _ => quantize_some_rows(&x, k, gs, (8, shift), &mut q, &mut d, &mut s),
                }
                (q, d.iter().chain(&s).map(|v| v.to_bits()).collect::<Vec<_>>())
            };
            let portable = run(false);
            assert!(portable.0.iter().any(|&b| b.abs() == 127) && portable.0.iter().any(|&b| b != 0 && b.abs() < 16));
            #[cfg(target_arch = "x86_64")]
            if matches!(Isa::detect(), Isa::Avx512Vnni | Isa::Amx) {
                assert_eq!(run(true), portable, "groups of {gs}, shift {shift}");
            }
        }
    }

    #[test]
    fn a_prompts_rows_quantize_over_the_cores_to_the_same_bits() {
        // 300 rows of 256 (over QUANTIZE_PARALLEL_MIN values, so split), against each row alone.
        let (m, k, gs) = (300usize, 256usize, 64usize);
        assert!(m * k >= QUANTIZE_PARALLEL_MIN);
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 2_654_435_761) % 10_007) as f32 / 997.0 - 5.0).collect();
        let (mut xq, mut xd, mut xsum) = (vec![0i8; 2 * m * k], vec![0f32; m * k / gs], vec![0f32; m * k / gs]);
        quantize_rows(&x, k, gs, (4, lo_shift(4)), &mut xq, &mut xd, &mut xsum);
        for r in 0..m {
            let (mut q, mut d, mut sum) = (vec![0i8; 2 * k], vec![0f32; k / gs], vec![0f32; k / gs]);
            quantize_some_rows(&x[r * k..(r + 1) * k], k, gs, (4, lo_shift(4)), &mut q, &mut d, &mut sum);
            assert_eq!(&xq[r * 2 * k..(r + 1) * 2 * k], &q[..], "row {r}");
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&xd[r * k / gs..(r + 1) * k / gs]), bits(&d), "row {r}");
            assert_eq!(bits(&xsum[r * k / gs..(r + 1) * k / gs]), bits(&sum), "row {r}");
        }
    }
}
