//! `tokenizer_config.json` and the chat template files next to it, read the
//! way transformers 5 reads them.

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{LmError, Result};

/// The named special tokens transformers passes into chat templates
/// (`SPECIAL_TOKENS_ATTRIBUTES`), in its order.
pub const SPECIAL_TOKEN_NAMES: [&str; 7] = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];

/// An entry of `added_tokens_decoder`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedTokenInfo {
    pub id: u32,
    pub content: String,
    pub special: bool,
}

/// Chat templates as transformers stores them: one, or several by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ChatTemplateSource {
    #[default]
    None,
    Single(String),
    /// `(name, template)` in file order; transformers picks "tool_use" when
    /// tools are given and it exists, else "default".
    Named(Vec<(String, String)>),
}

#[derive(Debug, Clone, Default)]
pub struct TokenizerConfig {
    /// Named special tokens (`bos_token`, `eos_token`, ...) that are set.
    pub special_tokens: Vec<(&'static str, String)>,
    pub chat_template: ChatTemplateSource,
    pub clean_up_tokenization_spaces: bool,
    /// transformers skips the clean-up for BPE models unless this is set.
    pub clean_up_for_bpe: bool,
    /// Kept for callers; transformers 5 ignores it when `tokenizer.json`
    /// exists (the post-processor decides), and so do we.
    pub add_bos_token: Option<bool>,
    pub added_tokens: Vec<AddedTokenInfo>,
}

impl TokenizerConfig {
    pub fn special_token(&self, name: &str) -> Option<&str> {
        self.special_tokens.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    /// Reads `tokenizer_config.json` (optional, as in transformers) and the
    /// chat template files that override its `chat_template`.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join("tokenizer_config.json");
        let mut config = if path.is_file() {
            let text = std::fs::read_to_string(&path).map_err(|e| LmError::InvalidWeights(format!("could not read {}: {e}", path.display())))?;
            let value: Value =
                serde_json::from_str(&text).map_err(|e| LmError::InvalidWeights(format!("{} is not valid JSON: {e}", path.display())))?;
            let Value::Object(map) = value else {
                return Err(LmError::InvalidWeights(format!("{} must hold a JSON object", path.display())));
            };
            Self::from_map(&map, &path)?
        } else {
            Self::default()
        };
        if let Some(files) = load_template_files(dir)? {
            config.chat_template = files;
        }
        Ok(config)
    }

    fn from_map(map: &Map<String, Value>, path: &Path) -> Result<Self> {
        let mut special_tokens = Vec::new();
        for name in SPECIAL_TOKEN_NAMES {
            if let Some(token) = token_content(map.get(name), path, name)? {
                special_tokens.push((name, token));
            }
        }
        let chat_template = match map.get("chat_template") {
            None | Some(Value::Null) => ChatTemplateSource::None,
            Some(Value::String(s)) => ChatTemplateSource::Single(s.clone()),
            Some(Value::Array(items)) => named_templates(items, path)?,
            Some(_) => {
                return Err(LmError::InvalidWeights(format!("{}: chat_template must be a string or a list of {{name, template}}", path.display())))
            }
        };
        Ok(TokenizerConfig {
            special_tokens,
            chat_template,
            clean_up_tokenization_spaces: flag(map, "clean_up_tokenization_spaces", path)?.unwrap_or(false),
            clean_up_for_bpe: flag(map, "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", path)?.unwrap_or(false),
            add_bos_token: flag(map, "add_bos_token", path)?,
            added_tokens: added_tokens(map.get("added_tokens_decoder"), path)?,
        })
    }
}

/// A special token may be a plain string or a serialized `AddedToken`
/// (`{"content": ..., "__type": "AddedToken", ...}`).
fn token_content(value: Option<&Value>, path: &Path, key: &str) -> Result<Option<String>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Object(o)) => match o.get("content") {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            _ => Err(LmError::InvalidWeights(format!("{}: {key} has no string \"content\"", path.display()))),
        },
        Some(_) => Err(LmError::InvalidWeights(format!("{}: {key} must be a string, an AddedToken object or null", path.display()))),
    }
}

fn flag(map: &Map<String, Value>, key: &str, path: &Path) -> Result<Option<bool>> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(LmError::InvalidWeights(format!("{}: {key} must be a boolean", path.display()))),
    }
}

