//! MLX's fused kernels (`mlx::core::fast`).
use std::ffi::CString;

use mlx_sys as sys;

use crate::array::{make, raw_or_null, Array};
use crate::error::Result;

pub fn rms_norm(x: &Array, weight: Option<&Array>, eps: f32) -> Result<Array> {
    make(|out| unsafe { sys::mlxn_rms_norm(x.raw, raw_or_null(weight), eps, out) })
}

pub fn layer_norm(x: &Array, weight: Option<&Array>, bias: Option<&Array>, eps: f32) -> Result<Array> {
    make(|out| unsafe { sys::mlxn_layer_norm(x.raw, raw_or_null(weight), raw_or_null(bias), eps, out) })
}

/// Rotary embedding; `base` and `freqs` are exclusive, as in MLX.
pub fn rope(
    x: &Array,
    dims: i32,
    traditional: bool,
    base: Option<f32>,
    scale: f32,
    offset: i32,
    freqs: Option<&Array>,
) -> Result<Array> {
    make(|out| unsafe {
        sys::mlxn_rope(
            x.raw,
            dims,
            traditional as i32,
            base.unwrap_or(0.0),
            base.is_some() as i32,
            scale,
            offset,
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
    let (mode, arr) = match mask {
        AttentionMask::None => ("", None),
        AttentionMask::Causal => ("causal", None),
        AttentionMask::Array(a) => ("", Some(a)),
    };
    let mode = CString::new(mode).expect("mask mode has no NUL");
    make(|out| unsafe { sys::mlxn_sdpa(q.raw, k.raw, v.raw, scale, mode.as_ptr(), raw_or_null(arr), out) })
}
