//! MLX's CPU float32 math reproduced step for step, for kernels whose results
//! must equal what MLX's own ops give (MLX-LM parity rests on it), and the
//! kernels built on it. Each is checked bit for bit against MLX in
//! `tests/cpu_math.rs`.
use crate::kernel::{cpu_kernel_f32, cpu_kernel_f32_in_place, KernelF32};
use crate::{Array, Dtype, Result};

/// MLX's CPU `exp` for float32, step for step (`backend/cpu/simd/math.h`: a
/// degree-6 polynomial in fused multiply-adds times 2^n), so a kernel can
/// compute exactly the probabilities MLX would without a device `exp` pass.
/// Inlined so
/// that a caller compiled with the `fma` target feature gets the instruction
/// rather than a libm call per step.
#[inline(always)]
pub fn cpu_exp(x0: f32) -> f32 {
    let x = x0 * 1.442695f32;
    let ipart = floor_half_up(x);
    let f = x - ipart;
    let mut y = 1.535336188319500e-4f32;
    for c in [1.339887440266574e-3f32, 9.618437357674640e-3, 5.550332471162809e-2, 2.402264791363012e-1, 6.931472028550421e-1, 1.0] {
        y = y.mul_add(f, c);
    }
    let scale = f32::from_bits(((ipart as i32).wrapping_add(127) << 23) as u32);
    if x0.is_nan() {
        x0
    } else if x0 > 88.0 {
        f32::INFINITY
    } else if x0 < -88.0 {
        0.0
    } else {
        scale * y
    }
}

/// MLX's `floor(x + 0.5)` in `exp`: the `0.5` there is a double, so the sum is
/// exact and never rounds up to the next integer as a float sum can (for `x`
/// just below `n + 0.5`). The same value in float arithmetic: `floor(x)`, plus
/// one when the fraction (exact: `x - floor(x)`) is at least a half.
#[inline(always)]
fn floor_half_up(x: f32) -> f32 {
    let f = x.floor();
    if x - f >= 0.5 {
        f + 1.0
    } else {
        f
    }
}

/// Whether the CPU has AVX2 and FMA (the condition of `avx2_fma_dispatch!`'s
/// feature-specific copy).
#[cfg(target_arch = "x86_64")]
#[doc(hidden)]
#[inline(always)]
pub fn avx2_fma() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

