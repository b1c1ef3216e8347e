//! Gemma 4 text models (`gemma4_text`, and the text model of `gemma4`
//! checkpoints), as MLX-LM's `gemma4_text.py`: sliding and full attention
//! layers by `layer_types` (else every `sliding_window_pattern`-th is full),
//! full layers with their own head size (`global_head_dim`), RoPE
//! (`rope_parameters` per layer type: proportional on full layers) and, with
//! `attention_k_eq_v`, values taken from the keys' projection; standard
//! RMSNorms (q/k norms, and a weightless one on values), attention scaled by 1;
//! the last `num_kv_shared_layers` layers attend over the keys and values of
//! the last earlier layer of their type and have no cache (MLX-LM's
//! `make_cache` makes caches for the others only) and, with
//! `use_double_wide_mlp`, twice as wide an MLP; a per-layer input (an
//! embedding of the ids plus a projection of the embedding, `hidden_size_per_layer_input`
//! wide per layer) gated into each layer; optionally a mixture of experts
//! beside the MLP (`enable_moe_block`); every layer's output times its
//! `layer_scalar`; the head tied unless `tie_word_embeddings` is false, its
//! logits soft-capped.
use mlx::nn::{self, Embedding, Linear, RmsNorm, Rope};
use mlx::{Array, Dtype};
use serde_json::Value;

use super::attention::{Attended, Projections, SelfAttention};
use super::decoder::{FeedForward, Mlp};
use super::family_config;
use super::moe::{Activation, SwitchGlu};
use super::LanguageModel;
use crate::cache::{Cache, LayerKind};
use crate::config::ModelConfig;
use crate::error::{LmError, Result};
use crate::weights::Weights;

fn invalid(what: String) -> LmError {
    LmError::InvalidWeights(format!("config.json: {what}"))
}

/// MLX-LM's `gemma4_text.ModelArgs` defaults for the fields the shared config reads.
const DEFAULTS: &[(&str, f64)] = &[
    ("hidden_size", 1536.0),
    ("num_hidden_layers", 35.0),
    ("intermediate_size", 6144.0),
    ("num_attention_heads", 8.0),
    ("head_dim", 256.0),
    ("rms_norm_eps", 1.0e-6),
    ("vocab_size", 262144.0),
    ("num_key_value_heads", 1.0),
    ("max_position_embeddings", 131072.0),
    ("sliding_window", 512.0),
];

/// A `gemma4_text` config with MLX-LM's defaults where it names nothing.
pub(super) fn with_defaults(raw: &Value) -> std::result::Result<Value, String> {
    family_config::with_defaults(raw, DEFAULTS).map(Value::Object)
}

/// The text model's config of a `gemma4` checkpoint, as MLX-LM's `gemma4.ModelArgs`
/// builds it: `text_config` (empty where there is none), its `vocab_size` always
/// the top level's (default 262144), 8 query / 1 key-value heads where it names
/// none, then the text defaults; the top-level quantization.
pub(super) fn text_config(raw: &Value) -> std::result::Result<Value, String> {
    let mut text = match raw.get("text_config") {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(t)) => t.clone(),
        Some(_) => return Err("a gemma4 config's \"text_config\" must be an object".into()),
    };
    text.insert("model_type".into(), Value::from("gemma4"));
    text.insert("vocab_size".into(), raw.get("vocab_size").cloned().unwrap_or(Value::from(262144)));
    text.entry("num_attention_heads").or_insert(Value::from(8));
    text.entry("num_key_value_heads").or_insert(Value::from(1));
    if let Some(q) = raw.get("quantization") {
        text.insert("quantization".into(), q.clone());
    }
    with_defaults(&Value::Object(text))
}

/// One layer type's RoPE, from its `rope_parameters` entry as MLX-LM's
/// `initialize_rope` reads it.
struct Gemma4Rope {
    kind: String,
    theta: f32,
    partial: f64,
    factor: Option<f64>,
}

