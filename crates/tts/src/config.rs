//! Chatterbox `config.json`: mlx-audio's layout (`model_type: "chatterbox"`, or
//! `"chatterbox_turbo"` for Chatterbox Turbo, `t3_config`, optional
//! `s3gen_config` and `quantization`). Each part reads its own section; this
//! only checks the file and the model type.
use std::path::Path;

use serde_json::Value;

use crate::text_mtl::Preprocessing;
use crate::{Result, TtsError};

/// Chatterbox Multilingual's text vocabulary (mlx-audio: `T3Config.multilingual()`).
const MTL_TEXT_VOCAB: u64 = 2454;

pub struct ChatterboxConfig {
    pub raw: Value,
}

impl ChatterboxConfig {
    pub fn from_dir(dir: &Path) -> Result<ChatterboxConfig> {
        if !dir.is_dir() {
            return Err(TtsError::ModelNotFound(format!("model folder {} does not exist", dir.display())));
        }
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| TtsError::ModelNotFound(format!("cannot read {}: {e}", path.display())))?;
        let raw: Value = serde_json::from_str(&text).map_err(|e| TtsError::InvalidWeights(format!("{}: invalid JSON: {e}", path.display())))?;
        if !raw.is_object() {
            return Err(TtsError::InvalidWeights(format!("{}: expected a JSON object", path.display())));
        }
        match raw.get("model_type").and_then(Value::as_str) {
            Some("chatterbox" | "chatterbox_turbo") => {}
            other => {
                return Err(TtsError::UnsupportedModel(format!(
                    "{}: model_type {} is not a supported speech model (supported: chatterbox, chatterbox_turbo)",
                    path.display(),
                    other.map(|s| format!("\"{s}\"")).unwrap_or_else(|| "is missing and".into())
                )))
            }
        }
        Ok(ChatterboxConfig { raw })
    }

    /// Chatterbox Turbo (mlx-audio's `chatterbox_turbo`, which its loader picks by this
    /// model type): GPT-2 T3, GPT-2 tokenizer, meanflow S3Gen.
    pub fn turbo(&self) -> bool {
        self.raw.get("model_type").and_then(Value::as_str) == Some("chatterbox_turbo")
    }

    /// `multilingual` (Python truthiness, as mlx-audio's `bool(...)`) or `vocab_size` 2454.
    fn declared_multilingual(&self) -> bool {
        let truthy = match self.raw.get("multilingual") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(Value::Number(n)) => n.as_f64() != Some(0.0),
            Some(Value::String(s)) => !s.is_empty(),
            Some(Value::Array(a)) => !a.is_empty(),
            Some(Value::Object(o)) => !o.is_empty(),
        };
        truthy || self.raw.get("vocab_size").and_then(Value::as_u64) == Some(MTL_TEXT_VOCAB)
    }

    /// `t3_model` as mlx-audio's `ModelConfig.from_dict` reads it (lowercase):
    /// absent, "v2" when `multilingual` or `vocab_size` 2454 say so, else "english".
    fn t3_model(&self) -> String {
        match self.raw.get("t3_model") {
            None | Some(Value::Null) => (if self.declared_multilingual() { "v2" } else { "english" }).to_string(),
            Some(Value::String(s)) => s.to_lowercase(),
            Some(other) => other.to_string().to_lowercase(),
        }
    }

    /// The multilingual checkpoints' text preparation, `None` for the English
    /// one. Multilingual, as in mlx-audio: `multilingual: true`, `vocab_size`
    /// 2454, `t3_model` "v2" or "v3", or a T3 text vocabulary of 2454.
    pub fn multilingual(&self) -> Option<Preprocessing> {
        if self.turbo() {
            return None;
        }
        let t3_model = self.t3_model();
        let t3_vocab = self.section("t3_config").get("text_tokens_dict_size").and_then(Value::as_u64);
        let multilingual = self.declared_multilingual() || matches!(t3_model.as_str(), "v2" | "v3") || t3_vocab == Some(MTL_TEXT_VOCAB);
        if !multilingual {
            return None;
        }
        Some(match self.raw.get("text_preprocessing").and_then(Value::as_str) {
            Some(name) => Preprocessing::from_name(name),
            None if t3_model == "v3" => Preprocessing::V3,
            None => Preprocessing::Legacy,
        })
    }

    /// `t3_config`, or for a multilingual folder without one (older conversions
    /// record only `multilingual` / `vocab_size`), T3's multilingual text vocabulary.
    pub fn t3_section(&self) -> Value {
        match self.raw.get("t3_config") {
            None if self.multilingual().is_some() => serde_json::json!({ "text_tokens_dict_size": MTL_TEXT_VOCAB }),
            _ => self.section("t3_config").clone(),
        }
    }

    /// A section such as `t3_config` or `s3gen_config` (null when absent).
    pub fn section(&self, name: &str) -> &Value {
        self.raw.get(name).unwrap_or(&Value::Null)
    }

    /// `quantization` as the weight loader takes it.
    pub fn quantization(&self) -> Option<Value> {
        self.raw.get("quantization").cloned().filter(Value::is_object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(raw: Value) -> ChatterboxConfig {
        ChatterboxConfig { raw }
    }

    // mlx-audio's ModelConfig.from_dict: each of these fields alone makes a checkpoint multilingual.
    #[test]
    fn multilingual_detection_follows_mlx_audio() {
        assert_eq!(config(json!({"model_type": "chatterbox"})).multilingual(), None);
        assert_eq!(config(json!({"t3_model": "english", "vocab_size": 704})).multilingual(), None);
        assert_eq!(config(json!({"multilingual": true})).multilingual(), Some(Preprocessing::Legacy));
        assert_eq!(config(json!({"vocab_size": 2454})).multilingual(), Some(Preprocessing::Legacy));
        assert_eq!(config(json!({"t3_model": "V2"})).multilingual(), Some(Preprocessing::Legacy));
        assert_eq!(config(json!({"t3_model": "v3"})).multilingual(), Some(Preprocessing::V3));
        assert_eq!(config(json!({"t3_model": "v3", "text_preprocessing": "legacy"})).multilingual(), Some(Preprocessing::Legacy));
        assert_eq!(config(json!({"multilingual": true, "text_preprocessing": "nfkd,FullCase"})).multilingual(), Some(Preprocessing::V3));
        assert_eq!(config(json!({"t3_config": {"text_tokens_dict_size": 2454}})).multilingual(), Some(Preprocessing::Legacy));
    }

    #[test]
    fn multilingual_without_t3_config_gets_the_multilingual_text_vocabulary() {
        assert_eq!(config(json!({"multilingual": true})).t3_section(), json!({"text_tokens_dict_size": 2454}));
        assert_eq!(config(json!({"multilingual": true, "t3_config": {"max_text_tokens": 9}})).t3_section(), json!({"max_text_tokens": 9}));
        assert_eq!(config(json!({})).t3_section(), Value::Null);
    }
}
