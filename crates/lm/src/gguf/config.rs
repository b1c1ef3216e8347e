//! A GGUF file's model: its `config.json` as MLX-LM would read it, built from
//! llama.cpp's `<arch>.*` metadata, and its tensor names mapped to MLX-LM's.
use serde_json::{json, Map, Value};

use super::file::{GgmlType, GgufFile, Meta, TensorInfo};
use super::rope_freqs;
use super::tokenizer::Spm;
use crate::error::{LmError, Result};

/// What sets one llama.cpp architecture apart: a row of `ARCHS`.
pub struct Arch {
    /// `general.architecture`, and the prefix of its metadata keys.
    pub name: &'static str,
    /// The MLX-LM `model_type` it loads as.
    pub model_type: &'static str,
    /// llama.cpp's converter reorders the q/k rows for its rotary layout; the
    /// loader puts them back.
    pub permuted: bool,
    /// MLX-LM's name for `ffn_norm`, the norm before the MLP: Llama's second
    /// norm, Gemma's third of four.
    pub ffn_norm: &'static str,
    /// Gemma's RMSNorm scales by `1 + weight` and llama.cpp's converter stores
    /// `1 + weight`: the loader takes the 1 back off (in float32).
    pub norm_shift: bool,
    /// The dtype the model runs in when the caller names none (None: the
    /// tensors' own). Gemma 3's activations outgrow float16, and llama.cpp's
    /// CPU path runs it in float32.
    pub default_dtype: Option<mlx::Dtype>,
    /// `rope_theta` when the file has no `rope.freq_base` (MLX-LM's default
    /// for the family; None: its own, 10000).
    pub rope_theta: Option<f64>,
    /// Phi-3: one q/k/v matrix (`attn_qkv`) and one gate/up matrix
    /// (`ffn_up`), partially rotated heads, LongRoPE.
    pub phi3: bool,
    /// Gemma 3's layers: sliding-window ones between global ones (`gemma3`).
    pub gemma3: bool,
    /// How a SentencePiece vocabulary's text is prepared.
    pub spm: Spm,
    /// Its mixture-of-experts layers, if any: how MLX-LM names and configures them.
    pub experts: Option<Experts>,
    /// Ministral 3: the rotary parameters as MLX-LM's `rope_parameters`, with YaRN's
    /// `mscale_all_dim` (llama.cpp's `yarn_log_multiplier` for this family) and Llama 4's
    /// query scaling by position (`attention.temperature_scale`, its `llama_4_scaling_beta`).
    pub rope_parameters: bool,
}

/// A family's mixture-of-experts layers: the router `ffn_gate_inp` and the experts stacked in
/// 3-D tensors `ffn_{gate,up,down}_exps`.
#[derive(Clone, Copy, PartialEq)]
pub enum Experts {
    /// Qwen3-MoE: MLX-LM's `mlp.gate` and `mlp.switch_mlp`; every layer with a router sparse,
    /// the top-k weights renormalized (as llama.cpp's qwen3moe).
    Qwen3,
    /// GPT-OSS: `mlp.router` and `mlp.experts`, biased, in every layer.
    GptOss,
}

impl Experts {
    fn router(self) -> &'static str {
        match self {
            Experts::Qwen3 => "mlp.gate",
            Experts::GptOss => "mlp.router",
        }
    }
    fn stack(self) -> &'static str {
        match self {
            Experts::Qwen3 => "mlp.switch_mlp",
            Experts::GptOss => "mlp.experts",
        }
    }
}

/// Llama's row, which the others differ from.
const LLAMA: Arch = Arch {
    name: "llama",
    model_type: "llama",
    permuted: true,
    ffn_norm: "post_attention_layernorm",
    norm_shift: false,
    default_dtype: None,
    rope_theta: None,
    phi3: false,
    gemma3: false,
    spm: Spm::Llama,
    experts: None,
    rope_parameters: false,
};

