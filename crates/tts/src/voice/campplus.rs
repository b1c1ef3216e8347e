//! CAMPPlus, S3Gen's speaker encoder (mlx-audio's `s3gen/xvector.py`, from 3D-Speaker): the
//! x-vector, 192 values, that S3Gen's flow is conditioned on, from the reference clip at 16 kHz.
//!
//! A 2-D convolutional head (`FCM`: a conv, two layers of two residual blocks that halve the
//! frequency axis, a conv that halves it again) turns the 80-bin filter bank into 320 channels;
//! a strided TDNN takes them to 128 at half the frame rate; three densely connected blocks of
//! CAM layers (12, 24 and 16 layers adding 32 channels each, every layer's output scaled by a
//! mask from the utterance's and its 100-frame segment's mean), each followed by a transit
//! layer that halves the channels; then batch norm and ReLU, mean and standard deviation over
//! time, and a 1x1 conv with a non-affine batch norm.
//!
//! mlx-audio runs the model in eval mode: every batch norm uses its running statistics,
//! `(x - mean) * rsqrt(var + 1e-5)`, then `weight * x + bias` where it has them. The ops follow
//! mlx-audio's order and layouts (channels-first `[B, C, T]` between layers, swapped to
//! channels-last around each conv and batch norm) so that the sums run as its do.
//!
//! Turbo's copy of the model (`chatterbox_turbo/models/s3gen/xvector.py`) is the same network
//! but for two things (`Flavor::Turbo`): its filter bank is Kaldi's own (`mel::kaldi_fbank`),
//! and its statistics pooling takes the plain standard deviation, with no variance floor.
use lm::weights::Weights;
use mlx::{signal, Array};

use super::mel::campplus_features;
use super::Flavor;
use crate::layers::Conv1d;
use crate::{Result, TtsError};

const FEAT_DIM: i32 = 80;
/// The head's channels.
const M_CHANNELS: i32 = 32;
/// The head's output: its channels times the frequency bins left after three halvings.
const HEAD_OUT: i32 = M_CHANNELS * (FEAT_DIM / 8);
const INIT_CHANNELS: i32 = 128;
const GROWTH: i32 = 32;
/// A CAM layer's bottleneck (bn_size 4 times the growth rate).
const BN_CHANNELS: i32 = 4 * GROWTH;
/// (layers, kernel, dilation) of the three dense blocks.
const BLOCKS: [(usize, i32, i32); 3] = [(12, 3, 1), (24, 3, 2), (16, 3, 2)];
/// The segment length of the CAM layers' context pooling, in frames.
const SEG_LEN: i32 = 100;
pub const EMBED_DIM: i32 = 192;
const BN_EPS: f64 = 1e-5;
/// The variance floor of Chatterbox's statistics pooling (Turbo's has none).
const STATS_EPS: f64 = 1e-5;

/// A module's tensor-name prefix in mlx-audio's names and in the PyTorch checkpoint's, which
/// mlx-audio's `CAMPPlus.sanitize` renames (`xvector.block1.tdnnd1.` is `blocks.0.layers.0.`,
/// `nonlinear.batchnorm.` is `nonlinear.0.`, and so on).
#[derive(Clone)]
struct Path {
    mlx: String,
    torch: String,
}

impl Path {
    fn join(&self, mlx: &str, torch: &str) -> Path {
        let dot = |base: &str, s: &str| if base.is_empty() { s.to_string() } else { format!("{base}.{s}") };
        Path { mlx: dot(&self.mlx, mlx), torch: dot(&self.torch, torch) }
    }

    fn same(&self, name: &str) -> Path {
        self.join(name, name)
    }
}

/// Takes the tensors of one checkpoint layout, named after `prefix`.
struct Loader<'a> {
    w: &'a mut Weights,
    prefix: &'a str,
    torch_names: bool,
}

