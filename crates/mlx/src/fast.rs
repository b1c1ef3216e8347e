//! MLX's fused kernels (`mlx::core::fast`).
use std::ffi::CString;

use mlx_sys as sys;

use crate::array::{make, raw_or_null, Array};
use crate::error::Result;
use crate::Dtype;

pub fn rms_norm(x: &Array, weight: Option<&Array>, eps: f32) -> Result<Array> {
    // SAFETY: `x.raw` is live and `raw_or_null` gives a live handle or null (no weight); `out` and
    // errors as in `make`.
    make(|out| unsafe { sys::mlxn_rms_norm(x.raw, raw_or_null(weight), eps, out) })
}

pub fn layer_norm(x: &Array, weight: Option<&Array>, bias: Option<&Array>, eps: f32) -> Result<Array> {
    // SAFETY: `x.raw` is live and `raw_or_null` gives live handles or null (none); `out` and errors as
    // in `make`.
    make(|out| unsafe { sys::mlxn_layer_norm(x.raw, raw_or_null(weight), raw_or_null(bias), eps, out) })
}

/// Rotary embedding; `base` and `freqs` are exclusive, as in MLX.
pub fn rope(x: &Array, dims: i32, traditional: bool, base: Option<f32>, scale: f32, offset: i32, freqs: Option<&Array>) -> Result<Array> {
    // SAFETY: `x.raw` is live and `raw_or_null` gives a live handle or null (no freqs); `out` and
    // errors as in `make`.
    make(|out| unsafe {
        sys::mlxn_rope(x.raw, dims, traditional as i32, base.unwrap_or(0.0), base.is_some() as i32, scale, offset, raw_or_null(freqs), out)
    })
}

pub enum AttentionMask<'a> {
    None,
    Causal,
    Array(&'a Array),
}

pub fn scaled_dot_product_attention(q: &Array, k: &Array, v: &Array, scale: f32, mask: AttentionMask) -> Result<Array> {
    let f32_4d = |a: &Array| a.dtype() == Dtype::Float32 && a.ndim() == 4;
    let grouped = k.ndim() == 4 && k.dim(1) > 0 && q.ndim() == 4 && q.dim(1) % k.dim(1) == 0;
    if !matches!(mask, AttentionMask::Array(_)) && f32_4d(q) && f32_4d(k) && f32_4d(v) && grouped && crate::cpu::kernel::Kernel::Attention.enabled() {
        return attention_cpu(q, k, v, scale, matches!(mask, AttentionMask::Causal));
    }
    scaled_dot_product_attention_mlx(q, k, v, scale, mask)
}

/// MLX's own `fast::scaled_dot_product_attention` on any device (the reference
/// the CPU path above is checked against).
pub fn scaled_dot_product_attention_mlx(q: &Array, k: &Array, v: &Array, scale: f32, mask: AttentionMask) -> Result<Array> {
    scaled_dot_product_attention_sinks(q, k, v, scale, mask, None)
}

/// MLX's attention with per-head sink logits (GPT-OSS): each head's softmax
/// also weighs a sink that contributes no value.
pub fn scaled_dot_product_attention_sinks(q: &Array, k: &Array, v: &Array, scale: f32, mask: AttentionMask, sinks: Option<&Array>) -> Result<Array> {
    let (mode, arr) = match mask {
        AttentionMask::None => ("", None),
        AttentionMask::Causal => ("causal", None),
        AttentionMask::Array(a) => ("", Some(a)),
    };
    let mode = CString::new(mode).expect("mask mode has no NUL");
    // SAFETY: the handles are live, the mask and sinks live handles or null; `mode` is a NUL-terminated string
    // alive for the call; `out` and errors as in `make`.
    make(|out| unsafe { sys::mlxn_sdpa(q.raw, k.raw, v.raw, scale, mode.as_ptr(), raw_or_null(arr), raw_or_null(sinks), out) })
}

/// What MLX itself runs for attention on the CPU (its `fast.cpp` fallback, op
/// for op: scaled queries, grouped heads by broadcasting, the causal mask as a
/// `where` to the lowest float), except that the softmax is the kernel of
/// `cpu::math::softmax_last`: the same bits, without a scalar `exp` per score.
fn attention_cpu(q: &Array, k: &Array, v: &Array, scale: f32, causal: bool) -> Result<Array> {
    let (b, n_q, l, d) = (q.dim(0), q.dim(1), q.dim(2), q.dim(3));
    let n_kv = k.dim(1);
    let repeats = n_q / n_kv;
    let mut q = q.multiply_scalar(scale as f64)?;
    let (mut k, mut v) = (k.clone(), v.clone());
    if repeats > 1 {
        q = q.reshape(&[b, n_kv, repeats, l, d])?;
        k = k.expand_dims(&[2])?;
        v = v.expand_dims(&[2])?;
    }
    let mut scores = q.matmul(&k.swapaxes(-1, -2)?)?;
    if causal {
        let kl = k.dim(-2);
        let offset = kl - l;
        let qi = Array::arange(offset as f64, (l + offset) as f64, 1.0, Dtype::Int32)?.expand_dims(&[1])?;
        let ki = Array::arange(0.0, kl as f64, 1.0, Dtype::Int32)?.expand_dims(&[0])?;
        let lowest = scores.scalar_like(f32::MIN as f64)?;
        scores = Array::where_(&qi.greater_equal(&ki)?, &scores, &lowest)?;
    }
    let out = crate::cpu::math::softmax_last(&scores)?.matmul(&v)?;
    if repeats > 1 {
        out.reshape(&[b, n_q, l, out.dim(-1)])
    } else {
        Ok(out)
    }
}
