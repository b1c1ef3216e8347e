//! Qwen3.5 (`qwen3_5`, `qwen3_5_moe`), as MLX-LM's `qwen3_5.py` and
//! `qwen3_5_moe.py`: Gated DeltaNet linear-attention layers
//! (`gated_delta.rs`), with every `full_attention_interval`-th layer GQA
//! attention whose `q_proj` also gives an output gate (per-head q/k norms,
//! partial rotary from `rope_parameters`); a SwiGLU MLP per layer, or in
//! `qwen3_5_moe` (and any config with `num_experts`) softmax top-k experts
//! plus a sigmoid-gated shared expert. Published checkpoints are
//! vision-language ones: the text config under `text_config`, the text
//! weights under `model.language_model.` beside vision and multi-token
//! prediction weights the text model does not use; a plain text config loads
//! too. Linear layers keep an `ArraysCache` of two (convolution inputs,
//! recurrent state), attention layers a `KvCache`.
use mlx::nn::{Embedding, Linear, RmsNorm, Rope};
use mlx::{Array, Dtype};
use serde_json::{Map, Value};

use super::attention::{Projections, SelfAttention};
use super::decoder::{build_rope, FeedForward, Mlp};
use super::gated_delta::{Dims, GatedDeltaNet};
use super::moe::{SharedExpertMoe, SparseMoe};
use super::{family_config, LanguageModel};
use crate::cache::{Cache, LayerKind};
use crate::config::ModelConfig;
use crate::error::{LmError, Result};
use crate::parallel::{self, Cut, Shard, Split};
use crate::weights::Weights;

/// MLX-LM's `qwen3_5.TextModelArgs` defaults.
const DEFAULTS: &[(&str, f64)] = &[
    ("hidden_size", 4096.0),
    ("intermediate_size", 14336.0),
    ("num_hidden_layers", 32.0),
    ("num_attention_heads", 32.0),
    ("rms_norm_eps", 1e-6),
    ("vocab_size", 151936.0),
    ("num_key_value_heads", 8.0),
    ("max_position_embeddings", 131072.0),
    ("linear_num_value_heads", 64.0),
    ("linear_num_key_heads", 16.0),
    ("linear_key_head_dim", 192.0),
    ("linear_value_head_dim", 128.0),
    ("linear_conv_kernel_dim", 4.0),
    ("full_attention_interval", 4.0),
    ("num_experts", 0.0),
    ("num_experts_per_tok", 0.0),
    ("shared_expert_intermediate_size", 0.0),
    ("moe_intermediate_size", 0.0),
];

/// The text model's config as MLX-LM's `ModelArgs.from_dict` and
/// `TextModelArgs` read it: `text_config` (or the whole config where there is
/// none) with the defaults above; RoPE from `rope_parameters` (its
/// `rope_theta`, default 100000, and `partial_rotary_factor`, default 0.25;
/// multimodal RoPE is plain RoPE for text), or from the top-level fields when
/// `rope_parameters` is empty; the top-level quantization, its per-layer
/// entries named as the text model's weights are.
pub(super) fn text_config(raw: &Value) -> std::result::Result<Value, String> {
    let top = raw.as_object().ok_or("config.json must hold an object")?;
    let mut text: Map<String, Value> = match top.get("text_config") {
        None | Some(Value::Null) => top.clone(),
        Some(Value::Object(t)) => t.clone(),
        Some(other) => return Err(format!("\"text_config\" must be an object, got {other}")),
    };
    text.insert("model_type".into(), top.get("model_type").cloned().unwrap_or(Value::Null));
    text.entry("tie_word_embeddings").or_insert(Value::from(false));
    text.entry("norm_topk_prob").or_insert(Value::from(true));
    let default_rope = serde_json::json!({ "type": "default", "rope_theta": 100000, "partial_rotary_factor": 0.25 });
    let rope = match text.get("rope_parameters") {
        None => Some(default_rope),
        Some(Value::Object(p)) if !p.is_empty() => Some(Value::Object(p.clone())),
        Some(Value::Object(_)) | Some(Value::Null) => None,
        Some(other) => return Err(format!("\"rope_parameters\" must be an object, got {other}")),
    };
    if let Some(Value::Object(mut p)) = rope {
        let theta = p.get("rope_theta").cloned().unwrap_or(Value::from(100000.0));
        let partial = p.get("partial_rotary_factor").cloned().unwrap_or(Value::from(0.25));
        if let Some(kind) = p.remove("rope_type") {
            p.entry("type").or_insert(kind);
        }
        if p.get("type").and_then(Value::as_str) == Some("mrope") {
            p.insert("type".into(), Value::from("default"));
        }
        text.insert("rope_theta".into(), theta);
        text.insert("partial_rotary_factor".into(), partial);
        text.insert("rope_scaling".into(), Value::Object(p));
    } else {
        text.entry("rope_theta").or_insert(Value::from(100000.0));
        text.entry("partial_rotary_factor").or_insert(Value::from(0.25));
    }
    text.remove("rope_parameters");
    if let Some(Value::Object(q)) = top.get("quantization") {
        let renamed = q.iter().map(|(k, v)| (k.strip_prefix("language_model.").unwrap_or(k).to_string(), v.clone())).collect();
        text.insert("quantization".into(), Value::Object(renamed));
    }
    family_config::with_defaults(&Value::Object(text), DEFAULTS).map(Value::Object)
}

