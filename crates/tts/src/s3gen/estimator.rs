//! The flow-matching vector field (Matcha-TTS / CosyVoice `ConditionalDecoder`,
//! causal variant): a one-level U-Net of causal ResNet blocks, each followed by
//! transformer blocks, conditioned on the time step. Activations are
//! channels-last `(B, T, C)` here; mlx-audio keeps `(B, C, T)` between layers,
//! which changes no arithmetic. The inference path has no padding and no
//! streaming chunk mask, so attention sees every frame (the mask mlx-audio adds
//! is all zeros and is left out).
//!
//! Streaming can split the frames into the voice prompt's and the rest
//! (`Prefix`): a forward over the prompt alone records, per layer, what later
//! frames read from it (attention keys and values, the last two inputs of each
//! causal convolution); a forward over later frames then continues from that
//! record. Only attention crosses frames, and causal convolutions look back, so
//! this equals one forward over all frames in which prompt frames do not attend
//! to later ones.
use lm::weights::Weights;
use mlx::cpu::attention::attend_after;
use mlx::nn::{LayerNorm, Linear};
use mlx::{Array, Dtype};

use super::activations::{gelu, mish, silu};
use crate::layers::{layer_norm, linear, project, Conv1d};
use crate::Result;

/// Input: noisy mel, mu, speaker embedding and prompt mel, 80 channels each.
pub const IN_CHANNELS: i32 = 320;
pub const OUT_CHANNELS: i32 = 80;
const CHANNELS: i32 = 256;
const TIME_EMBED_DIMS: i32 = 4 * CHANNELS;
const HEADS: i32 = 8;
const HEAD_DIM: i32 = 64;

/// What one estimator forward keeps of the voice prompt's frames: per causal
/// convolution its last two input frames, per attention layer its keys and
/// values, in the order the forward meets them.
#[derive(Default)]
pub struct PrefixRecord {
    conv_tails: Vec<Array>,
    keys_values: Vec<(Array, Array)>,
}

impl PrefixRecord {
    pub fn arrays(&self) -> Vec<&Array> {
        self.conv_tails.iter().chain(self.keys_values.iter().flat_map(|(k, v)| [k, v])).collect()
    }

    pub fn bytes(&self) -> usize {
        self.arrays().iter().map(|a| a.size() * a.dtype().size()).sum()
    }
}

/// How a forward treats the frames before its own (see the module notes).
pub enum Prefix<'a> {
    /// There are none: `x` holds every frame.
    None,
    /// `x` is the prompt: fill the record.
    Record(&'a mut PrefixRecord),
    /// `x` follows the recorded prompt.
    Extend(&'a PrefixRecord),
}

/// A `Prefix` with cursors over the record's layers.
struct PrefixCursor<'a> {
    prefix: Prefix<'a>,
    conv: usize,
    attention: usize,
}

impl<'a> PrefixCursor<'a> {
    fn new(prefix: Prefix<'a>) -> Self {
        PrefixCursor { prefix, conv: 0, attention: 0 }
    }

    /// `x` with the frames a causal convolution of kernel 3 reads before it:
    /// the prompt's last two (recorded), or zeros.
    fn conv_input(&mut self, x: &Array) -> mlx::Result<Array> {
        let i = self.conv;
        self.conv += 1;
        match &mut self.prefix {
            Prefix::Extend(r) => Array::concatenate(&[&r.conv_tails[i], x], 1),
            Prefix::Record(r) => {
                let padded = x.pad(&[1], &[2], &[0], 0.0)?;
                let t = padded.dim(1);
                r.conv_tails.push(padded.slice_axis(1, t - 2, t)?.contiguous()?);
                Ok(padded)
            }
            Prefix::None => x.pad(&[1], &[2], &[0], 0.0),
        }
    }

    /// Whether `x` follows a recorded prompt (a streamed chunk): its matmuls
    /// then take the few-row kernel (`layers::project`).
    fn rows(&self) -> bool {
        matches!(self.prefix, Prefix::Extend(_))
    }

    /// The prompt's keys and values that `x`'s queries also attend to
    /// (extend); records `x`'s own (record).
    fn earlier_keys_values(&mut self, k: &Array, v: &Array) -> mlx::Result<Option<&'a (Array, Array)>> {
        let i = self.attention;
        self.attention += 1;
        match &mut self.prefix {
            Prefix::Extend(r) => Ok(Some(&r.keys_values[i])),
            Prefix::Record(r) => {
                r.keys_values.push((k.contiguous()?, v.contiguous()?));
                Ok(None)
            }
            Prefix::None => Ok(None),
        }
    }
}

