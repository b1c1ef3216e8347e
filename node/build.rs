fn main() {
    napi_build::setup();
    // Find libmlx without LD_LIBRARY_PATH. First the copy next to the addon, where the
    // prebuilt platform package puts it (scripts/release.js: <pkg>/mlx/lib); rustc hands
    // link args to the linker without a shell, so $ORIGIN arrives literally. Then the
    // directory mlx-sys linked against, which is what a local build uses.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,@loader_path/mlx/lib");
    } else {
        println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN/mlx/lib");
    }
    if let Ok(dir) = std::env::var("DEP_MLX_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    if let Ok(dir) = std::env::var("DEP_MLX_OPENBLAS_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