impl Loader<'_> {
    fn name(&self, p: &Path, leaf: &str) -> String {
        format!("{}{}.{leaf}", self.prefix, if self.torch_names { &p.torch } else { &p.mlx })
    }

    /// A conv kernel in MLX's layout `[out, k..., in]` or PyTorch's `[out, in, k...]`, which is
    /// transposed, as `sanitize` does whenever the stored shape is not MLX's.
    fn conv_weight(&mut self, p: &Path, shape: &[i32]) -> Result<Array> {
        let name = self.name(p, "weight");
        let n = shape.len();
        let torch_shape: Vec<i32> = [shape[0], shape[n - 1]].iter().chain(&shape[1..n - 1]).copied().collect();
        match self.w.shape(&name) {
            Some(s) if s != shape && s == torch_shape => {
                let perm: Vec<i32> = [0].into_iter().chain(2..n as i32).chain([1]).collect();
                Ok(self.w.take(&name, &torch_shape)?.transpose(&perm)?)
            }
            Some(s) if s != shape => self.w.take(&name, shape).map_err(|e| match e {
                TtsError::InvalidWeights(m) => TtsError::InvalidWeights(format!("{m} (or PyTorch's layout {torch_shape:?})")),
                other => other,
            }),
            _ => self.w.take(&name, shape),
        }
    }

    /// A bias-free conv, padded to keep the length (at stride 1).
    fn conv1d(&mut self, p: &Path, in_ch: i32, out_ch: i32, kernel: i32, stride: i32, dilation: i32) -> Result<Conv1d> {
        let weight = self.conv_weight(p, &[out_ch, kernel, in_ch])?;
        Ok(Conv1d { weight, bias: None, stride, padding: (kernel - 1) / 2 * dilation, dilation, groups: 1 })
    }

    /// A 1x1 conv.
    fn pointwise(&mut self, p: &Path, in_ch: i32, out_ch: i32, bias: bool) -> Result<Conv1d> {
        let mut conv = self.conv1d(p, in_ch, out_ch, 1, 1, 1)?;
        conv.bias = self.w.take_optional(&self.name(p, "bias"), &[out_ch], bias)?;
        Ok(conv)
    }

    fn conv2d(&mut self, p: &Path, in_ch: i32, out_ch: i32, kernel: i32, stride: i32) -> Result<Conv2d> {
        Ok(Conv2d { weight: self.conv_weight(p, &[out_ch, kernel, kernel, in_ch])?, stride, padding: kernel / 2 })
    }

    /// MLX's `BatchNorm` in eval mode; `affine` false for `batchnorm_` (no weight and bias).
    fn batch_norm(&mut self, p: &Path, ch: i32, affine: bool) -> Result<BatchNorm> {
        let mean = self.w.take(&self.name(p, "running_mean"), &[ch])?;
        let var = self.w.take(&self.name(p, "running_var"), &[ch])?;
        let weight = self.w.take_optional(&self.name(p, "weight"), &[ch], affine)?;
        let bias = self.w.take_optional(&self.name(p, "bias"), &[ch], affine)?;
        Ok(BatchNorm { mean, inv_std: var.add_scalar(BN_EPS)?.rsqrt()?, affine: weight.zip(bias) })
    }
}

struct BatchNorm {
    mean: Array,
    /// `rsqrt(running_var + eps)`, as MLX computes it in every call.
    inv_std: Array,
    affine: Option<(Array, Array)>,
}

impl BatchNorm {
    /// Over the last axis (channels-last).
    fn forward(&self, x: &Array) -> Result<Array> {
        let x = x.subtract(&self.mean)?.multiply(&self.inv_std)?;
        Ok(match &self.affine {
            Some((w, b)) => w.multiply(&x)?.add(b)?,
            None => x,
        })
    }

    fn relu(&self, x: &Array) -> Result<Array> {
        relu(&self.forward(x)?)
    }
}

fn relu(x: &Array) -> Result<Array> {
    Ok(x.maximum_scalar(0.0)?)
}

/// `[B, C, T]` to `[B, T, C]` and back.
fn swap(x: &Array) -> Result<Array> {
    Ok(x.swapaxes(1, 2)?)
}

/// A bias-free 2-D conv over `[B, H (frequency), W (time), C]`, strided along H only.
struct Conv2d {
    weight: Array,
    stride: i32,
    padding: i32,
}

impl Conv2d {
    fn forward(&self, x: &Array) -> Result<Array> {
        Ok(signal::conv2d(x, &self.weight, (self.stride, 1), (self.padding, self.padding), (1, 1), 1)?)
    }
}

