//! MLX's fused kernels (`mlx::core::fast`).
use std::ffi::CString;

use mlx_sys as sys;

use crate::array::{make, raw_or_null, Array};
use crate::error::Result;
use crate::Dtype;

/// RMSNorm over the last axis: one CPU kernel node with MLX's bits for
/// float dtypes on the CPU (`cpu::rms_norm`), MLX's op otherwise.
pub fn rms_norm(x: &Array, weight: Option<&Array>, eps: f32) -> Result<Array> {
    if let Some(y) = crate::cpu::rms_norm::rms_norm(x, weight, eps)? {
        return Ok(y);
    }
    rms_norm_mlx(x, weight, eps)
}

/// MLX's own `fast::rms_norm` (on the CPU, its fallback's eight ops).
pub fn rms_norm_mlx(x: &Array, weight: Option<&Array>, eps: f32) -> Result<Array> {
    // SAFETY: `x.raw` is live and `raw_or_null` gives a live handle or null (no weight); `out` and
    // errors as in `make`.
    make(|out| unsafe { sys::mlxn_rms_norm(x.raw, raw_or_null(weight), eps, out) })
}

pub fn layer_norm(x: &Array, weight: Option<&Array>, bias: Option<&Array>, eps: f32) -> Result<Array> {
    // SAFETY: `x.raw` is live and `raw_or_null` gives live handles or null (none); `out` and errors as
    // in `make`.
    make(|out| unsafe { sys::mlxn_layer_norm(x.raw, raw_or_null(weight), raw_or_null(bias), eps, out) })
}

/// Where the rotary embedding starts: one position for all of `x`, or one per
/// batch row (an int32 array `[B]`; each row gets the bits it gets alone).
#[derive(Clone, Copy)]
pub enum RopeOffset<'a> {
    At(i32),
    PerRow(&'a Array),
}

/// Rotary embedding; `base` and `freqs` are exclusive, as in MLX. One CPU
/// kernel node with MLX's bits for float dtypes on the CPU (`cpu::rope`),
/// MLX's op otherwise.
pub fn rope(x: &Array, dims: i32, traditional: bool, base: Option<f32>, scale: f32, offset: RopeOffset, freqs: Option<&Array>) -> Result<Array> {
    if let Some(y) = crate::cpu::rope::rope(x, dims, traditional, base, scale, offset, freqs)? {
        return Ok(y);
    }
    rope_mlx(x, dims, traditional, base, scale, offset, freqs)
}

/// MLX's own `fast::rope` (on the CPU, its fallback's ops).
pub fn rope_mlx(x: &Array, dims: i32, traditional: bool, base: Option<f32>, scale: f32, offset: RopeOffset, freqs: Option<&Array>) -> Result<Array> {
    let (at, rows) = match offset {
        RopeOffset::At(o) => (o, None),
        RopeOffset::PerRow(a) => (0, Some(a)),
    };
    // SAFETY: `x.raw` is live and `raw_or_null` gives a live handle or null (no per-row
    // offsets, no freqs); `out` and errors as in `make`.
    make(|out| unsafe {
        sys::mlxn_rope(
            x.raw,
            dims,
            traditional as i32,
            base.unwrap_or(0.0),
            base.is_some() as i32,
            scale,
            at,
            raw_or_null(rows),
            raw_or_null(freqs),
            out,
        )
    })
}

pub enum AttentionMask<'a> {
    None,
    Causal,
    Array(&'a Array),
}

