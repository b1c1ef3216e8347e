//! The S3Gen flow's sizes. Only the depths and the step count are read from
//! config.json's `s3gen_config` (so tests can shrink the model); every width is
//! the released model's constant, as mlx-audio hard-codes them.
use serde_json::Value;

use crate::{Result, TtsError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3GenConfig {
    /// Conformer blocks before the 2x upsampling.
    pub encoder_num_blocks: i32,
    /// Conformer blocks after it.
    pub encoder_num_up_blocks: i32,
    /// Transformer blocks inside each down, mid and up block of the estimator.
    pub decoder_n_blocks: i32,
    pub decoder_num_mid_blocks: i32,
    /// Euler steps of the flow-matching solver.
    pub n_timesteps: i32,
    /// Turbo's distilled flow (mlx-audio's `meanflow`): its estimator also takes the
    /// step's end time, and the solver runs plain Euler steps from fresh noise, no guidance.
    pub meanflow: bool,
}

impl Default for S3GenConfig {
    fn default() -> Self {
        S3GenConfig {
            encoder_num_blocks: 6,
            encoder_num_up_blocks: 4,
            decoder_n_blocks: 4,
            decoder_num_mid_blocks: 12,
            n_timesteps: 10,
            meanflow: false,
        }
    }
}

impl S3GenConfig {
    /// Reads `s3gen_config` from the whole config.json (absent keys keep the
    /// real model's values). `source` names the file in error messages.
    pub fn from_config(root: &Value, source: &str) -> Result<S3GenConfig> {
        Self::read(root, source, S3GenConfig::default())
    }

    /// Turbo's: the meanflow flow with mlx-audio's 2 steps (`n_cfm_timesteps=2`).
    pub fn turbo_from_config(root: &Value, source: &str) -> Result<S3GenConfig> {
        Self::read(root, source, S3GenConfig { n_timesteps: 2, meanflow: true, ..S3GenConfig::default() })
    }

    fn read(root: &Value, source: &str, defaults: S3GenConfig) -> Result<S3GenConfig> {
        let mut cfg = defaults;
        let Some(section) = root.get("s3gen_config") else {
            return Ok(cfg);
        };
        if section.is_null() {
            return Ok(cfg);
        }
        if !section.is_object() {
            return Err(TtsError::InvalidWeights(format!("{source}: \"s3gen_config\" must be an object")));
        }
        let fields: [(&str, &mut i32); 5] = [
            ("encoder_num_blocks", &mut cfg.encoder_num_blocks),
            ("encoder_num_up_blocks", &mut cfg.encoder_num_up_blocks),
            ("decoder_n_blocks", &mut cfg.decoder_n_blocks),
            ("decoder_num_mid_blocks", &mut cfg.decoder_num_mid_blocks),
            ("n_timesteps", &mut cfg.n_timesteps),
        ];
        for (key, slot) in fields {
            match section.get(key) {
                None | Some(Value::Null) => {}
                Some(v) => {
                    // Zero blocks is a legal (degenerate) network; zero steps is not a solver.
                    let min = if key == "n_timesteps" { 1 } else { 0 };
                    match v.as_i64() {
                        Some(n) if n >= min && n <= i32::MAX as i64 => *slot = n as i32,
                        _ => return Err(TtsError::InvalidWeights(format!("{source}: \"s3gen_config.{key}\" must be an integer >= {min}, got {v}"))),
                    }
                }
            }
        }
        Ok(cfg)
    }
}