/// A kernel-3 convolution padded on the left only (`CausalConv1d`).
struct CausalConv {
    conv: Conv1d,
}

impl CausalConv {
    fn load(w: &mut Weights, prefix: &str, in_ch: i32, out_ch: i32) -> Result<Self> {
        Ok(CausalConv { conv: Conv1d::load(w, prefix, in_ch, out_ch, 3, true, 1, 0, 1, 1)? })
    }

    fn forward(&self, x: &Array, p: &mut PrefixCursor) -> mlx::Result<Array> {
        let x = p.conv_input(x)?;
        self.conv.apply(&x, p.rows())
    }
}

/// `mish(layer_norm(causal_conv(x)))` (`CausalBlock1D`).
struct CausalBlock {
    conv: CausalConv,
    norm: LayerNorm,
}

impl CausalBlock {
    fn load(w: &mut Weights, prefix: &str, in_ch: i32, out_ch: i32) -> Result<Self> {
        Ok(CausalBlock {
            conv: CausalConv::load(w, &format!("{prefix}.conv.conv"), in_ch, out_ch)?,
            norm: layer_norm(w, &format!("{prefix}.norm"), out_ch, 1e-5)?,
        })
    }

    fn forward(&self, x: &Array, p: &mut PrefixCursor) -> mlx::Result<Array> {
        mish(&self.norm.forward(&self.conv.forward(x, p)?)?)
    }
}

/// Two causal blocks with the time embedding added between them, plus a 1x1
/// convolution on the skip path (`CausalResnetBlock1D`).
struct ResnetBlock {
    block1: CausalBlock,
    time_proj: Linear,
    block2: CausalBlock,
    res_conv: Conv1d,
}

impl ResnetBlock {
    fn load(w: &mut Weights, prefix: &str, in_ch: i32, out_ch: i32) -> Result<Self> {
        Ok(ResnetBlock {
            block1: CausalBlock::load(w, &format!("{prefix}.block1"), in_ch, out_ch)?,
            time_proj: linear(w, &format!("{prefix}.mlp_linear"), TIME_EMBED_DIMS, out_ch, true)?,
            block2: CausalBlock::load(w, &format!("{prefix}.block2"), out_ch, out_ch)?,
            res_conv: Conv1d::load(w, &format!("{prefix}.res_conv"), in_ch, out_ch, 1, true, 1, 0, 1, 1)?,
        })
    }

    /// `time_emb` is `(B, TIME_EMBED_DIMS)`.
    fn forward(&self, x: &Array, time_emb: &Array, p: &mut PrefixCursor) -> mlx::Result<Array> {
        let t = self.time_proj.forward(&mish(time_emb)?)?.expand_dims(&[1])?;
        let h = self.block2.forward(&self.block1.forward(x, p)?.add(&t)?, p)?;
        h.add(&self.res_conv.apply(x, p.rows())?)
    }
}

/// Pre-norm self-attention (8 heads of 64, no q/k/v bias) and a GELU
/// feed-forward (`BasicTransformerBlock` with diffusers' attention).
struct TransformerBlock {
    norm1: LayerNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    out: Linear,
    norm3: LayerNorm,
    ff_in: Linear,
    ff_out: Linear,
}

impl TransformerBlock {
    fn load(w: &mut Weights, prefix: &str) -> Result<Self> {
        let inner = HEADS * HEAD_DIM;
        Ok(TransformerBlock {
            norm1: layer_norm(w, &format!("{prefix}.norm1"), CHANNELS, 1e-5)?,
            q: linear(w, &format!("{prefix}.attn.query_proj"), CHANNELS, inner, false)?,
            k: linear(w, &format!("{prefix}.attn.key_proj"), CHANNELS, inner, false)?,
            v: linear(w, &format!("{prefix}.attn.value_proj"), CHANNELS, inner, false)?,
            out: linear(w, &format!("{prefix}.attn.out_proj"), inner, CHANNELS, true)?,
            norm3: layer_norm(w, &format!("{prefix}.norm3"), CHANNELS, 1e-5)?,
            ff_in: linear(w, &format!("{prefix}.ff.layers.0"), CHANNELS, 4 * CHANNELS, true)?,
            ff_out: linear(w, &format!("{prefix}.ff.layers.1"), 4 * CHANNELS, CHANNELS, true)?,
        })
    }

