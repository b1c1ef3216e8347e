//! S3Gen's fade-in (`trim_fade`): 20 ms of silence then a 20 ms raised-cosine
//! ramp over the first samples, hiding the vocoder's start-up spill.
use mlx::{Array, Dtype};

use crate::Result;

/// Samples of silence, then of ramp (S3GEN_SR / 50 each).
const FADE_PART: i32 = 24000 / 50;

/// The `2 * FADE_PART` gains, `[2 * FADE_PART]`, built as mlx-audio builds them
/// (`(cos(linspace(pi, 0, n)) + 1) / 2`, with MLX's linspace arithmetic).
fn fade_curve() -> mlx::Result<Array> {
    let n = FADE_PART;
    let t = Array::arange(0.0, n as f64, 1.0, Dtype::Float32)?.divide_scalar((n - 1) as f64)?;
    let t_bar = t.scalar_like(1.0)?.subtract(&t)?;
    let angle = t_bar.multiply_scalar(std::f64::consts::PI)?.add(&t.multiply_scalar(0.0)?)?;
    let ramp = angle.cos()?.add_scalar(1.0)?.divide_scalar(2.0)?;
    Array::concatenate(&[&Array::zeros(&[n], Dtype::Float32)?, &ramp], 0)
}

/// Applies the fade to `wav` `[B, N]`; shorter audio is returned as it is, as
/// mlx-audio does.
pub fn fade_in(wav: &Array) -> Result<Array> {
    let len = 2 * FADE_PART;
    if wav.ndim() != 2 {
        return Err(lm::LmError::InvalidArgument(format!("fade_in expects audio [B, N], got {:?}", wav.shape())));
    }
    let n = wav.dim(1);
    if n < len {
        return Ok(wav.clone());
    }
    let head = wav.slice_axis(1, 0, len)?.multiply(&fade_curve()?.astype(wav.dtype())?)?;
    let tail = wav.slice_axis(1, len, n)?;
    Ok(Array::concatenate(&[&head, &tail], 1)?)
}
