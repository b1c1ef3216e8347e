//! Activations as `mlx.nn` computes them, op for op, so results match the
//! reference. `mlx.nn` wraps gelu, mish and silu in `mx.compile`; on the CPU
//! that JIT-builds kernels with a system C++ compiler at run time, which an
//! end user's machine may lack. So mish and silu stay plain op chains
//! (measured: identical results), and gelu, whose `erf` cost more than the
//! matmuls around it, is a Rust kernel with the same bits on the CPU backend.
use mlx::{Array, Result};

/// `x * (1 + erf(x / sqrt 2)) / 2`: `nn.gelu`, the exact (erf) form (one CPU
/// kernel with the op chain's bits on the CPU backend).
pub fn gelu(x: &Array) -> Result<Array> {
    mlx::cpu_math::gelu(x)
}

/// `x * tanh(softplus(x))`: `nn.mish`, softplus being `logaddexp(x, 0)` written
/// out as MLX evaluates it: `max(x, 0) + log1p(exp(min(x, 0) - max(x, 0)))`.
pub fn mish(x: &Array) -> Result<Array> {
    let zero = x.scalar_like(0.0)?;
    let hi = x.maximum(&zero)?;
    let lo = x.minimum(&zero)?;
    let softplus = hi.add(&lo.subtract(&hi)?.exp()?.log1p()?)?;
    x.multiply(&softplus.tanh()?)
}

/// `x * sigmoid(x)`: `nn.silu`.
pub fn silu(x: &Array) -> Result<Array> {
    mlx::nn::silu(x)
}

/// `max(0.01 x, x)`: `nn.leaky_relu` with its default slope.
pub fn leaky_relu(x: &Array) -> Result<Array> {
    x.multiply_scalar(0.01)?.maximum(x)
}
