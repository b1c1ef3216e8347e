//! MLX's CPU float32 math reproduced step for step, for kernels whose results
//! must equal what MLX's own ops give (MLX-LM parity rests on it), and the
//! kernels built on it. Each is checked bit for bit against MLX in
//! `tests/integration/cpu_math.rs`.
use crate::cpu::kernel::{cpu_kernel_f32, cpu_kernel_f32_in_place, KernelF32};
use crate::cpu::row_ops::row_max;
use crate::cpu::share::{share, Disjoint};
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

/// MLX's CPU `sin` for float32, step for step (`backend/cpu/simd/math.h`,
/// `sincos_checked<true>`: the Cephes reduction by multiples of pi/4 in three
/// fused multiply-adds, two polynomials, and libm's `sinf` past 2^23, where
/// the reduction would lose the argument).
#[inline(always)]
pub fn cpu_sin(v: f32) -> f32 {
    if sin_needs_libm(v) {
        v.sin()
    } else {
        cpu_sin_reduced(v)
    }
}

/// Past 2^23 MLX's `sin` is libm's `sinf`.
#[inline(always)]
pub fn sin_needs_libm(v: f32) -> bool {
    v.abs() > 8388608.0
}

/// `cpu_sin` for arguments where `sin_needs_libm` is false: arithmetic only,
/// so that loops over it vectorize (a libm call in the loop would be made for
/// every element).
#[inline(always)]
pub fn cpu_sin_reduced(v: f32) -> f32 {
    sincos_reduced::<true>(v)
}

/// MLX's CPU `cos` for float32, step for step (`sincos_checked<false>`: the
/// same reduction and polynomials as `cpu_sin`, the other one chosen, and
/// libm's `cosf` past 2^23).
#[inline(always)]
pub fn cpu_cos(v: f32) -> f32 {
    if sin_needs_libm(v) {
        v.cos()
    } else {
        cpu_cos_reduced(v)
    }
}

/// `cpu_cos` where `sin_needs_libm` is false (arithmetic only, as `cpu_sin_reduced`).
#[inline(always)]
pub fn cpu_cos_reduced(v: f32) -> f32 {
    sincos_reduced::<false>(v)
}

/// MLX's `sincos<SINE>`: the Cephes reduction by multiples of pi/4 in three
/// fused multiply-adds, then one of two polynomials and a sign.
#[inline(always)]
fn sincos_reduced<const SINE: bool>(v: f32) -> f32 {
    let negative = v < 0.0;
    let x = v.abs();
    // The integer part of x * 4/pi, rounded up to even (NaN converts to 0, as
    // the C++ conversion does on x86).
    let j = (((x * 1.27323954473516f32) as u32).wrapping_add(1)) & !1;
    let y = j as f32;
    let x = y.mul_add(-0.78515625, x);
    let x = y.mul_add(-2.4187564849853515625e-4, x);
    let x = y.mul_add(-3.77489497744594108e-8, x);
    let z = x * x;
    let mut c = z.mul_add(2.443315711809948e-5, -1.388731625493765e-3);
    let mut s = z.mul_add(-1.9515295891e-4, 8.3321608736e-3);
    c = c.mul_add(z, 4.166664568298827e-2);
    s = s.mul_add(z, -1.6666654611e-1);
    c *= z;
    s *= z;
    c *= z;
    s = x.mul_add(s, x);
    c = z.mul_add(-0.5, c);
    c += 1.0;
    let poly = j & 2 != 0;
    if SINE {
        let r = if poly { c } else { s };
        if negative ^ (j & 4 != 0) {
            -r
        } else {
            r
        }
    } else {
        let r = if poly { s } else { c };
        if j.wrapping_sub(2) & 4 != 0 {
            r
        } else {
            -r
        }
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

/// `MLX_NODE_CPU_FEATURES`: what the kernels may use of the CPU's features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FeatureCap {
    /// Everything the CPU has (unset, or any other value).
    All,
    /// `avx2`: AVX2, FMA and F16C, none of AVX-512 or AVX-VNNI, so an AVX-512
    /// machine runs (and tests, and measures) the paths of an AVX2-only CPU.
    Avx2,
    /// `avx512`: everything but AMX, so an AMX machine runs (and tests, and
    /// measures) the AVX-512 paths its tiles replace.
    Avx512,
    /// `baseline`: none of AVX, AVX2 and FMA, so the portable code every kernel
    /// falls back to runs on any machine.
    Baseline,
}

/// Read once per process.
fn feature_cap() -> FeatureCap {
    static CAP: std::sync::OnceLock<FeatureCap> = std::sync::OnceLock::new();
    *CAP.get_or_init(|| match std::env::var("MLX_NODE_CPU_FEATURES").as_deref().map(str::trim) {
        Ok("baseline") => FeatureCap::Baseline,
        Ok("avx2") => FeatureCap::Avx2,
        Ok("avx512") => FeatureCap::Avx512,
        _ => FeatureCap::All,
    })
}

/// `MLX_NODE_CPU_FEATURES=baseline`: act as on an x86-64 CPU without AVX, AVX2
/// and FMA.
pub fn baseline_only() -> bool {
    feature_cap() == FeatureCap::Baseline
}

/// Whether the kernels may use AVX-512 and AVX-VNNI where the CPU has them
/// (not under `MLX_NODE_CPU_FEATURES=avx2` or `baseline`).
pub fn beyond_avx2() -> bool {
    matches!(feature_cap(), FeatureCap::All | FeatureCap::Avx512)
}

/// Whether the kernels may use AMX tiles where the CPU has them (not under
/// any `MLX_NODE_CPU_FEATURES` cap).
pub fn amx_allowed() -> bool {
    feature_cap() == FeatureCap::All
}

/// Whether the CPU has AVX2 and FMA (the condition of `avx2_fma_dispatch!`'s
/// feature-specific copy).
#[cfg(target_arch = "x86_64")]
#[doc(hidden)]
#[inline(always)]
pub fn avx2_fma() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && !baseline_only()
}

