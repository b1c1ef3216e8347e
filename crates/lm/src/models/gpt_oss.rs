//! GPT-OSS (`gpt_oss`), as MLX-LM's `gpt_oss.py`: the shared decoder with
//! biased q/k/v/o projections, per-head attention sinks, sliding-window
//! (rotating caches of `sliding_window`) and full layers as `layer_types`
//! says (alternating by default), and a mixture of experts in every layer:
//! a biased router whose top-k logits are softmaxed, biased experts with the
//! clamped `swiglu_oai` activation. MLX-community conversions load with float,
//! affine-quantized or MXFP4 weights (MLX's `mxfp4` mode: uint8 scales, no
//! biases), mixed as they ship them: MXFP4 experts beside 8-bit affine
//! layers, or everything MXFP4 but the 8-bit router (`convert --q-mode
//! mxfp4`); `Weights::quant_params` reads each layer's mode as MLX-LM does.
//! OpenAI's own checkpoints (`openai/gpt-oss-*`: MXFP4 `_blocks`/`_scales`,
//! gate and up interleaved) are rewritten as MLX-LM's `sanitize` does.
use mlx::{Array, Dtype};
use serde_json::Value;

use super::decoder::{Decoder, FeedForward};
use super::family_config;
use super::moe::{Activation, SwitchGlu, TopKMoe};
use super::LanguageModel;
use crate::config::ModelConfig;
use crate::error::{LmError, Result};
use crate::weights::Weights;

fn bad(what: String) -> LmError {
    LmError::InvalidWeights(format!("config.json: {what}"))
}

/// MLX-LM's `ModelArgs` defaults, where `config.json` names nothing.
const DEFAULTS: &[(&str, f64)] = &[
    ("num_hidden_layers", 36.0),
    ("num_local_experts", 128.0),
    ("num_experts_per_tok", 4.0),
    ("vocab_size", 201088.0),
    ("rms_norm_eps", 1e-5),
    ("hidden_size", 2880.0),
    ("intermediate_size", 2880.0),
    ("head_dim", 64.0),
    ("num_attention_heads", 64.0),
    ("num_key_value_heads", 8.0),
    ("sliding_window", 128.0),
    ("rope_theta", 150000.0),
];

/// The config with MLX-LM's defaults; GPT-OSS's projections always have biases.
pub(super) fn with_defaults(raw: &Value) -> std::result::Result<Value, String> {
    let mut c = family_config::with_defaults(raw, DEFAULTS)?;
    c.insert("attention_bias".into(), Value::from(true));
    c.insert("tie_word_embeddings".into(), Value::from(false));
    Ok(Value::Object(c))
}

fn int(c: &ModelConfig, key: &str) -> Result<i32> {
    let v = c.raw.get(key).ok_or_else(|| bad(format!("missing \"{key}\"")))?;
    v.as_i64()
        .filter(|&n| n > 0 && n <= i32::MAX as i64)
        .map(|n| n as i32)
        .ok_or_else(|| bad(format!("\"{key}\" must be a positive integer, got {v}")))
}

/// MLX-LM's `gpt_oss.sanitize`: nothing to do once any `gate_proj.weight`
/// exists (MLX-LM's layout); otherwise OpenAI's layout, where each expert
/// projection is MXFP4 `{proj}_blocks` (uint8 `[E, out, in / 32, 16]`, read as
/// the packed uint32 `[E, out, in / 8]` MLX uses) with `{proj}_scales`, and
/// `gate_up_proj` holds gate and up rows in turn (split into `gate_proj` and
/// `up_proj`, biases too).
pub(super) fn sanitize(config: &ModelConfig, w: &mut Weights) -> Result<()> {
    super::decoder::sanitize(config, w)?;
    let names = w.names();
    if names.iter().any(|k| k.contains("gate_proj.weight")) {
        return Ok(());
    }
    for name in names {
        let is_bias = name.contains("bias");
        if name.contains("gate_up_proj") && !is_bias {
            let renamed = packed_name(&name);
            w.rewrite(&name, |v| {
                let v = unpack_blocks(&name, v)?;
                Ok(vec![
                    (renamed.replace("gate_up_proj", "gate_proj"), every_other_row(&v, 0)?),
                    (renamed.replace("gate_up_proj", "up_proj"), every_other_row(&v, 1)?),
                ])
            })?;
        } else if name.contains("down_proj") && !is_bias {
            let renamed = packed_name(&name);
            w.rewrite(&name, |v| Ok(vec![(renamed, unpack_blocks(&name, v)?)]))?;
        } else if name.contains("gate_up_proj_bias") {
            w.rewrite(&name, |v| {
                let (gate, up) = (every_other(v, -1, 0)?, every_other(v, -1, 1)?);
                Ok(vec![(name.replace("gate_up_proj_bias", "gate_proj.bias"), gate), (name.replace("gate_up_proj_bias", "up_proj.bias"), up)])
            })?;
        } else if name.contains("down_proj_bias") {
            w.rewrite(&name, |v| Ok(vec![(name.replace("down_proj_bias", "down_proj.bias"), v.clone())]))?;
        }
    }
    Ok(())
}

