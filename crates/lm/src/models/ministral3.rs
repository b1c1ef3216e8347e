//! Ministral 3 (`ministral3`) and the text model of Mistral 3 (`mistral3`)
//! checkpoints, as MLX-LM's `ministral3.py` / `mistral3.py`: the shared
//! decoder with sliding-window layers where `layer_types` says
//! "sliding_attention" (rotating caches of `sliding_window`), RoPE and its
//! scaling (YaRN) from `rope_parameters`, and Llama 4's query scaling by
//! position (`llama_4_scaling_beta`).
use mlx::Dtype;
use serde_json::Value;

use super::decoder::Decoder;
use super::family_config;
use super::LanguageModel;
use crate::config::ModelConfig;
use crate::error::{LmError, Result};
use crate::weights::Weights;

fn bad(what: String) -> LmError {
    LmError::InvalidWeights(format!("config.json: {what}"))
}

pub(super) fn build(config: ModelConfig, w: Weights, dtype: Option<Dtype>, progress: &mut dyn FnMut(f64)) -> Result<Box<dyn LanguageModel>> {
    let kinds = family_config::layer_kinds(&config, |_| "full_attention")?;
    let params = config.raw.get("rope_parameters").ok_or_else(|| bad("missing \"rope_parameters\"".into()))?;
    let beta =
        params.get("llama_4_scaling_beta").and_then(Value::as_f64).ok_or_else(|| bad("missing rope_parameters.llama_4_scaling_beta".into()))?;
    let original = params
        .get("original_max_position_embeddings")
        .and_then(Value::as_i64)
        .filter(|&o| o > 0)
        .ok_or_else(|| bad("missing rope_parameters.original_max_position_embeddings".into()))?;
    let mut model = Decoder::build(config, w, dtype, progress)?;
    model.stack.set_position_scale(beta as f32, original as i32);
    model.layout = Some(kinds);
    Ok(Box::new(model))
}

/// `mistral3` checkpoints: the text model's config is `text_config`, whose own
/// `model_type` picks the text model (`ministral3`, else Llama, as MLX-LM's
/// `mistral3.py`); its head is untied unless it says otherwise.
pub(super) fn text_config(raw: &Value) -> std::result::Result<Value, String> {
    let mut text = raw.get("text_config").and_then(Value::as_object).cloned().ok_or("a mistral3 config needs a \"text_config\" object")?;
    let inner = text.get("model_type").and_then(Value::as_str).unwrap_or("llama").to_string();
    if inner == "mistral4" {
        return Err("its text model is mistral4, which is not supported".into());
    }
    text.insert("model_type".into(), Value::from("mistral3"));
    text.insert("text_model_type".into(), Value::from(inner));
    text.entry("tie_word_embeddings").or_insert(Value::from(false));
    if let Some(q) = raw.get("quantization") {
        text.insert("quantization".into(), q.clone());
    }
    Ok(Value::Object(text))
}

pub(super) fn build_multimodal(
    config: ModelConfig,
    w: Weights,
    dtype: Option<Dtype>,
    progress: &mut dyn FnMut(f64),
) -> Result<Box<dyn LanguageModel>> {
    if config.raw.get("text_model_type").and_then(Value::as_str) == Some("ministral3") {
        build(config, w, dtype, progress)
    } else {
        Ok(Box::new(Decoder::build(config, w, dtype, progress)?))
    }
}

/// `mistral3` checkpoints keep the text model under `language_model.` (or
/// `model.language_model.`), next to vision weights it does not use.
pub(super) fn sanitize_multimodal(config: &ModelConfig, w: &mut Weights) -> Result<()> {
    w.discard(|k| k.contains("vision_tower") || k.contains("multi_modal_projector"));
    w.rename_prefix("model.language_model.", "model.");
    w.rename_prefix("language_model.", "");
    super::decoder::sanitize(config, w)
}