/// The llama.cpp architectures that load.
const ARCHS: &[Arch] = &[
    LLAMA,
    Arch { name: "mistral", model_type: "mistral", ..LLAMA },
    Arch { name: "qwen2", model_type: "qwen2", permuted: false, ..LLAMA },
    Arch { name: "qwen3", model_type: "qwen3", permuted: false, rope_theta: Some(1e6), ..LLAMA },
    Arch { name: "qwen3moe", model_type: "qwen3_moe", permuted: false, experts: Some(Experts::Qwen3), ..LLAMA },
    Arch {
        name: "gemma3",
        model_type: "gemma3_text",
        permuted: false,
        ffn_norm: "pre_feedforward_layernorm",
        norm_shift: true,
        default_dtype: Some(mlx::Dtype::Float32),
        rope_theta: Some(1e6),
        gemma3: true,
        spm: Spm::Gemma,
        ..LLAMA
    },
    Arch { name: "phi3", model_type: "phi3", permuted: false, phi3: true, spm: Spm::Phi3, ..LLAMA },
    // RoPE off in every 4th layer: llama.cpp's fixed step, MLX-LM's default `no_rope_layer_interval`.
    Arch { name: "smollm3", model_type: "smollm3", ..LLAMA },
    Arch { name: "mistral3", model_type: "ministral3", rope_parameters: true, ..LLAMA },
    // Attention sinks, alternating sliding-window and full layers (MLX-LM's default), YaRN.
    Arch { name: "gpt-oss", model_type: "gpt_oss", permuted: false, experts: Some(Experts::GptOss), ..LLAMA },
];

/// Phi-3's LongRoPE factors, which llama.cpp's converter writes as tensors.
const ROPE_FACTORS: [&str; 2] = ["rope_factors_long.weight", "rope_factors_short.weight"];

/// Tensors that hold config rather than weights: read by `config`, never loaded.
pub fn is_config_tensor(name: &str) -> bool {
    name == rope_freqs::NAME || ROPE_FACTORS.contains(&name)
}

fn unsupported(file: &GgufFile, what: String) -> LmError {
    LmError::UnsupportedModel(format!("{}: {what}", file.path.display()))
}

fn invalid(file: &GgufFile, what: String) -> LmError {
    LmError::InvalidWeights(format!("{}: {what}", file.path.display()))
}

pub fn arch(file: &GgufFile) -> Result<&'static Arch> {
    let name = file.get("general.architecture").and_then(Meta::as_str).ok_or_else(|| invalid(file, "missing general.architecture".into()))?;
    ARCHS.iter().find(|a| a.name == name).ok_or_else(|| {
        let known: Vec<_> = ARCHS.iter().map(|a| a.name).collect();
        unsupported(file, format!("GGUF architecture \"{name}\" is not supported; supported: {}", known.join(", ")))
    })
}