    fn forward(&self, x: &Array, p: &mut PrefixCursor) -> mlx::Result<Array> {
        let x = x.add(&self.attention(&self.norm1.forward(x)?, p)?)?;
        let h = gelu(&project(&self.ff_in, &self.norm3.forward(&x)?, p.rows())?)?;
        x.add(&project(&self.ff_out, &h, p.rows())?)
    }

    /// Written out (scores, softmax, weighted sum) as mlx-audio does when it is
    /// given a mask, rather than the fused kernel, to match it to the last bit.
    /// After a recorded prompt (streaming), the scores against its keys and
    /// against `x`'s own share one softmax, with no copy of the prompt's keys
    /// and values per layer and step: on the CPU as one kernel
    /// (`attend_after`, the same sums without a BLAS call per head), elsewhere
    /// as two score matmuls and two weighted sums added.
    fn attention(&self, x: &Array, p: &mut PrefixCursor) -> mlx::Result<Array> {
        let (b, t) = (x.dim(0), x.dim(1));
        let heads_first = |a: &Array| a.reshape(&[b, t, HEADS, HEAD_DIM])?.transpose(&[0, 2, 1, 3]);
        let rows = p.rows();
        let (qx, kx, vx) = (project(&self.q, x, rows)?, project(&self.k, x, rows)?, project(&self.v, x, rows)?);
        let (q, k, v) = (heads_first(&qx)?, heads_first(&kx)?, heads_first(&vx)?);
        let scale = (HEAD_DIM as f64).powf(-0.5);
        let scores_with = |k: &Array| q.matmul(&k.transpose(&[0, 1, 3, 2])?);
        let y = match p.earlier_keys_values(&k, &v)? {
            None => mlx::cpu::math::softmax_last(&scores_with(&k)?.multiply_scalar(scale)?)?.matmul(&v)?,
            Some((pk, pv)) => {
                if let Some(y) = attend_after(&qx, &kx, &vx, pk, pv, HEADS, scale as f32)? {
                    return project(&self.out, &y, rows);
                }
                let scores = Array::concatenate(&[&scores_with(pk)?, &scores_with(&k)?], 3)?.multiply_scalar(scale)?;
                let attn = mlx::cpu::math::softmax_last(&scores)?;
                let n = pk.dim(2);
                let earlier = attn.slice_axis(3, 0, n)?.matmul(pv)?;
                earlier.add(&attn.slice_axis(3, n, attn.dim(3))?.matmul(&v)?)?
            }
        };
        project(&self.out, &y.transpose(&[0, 2, 1, 3])?.reshape(&[b, t, HEADS * HEAD_DIM])?, rows)
    }
}

struct Stage {
    resnet: ResnetBlock,
    transformers: Vec<TransformerBlock>,
}

impl Stage {
    fn load(w: &mut Weights, prefix: &str, in_ch: i32, n_blocks: i32) -> Result<Self> {
        Ok(Stage {
            resnet: ResnetBlock::load(w, &format!("{prefix}.resnet"), in_ch, CHANNELS)?,
            transformers: (0..n_blocks).map(|i| TransformerBlock::load(w, &format!("{prefix}.transformer_{i}"))).collect::<Result<Vec<_>>>()?,
        })
    }

    fn forward(&self, x: &Array, time_emb: &Array, p: &mut PrefixCursor) -> mlx::Result<Array> {
        let mut x = self.resnet.forward(x, time_emb, p)?;
        for block in &self.transformers {
            x = block.forward(&x, p)?;
        }
        Ok(x)
    }
}

pub struct Estimator {
    time_in: Linear,
    time_out: Linear,
    /// Meanflow (Turbo): mixes the embeddings of the step's start and end times.
    time_mixer: Option<Linear>,
    down: Stage,
    /// With a single channel level the "downsample" is a causal conv at full rate.
    down_conv: CausalConv,
    mid: Vec<Stage>,
    up: Stage,
    up_conv: CausalConv,
    final_block: CausalBlock,
    final_proj: Conv1d,
}

