//! Small layers the speech models share, loaded through `lm`'s weight loader.
//! Conv weights are in MLX layout `[out, kernel, in / groups]`; activations are
//! channels-last `[B, T, C]`, as MLX's convolutions take them.
use lm::weights::Weights;
use mlx::nn::{LayerNorm, Linear};
use mlx::{signal, Array};

use crate::Result;

pub struct Conv1d {
    pub weight: Array,
    pub bias: Option<Array>,
    pub stride: i32,
    pub padding: i32,
    pub dilation: i32,
    pub groups: i32,
}

impl Conv1d {
    /// Loads `{prefix}.weight` `[out, kernel, in / groups]` and, when `bias`, `{prefix}.bias`.
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        w: &mut Weights,
        prefix: &str,
        in_ch: i32,
        out_ch: i32,
        kernel: i32,
        bias: bool,
        stride: i32,
        padding: i32,
        dilation: i32,
        groups: i32,
    ) -> Result<Conv1d> {
        let weight = w.take(&format!("{prefix}.weight"), &[out_ch, kernel, in_ch / groups])?;
        let bias = w.take_optional(&format!("{prefix}.bias"), &[out_ch], bias)?;
        Ok(Conv1d { weight, bias, stride, padding, dilation, groups })
    }

    /// `x` is `[B, T, in]`; returns `[B, T', out]`.
    pub fn forward(&self, x: &Array) -> mlx::Result<Array> {
        let y = signal::conv1d(x, &self.weight, self.stride, self.padding, self.dilation, self.groups)?;
        match &self.bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }

    /// [`Self::forward_rows`] when `rows` (see [`project`]), else [`Self::forward`].
    pub fn apply(&self, x: &Array, rows: bool) -> mlx::Result<Array> {
        if rows {
            self.forward_rows(x)
        } else {
            self.forward(x)
        }
    }

    /// [`Self::forward`] as the kernel's taps side by side times the weight
    /// by `rows_cpu`'s kernel (stride 1, one group, float32 on the CPU; else
    /// `forward`): faster for a few dozen frames, not MLX's bits.
    pub fn forward_rows(&self, x: &Array) -> mlx::Result<Array> {
        let (out_ch, kernel, in_ch) = (self.weight.dim(0), self.weight.dim(1), self.weight.dim(2));
        if self.stride != 1 || self.groups != 1 || x.ndim() != 3 {
            return self.forward(x);
        }
        let padded = if self.padding > 0 { x.pad(&[1], &[self.padding], &[self.padding], 0.0)? } else { x.clone() };
        let frames = padded.dim(1) - self.dilation * (kernel - 1);
        if frames <= 0 {
            return self.forward(x);
        }
        let taps: Vec<Array> =
            (0..kernel).map(|i| padded.slice_axis(1, i * self.dilation, i * self.dilation + frames)).collect::<mlx::Result<_>>()?;
        let unfolded = if kernel == 1 { taps[0].clone() } else { Array::concatenate(&taps.iter().collect::<Vec<_>>(), 2)? };
        let weight = self.weight.reshape(&[out_ch, kernel * in_ch])?;
        match mlx::cpu::rows::matmul_t(&unfolded, &weight, self.bias.as_ref())? {
            Some(y) => Ok(y),
            None => self.forward(x),
        }
    }
}

pub struct ConvTranspose1d {
    pub weight: Array,
    pub bias: Option<Array>,
    pub stride: i32,
    pub padding: i32,
}

impl ConvTranspose1d {
    /// Loads `{prefix}.weight` `[out, kernel, in]` (MLX's transposed-conv layout).
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        w: &mut Weights,
        prefix: &str,
        in_ch: i32,
        out_ch: i32,
        kernel: i32,
        bias: bool,
        stride: i32,
        padding: i32,
    ) -> Result<ConvTranspose1d> {
        let weight = w.take(&format!("{prefix}.weight"), &[out_ch, kernel, in_ch])?;
        let bias = w.take_optional(&format!("{prefix}.bias"), &[out_ch], bias)?;
        Ok(ConvTranspose1d { weight, bias, stride, padding })
    }

    pub fn forward(&self, x: &Array) -> mlx::Result<Array> {
        let y = signal::conv_transpose1d(x, &self.weight, self.stride, self.padding, 1, 0, 1)?;
        match &self.bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }
}

/// `{prefix}.weight` and `{prefix}.bias`, both `[dims]`.
pub fn layer_norm(w: &mut Weights, prefix: &str, dims: i32, eps: f32) -> Result<LayerNorm> {
    Ok(LayerNorm { weight: Some(w.take(&format!("{prefix}.weight"), &[dims])?), bias: Some(w.take(&format!("{prefix}.bias"), &[dims])?), eps })
}

/// A dense or quantized linear layer (`lm`'s loader decides from the weights).
/// `lin(x)`: by the few-row kernel ([`Linear::forward_rows`]) when `rows`,
/// for a streamed chunk's few frames after the recorded voice prompt (compared
/// with whole renders within a tolerance); else MLX's matmul (mlx-audio's bits).
pub fn project(lin: &Linear, x: &Array, rows: bool) -> mlx::Result<Array> {
    if rows {
        lin.forward_rows(x)
    } else {
        lin.forward(x)
    }
}

pub fn linear(w: &mut Weights, prefix: &str, in_dims: i32, out_dims: i32, bias: bool) -> Result<Linear> {
    w.linear(prefix, in_dims, out_dims, bias)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx::{random, Dtype};

    fn normal(shape: &[i32], seed: u64) -> Array {
        random::normal(shape, Dtype::Float32, 0.0, 1.0, Some(&random::key(seed).unwrap())).unwrap()
    }

    /// The taps-side-by-side form against MLX's convolution: kernels 1 and 3,
    /// with and without padding and dilation, with and without a bias, and too
    /// few frames for the kernel (then it is `forward`'s error or result).
    #[test]
    fn conv_forward_rows_is_forward_within_rounding() {
        let cases = [(1, 0, 1, true), (3, 0, 1, true), (3, 1, 1, false), (3, 3, 3, true), (5, 2, 2, false)];
        for (i, &(kernel, padding, dilation, bias)) in cases.iter().enumerate() {
            let s = 10 * i as u64;
            let conv = Conv1d {
                weight: normal(&[24, kernel, 16], s + 1),
                bias: bias.then(|| normal(&[24], s + 2)),
                stride: 1,
                padding,
                dilation,
                groups: 1,
            };
            let x = normal(&[2, 11, 16], s + 3);
            let (want, got) = (conv.forward(&x).unwrap(), conv.forward_rows(&x).unwrap());
            assert_eq!(want.shape(), got.shape(), "case {i}");
            let worst = want.subtract(&got).unwrap().abs().unwrap().max(&[0, 1, 2], false).unwrap().item::<f32>().unwrap();
            assert!(worst < 1e-4, "case {i}: off by {worst}");
        }
        let conv = Conv1d { weight: normal(&[4, 5, 8], 1), bias: None, stride: 1, padding: 0, dilation: 1, groups: 1 };
        let short = normal(&[1, 3, 8], 2);
        assert_eq!(conv.forward_rows(&short).is_err(), conv.forward(&short).is_err());
    }
}