/// MLX-LM's name for a GGUF tensor (`blk.3.attn_q.weight` ->
/// `model.layers.3.self_attn.q_proj.weight`); None for names it has no use for.
pub fn mlx_name(name: &str, arch: &Arch) -> Option<String> {
    let (base, suffix) = name.rsplit_once('.')?;
    if !matches!(suffix, "weight" | "bias" | "scales" | "biases") {
        return None;
    }
    let mapped = match base {
        "token_embd" => "model.embed_tokens".to_string(),
        "output_norm" => "model.norm".to_string(),
        "output" => "lm_head".to_string(),
        _ => {
            let rest = base.strip_prefix("blk.")?;
            let (layer, part) = rest.split_once('.')?;
            let layer: u32 = layer.parse().ok()?;
            if part == "attn_sinks" {
                // GPT-OSS's per-head sinks: a parameter of the attention, not a layer's weight.
                return (suffix == "weight").then(|| format!("model.layers.{layer}.self_attn.sinks"));
            }
            if let Some(e) = arch.experts {
                // The router, and the experts stacked as MLX-LM's SwitchGLU holds them.
                let module = match part {
                    "ffn_gate_inp" => Some(e.router().to_string()),
                    _ => part.strip_prefix("ffn_").and_then(|p| p.strip_suffix("_exps")).map(|proj| format!("{}.{proj}_proj", e.stack())),
                };
                if let Some(m) = module {
                    return Some(format!("model.layers.{layer}.{m}.{suffix}"));
                }
            }
            let part = match part {
                "attn_norm" => "input_layernorm",
                "ffn_norm" => arch.ffn_norm,
                "post_attention_norm" => "post_attention_layernorm",
                "post_ffw_norm" => "post_feedforward_layernorm",
                "attn_q" => "self_attn.q_proj",
                "attn_qkv" => "self_attn.qkv_proj",
                "ffn_up" if arch.phi3 => "mlp.gate_up_proj",
                "attn_k" => "self_attn.k_proj",
                "attn_v" => "self_attn.v_proj",
                "attn_output" => "self_attn.o_proj",
                "attn_q_norm" => "self_attn.q_norm",
                "attn_k_norm" => "self_attn.k_norm",
                "ffn_gate" => "mlp.gate_proj",
                "ffn_up" => "mlp.up_proj",
                "ffn_down" => "mlp.down_proj",
                _ => return None,
            };
            format!("model.layers.{layer}.{part}")
        }
    };
    Some(format!("{mapped}.{suffix}"))
}