impl Gemma4Rope {
    /// `rope_parameters[layer_type]` (an empty entry where it has none), or
    /// MLX-LM's defaults where the config has no `rope_parameters`.
    fn of(raw: &Value, layer_type: &str) -> Result<Gemma4Rope> {
        let entry = match raw.get("rope_parameters") {
            None | Some(Value::Null) => {
                return Ok(match layer_type {
                    "full_attention" => Gemma4Rope { kind: "proportional".into(), theta: 1_000_000.0, partial: 0.25, factor: None },
                    _ => Gemma4Rope { kind: "default".into(), theta: 10_000.0, partial: 1.0, factor: None },
                })
            }
            Some(Value::Object(p)) => p.get(layer_type).cloned().unwrap_or(Value::Object(Default::default())),
            Some(v) => return Err(invalid(format!("rope_parameters must be an object, got {v}"))),
        };
        if !entry.is_object() {
            return Err(invalid(format!("rope_parameters.{layer_type} must be an object, got {entry}")));
        }
        let kind = match (entry.get("type").and_then(Value::as_str), entry.get("rope_type").and_then(Value::as_str)) {
            (Some(t), _) | (None, Some(t)) => t.to_string(),
            (None, None) => "default".into(),
        };
        let num = |key: &str, default: f64| {
            family_config::number(&entry, key, default).map_err(|_| invalid(format!("rope_parameters.{layer_type}.{key} must be a positive number")))
        };
        Ok(Gemma4Rope {
            theta: num("rope_theta", 10_000.0)? as f32,
            partial: num("partial_rotary_factor", 1.0)?,
            factor: entry.get("factor").filter(|v| !v.is_null()).map(|_| num("factor", 1.0)).transpose()?,
            kind,
        })
    }

    /// The RoPE over heads of `dims` features.
    fn build(&self, dims: i32, traditional: bool) -> Result<Rope> {
        let base = self.theta;
        match self.kind.as_str() {
            "default" => Ok(Rope::Standard { dims, traditional, base, scale: 1.0 }),
            "linear" => {
                let factor = self.factor.ok_or_else(|| invalid("linear RoPE needs a \"factor\"".into()))?;
                Ok(Rope::Standard { dims, traditional, base, scale: (1.0 / factor) as f32 })
            }
            "proportional" => {
                let rotated = (dims as f64 * self.partial) as i32;
                Rope::proportional(dims, rotated, traditional, base, self.factor.unwrap_or(1.0) as f32).map_err(|e| invalid(e.message))
            }
            other => {
                Err(LmError::UnsupportedModel(format!("Gemma 4 RoPE type \"{other}\" is not supported (supported: default, linear, proportional)")))
            }
        }
    }
}

/// What Gemma 4 adds to the shared config (MLX-LM's defaults where it names nothing).
struct Args {
    /// Per layer: full attention (else sliding).
    full: Vec<bool>,
    sliding_window: i32,
    global_head_dim: i32,
    /// Key/value heads of full layers (`num_global_key_value_heads` with `attention_k_eq_v`).
    global_kv_heads: i32,
    k_eq_v: bool,
    /// The first layer without keys of its own (the layer count when none).
    first_shared: usize,
    double_wide: bool,
    /// `hidden_size_per_layer_input` (0: no per-layer inputs) and its vocabulary.
    per_layer: i32,
    per_layer_vocab: i32,
    softcap: Option<f32>,
    /// `(num_experts, top_k_experts, moe_intermediate_size)` with `enable_moe_block`.
    moe: Option<(i32, i32, i32)>,
    full_rope: Gemma4Rope,
    sliding_rope: Gemma4Rope,
}

