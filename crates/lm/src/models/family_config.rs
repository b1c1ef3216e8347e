//! Config reading that several families share: MLX-LM's `ModelArgs` defaults
//! filled into a `config.json`, and per-layer cache kinds from `layer_types`.
use serde_json::{Map, Value};

use crate::cache::LayerKind;
use crate::config::ModelConfig;
use crate::error::{LmError, Result};

/// `raw` with each of `defaults` set where it names nothing (Hugging Face
/// leaves out what equals its defaults, which MLX-LM's `ModelArgs` repeat).
/// Whole numbers go in as integers, as a config file writes them.
pub(super) fn with_defaults(raw: &Value, defaults: &[(&str, f64)]) -> std::result::Result<Map<String, Value>, String> {
    let mut c = raw.as_object().cloned().ok_or("config.json must hold an object")?;
    for (key, v) in defaults {
        if c.get(*key).is_none_or(Value::is_null) {
            let v = if v.fract() == 0.0 { Value::from(*v as i64) } else { Value::from(*v) };
            c.insert(key.to_string(), v);
        }
    }
    Ok(c)
}

fn bad(what: String) -> LmError {
    LmError::InvalidWeights(format!("config.json: {what}"))
}

/// Per layer, from `layer_types` ("full_attention" or "sliding_attention";
/// `default(i)` names layer `i`'s when the config has none): a growing cache,
/// or a window of `sliding_window` positions.
pub(super) fn layer_kinds(c: &ModelConfig, default: impl Fn(usize) -> &'static str) -> Result<Vec<LayerKind>> {
    let n = c.num_hidden_layers as usize;
    let types: Vec<Value> = match c.raw.get("layer_types").filter(|v| !v.is_null()) {
        None => (0..n).map(|i| Value::from(default(i))).collect(),
        Some(v) => v.as_array().cloned().ok_or_else(|| bad("layer_types must be a list".into()))?,
    };
    if types.len() != n {
        return Err(bad(format!("layer_types lists {} layers, the model has {n}", types.len())));
    }
    types
        .iter()
        .map(|t| match t.as_str() {
            Some("full_attention") => Ok(LayerKind::Growing),
            Some("sliding_attention") => {
                let w = c.raw.get("sliding_window").and_then(Value::as_i64).filter(|&w| w > 0 && w <= i32::MAX as i64);
                w.map(|w| LayerKind::Window(w as i32)).ok_or_else(|| bad("sliding layers need a positive \"sliding_window\"".into()))
            }
            _ => Err(bad(format!("layer_types holds {t}, not full_attention or sliding_attention"))),
        })
        .collect()
}

/// `raw[key]` as a positive number; `default` where the config names none (or null).
pub(super) fn number(raw: &Value, key: &str, default: f64) -> Result<f64> {
    match raw.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v.as_f64().filter(|f| *f > 0.0).ok_or_else(|| bad(format!("\"{key}\" must be a positive number, got {v}"))),
    }
}

/// `raw[key]` as an integer of at least `min` (and at most i32's range); `default` where the config names none (or null).
pub(super) fn int(raw: &Value, key: &str, default: i64, min: i64) -> Result<i64> {
    match raw.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_i64()
            .filter(|n| *n >= min && *n <= i32::MAX as i64)
            .ok_or_else(|| bad(format!("\"{key}\" must be an integer of at least {min}, got {v}"))),
    }
}

/// `raw[key]` as a boolean; `default` where the config names none (or null).
pub(super) fn flag(raw: &Value, key: &str, default: bool) -> Result<bool> {
    match raw.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v.as_bool().ok_or_else(|| bad(format!("\"{key}\" must be true or false, got {v}"))),
    }
}
