//! MLX's CPU float32 math reproduced step for step, for kernels whose results
//! must equal what MLX's own ops give (MLX-LM parity rests on it), and the
//! kernels built on it. Each is checked bit for bit against MLX in
//! `tests/cpu_math.rs`.
use crate::kernel::{cpu_kernel_f32, KernelF32};
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
    let ipart = (x + 0.5).floor();
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

/// Runs `body` compiled with the `fma` target feature when the CPU has it, so
/// the fused multiply-adds of `cpu_exp` are one instruction each instead of a
/// libm call (both round once: the results are the same).
#[inline(always)]
pub fn with_fma<R>(body: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "fma")]
        unsafe fn fma<R>(body: impl FnOnce() -> R) -> R {
            body()
        }
        if is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has FMA, checked just above.
            return unsafe { fma(body) };
        }
    }
    body()
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
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| if v.is_nan() || v > m { v } else { m });
    if max.is_infinite() {
        return max;
    }
    let sum = with_fma(|| {
        let mut s = 0f32;
        for &v in x {
            let d = v - max;
            if !(d < -88.0) {
                s += cpu_exp(d);
            }
        }
        s
    });
    sum.ln() + max
}