impl Args {
    fn from(c: &ModelConfig) -> Result<Args> {
        let raw = &c.raw;
        let n = c.num_hidden_layers as usize;
        let int = |key: &str, default: i64, min: i64| family_config::int(raw, key, default, min);
        let flag = |key: &str, default: bool| family_config::flag(raw, key, default);
        let sliding_window = int("sliding_window", 512, 1)? as i32;
        let pattern = int("sliding_window_pattern", 5, 1)? as usize;
        let full = match raw.get("layer_types").filter(|v| !v.is_null()) {
            None => (0..n).map(|i| i % pattern == pattern - 1).collect(),
            Some(_) => family_config::layer_kinds(c, |_| "full_attention")?.iter().map(|k| *k == LayerKind::Growing).collect(),
        };
        // `global_head_dim` when it is set and not 0 (MLX-LM tests it for truth).
        let global_head_dim = match raw.get("global_head_dim") {
            Some(Value::Null) => 0,
            _ => int("global_head_dim", 512, 0)? as i32,
        };
        let global_head_dim = if global_head_dim == 0 { c.head_dim } else { global_head_dim };
        let k_eq_v = flag("attention_k_eq_v", false)?;
        let global_kv_heads = match raw.get("num_global_key_value_heads") {
            Some(v) if k_eq_v && !v.is_null() => int("num_global_key_value_heads", 0, 1)? as i32,
            _ => c.num_key_value_heads,
        };
        if c.num_attention_heads % global_kv_heads != 0 {
            return Err(invalid(format!(
                "num_attention_heads ({}) is not a multiple of num_global_key_value_heads ({global_kv_heads})",
                c.num_attention_heads
            )));
        }
        let shared = int("num_kv_shared_layers", 20, 0)? as usize;
        if shared >= n {
            return Err(invalid(format!("num_kv_shared_layers ({shared}) leaves none of the {n} layers with keys and values of its own")));
        }
        let per_layer = match raw.get("hidden_size_per_layer_input") {
            Some(Value::Null) => 0,
            _ => int("hidden_size_per_layer_input", 256, 0)? as i32,
        };
        let softcap = match raw.get("final_logit_softcapping") {
            Some(Value::Null) => None,
            _ => Some(family_config::number(raw, "final_logit_softcapping", 30.0)? as f32),
        };
        let moe = match flag("enable_moe_block", false)? {
            false => None,
            true => {
                let need = |key: &str| {
                    int(key, 0, 1).and_then(|v| if v > 0 { Ok(v as i32) } else { Err(invalid(format!("enable_moe_block needs \"{key}\""))) })
                };
                let (experts, top_k) = (need("num_experts")?, need("top_k_experts")?);
                if top_k > experts {
                    return Err(invalid(format!("top_k_experts ({top_k}) is more than num_experts ({experts})")));
                }
                Some((experts, top_k, need("moe_intermediate_size")?))
            }
        };
        let args = Args {
            sliding_window,
            global_head_dim,
            global_kv_heads,
            k_eq_v,
            first_shared: n - shared,
            double_wide: flag("use_double_wide_mlp", true)?,
            per_layer,
            per_layer_vocab: int("vocab_size_per_layer_input", 262144, 1)? as i32,
            softcap,
            moe,
            full_rope: Gemma4Rope::of(raw, "full_attention")?,
            sliding_rope: Gemma4Rope::of(raw, "sliding_attention")?,
            full,
        };
        // A KV-shared layer reads the last earlier layer of its type, which must exist.
        for j in args.first_shared..n {
            if args.source(j).is_none() {
                let kind = if args.full[j] { "full" } else { "sliding" };
                return Err(invalid(format!(
                    "layer {j} shares the keys of an earlier {kind} layer, but no layer before {} is one",
                    args.first_shared
                )));
            }
        }
        Ok(args)
    }

    /// The layer whose keys and values layer `i` attends over (MLX-LM's `previous_kvs`).
    fn source(&self, i: usize) -> Option<usize> {
        if i < self.first_shared {
            return Some(i);
        }
        (0..self.first_shared).rev().find(|&j| self.full[j] == self.full[i])
    }

    /// Head size and key/value heads of layer `i`'s attention.
    fn heads(&self, i: usize, c: &ModelConfig) -> (i32, i32) {
        if self.full[i] {
            (self.global_head_dim, if self.k_eq_v { self.global_kv_heads } else { c.num_key_value_heads })
        } else {
            (c.head_dim, c.num_key_value_heads)
        }
    }
}

