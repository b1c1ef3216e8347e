//! S3TokenizerV2 ("speech_tokenizer_v2_25hz"), the speech tokenizer of voice cloning: a
//! reference clip's 128-bin log-mel (`mel::s3_tokenizer_log_mel`) to 25 speech tokens a second,
//! which condition S3Gen (from the 10 s reference) and prompt T3 (from the first 6 s). mlx-audio
//! 0.6.2's `mlx_audio/codec/models/s3/model_v2.py`, op for op: two strided convolutions, blocks
//! of attention with rotary embeddings plus an FSMN memory (a depthwise convolution over the
//! values), then a finite scalar quantizer (8 digits in base 3: 6561 codes).
//!
//! Its weights are a repo of their own, `mlx-community/S3TokenizerV2`, found in the Hugging Face
//! cache by `hub::find_s3_tokenizer`.
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use lm::weights::Weights;
use mlx::fast::{self, AttentionMask};
use mlx::nn::{LayerNorm, Linear};
use mlx::{Array, Dtype};

use crate::layers::{self, Conv1d};
use crate::{Result, TtsError};

const N_MELS: i32 = 128;
/// `precompute_freqs_cis(64, 1024 * 2)`: the rotary table fixes the head size at 64 and the
/// positions at 2048.
const HEAD_DIM: i32 = 64;
const ROPE_POSITIONS: i32 = 2048;
const FSMN_KERNEL: i32 = 31;
/// mlx-audio tokenizes longer mels (over 30 s) in overlapping windows; voice cloning never
/// gives it more than 10 s.
pub const MAX_FRAMES: i32 = 3000;
/// FSQ: `project_down` to 8 values, each rounded to one of 3 levels.
const FSQ_DIGITS: i32 = 8;
const FSQ_LEVELS: f64 = 3.0;

struct Block {
    attn_ln: LayerNorm,
    query: Linear,
    key: Linear,
    value: Linear,
    out: Linear,
    fsmn: Conv1d,
    mlp_ln: LayerNorm,
    fc1: Linear,
    fc2: Linear,
}

pub struct S3TokenizerV2 {
    conv1: Conv1d,
    conv2: Conv1d,
    blocks: Vec<Block>,
    project_down: Linear,
    heads: i32,
    /// The rotary table, `[2048, 64]` each.
    cos: Array,
    sin: Array,
}

/// mlx-audio's `sanitize`: drops the computed buffers and ONNX leftovers, renames PyTorch's
/// quantizer and `Sequential` names to MLX's, and puts PyTorch-layout conv weights
/// `[out, in, kernel]` in MLX's `[out, kernel, in]` where their shape is not already the
/// expected one (`expected` gives it by name).
fn sanitize(tensors: HashMap<String, Array>, expected: impl Fn(&str) -> Option<Vec<i32>>) -> Result<HashMap<String, Array>> {
    let mut out = HashMap::new();
    for (key, mut value) in tensors {
        if key.contains("freqs_cis") || key.contains("_mel_filters") || key.starts_with("onnx::") {
            continue;
        }
        let mut name = key.replace("quantizer._codebook.", "quantizer.fsq_codebook.").replace("quantizer.codebook.", "quantizer.fsq_codebook.");
        name = mlp_layers(&name);
        let conv = [".conv1.", ".conv2.", ".fsmn_block."].iter().any(|c| name.contains(c));
        if conv && name.contains("weight") && value.ndim() == 3 {
            if let Some(shape) = expected(&name) {
                if value.shape() != shape {
                    value = value.swapaxes(1, 2)?;
                }
            }
        }
        out.insert(name, value);
    }
    Ok(out)
}

