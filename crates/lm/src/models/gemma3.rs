//! Gemma 3 text models (`gemma3_text`), as MLX-LM's `gemma3_text.py`: RMSNorms
//! that scale by `1 + weight`, the embedding scaled by `sqrt(hidden)` (rounded
//! to bfloat16 first), four norms per layer, per-head q/k norms, attention
//! scaled by `query_pre_attn_scalar`, a GELU (tanh) MLP, and sliding-window
//! layers (rotating caches of `sliding_window` positions, the local RoPE base)
//! between global ones (every `sliding_window_pattern`-th layer: growing
//! caches, the global base and scaling). The head is tied unless the
//! checkpoint has `lm_head.weight`.
use mlx::nn::{Embedding, Linear, RmsNorm, Rope};
use mlx::{Array, Dtype};
use serde_json::Value;

use super::attention::{Projections, SelfAttention};
use super::decoder::{build_rope, FeedForward, Mlp};
use super::family_config;
use super::moe::Activation;
use super::LanguageModel;
use crate::cache::{Cache, LayerKind};
use crate::config::{ModelConfig, RopeScaling};
use crate::error::{LmError, Result};
use crate::weights::Weights;

/// What Gemma 3 adds to the shared config, with MLX-LM's defaults.
struct Args {
    query_pre_attn_scalar: f32,
    sliding_window: i32,
    sliding_window_pattern: i32,
    rope_local_base_freq: f32,
}

impl Args {
    fn from(c: &ModelConfig) -> Result<Args> {
        let num = |key: &str, default: f64| family_config::number(&c.raw, key, default);
        Ok(Args {
            query_pre_attn_scalar: num("query_pre_attn_scalar", 256.0)? as f32,
            sliding_window: num("sliding_window", 512.0)? as i32,
            sliding_window_pattern: num("sliding_window_pattern", 6.0)? as i32,
            rope_local_base_freq: num("rope_local_base_freq", 10_000.0)? as f32,
        })
    }

    fn is_global(&self, layer: usize) -> bool {
        (layer as i32) % self.sliding_window_pattern == self.sliding_window_pattern - 1
    }
}

struct Block {
    attn: SelfAttention,
    mlp: Mlp,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
    pre_feedforward_layernorm: RmsNorm,
    post_feedforward_layernorm: RmsNorm,
}

pub struct Gemma3 {
    config: ModelConfig,
    args: Args,
    embed_tokens: Embedding,
    layers: Vec<Block>,
    norm: RmsNorm,
    lm_head: Option<Linear>,
    local_rope: Rope,
    global_rope: Rope,
    dtype: Dtype,
}

/// Gemma's RMSNorm: `rms_norm(x, 1 + weight)`. The sum is taken once here, in
/// the weight's dtype, as MLX-LM computes it on every call.
fn norm(w: &mut Weights, name: &str, dims: i32, eps: f32, derived: &mut Vec<Array>) -> Result<RmsNorm> {
    let n = w.rms_norm(name, dims, eps)?;
    let weight = n.weight.add_scalar(1.0).map_err(|e| LmError::Mlx(e.message))?;
    derived.push(weight.clone());
    Ok(RmsNorm { weight, eps })
}

/// `residual + x`; in float16 the sum is taken in float32 and clipped to
/// float16's range (MLX-LM's `clip_residual`).
fn clip_residual(residual: &Array, x: &Array) -> mlx::Result<Array> {
    if residual.dtype() != Dtype::Float16 {
        return residual.add(x);
    }
    let bound = Array::scalar(65504.0, Dtype::Float32)?;
    let sum = residual.astype(Dtype::Float32)?.add(&x.astype(Dtype::Float32)?)?;
    sum.clip(Some(&bound.negative()?), Some(&bound))?.astype(Dtype::Float16)
}

/// MLX-LM's `gemma3_text.sanitize` only decides the tying (done in `build`).
pub(super) fn sanitize(_config: &ModelConfig, _w: &mut Weights) -> Result<()> {
    Ok(())
}

/// `gemma3` (vision-language) checkpoints: the text model's weights are under
/// `language_model.`, next to vision ones it does not use (MLX-LM's `gemma3.sanitize`).
pub(super) fn sanitize_multimodal(_config: &ModelConfig, w: &mut Weights) -> Result<()> {
    w.discard(|k| k.starts_with("vision_tower.") || k.starts_with("multi_modal_projector."));
    w.strip_prefix("language_model.");
    Ok(())
}

/// MLX-LM's `gemma3_text.ModelArgs` defaults (Hugging Face leaves out of a
/// config what equals its own defaults, which are these).
const DEFAULTS: &[(&str, f64)] = &[
    ("hidden_size", 1152.0),
    ("num_hidden_layers", 26.0),
    ("intermediate_size", 6912.0),
    ("num_attention_heads", 4.0),
    ("head_dim", 256.0),
    ("rms_norm_eps", 1.0e-6),
    ("vocab_size", 262144.0),
    ("num_key_value_heads", 1.0),
    ("rope_theta", 1_000_000.0),
    ("max_position_embeddings", 32768.0),
];

/// A `gemma3_text` config with MLX-LM's defaults where it names nothing.
pub(super) fn with_defaults(raw: &Value) -> std::result::Result<Value, String> {
    family_config::with_defaults(raw, DEFAULTS).map(Value::Object)
}

