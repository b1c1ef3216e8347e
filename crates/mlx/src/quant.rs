//! Quantized weights as MLX packs them: affine (MLX-community's usual
//! quantization) and MLX's floating-point modes (`mxfp4`, `nvfp4`, `mxfp8`).
use std::ffi::CStr;
use std::ptr;

use mlx_sys as sys;

use crate::array::{make, raw_or_null, Array};
use crate::error::{check, Result};

/// A quantized weight laid out once for its precision's CPU kernel (`nn::Linear::Repacked`).
pub use crate::cpu::qmm_repack::Repacked;

/// MLX's quantization mode (`mode` of `mlx.core.quantize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Mode {
    /// `w = scale * q + bias` per group: float scales and biases.
    #[default]
    Affine,
    /// OCP MX FP4: E2M1 values in groups of 32, one E8M0 (uint8) scale each.
    Mxfp4,
    /// NVIDIA FP4: E2M1 values in groups of 16, one E4M3 (uint8) scale each.
    Nvfp4,
    /// OCP MX FP8: E4M3 values in groups of 32, one E8M0 (uint8) scale each.
    Mxfp8,
}

impl Mode {
    /// Every mode, as MLX names them.
    pub const ALL: [Mode; 4] = [Mode::Affine, Mode::Mxfp4, Mode::Nvfp4, Mode::Mxfp8];

    /// The name MLX (and MLX-LM's config.json) gives the mode.
    pub fn name(self) -> &'static str {
        // The literals below are ASCII, so this never falls back.
        self.c_name().to_str().unwrap_or_default()
    }

    fn c_name(self) -> &'static CStr {
        match self {
            Mode::Affine => c"affine",
            Mode::Mxfp4 => c"mxfp4",
            Mode::Nvfp4 => c"nvfp4",
            Mode::Mxfp8 => c"mxfp8",
        }
    }

    pub fn from_name(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The one (group size, bits) a floating-point mode allows; affine takes any.
    pub fn fixed_format(self) -> Option<(i32, i32)> {
        match self {
            Mode::Affine => None,
            Mode::Mxfp4 => Some((32, 4)),
            Mode::Nvfp4 => Some((16, 4)),
            Mode::Mxfp8 => Some((32, 8)),
        }
    }

    /// The mode of uint8 scales packed at `bits` in groups of `group_size`
    /// (MLX-LM's `infer_quant_config`): each floating-point mode has one format.
    pub fn of_uint8_scales(group_size: i32, bits: i32) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.fixed_format() == Some((group_size, bits)))
    }

    /// Only affine quantization has biases (and float scales).
    pub fn has_biases(self) -> bool {
        self == Mode::Affine
    }
}

/// Returns (packed weights, scales, biases); the biases only in affine mode.
pub fn quantize(w: &Array, group_size: i32, bits: i32, mode: Mode) -> Result<(Array, Array, Option<Array>)> {
    let (mut q, mut s, mut b) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    // SAFETY: `w.raw` is live and the mode a NUL-terminated static string; `q`, `s` and `b` are locals
    // the shim writes only on success: `q` and `s` then, and `b` in affine mode (else null), each a new
    // handle that the Array made from it owns.
    check(unsafe { sys::mlxn_quantize(w.raw, group_size, bits, mode.c_name().as_ptr(), &mut q, &mut s, &mut b) })?;
    let biases = if b.is_null() { None } else { Some(Array { raw: b }) };
    Ok((Array { raw: q }, Array { raw: s }, biases))
}

pub fn dequantize(w: &Array, scales: &Array, biases: Option<&Array>, group_size: i32, bits: i32, mode: Mode) -> Result<Array> {
    // SAFETY: the handles are live, the biases a live handle or null, the mode a NUL-terminated static
    // string; `out` and errors as in `make`.
    make(|out| unsafe { sys::mlxn_dequantize(w.raw, scales.raw, raw_or_null(biases), group_size, bits, mode.c_name().as_ptr(), out) })
}