/// `BasicResBlock`: conv-BN-ReLU, conv-BN, plus the input (through a strided 1x1 conv and BN
/// when the block is strided), ReLU.
struct ResBlock {
    conv1: Conv2d,
    bn1: BatchNorm,
    conv2: Conv2d,
    bn2: BatchNorm,
    shortcut: Option<(Conv2d, BatchNorm)>,
}

impl ResBlock {
    fn load(l: &mut Loader, p: &Path, stride: i32) -> Result<ResBlock> {
        let shortcut = if stride != 1 {
            let sc = p.same("shortcut");
            let conv = Conv2d { weight: l.conv_weight(&sc.same("0"), &[M_CHANNELS, 1, 1, M_CHANNELS])?, stride, padding: 0 };
            Some((conv, l.batch_norm(&sc.same("1"), M_CHANNELS, true)?))
        } else {
            None
        };
        Ok(ResBlock {
            conv1: l.conv2d(&p.same("conv1"), M_CHANNELS, M_CHANNELS, 3, stride)?,
            bn1: l.batch_norm(&p.same("bn1"), M_CHANNELS, true)?,
            conv2: l.conv2d(&p.same("conv2"), M_CHANNELS, M_CHANNELS, 3, 1)?,
            bn2: l.batch_norm(&p.same("bn2"), M_CHANNELS, true)?,
            shortcut,
        })
    }

    fn forward(&self, x: &Array) -> Result<Array> {
        let out = self.bn1.relu(&self.conv1.forward(x)?)?;
        let out = self.bn2.forward(&self.conv2.forward(&out)?)?;
        let shortcut = match &self.shortcut {
            Some((conv, bn)) => bn.forward(&conv.forward(x)?)?,
            None => x.clone(),
        };
        relu(&out.add(&shortcut)?)
    }
}

/// `FCM`, the head: `[B, F, T]` to `[B, 32 * F / 8, T]`.
struct Head {
    conv1: Conv2d,
    bn1: BatchNorm,
    blocks: Vec<ResBlock>,
    conv2: Conv2d,
    bn2: BatchNorm,
}

impl Head {
    fn load(l: &mut Loader, p: &Path) -> Result<Head> {
        let mut blocks = Vec::with_capacity(4);
        for layer in ["layer1", "layer2"] {
            for (i, stride) in [2, 1].into_iter().enumerate() {
                blocks.push(ResBlock::load(l, &p.same(layer).same(&i.to_string()), stride)?);
            }
        }
        Ok(Head {
            conv1: l.conv2d(&p.same("conv1"), 1, M_CHANNELS, 3, 1)?,
            bn1: l.batch_norm(&p.same("bn1"), M_CHANNELS, true)?,
            blocks,
            conv2: l.conv2d(&p.same("conv2"), M_CHANNELS, M_CHANNELS, 3, 2)?,
            bn2: l.batch_norm(&p.same("bn2"), M_CHANNELS, true)?,
        })
    }

    fn forward(&self, x: &Array) -> Result<Array> {
        let mut out = self.bn1.relu(&self.conv1.forward(&x.expand_dims(&[-1])?)?)?;
        for block in &self.blocks {
            out = block.forward(&out)?;
        }
        let out = self.bn2.relu(&self.conv2.forward(&out)?)?;
        let (b, h, w, c) = (out.dim(0), out.dim(1), out.dim(2), out.dim(3));
        Ok(out.transpose(&[0, 3, 1, 2])?.reshape(&[b, c * h, w])?)
    }
}

/// A conv and batch norm + ReLU on `[B, C, T]` (`TDNNLayer`; with the norm first, `TransitLayer`).
struct ConvNorm {
    conv: Conv1d,
    bn: BatchNorm,
}

impl ConvNorm {
    fn tdnn(&self, x: &Array) -> Result<Array> {
        swap(&self.bn.relu(&self.conv.forward(&swap(x)?)?)?)
    }

    fn transit(&self, x: &Array) -> Result<Array> {
        swap(&self.conv.forward(&self.bn.relu(&swap(x)?)?)?)
    }
}

