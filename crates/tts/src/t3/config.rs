//! `t3_config` of a Chatterbox `config.json`: mlx-audio's `T3Config` fields
//! with its defaults, plus `llama_config`, overrides of the Llama backbone
//! (`LLAMA_520M_CONFIG`), which the test fixtures use to shrink it. Chatterbox
//! Turbo's (`T3Config.turbo()`) has other defaults and a GPT-2 backbone
//! (`gpt2_config`, the fixtures' overrides of it).
use std::path::Path;

use lm::config::ModelConfig;
use serde_json::{json, Map, Value};

use super::gpt2::Gpt2Config;
use crate::{Result, TtsError};

#[derive(Debug, Clone)]
pub struct T3Config {
    pub text_tokens_dict_size: u32,
    pub start_text_token: u32,
    pub stop_text_token: u32,
    pub max_text_tokens: usize,
    pub speech_tokens_dict_size: u32,
    pub start_speech_token: u32,
    pub stop_speech_token: u32,
    pub max_speech_tokens: usize,
    pub speaker_embed_size: i32,
    pub use_perceiver_resampler: bool,
    /// Whether the conditioning carries the emotion-exaggeration token.
    pub emotion_adv: bool,
    /// How many of a cloned voice's speech tokens T3's prompt keeps (`speech_cond_prompt_len`).
    pub speech_cond_prompt_len: usize,
    /// The Llama backbone (Chatterbox, Multilingual; unused for Turbo).
    pub llama: ModelConfig,
    /// Turbo's GPT-2 backbone, which replaces the Llama one.
    pub gpt2: Option<Gpt2Config>,
}

/// mlx-audio's `LLAMA_520M_CONFIG`, the only backbone Chatterbox ships.
fn llama_520m() -> Value {
    json!({
        "model_type": "llama",
        "vocab_size": 4000,
        "hidden_size": 1024,
        "num_hidden_layers": 30,
        "intermediate_size": 4096,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": 64,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "factor": 8.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3"
        },
        "attention_bias": false,
        "mlp_bias": false,
        "tie_word_embeddings": false
    })
}

fn bad(key: &str, msg: String) -> TtsError {
    TtsError::InvalidWeights(format!("config.json: t3_config.{key} {msg}"))
}

impl T3Config {
    /// Reads the `t3_config` object (`null` when absent: every default).
    pub fn from_json(v: &Value) -> Result<T3Config> {
        Self::read(v, false)
    }

    /// Chatterbox Turbo's `t3_config`: `T3Config.turbo()`'s defaults (GPT-2's text
    /// vocabulary, a 375-token reference clip, no perceiver, no emotion) and backbone.
    pub fn turbo_from_json(v: &Value) -> Result<T3Config> {
        Self::read(v, true)
    }

