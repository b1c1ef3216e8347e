//! LFM2 (`lfm2`), as MLX-LM's `lfm2.py`: most layers are short gated
//! convolutions (`in_proj` into B, C and x; a depthwise causal convolution of
//! `conv_L_cache` taps over B*x; C times that; `out_proj`), a few
//! (`full_attn_idxs` or `layer_types`) GQA attention with per-head q/k
//! RMSNorms. Every layer has a SwiGLU feed-forward (`w1`, `w3`, `w2`; its width
//! adjusted as `block_auto_adjust_ff_dim` says); the final norm is
//! `embedding_norm` and the head is the tied embedding. Convolution layers keep
//! their last inputs in an `ArraysCache` of one array, attention layers a `KvCache`.
use mlx::nn::{Embedding, Linear, RmsNorm, Rope};
use mlx::signal::conv1d;
use mlx::{Array, Dtype};
use serde_json::{Map, Value};

use super::attention::{Projections, SelfAttention};
use super::decoder::{build_rope, FeedForward, Mlp};
use super::LanguageModel;
use crate::cache::{Cache, LayerKind};
use crate::config::ModelConfig;
use crate::error::{LmError, Result};
use crate::weights::Weights;

fn bad(what: String) -> String {
    format!("config.json: {what}")
}

/// The config as the shared parser reads it: `norm_eps` as `rms_norm_eps`, the
/// feed-forward width as MLX-LM's `MLP` computes it as `intermediate_size`,
/// the head always tied.
pub(super) fn text_config(raw: &Value) -> std::result::Result<Value, String> {
    let mut c: Map<String, Value> = raw.as_object().cloned().ok_or("config.json must hold an object")?;
    let int = |key: &str| c.get(key).and_then(Value::as_i64).filter(|&n| n > 0);
    let ff = int("block_ff_dim").or(int("intermediate_size")).ok_or_else(|| bad("needs \"block_ff_dim\" or \"intermediate_size\"".into()))?;
    let multiple_of = int("block_multiple_of").ok_or_else(|| bad("needs a positive \"block_multiple_of\"".into()))?;
    let mut ff = ff;
    if c.get("block_auto_adjust_ff_dim").and_then(Value::as_bool).ok_or_else(|| bad("needs \"block_auto_adjust_ff_dim\"".into()))? {
        ff = 2 * ff / 3;
        if let Some(m) = c.get("block_ffn_dim_multiplier").and_then(Value::as_f64) {
            ff = (m * ff as f64) as i64;
        }
        ff = multiple_of * ((ff + multiple_of - 1) / multiple_of);
    }
    if int("block_dim") != int("hidden_size") {
        return Err(bad("block_dim must equal hidden_size".into()));
    }
    let eps = c.get("norm_eps").cloned().ok_or_else(|| bad("missing \"norm_eps\"".into()))?;
    c.insert("intermediate_size".into(), Value::from(ff));
    c.insert("rms_norm_eps".into(), eps);
    c.insert("tie_word_embeddings".into(), Value::from(true));
    // MLX-LM's default base, where neither the config nor its rope_parameters set one.
    let nested = c.get("rope_parameters").and_then(|p| p.get("rope_theta")).is_some();
    if c.get("rope_theta").is_none_or(Value::is_null) && !nested {
        c.insert("rope_theta".into(), Value::from(1_000_000.0));
    }
    Ok(Value::Object(c))
}

