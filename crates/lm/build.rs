// Test binaries find libmlx through an rpath to the directory mlx-sys linked against.
fn main() {
    if let Ok(d) = std::env::var("DEP_MLX_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{d}");
    }
}
