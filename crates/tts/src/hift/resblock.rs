//! HiFi-GAN residual blocks with Snake activations, channels-last `[B, T, C]`.
use lm::weights::Weights;
use mlx::cpu::kernel::KernelF32;
use mlx::cpu::math::{cpu_sin, cpu_sin_reduced, par_chunks, sin_needs_libm, PARALLEL_MIN};
use mlx::{Array, Dtype};

use super::conv::DilatedConv1d;
use crate::Result;

/// Snake: `x + sin(alpha x)^2 / alpha`, with the divisor clamped away from zero
/// the way mlx-audio does (|alpha| at least 1e-4, sign kept; 1e-4 when |alpha| < 1e-9).
pub struct Snake {
    alpha: Array,
    inv_alpha: Array,
}

impl Snake {
    pub fn load(w: &mut Weights, name: &str, channels: i32) -> Result<Snake> {
        Ok(Snake::new(w.take(name, &[channels])?)?)
    }

    fn new(alpha: Array) -> mlx::Result<Snake> {
        let abs = alpha.abs()?;
        let clamped = alpha.sign()?.multiply(&abs.maximum_scalar(1e-4)?)?;
        let clamped = Array::where_(&abs.less_scalar(1e-9)?, &alpha.scalar_like(1e-4)?, &clamped)?;
        // The divisor is a constant of the weights: invert it once here.
        let inv_alpha = clamped.scalar_like(1.0)?.divide(&clamped)?;
        Ok(Snake { alpha, inv_alpha })
    }

    /// `x` is `[B, T, C]`, channels last. On the CPU backend, for float32,
    /// one kernel in place with the same bits as the five ops (MLX's `sin` is a
    /// scalar polynomial with libm calls there, and each op a pass of its own).
    pub fn forward(&self, x: &Array) -> mlx::Result<Array> {
        let c = self.alpha.dim(0);
        if x.dtype() == Dtype::Float32
            && self.alpha.dtype() == Dtype::Float32
            && x.ndim() > 0
            && x.dim(-1) == c
            && c > 0
            && c < 1 << 24
            && mlx::cpu::kernel::Kernel::Speech.enabled()
        {
            return mlx::cpu::kernel::cpu_kernel_f32_in_place("Snake", SNAKE, &[c as f32], x, &[&self.alpha, &self.inv_alpha]);
        }
        self.forward_ops(x)
    }

    /// The same with MLX's ops. mlx-audio squares with `power(., 2)`; `square`
    /// is within an ulp of it and, on the CPU backend, some 20x cheaper.
    fn forward_ops(&self, x: &Array) -> mlx::Result<Array> {
        let s = x.multiply(&self.alpha)?.sin()?.square()?;
        x.add(&self.inv_alpha.multiply(&s)?)
    }
}

/// params: channels; inputs: alpha, 1 / alpha; `out` holds `x`, rows of channels.
const SNAKE: KernelF32 = |params, inputs, out| {
    let c = params[0] as usize;
    let (alpha, inv) = (inputs[0], inputs[1]);
    if c == 0 || out.len() % c != 0 || alpha.len() != c || inv.len() != c {
        out.fill(f32::NAN);
        return;
    }
    par_chunks(out, c, PARALLEL_MIN, |rows, _| snake_rows(rows, alpha, inv));
};

mlx::avx2_fma_dispatch!(fn snake_rows(rows: &mut [f32], alpha: &[f32], inv: &[f32]) => snake_body);

/// `x + inv * square(sin(x * alpha))`, MLX's float32 ops in MLX's order.
#[inline(always)]
fn snake_body(rows: &mut [f32], alpha: &[f32], inv: &[f32]) {
    for row in rows.chunks_exact_mut(alpha.len()) {
        // The arithmetic form of `sin` vectorizes; rows with an argument past
        // its range (never in a working model) take the one with libm.
        if row.iter().zip(alpha).fold(false, |any, (&v, &a)| any | sin_needs_libm(v * a)) {
            snake_row(row, alpha, inv, cpu_sin);
        } else {
            snake_row(row, alpha, inv, cpu_sin_reduced);
        }
    }
}

#[inline(always)]
fn snake_row(row: &mut [f32], alpha: &[f32], inv: &[f32], sin: impl Fn(f32) -> f32) {
    for ((v, &a), &ia) in row.iter_mut().zip(alpha).zip(inv) {
        let s = sin(*v * a);
        *v += ia * (s * s);
    }
}

struct Unit {
    act1: Snake,
    conv1: DilatedConv1d,
    act2: Snake,
    conv2: DilatedConv1d,
}

/// One block: for each dilation, `x += conv2(snake2(conv1_dilated(snake1(x))))`.
pub struct ResBlock {
    units: Vec<Unit>,
}

impl ResBlock {
    pub fn load(w: &mut Weights, prefix: &str, channels: i32, kernel: i32, dilations: &[i32]) -> Result<ResBlock> {
        let mut units = Vec::with_capacity(dilations.len());
        for (i, &d) in dilations.iter().enumerate() {
            let conv =
                |w: &mut Weights, name: &str, dilation: i32| DilatedConv1d::load(w, &format!("{prefix}.{name}.{i}"), channels, kernel, dilation);
            units.push(Unit {
                act1: Snake::load(w, &format!("{prefix}.activations1.{i}.alpha"), channels)?,
                conv1: conv(w, "convs1", d)?,
                act2: Snake::load(w, &format!("{prefix}.activations2.{i}.alpha"), channels)?,
                conv2: conv(w, "convs2", 1)?,
            });
        }
        Ok(ResBlock { units })
    }

    pub fn forward(&self, x: &Array) -> mlx::Result<Array> {
        let mut x = x.clone();
        for u in &self.units {
            let t = u.conv1.forward(&u.act1.forward(&x)?)?;
            let t = u.conv2.forward(&u.act2.forward(&t)?)?;
            x = t.add(&x)?;
        }
        Ok(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx::random::normal;

    fn bits(a: &Array) -> Vec<u32> {
        a.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn snake_kernel_equals_the_ops() {
        let c = 64;
        let mut alpha: Vec<f32> = normal(&[c], Dtype::Float32, 0.0, 2.0, None).unwrap().to_vec().unwrap();
        // The clamp's cases: tiny, below 1e-4, negative.
        alpha[0] = 0.0;
        alpha[1] = 5e-5;
        alpha[2] = -3e-5;
        alpha[3] = -1.5;
        let alpha = Array::from_slice(&alpha, &[c]).unwrap();
        let snake = Snake::new(alpha).unwrap();
        // Enough elements to split over the cores; one row; a strided input.
        let x = normal(&[2, 700, c], Dtype::Float32, 0.0, 3.0, None).unwrap();
        let one = normal(&[1, 1, c], Dtype::Float32, 0.0, 3.0, None).unwrap();
        let strided = normal(&[1, c, 300], Dtype::Float32, 0.0, 3.0, None).unwrap().swapaxes(1, 2).unwrap();
        // Arguments past 2^23, where MLX's `sin` is libm's.
        let huge = one.multiply_scalar(1e7).unwrap();
        for x in [&x, &one, &strided, &huge] {
            assert_eq!(bits(&snake.forward(x).unwrap()), bits(&snake.forward_ops(x).unwrap()));
        }
    }
}
