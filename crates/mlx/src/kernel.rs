//! Float32 kernels written in Rust that run as one node of an MLX graph on the
//! CPU stream, for work MLX's CPU ops do slowly (for example a full sort where
//! only a sum in sorted order is needed). The kernel sees the inputs' buffers in
//! place: no copy to the host, no extra sync.
use std::ffi::CString;
use std::os::raw::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::slice;

use mlx_sys as sys;

use crate::array::make;
use crate::error::{Error, Result};
use crate::Array;

/// `params` are the numbers given at build time; each input is one
/// row-contiguous float32 buffer; `out` is the output to fill. It runs on MLX's
/// stream thread and cannot report an error: it must handle any input (NaN
/// included) and write every output element.
pub type KernelF32 = fn(params: &[f32], inputs: &[&[f32]], out: &mut [f32]);

unsafe extern "C" fn trampoline(
    ctx: *const c_void,
    params: *const f32,
    n_params: usize,
    inputs: *const *const f32,
    sizes: *const usize,
    n_inputs: usize,
    out: *mut f32,
    out_size: usize,
) {
    let f: KernelF32 = std::mem::transmute::<*const c_void, KernelF32>(ctx);
    let params = if n_params == 0 { &[][..] } else { slice::from_raw_parts(params, n_params) };
    let ins: Vec<&[f32]> = (0..n_inputs)
        .map(|i| {
            let n = *sizes.add(i);
            if n == 0 {
                &[][..]
            } else {
                slice::from_raw_parts(*inputs.add(i), n)
            }
        })
        .collect();
    let out = if out_size == 0 { &mut [][..] } else { slice::from_raw_parts_mut(out, out_size) };
    // A panic must not unwind into C++; the output then reads as NaN.
    if catch_unwind(AssertUnwindSafe(|| f(params, &ins, &mut *out))).is_err() {
        out.fill(f32::NAN);
    }
}

/// True when MLX's default device is the CPU, where `cpu_kernel_f32` may run.
pub fn cpu_default() -> bool {
    crate::info::device().map(|d| d.starts_with("cpu")).unwrap_or(false)
}

/// A graph node computing `f(params, inputs) -> out` on the CPU stream. Inputs
/// are cast to float32 and made contiguous first (no-ops when they already are).
pub fn cpu_kernel_f32(name: &str, f: KernelF32, params: &[f32], inputs: &[&Array], out_shape: &[i32]) -> Result<Array> {
    let name = CString::new(name).map_err(|_| Error::new("kernel name contains NUL"))?;
    let raws: Vec<_> = inputs.iter().map(|a| a.raw).collect();
    make(|out| unsafe {
        sys::mlxn_cpu_kernel_f32(
            name.as_ptr(),
            trampoline,
            f as *const c_void,
            if params.is_empty() { ptr::null() } else { params.as_ptr() },
            params.len(),
            raws.as_ptr(),
            raws.len(),
            out_shape.as_ptr(),
            out_shape.len(),
            out,
        )
    })
}

/// MLX's CPU `exp` for float32, step for step (`backend/cpu/simd/math.h`: a
/// degree-6 polynomial in fused multiply-adds times 2^n), so a kernel can
/// compute exactly the probabilities MLX would without a device `exp` pass.
/// Checked bit for bit against the device op in `tests/cpu_exp.rs`. Inlined so
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
