//! Which families load, keyed on `config.json`'s `model_type`, as MLX-LM's
//! `models/<model_type>.py`. A new family is a file beside this one and a line
//! in `FAMILIES`; nothing else changes.
use std::path::Path;

use mlx::Dtype;
use serde_json::Value;

use super::{decoder, gemma3, gemma4, gpt_oss, lfm2, ministral3, phi3, qwen3_5, qwen3_moe, smollm3, LanguageModel};
use crate::config::ModelConfig;
use crate::error::Result;
use crate::parallel::Strategy;
use crate::weights::Weights;

pub struct Family {
    pub model_type: &'static str,
    /// Drops or renames checkpoint tensors the model does not hold, as the
    /// family's `sanitize` in MLX-LM.
    pub sanitize: fn(&ModelConfig, &mut Weights) -> Result<()>,
    /// Builds the model from its sanitized weights; `progress` hears the
    /// fraction of weight bytes read.
    pub build: fn(ModelConfig, Weights, Option<Dtype>, &mut dyn FnMut(f64)) -> Result<Box<dyn LanguageModel>>,
    /// The config as the family's MLX-LM `ModelArgs` sees it, where that
    /// differs from `config.json`: defaults filled in, or the text model's own
    /// config inside a vision-language checkpoint's.
    pub text_config: Option<fn(&Value) -> std::result::Result<Value, String>>,
    /// Whether the family splits across a tensor-parallel group: those whose
    /// MLX-LM model has a `shard()` method.
    pub tensor_parallel: bool,
    /// Whether it splits into a pipeline: those whose MLX-LM model has
    /// `pipeline()` (`PipelineMixin`).
    pub pipeline: bool,
}

/// Qwen3, Llama, Mistral (as Llama, as MLX-LM) and Qwen2 share the decoder;
/// their differences are `ModelConfig` flags.
const FAMILIES: &[Family] = &[
    Family { model_type: "qwen3", sanitize: decoder::sanitize, build: decoder::build, text_config: None, tensor_parallel: true, pipeline: false },
    Family { model_type: "llama", sanitize: decoder::sanitize, build: decoder::build, text_config: None, tensor_parallel: true, pipeline: false },
    Family { model_type: "mistral", sanitize: decoder::sanitize, build: decoder::build, text_config: None, tensor_parallel: true, pipeline: false },
    Family { model_type: "qwen2", sanitize: decoder::sanitize, build: decoder::build, text_config: None, tensor_parallel: true, pipeline: true },
    Family {
        model_type: "gpt_oss",
        sanitize: gpt_oss::sanitize,
        build: gpt_oss::build,
        text_config: Some(gpt_oss::with_defaults),
        tensor_parallel: true,
        pipeline: false,
    },
    Family {
        model_type: "ministral3",
        sanitize: decoder::sanitize,
        build: ministral3::build,
        text_config: None,
        tensor_parallel: true,
        pipeline: true,
    },
    Family {
        model_type: "mistral3",
        sanitize: ministral3::sanitize_multimodal,
        build: ministral3::build_multimodal,
        text_config: Some(ministral3::text_config),
        tensor_parallel: false,
        pipeline: false,
    },
    Family { model_type: "phi3", sanitize: decoder::sanitize, build: phi3::build, text_config: None, tensor_parallel: false, pipeline: false },
    Family {
        model_type: "qwen3_moe",
        sanitize: qwen3_moe::sanitize,
        build: qwen3_moe::build,
        text_config: None,
        tensor_parallel: true,
        pipeline: true,
    },
    Family { model_type: "smollm3", sanitize: decoder::sanitize, build: smollm3::build, text_config: None, tensor_parallel: false, pipeline: false },
    Family {
        model_type: "gemma3_text",
        sanitize: gemma3::sanitize,
        build: gemma3::build,
        text_config: Some(gemma3::with_defaults),
        tensor_parallel: false,
        pipeline: false,
    },
    Family {
        model_type: "gemma3",
        sanitize: gemma3::sanitize_multimodal,
        build: gemma3::build,
        text_config: Some(gemma3::text_config),
        tensor_parallel: false,
        pipeline: false,
    },
    Family {
        model_type: "gemma4_text",
        sanitize: gemma4::sanitize,
        build: gemma4::build,
        text_config: Some(gemma4::with_defaults),
        tensor_parallel: false,
        pipeline: false,
    },
    Family {
        model_type: "gemma4",
        sanitize: gemma4::sanitize_multimodal,
        build: gemma4::build,
        text_config: Some(gemma4::text_config),
        tensor_parallel: false,
        pipeline: false,
    },
    Family {
        model_type: "lfm2",
        sanitize: lfm2::sanitize,
        build: lfm2::build,
        text_config: Some(lfm2::text_config),
        tensor_parallel: false,
        pipeline: false,
    },
    Family {
        model_type: "qwen3_5",
        sanitize: qwen3_5::sanitize,
        build: qwen3_5::build,
        text_config: Some(qwen3_5::text_config),
        tensor_parallel: true,
        pipeline: true,
    },
    Family {
        model_type: "qwen3_5_moe",
        sanitize: qwen3_5::sanitize,
        build: qwen3_5::build,
        text_config: Some(qwen3_5::text_config),
        tensor_parallel: true,
        pipeline: true,
    },
];