/// MLX-LM's `gemma4_text.sanitize`: no rotary tables or activation ranges, no
/// key/value weights in KV-shared layers, Hugging Face's fused experts
/// (`experts.gate_up_proj`, `experts.down_proj`) as MLX-LM's `switch_glu`.
pub(super) fn sanitize(config: &ModelConfig, w: &mut Weights) -> Result<()> {
    let shared = family_config::int(&config.raw, "num_kv_shared_layers", 20, 0)?;
    let first_shared = config.num_hidden_layers as i64 - shared;
    let layer_of = |k: &str| k.split("layers.").nth(1)?.split('.').next()?.parse::<i64>().ok();
    w.discard(|k| {
        ["self_attn.rotary_emb", "input_max", "input_min", "output_max", "output_min"].iter().any(|s| k.contains(s))
            || ([".self_attn.k_proj", ".self_attn.v_proj", ".self_attn.k_norm"].iter().any(|s| k.contains(s))
                && layer_of(k).is_some_and(|i| i >= first_shared))
    });
    for name in w.names() {
        if let Some(base) = name.strip_suffix(".experts.gate_up_proj") {
            let base = format!("{base}.experts.switch_glu");
            w.rewrite(&name, |v| {
                let halves = v.split_equal(2, -2)?;
                Ok(vec![(format!("{base}.gate_proj.weight"), halves[0].clone()), (format!("{base}.up_proj.weight"), halves[1].clone())])
            })?;
        } else if let Some(base) = name.strip_suffix(".experts.down_proj") {
            let to = format!("{base}.experts.switch_glu.down_proj.weight");
            w.rewrite(&name, |v| Ok(vec![(to, v.clone())]))?;
        }
    }
    Ok(())
}

/// `gemma4` checkpoints (MLX-LM's `gemma4.sanitize`): the vision and audio
/// towers dropped, the text model's weights under `model.language_model.`
/// (Hugging Face) or `language_model.` (MLX) taken as `gemma4_text`'s.
pub(super) fn sanitize_multimodal(config: &ModelConfig, w: &mut Weights) -> Result<()> {
    const OTHER: &[&str] = &["vision_tower", "multi_modal_projector", "audio_tower", "embed_audio", "embed_vision", "vision_embedder"];
    w.discard(|k| OTHER.iter().any(|o| k.strip_prefix("model.").unwrap_or(k).starts_with(o)));
    w.rename_prefix("model.language_model.", "language_model.model.");
    w.strip_prefix("model.");
    w.strip_prefix("language_model.");
    sanitize(config, w)
}

/// The router: RMS-normed input (its `scale` times `hidden^-1/2` as the
/// weight), the top `top_k` of its expert scores softmaxed, times each chosen
/// expert's `per_expert_scale`.
struct Moe {
    proj: Linear,
    /// `scale * hidden^-0.5`, as MLX-LM computes it on every call.
    norm_weight: Array,
    per_expert_scale: Array,
    experts: SwitchGlu,
    top_k: i32,
    num_experts: i32,
    eps: f32,
    pre_feedforward_layernorm_2: RmsNorm,
    post_feedforward_layernorm_1: RmsNorm,
    post_feedforward_layernorm_2: RmsNorm,
}

impl Moe {
    fn load(w: &mut Weights, p: &str, c: &ModelConfig, (experts, top_k, hidden): (i32, i32, i32), derived: &mut Vec<Array>) -> Result<Moe> {
        let (h, eps) = (c.hidden_size, c.rms_norm_eps);
        let scale = w.take(&format!("{p}.router.scale"), &[h])?;
        let norm_weight = scale.multiply_scalar((h as f64).powf(-0.5)).map_err(|e| LmError::Mlx(e.message))?;
        derived.push(norm_weight.clone());
        Ok(Moe {
            proj: w.linear(&format!("{p}.router.proj"), h, experts, false)?,
            norm_weight,
            per_expert_scale: w.take(&format!("{p}.router.per_expert_scale"), &[experts])?,
            experts: SwitchGlu::load(w, &format!("{p}.experts.switch_glu"), experts, h, hidden, false, Activation::GeGlu)?,
            top_k,
            num_experts: experts,
            eps,
            pre_feedforward_layernorm_2: w.rms_norm(&format!("{p}.pre_feedforward_layernorm_2.weight"), h, eps)?,
            post_feedforward_layernorm_1: w.rms_norm(&format!("{p}.post_feedforward_layernorm_1.weight"), h, eps)?,
            post_feedforward_layernorm_2: w.rms_norm(&format!("{p}.post_feedforward_layernorm_2.weight"), h, eps)?,
        })
    }

