//! Layers as MLX-LM's `mlx.nn` defines them, over loaded weights.
mod embedding;
mod linear;
mod norm;
mod rope;

pub use embedding::Embedding;
pub use linear::{Linear, QuantParams};
pub use norm::{LayerNorm, RmsNorm};
pub use rope::Rope;

use crate::{Array, Compiled, Result};

/// `silu(gate) * up`, MLX-LM's `swiglu`, compiled shapeless as MLX-LM
/// compiles it: one fused pass with no `sigmoid(gate)` or `silu(gate)` buffer,
/// which is a prompt-sized tensor per MLP during prefill (peak memory).
pub fn swiglu(gate: &Array, up: &Array) -> Result<Array> {
    thread_local! {
        // One trace per thread: a `Compiled` is not shared between threads.
        static SWIGLU: std::result::Result<Compiled, crate::Error> =
            Compiled::new(|xs: &[Array]| Ok(vec![swiglu_ops(&xs[0], &xs[1])?]), true);
    }
    SWIGLU.with(|f| match f {
        Ok(f) => Ok(f.call(&[gate, up])?.swap_remove(0)),
        Err(e) => Err(e.clone()),
    })
}

/// The ops `swiglu` traces (`nn.silu(gate) * x`).
fn swiglu_ops(gate: &Array, up: &Array) -> Result<Array> {
    gate.multiply(&gate.sigmoid()?)?.multiply(up)
}

pub fn silu(x: &Array) -> Result<Array> {
    x.multiply(&x.sigmoid()?)
}
