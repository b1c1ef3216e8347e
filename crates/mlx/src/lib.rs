//! Safe MLX arrays over the `mlx-sys` shim: RAII handles, ops that return
//! `Result` with MLX's own message, streams, compile, IO and nn layers.
#![warn(clippy::undocumented_unsafe_blocks)]
mod array;
pub mod cpu;
pub mod distributed;
mod dtype;
mod error;
pub mod fast;
pub mod info;
pub mod io;
pub mod memory;
pub mod nn;
mod ops;
pub mod quant;
pub mod random;
pub mod signal;
pub mod transforms;

pub use array::Array;
pub use dtype::{Dtype, Element};
pub use error::{Error, Result};
pub use transforms::{async_eval, eval, Compiled};