/// MLX-LM's `Model.sanitize` and `TextModel.sanitize`: vision and multi-token
/// prediction weights dropped, the text weights' `language_model.` prefix
/// taken off; a Hugging Face checkpoint (convolution weights as
/// `[channels, 1, taps]`) has them turned to MLX's `[channels, taps, 1]` and
/// its zero-centred norms (`input_layernorm`, `post_attention_layernorm`, the
/// final norm, q/k norms) shifted by one; `qwen3_5_moe`'s fused
/// `experts.gate_up_proj` split into the experts' gate and up projections.
pub(super) fn sanitize(config: &ModelConfig, w: &mut Weights) -> Result<()> {
    w.discard(|k| k.starts_with("vision_tower") || k.starts_with("model.visual") || k.contains("mtp."));
    w.rename_prefix("model.language_model.", "model.");
    w.strip_prefix("language_model.");
    if config.model_type == "qwen3_5_moe" {
        for l in 0..config.num_hidden_layers {
            let p = format!("model.layers.{l}.mlp");
            if !w.contains(&format!("{p}.experts.gate_up_proj")) {
                continue;
            }
            w.rewrite(&format!("{p}.experts.gate_up_proj"), |v| {
                let mid = v.dim(-2) / 2;
                Ok(vec![
                    (format!("{p}.switch_mlp.gate_proj.weight"), v.slice_axis(-2, 0, mid)?),
                    (format!("{p}.switch_mlp.up_proj.weight"), v.slice_axis(-2, mid, 2 * mid)?),
                ])
            })?;
            w.rewrite(&format!("{p}.experts.down_proj"), |v| Ok(vec![(format!("{p}.switch_mlp.down_proj.weight"), v.clone())]))?;
        }
    }
    let names = w.names();
    let from_hf = names.iter().any(|n| n.contains("conv1d.weight") && w.shape(n).is_some_and(|s| s.last() != Some(&1)));
    const NORMS: [&str; 5] = [".input_layernorm.weight", ".post_attention_layernorm.weight", "model.norm.weight", ".q_norm.weight", ".k_norm.weight"];
    for name in names {
        let shape = w.shape(&name).unwrap_or_default();
        if name.contains("conv1d.weight") && shape.len() == 3 && shape[2] != 1 {
            w.rewrite(&name, |v| Ok(vec![(name.clone(), v.transpose(&[0, 2, 1])?)]))?;
        } else if from_hf && shape.len() == 1 && NORMS.iter().any(|s| name.ends_with(s)) {
            w.rewrite(&name, |v| Ok(vec![(name.clone(), v.add_scalar(1.0)?)]))?;
        }
    }
    Ok(())
}

/// What the text config adds to the shared one.
struct Args {
    /// Per layer: Gated DeltaNet (true) or attention.
    linear: Vec<bool>,
    delta: Dims,
    /// `(experts, top_k, expert width, shared expert width, norm_topk_prob)` when the MLP is a mixture.
    moe: Option<(i32, i32, i32, i32, bool)>,
}