    fn read(v: &Value, turbo: bool) -> Result<T3Config> {
        let empty = Map::new();
        let obj = match v {
            Value::Null => &empty,
            Value::Object(o) => o,
            other => return Err(bad("", format!("must be an object, got {other}"))),
        };
        let uint = |key: &str, default: u64| -> Result<u64> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => v.as_u64().filter(|&n| n <= i32::MAX as u64).ok_or_else(|| bad(key, format!("must be a non-negative integer, got {v}"))),
            }
        };
        let boolean = |key: &str, default: bool| -> Result<bool> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => v.as_bool().ok_or_else(|| bad(key, format!("must be true or false, got {v}"))),
            }
        };
        let string = |key: &str, default: &str| -> Result<String> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(default.to_string()),
                Some(v) => v.as_str().map(String::from).ok_or_else(|| bad(key, format!("must be a string, got {v}"))),
            }
        };

        // Chatterbox's T3 only exists in these variants; anything else would
        // silently run with the wrong architecture.
        let backbone = if turbo { "GPT2_medium" } else { "Llama_520M" };
        let name = string("llama_config_name", backbone)?;
        if name != backbone {
            return Err(TtsError::UnsupportedModel(format!(
                "config.json: t3_config.llama_config_name \"{name}\" is not supported (supported: {backbone})"
            )));
        }
        // Turbo has no T3 position tables (GPT-2 brings its own): `input_pos_emb` None.
        let pos = if turbo { "learned".to_string() } else { string("input_pos_emb", "learned")? };
        if pos != "learned" {
            return Err(TtsError::UnsupportedModel(format!("config.json: t3_config.input_pos_emb \"{pos}\" is not supported (supported: learned)")));
        }
        let enc = string("encoder_type", "voice_encoder")?;
        if enc != "voice_encoder" {
            return Err(TtsError::UnsupportedModel(format!(
                "config.json: t3_config.encoder_type \"{enc}\" is not supported (supported: voice_encoder)"
            )));
        }

        let mut llama = llama_520m();
        match obj.get("llama_config") {
            None | Some(Value::Null) => {}
            Some(Value::Object(over)) => {
                let base = llama.as_object_mut().expect("a JSON object literal");
                for (k, v) in over {
                    base.insert(k.clone(), v.clone());
                }
            }
            Some(other) => return Err(bad("llama_config", format!("must be an object, got {other}"))),
        }
        let llama = ModelConfig::from_value(llama, Path::new("config.json t3_config.llama_config"))?;

        let cfg = T3Config {
            text_tokens_dict_size: uint("text_tokens_dict_size", if turbo { 50276 } else { 704 })? as u32,
            start_text_token: uint("start_text_token", 255)? as u32,
            stop_text_token: uint("stop_text_token", 0)? as u32,
            max_text_tokens: uint("max_text_tokens", 2048)? as usize,
            speech_tokens_dict_size: uint("speech_tokens_dict_size", if turbo { 6563 } else { 8194 })? as u32,
            start_speech_token: uint("start_speech_token", 6561)? as u32,
            stop_speech_token: uint("stop_speech_token", 6562)? as u32,
            max_speech_tokens: uint("max_speech_tokens", 4096)? as usize,
            speaker_embed_size: uint("speaker_embed_size", 256)? as i32,
            use_perceiver_resampler: boolean("use_perceiver_resampler", !turbo)?,
            emotion_adv: boolean("emotion_adv", !turbo)?,
            speech_cond_prompt_len: uint("speech_cond_prompt_len", if turbo { 375 } else { 150 })? as usize,
            llama,
            gpt2: if turbo { Some(Gpt2Config::from_json(obj.get("gpt2_config"))?) } else { None },
        };
        if turbo && (cfg.use_perceiver_resampler || cfg.emotion_adv) {
            return Err(TtsError::UnsupportedModel("config.json: Turbo's T3 has no perceiver and no emotion input".into()));
        }
        for (key, id, size) in [
            ("start_text_token", cfg.start_text_token, cfg.text_tokens_dict_size),
            ("stop_text_token", cfg.stop_text_token, cfg.text_tokens_dict_size),
            ("start_speech_token", cfg.start_speech_token, cfg.speech_tokens_dict_size),
            ("stop_speech_token", cfg.stop_speech_token, cfg.speech_tokens_dict_size),
        ] {
            if id >= size {
                return Err(bad(key, format!("({id}) is outside its vocabulary (size {size})")));
            }
        }
        Ok(cfg)
    }

    pub fn hidden_size(&self) -> i32 {
        self.gpt2.as_ref().map_or(self.llama.hidden_size, |g| g.n_embd)
    }

    /// Rows of the learned text position table (mlx-audio: `max_text_tokens + 2`).
    pub fn text_positions(&self) -> i32 {
        self.max_text_tokens as i32 + 2
    }

    /// Rows of the learned speech position table (mlx-audio: `max_speech_tokens + 4`).
    pub fn speech_positions(&self) -> i32 {
        self.max_speech_tokens as i32 + 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn turbo_defaults_are_t3_config_turbo_s() {
        let c = T3Config::turbo_from_json(&Value::Null).unwrap();
        assert_eq!((c.text_tokens_dict_size, c.speech_tokens_dict_size, c.speech_cond_prompt_len), (50276, 6563, 375));
        assert!(!c.use_perceiver_resampler && !c.emotion_adv && c.gpt2.is_some());
        assert_eq!(c.hidden_size(), 1024);
        let e = T3Config::turbo_from_json(&json!({"use_perceiver_resampler": true})).err().unwrap();
        assert_eq!(e.code(), "UNSUPPORTED_MODEL");
        let e = T3Config::turbo_from_json(&json!({"llama_config_name": "Llama_520M"})).err().unwrap();
        assert_eq!(e.code(), "UNSUPPORTED_MODEL");
    }
}
