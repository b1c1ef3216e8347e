// Finds MLX (the pinned official wheel fetched by scripts/mlx.js, or MLX_DIR),
// compiles the C++ shim and links libmlx, with OpenBLAS ahead of it on Linux CPU.
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.join("../..");
    for var in ["MLX_DIR", "MLX_NODE_BACKEND", "MLX_NODE_OPENBLAS"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=shim/shim.cpp");
    println!("cargo:rerun-if-changed=shim/shim.h");
    println!("cargo:rerun-if-changed=../../scripts/mlx.js");

    // scripts/mlx.js is the one place that knows where MLX comes from; it
    // prints the MLX prefix and, on Linux CPU, the OpenBLAS library.
    let out = Command::new("node")
        .arg(root.join("scripts/mlx.js"))
        .output()
        .unwrap_or_else(|e| panic!("mlx-sys needs Node.js to locate MLX (scripts/mlx.js): {e}"));
    if !out.status.success() {
        panic!("scripts/mlx.js failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let mut lines = stdout.lines().map(str::trim).filter(|l| !l.is_empty());
    let prefix = PathBuf::from(lines.next().expect("scripts/mlx.js printed no MLX prefix"));
    let openblas = lines.next().map(PathBuf::from);

    let include = prefix.join("include");
    let lib = prefix.join("lib");
    // A build that linked an MLX which has since moved or gone must run again.
    println!("cargo:rerun-if-changed={}", include.join("mlx/mlx.h").display());

    let mut build = cc::Build::new();
    build.cpp(true).std("c++20").file("shim/shim.cpp").include(&include).opt_level(2).warnings(false).flag_if_supported("-fvisibility=hidden");
    if openblas.is_some() {
        build.define("MLXN_OPENBLAS", None);
    }
    build.compile("mlxn_shim");

    // Order matters: OpenBLAS must come before libmlx in the needed libraries so
    // the loader binds libmlx's cblas_* to it rather than the wheel's reference BLAS.
    if let Some(ob) = &openblas {
        let dir = ob.parent().unwrap_or(Path::new("/"));
        let file = ob.file_name().and_then(|f| f.to_str()).expect("OpenBLAS path has no file name");
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!("cargo:rustc-link-lib=dylib:+verbatim={file}");
        println!("cargo:openblas_dir={}", dir.display());
    }
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=mlx");
    if cfg!(target_os = "macos") {
        println!("cargo:rustc-link-lib=dylib=c++");
    }
    // Dependents read these as DEP_MLX_* to set their own rpath.
    println!("cargo:lib_dir={}", lib.display());
    println!("cargo:include_dir={}", include.display());
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
}
