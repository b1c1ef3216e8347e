//! Qwen3-MoE (`qwen3_moe`), as MLX-LM's `qwen3_moe.py`: the Qwen3 decoder
//! whose feed-forward block is a mixture of experts (softmax router, top
//! `num_experts_per_tok`, `norm_topk_prob`) in every `decoder_sparse_step`-th
//! layer not listed in `mlp_only_layers`, a dense MLP elsewhere.
use mlx::Dtype;
use serde_json::Value;

use super::decoder::{Decoder, FeedForward, Mlp};
use super::moe::SparseMoe;
use super::LanguageModel;
use crate::config::ModelConfig;
use crate::error::{LmError, Result};
use crate::weights::Weights;

struct Args {
    num_experts: i32,
    top_k: i32,
    decoder_sparse_step: i32,
    mlp_only_layers: Vec<i64>,
    moe_intermediate_size: i32,
    norm_topk_prob: bool,
}

fn args(c: &ModelConfig) -> Result<Args> {
    let bad = |what: String| LmError::InvalidWeights(format!("config.json: {what}"));
    let int = |key: &str| -> Result<i32> {
        let v = c.raw.get(key).ok_or_else(|| bad(format!("missing \"{key}\"")))?;
        v.as_i64().filter(|&n| n >= 0 && n <= i32::MAX as i64).map(|n| n as i32).ok_or_else(|| bad(format!("\"{key}\" must be an integer, got {v}")))
    };
    let a = Args {
        num_experts: int("num_experts")?,
        top_k: int("num_experts_per_tok")?,
        decoder_sparse_step: int("decoder_sparse_step")?,
        mlp_only_layers: match c.raw.get("mlp_only_layers") {
            Some(Value::Array(v)) => v.iter().map(|x| x.as_i64().ok_or_else(|| bad(format!("mlp_only_layers holds {x}")))).collect::<Result<_>>()?,
            _ => return Err(bad("missing \"mlp_only_layers\" (a list of layer indices)".into())),
        },
        moe_intermediate_size: int("moe_intermediate_size")?,
        norm_topk_prob: c.raw.get("norm_topk_prob").and_then(Value::as_bool).ok_or_else(|| bad("missing \"norm_topk_prob\"".into()))?,
    };
    if a.num_experts > 0 && !(1..=a.num_experts).contains(&a.top_k) {
        return Err(bad(format!("num_experts_per_tok {} must be between 1 and num_experts {}", a.top_k, a.num_experts)));
    }
    if a.decoder_sparse_step < 1 {
        return Err(bad(format!("decoder_sparse_step must be at least 1, got {}", a.decoder_sparse_step)));
    }
    Ok(a)
}

impl Args {
    fn is_moe(&self, layer: usize) -> bool {
        !self.mlp_only_layers.contains(&(layer as i64)) && self.num_experts > 0 && (layer as i32 + 1) % self.decoder_sparse_step == 0
    }
}

/// As MLX-LM's `sanitize`: a tied model ignores a stored head; Hugging Face's
/// per-expert weights (`mlp.experts.E.up_proj.weight`) are stacked into
/// `mlp.switch_mlp.up_proj.weight` (MLX-community conversions already are).
pub(super) fn sanitize(config: &ModelConfig, w: &mut Weights) -> Result<()> {
    super::decoder::sanitize(config, w)?;
    // A bad config is reported by `build`.
    let Ok(a) = args(config) else { return Ok(()) };
    for l in 0..config.num_hidden_layers {
        let p = format!("model.layers.{l}.mlp");
        if !w.contains(&format!("{p}.experts.0.up_proj.weight")) {
            continue;
        }
        for n in ["up_proj", "down_proj", "gate_proj"] {
            let names: Vec<String> = (0..a.num_experts).map(|e| format!("{p}.experts.{e}.{n}.weight")).collect();
            // A missing expert is reported when the stacked tensor is looked for.
            let _ = w.stack(&names, &format!("{p}.switch_mlp.{n}.weight"));
        }
    }
    Ok(())
}

pub(super) fn build(config: ModelConfig, w: Weights, dtype: Option<Dtype>, progress: &mut dyn FnMut(f64)) -> Result<Box<dyn LanguageModel>> {
    let a = args(&config)?;
    let (h, ff) = (config.hidden_size, config.intermediate_size);
    let ffn = |w: &mut Weights, layer: usize, p: &str| -> Result<Box<dyn FeedForward>> {
        if a.is_moe(layer) {
            Ok(Box::new(SparseMoe::load(w, p, h, a.moe_intermediate_size, a.num_experts, a.top_k, a.norm_topk_prob)?))
        } else {
            Ok(Box::new(Mlp::load(w, p, h, ff, false)?))
        }
    };
    Ok(Box::new(Decoder::build_with(config, w, dtype, progress, &ffn)?))
}