/// `config.json` for the model in `file`, with the tensor shapes checked
/// against it (before any tensor data is read).
pub fn config(file: &GgufFile, arch: &Arch, eos_ids: &[u32]) -> Result<Value> {
    let key = |k: &str| format!("{}.{k}", arch.name);
    let get = |k: &str| file.get(&key(k));
    let int = |k: &str| -> Result<Option<i64>> {
        match get(k) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0 && n <= i32::MAX as u64)
                .map(|n| Some(n as i64))
                .ok_or_else(|| invalid(file, format!("{} must be a positive integer, got {v:?}", key(k)))),
        }
    };
    let req = |k: &str| -> Result<i64> { int(k)?.ok_or_else(|| invalid(file, format!("missing {}", key(k)))) };
    let float = |k: &str| -> Result<Option<f64>> {
        match get(k) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| invalid(file, format!("{} must be a number, got {v:?}", key(k)))),
        }
    };

    let hidden = req("embedding_length")?;
    let layers = req("block_count")?;
    let ff = req("feed_forward_length")?;
    let heads = req("attention.head_count")?;
    let kv_heads = int("attention.head_count_kv")?.unwrap_or(heads);
    let head_dim = int("attention.key_length")?.unwrap_or(hidden / heads);
    if let Some(v) = int("attention.value_length")? {
        if v != head_dim {
            return Err(unsupported(file, format!("value heads of {v} differ from key heads of {head_dim}")));
        }
    }
    let rot = int("rope.dimension_count")?.unwrap_or(head_dim);
    let partial = rot != head_dim;
    if partial && (!arch.phi3 || rot > head_dim) {
        return Err(unsupported(file, format!("partial rotary embeddings ({rot} of {head_dim} dimensions) are not supported")));
    }
    let eps =
        float("attention.layer_norm_rms_epsilon")?.ok_or_else(|| invalid(file, format!("missing {}", key("attention.layer_norm_rms_epsilon"))))?;
    let embed = file.tensor("token_embd.weight").ok_or_else(|| invalid(file, "tensor \"token_embd.weight\" is missing".into()))?;
    let vocab = *embed.shape.first().unwrap_or(&0);

    let mut c = Map::new();
    c.insert("model_type".into(), json!(arch.model_type));
    c.insert("hidden_size".into(), json!(hidden));
    c.insert("num_hidden_layers".into(), json!(layers));
    c.insert("intermediate_size".into(), json!(ff));
    c.insert("num_attention_heads".into(), json!(heads));
    c.insert("num_key_value_heads".into(), json!(kv_heads));
    c.insert("head_dim".into(), json!(head_dim));
    c.insert("rms_norm_eps".into(), json!(eps));
    c.insert("vocab_size".into(), json!(vocab));
    let (mut experts, mut moe_ff) = (0, 0);
    if let Some(kind) = arch.experts {
        (experts, moe_ff) = (req("expert_count")?, req("expert_feed_forward_length")?);
        c.insert("num_experts_per_tok".into(), json!(req("expert_used_count")?));
        match kind {
            Experts::Qwen3 => {
                // llama.cpp's qwen3moe: every layer with a router is sparse, the top-k weights renormalized.
                let dense: Vec<i64> = (0..layers).filter(|l| file.tensor(&format!("blk.{l}.ffn_gate_inp.weight")).is_none()).collect();
                c.insert("num_experts".into(), json!(experts));
                c.insert("moe_intermediate_size".into(), json!(moe_ff));
                c.insert("decoder_sparse_step".into(), json!(1));
                c.insert("mlp_only_layers".into(), json!(dense));
                c.insert("norm_topk_prob".into(), json!(true));
            }
            Experts::GptOss => {
                // The experts are GPT-OSS's MLP (its intermediate_size); sliding-window layers alternate
                // with full ones from the first (llama.cpp's pattern of 2, MLX-LM's default layer_types).
                c.insert("num_local_experts".into(), json!(experts));
                c.insert("intermediate_size".into(), json!(moe_ff));
                c.insert("sliding_window".into(), json!(req("attention.sliding_window")?));
            }
        }
    }
    if let Some(theta) = float("rope.freq_base")? {
        c.insert("rope_theta".into(), json!(theta));
    } else if let Some(theta) = arch.rope_theta {
        c.insert("rope_theta".into(), json!(theta));
    }
    if arch.gemma3 {
        gemma3(&mut c, int("attention.sliding_window")?, layers, hidden, heads, head_dim);
    }
    if let Some(n) = int("context_length")? {
        c.insert("max_position_embeddings".into(), json!(n));
    }
    let missing = |k: &str| invalid(file, format!("missing {}", key(k)));
    match get("rope.scaling.type").and_then(Meta::as_str) {
        None | Some("none") => {}
        Some("linear") => {
            let factor = float("rope.scaling.factor")?.ok_or_else(|| missing("rope.scaling.factor"))?;
            c.insert("rope_scaling".into(), json!({"type": "linear", "factor": factor}));
        }
        Some("yarn") => {
            // As MLX-LM's YarnRoPE reads it (GPT-OSS; Qwen files stretched past their training context).
            let factor = float("rope.scaling.factor")?.ok_or_else(|| missing("rope.scaling.factor"))?;
            let original = int("rope.scaling.original_context_length")?.ok_or_else(|| missing("rope.scaling.original_context_length"))?;
            let mut scaling = json!({"type": "yarn", "factor": factor, "original_max_position_embeddings": original});
            for (k, name) in [("rope.scaling.yarn_beta_fast", "beta_fast"), ("rope.scaling.yarn_beta_slow", "beta_slow")] {
                if let Some(v) = float(k)? {
                    scaling[name] = json!(v);
                }
            }
            if arch.rope_parameters {
                // Ministral 3's converter writes mscale_all_dim itself here (DeepSeek's, a tenth of it).
                if let Some(v) = float("rope.scaling.yarn_log_multiplier")? {
                    scaling["mscale_all_dim"] = json!(v);
                }
            }
            // llama.cpp's other YaRN knobs, at the values that leave MLX-LM's YaRN as it is
            // (ext_factor below 0 is llama.cpp's "1 for YaRN").
            let log_multiplier = if arch.rope_parameters { None } else { Some(("rope.scaling.yarn_log_multiplier", 0.0)) };
            for (k, plain) in [("rope.scaling.yarn_ext_factor", 1.0), ("rope.scaling.yarn_attn_factor", 1.0)].into_iter().chain(log_multiplier) {
                match float(k)? {
                    Some(v) if v != plain && !(k.ends_with("ext_factor") && v < 0.0) => {
                        return Err(unsupported(file, format!("{} {v} is not supported (YaRN loads with it at {plain})", key(k))))
                    }
                    _ => {}
                }
            }
            c.insert("rope_scaling".into(), scaling);
        }
        Some(other) => return Err(unsupported(file, format!("rope scaling \"{other}\" is not supported (supported: linear, yarn)"))),
    }
    if arch.rope_parameters {
        // MLX-LM's ministral3 reads every rotary parameter from rope_parameters.
        let mut params = c.remove("rope_scaling").unwrap_or_else(|| json!({"rope_type": "default"}));
        params["rope_theta"] = c.get("rope_theta").cloned().unwrap_or(json!(10000.0));
        params["llama_4_scaling_beta"] = json!(float("attention.temperature_scale")?.ok_or_else(|| missing("attention.temperature_scale"))?);
        let original = int("rope.scaling.original_context_length")?.ok_or_else(|| missing("rope.scaling.original_context_length"))?;
        params["original_max_position_embeddings"] = json!(original);
        c.insert("rope_parameters".into(), params);
    }
    c.insert("tie_word_embeddings".into(), json!(file.tensor("output.weight").is_none()));
    let has = |n: &str| file.tensor(n).is_some();
    // The Llama-derived families (those llama.cpp permutes) take these from their config.
    if arch.permuted {
        c.insert("attention_bias".into(), json!(has("blk.0.attn_q.bias")));
        c.insert("mlp_bias".into(), json!(has("blk.0.ffn_up.bias")));
    }
    if !eos_ids.is_empty() {
        c.insert("eos_token_id".into(), if eos_ids.len() == 1 { json!(eos_ids[0]) } else { json!(eos_ids) });
    }
    if let Some(bits) = bulk_bits(file) {
        // As MLX-LM's config.json says it; the loader reads each layer's bits from its shapes.
        c.insert("quantization".into(), json!({"group_size": 32, "bits": bits}));
    }
    if partial {
        // Phi-4-mini: 96 of 128.
        c.insert("partial_rotary_factor".into(), json!(rot as f64 / head_dim as f64));
    }
    if arch.phi3 {
        long_rope(file, &mut c, rot, &key("rope.scaling.original_context_length"))?;
    }
    check_shapes(file, hidden, layers, ff, heads * head_dim, kv_heads * head_dim, (head_dim, rot), vocab, (experts, moe_ff), arch.phi3)?;
    if let Some(t) = file.tensor(rope_freqs::NAME) {
        if c.contains_key("rope_scaling") {
            return Err(unsupported(file, format!("{} beside rope scaling \"linear\"", rope_freqs::NAME)));
        }
        if t.ggml_type != GgmlType::F32 {
            return Err(invalid(file, format!("{} must be F32, got {}", rope_freqs::NAME, t.ggml_type.name())));
        }
        let factors = file.read_f32(t)?;
        let base = c.get("rope_theta").and_then(Value::as_f64).unwrap_or(10000.0);
        if let Some(scaling) = rope_freqs::rope_scaling(&factors, base, head_dim).map_err(|e| unsupported(file, e))? {
            c.insert("rope_scaling".into(), scaling);
        }
    }
    Ok(Value::Object(c))
}

