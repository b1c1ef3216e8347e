//! Passes over one row of float32 values for the sampling kernels: maxima in
//! eight lanes, a walk over the few elements that pass a test, a mask. Written
//! so that the compiler vectorizes them (or with AVX where it would not), since
//! each runs over a whole vocabulary per generated token.

/// The row's maximum, NaN if any element is (MLX's `maximum`). Eight lanes: the
/// maximum does not depend on the order (a zero's sign may, which no
/// `exp(x - max)` sees).
#[inline(always)]
pub fn row_max(x: &[f32]) -> f32 {
    row_max_scaled(x, 1.0)
}

/// `row_max` of `x * scale` (each product a float32 multiply, as MLX's).
#[inline(always)]
pub fn row_max_scaled(x: &[f32], scale: f32) -> f32 {
    lanes_fold(x, |v| v * scale, |m: f32, v: f32| if v.is_nan() || v > m { v } else { m })
}

/// The row's largest number, NaN ignored (-inf when there is none): what a
/// fold with `f32::max` gives, in eight lanes.
#[inline(always)]
pub fn row_max_of_numbers(x: &[f32]) -> f32 {
    lanes_fold(x, |v| v, |m: f32, v: f32| if v > m { v } else { m })
}

/// Folds `map(x[i])` with `pick` in eight lanes from -inf, then the lanes.
#[inline(always)]
fn lanes_fold(x: &[f32], map: impl Fn(f32) -> f32, pick: impl Fn(f32, f32) -> f32) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = pick(*l, map(v));
        }
    }
    let tail = chunks.remainder().iter().fold(f32::NEG_INFINITY, |m, &v| pick(m, map(v)));
    lanes.iter().fold(tail, |m, &v| pick(m, v))
}

/// Calls `f(i, x[i], map(x[i]))` in index order for every element where
/// `candidate` holds. The test runs eight lanes at a time, the candidates of
/// each stretch of the row are gathered, and `map` (say `cpu_exp`) runs over
/// them as one vectorized loop: a row where few elements pass (a masked row,
/// the tail far below the top) costs little more than one pass.
#[inline(always)]
pub fn for_each_candidate(x: &[f32], candidate: impl Fn(f32) -> bool, map: impl Fn(f32) -> f32, mut f: impl FnMut(usize, f32, f32)) {
    const STRETCH: usize = 1024;
    let (mut idx, mut val, mut mapped) = ([0u32; STRETCH], [0f32; STRETCH], [0f32; STRETCH]);
    for (s, part) in x.chunks(STRETCH).enumerate() {
        let base = s * STRETCH;
        let mut n = 0;
        let mut blocks = part.chunks_exact(8);
        let mut at = 0;
        for c in &mut blocks {
            let mut bits = 0u32;
            for (j, &v) in c.iter().enumerate() {
                bits |= (candidate(v) as u32) << j;
            }
            while bits != 0 {
                let j = bits.trailing_zeros() as usize;
                (idx[n], val[n]) = ((at + j) as u32, c[j]);
                n += 1;
                bits &= bits - 1;
            }
            at += 8;
        }
        for (j, &v) in blocks.remainder().iter().enumerate() {
            if candidate(v) {
                (idx[n], val[n]) = ((at + j) as u32, v);
                n += 1;
            }
        }
        for (m, &v) in mapped[..n].iter_mut().zip(&val[..n]) {
            *m = map(v);
        }
        for k in 0..n {
            f(base + idx[k] as usize, val[k], mapped[k]);
        }
    }
}

/// Sets every element below `t` to -inf in place (NaN stays): MLX-LM's
/// `where(x < t, -inf, x)`. With AVX it compares and blends eight at a time and
/// writes whole vectors: written per element, the compiler turns it into
/// masked stores, which took most of a filter's time on AMD.
#[inline(always)]
pub fn mask_below(row: &mut [f32], t: f32) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::math::has_avx() {
        // SAFETY: the CPU has AVX, checked just above.
        return unsafe { mask_below_avx(row, t) };
    }
    for x in row.iter_mut() {
        *x = if *x < t { f32::NEG_INFINITY } else { *x };
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn mask_below_avx(row: &mut [f32], t: f32) {
    use std::arch::x86_64::*;
    let (tv, ninf) = (_mm256_set1_ps(t), _mm256_set1_ps(f32::NEG_INFINITY));
    let mut blocks = row.chunks_exact_mut(8);
    for c in &mut blocks {
        let v = _mm256_loadu_ps(c.as_ptr());
        // Ordered less-than: false for NaN, as `x < t`.
        let below = _mm256_cmp_ps::<_CMP_LT_OQ>(v, tv);
        _mm256_storeu_ps(c.as_mut_ptr(), _mm256_blendv_ps(v, ninf, below));
    }
    for x in blocks.into_remainder() {
        *x = if *x < t { f32::NEG_INFINITY } else { *x };
    }
}
