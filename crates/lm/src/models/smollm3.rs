//! SmolLM3 (`smollm3`), as MLX-LM's `smollm3.py`: the Llama decoder with
//! RoPE switched off in some layers (NoPE): `no_rope_layers` lists per layer
//! whether it uses RoPE (1) or not (0); without it every
//! `no_rope_layer_interval`-th layer (default 4) has none.
use mlx::Dtype;
use serde_json::Value;

use super::decoder::Decoder;
use super::LanguageModel;
use crate::config::ModelConfig;
use crate::error::{LmError, Result};
use crate::weights::Weights;

/// Per layer, whether it skips RoPE.
fn nope_layers(c: &ModelConfig) -> Result<Vec<bool>> {
    let n = c.num_hidden_layers as usize;
    let bad = |what: String| LmError::InvalidWeights(format!("config.json: {what}"));
    match c.raw.get("no_rope_layers") {
        Some(Value::Array(flags)) => {
            if flags.len() != n {
                return Err(bad(format!("no_rope_layers lists {} layers, the model has {n}", flags.len())));
            }
            flags.iter().map(|f| f.as_i64().map(|v| v == 0).ok_or_else(|| bad(format!("no_rope_layers holds {f}, not 0 or 1")))).collect()
        }
        None | Some(Value::Null) => {
            let interval = match c.raw.get("no_rope_layer_interval") {
                None | Some(Value::Null) => 4,
                Some(v) => v.as_i64().filter(|&i| i > 0).ok_or_else(|| bad(format!("no_rope_layer_interval must be a positive integer, got {v}")))?,
            };
            Ok((0..n as i64).map(|i| (i + 1) % interval == 0).collect())
        }
        Some(other) => Err(bad(format!("no_rope_layers must be a list, got {other}"))),
    }
}

pub(super) fn build(config: ModelConfig, w: Weights, dtype: Option<Dtype>, progress: &mut dyn FnMut(f64)) -> Result<Box<dyn LanguageModel>> {
    let nope = nope_layers(&config)?;
    let mut model = Decoder::build(config, w, dtype, progress)?;
    model.stack.set_nope_layers(nope);
    Ok(Box::new(model))
}
