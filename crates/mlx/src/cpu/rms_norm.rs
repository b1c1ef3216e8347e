//! MLX's `fast::rms_norm` as one node, with MLX's bits (float32, bfloat16, float16). On the
//! CPU MLX has no RMSNorm kernel: `fast.cpp` runs its fallback, eight graph
//! nodes per call (square, sum, the mean's `1 / n` and its product, the
//! epsilon, `rsqrt`, the product, the weight), and a decoder layer calls it
//! two to four times (docs/decode-profile.md: the nodes, not the arithmetic,
//! are what such small ops cost). Per row, as those ops compute it on
//! Linux (one lane, no fused multiply-adds): `s = sum(x * x)` in index order,
//! `r = 1 / sqrt(s * f32(1 / n) + eps)`, `y = (x * r) * w`. In a 16-bit
//! output dtype (a bfloat16 model's), `x * r` is rounded to it and so is the
//! product with the weight, as MLX's `astype` and 16-bit `multiply` round.
use crate::cpu::half::Rounding;
use crate::cpu::kernel::{cpu_kernel_f32, Kernel, KernelF32};
use crate::cpu::math::{par_chunks_at, PARALLEL_MIN};
use crate::cpu::qmm::compute_dtype;
use crate::{Array, Dtype, Result};

/// `x` normalised over its last axis (times `weight` where given), in MLX's
/// output dtype (`x`'s and the weight's promotion), or `None` where the kernel
/// does not apply (switched off, not the CPU, not a float dtype, a weight of
/// another shape: MLX's op then runs, and reports any error).
pub fn rms_norm(x: &Array, weight: Option<&Array>, eps: f32) -> Result<Option<Array>> {
    let Some(&n) = x.shape().last() else { return Ok(None) };
    let out_dtype = match weight {
        Some(w) => compute_dtype(x.dtype(), w.dtype()),
        None => compute_dtype(x.dtype(), x.dtype()),
    };
    let Some(out_dtype) = out_dtype else { return Ok(None) };
    let weight_fits = weight.is_none_or(|w| w.ndim() == 1 && w.dim(0) == n);
    // The row length travels as a float parameter: exact below 2^24.
    if !weight_fits || n <= 0 || n >= 1 << 24 || !Kernel::Math.enabled() {
        return Ok(None);
    }
    let inputs: Vec<&Array> = std::iter::once(x).chain(weight).collect();
    let params = [n as f32, eps, weight.is_some() as u8 as f32, Rounding::of(out_dtype) as u8 as f32];
    // The node widens 16-bit inputs to float32 (exact); its float32 result holds values of
    // `out_dtype`, so the cast back is exact.
    let y = cpu_kernel_f32("RmsNorm", RMS_NORM, &params, &inputs, &x.shape())?;
    Ok(Some(if out_dtype == Dtype::Float32 { y } else { y.astype(out_dtype)? }))
}

const RMS_NORM: KernelF32 = |params, inputs, out| {
    let (n, eps, rounding) = (params[0] as usize, params[1], Rounding::from_param(params[3]));
    let x = inputs[0];
    let w = if params[2] != 0.0 { inputs.get(1).copied() } else { None };
    if n == 0 || x.len() != out.len() || out.len() % n != 0 || w.is_some_and(|w| w.len() != n) {
        out.fill(f32::NAN);
        return;
    }
    // MLX's `mean` multiplies by `1 / n` computed in double and stored as float32.
    let inv_n = (1.0 / n as f64) as f32;
    par_chunks_at(out, n, PARALLEL_MIN, |part, at| rows(&x[at..at + part.len()], w, n, eps, inv_n, rounding, part));
};

crate::avx2_fma_dispatch!(fn rows(x: &[f32], w: Option<&[f32]>, n: usize, eps: f32, inv_n: f32, rounding: Rounding, out: &mut [f32]) => rows_body);

/// Each row of `n` alone: the sum one term at a time in index order (as MLX's
/// one-lane reduction), the products element-wise (no fused multiply-add),
/// each rounded to the output dtype where MLX stores it in one.
#[inline(always)]
fn rows_body(x: &[f32], w: Option<&[f32]>, n: usize, eps: f32, inv_n: f32, rounding: Rounding, out: &mut [f32]) {
    for (xr, or) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let s = xr.iter().fold(0f32, |s, &v| s + v * v);
        let r = 1.0 / (s * inv_n + eps).sqrt();
        match (w, rounding) {
            (Some(w), Rounding::None) => or.iter_mut().zip(xr).zip(w).for_each(|((o, &v), &wv)| *o = (v * r) * wv),
            (None, Rounding::None) => or.iter_mut().zip(xr).for_each(|(o, &v)| *o = v * r),
            (Some(w), _) => or.iter_mut().zip(xr).zip(w).for_each(|((o, &v), &wv)| *o = rounding.round(rounding.round(v * r) * wv)),
            (None, _) => or.iter_mut().zip(xr).for_each(|(o, &v)| *o = rounding.round(v * r)),
        }
    }
}