/// `re.sub(r"\.mlp\.(\d+)\.", r".mlp.layers.\1.", name)`.
fn mlp_layers(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 8);
    let mut rest = name;
    while let Some(i) = rest.find(".mlp.") {
        let after = &rest[i + 5..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        out.push_str(&rest[..i + 5]);
        if digits > 0 && after.as_bytes().get(digits) == Some(&b'.') {
            out.push_str("layers.");
            out.push_str(&after[..digits + 1]);
            rest = &after[digits + 1..];
        } else {
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn invalid(path: &Path, what: String) -> TtsError {
    TtsError::InvalidWeights(format!("{}: {what}", path.display()))
}

/// The block indices `encoder.blocks.<i>.` that occur.
fn block_count(names: impl Iterator<Item = String>) -> i32 {
    let found: BTreeSet<i32> =
        names.filter_map(|n| n.strip_prefix("encoder.blocks.").and_then(|r| r.split('.').next()).and_then(|i| i.parse().ok())).collect();
    found.last().map_or(0, |i| i + 1)
}

/// `precompute_freqs_cis(64, 2048)` op for op: `1 / 10000^(2i / 64)` times the positions.
fn rotary_table() -> Result<(Array, Array)> {
    let exponents = Array::arange(0.0, HEAD_DIM as f64, 2.0, Dtype::Int32)?.astype(Dtype::Float32)?.divide_scalar(HEAD_DIM as f64)?;
    let freqs = Array::scalar(1.0, Dtype::Float32)?.divide(&Array::scalar(10000.0, Dtype::Float32)?.power(&exponents)?)?;
    let t = Array::arange(0.0, ROPE_POSITIONS as f64, 1.0, Dtype::Int32)?;
    // mx.outer: the positions as a column times the frequencies.
    let angles = t.reshape(&[-1, 1])?.multiply(&freqs)?;
    let (cos, sin) = (angles.cos()?, angles.sin()?);
    Ok((Array::concatenate(&[&cos, &cos], -1)?, Array::concatenate(&[&sin, &sin], -1)?))
}

impl Block {
    fn load(w: &mut Weights, p: &str, n: i32) -> Result<Block> {
        Ok(Block {
            attn_ln: layers::layer_norm(w, &format!("{p}.attn_ln"), n, 1e-6)?,
            query: layers::linear(w, &format!("{p}.attn.query"), n, n, true)?,
            key: layers::linear(w, &format!("{p}.attn.key"), n, n, false)?,
            value: layers::linear(w, &format!("{p}.attn.value"), n, n, true)?,
            out: layers::linear(w, &format!("{p}.attn.out"), n, n, true)?,
            fsmn: Conv1d::load(w, &format!("{p}.attn.fsmn_block"), n, n, FSMN_KERNEL, false, 1, 0, 1, n)?,
            mlp_ln: layers::layer_norm(w, &format!("{p}.mlp_ln"), n, 1e-5)?,
            fc1: layers::linear(w, &format!("{p}.mlp.layers.0"), n, 4 * n, true)?,
            fc2: layers::linear(w, &format!("{p}.mlp.layers.2"), 4 * n, n, true)?,
        })
    }

    /// `ResidualAttentionBlock` on `[1, T, n]`; `mask` is the additive attention mask.
    fn forward(&self, x: &Array, heads: i32, cos: &Array, sin: &Array, mask: &Array) -> Result<Array> {
        let (b, t, n) = (x.dim(0), x.dim(1), x.dim(2));
        let h = self.attn_ln.forward(x)?;
        let split = |a: Array| a.reshape(&[b, t, heads, -1]);
        let q = rotate(&split(self.query.forward(&h)?)?, cos, sin)?;
        let k = rotate(&split(self.key.forward(&h)?)?, cos, sin)?;
        let v = split(self.value.forward(&h)?)?;
        // forward_fsmn: the values, zero-padded by 15 each side, through the depthwise
        // convolution, plus themselves. (Its padding masks are all ones for one whole clip.)
        let values = v.reshape(&[b, t, n])?;
        let pad = (FSMN_KERNEL - 1) / 2;
        let padded = values.pad(&[1], &[pad], &[FSMN_KERNEL - 1 - pad], 0.0)?;
        let memory = self.fsmn.forward(&padded)?.add(&values)?;
        let scale = (HEAD_DIM as f64).powf(-0.25);
        let q = q.transpose(&[0, 2, 1, 3])?.multiply_scalar(scale)?;
        let k = k.transpose(&[0, 2, 1, 3])?.multiply_scalar(scale)?;
        let v = v.transpose(&[0, 2, 1, 3])?;
        let o = fast::scaled_dot_product_attention(&q, &k, &v, 1.0, AttentionMask::Array(mask))?;
        let o = o.transpose(&[0, 2, 1, 3])?.reshape(&[b, t, n])?;
        let x = x.add(&self.out.forward(&o)?.add(&memory)?)?;
        let m = self.fc2.forward(&mlx::cpu::math::gelu(&self.fc1.forward(&self.mlp_ln.forward(&x)?)?)?)?;
        Ok(x.add(&m)?)
    }
}

/// `apply_rotary_emb` on `[B, T, H, 64]`: `x cos + rotate_half(x) sin`, the table cut to T.
fn rotate(x: &Array, cos: &Array, sin: &Array) -> Result<Array> {
    let t = x.dim(1);
    let d = x.dim(3);
    let cos = cos.slice_axis(0, 0, t)?.reshape(&[1, t, 1, d])?;
    let sin = sin.slice_axis(0, 0, t)?.reshape(&[1, t, 1, d])?;
    let rotated = Array::concatenate(&[&x.slice_axis(3, d / 2, d)?.negative()?, &x.slice_axis(3, 0, d / 2)?], -1)?;
    Ok(x.multiply(&cos)?.add(&rotated.multiply(&sin)?)?)
}

/// One conv layer's output length, `(len + 2 - 1 * (3 - 1) - 1) // stride + 1`.
fn conv_len(len: i32, stride: i32) -> i32 {
    (len + 2 - 2 - 1).div_euclid(stride) + 1
}

impl S3TokenizerV2 {
    /// Loads a `model.safetensors` in mlx-community/S3TokenizerV2's layout, or in the PyTorch
    /// names and conv layout mlx-audio's `sanitize` also accepts. mlx-audio builds the model
    /// at its fixed size (1280 wide, 20 heads, 6 blocks) and loads with `strict=False`; here the
    /// width and block count are read from the weights (the head size is the rotary table's 64),
    /// tensors the model does not use are ignored as there, and a missing or mis-shaped tensor
    /// is `INVALID_WEIGHTS` naming it.
    pub fn load(path: &Path) -> Result<S3TokenizerV2> {
        if !path.is_file() {
            return Err(TtsError::ModelNotFound(format!("the S3 tokenizer's weights {} do not exist", path.display())));
        }
        let (tensors, _) = mlx::io::load_safetensors(path).map_err(|e| invalid(path, e.message))?;
        let conv1_name = "encoder.conv1.weight";
        let n = match tensors.get(conv1_name).map(Array::shape) {
            Some(s) if s.len() == 3 && s[0] > 0 && s[0] % HEAD_DIM == 0 => s[0],
            Some(s) => {
                return Err(invalid(
                    path,
                    format!("tensor \"{conv1_name}\" has shape {s:?}, expected [n, 3, {N_MELS}] with n a multiple of the head size {HEAD_DIM}"),
                ))
            }
            None => return Err(invalid(path, format!("tensor \"{conv1_name}\" is missing from the S3 tokenizer's weights"))),
        };
        let expected = |name: &str| -> Option<Vec<i32>> {
            match name {
                "encoder.conv1.weight" => Some(vec![n, 3, N_MELS]),
                "encoder.conv2.weight" => Some(vec![n, 3, n]),
                _ if name.starts_with("encoder.blocks.") && name.ends_with(".attn.fsmn_block.weight") => Some(vec![n, FSMN_KERNEL, 1]),
                _ => None,
            }
        };
        let tensors = sanitize(tensors, expected)?;
        let n_blocks = block_count(tensors.keys().cloned());
        if n_blocks == 0 {
            return Err(invalid(path, "no \"encoder.blocks.<i>.*\" tensors: this is not an S3 tokenizer".into()));
        }
        let mut w = Weights::from_tensors(tensors, path, None, None);
        let conv1 = Conv1d::load(&mut w, "encoder.conv1", N_MELS, n, 3, true, 2, 1, 1, 1)?;
        let conv2 = Conv1d::load(&mut w, "encoder.conv2", n, n, 3, true, 2, 1, 1, 1)?;
        let blocks = (0..n_blocks).map(|i| Block::load(&mut w, &format!("encoder.blocks.{i}"), n)).collect::<Result<Vec<_>>>()?;
        let project_down = layers::linear(&mut w, "quantizer.fsq_codebook.project_down", n, FSQ_DIGITS, true)?;
        // mlx-audio loads with strict=False: what the model has no place for is ignored.
        w.discard(|_| true);
        w.finish()?;
        let (cos, sin) = rotary_table()?;
        mlx::eval(&[&cos, &sin])?;
        Ok(S3TokenizerV2 { conv1, conv2, blocks, project_down, heads: n / HEAD_DIM, cos, sin })
    }

    /// The speech tokens of one clip's log-mel `[128, frames]` (as `s3_tokenizer_log_mel`
    /// gives it): mlx-audio's `S3TokenizerV2(mel[None], [frames])`, one token per 4 frames
    /// (rounded up), each in `0..6561`.
    pub fn tokens(&self, mel: &Array) -> Result<Vec<i32>> {
        let shape = mel.shape();
        if shape.len() != 2 || shape[0] != N_MELS || shape[1] < 1 {
            return Err(TtsError::InvalidArgument(format!("the S3 tokenizer takes a log-mel of shape [{N_MELS}, frames], got {shape:?}")));
        }
        let frames = shape[1];
        if frames > MAX_FRAMES {
            return Err(TtsError::InvalidArgument(format!(
                "the S3 tokenizer takes at most {MAX_FRAMES} mel frames (30 s), got {frames} (voice cloning uses at most 10 s)"
            )));
        }
        // The encoder. With one whole clip its padding masks are all ones, so mlx-audio's
        // multiplications by them leave every value as it is and are left out here.
        let x = mel.expand_dims(&[0])?.transpose(&[0, 2, 1])?;
        let x = mlx::cpu::math::gelu(&self.conv1.forward(&x)?)?;
        let mut x = mlx::cpu::math::gelu(&self.conv2.forward(&x)?)?;
        let len = conv_len(conv_len(frames, 2), 2);
        // mask_to_bias of all true: (1 - 1) * -1e10, in the activations' dtype; (1, 1, T).
        let mask = Array::full(&[1, 1, len], -0.0, x.dtype())?;
        for block in &self.blocks {
            x = block.forward(&x, self.heads, &self.cos, &self.sin, &mask)?;
        }
        // FSQ: tanh of the projection, scaled below 1, rounded to -1/0/1, read in base 3.
        let h = self.project_down.forward(&x.reshape(&[-1, x.dim(2)])?)?.astype(Dtype::Float32)?;
        let h = h.tanh()?.multiply_scalar(0.9990000128746033)?.round()?.add_scalar(1.0)?;
        let powers = Array::scalar(FSQ_LEVELS, Dtype::Float32)?.power(&Array::arange(0.0, FSQ_DIGITS as f64, 1.0, Dtype::Float32)?)?;
        let codes = h.multiply(&powers.expand_dims(&[0])?)?.sum(&[-1], false)?.astype(Dtype::Int32)?;
        let mut tokens = codes.to_vec::<i32>()?;
        tokens.truncate(len as usize);
        Ok(tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlp_names_as_mlx_audio_renames_them() {
        assert_eq!(mlp_layers("encoder.blocks.3.mlp.0.weight"), "encoder.blocks.3.mlp.layers.0.weight");
        assert_eq!(mlp_layers("encoder.blocks.3.mlp.layers.2.bias"), "encoder.blocks.3.mlp.layers.2.bias");
        assert_eq!(mlp_layers("a.mlp.12.b.mlp.2.c"), "a.mlp.layers.12.b.mlp.layers.2.c");
        assert_eq!(mlp_layers("a.mlp.2"), "a.mlp.2");
        assert_eq!(mlp_layers("encoder.blocks.0.mlp_ln.weight"), "encoder.blocks.0.mlp_ln.weight");
    }

    #[test]
    fn token_lengths() {
        // 25 tokens a second from 100 frames a second, rounded up per stride-2 convolution.
        for (frames, tokens) in [(1, 1), (2, 1), (3, 1), (4, 1), (5, 2), (450, 113), (600, 150), (1000, 250), (730, 183)] {
            assert_eq!(conv_len(conv_len(frames, 2), 2), tokens, "{frames}");
        }
    }
}
