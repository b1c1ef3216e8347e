//! S3Gen's token encoder (CosyVoice's `UpsampleConformerEncoder`): linear
//! embedding, a pre-lookahead convolution, conformer blocks, 2x nearest
//! upsampling with a causal convolution, then more conformer blocks.
//! Conformer blocks here are pre-norm attention + feed-forward (no macaron, no
//! convolution module), attending over the whole sequence.
//!
//! Streaming splits the tokens into the voice prompt's and the rest, as the
//! estimator does (`EncoderPrefix`): a pass over the prompt alone records what
//! later tokens read from it (per attention layer its keys and values, and the
//! inputs the convolutions read back); a pass over later tokens continues from
//! that record. This equals one pass over all tokens in which the prompt's
//! states are the ones it has alone (its last tokens look ahead into zeros
//! rather than the new tokens, and its positions do not attend to them).
use lm::weights::Weights;
use mlx::nn::{LayerNorm, Linear};
use mlx::Array;

use super::activations::{leaky_relu, silu};
use super::rel_attention::{trailing_positions, KeysValues, RelPositionAttention};
use crate::layers::{layer_norm, linear, project, Conv1d};
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

    /// `rows`: project with the few-row kernel (a streamed chunk's tokens).
    fn forward(&self, x: &Array, rows: bool) -> mlx::Result<Array> {
        self.norm.forward(&project(&self.linear, x, rows)?)?.multiply_scalar((ENCODER_DIMS as f64).sqrt())
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

    /// `before`: the two embedded tokens before `x`'s (none: `x` starts the
    /// sequence, and the second conv reads zeros there; some: a streamed
    /// chunk, whose few frames take the few-row kernel).
    fn forward(&self, x: &Array, before: Option<&Array>) -> mlx::Result<Array> {
        let input = match before {
            Some(b) => Array::concatenate(&[b, x], 1)?,
            None => x.clone(),
        };
        let y = leaky_relu(&self.conv1.apply(&input.pad(&[1], &[0], &[PRE_LOOKAHEAD], 0.0)?, before.is_some())?)?;
        let y = if before.is_some() { y } else { y.pad(&[1], &[2], &[0], 0.0)? };
        self.conv2.apply(&y, before.is_some())?.add(x)
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

    /// See [`RelPositionAttention::forward`] (also for the few-row kernel
    /// after `earlier`); returns the output and `x`'s keys and values.
    fn forward(&self, x: &Array, pos: &Array, earlier: Option<&KeysValues>) -> mlx::Result<(Array, KeysValues)> {
        let (attended, kv) = self.attn.forward(&self.norm_mha.forward(x)?, pos, earlier)?;
        let x = x.add(&attended)?;
        let h = silu(&project(&self.w1, &self.norm_ff.forward(&x)?, earlier.is_some())?)?;
        Ok((x.add(&project(&self.w2, &h, earlier.is_some())?)?, kv))
    }
}

/// What tokens after the voice prompt read from the prompt's own pass
/// (`UpsampleEncoder::record`).
pub struct EncoderPrefix {
    tokens: i32,
    /// The last two embedded tokens (the pre-lookahead's second conv reads two back).
    embedded_tail: Array,
    blocks: Vec<KeysValues>,
    /// The last `2 * UPSAMPLE` upsampled frames (the up conv reads that far back).
    upsampled_tail: Array,
    up_blocks: Vec<KeysValues>,
}

impl EncoderPrefix {
    pub fn arrays(&self) -> Vec<&Array> {
        let kv = self.blocks.iter().chain(&self.up_blocks).flat_map(|(k, v)| [k, v]);
        [&self.embedded_tail, &self.upsampled_tail].into_iter().chain(kv).collect()
    }
}

/// How a pass treats the tokens before its own.
enum Earlier<'a> {
    None,
    Record(&'a mut EncoderPrefix),
    Extend(&'a EncoderPrefix),
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
        let blocks = (0..num_blocks).map(|i| ConformerBlock::load(w, &format!("{prefix}.encoders_{i}"))).collect::<Result<Vec<_>>>()?;
        let up_blocks = (0..num_up_blocks).map(|i| ConformerBlock::load(w, &format!("{prefix}.up_encoders_{i}"))).collect::<Result<Vec<_>>>()?;
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
        self.run(tokens, Earlier::None)
    }

    /// [`Self::forward`] over the voice prompt's tokens, also returning what
    /// later tokens read from it. `None` for a prompt of fewer than two tokens
    /// (the convolutions read two back).
    pub fn record(&self, tokens: &Array) -> mlx::Result<Option<(Array, EncoderPrefix)>> {
        if tokens.dim(1) < 2 {
            return Ok(None);
        }
        let empty = || Array::zeros(&[0], mlx::Dtype::Float32);
        let mut prefix =
            EncoderPrefix { tokens: tokens.dim(1), embedded_tail: empty()?, blocks: Vec::new(), upsampled_tail: empty()?, up_blocks: Vec::new() };
        let h = self.run(tokens, Earlier::Record(&mut prefix))?;
        Ok(Some((h, prefix)))
    }

    /// Frame features `(1, 2T, 512)` for the token embeddings `tokens` that
    /// follow the recorded voice prompt.
    pub fn forward_after(&self, tokens: &Array, prefix: &EncoderPrefix) -> mlx::Result<Array> {
        self.run(tokens, Earlier::Extend(prefix))
    }

    fn run(&self, tokens: &Array, mut earlier: Earlier) -> mlx::Result<Array> {
        let t = tokens.dim(1);
        let before = match &earlier {
            Earlier::Extend(p) => p.tokens,
            _ => 0,
        };
        // Positions of this pass's tokens among all (its frames: twice as many).
        let positions = |len: i32, new: i32| trailing_positions(len, new, ENCODER_DIMS);
        let tail = |a: &Array, n: i32| a.slice_axis(1, a.dim(1) - n, a.dim(1))?.contiguous();

        // A streamed chunk's few rows take the few-row kernel (as in its blocks).
        let rows = matches!(earlier, Earlier::Extend(_));
        let x = self.embed.forward(tokens, rows)?;
        let mut x = match &mut earlier {
            Earlier::Extend(p) => self.pre_lookahead.forward(&x, Some(&p.embedded_tail))?,
            Earlier::Record(p) => {
                p.embedded_tail = tail(&x, 2)?;
                self.pre_lookahead.forward(&x, None)?
            }
            Earlier::None => self.pre_lookahead.forward(&x, None)?,
        };
        let pos = positions(before + t, t)?;
        for (i, block) in self.blocks.iter().enumerate() {
            x = run_block(block, &x, &pos, i, &mut earlier, false)?;
        }

        let x = x.repeat(UPSAMPLE, 1)?;
        let reach = 2 * UPSAMPLE;
        let x = match &mut earlier {
            Earlier::Extend(p) => Array::concatenate(&[&p.upsampled_tail, &x], 1)?,
            Earlier::Record(p) => {
                p.upsampled_tail = tail(&x, reach)?;
                x.pad(&[1], &[reach], &[0], 0.0)?
            }
            Earlier::None => x.pad(&[1], &[reach], &[0], 0.0)?,
        };
        let x = self.up_conv.apply(&x, rows)?;
        let mut x = self.up_embed.forward(&x, rows)?;
        let pos = positions(UPSAMPLE * (before + t), UPSAMPLE * t)?;
        for (i, block) in self.up_blocks.iter().enumerate() {
            x = run_block(block, &x, &pos, i, &mut earlier, true)?;
        }
        self.after_norm.forward(&x)
    }
}

/// Conformer block `i` of the first (`up` false) or second stack, reading or
/// filling its entry of the record.
fn run_block(block: &ConformerBlock, x: &Array, pos: &Array, i: usize, earlier: &mut Earlier, up: bool) -> mlx::Result<Array> {
    match earlier {
        Earlier::Extend(p) => Ok(block.forward(x, pos, Some(if up { &p.up_blocks[i] } else { &p.blocks[i] }))?.0),
        Earlier::Record(p) => {
            let (y, (k, v)) = block.forward(x, pos, None)?;
            let kv = (k.contiguous()?, v.contiguous()?);
            if up {
                p.up_blocks.push(kv)
            } else {
                p.blocks.push(kv)
            }
            Ok(y)
        }
        Earlier::None => Ok(block.forward(x, pos, None)?.0),
    }
}