    /// The experts' share of the feed-forward output for the residual `h`.
    fn forward(&self, h: &Array) -> mlx::Result<Array> {
        let scores = self.proj.forward(&mlx::fast::rms_norm(h, Some(&self.norm_weight), self.eps)?)?;
        let (e, k) = (self.num_experts, self.top_k);
        let inds = scores.argpartition(e - k, -1)?.slice_axis(-1, e - k, e)?;
        let weights = scores.take_along_axis(&inds, -1)?.softmax(&[-1], false)?;
        let weights = weights.multiply(&self.per_expert_scale.take(&inds, Some(0))?)?;
        let y = self.experts.forward(&self.pre_feedforward_layernorm_2.forward(h)?, &inds)?;
        let y = weights.expand_dims(&[-1])?.multiply(&y)?.sum(&[-2], false)?;
        self.post_feedforward_layernorm_2.forward(&y)
    }
}

/// A layer's gate for its per-layer input, and the projection back.
struct PerLayerGate {
    gate: Linear,
    projection: Linear,
    norm: RmsNorm,
}

struct Layer {
    attn: SelfAttention,
    full: bool,
    /// The layer whose keys and values it attends over (itself, or an earlier one).
    source: usize,
    /// Whether a later layer attends over this one's keys and values.
    shared: bool,
    mlp: Mlp,
    moe: Option<Moe>,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
    pre_feedforward_layernorm: RmsNorm,
    post_feedforward_layernorm: RmsNorm,
    per_layer: Option<PerLayerGate>,
    layer_scalar: Array,
}

/// The model-level half of the per-layer inputs.
struct PerLayerInputs {
    embed: Embedding,
    projection: Linear,
    norm: RmsNorm,
    width: i32,
}

pub struct Gemma4 {
    config: ModelConfig,
    args: Args,
    embed_tokens: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    lm_head: Option<Linear>,
    per_layer_inputs: Option<PerLayerInputs>,
    full_rope: Rope,
    sliding_rope: Rope,
    dtype: Dtype,
}

