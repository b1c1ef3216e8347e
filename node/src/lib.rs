//! N-API bindings: JS classes and functions over the `lm` and `mlx` crates.
// Under `cargo test` napi-derive registers nothing, so the bound items look unused.
#![cfg_attr(test, allow(dead_code))]
mod engine;
mod errors;
mod follow;
mod hub;
mod info;
mod jobs;
mod model;
mod options;
mod prompt_cache;
mod tts;
mod tts_options;
mod worker;
