//! `config.json` of a text model, read with MLX-LM's defaults per family.
use std::path::Path;

use serde_json::Value;

use crate::error::{LmError, Result};

#[derive(Debug, Clone)]
pub enum RopeScaling {
    None,
    Linear {
        factor: f32,
    },
    Dynamic {
        factor: f32,
    },
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_positions: f32,
    },
    /// Phi-3's LongRoPE ("longrope" or "su"): MLX-LM uses the long factors only.
    LongRope {
        long_factor: Vec<f32>,
        original_max_positions: f32,
        long_mscale: Option<f32>,
    },
    /// YaRN, with MLX-LM's `YarnRoPE` defaults.
    Yarn {
        factor: f32,
        original_max_positions: f32,
        beta_fast: f32,
        beta_slow: f32,
        mscale: f32,
        mscale_all_dim: f32,
    },
}

/// Everything the shared decoder needs; family differences are flags.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub model_type: String,
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: i32,
    pub head_dim: i32,
    /// Features each head rotates (`head_dim * partial_rotary_factor`).
    pub rope_dims: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    pub rope_theta: f32,
    pub rope_traditional: bool,
    pub rope_scaling: RopeScaling,
    pub max_position_embeddings: i32,
    pub tie_word_embeddings: bool,
    /// Bias on q/k/v projections.
    pub qkv_bias: bool,
    /// Bias on the output projection.
    pub o_bias: bool,
    pub mlp_bias: bool,
    /// Qwen3's per-head RMSNorm on queries and keys.
    pub qk_norm: bool,
    /// The raw JSON, for `quantization` and EOS ids.
    pub raw: Value,
}

fn bad(path: &Path, msg: String) -> LmError {
    LmError::InvalidWeights(format!("{}: {msg}", path.display()))
}

pub fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            LmError::ModelNotFound(format!("{} does not exist", path.display()))
        } else {
            LmError::ModelNotFound(format!("cannot read {}: {e}", path.display()))
        }
    })?;
    serde_json::from_str(&text).map_err(|e| bad(path, format!("not valid JSON: {e}")))
}

impl ModelConfig {
    pub fn from_dir(dir: &Path) -> Result<ModelConfig> {
        let path = dir.join("config.json");
        let raw = read_json(&path)?;
        Self::from_value(raw, &path)
    }