/// `{proj}_blocks` is `{proj}.weight`, `{proj}_scales` `{proj}.scales`.
fn packed_name(name: &str) -> String {
    name.replace("_blocks", ".weight").replace("_scales", ".scales")
}

/// `_blocks` bytes `[..., groups, 16]` as packed uint32 `[..., groups * 4]`.
fn unpack_blocks(name: &str, v: &Array) -> mlx::Result<Array> {
    if !name.contains("_blocks") {
        return Ok(v.clone());
    }
    let words = v.view(Dtype::Uint32)?;
    let mut shape = words.shape();
    let last = shape.pop().unwrap_or(1);
    match shape.last_mut() {
        Some(groups) => *groups *= last,
        None => return Err(mlx::Error::new("MXFP4 blocks need at least two axes")),
    }
    words.reshape(&shape)
}

/// Rows `first`, `first + 2`, ... of `v` (its second-to-last axis).
fn every_other_row(v: &Array, first: i32) -> mlx::Result<Array> {
    every_other(v, -2, first)
}

/// `v[..., first::2, ...]` along `axis`, contiguous (as MLX-LM's `mx.contiguous`).
fn every_other(v: &Array, axis: i32, first: i32) -> mlx::Result<Array> {
    let shape = v.shape();
    let n = shape.len() as i32;
    let axis = if axis < 0 { axis + n } else { axis };
    if axis < 0 || axis >= n {
        return Err(mlx::Error::new(format!("cannot split axis {axis} of a {n}-axis tensor")));
    }
    let mut start = vec![0; shape.len()];
    let mut strides = vec![1; shape.len()];
    start[axis as usize] = first;
    strides[axis as usize] = 2;
    v.slice(&start, &shape, &strides)?.contiguous()
}

pub(super) fn build(config: ModelConfig, w: Weights, dtype: Option<Dtype>, progress: &mut dyn FnMut(f64)) -> Result<Box<dyn LanguageModel>> {
    // MLX-LM's default: sliding and full layers in turn.
    let kinds = family_config::layer_kinds(&config, |i| if i % 2 == 0 { "sliding_attention" } else { "full_attention" })?;
    let (experts, top_k) = (int(&config, "num_local_experts")?, int(&config, "num_experts_per_tok")?);
    if top_k > experts {
        return Err(bad(format!("num_experts_per_tok {top_k} is more than num_local_experts {experts}")));
    }
    let (h, ff, heads, layers) = (config.hidden_size, config.intermediate_size, config.num_attention_heads, config.num_hidden_layers);
    let ffn = |w: &mut Weights, _: usize, p: &str| -> Result<Box<dyn FeedForward>> {
        let router = w.linear(&format!("{p}.router"), h, experts, true)?;
        let switch = SwitchGlu::load(w, &format!("{p}.experts"), experts, h, ff, true, Activation::SwiGluOai)?;
        Ok(Box::new(TopKMoe::new(router, switch, experts, top_k)))
    };
    // The sinks are taken before the stack so that `finish` reads them too.
    let mut w = w;
    let mut sinks = Vec::with_capacity(layers as usize);
    for i in 0..layers {
        // In a tensor-parallel group, the sinks of this process's heads.
        sinks.push(w.take_split(&format!("model.layers.{i}.self_attn.sinks"), &[heads], Some(0))?);
    }
    let mut model = Decoder::build_with(config, w, dtype, progress, &ffn)?;
    model.stack.set_sinks(sinks);
    model.layout = Some(kinds);
    Ok(Box::new(model))
}
