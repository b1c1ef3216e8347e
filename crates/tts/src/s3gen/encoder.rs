//! S3Gen's token encoder (CosyVoice's `UpsampleConformerEncoder`): linear
//! embedding, a pre-lookahead convolution, conformer blocks, 2x nearest
//! upsampling with a causal convolution, then more conformer blocks.
//! Conformer blocks here are pre-norm attention + feed-forward (no macaron, no
//! convolution module), attending over the whole sequence.
use lm::weights::Weights;
use mlx::nn::{LayerNorm, Linear};
use mlx::Array;

use super::activations::{leaky_relu, silu};
use super::rel_attention::{relative_positions, RelPositionAttention};
use crate::layers::{layer_norm, linear, Conv1d};
use crate::Result;

/// Width of the encoder.
pub const ENCODER_DIMS: i32 = 512;
const HEADS: i32 = 8;
const LINEAR_UNITS: i32 = 2048;
/// Future tokens the pre-lookahead convolution reads.
pub const PRE_LOOKAHEAD: i32 = 3;
/// Mel frames per speech token.
pub const UPSAMPLE: i32 = 2;

/// `LinearNoSubsampling` + ESPnet relative positional encoding: projects,
/// normalises and scales by `sqrt(dims)`; positions go to attention separately.
struct InputEmbedding {
    linear: Linear,
    norm: LayerNorm,
}

impl InputEmbedding {
    fn load(w: &mut Weights, prefix: &str) -> Result<Self> {
        Ok(InputEmbedding {
            linear: linear(w, &format!("{prefix}.linear"), ENCODER_DIMS, ENCODER_DIMS, true)?,
            norm: layer_norm(w, &format!("{prefix}.norm"), ENCODER_DIMS, 1e-5)?,
        })
    }

    /// Returns the embedded sequence and its relative position table.
    fn forward(&self, x: &Array) -> mlx::Result<(Array, Array)> {
        let y = self.norm.forward(&self.linear.forward(x)?)?;
        let y = y.multiply_scalar((ENCODER_DIMS as f64).sqrt())?;
        let pos = relative_positions(x.dim(1), ENCODER_DIMS)?;
        Ok((y, pos))
    }
}

/// Residual `conv2(pad_left(leaky_relu(conv1(pad_right(x)))))`: each frame sees
/// `PRE_LOOKAHEAD` tokens ahead (zeros past the end) and two behind.
struct PreLookahead {
    conv1: Conv1d,
    conv2: Conv1d,
}

impl PreLookahead {
    fn load(w: &mut Weights, prefix: &str) -> Result<Self> {
        let d = ENCODER_DIMS;
        Ok(PreLookahead {
            conv1: Conv1d::load(w, &format!("{prefix}.conv1"), d, d, PRE_LOOKAHEAD + 1, true, 1, 0, 1, 1)?,
            conv2: Conv1d::load(w, &format!("{prefix}.conv2"), d, d, 3, true, 1, 0, 1, 1)?,
        })
    }

    fn forward(&self, x: &Array) -> mlx::Result<Array> {
        let y = self.conv1.forward(&x.pad(&[1], &[0], &[PRE_LOOKAHEAD], 0.0)?)?;
        let y = leaky_relu(&y)?.pad(&[1], &[2], &[0], 0.0)?;
        self.conv2.forward(&y)?.add(x)
    }
}

struct ConformerBlock {
    norm_mha: LayerNorm,
    attn: RelPositionAttention,
    norm_ff: LayerNorm,
    w1: Linear,
    w2: Linear,
}

impl ConformerBlock {
    fn load(w: &mut Weights, prefix: &str) -> Result<Self> {
        Ok(ConformerBlock {
            norm_mha: layer_norm(w, &format!("{prefix}.norm_mha"), ENCODER_DIMS, 1e-12)?,
            attn: RelPositionAttention::load(w, &format!("{prefix}.self_attn"), ENCODER_DIMS, HEADS)?,
            norm_ff: layer_norm(w, &format!("{prefix}.norm_ff"), ENCODER_DIMS, 1e-12)?,
            w1: linear(w, &format!("{prefix}.feed_forward.w_1"), ENCODER_DIMS, LINEAR_UNITS, true)?,
            w2: linear(w, &format!("{prefix}.feed_forward.w_2"), LINEAR_UNITS, ENCODER_DIMS, true)?,
        })
    }

    fn forward(&self, x: &Array, pos: &Array) -> mlx::Result<Array> {
        let x = x.add(&self.attn.forward(&self.norm_mha.forward(x)?, pos)?)?;
        let h = silu(&self.w1.forward(&self.norm_ff.forward(&x)?)?)?;
        x.add(&self.w2.forward(&h)?)
    }
}

pub struct UpsampleEncoder {
    embed: InputEmbedding,
    pre_lookahead: PreLookahead,
    blocks: Vec<ConformerBlock>,
    /// Kernel `2 * UPSAMPLE + 1` over the repeated frames, left-padded: causal.
    up_conv: Conv1d,
    up_embed: InputEmbedding,
    up_blocks: Vec<ConformerBlock>,
    after_norm: LayerNorm,
}

impl UpsampleEncoder {
    /// `prefix` is the encoder's (`s3gen.flow.encoder`).
    pub fn load(w: &mut Weights, prefix: &str, num_blocks: i32, num_up_blocks: i32) -> Result<Self> {
        let blocks = (0..num_blocks)
            .map(|i| ConformerBlock::load(w, &format!("{prefix}.encoders_{i}")))
            .collect::<Result<Vec<_>>>()?;
        let up_blocks = (0..num_up_blocks)
            .map(|i| ConformerBlock::load(w, &format!("{prefix}.up_encoders_{i}")))
            .collect::<Result<Vec<_>>>()?;
        let d = ENCODER_DIMS;
        Ok(UpsampleEncoder {
            embed: InputEmbedding::load(w, &format!("{prefix}.embed"))?,
            pre_lookahead: PreLookahead::load(w, &format!("{prefix}.pre_lookahead_layer"))?,
            blocks,
            up_conv: Conv1d::load(w, &format!("{prefix}.up_layer.conv"), d, d, 2 * UPSAMPLE + 1, true, 1, 0, 1, 1)?,
            up_embed: InputEmbedding::load(w, &format!("{prefix}.up_embed"))?,
            up_blocks,
            after_norm: layer_norm(w, &format!("{prefix}.after_norm"), d, 1e-5)?,
        })
    }

    /// Token embeddings `(1, T, 512)` to frame features `(1, 2T, 512)`.
    pub fn forward(&self, tokens: &Array) -> mlx::Result<Array> {
        let (x, pos) = self.embed.forward(tokens)?;
        let mut x = self.pre_lookahead.forward(&x)?;
        for block in &self.blocks {
            x = block.forward(&x, &pos)?;
        }
        let x = x.repeat(UPSAMPLE, 1)?.pad(&[1], &[2 * UPSAMPLE], &[0], 0.0)?;
        let x = self.up_conv.forward(&x)?;
        let (mut x, pos) = self.up_embed.forward(&x)?;
        for block in &self.up_blocks {
            x = block.forward(&x, &pos)?;
        }
        self.after_norm.forward(&x)
    }
}
