//! Chatterbox `config.json`: mlx-audio's layout (`model_type: "chatterbox"`,
//! `t3_config`, optional `s3gen_config` and `quantization`). Each part reads
//! its own section; this only checks the file and the model type.
use std::path::Path;

use serde_json::Value;

use crate::{Result, TtsError};

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
            Some("chatterbox") => {}
            other => {
                return Err(TtsError::UnsupportedModel(format!(
                    "{}: model_type {} is not a supported speech model (supported: chatterbox)",
                    path.display(),
                    other.map(|s| format!("\"{s}\"")).unwrap_or_else(|| "is missing and".into())
                )))
            }
        }
        if raw.get("multilingual").and_then(Value::as_bool) == Some(true) {
            return Err(TtsError::UnsupportedModel(format!("{}: multilingual Chatterbox is not supported yet (English only)", path.display())));
        }
        Ok(ChatterboxConfig { raw })
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