/// Which layers attend (the rest convolve): `full_attn_idxs`, else the
/// `layer_types` entries that are "full_attention".
fn attention_layers(c: &ModelConfig) -> Result<Vec<bool>> {
    let n = c.num_hidden_layers as usize;
    let invalid = |what: String| LmError::InvalidWeights(bad(what));
    let mut attends = vec![false; n];
    if let Some(idxs) = c.raw.get("full_attn_idxs").filter(|v| !v.is_null()) {
        for i in idxs.as_array().ok_or_else(|| invalid("full_attn_idxs must be a list".into()))? {
            let i = i.as_u64().filter(|&i| (i as usize) < n).ok_or_else(|| invalid(format!("full_attn_idxs holds {i}, not a layer of {n}")))?;
            attends[i as usize] = true;
        }
    } else {
        let types =
            c.raw.get("layer_types").and_then(Value::as_array).ok_or_else(|| invalid("needs \"full_attn_idxs\" or \"layer_types\"".into()))?;
        if types.len() != n {
            return Err(invalid(format!("layer_types lists {} layers, the model has {n}", types.len())));
        }
        for (i, t) in types.iter().enumerate() {
            attends[i] = t.as_str() == Some("full_attention");
        }
    }
    Ok(attends)
}

/// MLX-LM's `lfm2.sanitize`: convolution weights stored as PyTorch's
/// `[channels, 1, taps]` become MLX's `[channels, taps, 1]`.
pub(super) fn sanitize(_config: &ModelConfig, w: &mut Weights) -> Result<()> {
    for name in w.names() {
        if name.contains("conv.weight") {
            w.rewrite(&name, |v| {
                let s = v.shape();
                let v = if s.len() == 3 && s[2] > s[1] { v.transpose(&[0, 2, 1])? } else { v.clone() };
                Ok(vec![(name.clone(), v)])
            })?;
        }
    }
    Ok(())
}

/// `ShortConv`: the gated depthwise causal convolution.
struct ShortConv {
    in_proj: Linear,
    out_proj: Linear,
    /// `[channels, taps, 1]`, one filter per channel.
    weight: Array,
    bias: Option<Array>,
    taps: i32,
}

impl ShortConv {
    fn forward(&self, x: &Array, cache: &mut dyn Cache) -> mlx::Result<Array> {
        let parts = self.in_proj.forward(x)?.split_equal(3, -1)?;
        let (b, c, xx) = (&parts[0], &parts[1], &parts[2]);
        let bx = b.multiply(xx)?;
        let cache = cache.as_arrays().ok_or_else(|| mlx::Error::new("a convolution layer needs an ArraysCache"))?;
        let (batch, t, channels) = (bx.dim(0), bx.dim(1), bx.dim(2));
        let state = match cache.get(0) {
            Some(s) => s.clone(),
            None => Array::zeros(&[batch, self.taps - 1, channels], bx.dtype())?,
        };
        let bx = Array::concatenate(&[&state, &bx], 1)?;
        let n = bx.dim(1);
        cache.set(0, bx.slice_axis(1, n - (self.taps - 1), n)?)?;
        cache.advance(t);
        let mut y = conv1d(&bx, &self.weight, 1, 0, 1, channels)?;
        if let Some(bias) = &self.bias {
            y = y.add(bias)?;
        }
        self.out_proj.forward(&c.multiply(&y)?)
    }
}

enum Operator {
    Attention(SelfAttention),
    Conv(ShortConv),
}

struct Layer {
    operator: Operator,
    feed_forward: Mlp,
    operator_norm: RmsNorm,
    ffn_norm: RmsNorm,
}

pub struct Lfm2 {
    config: ModelConfig,
    embed_tokens: Embedding,
    layers: Vec<Layer>,
    embedding_norm: RmsNorm,
    rope: Rope,
    dtype: Dtype,
}