    pub fn from_value(raw: Value, path: &Path) -> Result<ModelConfig> {
        let model_type = raw.get("model_type").and_then(Value::as_str).ok_or_else(|| bad(path, "missing \"model_type\"".into()))?.to_string();
        let Some(family) = crate::models::registry::family(&model_type) else {
            return Err(LmError::UnsupportedModel(format!(
                "model_type \"{model_type}\" in {} is not supported; supported: {}",
                path.display(),
                crate::models::registry::model_types().join(", ")
            )));
        };
        let mut raw = raw;
        if let (Some(q), Some(obj)) = (quantization_from_hf(&raw), raw.as_object_mut()) {
            obj.insert("quantization".into(), q);
        }
        // A multimodal checkpoint's text model has its own config inside.
        let raw = match family.text_config {
            Some(text) => text(&raw).map_err(|m| bad(path, m))?,
            None => raw,
        };
        let int = |key: &str| -> Result<Option<i32>> {
            match raw.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_i64()
                    .filter(|&n| n > 0 && n <= i32::MAX as i64)
                    .map(|n| Some(n as i32))
                    .ok_or_else(|| bad(path, format!("\"{key}\" must be a positive integer, got {v}"))),
            }
        };
        let req = |key: &str| -> Result<i32> { int(key)?.ok_or_else(|| bad(path, format!("missing \"{key}\""))) };
        let float = |key: &str| -> Result<Option<f32>> {
            match raw.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v.as_f64().map(|f| Some(f as f32)).ok_or_else(|| bad(path, format!("\"{key}\" must be a number, got {v}"))),
            }
        };
        let boolean = |key: &str, default: bool| raw.get(key).and_then(Value::as_bool).unwrap_or(default);

        let hidden_size = req("hidden_size")?;
        let num_attention_heads = req("num_attention_heads")?;
        let num_key_value_heads = int("num_key_value_heads")?.unwrap_or(num_attention_heads);
        let head_dim = int("head_dim")?.unwrap_or(hidden_size / num_attention_heads);
        if num_attention_heads % num_key_value_heads != 0 {
            return Err(bad(
                path,
                format!("num_attention_heads ({num_attention_heads}) is not a multiple of num_key_value_heads ({num_key_value_heads})"),
            ));
        }
        let family = model_type.as_str();
        // rope_theta defaults differ by family; transformers 5 may nest it under rope_parameters.
        let rope_params = raw.get("rope_parameters").filter(|v| v.is_object());
        let rope_theta = match float("rope_theta")? {
            Some(t) => t,
            None => match rope_params.and_then(|p| p.get("rope_theta")).and_then(Value::as_f64) {
                Some(t) => t as f32,
                None => match family {
                    "qwen2" => 1_000_000.0,
                    "qwen3" | "qwen3_moe" => return Err(bad(path, "rope_theta is missing".into())),
                    _ => 10_000.0,
                },
            },
        };
        let scaling = raw.get("rope_scaling").filter(|v| v.is_object()).or(rope_params);
        let max_position_embeddings = int("max_position_embeddings")?.unwrap_or(match family {
            "qwen2" => 32768,
            "phi3" => 131072,
            _ => 2048,
        });
        let original_max = int("original_max_position_embeddings")?.unwrap_or(4096) as f32;
        let rope_scaling = parse_rope_scaling(scaling, path, original_max)?;
        let rope_dims = match float("partial_rotary_factor")? {
            Some(f) if f > 0.0 && f <= 1.0 => (head_dim as f32 * f) as i32,
            Some(f) => return Err(bad(path, format!("partial_rotary_factor must be in (0, 1], got {f}"))),
            None => head_dim,
        };
        let (qkv_bias, o_bias, mlp_bias, qk_norm) = match family {
            "qwen2" => (true, false, false, false),
            "qwen3" | "qwen3_moe" => (false, false, false, true),
            _ => {
                let ab = boolean("attention_bias", false);
                (ab, ab, boolean("mlp_bias", false), false)
            }
        };
        if family == "llama" || family == "mistral" {
            if let Some(types) = raw.get("layer_types").and_then(Value::as_array) {
                if types.iter().any(|t| t.as_str() != Some("full_attention")) {
                    return Err(LmError::UnsupportedModel(format!("{}: sliding-window layer_types are not supported yet", path.display())));
                }
            }
        }
        Ok(ModelConfig {
            hidden_size,
            num_hidden_layers: req("num_hidden_layers")?,
            intermediate_size: req("intermediate_size")?,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rope_dims,
            rms_norm_eps: float("rms_norm_eps")?.ok_or_else(|| bad(path, "missing \"rms_norm_eps\"".into()))?,
            vocab_size: req("vocab_size")?,
            rope_theta,
            rope_traditional: boolean("rope_traditional", false),
            rope_scaling,
            max_position_embeddings,
            // MLX-LM's ModelArgs default this to true, except Phi-3's.
            tie_word_embeddings: boolean("tie_word_embeddings", family != "phi3"),
            qkv_bias,
            o_bias,
            mlp_bias,
            qk_norm,
            model_type,
            raw,
        })
    }
}

/// The quantization of the bulk of a model's weights, as config.json's
/// top-level `quantization` names it (layers may differ; `info` reports this).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantization {
    pub bits: i32,
    pub group_size: i32,
    pub mode: mlx::quant::Mode,
}