/// Whether the CPU has AVX2 (false off x86-64 and under `baseline_only`).
pub fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && !baseline_only()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the CPU has AVX-512 F and VL and `MLX_NODE_CPU_FEATURES` allows
/// them (false off x86-64): 256-bit code then has 32 vector registers, and
/// 512-bit code the masked and 256-bit forms it uses.
pub fn has_avx512_vl() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl") && beyond_avx2()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the CPU has AVX (false off x86-64 and under `baseline_only`).
pub fn has_avx() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx") && !baseline_only()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the CPU has AVX2 and FMA, on any architecture (false off x86-64):
/// the condition of the hand-written AVX2 kernels.
pub fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx2_fma()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
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
                if $crate::cpu::math::avx2_fma() {
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

pub(crate) fn row_logsumexp(x: &[f32]) -> f32 {
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
    if x.dtype() != Dtype::Float32 || m == 0 || m >= 1 << 24 || !crate::cpu::kernel::Kernel::Math.enabled() {
        return x.softmax(&[-1], false);
    }
    // In place, as MLX's `Softmax` donates its input: attention's scores.
    cpu_kernel_f32_in_place("Softmax", SOFTMAX, &[m as f32], x, &[])
}

/// `where(q_i >= k_j, x, lowest)` then `softmax_last`, for scores
/// `[..., L, S]` of a causal attention whose `L` queries are the last of `S`
/// positions (MLX's fallback's mask), with the same bits in one pass: a
/// masked score's `exp` is exactly 0 in MLX's formula (below -88), so it adds
/// nothing to its row's sum, and the only trace the masked scores leave is
/// `lowest` in the row's maximum. So each row takes its maximum, `exp` and sum
/// over its unmasked prefix and writes zeros after it; the `where` node, and
/// the `exp` and a pass over the masked half, are gone. Below `PARALLEL_MIN`
/// elements, or where the kernel does not apply, MLX's ops as before.
pub fn softmax_causal_last(x: &Array) -> Result<Array> {
    let shape = x.shape();
    let (s, l) = match shape[..] {
        [.., l, s] => (s, l),
        _ => (0, 0),
    };
    let fits = x.dtype() == Dtype::Float32 && l > 0 && l <= s && s < 1 << 24 && x.size() >= PARALLEL_MIN;
    if !fits || !crate::cpu::kernel::Kernel::Math.enabled() {
        // MLX's `fast.cpp` fallback: the mask as a `where` to the lowest float.
        let offset = s - l;
        let qi = Array::arange(offset as f64, (offset + l) as f64, 1.0, Dtype::Int32)?.expand_dims(&[1])?;
        let ki = Array::arange(0.0, s as f64, 1.0, Dtype::Int32)?.expand_dims(&[0])?;
        let lowest = x.scalar_like(f32::MIN as f64)?;
        return softmax_last(&Array::where_(&qi.greater_equal(&ki)?, x, &lowest)?);
    }
    cpu_kernel_f32_in_place("SoftmaxCausal", SOFTMAX_CAUSAL, &[s as f32, l as f32], x, &[])
}

/// Below this many elements one thread does it all (handing work to another
/// thread costs microseconds).
pub const PARALLEL_MIN: usize = 1 << 16;

/// Runs `f` on pieces of `data`, split at multiples of `unit` elements, over
/// the cores (rayon's pool) from `min_len` elements up (`PARALLEL_MIN` for a
/// few nanoseconds of work per element; less where each costs more). Element-
/// wise and row-wise kernels give the same bits however they are split.
pub fn par_chunks(data: &mut [f32], unit: usize, min_len: usize, f: impl Fn(&mut [f32], usize) + Sync) {
    par_chunks_at(data, unit, min_len, |part, _| f(part, unit));
}

/// `par_chunks`, with `f` given each piece's offset in `data` (elements)
/// instead of `unit`: for kernels that read other inputs alongside.
pub fn par_chunks_at(data: &mut [f32], unit: usize, min_len: usize, f: impl Fn(&mut [f32], usize) + Sync) {
    let (len, unit) = (data.len(), unit.max(1));
    let helpers = if len < min_len { 0 } else { rayon::current_num_threads() - 1 };
    let data = Disjoint::new(data);
    share(len.div_ceil(unit), helpers, &|units| {
        let (start, end) = (units.start * unit, (units.end * unit).min(len));
        // SAFETY: `share` gives each range of units to one thread only.
        f(unsafe { data.part(start, end - start) }, start)
    });
}

/// In place (`out` holds the input; see `cpu_kernel_f32_in_place`).
const SOFTMAX: KernelF32 = |params, _, out| {
    let m = params[0] as usize;
    if m == 0 || out.len() % m != 0 {
        out.fill(f32::NAN);
        return;
    }
    par_chunks(out, m, PARALLEL_MIN, softmax_rows);
};

/// In place; rows of `s` scores, `l` queries to a matrix (`softmax_causal_last`).
const SOFTMAX_CAUSAL: KernelF32 = |params, _, out| {
    let (s, l) = (params[0] as usize, params[1] as usize);
    if s == 0 || l == 0 || l > s || out.len() % s != 0 {
        out.fill(f32::NAN);
        return;
    }
    par_chunks_at(out, s, PARALLEL_MIN, |part, start| softmax_rows_causal(part, s, l, start / s));
};

avx2_fma_dispatch!(pub(crate) fn softmax_rows(data: &mut [f32], unit: usize) => softmax_rows_body);

#[inline(always)]
fn softmax_rows_body(data: &mut [f32], m: usize) {
    softmax_rows_in(data, m, 0, 0)
}

avx2_fma_dispatch!(pub(crate) fn softmax_rows_causal(data: &mut [f32], m: usize, l: usize, first: usize) => softmax_rows_in);

/// Rows of `m` in groups of 8, each as MLX's loop: the maximum, `exp(x - max)`
/// stored, the stored values summed one at a time in index order, then each
/// times `1 / sum`. The 8 rows' sums run side by side (the same order within
/// each row), so the adds do not wait on each other. With `l` > 0 the rows are
/// causal attention's (`softmax_causal_last`): row `first + r` is query
/// `(first + r) % l` of the last `l` of `m` positions, and only its prefix up
/// to that position is read; the rest is written as the zeros its masked
/// scores' `exp` would be.
#[inline(always)]
fn softmax_rows_in(data: &mut [f32], m: usize, l: usize, first: usize) {
    const G: usize = 8;
    let valid = |row: usize| if l == 0 { m } else { m - l + (first + row) % l + 1 };
    for (g, og) in data.chunks_mut(G * m).enumerate() {
        let rows = og.len() / m;
        let mut longest = 0;
        for (r, or) in og.chunks_exact_mut(m).enumerate() {
            let v = valid(g * G + r);
            longest = longest.max(v);
            let (kept, masked) = or.split_at_mut(v);
            let mut max = row_max(kept);
            // The masked scores' `lowest` in MLX's maximum (NaN stays NaN, as there).
            if !masked.is_empty() && f32::MIN > max {
                max = f32::MIN;
            }
            for o in kept.iter_mut() {
                *o = cpu_exp(*o - max);
            }
            masked.fill(0.0);
        }
        let mut sums = [0f32; G];
        if rows == G {
            // Past a row's prefix its entries are zeros, which leave its sum as it is.
            for i in 0..longest {
                for (r, s) in sums.iter_mut().enumerate() {
                    *s += og[r * m + i];
                }
            }
        } else {
            for (r, s) in sums.iter_mut().enumerate().take(rows) {
                *s = og[r * m..r * m + valid(g * G + r)].iter().fold(0f32, |a, &v| a + v);
            }
        }
        for (r, or) in og.chunks_exact_mut(m).enumerate() {
            let k = 1.0 / sums[r];
            for o in or[..valid(g * G + r)].iter_mut() {
                *o *= k;
            }
        }
    }
}

/// `nn.gelu`'s `x * (1 + erf(x / sqrt(2))) / 2` as MLX's CPU ops compute it
/// (the `erf` being MLX's polynomial around its `exp`), in one pass instead of
/// five, vectorized and over the cores, for float32 on the CPU backend; the
/// op chain otherwise. Same bits either way.
pub fn gelu(x: &Array) -> Result<Array> {
    if x.dtype() != Dtype::Float32 || !crate::cpu::kernel::Kernel::Math.enabled() {
        let cdf = x.divide_scalar(std::f64::consts::SQRT_2)?.erf()?.add_scalar(1.0)?;
        return x.multiply(&cdf)?.divide_scalar(2.0);
    }
    cpu_kernel_f32_in_place("Gelu", GELU, &[], x, &[])
}

/// In place (`out` holds the input).
const GELU: KernelF32 = |_, _, out| par_chunks(out, 1, PARALLEL_MIN, gelu_all);

avx2_fma_dispatch!(fn gelu_all(data: &mut [f32], unit: usize) => gelu_body);

#[inline(always)]
fn gelu_body(data: &mut [f32], _unit: usize) {
    for v in data.iter_mut() {
        *v = *v * (1.0 + cpu_erf(*v / std::f32::consts::SQRT_2)) / 2.0;
    }
}

/// MLX-LM's `swiglu` (`silu(gate) * up`, compiled) with the bits of MLX's
/// compiled CPU kernel for it, for float32 or bfloat16 inputs of one shape on
/// the CPU backend: per element `y = 1 / (1 + exp(|g|))`, the sigmoid
/// `g < 0 ? y : 1 - y` (MLX's `Sigmoid`), then `(g * sigmoid) * up`, in
/// bfloat16 with MLX's roundings (`swiglu_bf16`). The compiled kernel runs MLX's
/// scalar `exp` with a libm `fmaf` call per polynomial step; here the loop is
/// vectorized and split over the cores. `None` where it does not apply (the
/// caller then runs MLX's compiled function).
pub fn swiglu(gate: &Array, up: &Array) -> Result<Option<Array>> {
    let Some(bf16) = swiglu_dtype(&[gate.dtype(), up.dtype()]) else { return Ok(None) };
    if gate.shape() != up.shape() {
        return Ok(None);
    }
    let out = cpu_kernel_f32_in_place("SwiGlu", SWIGLU, &[bf16 as u8 as f32], gate, &[up])?;
    Ok(Some(if bf16 { out.astype(Dtype::Bfloat16)? } else { out }))
}

/// Whether the SwiGLU kernels take inputs of these dtypes, and if so whether
/// in bfloat16 arithmetic (every input bfloat16; the node widens them exactly
/// and the result, a bfloat16 value, is cast back) or float32's.
fn swiglu_dtype(dtypes: &[Dtype]) -> Option<bool> {
    if !crate::cpu::kernel::Kernel::Math.enabled() {
        return None;
    }
    let all = |d: Dtype| dtypes.iter().all(|&x| x == d);
    if all(Dtype::Float32) {
        Some(false)
    } else if all(Dtype::Bfloat16) {
        Some(true)
    } else {
        None
    }
}

/// In place: `out` holds the gate, `inputs[0]` is `up`; `params[0]` 1 for
/// bfloat16 arithmetic.
const SWIGLU: KernelF32 = |params, inputs, out| {
    let up = inputs.first().copied().unwrap_or(&[]);
    if up.len() != out.len() {
        out.fill(f32::NAN);
        return;
    }
    let bf16 = params.first() == Some(&1.0);
    // An `exp` per element: split from a quarter of `PARALLEL_MIN`.
    par_chunks_at(out, 1, PARALLEL_MIN / 4, |o, at| swiglu_all(o, &up[at..at + o.len()], bf16));
};

/// `swiglu` of the two halves of `y`'s last axis (`y[..., :h]` the gate,
/// `y[..., h:]` up), as one node reading `y` in place: a gate and up held as
/// one layer (`Weights::linear_fused`, Phi-3's `gate_up_proj`) need no split
/// and no copy of its column halves. The same bits as `swiglu` on the halves.
pub fn swiglu_halves(y: &Array) -> Result<Option<Array>> {
    let mut shape = y.shape();
    let Some(last) = shape.last_mut() else { return Ok(None) };
    let Some(bf16) = swiglu_dtype(&[y.dtype()]) else { return Ok(None) };
    if *last % 2 != 0 || *last == 0 {
        return Ok(None);
    }
    *last /= 2;
    let h = *last;
    let out = cpu_kernel_f32("SwiGluHalves", SWIGLU_HALVES, &[h as f32, bf16 as u8 as f32], &[y], &shape)?;
    Ok(Some(if bf16 { out.astype(Dtype::Bfloat16)? } else { out }))
}

/// `params[0]`: the half width `h`, `params[1]` 1 for bfloat16 arithmetic;
/// `inputs[0]`: rows of `2h`; `out`: rows of `h`.
const SWIGLU_HALVES: KernelF32 = |params, inputs, out| {
    let h = params.first().map_or(0, |&v| v as usize);
    let bf16 = params.get(1) == Some(&1.0);
    let y = inputs.first().copied().unwrap_or(&[]);
    if h == 0 || out.len() % h != 0 || y.len() != 2 * out.len() {
        out.fill(f32::NAN);
        return;
    }
    par_chunks_at(out, h, PARALLEL_MIN / 4, |o, at| {
        for (i, row) in o.chunks_exact_mut(h).enumerate() {
            let yr = &y[2 * at + 2 * i * h..2 * at + 2 * (i + 1) * h];
            row.copy_from_slice(&yr[..h]);
            swiglu_all(row, &yr[h..], bf16);
        }
    });
};

avx2_fma_dispatch!(fn swiglu_all(gate: &mut [f32], up: &[f32], bf16: bool) => swiglu_body);

#[inline(always)]
fn swiglu_body(gate: &mut [f32], up: &[f32], bf16: bool) {
    if bf16 {
        return swiglu_bf16(gate, up);
    }
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = *g;
        let y = 1.0 / (1.0 + cpu_exp(x.abs()));
        let sigmoid = if x < 0.0 { y } else { 1.0 - y };
        *g = (x * sigmoid) * u;
    }
}

