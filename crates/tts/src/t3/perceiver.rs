//! The perceiver resampler: 32 learned queries attend to the reference clip's
//! speech embeddings, then to themselves, through one shared attention block,
//! turning a clip of any length into 32 conditioning positions.
use lm::weights::Weights;
use mlx::fast::{scaled_dot_product_attention, AttentionMask};
use mlx::nn::{LayerNorm, Linear};
use mlx::Array;

use crate::layers;
use crate::Result;

const QUERY_TOKENS: i32 = 32;
const HEADS: i32 = 4;
/// PyTorch's and MLX's LayerNorm default.
const NORM_EPS: f32 = 1e-5;

/// Pre-norm multi-head attention with a residual, queries from `x1`, keys and values from `x2`.
struct AttentionBlock {
    norm: LayerNorm,
    to_q: Linear,
    to_k: Linear,
    to_v: Linear,
    proj_out: Linear,
    scale: f32,
}

impl AttentionBlock {
    fn load(w: &mut Weights, prefix: &str, dims: i32) -> Result<AttentionBlock> {
        Ok(AttentionBlock {
            norm: layers::layer_norm(w, &format!("{prefix}.norm"), dims, NORM_EPS)?,
            to_q: w.linear(&format!("{prefix}.to_q"), dims, dims, true)?,
            to_k: w.linear(&format!("{prefix}.to_k"), dims, dims, true)?,
            to_v: w.linear(&format!("{prefix}.to_v"), dims, dims, true)?,
            proj_out: w.linear(&format!("{prefix}.proj_out"), dims, dims, true)?,
            scale: ((dims / HEADS) as f32).powf(-0.5),
        })
    }

    fn forward(&self, x1: &Array, x2: &Array) -> mlx::Result<Array> {
        let heads = |t: Array| -> mlx::Result<Array> {
            let s = t.shape();
            t.reshape(&[s[0], s[1], HEADS, -1])?.transpose(&[0, 2, 1, 3])
        };
        let n1 = self.norm.forward(x1)?;
        let n2 = self.norm.forward(x2)?;
        let q = heads(self.to_q.forward(&n1)?)?;
        let k = heads(self.to_k.forward(&n2)?)?;
        let v = heads(self.to_v.forward(&n2)?)?;
        let o = scaled_dot_product_attention(&q, &k, &v, self.scale, AttentionMask::None)?;
        let s = o.shape();
        let o = o.transpose(&[0, 2, 1, 3])?.reshape(&[s[0], s[2], -1])?;
        x1.add(&self.proj_out.forward(&o)?)
    }
}

pub struct Perceiver {
    /// `[1, 32, dims]`.
    query: Array,
    attn: AttentionBlock,
}

impl Perceiver {
    pub fn load(w: &mut Weights, prefix: &str, dims: i32) -> Result<Perceiver> {
        Ok(Perceiver {
            query: w.take(&format!("{prefix}.pre_attention_query"), &[1, QUERY_TOKENS, dims])?,
            attn: AttentionBlock::load(w, &format!("{prefix}.attn"), dims)?,
        })
    }

    /// `h` `[B, T, dims]` to `[B, 32, dims]`.
    pub fn forward(&self, h: &Array) -> mlx::Result<Array> {
        let q = self.query.shape();
        let query = self.query.broadcast_to(&[h.dim(0), q[1], q[2]])?;
        let pre = self.attn.forward(&query, h)?;
        self.attn.forward(&pre, &pre)
    }
}