fn named_templates(items: &[Value], path: &Path) -> Result<ChatTemplateSource> {
    let mut named = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let name = item.get("name").and_then(Value::as_str);
        let template = item.get("template").and_then(Value::as_str);
        match (name, template) {
            (Some(n), Some(t)) => named.push((n.to_string(), t.to_string())),
            _ => return Err(LmError::InvalidWeights(format!("{}: chat_template[{i}] needs string \"name\" and \"template\"", path.display()))),
        }
    }
    Ok(ChatTemplateSource::Named(named))
}

fn added_tokens(value: Option<&Value>, path: &Path) -> Result<Vec<AddedTokenInfo>> {
    let Some(Value::Object(map)) = value else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(map.len());
    for (key, entry) in map {
        let bad = || LmError::InvalidWeights(format!("{}: added_tokens_decoder[\"{key}\"] is malformed", path.display()));
        let id: u32 = key.parse().map_err(|_| bad())?;
        let content = entry.get("content").and_then(Value::as_str).ok_or_else(bad)?;
        let special = entry.get("special").and_then(Value::as_bool).unwrap_or(false);
        out.push(AddedTokenInfo { id, content: content.to_string(), special });
    }
    Ok(out)
}

/// transformers 5 gives `chat_template.jinja` and
/// `additional_chat_templates/*.jinja` priority over the config's
/// `chat_template`: one file alone is the template, several are named.
fn load_template_files(dir: &Path) -> Result<Option<ChatTemplateSource>> {
    let mut named: Vec<(String, String)> = Vec::new();
    let main = dir.join("chat_template.jinja");
    if main.is_file() {
        named.push(("default".to_string(), read_text(&main)?));
    }
    let extra_dir = dir.join("additional_chat_templates");
    if extra_dir.is_dir() {
        let entries = std::fs::read_dir(&extra_dir).map_err(|e| LmError::InvalidWeights(format!("could not list {}: {e}", extra_dir.display())))?;
        let mut files: Vec<_> =
            entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "jinja")).collect();
        files.sort();
        for file in files {
            let name = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            named.push((name, read_text(&file)?));
        }
    }
    Ok(match named.len() {
        0 => None,
        1 if named[0].0 == "default" => named.pop().map(|(_, t)| ChatTemplateSource::Single(t)),
        _ => Some(ChatTemplateSource::Named(named)),
    })
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| LmError::InvalidWeights(format!("could not read {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<TokenizerConfig> {
        let Value::Object(map) = v else { unreachable!() };
        TokenizerConfig::from_map(&map, Path::new("tokenizer_config.json"))
    }

    #[test]
    fn reads_tokens_in_both_forms() {
        let c = parse(json!({
            "bos_token": {"__type": "AddedToken", "content": "<s>"},
            "eos_token": "</s>",
            "unk_token": null,
            "chat_template": "{{ x }}",
            "added_tokens_decoder": {"5": {"content": "<x>", "special": true}}
        }))
        .unwrap();
        assert_eq!(c.special_token("bos_token"), Some("<s>"));
        assert_eq!(c.special_token("eos_token"), Some("</s>"));
        assert_eq!(c.special_token("unk_token"), None);
        assert_eq!(c.chat_template, ChatTemplateSource::Single("{{ x }}".into()));
        assert_eq!(c.added_tokens, vec![AddedTokenInfo { id: 5, content: "<x>".into(), special: true }]);
    }

    #[test]
    fn reads_named_templates() {
        let c = parse(json!({"chat_template": [
            {"name": "default", "template": "a"}, {"name": "tool_use", "template": "b"}
        ]}))
        .unwrap();
        assert_eq!(c.chat_template, ChatTemplateSource::Named(vec![("default".into(), "a".into()), ("tool_use".into(), "b".into())]));
    }

    #[test]
    fn rejects_malformed_values_naming_the_key() {
        let err = parse(json!({"eos_token": 3})).unwrap_err();
        assert_eq!(err.code(), "INVALID_WEIGHTS");
        assert!(err.message().contains("eos_token"), "{err}");
        let err = parse(json!({"chat_template": [{"name": "x"}]})).unwrap_err();
        assert!(err.message().contains("chat_template[0]"), "{err}");
    }
}