/// The same in MLX's bfloat16 arithmetic, on bfloat16 values held as float32:
/// its `exp` returns a bfloat16, `1 + e` and the division are float
/// (bfloat16 with a float gives a float), the sigmoid is stored as a
/// bfloat16, and each product is a bfloat16 operation (rounded).
#[inline(always)]
fn swiglu_bf16(gate: &mut [f32], up: &[f32]) {
    use crate::cpu::half::round_bf16 as r;
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = *g;
        let y = 1.0 / (1.0 + r(cpu_exp(x.abs())));
        let sigmoid = r(if x < 0.0 { y } else { 1.0 - y });
        *g = r(r(x * sigmoid) * u);
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

/// Element-wise `sin` with MLX's CPU bits for float32 on the CPU backend,
/// vectorized and over the cores (MLX's is a scalar polynomial per element
/// with a libm `fmaf` call per step); MLX's op otherwise.
pub fn sin(x: &Array) -> Result<Array> {
    if x.dtype() != Dtype::Float32 || !crate::cpu::kernel::Kernel::Math.enabled() {
        return x.sin();
    }
    cpu_kernel_f32_in_place("Sin", SIN, &[], x, &[])
}

/// In place (`out` holds the input).
const SIN: KernelF32 = |_, _, out| par_chunks(out, 1, PARALLEL_MIN, sin_all);

avx2_fma_dispatch!(fn sin_all(data: &mut [f32], unit: usize) => sin_body);

/// Blocks of 64: the arithmetic form over the block unless an element needs libm.
#[inline(always)]
fn sin_body(data: &mut [f32], _unit: usize) {
    for block in data.chunks_mut(64) {
        if block.iter().fold(false, |any, &v| any | sin_needs_libm(v)) {
            block.iter_mut().for_each(|v| *v = cpu_sin(*v));
        } else {
            block.iter_mut().for_each(|v| *v = cpu_sin_reduced(*v));
        }
    }
}