/// `CAMDenseTDNNLayer`: BN-ReLU, 1x1 conv to the bottleneck, BN-ReLU, then the CAM layer: a
/// dilated conv to 32 channels times a sigmoid mask made from the mean over the utterance plus
/// the mean over each 100-frame segment.
struct CamLayer {
    bn1: BatchNorm,
    linear1: Conv1d,
    bn2: BatchNorm,
    local: Conv1d,
    mask1: Conv1d,
    mask2: Conv1d,
}

impl CamLayer {
    fn load(l: &mut Loader, p: &Path, in_ch: i32, kernel: i32, dilation: i32) -> Result<CamLayer> {
        let cam = p.same("cam_layer");
        Ok(CamLayer {
            bn1: l.batch_norm(&p.join("nonlinear1.0", "nonlinear1.batchnorm"), in_ch, true)?,
            linear1: l.pointwise(&p.same("linear1"), in_ch, BN_CHANNELS, false)?,
            bn2: l.batch_norm(&p.join("nonlinear2.0", "nonlinear2.batchnorm"), BN_CHANNELS, true)?,
            local: l.conv1d(&cam.same("linear_local"), BN_CHANNELS, GROWTH, kernel, 1, dilation)?,
            mask1: l.pointwise(&cam.same("linear1"), BN_CHANNELS, BN_CHANNELS / 2, true)?,
            mask2: l.pointwise(&cam.same("linear2"), BN_CHANNELS / 2, GROWTH, true)?,
        })
    }

    /// `[B, C, T]` to the layer's new channels `[B, 32, T]`.
    fn forward(&self, x: &Array) -> Result<Array> {
        let h = self.bn1.relu(&swap(x)?)?;
        let h = swap(&self.bn2.relu(&self.linear1.forward(&h)?)?)?;
        let y = swap(&self.local.forward(&swap(&h)?)?)?;
        let context = h.mean(&[-1], true)?.add(&segment_means(&h)?)?;
        let context = relu(&swap(&self.mask1.forward(&swap(&context)?)?)?)?;
        let mask = swap(&self.mask2.forward(&swap(&context)?)?)?.sigmoid()?;
        Ok(y.multiply(&mask)?)
    }
}

/// `seg_pooling`: each frame of `[B, C, T]` gets the mean of its 100-frame segment, the last
/// segment zero-padded to 100 (so divided by 100 too).
fn segment_means(x: &Array) -> Result<Array> {
    let (b, c, t) = (x.dim(0), x.dim(1), x.dim(2));
    let segs = (t + SEG_LEN - 1) / SEG_LEN;
    let pad = segs * SEG_LEN - t;
    let padded = if pad > 0 { Array::concatenate(&[x, &Array::zeros(&[b, c, pad], x.dtype())?], -1)? } else { x.clone() };
    let seg = padded.reshape(&[b, c, segs, SEG_LEN])?.mean(&[-1], false)?;
    let seg = seg.expand_dims(&[-1])?.broadcast_to(&[b, c, segs, SEG_LEN])?.reshape(&[b, c, -1])?;
    Ok(seg.slice_axis(2, 0, t)?)
}

struct DenseBlock {
    layers: Vec<CamLayer>,
    transit: ConvNorm,
}

pub struct CamPlus {
    head: Head,
    tdnn: ConvNorm,
    blocks: Vec<DenseBlock>,
    out_bn: BatchNorm,
    dense: Conv1d,
    dense_bn: BatchNorm,
    flavor: Flavor,
}

