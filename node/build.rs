fn main() {
    napi_build::setup();
    // Find libmlx without LD_LIBRARY_PATH: rpath to the directory mlx-sys linked against.
    if let Ok(dir) = std::env::var("DEP_MLX_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    if let Ok(dir) = std::env::var("DEP_MLX_OPENBLAS_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
