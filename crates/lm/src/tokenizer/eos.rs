//! EOS ids of a model folder, by MLX-LM 0.32.2's rule.
//!
//! `mlx_lm.utils.load_config` reads `config.json`; when
//! `generation_config.json` exists, parses, and has a truthy `eos_token_id`
//! (a non-zero int or a non-empty list), that value replaces the config's.
//! An unparsable `generation_config.json` is ignored. `TokenizerWrapper` then
//! uses the union of those ids and the tokenizer's own `eos_token_id`.

use std::path::Path;

use serde_json::Value;

use crate::error::{LmError, Result};

/// The `eos_token_id` ids named by `config.json`, as overridden by
/// `generation_config.json`. The tokenizer's EOS is not included; see
/// [`super::Tokenizer::from_model_dir`] for the union MLX-LM uses.
pub fn config_eos_token_ids(model_dir: &Path) -> Result<Vec<u32>> {
    let config_path = model_dir.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            LmError::ModelNotFound(format!("{} not found", config_path.display()))
        } else {
            LmError::InvalidWeights(format!("could not read {}: {e}", config_path.display()))
        }
    })?;
    let config: Value =
        serde_json::from_str(&text).map_err(|e| LmError::InvalidWeights(format!("{} is not valid JSON: {e}", config_path.display())))?;
    let mut chosen = (config.get("eos_token_id").cloned(), config_path);

    let generation_path = model_dir.join("generation_config.json");
    if let Some(value) = std::fs::read_to_string(&generation_path)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v.get("eos_token_id").cloned())
    {
        if is_truthy(&value) {
            chosen = (Some(value), generation_path);
        }
    }
    let (value, source) = chosen;
    ids_from_value(value.as_ref(), &source)
}

/// Python truthiness of a JSON value, as `if eos_token_id := ...` sees it.
fn is_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn ids_from_value(value: Option<&Value>, source: &Path) -> Result<Vec<u32>> {
    let bad = || LmError::InvalidWeights(format!("{}: eos_token_id must be a token id or a list of token ids", source.display()));
    let as_id = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(bad);
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items.iter().filter(|v| !v.is_null()).map(as_id).collect(),
        Some(v) => Ok(vec![as_id(v)?]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder under the temp dir, removed when dropped.
    struct Folder(std::path::PathBuf);

    impl std::ops::Deref for Folder {
        type Target = std::path::Path;
        fn deref(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl Drop for Folder {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn folder(files: &[(&str, &str)]) -> Folder {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!("lm-eos-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        Folder(dir)
    }

    #[test]
    fn config_alone() {
        let d = folder(&[("config.json", r#"{"eos_token_id": 7}"#)]);
        assert_eq!(config_eos_token_ids(&d).unwrap(), vec![7]);
        let d = folder(&[("config.json", r#"{"eos_token_id": [1, 2]}"#)]);
        assert_eq!(config_eos_token_ids(&d).unwrap(), vec![1, 2]);
        let d = folder(&[("config.json", r#"{}"#)]);
        assert_eq!(config_eos_token_ids(&d).unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn generation_config_replaces_only_when_truthy() {
        let d = folder(&[("config.json", r#"{"eos_token_id": 7}"#), ("generation_config.json", r#"{"eos_token_id": [8, 9]}"#)]);
        assert_eq!(config_eos_token_ids(&d).unwrap(), vec![8, 9]);
        for falsy in ["0", "[]", "null"] {
            let d = folder(&[("config.json", r#"{"eos_token_id": 7}"#), ("generation_config.json", &format!(r#"{{"eos_token_id": {falsy}}}"#))]);
            assert_eq!(config_eos_token_ids(&d).unwrap(), vec![7], "{falsy}");
        }
        let d = folder(&[("config.json", r#"{"eos_token_id": 7}"#), ("generation_config.json", "{not json")]);
        assert_eq!(config_eos_token_ids(&d).unwrap(), vec![7]);
    }

    #[test]
    fn errors_name_the_file() {
        let d = folder(&[]);
        let e = config_eos_token_ids(&d).unwrap_err();
        assert_eq!(e.code(), "MODEL_NOT_FOUND");
        assert!(e.message().contains("config.json"));
        let d = folder(&[("config.json", r#"{"eos_token_id": "x"}"#)]);
        let e = config_eos_token_ids(&d).unwrap_err();
        assert_eq!(e.code(), "INVALID_WEIGHTS");
        assert!(e.message().contains("config.json"));
    }
}