pub fn family(model_type: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.model_type == model_type)
}

/// Every `model_type` that loads, for error messages.
pub fn model_types() -> Vec<&'static str> {
    FAMILIES.iter().map(|f| f.model_type).collect()
}

/// Reads `dir`'s config and weights and builds the model of its family.
pub fn load(dir: &Path, options: &super::LoadOptions, progress: &mut dyn FnMut(f64)) -> Result<Box<dyn LanguageModel>> {
    let dtype = options.dtype;
    let config = ModelConfig::from_dir(dir)?;
    // `from_dir` refuses a model_type not listed here.
    let family = family(&config.model_type).ok_or_else(|| crate::LmError::UnsupportedModel(config.model_type.clone()))?;
    let quant_cfg = config.raw.get("quantization").cloned().filter(Value::is_object);
    let mut weights = Weights::load(dir, dtype, quant_cfg)?.with_precision(options.precision_for(&config)).with_shard(shard_for(family, options)?);
    (family.sanitize)(&config, &mut weights)?;
    (family.build)(config, weights, dtype, progress)
}

/// The group `options` asks to split the model over, if `family` can be split that way.
pub(crate) fn shard_for(family: &Family, options: &super::LoadOptions) -> Result<Option<crate::parallel::Shard>> {
    let Some(shard) = &options.shard else { return Ok(None) };
    let (can, how, method) = match shard.strategy {
        Strategy::Tensor => (family.tensor_parallel, "split across processes", "shard()"),
        Strategy::Pipeline => (family.pipeline, "split into a pipeline", "pipeline()"),
    };
    if !can {
        let ok: Vec<&str> = FAMILIES
            .iter()
            .filter(|f| if shard.strategy == Strategy::Tensor { f.tensor_parallel } else { f.pipeline })
            .map(|f| f.model_type)
            .collect();
        return Err(crate::LmError::UnsupportedModel(format!(
            "{} models cannot be {how} (as in MLX-LM, whose model has no {method}); families that can: {}",
            family.model_type,
            ok.join(", ")
        )));
    }
    Ok(Some(shard.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Split as `strategy` over a group of one: the message of the refusal, or None.
    fn refusal(model_type: &str, strategy: Strategy) -> Option<String> {
        let group = mlx::distributed::init("ring", false).expect("a group of one");
        let shard = crate::parallel::Shard::new(group, strategy).expect("rank and size");
        let options = super::super::LoadOptions { shard: Some(shard), ..Default::default() };
        shard_for(family(model_type).expect("listed"), &options).err().map(|e| e.message().to_string())
    }

    #[test]
    fn families_split_as_mlx_lm_splits_them() {
        for strategy in [Strategy::Tensor, Strategy::Pipeline] {
            for model_type in ["qwen3_5", "qwen3_5_moe", "qwen2", "qwen3_moe", "ministral3"] {
                assert_eq!(refusal(model_type, strategy), None, "{model_type} {}", strategy.name());
            }
        }
        let phi3 = refusal("phi3", Strategy::Tensor).unwrap_or_default();
        assert!(
            phi3.contains("phi3 models cannot be split across processes (as in MLX-LM, whose model has no shard()); families that can: qwen3,"),
            "{phi3}"
        );
        assert!(phi3.ends_with("ministral3, qwen3_moe, qwen3_5, qwen3_5_moe"), "{phi3}");
        let llama = refusal("llama", Strategy::Pipeline).unwrap_or_default();
        assert!(
            llama.contains("llama models cannot be split into a pipeline (as in MLX-LM, whose model has no pipeline()); families that can: qwen2, ministral3, qwen3_moe, qwen3_5, qwen3_5_moe"),
            "{llama}"
        );
    }
}
