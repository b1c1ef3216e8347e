//! N-API bindings: JS classes and functions over the `lm` and `mlx` crates.
mod engine;
mod errors;
mod info;
mod model;
mod options;
mod stop;