/// The text model's config of a `gemma3` checkpoint, as MLX-LM's `gemma3.ModelArgs`
/// builds it: `text_config`, with the top-level `vocab_size` (default 262208) and
/// 8 query / 4 key-value heads where it names none, then the text defaults; the
/// top-level quantization.
pub(super) fn text_config(raw: &Value) -> std::result::Result<Value, String> {
    let mut text = raw.get("text_config").and_then(Value::as_object).cloned().ok_or("a gemma3 config needs a \"text_config\" object")?;
    text.insert("model_type".into(), Value::from("gemma3"));
    text.insert("vocab_size".into(), raw.get("vocab_size").cloned().unwrap_or(Value::from(262208)));
    text.entry("num_attention_heads").or_insert(Value::from(8));
    text.entry("num_key_value_heads").or_insert(Value::from(4));
    if let Some(q) = raw.get("quantization") {
        text.insert("quantization".into(), q.clone());
    }
    with_defaults(&Value::Object(text))
}

pub(super) fn build(config: ModelConfig, mut w: Weights, dtype: Option<Dtype>, progress: &mut dyn FnMut(f64)) -> Result<Box<dyn LanguageModel>> {
    let args = Args::from(&config)?;
    let c = &config;
    let dtype = dtype.or(w.native_dtype()).unwrap_or(Dtype::Float32);
    let (h, hd, eps) = (c.hidden_size, c.head_dim, c.rms_norm_eps);
    let (nq, nkv) = (c.num_attention_heads * hd, c.num_key_value_heads * hd);
    let mut derived = Vec::new();
    // MLX-LM ties the head exactly when the checkpoint has none.
    let embed_tokens = match w.contains("lm_head.weight") {
        true => w.embedding("model.embed_tokens", c.vocab_size, h)?,
        false => w.tied_embedding("model.embed_tokens", c.vocab_size, h)?,
    };
    let mut layers = Vec::with_capacity(c.num_hidden_layers as usize);
    for i in 0..c.num_hidden_layers {
        let p = format!("model.layers.{i}");
        let attn = SelfAttention {
            qkv: Projections::load(&mut w, &format!("{p}.self_attn"), h, nq, nkv, false)?,
            o_proj: w.linear(&format!("{p}.self_attn.o_proj"), nq, h, false)?,
            q_norm: Some(norm(&mut w, &format!("{p}.self_attn.q_norm.weight"), hd, eps, &mut derived)?),
            k_norm: Some(norm(&mut w, &format!("{p}.self_attn.k_norm.weight"), hd, eps, &mut derived)?),
            v_norm: None,
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: hd,
            scale: args.query_pre_attn_scalar.powf(-0.5),
            position_scale: None,
            sinks: None,
            output_gate: false,
        };
        layers.push(Block {
            attn,
            mlp: Mlp::load(&mut w, &format!("{p}.mlp"), h, c.intermediate_size, false)?.with_activation(Activation::GeGlu),
            input_layernorm: norm(&mut w, &format!("{p}.input_layernorm.weight"), h, eps, &mut derived)?,
            post_attention_layernorm: norm(&mut w, &format!("{p}.post_attention_layernorm.weight"), h, eps, &mut derived)?,
            pre_feedforward_layernorm: norm(&mut w, &format!("{p}.pre_feedforward_layernorm.weight"), h, eps, &mut derived)?,
            post_feedforward_layernorm: norm(&mut w, &format!("{p}.post_feedforward_layernorm.weight"), h, eps, &mut derived)?,
        });
    }
    let final_norm = norm(&mut w, "model.norm.weight", h, eps, &mut derived)?;
    let lm_head = if w.contains("lm_head.weight") { Some(w.linear("lm_head", h, c.vocab_size, false)?) } else { None };
    w.finish_with_progress(progress)?;
    mlx::transforms::eval(&derived.iter().collect::<Vec<_>>()).map_err(|e| LmError::Mlx(e.message))?;

    let local = ModelConfig { rope_theta: args.rope_local_base_freq, rope_scaling: RopeScaling::None, ..config.clone() };
    Ok(Box::new(Gemma3 {
        local_rope: build_rope(&local)?,
        global_rope: build_rope(&config)?,
        config,
        args,
        embed_tokens,
        layers,
        norm: final_norm,
        lm_head,
        dtype,
    }))
}

impl LanguageModel for Gemma3 {
    fn forward(&self, ids: &Array, caches: &mut [Box<dyn Cache>], last_only: bool) -> mlx::Result<Array> {
        let mut h = self.embed_tokens.forward(ids)?;
        let scale = Array::scalar((self.config.hidden_size as f64).sqrt(), Dtype::Bfloat16)?.astype(h.dtype())?;
        h = h.multiply(&scale)?;
        let l = h.dim(1);
        for (i, (layer, cache)) in self.layers.iter().zip(caches.iter_mut()).enumerate() {
            let rope = if self.args.is_global(i) { &self.global_rope } else { &self.local_rope };
            let r = layer.attn.forward(&layer.input_layernorm.forward(&h)?, cache.as_mut(), rope)?;
            let hh = clip_residual(&h, &layer.post_attention_layernorm.forward(&r)?)?;
            let x = layer.pre_feedforward_layernorm.forward(&hh)?;
            h = clip_residual(&hh, &layer.post_feedforward_layernorm.forward(&layer.mlp.forward(&x)?)?)?;
        }
        if last_only && l > 1 {
            h = h.slice_axis(1, l - 1, l)?;
        }
        super::decoder::logits(&self.embed_tokens, self.lm_head.as_ref(), &self.norm.forward(&h)?)
    }

    /// Global layers grow; sliding ones keep the last `sliding_window` positions.
    fn cache_layout(&self) -> Option<Vec<LayerKind>> {
        Some(
            (0..self.layers.len())
                .map(|i| if self.args.is_global(i) { LayerKind::Growing } else { LayerKind::Window(self.args.sliding_window) })
                .collect(),
        )
    }

    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn dtype(&self) -> Dtype {
        self.dtype
    }
}
