//! ESPnet relative-position self-attention (Transformer-XL style, Appendix B of
//! arXiv:1901.02860) as the S3Gen conformer uses it, and its sinusoidal table.
use lm::weights::Weights;
use mlx::nn::Linear;
use mlx::{Array, Dtype};

use crate::layers::linear;
use crate::Result;

/// Sinusoids for relative offsets `T-1, ..., 1, 0, -1, ..., -(T-1)`, interleaved
/// sin/cos per frequency: `(1, 2T-1, dims)`. mlx-audio slices the same rows out
/// of a float32 table precomputed for 5000 positions; each row is computed alike.
pub fn relative_positions(len: i32, dims: i32) -> mlx::Result<Array> {
    let offsets: Vec<f32> = (0..2 * len - 1).map(|i| (len - 1 - i) as f32).collect();
    let offsets = Array::from_slice(&offsets, &[2 * len - 1, 1])?;
    let inv_freq = Array::arange(0.0, dims as f64, 2.0, Dtype::Float32)?
        .multiply_scalar(-(10000f64.ln() / dims as f64))?
        .exp()?;
    let angles = offsets.multiply(&inv_freq.reshape(&[1, dims / 2])?)?;
    Array::stack(&[&angles.sin()?, &angles.cos()?], -1)?.reshape(&[1, 2 * len - 1, dims])
}

pub struct RelPositionAttention {
    q: Linear,
    k: Linear,
    v: Linear,
    out: Linear,
    pos: Linear,
    /// Learned per-head biases added to the query for the content (`u`) and
    /// position (`v`) terms.
    bias_u: Array,
    bias_v: Array,
    heads: i32,
    head_dim: i32,
}

impl RelPositionAttention {
    pub fn load(w: &mut Weights, prefix: &str, dims: i32, heads: i32) -> Result<Self> {
        let head_dim = dims / heads;
        Ok(RelPositionAttention {
            q: linear(w, &format!("{prefix}.linear_q"), dims, dims, true)?,
            k: linear(w, &format!("{prefix}.linear_k"), dims, dims, true)?,
            v: linear(w, &format!("{prefix}.linear_v"), dims, dims, true)?,
            out: linear(w, &format!("{prefix}.linear_out"), dims, dims, true)?,
            pos: linear(w, &format!("{prefix}.linear_pos"), dims, dims, false)?,
            bias_u: w.take(&format!("{prefix}.pos_bias_u"), &[heads, head_dim])?,
            bias_v: w.take(&format!("{prefix}.pos_bias_v"), &[heads, head_dim])?,
            heads,
            head_dim,
        })
    }

    /// `x` `(B, T, D)`, `pos` from [`relative_positions`]; full context (the
    /// inference path has no padding and no chunk mask).
    pub fn forward(&self, x: &Array, pos: &Array) -> mlx::Result<Array> {
        let (b, t) = (x.dim(0), x.dim(1));
        let (h, d) = (self.heads, self.head_dim);
        let heads_first = |a: &Array| a.reshape(&[b, t, h, d])?.transpose(&[0, 2, 1, 3]);
        let q = self.q.forward(x)?.reshape(&[b, t, h, d])?;
        let k = heads_first(&self.k.forward(x)?)?;
        let v = heads_first(&self.v.forward(x)?)?;
        let p = self.pos.forward(pos)?.reshape(&[pos.dim(0), -1, h, d])?.transpose(&[0, 2, 1, 3])?;

        let q_u = q.add(&self.bias_u)?.transpose(&[0, 2, 1, 3])?;
        let q_v = q.add(&self.bias_v)?.transpose(&[0, 2, 1, 3])?;
        let content = q_u.matmul(&k.swapaxes(-2, -1)?)?;
        let mut position = q_v.matmul(&p.swapaxes(-2, -1)?)?;
        if t > 1 {
            position = rel_shift(&position)?;
        }
        let scores = content.add(&position)?.divide_scalar((d as f64).sqrt())?;
        let attn = mlx::cpu_math::softmax_last(&scores)?;
        let y = attn.matmul(&v)?.transpose(&[0, 2, 1, 3])?.reshape(&[b, t, h * d])?;
        self.out.forward(&y)
    }
}

/// Turns scores against the `2T-1` relative offsets into scores against the `T`
/// keys (`out[i][j] = x[i][j + T-1 - i]`) by the pad-and-reshape trick ESPnet uses.
fn rel_shift(x: &Array) -> mlx::Result<Array> {
    let s = x.shape();
    let (b, h, t, n) = (s[0], s[1], s[2], s[3]);
    let padded = x.pad(&[3], &[1], &[0], 0.0)?.reshape(&[b, h, n + 1, t])?;
    padded.slice_axis(2, 1, n + 1)?.reshape(&[b, h, t, n])?.slice_axis(3, 0, n / 2 + 1)
}
