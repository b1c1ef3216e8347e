//! HiFi-GAN residual blocks with Snake activations, channels-last `[B, T, C]`.
use lm::weights::Weights;
use mlx::Array;

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
        let alpha = w.take(name, &[channels])?;
        let abs = alpha.abs()?;
        let clamped = alpha.sign()?.multiply(&abs.maximum_scalar(1e-4)?)?;
        let clamped = Array::where_(&abs.less_scalar(1e-9)?, &alpha.scalar_like(1e-4)?, &clamped)?;
        // The divisor is a constant of the weights: invert it once here.
        let inv_alpha = clamped.scalar_like(1.0)?.divide(&clamped)?;
        Ok(Snake { alpha, inv_alpha })
    }

    pub fn forward(&self, x: &Array) -> mlx::Result<Array> {
        // mlx-audio squares with `power(., 2)`; `square` is within an ulp of it
        // and, on the CPU backend, some 20x cheaper.
        let s = x.multiply(&self.alpha)?.sin()?.square()?;
        x.add(&self.inv_alpha.multiply(&s)?)
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
            let conv = |w: &mut Weights, name: &str, dilation: i32| {
                DilatedConv1d::load(w, &format!("{prefix}.{name}.{i}"), channels, kernel, dilation)
            };
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