/// Phi-3's LongRoPE (Phi-3.5-mini, Phi-3-mini-128k, Phi-4-mini) as MLX-LM's
/// config holds it: the long and short factors the converter wrote as
/// tensors, and the original context. A file without them has plain RoPE.
fn long_rope(file: &GgufFile, c: &mut Map<String, Value>, rot: i64, original_key: &str) -> Result<()> {
    let [long, short] = ROPE_FACTORS.map(|n| file.tensor(n));
    let (Some(long), Some(short)) = (long, short) else {
        return match long.or(short) {
            Some(t) => Err(invalid(file, format!("{} without its pair ({})", t.name, ROPE_FACTORS.join(", ")))),
            None => Ok(()),
        };
    };
    let mut factors = Vec::new();
    for t in [long, short] {
        if t.ggml_type != GgmlType::F32 || t.shape != [rot / 2] {
            return Err(invalid(file, format!("{} must be F32 of {} values, got {} {:?}", t.name, rot / 2, t.ggml_type.name(), t.shape)));
        }
        factors.push(file.read_f32(t)?);
    }
    let original = file.get(original_key).and_then(Meta::as_u64).ok_or_else(|| invalid(file, format!("missing {original_key}")))?;
    c.insert("original_max_position_embeddings".into(), json!(original));
    c.insert("rope_scaling".into(), json!({"type": "longrope", "long_factor": factors[0], "short_factor": factors[1]}));
    Ok(())
}