/// Packed weights for `quantized_matmul` on this device, and their width:
/// affine 3-, 5- and 6-bit weights re-packed at 8 bits where the CPU kernel
/// runs (same results, see `cpu::qmm::widen_packed`), anything else as it is.
pub fn for_device(w: Array, bits: i32, mode: Mode) -> Result<(Array, i32)> {
    if mode != Mode::Affine {
        return Ok((w, bits));
    }
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

/// Positions of a prompt chunk from which fast precision runs exact
/// precision's kernel on some layers (`fast_prompt_runs_exact`).
pub const FAST_EXACT_MIN_POSITIONS: i32 = 64;

/// Whether a fast-precision matmul of `x` against `bits`-bit weights in
/// groups of `group_size` runs exact precision's kernel (on the repacked
/// layout, its panel path, each step a fused multiply-add: not MLX's bits,
/// `cpu::qmm_exact_repack::Exact::fused`) instead of `cpu::qmm_int8`: float32 `x` with at least 64
/// positions in its second-to-last axis (a prompt chunk; a batched decode
/// step is `[B, 1, K]` and keeps the integer kernel, so a batch keeps its
/// sequences' bits alone), 8-bit weights or 4-bit ones in groups of 32, the
/// exact kernel on. There the exact kernel's panel path is the faster
/// (one thread, AVX2 Zen 3, minimum of 30 calls, alternated): 8 bits, where
/// `vpmaddubsw`'s pair sums overflow 16 bits and the integer kernel widens
/// every slot, 408 x 1024 -> 3072 in 39.6-41.0 ms against 71-77 (7.1-7.7
/// against 11.1-11.3 at 64 rows); 4 bits in groups of 32 (GGUF Q4_0 and
/// Q4_1), where the integer kernel finishes a group every 32 weights,
/// 0.83-0.90 of its time at 408 rows, even at 64. Groups of 64 and 128, 2
/// bits, bfloat16 `x` and shorter chunks keep the integer kernel, and so does
/// every chunk where the integer path is AVX-512 VNNI's or AMX's
/// (`Isa::prompts_beat_panel`: 1.2-1.9x the panel's speed there), the one
/// place where fast precision's bits depend on the CPU
/// (`info::fast_prompts_fused`). Both paths (MLX's layout and the repacked
/// one) decide alike, so `MLX_NODE_REPACK=0` keeps the same bits.
pub(crate) fn fast_prompt_runs_exact(x: &Array, bits: i32, group_size: i32) -> bool {
    (bits == 8 || (bits == 4 && group_size == 32))
        && x.dtype() == crate::Dtype::Float32
        && x.ndim() >= 2
        && x.dim(-2) >= FAST_EXACT_MIN_POSITIONS
        && crate::cpu::kernel::Kernel::Qmm.enabled()
        && crate::info::fast_prompts_fused()
}

/// `x @ dequantize(w).T` (or without the transpose). Affine weights, float32
/// and bfloat16, on the CPU backend run as a kernel with MLX's exact bits
/// (`cpu::qmm`), or in `Precision::Fast` as `cpu::qmm_int8`; otherwise (the
/// floating-point modes always), and for what those kernels do not cover, it
/// is MLX's op.
#[allow(clippy::too_many_arguments)]
pub fn quantized_matmul(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: Option<&Array>,
    transpose: bool,
    group_size: i32,
    bits: i32,
    mode: Mode,
    precision: Precision,
) -> Result<Array> {
    // Our kernels read affine packing only (scale and bias per group).
    if let (Mode::Affine, true, Some(b)) = (mode, transpose, biases) {
        if precision == Precision::Fast && !fast_prompt_runs_exact(x, bits, group_size) {
            if let Some(y) = crate::cpu::qmm_int8::quantized_matmul(x, w, scales, b, group_size, bits)? {
                return Ok(y);
            }
        } else if precision == Precision::Fast {
            // The fused sums run on the repacked layout only: laid out for this call, as the
            // layer would have been at load (one pass over the weights, against a chunk's rows).
            if let Some(r) = crate::cpu::qmm_repack::Repacked::new(w, scales, b, group_size, bits, precision)? {
                return r.matmul(x);
            }
        }
        if let Some(y) = crate::cpu::qmm::quantized_matmul(x, w, scales, b, group_size, bits)? {
            return Ok(y);
        }
    }
    quantized_matmul_mlx(x, w, scales, biases, transpose, group_size, bits, mode)
}

/// MLX's `gather_mm`: row block `i` of `a` times the `rhs_indices[i]`-th matrix of `b`
/// (MoE experts); `sorted` when the indices come sorted.
pub fn gather_mm(a: &Array, b: &Array, rhs_indices: &Array, sorted: bool) -> Result<Array> {
    // SAFETY: the handles are live, the lhs indices null; `out` and errors as in `make`.
    make(|out| unsafe { sys::mlxn_gather_mm(a.raw, b.raw, ptr::null_mut(), rhs_indices.raw, sorted as i32, out) })
}

/// MLX's `gather_qmm`: `gather_mm` against quantized experts (always MLX's
/// op, in any mode).
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
    mode: Mode,
    sorted: bool,
) -> Result<Array> {
    // SAFETY: the handles are live, the biases a live handle or null, the lhs indices null, the mode a
    // NUL-terminated static string; `out` and errors as in `make`.
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
            mode.c_name().as_ptr(),
            sorted as i32,
            out,
        )
    })
}

/// MLX's own `quantized_matmul` on any device (the reference the CPU kernel is
/// checked against).
#[allow(clippy::too_many_arguments)]
pub fn quantized_matmul_mlx(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: Option<&Array>,
    transpose: bool,
    group_size: i32,
    bits: i32,
    mode: Mode,
) -> Result<Array> {
    // SAFETY: the handles are live, the biases a live handle or null, the mode a NUL-terminated static
    // string; `out` and errors as in `make`.
    make(|out| unsafe {
        sys::mlxn_quantized_matmul(x.raw, w.raw, scales.raw, raw_or_null(biases), transpose as i32, group_size, bits, mode.c_name().as_ptr(), out)
    })
}