impl CamPlus {
    /// From the `{prefix}*` tensors (`s3gen.speaker_encoder.` in a Chatterbox checkpoint), in
    /// mlx-audio's names (`blocks.0.layers.0.nonlinear1.0.weight`) or the PyTorch checkpoint's
    /// (`xvector.block1.tdnnd1.nonlinear1.batchnorm.weight`), conv kernels in MLX's layout or
    /// PyTorch's, as mlx-audio's `sanitize` accepts them; its dropped `num_batches_tracked`
    /// counters are dropped here too. Turbo's names are renamed onto these beforehand
    /// (`s3gen::turbo_names`); `flavor` picks the computation.
    pub fn load(w: &mut Weights, prefix: &str, flavor: Flavor) -> Result<CamPlus> {
        let p = prefix.to_string();
        w.discard(|k| k.starts_with(&p) && k.ends_with(".num_batches_tracked"));
        let xvector_prefix = format!("{prefix}xvector.");
        let torch_names = w.names().iter().any(|k| k.starts_with(&xvector_prefix));
        let l = &mut Loader { w, prefix, torch_names };
        let root = Path { mlx: String::new(), torch: String::new() };
        let xvector = root.join("", "xvector");
        let head = Head::load(l, &root.same("head"))?;
        let tdnn = xvector.join("tdnn", "tdnn");
        let tdnn = ConvNorm {
            conv: l.conv1d(&tdnn.same("linear"), HEAD_OUT, INIT_CHANNELS, 5, 2, 1)?,
            bn: l.batch_norm(&tdnn.join("nonlinear.0", "nonlinear.batchnorm"), INIT_CHANNELS, true)?,
        };
        let mut channels = INIT_CHANNELS;
        let mut blocks = Vec::with_capacity(BLOCKS.len());
        for (i, &(n_layers, kernel, dilation)) in BLOCKS.iter().enumerate() {
            let block = Path { mlx: format!("blocks.{i}"), torch: format!("xvector.block{}", i + 1) };
            let mut layers = Vec::with_capacity(n_layers);
            for j in 0..n_layers {
                let layer = block.join(&format!("layers.{j}"), &format!("tdnnd{}", j + 1));
                layers.push(CamLayer::load(l, &layer, channels + j as i32 * GROWTH, kernel, dilation)?);
            }
            channels += n_layers as i32 * GROWTH;
            let transit = Path { mlx: format!("transits.{i}"), torch: format!("xvector.transit{}", i + 1) };
            let transit = ConvNorm {
                bn: l.batch_norm(&transit.join("nonlinear.0", "nonlinear.batchnorm"), channels, true)?,
                conv: l.pointwise(&transit.same("linear"), channels, channels / 2, false)?,
            };
            channels /= 2;
            blocks.push(DenseBlock { layers, transit });
        }
        let out_bn = l.batch_norm(&xvector.join("out_nonlinear.0", "out_nonlinear.batchnorm"), channels, true)?;
        let dense = xvector.join("dense", "dense");
        Ok(CamPlus {
            head,
            tdnn,
            blocks,
            out_bn,
            dense: l.pointwise(&dense.same("linear"), channels * 2, EMBED_DIM, false)?,
            dense_bn: l.batch_norm(&dense.join("nonlinear.0", "nonlinear.batchnorm"), EMBED_DIM, false)?,
            flavor,
        })
    }

    /// The network (`CAMPPlus.__call__`) on features `[B, T, 80]`: `[B, 192]`.
    pub fn forward(&self, feats: &Array) -> Result<Array> {
        let mut x = self.tdnn.tdnn(&self.head.forward(&swap(feats)?)?)?;
        for block in &self.blocks {
            for layer in &block.layers {
                x = Array::concatenate(&[&x, &layer.forward(&x)?], 1)?;
            }
            x = block.transit.transit(&x)?;
        }
        let x = swap(&self.out_bn.relu(&swap(&x)?)?)?;
        let mean = x.mean(&[-1], false)?;
        let var = x.var(&[-1], false, 0)?;
        let std = match self.flavor {
            Flavor::Chatterbox => var.add_scalar(STATS_EPS)?.sqrt()?,
            Flavor::Turbo => var.sqrt()?,
        };
        let stats = Array::concatenate(&[&mean, &std], -1)?.expand_dims(&[1])?;
        Ok(self.dense_bn.forward(&self.dense.forward(&stats)?)?.squeeze(&[1])?)
    }

    /// `inference` of one 16 kHz signal (S3Gen's reference, as `embed_ref` resamples it): the
    /// Kaldi filter bank less its mean over time, through the network: `[1, 192]`.
    /// `INVALID_AUDIO` for fewer samples than one 25 ms frame.
    pub fn embed(&self, wav16: &[f32]) -> Result<Array> {
        self.forward(&campplus_features(wav16, self.flavor)?.expand_dims(&[0])?)
    }
}