impl ModelConfig {
    /// `quantization`'s `bits`, `group_size` and `mode` ("affine" when it names none, as
    /// `to_quantized`'s default); None for a float model.
    pub fn quantization(&self) -> Option<Quantization> {
        let q = self.raw.get("quantization").filter(|v| v.is_object())?;
        let int = |key: &str| q.get(key)?.as_i64().map(|n| n as i32);
        let mode = match q.get("mode").and_then(Value::as_str) {
            None => mlx::quant::Mode::Affine,
            Some(m) => mlx::quant::Mode::from_name(m)?,
        };
        Some(Quantization { bits: int("bits")?, group_size: int("group_size")?, mode })
    }
}

/// MLX-LM's reading of a Hugging Face `quantization_config` (its own, or its
/// text model's) where config.json has no `quantization`: the methods whose
/// weights are MLX's floating-point packing as they are (OpenAI's GPT-OSS is
/// `mxfp4`) become that `quantization`, as MLX-LM's `load_model` sets it.
fn quantization_from_hf(raw: &Value) -> Option<Value> {
    if raw.get("quantization").is_some_and(Value::is_object) {
        return None;
    }
    let hf = raw.get("quantization_config").or_else(|| raw.get("text_config")?.get("quantization_config"))?;
    let (group_size, bits, mode) = match hf.get("quant_method")?.as_str()? {
        "mxfp4" => (32, 4, "mxfp4"),
        "mxfp8" => (32, 8, "mxfp8"),
        _ => return None,
    };
    Some(serde_json::json!({ "group_size": group_size, "bits": bits, "mode": mode }))
}

fn parse_rope_scaling(v: Option<&Value>, path: &Path, original_max_positions: f32) -> Result<RopeScaling> {
    let Some(obj) = v else { return Ok(RopeScaling::None) };
    let kind = obj.get("type").and_then(Value::as_str).or_else(|| obj.get("rope_type").and_then(Value::as_str)).unwrap_or("default");
    let num = |key: &str, default: Option<f32>| -> Result<f32> {
        match obj.get(key).and_then(Value::as_f64) {
            Some(f) => Ok(f as f32),
            None => default.ok_or_else(|| bad(path, format!("rope_scaling.{key} is missing"))),
        }
    };
    Ok(match kind {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: num("factor", None)? },
        "dynamic" => RopeScaling::Dynamic { factor: num("factor", None)? },
        "yarn" | "deepseek_yarn" => RopeScaling::Yarn {
            factor: num("factor", None)?,
            original_max_positions: num("original_max_position_embeddings", Some(4096.0))?,
            beta_fast: num("beta_fast", Some(32.0))?,
            beta_slow: num("beta_slow", Some(1.0))?,
            mscale: num("mscale", Some(1.0))?,
            mscale_all_dim: num("mscale_all_dim", Some(0.0))?,
        },
        "longrope" | "su" => {
            let factors = obj.get("long_factor").and_then(Value::as_array).ok_or_else(|| bad(path, "rope_scaling.long_factor is missing".into()))?;
            let long_factor = factors
                .iter()
                .map(|f| f.as_f64().map(|f| f as f32).ok_or_else(|| bad(path, format!("rope_scaling.long_factor holds {f}, not a number"))))
                .collect::<Result<Vec<_>>>()?;
            RopeScaling::LongRope {
                long_factor,
                original_max_positions,
                long_mscale: obj.get("long_mscale").and_then(Value::as_f64).map(|f| f as f32),
            }
        }
        "llama3" => RopeScaling::Llama3 {
            factor: num("factor", None)?,
            low_freq_factor: num("low_freq_factor", Some(1.0))?,
            high_freq_factor: num("high_freq_factor", Some(4.0))?,
            original_max_positions: num("original_max_position_embeddings", Some(8192.0))?,
        },
        other => {
            return Err(LmError::UnsupportedModel(format!(
                "{}: rope scaling type \"{other}\" is not supported (supported: linear, dynamic, llama3, longrope, yarn)",
                path.display()
            )))
        }
    })
}