pub(super) fn build(config: ModelConfig, mut w: Weights, dtype: Option<Dtype>, progress: &mut dyn FnMut(f64)) -> Result<Box<dyn LanguageModel>> {
    let args = Args::from(&config)?;
    let c = &config;
    let dtype = dtype.or(w.native_dtype()).unwrap_or(Dtype::Float32);
    let (h, eps, n) = (c.hidden_size, c.rms_norm_eps, c.num_hidden_layers);
    let mut derived = Vec::new();
    let tied = family_config::flag(&c.raw, "tie_word_embeddings", true)?;
    let embed_tokens = match tied {
        true => w.tied_embedding("model.embed_tokens", c.vocab_size, h)?,
        false => w.embedding("model.embed_tokens", c.vocab_size, h)?,
    };
    let per_layer_inputs = match args.per_layer {
        0 => None,
        p => Some(PerLayerInputs {
            embed: w.embedding("model.embed_tokens_per_layer", args.per_layer_vocab, n * p)?,
            projection: w.linear("model.per_layer_model_projection", h, n * p, false)?,
            norm: w.rms_norm("model.per_layer_projection_norm.weight", p, eps)?,
            width: p,
        }),
    };
    let sources: Vec<usize> = (0..n as usize).map(|i| args.source(i).unwrap_or(i)).collect();
    let mut layers = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        let p = format!("model.layers.{i}");
        let (hd, kv_heads) = args.heads(i, c);
        let norm = |w: &mut Weights, name: &str, dims: i32| w.rms_norm(&format!("{p}.{name}.weight"), dims, eps);
        let a = format!("{p}.self_attn");
        let q = |w: &mut Weights| w.linear(&format!("{a}.q_proj"), h, c.num_attention_heads * hd, false);
        let owns_keys = i < args.first_shared;
        let qkv = if !owns_keys {
            Projections::QueriesOnly { q: q(&mut w)? }
        } else if args.k_eq_v && args.full[i] {
            Projections::KeysAsValues { q: q(&mut w)?, k: w.linear(&format!("{a}.k_proj"), h, kv_heads * hd, false)? }
        } else {
            // Gemma 4 does not split across processes, so these are whole layers (or held as one).
            Projections::load(&mut w, &a, h, c.num_attention_heads * hd, kv_heads * hd, false)?
        };
        let attn = SelfAttention {
            qkv,
            o_proj: w.linear(&format!("{a}.o_proj"), c.num_attention_heads * hd, h, false)?,
            q_norm: Some(norm(&mut w, "self_attn.q_norm", hd)?),
            k_norm: if owns_keys { Some(norm(&mut w, "self_attn.k_norm", hd)?) } else { None },
            v_norm: Some(eps),
            heads: c.num_attention_heads,
            kv_heads,
            head_dim: hd,
            scale: 1.0,
            position_scale: None,
            sinks: None,
            output_gate: false,
        };
        let wide = if args.double_wide && !owns_keys { 2 } else { 1 };
        let per_layer = match args.per_layer {
            0 => None,
            pw => Some(PerLayerGate {
                gate: w.linear(&format!("{p}.per_layer_input_gate"), h, pw, false)?,
                projection: w.linear(&format!("{p}.per_layer_projection"), pw, h, false)?,
                norm: norm(&mut w, "post_per_layer_input_norm", h)?,
            }),
        };
        layers.push(Layer {
            attn,
            full: args.full[i],
            source: sources[i],
            shared: sources.iter().enumerate().any(|(j, &s)| s == i && j != i),
            mlp: Mlp::load(&mut w, &format!("{p}.mlp"), h, wide * c.intermediate_size, false)?.with_activation(Activation::GeGlu),
            moe: match args.moe {
                Some(m) => Some(Moe::load(&mut w, &p, c, m, &mut derived)?),
                None => None,
            },
            input_layernorm: norm(&mut w, "input_layernorm", h)?,
            post_attention_layernorm: norm(&mut w, "post_attention_layernorm", h)?,
            pre_feedforward_layernorm: norm(&mut w, "pre_feedforward_layernorm", h)?,
            post_feedforward_layernorm: norm(&mut w, "post_feedforward_layernorm", h)?,
            per_layer,
            layer_scalar: w.take(&format!("{p}.layer_scalar"), &[1])?,
        });
    }
    let final_norm = w.rms_norm("model.norm.weight", h, eps)?;
    let lm_head = if tied { None } else { Some(w.linear("lm_head", h, c.vocab_size, false)?) };
    w.finish_with_progress(progress)?;
    mlx::transforms::eval(&derived.iter().collect::<Vec<_>>()).map_err(|e| LmError::Mlx(e.message))?;
    let full_rope = args.full_rope.build(args.global_head_dim, c.rope_traditional)?;
    let sliding_rope = args.sliding_rope.build(c.head_dim, c.rope_traditional)?;
    Ok(Box::new(Gemma4 { config, args, embed_tokens, layers, norm: final_norm, lm_head, per_layer_inputs, full_rope, sliding_rope, dtype }))
}