/// What llama.cpp's gemma3 takes as given rather than from the metadata: with
/// a sliding window, every sixth layer global and the others on RoPE base
/// 10000 (without one, all global); queries scaled by `head_dim`, or for 27B
/// (62 layers) by `hidden / heads`, as Gemma 3's configs say
/// (`query_pre_attn_scalar`). Rotary scaling applies to the global layers.
fn gemma3(c: &mut Map<String, Value>, window: Option<i64>, layers: i64, hidden: i64, heads: i64, head_dim: i64) {
    let scalar = if layers == 62 { hidden / heads } else { head_dim };
    c.insert("query_pre_attn_scalar".into(), json!(scalar));
    c.insert("sliding_window".into(), json!(window.unwrap_or(i32::MAX as i64)));
    c.insert("sliding_window_pattern".into(), json!(if window.is_some() { 6 } else { 1 }));
    c.insert("rope_local_base_freq".into(), json!(10_000.0));
}

/// The bits of most quantized tensors as loaded (`loaded_bits`), if any are.
fn bulk_bits(file: &GgufFile) -> Option<i64> {
    let count = |bits: usize| file.tensors.iter().filter(|t| loaded_bits(t.ggml_type) == Some(bits)).count();
    let (four, eight) = (count(4), count(8));
    match (four, eight) {
        (0, 0) => None,
        _ if four >= eight => Some(4),
        _ => Some(8),
    }
}

/// Every tensor's shape (in values) against what the metadata says.
/// `fused`: Phi-3's one q/k/v matrix and one gate/up matrix.
#[allow(clippy::too_many_arguments)]
fn check_shapes(
    file: &GgufFile,
    hidden: i64,
    layers: i64,
    ff: i64,
    q: i64,
    kv: i64,
    (head_dim, rot): (i64, i64),
    vocab: i64,
    moe: (i64, i64),
    fused: bool,
) -> Result<()> {
    let (experts, moe_ff) = moe;
    for t in &file.tensors {
        let Some(base) = t.name.strip_suffix(".weight").or_else(|| t.name.strip_suffix(".bias")) else {
            return Err(unsupported(file, format!("tensor \"{}\" is not part of the models this loader knows", t.name)));
        };
        let bias = t.name.ends_with(".bias");
        let part = match base.strip_prefix("blk.") {
            Some(rest) => {
                let (layer, part) = rest.split_once('.').unwrap_or((rest, ""));
                match layer.parse::<i64>() {
                    Ok(n) if n < layers => part,
                    _ => return Err(invalid(file, format!("tensor \"{}\" is outside the {layers} blocks the metadata names", t.name))),
                }
            }
            None => base,
        };
        let stacked = match part {
            "ffn_gate_exps" | "ffn_up_exps" => Some(vec![experts, moe_ff, hidden]),
            "ffn_down_exps" => Some(vec![experts, hidden, moe_ff]),
            _ => None,
        };
        // A stack's biases: one row per expert.
        let stacked = stacked.map(|s| if bias { s[..2].to_vec() } else { s });
        let (rows, cols) = match part {
            _ if stacked.is_some() => (0, 0),
            "ffn_gate_inp" => (experts, hidden),
            "rope_freqs" => (head_dim / 2, 0),
            "rope_factors_long" | "rope_factors_short" => (rot / 2, 0),
            "attn_qkv" => (q + 2 * kv, hidden),
            "ffn_up" if fused => (2 * ff, hidden),
            "token_embd" | "output" => (vocab, hidden),
            "output_norm" | "attn_norm" | "ffn_norm" | "post_attention_norm" | "post_ffw_norm" => (hidden, 0),
            "attn_q" => (q, hidden),
            "attn_k" | "attn_v" => (kv, hidden),
            "attn_output" => (hidden, q),
            "attn_q_norm" | "attn_k_norm" => (head_dim, 0),
            "attn_sinks" => (q / head_dim, 0),
            "ffn_gate" | "ffn_up" => (ff, hidden),
            "ffn_down" => (hidden, ff),
            _ => return Err(unsupported(file, format!("tensor \"{}\" is not part of the models this loader knows", t.name))),
        };
        let expected: Vec<i64> = stacked.unwrap_or(if cols == 0 || bias { vec![rows] } else { vec![rows, cols] });
        if t.shape != expected {
            return Err(invalid(file, format!("tensor \"{}\" has shape {:?}, but the metadata implies {expected:?}", t.name, t.shape)));
        }
    }
    Ok(())
}

