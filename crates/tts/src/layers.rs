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
    Ok(LayerNorm {
        weight: Some(w.take(&format!("{prefix}.weight"), &[dims])?),
        bias: Some(w.take(&format!("{prefix}.bias"), &[dims])?),
        eps,
    })
}

/// A dense or quantized linear layer (`lm`'s loader decides from the weights).
pub fn linear(w: &mut Weights, prefix: &str, in_dims: i32, out_dims: i32, bias: bool) -> Result<Linear> {
    w.linear(prefix, in_dims, out_dims, bias)
}