fn args(c: &ModelConfig) -> Result<Args> {
    let bad = |what: String| LmError::InvalidWeights(format!("config.json: {what}"));
    let int = |key: &str, min: i64| -> Result<i32> {
        let v = c.raw.get(key).ok_or_else(|| bad(format!("missing \"{key}\"")))?;
        v.as_i64()
            .filter(|&n| n >= min && n <= 1 << 24)
            .map(|n| n as i32)
            .ok_or_else(|| bad(format!("\"{key}\" must be an integer of at least {min}, got {v}")))
    };
    let interval = int("full_attention_interval", 1)?;
    let n = c.num_hidden_layers;
    let linear: Vec<bool> = (0..n).map(|i| (i + 1) % interval != 0).collect();
    // MLX-LM places the layers by the interval; a layer_types list that says otherwise
    // describes other weights.
    if let Some(types) = c.raw.get("layer_types").filter(|v| !v.is_null()) {
        let types = types.as_array().ok_or_else(|| bad("layer_types must be a list".into()))?;
        if types.len() != n as usize {
            return Err(bad(format!("layer_types lists {} layers, the model has {n}", types.len())));
        }
        for (i, t) in types.iter().enumerate() {
            let says = match t.as_str() {
                Some("linear_attention") => true,
                Some("full_attention") => false,
                _ => return Err(bad(format!("layer_types holds {t}, not linear_attention or full_attention"))),
            };
            if says != linear[i] {
                return Err(bad(format!("layer_types makes layer {i} {t}, full_attention_interval {interval} makes it the other kind")));
            }
        }
    }
    let (k_heads, v_heads) = (int("linear_num_key_heads", 1)?, int("linear_num_value_heads", 1)?);
    if v_heads % k_heads != 0 {
        return Err(bad(format!("linear_num_value_heads ({v_heads}) must be a multiple of linear_num_key_heads ({k_heads})")));
    }
    let delta = Dims {
        hidden: c.hidden_size,
        k_heads,
        v_heads,
        k_dim: int("linear_key_head_dim", 1)?,
        v_dim: int("linear_value_head_dim", 1)?,
        // One tap would keep no past inputs: MLX-LM's state slice then keeps them all.
        kernel: int("linear_conv_kernel_dim", 2)?,
        eps: c.rms_norm_eps,
    };
    let experts = int("num_experts", 0)?;
    let moe = match experts {
        0 => None,
        _ => {
            let top_k = int("num_experts_per_tok", 1)?;
            if top_k > experts {
                return Err(bad(format!("num_experts_per_tok {top_k} must be at most num_experts {experts}")));
            }
            let norm = c.raw.get("norm_topk_prob").and_then(Value::as_bool).ok_or_else(|| bad("\"norm_topk_prob\" must be true or false".into()))?;
            Some((experts, top_k, int("moe_intermediate_size", 1)?, int("shared_expert_intermediate_size", 1)?, norm))
        }
    };
    Ok(Args { linear, delta, moe })
}

enum Mixer {
    Linear(GatedDeltaNet),
    Attention(SelfAttention),
}

struct Layer {
    mixer: Mixer,
    mlp: Box<dyn FeedForward>,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
}

pub struct Qwen35 {
    config: ModelConfig,
    embed_tokens: Embedding,
    /// This process's layers: all of them, or in a pipeline `first..` of the model's.
    layers: Vec<Layer>,
    first: usize,
    /// This process's place in a pipeline, if the model is split into one.
    pipeline: Option<Shard>,
    /// Key/value heads of each attention layer (this process's share in a tensor-parallel group).
    kv_heads: i32,
    /// Each layer's cache kind.
    layout: Vec<LayerKind>,
    norm: RmsNorm,
    lm_head: Option<Linear>,
    rope: Rope,
    dtype: Dtype,
}