pub fn scaled_dot_product_attention(q: &Array, k: &Array, v: &Array, scale: f32, mask: AttentionMask) -> Result<Array> {
    if !matches!(mask, AttentionMask::Array(_)) && cpu_path(q, k, v) {
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
/// `cpu::math::softmax_last`, or with the mask `softmax_causal_last`: the same
/// bits, without a scalar `exp` per score (nor any for masked ones); and a
/// prompt's masked scores are not computed where `cpu::causal_weights` can
/// leave them out with the same bits.
fn attention_cpu(q: &Array, k: &Array, v: &Array, scale: f32, causal: bool) -> Result<Array> {
    let repeats = q.dim(1) / k.dim(1);
    let out = attend_grouped(&group_queries(q, k.dim(1), scale)?, k, v, repeats, causal)?;
    ungroup(out, q.dim(1))
}

/// Whether `attention_cpu` takes these inputs (with no mask array).
fn cpu_path(q: &Array, k: &Array, v: &Array) -> bool {
    let f32_4d = |a: &Array| a.dtype() == Dtype::Float32 && a.ndim() == 4;
    let grouped = k.ndim() == 4 && k.dim(1) > 0 && q.ndim() == 4 && q.dim(1) % k.dim(1) == 0;
    f32_4d(q) && f32_4d(k) && f32_4d(v) && grouped && crate::cpu::kernel::Kernel::Attention.enabled()
}

/// Queries `[B, n_q, L, D]` scaled, and split as `[B, n_kv, repeats, L, D]`
/// when heads share keys.
fn group_queries(q: &Array, n_kv: i32, scale: f32) -> Result<Array> {
    let (b, n_q, l, d) = (q.dim(0), q.dim(1), q.dim(2), q.dim(3));
    let q = q.multiply_scalar(scale as f64)?;
    if n_q / n_kv > 1 {
        q.reshape(&[b, n_kv, n_q / n_kv, l, d])
    } else {
        Ok(q)
    }
}

/// Scaled, grouped queries against keys and values `[B, n_kv, S, D]`.
fn attend_grouped(q: &Array, k: &Array, v: &Array, repeats: i32, causal: bool) -> Result<Array> {
    let v = if repeats > 1 { v.expand_dims(&[2])? } else { v.clone() };
    let weights = if !causal {
        crate::cpu::math::softmax_last(&grouped_scores(q, k)?)?
    } else if let Some(w) = crate::cpu::causal_weights::causal_weights(q, k)? {
        w
    } else {
        crate::cpu::math::softmax_causal_last(&grouped_scores(q, k)?)?
    };
    weights.matmul(&v)
}

/// `q @ k^T` for queries from `group_queries` against keys `[B, n_kv, S, D]`,
/// broadcast over the repeats axis where the queries have one (five axes).
pub(crate) fn grouped_scores(q: &Array, k: &Array) -> Result<Array> {
    let k = if q.ndim() == 5 { k.expand_dims(&[2])? } else { k.clone() };
    q.matmul(&k.swapaxes(-1, -2)?)
}

/// Grouped outputs back to `[B, n_q, L, D]`.
fn ungroup(out: Array, n_q: i32) -> Result<Array> {
    if out.ndim() == 5 {
        out.reshape(&[out.dim(0), n_q, out.dim(3), out.dim(4)])
    } else {
        Ok(out)
    }
}

/// One new position for each of B sequences, each against its own keys and
/// values, no mask: `q` `[B, n_q, 1, D]`, `kv[b]` `[1, n_kv, S_b, D]` each.
/// Row `b` gets the bits `scaled_dot_product_attention(q[b], k_b, v_b, scale,
/// None)` gives it alone; on the CPU path the query scaling and head grouping
/// run once for the batch, so each sequence adds only its own products and
/// softmax to the graph.
pub fn attention_rows(q: &Array, kv: &[(Array, Array)], scale: f32) -> Result<Array> {
    let row = |r: usize| q.slice_axis(0, r as i32, r as i32 + 1);
    let outs = if !kv.is_empty() && kv.iter().all(|(k, v)| cpu_path(q, k, v) && k.dim(1) == kv[0].0.dim(1)) {
        let n_kv = kv[0].0.dim(1);
        let grouped = group_queries(q, n_kv, scale)?;
        let repeats = q.dim(1) / n_kv;
        kv.iter()
            .enumerate()
            .map(|(r, (k, v))| attend_grouped(&grouped.slice_axis(0, r as i32, r as i32 + 1)?, k, v, repeats, false))
            .collect::<Result<Vec<_>>>()?
    } else {
        kv.iter()
            .enumerate()
            .map(|(r, (k, v))| scaled_dot_product_attention(&row(r)?, k, v, scale, AttentionMask::None))
            .collect::<Result<Vec<_>>>()?
    };
    ungroup(Array::concatenate(&outs.iter().collect::<Vec<_>>(), 0)?, q.dim(1))
}
