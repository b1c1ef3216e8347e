//! Dilated and transposed 1-D convolutions recast as plain ones. MLX's CPU
//! backend runs a convolution as one GEMM only without kernel or input
//! dilation; dilated and transposed convolutions take a direct loop that is
//! 10-40x slower and dominated the vocoder's time. The products summed are
//! the same; only the summation order (GEMM's) differs, within float rounding.
use lm::weights::Weights;
use mlx::{signal, Array};

use crate::layers::{Conv1d, ConvTranspose1d};
use crate::Result;

/// A stride-1 "same" convolution with an odd kernel and any dilation `d`, run
/// on the `d` polyphase components of the input (sample `d*m + r` is row `m`
/// of component `r`), where the dilation becomes 1.
pub struct DilatedConv1d {
    conv: Conv1d,
    half: i32,
}

impl DilatedConv1d {
    /// `{prefix}.weight` `[ch, kernel, ch]` and `{prefix}.bias`, padding
    /// `dilation * (kernel - 1) / 2` (length kept).
    pub fn load(w: &mut Weights, prefix: &str, channels: i32, kernel: i32, dilation: i32) -> Result<DilatedConv1d> {
        let half = (kernel - 1) / 2;
        let conv = Conv1d::load(w, prefix, channels, channels, kernel, true, 1, half * dilation, dilation, 1)?;
        Ok(DilatedConv1d { conv, half })
    }

    /// `x` `[B, T, C]` to `[B, T, C]`.
    pub fn forward(&self, x: &Array) -> mlx::Result<Array> {
        let d = self.conv.dilation;
        if d == 1 {
            return self.conv.forward(x);
        }
        let (b, t, c) = (x.dim(0), x.dim(1), x.dim(2));
        let rows = (t + d - 1) / d;
        // Zeros past the end are the convolution's own right padding.
        let x = x.pad(&[1], &[0], &[rows * d - t], 0.0)?;
        let phases = x.reshape(&[b, rows, d, c])?.swapaxes(1, 2)?.reshape(&[b * d, rows, c])?;
        let y = signal::conv1d(&phases, &self.conv.weight, 1, self.half, 1, 1)?;
        let o = y.dim(2);
        let y = y.reshape(&[b, d, rows, o])?.swapaxes(1, 2)?.reshape(&[b, rows * d, o])?.slice_axis(1, 0, t)?;
        match &self.conv.bias {
            Some(bias) => y.add(bias),
            None => Ok(y),
        }
    }
}

/// A transposed convolution (stride `u`, kernel `k`, no bias) as one plain
/// convolution with `u * out` channels: output sample `u*s + r` is channel
/// block `r` of step `s`, a sum over the `ceil(k / u)` inputs that reach it.
pub struct SubpixelConv1d {
    /// `[u * out, taps, in]`: tap `i` of block `r` is kernel index `r + (taps - 1 - i) * u`.
    weight: Array,
    stride: i32,
    kernel: i32,
    taps: i32,
}

impl SubpixelConv1d {
    /// From a transposed-conv weight in MLX layout `[out, k, in]`.
    pub fn new(weight: &Array, stride: i32) -> mlx::Result<SubpixelConv1d> {
        let (out_ch, kernel, in_ch) = (weight.dim(0), weight.dim(1), weight.dim(2));
        let taps = (kernel + stride - 1) / stride;
        let flip: Vec<i32> = (0..taps).rev().collect();
        let weight = weight
            .pad(&[1], &[0], &[taps * stride - kernel], 0.0)?
            .reshape(&[out_ch, taps, stride, in_ch])?
            .take(&Array::from_slice(&flip, &[taps])?, Some(1))?
            .transpose(&[2, 0, 1, 3])?
            .reshape(&[stride * out_ch, taps, in_ch])?;
        Ok(SubpixelConv1d { weight, stride, kernel, taps })
    }

    /// `x` `[B, L, in]` to `[B, (L - 1) * u + k - 2 * padding, out]`.
    pub fn forward(&self, x: &Array, padding: i32) -> mlx::Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        let u = self.stride;
        let y = signal::conv1d(x, &self.weight, 1, self.taps - 1, 1, 1)?;
        let steps = y.dim(1);
        let out = y.dim(2) / u;
        let len = (l - 1) * u + self.kernel - 2 * padding;
        y.reshape(&[b, steps * u, out])?.slice_axis(1, padding, padding + len)
    }
}

/// mlx-audio's upsampling `ConvTranspose1d` layers, run as `SubpixelConv1d`.
pub struct UpsampleConv1d {
    conv: SubpixelConv1d,
    bias: Option<Array>,
    padding: i32,
}

impl UpsampleConv1d {
    /// `{prefix}.weight` `[out, kernel, in]` and `{prefix}.bias`.
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
    ) -> Result<UpsampleConv1d> {
        let ConvTranspose1d { weight, bias, .. } = ConvTranspose1d::load(w, prefix, in_ch, out_ch, kernel, bias, stride, padding)?;
        Ok(UpsampleConv1d { conv: SubpixelConv1d::new(&weight, stride)?, bias, padding })
    }

    pub fn forward(&self, x: &Array) -> mlx::Result<Array> {
        let y = self.conv.forward(x, self.padding)?;
        match &self.bias {
            Some(bias) => y.add(bias),
            None => Ok(y),
        }
    }
}
