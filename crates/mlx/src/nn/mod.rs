//! Layers as MLX-LM's `mlx.nn` defines them, over loaded weights.
mod embedding;
mod linear;
mod norm;
mod rope;

pub use embedding::Embedding;
pub use linear::{Linear, QuantParams};
pub use norm::{LayerNorm, RmsNorm};
pub use rope::Rope;

use crate::{Array, Result};

/// `silu(gate) * up`, MLX-LM's `swiglu`.
pub fn swiglu(gate: &Array, up: &Array) -> Result<Array> {
    gate.multiply(&gate.sigmoid()?)?.multiply(up)
}

pub fn silu(x: &Array) -> Result<Array> {
    x.multiply(&x.sigmoid()?)
}