pub(super) fn build(config: ModelConfig, mut w: Weights, dtype: Option<Dtype>, progress: &mut dyn FnMut(f64)) -> Result<Box<dyn LanguageModel>> {
    let c = &config;
    let attends = attention_layers(c)?;
    let num = |key: &str| c.raw.get(key).and_then(Value::as_i64);
    let taps = num("conv_L_cache")
        .filter(|&t| t > 0 && t <= 1024)
        .ok_or_else(|| LmError::InvalidWeights(bad("\"conv_L_cache\" must be a positive integer".into())))? as i32;
    let conv_bias = c.raw.get("conv_bias").and_then(Value::as_bool).unwrap_or(false);
    let dtype = dtype.or(w.native_dtype()).unwrap_or(Dtype::Float32);
    let (h, hd, eps) = (c.hidden_size, c.head_dim, c.rms_norm_eps);
    let (nq, nkv) = (c.num_attention_heads * hd, c.num_key_value_heads * hd);
    let embed_tokens = w.tied_embedding("model.embed_tokens", c.vocab_size, h)?;
    let mut layers = Vec::with_capacity(attends.len());
    for (i, &attention) in attends.iter().enumerate() {
        let p = format!("model.layers.{i}");
        let operator = if attention {
            Operator::Attention(SelfAttention {
                qkv: Projections::load(&mut w, &format!("{p}.self_attn"), h, nq, nkv, false)?,
                o_proj: w.linear(&format!("{p}.self_attn.out_proj"), nq, h, false)?,
                q_norm: Some(w.rms_norm(&format!("{p}.self_attn.q_layernorm.weight"), hd, eps)?),
                k_norm: Some(w.rms_norm(&format!("{p}.self_attn.k_layernorm.weight"), hd, eps)?),
                v_norm: None,
                heads: c.num_attention_heads,
                kv_heads: c.num_key_value_heads,
                head_dim: hd,
                scale: (hd as f32).powf(-0.5),
                position_scale: None,
                sinks: None,
                output_gate: false,
            })
        } else {
            let bias = match conv_bias {
                true => Some(w.take(&format!("{p}.conv.conv.bias"), &[h])?),
                false => None,
            };
            Operator::Conv(ShortConv {
                in_proj: w.linear(&format!("{p}.conv.in_proj"), h, 3 * h, conv_bias)?,
                out_proj: w.linear(&format!("{p}.conv.out_proj"), h, h, conv_bias)?,
                weight: w.take(&format!("{p}.conv.conv.weight"), &[h, taps, 1])?,
                bias,
                taps,
            })
        };
        layers.push(Layer {
            operator,
            feed_forward: Mlp::load_named(&mut w, &format!("{p}.feed_forward"), ["w1", "w3", "w2"], h, c.intermediate_size, false)?,
            operator_norm: w.rms_norm(&format!("{p}.operator_norm.weight"), h, eps)?,
            ffn_norm: w.rms_norm(&format!("{p}.ffn_norm.weight"), h, eps)?,
        });
    }
    let embedding_norm = w.rms_norm("model.embedding_norm.weight", h, eps)?;
    w.finish_with_progress(progress)?;
    Ok(Box::new(Lfm2 { rope: build_rope(&config)?, config, embed_tokens, layers, embedding_norm, dtype }))
}

impl LanguageModel for Lfm2 {
    fn forward(&self, ids: &Array, caches: &mut [Box<dyn Cache>], last_only: bool) -> mlx::Result<Array> {
        let mut h = self.embed_tokens.forward(ids)?;
        let l = h.dim(1);
        for (layer, cache) in self.layers.iter().zip(caches.iter_mut()) {
            let x = layer.operator_norm.forward(&h)?;
            let r = match &layer.operator {
                Operator::Attention(attn) => attn.forward(&x, cache.as_mut(), &self.rope)?,
                Operator::Conv(conv) => conv.forward(&x, cache.as_mut())?,
            };
            let hh = h.add(&r)?;
            h = hh.add(&layer.feed_forward.forward(&layer.ffn_norm.forward(&hh)?)?)?;
        }
        // The norm is per position, so slicing first gives the same values for less work.
        if last_only && l > 1 {
            h = h.slice_axis(1, l - 1, l)?;
        }
        self.embed_tokens.as_linear(&self.embedding_norm.forward(&h)?)
    }

    /// Attention layers grow; convolution layers keep their last inputs.
    fn cache_layout(&self) -> Option<Vec<LayerKind>> {
        Some(
            self.layers
                .iter()
                .map(|l| if matches!(l.operator, Operator::Attention(_)) { LayerKind::Growing } else { LayerKind::Arrays(1) })
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
