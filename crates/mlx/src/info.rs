//! What MLX build and BLAS this process runs on.
use std::ffi::CStr;
use std::os::raw::c_char;

use mlx_sys as sys;

use crate::error::{check, Result};

fn read_string(f: unsafe extern "C" fn(*mut c_char, usize) -> i32) -> Result<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: callers pass only the shim's string getters, which write at most `len` bytes (NUL
    // included) into `buf`, and `buf` has `buf.len()` bytes, the length passed.
    check(unsafe { f(buf.as_mut_ptr().cast(), buf.len()) })?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

pub fn version() -> String {
    // SAFETY: `mlxn_version` returns MLX's version, a static NUL-terminated string literal.
    unsafe { CStr::from_ptr(sys::mlxn_version()) }.to_string_lossy().into_owned()
}

/// "cpu" or "gpu", followed by ":<device name>" when MLX knows it.
pub fn device() -> Result<String> {
    read_string(sys::mlxn_device_info)
}

/// Path of the library that serves `cblas_sgemm` for libmlx, or "none".
pub fn blas_library_path() -> Result<String> {
    read_string(sys::mlxn_blas_library)
}

/// A short name for that library: "openblas", "reference" (the wheel's netlib
/// BLAS), "accelerate", "none", or the file name.
pub fn blas_name() -> Result<String> {
    let path = blas_library_path()?;
    let file = path.rsplit('/').next().unwrap_or(&path).to_string();
    let lower = path.to_lowercase();
    Ok(if lower.contains("openblas") {
        "openblas".into()
    } else if lower.contains("accelerate") || lower.contains("veclib") {
        "accelerate".into()
    } else if file.starts_with("libblas") {
        "reference".into()
    } else {
        file
    })
}

/// OpenBLAS's core type ("Haswell", "SkylakeX", ...), or "" without OpenBLAS.
/// Call after `blas_library_path`, which makes sure OpenBLAS is loaded.
pub fn openblas_core() -> Result<String> {
    read_string(sys::mlxn_openblas_core)
}

/// Each custom CPU kernel by name, and whether it runs in this process:
/// switched on, on the CPU backend, with the CPU features it needs (and for
/// `gemv`, a blocking that gives OpenBLAS's bits).
pub fn cpu_kernels() -> Vec<(&'static str, bool)> {
    use crate::cpu::kernel::Kernel;
    Kernel::ALL
        .iter()
        .map(|&k| {
            let on = k.enabled()
                && match k {
                    Kernel::Gemv => crate::cpu::gemv::active(),
                    // (Attention's whole-sequence path has a portable fallback; its
                    // streamed-chunk path needs AVX2 and FMA.)
                    Kernel::Rows => crate::cpu::math::has_avx2_fma(),
                    _ => true,
                };
            (k.name(), on)
        })
        .collect()
}

/// The instruction set fast precision's integer kernel (`qmmInt8`) takes on
/// this CPU, under `MLX_NODE_CPU_FEATURES`: `amx` (tiles for 16 rows or more,
/// AVX-512 VNNI below), `avx512-vnni`, `avx-vnni`, `avx2` or `portable`.
/// Every one gives the same bits.
pub fn fast_kernel_path() -> &'static str {
    crate::cpu::qmm_int8::Isa::detect().name()
}

/// Whether fast precision's prompt chunks of 64 positions or more on 8-bit
/// weights, or 4-bit ones in groups of 32, run the exact kernel's panel with
/// fused multiply-adds here (where the integer kernel is AVX2's or the
/// portable one) rather than the integer kernel (AVX-512 VNNI, AMX): the one
/// place where fast precision's bits depend on the CPU
/// (`quant::fast_prompt_runs_exact`).
pub fn fast_prompts_fused() -> bool {
    !crate::cpu::qmm_int8::Isa::detect().prompts_beat_panel()
}
