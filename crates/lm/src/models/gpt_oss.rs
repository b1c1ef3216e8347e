//! GPT-OSS (`gpt_oss`), as MLX-LM's `gpt_oss.py`: the shared decoder with
//! biased q/k/v/o projections, per-head attention sinks, sliding-window
//! (rotating caches of `sliding_window`) and full layers as `layer_types`
//! says (alternating by default), and a mixture of experts in every layer:
//! a biased router whose top-k logits are softmaxed, biased experts with the
//! clamped `swiglu_oai` activation. MLX-community conversions with float or
//! affine-quantized weights load; MXFP4 expert weights are refused (their
//! uint8 scales name the mode) until MLX's `mxfp4` mode is bound.
use mlx::Dtype;
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
        sinks.push(w.take(&format!("model.layers.{i}.self_attn.sinks"), &[heads])?);
    }
    let mut model = Decoder::build_with(config, w, dtype, progress, &ffn)?;
    model.stack.set_sinks(sinks);
    model.layout = Some(kinds);
    Ok(Box::new(model))
}
