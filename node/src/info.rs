use std::collections::HashMap;

use napi_derive::napi;

use crate::errors::mlx_error;

#[napi(object)]
pub struct MlxInfo {
    pub mlx_version: String,
    /// "cpu", "metal" or "cuda".
    pub backend: String,
    pub device: String,
    /// Which library serves cblas_sgemm, looked up at run time.
    pub blas: String,
    /// The file that library was loaded from.
    pub blas_path: String,
    /// OpenBLAS's core type (its choice of kernels for this CPU, or
    /// OPENBLAS_CORETYPE's), "" without OpenBLAS.
    pub openblas_core: String,
    /// Each custom CPU kernel and whether it runs in this process.
    pub kernels: HashMap<String, bool>,
    /// Whether exact-precision decode steps run attention as one kernel with
    /// MLX's bits: the `attention` and `gemv` kernels on, and OpenBLAS's
    /// summation of that call found by calibration on this CPU.
    pub exact_decode_attention: bool,
    pub fast_kernel_path: String,
    pub fast_prompts_fused: bool,
}

#[napi]
pub fn mlx_info() -> napi::Result<MlxInfo, String> {
    let device = mlx::info::device().map_err(mlx_error)?;
    let backend = if device.starts_with("gpu") {
        if cfg!(target_os = "macos") {
            "metal"
        } else {
            "cuda"
        }
    } else {
        "cpu"
    };
    Ok(MlxInfo {
        mlx_version: mlx::info::version(),
        backend: backend.into(),
        device,
        blas: mlx::info::blas_name().map_err(mlx_error)?,
        blas_path: mlx::info::blas_library_path().map_err(mlx_error)?,
        openblas_core: mlx::info::openblas_core().map_err(mlx_error)?,
        kernels: mlx::info::cpu_kernels().into_iter().map(|(k, on)| (k.to_string(), on)).collect(),
        exact_decode_attention: mlx::cpu::exact_attention::active(),
        fast_kernel_path: mlx::info::fast_kernel_path().into(),
        fast_prompts_fused: mlx::info::fast_prompts_fused(),
    })
}
