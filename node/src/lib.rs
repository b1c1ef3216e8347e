//! N-API bindings: JS classes and functions over the `lm` and `mlx` crates.
mod errors;
mod info;
