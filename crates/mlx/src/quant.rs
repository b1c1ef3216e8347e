//! Affine quantization, as MLX-community weights use it.
use std::ptr;

use mlx_sys as sys;

use crate::array::{make, raw_or_null, Array};
use crate::error::{check, Result};

/// Returns (packed weights, scales, biases).
pub fn quantize(w: &Array, group_size: i32, bits: i32) -> Result<(Array, Array, Array)> {
    let (mut q, mut s, mut b) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    // SAFETY: `w.raw` is live; `q`, `s` and `b` are locals the shim writes only on success, all three
    // then, each a new handle that the Array made from it owns.
    check(unsafe { sys::mlxn_quantize(w.raw, group_size, bits, &mut q, &mut s, &mut b) })?;
    Ok((Array { raw: q }, Array { raw: s }, Array { raw: b }))
}

pub fn dequantize(w: &Array, scales: &Array, biases: Option<&Array>, group_size: i32, bits: i32) -> Result<Array> {
    // SAFETY: the handles are live, the biases a live handle or null; `out` and errors as in `make`.
    make(|out| unsafe { sys::mlxn_dequantize(w.raw, scales.raw, raw_or_null(biases), group_size, bits, out) })
}

/// Packed weights for `quantized_matmul` on this device, and their width:
/// 3-, 5- and 6-bit weights re-packed at 8 bits where the CPU kernel runs
/// (same results, see `cpu::qmm::widen_packed`), anything else as it is.
pub fn for_device(w: Array, bits: i32) -> Result<(Array, i32)> {
    Ok(match crate::cpu::qmm::widen_packed(&w, bits)? {
        Some(wide) => (wide, 8),
        None => (w, bits),
    })
}

/// How a quantized matmul is computed (`loadModel`'s `precision` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// MLX's own arithmetic and bits (`cpu::qmm` on the CPU, MLX's op elsewhere).
    #[default]
    Exact,
    /// On the CPU, integer dot products on 8-bit activations (`cpu::qmm_int8`):
    /// several times faster, within a measured tolerance of exact. Exact
    /// where that kernel does not run (other devices, the kernel switched off).
    Fast,
}

/// `x @ dequantize(w).T` (or without the transpose). For float32 and bfloat16
/// on the CPU backend it runs as a kernel with MLX's exact bits (`cpu::qmm`),
/// or in `Precision::Fast` as `cpu::qmm_int8`; otherwise, and for what those
/// kernels do not cover, it is MLX's op.
#[allow(clippy::too_many_arguments)]
pub fn quantized_matmul(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: Option<&Array>,
    transpose: bool,
    group_size: i32,
    bits: i32,
    precision: Precision,
) -> Result<Array> {
    if let (true, Some(b)) = (transpose, biases) {
        if precision == Precision::Fast {
            if let Some(y) = crate::cpu::qmm_int8::quantized_matmul(x, w, scales, b, group_size, bits)? {
                return Ok(y);
            }
        }
        if let Some(y) = crate::cpu::qmm::quantized_matmul(x, w, scales, b, group_size, bits)? {
            return Ok(y);
        }
    }
    quantized_matmul_mlx(x, w, scales, biases, transpose, group_size, bits)
}

/// MLX's `gather_mm`: row block `i` of `a` times the `rhs_indices[i]`-th matrix of `b`
/// (MoE experts); `sorted` when the indices come sorted.
pub fn gather_mm(a: &Array, b: &Array, rhs_indices: &Array, sorted: bool) -> Result<Array> {
    // SAFETY: the handles are live, the lhs indices null; `out` and errors as in `make`.
    make(|out| unsafe { sys::mlxn_gather_mm(a.raw, b.raw, ptr::null_mut(), rhs_indices.raw, sorted as i32, out) })
}

/// MLX's `gather_qmm` (affine mode): `gather_mm` against quantized experts.
#[allow(clippy::too_many_arguments)]
pub fn gather_qmm(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: Option<&Array>,
    rhs_indices: &Array,
    transpose: bool,
    group_size: i32,
    bits: i32,
    sorted: bool,
) -> Result<Array> {
    // SAFETY: the handles are live, the biases a live handle or null, the lhs indices null; `out` and
    // errors as in `make`.
    make(|out| unsafe {
        sys::mlxn_gather_qmm(
            x.raw,
            w.raw,
            scales.raw,
            raw_or_null(biases),
            ptr::null_mut(),
            rhs_indices.raw,
            transpose as i32,
            group_size,
            bits,
            sorted as i32,
            out,
        )
    })
}

/// MLX's own `quantized_matmul` on any device (the reference the CPU kernel is
/// checked against).
pub fn quantized_matmul_mlx(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: Option<&Array>,
    transpose: bool,
    group_size: i32,
    bits: i32,
) -> Result<Array> {
    // SAFETY: the handles are live, the biases a live handle or null; `out` and errors as in `make`.
    make(|out| unsafe { sys::mlxn_quantized_matmul(x.raw, w.raw, scales.raw, raw_or_null(biases), transpose as i32, group_size, bits, out) })
}