impl Estimator {
    /// `prefix` is the estimator's (`s3gen.flow.decoder.estimator`).
    /// `meanflow`: with Turbo's `time_embed_mixer`.
    pub fn load(w: &mut Weights, prefix: &str, n_blocks: i32, num_mid_blocks: i32, meanflow: bool) -> Result<Self> {
        Ok(Estimator {
            time_in: linear(w, &format!("{prefix}.time_mlp.linear_1"), IN_CHANNELS, TIME_EMBED_DIMS, true)?,
            time_out: linear(w, &format!("{prefix}.time_mlp.linear_2"), TIME_EMBED_DIMS, TIME_EMBED_DIMS, true)?,
            time_mixer: match meanflow {
                true => Some(linear(w, &format!("{prefix}.time_embed_mixer"), 2 * TIME_EMBED_DIMS, TIME_EMBED_DIMS, false)?),
                false => None,
            },
            down: Stage::load(w, &format!("{prefix}.down_blocks_0"), IN_CHANNELS, n_blocks)?,
            down_conv: CausalConv::load(w, &format!("{prefix}.down_blocks_0.downsample.conv"), CHANNELS, CHANNELS)?,
            mid: (0..num_mid_blocks).map(|i| Stage::load(w, &format!("{prefix}.mid_blocks_{i}"), CHANNELS, n_blocks)).collect::<Result<Vec<_>>>()?,
            up: Stage::load(w, &format!("{prefix}.up_blocks_0"), 2 * CHANNELS, n_blocks)?,
            up_conv: CausalConv::load(w, &format!("{prefix}.up_blocks_0.upsample.conv"), CHANNELS, CHANNELS)?,
            final_block: CausalBlock::load(w, &format!("{prefix}.final_block"), CHANNELS, CHANNELS)?,
            final_proj: Conv1d::load(w, &format!("{prefix}.final_proj"), CHANNELS, OUT_CHANNELS, 1, true, 1, 0, 1, 1)?,
        })
    }

    /// The velocity at time `t` `(B,)` for the state `x`, given `mu`, the
    /// speaker embedding `spks` `(B, 80)` and the prompt mel `cond`; `x`, `mu`
    /// and `cond` are `(B, T, 80)`; returns `(B, T, 80)`. `prefix`: see the
    /// module notes. `r`: the step's end time, for a meanflow estimator.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(&self, x: &Array, mu: &Array, t: &Array, r: Option<&Array>, spks: &Array, cond: &Array, prefix: Prefix) -> mlx::Result<Array> {
        let p = &mut PrefixCursor::new(prefix);
        let embed = |t: &Array| self.time_out.forward(&silu(&self.time_in.forward(&timestep_embedding(t)?)?)?);
        let mut time_emb = embed(t)?;
        if let (Some(mixer), Some(r)) = (&self.time_mixer, r) {
            time_emb = mixer.forward(&Array::concatenate(&[&time_emb, &embed(r)?], -1)?)?;
        }

        let (b, frames) = (x.dim(0), x.dim(1));
        let spks = spks.expand_dims(&[1])?.broadcast_to(&[b, frames, spks.dim(1)])?;
        let h = Array::concatenate(&[x, mu, &spks, cond], -1)?;

        let skip = self.down.forward(&h, &time_emb, p)?;
        let mut h = self.down_conv.forward(&skip, p)?;
        for stage in &self.mid {
            h = stage.forward(&h, &time_emb, p)?;
        }
        let h = Array::concatenate(&[&h.slice_axis(1, 0, skip.dim(1))?, &skip], -1)?;
        let h = self.up_conv.forward(&self.up.forward(&h, &time_emb, p)?, p)?;
        let h = self.final_block.forward(&h, p)?;
        self.final_proj.apply(&h, p.rows())
    }
}

/// `[sin(1000 t f), cos(1000 t f)]` over `IN_CHANNELS / 2` geometric
/// frequencies from 1 to 1e-4 (`SinusoidalPosEmb`): `(B, IN_CHANNELS)`.
fn timestep_embedding(t: &Array) -> mlx::Result<Array> {
    let half = IN_CHANNELS / 2;
    let step = 10000f64.ln() / (half - 1) as f64;
    let freqs = Array::arange(0.0, half as f64, 1.0, Dtype::Float32)?.multiply_scalar(-step)?.exp()?;
    let angles = t.multiply_scalar(1000.0)?.expand_dims(&[1])?.multiply(&freqs.expand_dims(&[0])?)?;
    Array::concatenate(&[&angles.sin()?, &angles.cos()?], -1)
}
