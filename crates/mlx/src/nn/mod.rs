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
    // The same bits as a vectorized CPU kernel where it applies.
    if let Some(out) = crate::cpu::math::swiglu(gate, up)? {
        return Ok(out);
    }
    swiglu_mlx(gate, up)
}

/// MLX's compiled `swiglu` on any device (what the CPU kernel is checked against).
pub fn swiglu_mlx(gate: &Array, up: &Array) -> Result<Array> {
    thread_local! {
        // One trace per thread: a `Compiled` is not shared between threads.
        static SWIGLU: std::result::Result<Compiled, crate::Error> =
            Compiled::new(|xs: &[Array]| Ok(vec![swiglu_ops(&xs[0], &xs[1])?]), true);
    }
    call_first(&SWIGLU, &[gate, up])
}

/// The first output of this thread's `compiled` function on `inputs`.
pub fn call_first(compiled: &'static std::thread::LocalKey<std::result::Result<Compiled, crate::Error>>, inputs: &[&Array]) -> Result<Array> {
    compiled.with(|f| match f {
        Ok(f) => Ok(f.call(inputs)?.swap_remove(0)),
        Err(e) => Err(e.clone()),
    })
}

/// `nn.silu` as MLX defines it: `x * sigmoid(x)`, compiled shapeless (so its
/// bits are those of MLX's fused kernel).
pub fn silu_compiled(x: &Array) -> Result<Array> {
    thread_local! {
        static SILU: std::result::Result<Compiled, crate::Error> = Compiled::new(|xs: &[Array]| Ok(vec![silu(&xs[0])?]), true);
    }
    call_first(&SILU, &[x])
}

/// MLX-LM's `precise_swiglu(h, gate, x)`: `silu(gate) * x` in float32, cast
/// to `h`'s dtype; compiled shapeless as MLX-LM compiles it.
pub fn precise_swiglu(h: &Array, gate: &Array, x: &Array) -> Result<Array> {
    thread_local! {
        static PRECISE: std::result::Result<Compiled, crate::Error> = Compiled::new(
            |xs: &[Array]| {
                let gate = silu(&xs[1].astype(crate::Dtype::Float32)?)?;
                Ok(vec![gate.multiply(&xs[2].astype(crate::Dtype::Float32)?)?.astype(xs[0].dtype())?])
            },
            true,
        );
    }
    call_first(&PRECISE, &[h, gate, x])
}

/// The ops `swiglu` traces (`nn.silu(gate) * x`).
fn swiglu_ops(gate: &Array, up: &Array) -> Result<Array> {
    gate.multiply(&gate.sigmoid()?)?.multiply(up)
}

/// `nn.gelu_approx`: `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))`,
/// op for op as MLX writes it (the tanh approximation Gemma's MLP uses).
pub fn gelu_approx(x: &Array) -> Result<Array> {
    let cubed = x.power_scalar(3.0)?;
    let inner = x.add(&cubed.multiply_scalar(0.044715)?)?.multiply_scalar((2.0 / std::f64::consts::PI).sqrt())?;
    x.multiply_scalar(0.5)?.multiply(&inner.tanh()?.add_scalar(1.0)?)
}

pub fn silu(x: &Array) -> Result<Array> {
    x.multiply(&x.sigmoid()?)
}
