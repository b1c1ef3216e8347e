//! Activations as `mlx.nn` computes them, op for op, so results match the
//! reference. `mlx.nn` wraps gelu, mish and silu in `mx.compile`; on the CPU
//! that JIT-builds kernels with a system C++ compiler at run time, which an
//! end user's machine may lack. So silu stays a plain op chain (measured:
//! identical results), and gelu and mish, whose `erf` and libm calls cost
//! more than the matmuls around them, are Rust kernels with the same bits on
//! the CPU backend.
use mlx::cpu::kernel::KernelF32;
use mlx::cpu::math::{cpu_exp, par_chunks};
use mlx::{Array, Dtype, Result};

/// `x * (1 + erf(x / sqrt 2)) / 2`: `nn.gelu`, the exact (erf) form (one CPU
/// kernel with the op chain's bits on the CPU backend).
pub fn gelu(x: &Array) -> Result<Array> {
    mlx::cpu::math::gelu(x)
}

/// `x * tanh(softplus(x))`: `nn.mish`, softplus being `logaddexp(x, 0)` written
/// out as MLX evaluates it: `max(x, 0) + log1p(exp(min(x, 0) - max(x, 0)))`.
/// On the CPU backend, for float32, one kernel in place with the op chain's
/// bits (MLX's `exp` formula; libm's `log1pf` and `tanhf`, which MLX's ops
/// call), over the cores, instead of eight ops and their buffers.
pub fn mish(x: &Array) -> Result<Array> {
    if x.dtype() == Dtype::Float32 && mlx::cpu::kernel::Kernel::Speech.enabled() {
        return mlx::cpu::kernel::cpu_kernel_f32_in_place("Mish", MISH, &[], x, &[]);
    }
    mish_ops(x)
}

fn mish_ops(x: &Array) -> Result<Array> {
    let zero = x.scalar_like(0.0)?;
    let hi = x.maximum(&zero)?;
    let lo = x.minimum(&zero)?;
    let softplus = hi.add(&lo.subtract(&hi)?.exp()?.log1p()?)?;
    x.multiply(&softplus.tanh()?)
}

/// In place (`out` holds the input).
/// libm's `log1pf` and `tanhf` take tens of nanoseconds per element: worth a
/// second thread from a few thousand elements.
const MISH: KernelF32 = |_, _, out| par_chunks(out, 1, 4096, mish_all);

mlx::avx2_fma_dispatch!(fn mish_all(data: &mut [f32], unit: usize) => mish_body);

/// MLX's `maximum` and `minimum` against 0 (a NaN first operand is returned),
/// then the chain's float32 operations in its order.
#[inline(always)]
fn mish_body(data: &mut [f32], _unit: usize) {
    for v in data.iter_mut() {
        let x = *v;
        let hi = if x.is_nan() || x > 0.0 { x } else { 0.0 };
        let lo = if x.is_nan() || x < 0.0 { x } else { 0.0 };
        let softplus = hi + cpu_exp(lo - hi).ln_1p();
        *v = x * softplus.tanh();
    }
}

/// `x * sigmoid(x)`: `nn.silu`.
pub fn silu(x: &Array) -> Result<Array> {
    mlx::nn::silu(x)
}

/// `max(0.01 x, x)`: `nn.leaky_relu` with its default slope.
pub fn leaky_relu(x: &Array) -> Result<Array> {
    x.multiply_scalar(0.01)?.maximum(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(a: &Array) -> Vec<u32> {
        a.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn mish_kernel_equals_the_ops() {
        let mut v: Vec<f32> = mlx::random::normal(&[3, 40000], Dtype::Float32, 0.0, 6.0, None).unwrap().to_vec().unwrap();
        for (i, x) in [0.0, -0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 90.0, -90.0, 1e-30, -1e-30, 20.0, -20.0].into_iter().enumerate() {
            v[i * 7] = x;
        }
        let x = Array::from_slice(&v, &[3, 40000]).unwrap();
        // Split over the cores, one thread (small), and a strided view.
        for a in [x.clone(), x.slice_axis(1, 0, 50).unwrap(), x.transpose(&[1, 0]).unwrap()] {
            let (ours, want) = (bits(&mish(&a).unwrap()), bits(&mish_ops(&a).unwrap()));
            let diff = ours.iter().zip(&want).filter(|(p, q)| p != q && !(f32::from_bits(**p).is_nan() && f32::from_bits(**q).is_nan())).count();
            assert_eq!(diff, 0, "{diff} of {} values differ", want.len());
        }
    }
}
