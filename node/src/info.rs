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
}

#[napi]
pub fn mlx_info() -> napi::Result<MlxInfo, String> {
    let device = mlx::info::device().map_err(mlx_error)?;
    let backend = if device.starts_with("gpu") {
        if cfg!(target_os = "macos") { "metal" } else { "cuda" }
    } else {
        "cpu"
    };
    Ok(MlxInfo {
        mlx_version: mlx::info::version(),
        backend: backend.into(),
        device,
        blas: mlx::info::blas_name().map_err(mlx_error)?,
        blas_path: mlx::info::blas_library_path().map_err(mlx_error)?,
    })
}