/// The tensor types mlx-node loads, in the order the refusal of any other names them.
pub const LOADED: [GgmlType; 16] = {
    use super::file::GgmlType as T;
    [
        T::F32,
        T::F16,
        T::BF16,
        T::Q4_0,
        T::Q4_1,
        T::Q5_0,
        T::Q5_1,
        T::Q8_0,
        T::Q2_K,
        T::Q3_K,
        T::Q4_K,
        T::Q5_K,
        T::Q6_K,
        T::IQ4_NL,
        T::IQ4_XS,
        T::MXFP4,
    ]
};

/// The bits a quantized type is loaded at: 4 for Q4_0, Q4_1 and Q4_K, which
/// MLX's 4-bit affine form holds as they are, and MXFP4 (MLX's mxfp4); 8 for the others (Q8_0; Q5_0,
/// Q5_1, Q5_K, Q3_K, IQ4_NL and IQ4_XS exactly, Q2_K and Q6_K requantized).
/// None for floats.
pub fn loaded_bits(t: GgmlType) -> Option<usize> {
    use super::file::GgmlType as T;
    match t {
        T::Q4_0 | T::Q4_1 | T::Q4_K | T::MXFP4 => Some(4),
        T::F32 | T::F16 | T::BF16 => None,
        _ => Some(8),
    }
}

/// The first tensor of a type that mlx-node does not load.
pub fn refused_type(file: &GgufFile) -> Option<&TensorInfo> {
    file.tensors.iter().find(|t| !LOADED.contains(&t.ggml_type))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemma(window: Option<i64>, layers: i64, hidden: i64, heads: i64) -> Map<String, Value> {
        let mut c = Map::new();
        gemma3(&mut c, window, layers, hidden, heads, 256);
        c
    }

    /// Gemma 3's own configs: 1B, 4B and 12B scale queries by head_dim (256); 27B (62 layers,
    /// hidden 5376, 32 heads) by 168, which no metadata key holds.
    #[test]
    fn gemma3_query_scale_and_windows() {
        assert_eq!(gemma(Some(512), 26, 1152, 4)["query_pre_attn_scalar"], json!(256));
        assert_eq!(gemma(Some(1024), 48, 3840, 16)["query_pre_attn_scalar"], json!(256));
        let big = gemma(Some(1024), 62, 5376, 32);
        assert_eq!((&big["query_pre_attn_scalar"], &big["sliding_window"], &big["sliding_window_pattern"]), (&json!(168), &json!(1024), &json!(6)));
        // No sliding window (llama.cpp's gemma3 without the key): every layer global.
        assert_eq!(gemma(None, 26, 1152, 4)["sliding_window_pattern"], json!(1));
    }
}