impl Gemma4 {
    /// Each layer's extra input `[B, L, layers, width]` (MLX-LM's
    /// `_get_per_layer_inputs` and `_project_per_layer_inputs`), from the ids
    /// and the scaled embeddings `h`.
    fn per_layer_inputs(&self, ids: &Array, h: &Array) -> mlx::Result<Option<Array>> {
        let Some(p) = &self.per_layer_inputs else { return Ok(None) };
        let (b, l, n) = (h.dim(0), h.dim(1), self.layers.len() as i32);
        let from_ids = p.embed.forward(ids)?.multiply_scalar((p.width as f64).powf(0.5))?.reshape(&[b, l, n, p.width])?;
        let projected = p.projection.forward(h)?.multiply_scalar((self.config.hidden_size as f64).powf(-0.5))?.reshape(&[b, l, n, p.width])?;
        let projected = p.norm.forward(&projected)?;
        Ok(Some(projected.add(&from_ids)?.multiply_scalar(0.5f64.sqrt())?))
    }
}

impl LanguageModel for Gemma4 {
    fn forward(&self, ids: &Array, caches: &mut [Box<dyn Cache>], last_only: bool) -> mlx::Result<Array> {
        if caches.len() < self.args.first_shared {
            return Err(mlx::Error::new(format!("a Gemma 4 model needs {} caches, got {}", self.args.first_shared, caches.len())));
        }
        let mut h = self.embed_tokens.forward(ids)?;
        h = h.multiply_scalar((self.config.hidden_size as f64).powf(0.5))?;
        let per_layer = self.per_layer_inputs(ids, &h)?;
        let l = h.dim(1);
        let mut kept: Vec<Option<Attended>> = self.layers.iter().map(|_| None).collect();
        for (i, layer) in self.layers.iter().enumerate() {
            let rope = if layer.full { &self.full_rope } else { &self.sliding_rope };
            let x = layer.input_layernorm.forward(&h)?;
            let r = if layer.source == i {
                let (r, attended) = layer.attn.forward_keeping(&x, caches[i].as_mut(), rope)?;
                if layer.shared {
                    kept[i] = Some(attended);
                }
                r
            } else {
                let shared = kept[layer.source].as_ref().ok_or_else(|| mlx::Error::new(format!("layer {i} has no keys to share")))?;
                layer.attn.forward_shared(&x, shared, rope)?
            };
            let hh = h.add(&layer.post_attention_layernorm.forward(&r)?)?;
            let mut f = layer.pre_feedforward_layernorm.forward(&hh)?;
            f = layer.mlp.forward(&f)?;
            if let Some(moe) = &layer.moe {
                f = moe.post_feedforward_layernorm_1.forward(&f)?.add(&moe.forward(&hh)?)?;
            }
            h = hh.add(&layer.post_feedforward_layernorm.forward(&f)?)?;
            if let (Some(g), Some(inputs)) = (&layer.per_layer, &per_layer) {
                let input = inputs.slice_axis(2, i as i32, i as i32 + 1)?.squeeze(&[2])?;
                let gate = nn::gelu_approx(&g.gate.forward(&h)?)?.multiply(&input)?;
                h = h.add(&g.norm.forward(&g.projection.forward(&gate)?)?)?;
            }
            h = h.multiply(&layer.layer_scalar)?;
        }
        // The norm is per position, so slicing first gives the same values for less work.
        if last_only && l > 1 {
            h = h.slice_axis(1, l - 1, l)?;
        }
        let logits = super::decoder::logits(&self.embed_tokens, self.lm_head.as_ref(), &self.norm.forward(&h)?)?;
        match self.args.softcap {
            Some(cap) => logits.divide_scalar(cap as f64)?.tanh()?.multiply_scalar(cap as f64),
            None => Ok(logits),
        }
    }

    /// As MLX-LM's `make_cache`: caches for the layers with keys of their own
    /// only (full: growing, sliding: a window of `sliding_window`).
    fn cache_layout(&self) -> Option<Vec<LayerKind>> {
        Some(
            (0..self.args.first_shared)
                .map(|i| if self.args.full[i] { LayerKind::Growing } else { LayerKind::Window(self.args.sliding_window) })
                .collect(),
        )
    }

    fn cache_heads(&self) -> Vec<(i32, i32)> {
        (0..self.args.first_shared)
            .map(|i| {
                let (hd, kv) = self.args.heads(i, &self.config);
                (kv, hd)
            })
            .collect()
    }

    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn dtype(&self) -> Dtype {
        self.dtype
    }
}