/// Defines `fn $name(args) -> ret` running the `#[inline(always)]` `$body`
/// compiled for AVX2 and FMA when the CPU has them, else as it is. With the
/// features the fused multiply-adds of `cpu_exp` are one instruction each
/// instead of a libm call (both round once: the results are the same) and its
/// loops vectorize (element-wise, so no result changes; float sums are never
/// reordered). The body must be a function marked `#[inline(always)]`, not a
/// closure: a large closure may not be inlined into the feature copy and then
/// runs without the features (a softmax kernel and the categorical draw did:
/// libm `fmaf` calls per `exp`).
#[macro_export]
macro_rules! avx2_fma_dispatch {
    ($vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? => $body:path) => {
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    $body($($arg),*)
                }
                if $crate::cpu_math::avx2_fma() {
                    // SAFETY: the CPU has AVX2 and FMA, checked just above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}

/// `logsumexp` over the last axis, as MLX's CPU `LogSumExp` computes it: the
/// maximum, then the exponentials of `x - max` summed one at a time in index
/// order, then `log(sum) + max` (libm's `logf`, as there). `exp` of anything
/// below -88 is exactly 0 in MLX's formula, so those terms are skipped. Output: the input's
/// shape with a last axis of 1, in its floating dtype.
pub fn logsumexp_last(x: &Array) -> Result<Array> {
    let mut shape = x.shape();
    if let Some(last) = shape.last_mut() {
        *last = 1;
    }
    let dtype = if x.dtype().is_float() { x.dtype() } else { Dtype::Float32 };
    cpu_kernel_f32("LogSumExp", LOGSUMEXP, &[], &[x], &shape)?.astype(dtype)
}

const LOGSUMEXP: KernelF32 = |_, inputs, out| {
    let x = inputs[0];
    let rows = out.len();
    if rows == 0 {
        return;
    }
    let m = x.len() / rows;
    for (r, o) in out.iter_mut().enumerate() {
        *o = row_logsumexp(&x[r * m..(r + 1) * m]);
    }
};

fn row_logsumexp(x: &[f32]) -> f32 {
    let max = row_max(x);
    if max.is_infinite() {
        return max;
    }
    exp_sum(x, max).ln() + max
}

avx2_fma_dispatch!(fn exp_sum(x: &[f32], max: f32) -> f32 => exp_sum_body);

/// The exponentials a block at a time (they vectorize), then added one at a
/// time in index order. Below -88 `cpu_exp` is 0, which leaves the sum as it
/// is, as skipping the term would.
#[inline(always)]
fn exp_sum_body(x: &[f32], max: f32) -> f32 {
    let mut e = [0f32; 64];
    let mut s = 0f32;
    for c in x.chunks(64) {
        for (o, &v) in e.iter_mut().zip(c) {
            *o = cpu_exp(v - max);
        }
        for &v in &e[..c.len()] {
            s += v;
        }
    }
    s
}

/// MLX's softmax over the last axis. For float32 on the CPU backend, from
/// `PARALLEL_MIN` elements up, it runs as `softmax_last_kernel`; below, as
/// MLX's op. There the kernel has one thread, its vectorized `exp` gains a few
/// percent of a short prefill at most, and MLX's graph for attention (no
/// `contiguous` node in front of the softmax) keeps its peak memory at MLX-LM's:
/// one query-sized tensor less at a 91-token prompt (benchmark/peak-memory.md).
pub fn softmax_last(x: &Array) -> Result<Array> {
    if x.size() < PARALLEL_MIN {
        return x.softmax(&[-1], false);
    }
    softmax_last_kernel(x)
}

/// MLX's softmax over the last axis as one kernel with the same bits as MLX's
/// CPU `Softmax` (whose `exp` is a scalar polynomial per element there, most
/// of an attention's time at S3Gen's lengths), vectorized and spread over the
/// cores, for float32 on the CPU backend; otherwise MLX's op.
pub fn softmax_last_kernel(x: &Array) -> Result<Array> {
    let shape = x.shape();
    let m = shape.last().copied().unwrap_or(0);
    // The row length travels as a float parameter: exact below 2^24.
    if x.dtype() != Dtype::Float32 || m == 0 || m >= 1 << 24 || !crate::kernel::cpu_default() {
        return x.softmax(&[-1], false);
    }
    // In place, as MLX's `Softmax` donates its input: attention's scores.
    cpu_kernel_f32_in_place("Softmax", SOFTMAX, &[m as f32], x, &[])
}

/// Below this many elements one thread does it all (handing work to another
/// thread costs microseconds).
const PARALLEL_MIN: usize = 1 << 16;

/// Runs `f` on pieces of `data`, split at multiples of `unit` elements, over
/// the cores (rayon's pool) when there is enough work. Element-wise and
/// row-wise kernels give the same bits however they are split.
fn par_chunks(data: &mut [f32], unit: usize, f: fn(&mut [f32], usize)) {
    let units = data.len() / unit;
    let threads = if data.len() < PARALLEL_MIN { 1 } else { rayon::current_num_threads().min(units) };
    if threads <= 1 {
        return f(data, unit);
    }
    let per = units.div_ceil(threads) * unit;
    rayon::in_place_scope(|s| {
        let mut parts = data.chunks_mut(per);
        let first = parts.next();
        for part in parts {
            s.spawn(move |_| f(part, unit));
        }
        if let Some(part) = first {
            f(part, unit);
        }
    });
}

/// In place (`out` holds the input; see `cpu_kernel_f32_in_place`).
const SOFTMAX: KernelF32 = |params, _, out| {
    let m = params[0] as usize;
    if m == 0 || out.len() % m != 0 {
        out.fill(f32::NAN);
        return;
    }
    par_chunks(out, m, softmax_rows);
};

avx2_fma_dispatch!(fn softmax_rows(data: &mut [f32], unit: usize) => softmax_rows_body);

/// Rows of `m` in groups of 8, each as MLX's loop: the maximum, `exp(x - max)`
/// stored, the stored values summed one at a time in index order, then each
/// times `1 / sum`. The 8 rows' sums run side by side (the same order within
/// each row), so the adds do not wait on each other.
#[inline(always)]
fn softmax_rows_body(data: &mut [f32], m: usize) {
    const G: usize = 8;
    for og in data.chunks_mut(G * m) {
        let rows = og.len() / m;
        for or in og.chunks_exact_mut(m) {
            let max = row_max(or);
            for o in or.iter_mut() {
                *o = cpu_exp(*o - max);
            }
        }
        let mut sums = [0f32; G];
        if rows == G {
            for i in 0..m {
                for (r, s) in sums.iter_mut().enumerate() {
                    *s += og[r * m + i];
                }
            }
        } else {
            for (r, s) in sums.iter_mut().enumerate().take(rows) {
                *s = og[r * m..(r + 1) * m].iter().fold(0f32, |a, &v| a + v);
            }
        }
        for (r, or) in og.chunks_exact_mut(m).enumerate() {
            let k = 1.0 / sums[r];
            for o in or.iter_mut() {
                *o *= k;
            }
        }
    }
}

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
pub fn for_each_candidate(
    x: &[f32],
    candidate: impl Fn(f32) -> bool,
    map: impl Fn(f32) -> f32,
    mut f: impl FnMut(usize, f32, f32),
) {
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
    if is_x86_feature_detected!("avx") {
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

/// `nn.gelu`'s `x * (1 + erf(x / sqrt(2))) / 2` as MLX's CPU ops compute it
/// (the `erf` being MLX's polynomial around its `exp`), in one pass instead of
/// five, vectorized and over the cores, for float32 on the CPU backend; the
/// op chain otherwise. Same bits either way.
pub fn gelu(x: &Array) -> Result<Array> {
    if x.dtype() != Dtype::Float32 || !crate::kernel::cpu_default() {
        let cdf = x.divide_scalar(std::f64::consts::SQRT_2)?.erf()?.add_scalar(1.0)?;
        return x.multiply(&cdf)?.divide_scalar(2.0);
    }
    cpu_kernel_f32_in_place("Gelu", GELU, &[], x, &[])
}

/// In place (`out` holds the input).
const GELU: KernelF32 = |_, _, out| par_chunks(out, 1, gelu_all);

avx2_fma_dispatch!(fn gelu_all(data: &mut [f32], unit: usize) => gelu_body);

#[inline(always)]
fn gelu_body(data: &mut [f32], _unit: usize) {
    for v in data.iter_mut() {
        *v = *v * (1.0 + cpu_erf(*v / std::f32::consts::SQRT_2)) / 2.0;
    }
}

/// MLX's CPU `erf` for float32, step for step (`backend/cpu/simd/math.h`).
#[inline(always)]
pub fn cpu_erf(v: f32) -> f32 {
    let t = 1.0 / 0.3275911f32.mul_add(v.abs(), 1.0);
    let mut r = 1.061405429f32.mul_add(t, -1.453152027);
    for c in [1.421413741f32, -0.284496736, 0.254829592] {
        r = r.mul_add(t, c);
    }
    let e = -cpu_exp(-v * v);
    let result = (e * t).mul_add(r, 1.0);
    if v > 0.0 {
        result
    } else {
        -result
    }
}
