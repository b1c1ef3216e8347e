//! Attention over what a cache fetched: MLX's fused kernel for plain keys and
//! values, MLX-LM's `quantized_scaled_dot_product_attention` for quantized ones.
use mlx::fast::{scaled_dot_product_attention, AttentionMask};
use mlx::quant::quantized_matmul_mlx;
use mlx::{Array, Dtype, Result};

use crate::cache::{causal_mask, CacheMask, Fetched, QuantizedArrays};

/// `queries` `[B, heads, L, D]` against the fetched keys and values.
pub fn attend(queries: &Array, fetched: Fetched, scale: f32, mask: CacheMask) -> Result<Array> {
    match fetched {
        Fetched::Dense { keys, values } => {
            let mask = match &mask {
                CacheMask::None => AttentionMask::None,
                CacheMask::Causal => AttentionMask::Causal,
                CacheMask::Array(m) => AttentionMask::Array(m),
            };
            scaled_dot_product_attention(queries, &keys, &values, scale, mask)
        }
        Fetched::Quantized { keys, values, group_size, bits } => quantized(queries, &keys, &values, scale, mask, group_size, bits),
    }
}

/// The most negative finite value of a float dtype (`mx.finfo(dtype).min`).
fn lowest(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::Float16 => -65504.0,
        Dtype::Bfloat16 => -3.3895313892515355e38,
        _ => f32::MIN as f64,
    }
}

/// Scores by `quantized_matmul` against the packed keys, a precise softmax,
/// then `quantized_matmul` with the packed values; grouped query heads share
/// their key/value head through a broadcast axis.
fn quantized(q: &Array, keys: &QuantizedArrays, values: &QuantizedArrays, scale: f32, mask: CacheMask, group_size: i32, bits: i32) -> Result<Array> {
    let s = q.shape();
    let (b, heads, l, d) = (s[0], s[1], s[2], s[3]);
    let kv_heads = keys.w.dim(-3);
    let repeats = heads / kv_heads;
    let mut q = q.multiply_scalar(scale as f64)?;
    let widen = |x: &QuantizedArrays| -> Result<QuantizedArrays> {
        if repeats > 1 {
            Ok(QuantizedArrays { w: x.w.expand_dims(&[-3])?, scales: x.scales.expand_dims(&[-3])?, biases: x.biases.expand_dims(&[-3])? })
        } else {
            Ok(x.clone())
        }
    };
    let (keys, values) = (widen(keys)?, widen(values)?);
    if repeats > 1 {
        q = q.reshape(&[b, kv_heads, repeats, l, d])?;
    }
    let mut scores = quantized_matmul_mlx(&q, &keys.w, &keys.scales, Some(&keys.biases), true, group_size, bits)?;
    let mask = match mask {
        CacheMask::None => None,
        CacheMask::Causal => {
            let (ql, kl) = (scores.dim(-2), scores.dim(-1));
            Some(causal_mask(ql, kl - ql, None)?)
        }
        CacheMask::Array(m) => Some(if repeats > 1 && m.ndim() > 3 { m.expand_dims(&[-3])? } else { m }),
    };
    if let Some(m) = mask {
        scores = if m.dtype() == Dtype::Bool {
            Array::where_(&m, &scores, &Array::scalar(lowest(scores.dtype()), scores.dtype())?)?
        } else {
            scores.add(&m)?
        };
    }
    let scores = scores.softmax(&[-1], true)?;
    let out = quantized_matmul_mlx(&scores, &values.w, &values.scales, Some(&values.biases), false, group_size, bits)?;
    if repeats > 1 {
        out.reshape(&[b, heads, l, d])
    } else {
        Ok(out)
    }
}
