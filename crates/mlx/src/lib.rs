//! Safe MLX arrays over the `mlx-sys` shim: RAII handles, ops that return
//! `Result` with MLX's own message, streams, compile, IO and nn layers.
#![warn(clippy::undocumented_unsafe_blocks)]
mod array;
pub mod attention_cpu;
pub mod cpu_math;
mod dtype;
mod error;
pub mod fast;
pub mod gemv_cpu;
pub mod info;
pub mod io;
pub mod kernel;
pub mod memory;
pub mod nn;
mod ops;
mod qmm_cpu;
pub mod quant;
pub mod random;
pub mod row_ops;
pub mod rows_cpu;
pub mod signal;
pub mod transforms;

pub use array::Array;
pub use dtype::{Dtype, Element};
pub use error::{Error, Result};
pub use transforms::{async_eval, eval, Compiled};