pub(super) fn build(config: ModelConfig, mut w: Weights, dtype: Option<Dtype>, progress: &mut dyn FnMut(f64)) -> Result<Box<dyn LanguageModel>> {
    let a = args(&config)?;
    let c = &config;
    let dtype = dtype.or(w.native_dtype()).unwrap_or(Dtype::Float32);
    let (h, hd, eps) = (c.hidden_size, c.head_dim, c.rms_norm_eps);
    let (nq, nkv) = (c.num_attention_heads * hd, c.num_key_value_heads * hd);
    let embed_tokens = match c.tie_word_embeddings {
        true => w.tied_embedding("model.embed_tokens", c.vocab_size, h)?,
        false => w.embedding("model.embed_tokens", c.vocab_size, h)?,
    };
    // Split as MLX-LM's shard(): each process attends with its share of the heads.
    let heads = parallel::divide(w.tensor_shard(), c.num_attention_heads, "num_attention_heads")?;
    // Key/value heads fewer than the processes are repeated so that each holds one.
    let kv_heads = match w.tensor_shard() {
        Some(s) => s.divide_repeated(c.num_key_value_heads, "num_key_value_heads")?,
        None => c.num_key_value_heads,
    };
    // Or as its pipeline(): this process builds its own layers and drops the others' weights.
    let pipeline = w.pipeline().cloned();
    let own = match &pipeline {
        Some(s) => s.pipeline_layers(c.num_hidden_layers)?,
        None => 0..c.num_hidden_layers,
    };
    let mut layers = Vec::with_capacity(own.len());
    for (i, &linear) in a.linear.iter().enumerate() {
        let p = format!("model.layers.{i}");
        if !own.contains(&(i as i32)) {
            let layer = format!("{p}.");
            w.discard(|k| k.starts_with(&layer));
            continue;
        }
        let mixer = if linear {
            Mixer::Linear(GatedDeltaNet::load(&mut w, &format!("{p}.linear_attn"), a.delta)?)
        } else {
            for kv in ["k_proj", "v_proj"] {
                w.cut_layer(&format!("{p}.self_attn.{kv}"), Cut::Heads(c.num_key_value_heads));
            }
            Mixer::Attention(SelfAttention {
                qkv: Projections::load(&mut w, &format!("{p}.self_attn"), h, 2 * nq, nkv, c.qkv_bias)?,
                o_proj: w.linear_split(&format!("{p}.self_attn.o_proj"), nq, h, c.o_bias, Split::Inputs)?,
                q_norm: Some(w.rms_norm(&format!("{p}.self_attn.q_norm.weight"), hd, eps)?),
                k_norm: Some(w.rms_norm(&format!("{p}.self_attn.k_norm.weight"), hd, eps)?),
                v_norm: None,
                heads,
                kv_heads,
                head_dim: hd,
                scale: (hd as f64).powf(-0.5) as f32,
                position_scale: None,
                sinks: None,
                output_gate: true,
            })
        };
        let prefix = format!("{p}.mlp");
        let mlp: Box<dyn FeedForward> = match a.moe {
            None => Box::new(Mlp::load(&mut w, &prefix, h, c.intermediate_size, false)?),
            Some((experts, top_k, hidden, shared, norm)) => {
                let routed = SparseMoe::load(&mut w, &prefix, h, hidden, experts, top_k, norm)?;
                Box::new(SharedExpertMoe::load(&mut w, &prefix, h, shared, routed)?)
            }
        };
        layers.push(Layer {
            mixer,
            mlp,
            input_layernorm: w.rms_norm(&format!("{p}.input_layernorm.weight"), h, eps)?,
            post_attention_layernorm: w.rms_norm(&format!("{p}.post_attention_layernorm.weight"), h, eps)?,
        });
    }
    let norm = w.rms_norm("model.norm.weight", h, eps)?;
    let lm_head = match c.tie_word_embeddings {
        true => None,
        // Split by vocabulary in a tensor-parallel group, as MLX-LM's shard().
        false => Some(w.linear_gathered("lm_head", h, c.vocab_size)?),
    };
    w.finish_with_progress(progress)?;
    let first = own.start as usize;
    let layout = a.linear.iter().map(|&l| if l { LayerKind::Arrays(2) } else { LayerKind::Growing }).collect();
    Ok(Box::new(Qwen35 { rope: build_rope(&config)?, config, embed_tokens, layers, first, pipeline, kv_heads, layout, norm, lm_head, dtype }))
}

impl LanguageModel for Qwen35 {
    fn forward(&self, ids: &Array, caches: &mut [Box<dyn Cache>], last_only: bool) -> mlx::Result<Array> {
        let h = self.embed_tokens.forward(ids)?;
        let l = h.dim(1);
        // In a pipeline, as MLX-LM's Qwen3_5TextModel: from the next rank, through this rank's layers, on.
        let mut h = match &self.pipeline {
            Some(p) => p.stage_input(h)?,
            None => h,
        };
        for (layer, cache) in self.layers.iter().zip(caches[self.first..].iter_mut()) {
            let x = layer.input_layernorm.forward(&h)?;
            let r = match &layer.mixer {
                Mixer::Linear(delta) => delta.forward(&x, cache.as_mut())?,
                Mixer::Attention(attn) => attn.forward(&x, cache.as_mut(), &self.rope)?,
            };
            let hh = h.add(&r)?;
            h = hh.add(&layer.mlp.forward(&layer.post_attention_layernorm.forward(&hh)?)?)?;
        }
        if let Some(p) = &self.pipeline {
            h = p.stage_output(h, caches[self.first + self.layers.len() - 1].as_mut())?;
        }
        // The norm is per position, so slicing first gives the same values for less work.
        if last_only && l > 1 {
            h = h.slice_axis(1, l - 1, l)?;
        }
        super::decoder::logits(&self.embed_tokens, self.lm_head.as_ref(), &self.norm.forward(&h)?)
    }

    /// Attention layers grow; linear ones keep their convolution inputs and
    /// recurrent state (every layer of the model's, this process's or not).
    fn cache_layout(&self) -> Option<Vec<LayerKind>> {
        Some(self.layout.clone())
    }

    fn kv_heads(&self) -> i32 {
        self.kv_heads
    }

    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn dtype(&self) -> Dtype {
        self.dtype
    }
}
