//! Chat template rendering, matching transformers 5
//! `apply_chat_template(..., tokenize=False)`.

use minijinja::value::Value;
use minijinja::Environment;
use serde_json::Map;

use super::config::ChatTemplateSource;
use super::template_env::{new_environment, RAISED_PREFIX};
use super::template_values::from_json;
use crate::error::{LmError, Result};

/// Options of [`super::Tokenizer::apply_chat_template_with`].
#[derive(Debug, Clone, Default)]
pub struct ChatTemplateOptions {
    pub add_generation_prompt: bool,
    /// Passed as `enable_thinking` only when set, as transformers does with
    /// an absent keyword.
    pub enable_thinking: Option<bool>,
    /// JSON-schema tool definitions (`tools=`); `None` renders `tools` as none.
    pub tools: Option<Vec<serde_json::Value>>,
    /// Further template variables (transformers' `**kwargs`, such as GPT-OSS's
    /// `reasoning_effort`); they override the special tokens of the same
    /// name. The names above are not among them ([`RESERVED_VARIABLES`]).
    pub extra: Map<String, serde_json::Value>,
}

/// Variables that have options of their own (in transformers, parameters of
/// `apply_chat_template`: passing one again as a kwarg is a TypeError).
pub const RESERVED_VARIABLES: [&str; 5] = ["messages", "tools", "documents", "add_generation_prompt", "enable_thinking"];

/// The compiled templates of one tokenizer.
pub struct ChatTemplates {
    env: Environment<'static>,
    /// Names in the environment; a single template is named "default".
    names: Vec<String>,
    single: bool,
    /// Templates minijinja could not compile, with the reason; reported when
    /// used so that a model with an exotic template still loads.
    broken: Vec<(String, String)>,
    /// Where the templates came from, for messages.
    origin: String,
}

impl ChatTemplates {
    pub fn compile(source: &ChatTemplateSource, origin: String) -> Self {
        let mut env = new_environment();
        let (list, single) = match source {
            ChatTemplateSource::None => (Vec::new(), false),
            ChatTemplateSource::Single(t) => (vec![("default".to_string(), t.clone())], true),
            ChatTemplateSource::Named(list) => (list.clone(), false),
        };
        let mut names = Vec::new();
        let mut broken = Vec::new();
        for (name, text) in list {
            match env.add_template_owned(name.clone(), without_generation_tags(&text)) {
                Ok(()) => names.push(name),
                Err(e) => broken.push((name, e.to_string())),
            }
        }
        ChatTemplates { env, names, single, broken, origin }
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.broken.is_empty()
    }

    /// transformers' `get_chat_template`: with several templates, "tool_use"
    /// when tools are given and it exists, else "default".
    fn select(&self, has_tools: bool) -> Result<&str> {
        let all = || self.names.iter().chain(self.broken.iter().map(|(n, _)| n));
        let pick = if self.single {
            all().next()
        } else if has_tools && all().any(|n| n == "tool_use") {
            all().find(|n| *n == "tool_use")
        } else {
            all().find(|n| *n == "default")
        };
        let Some(name) = pick else {
            return Err(LmError::UnsupportedModel(if self.is_empty() {
                format!("{} has no chat_template", self.origin)
            } else {
                let mut names: Vec<&String> = all().collect();
                names.sort();
                format!("{} has several chat templates and none named \"default\": {names:?}", self.origin)
            }));
        };
        if let Some((_, reason)) = self.broken.iter().find(|(n, _)| n == name) {
            return Err(LmError::UnsupportedModel(format!("chat template \"{name}\" in {} could not be compiled: {reason}", self.origin)));
        }
        Ok(name)
    }

    pub fn render(&self, messages: &[serde_json::Value], options: &ChatTemplateOptions, special_tokens: &[(&'static str, String)]) -> Result<String> {
        if messages.is_empty() {
            return Err(LmError::InvalidArgument("messages: cannot apply a chat template to an empty conversation".into()));
        }
        if let Some(key) = options.extra.keys().find(|k| RESERVED_VARIABLES.contains(&k.as_str())) {
            return Err(LmError::InvalidArgument(format!("template variable \"{key}\" has an option of its own")));
        }
        let name = self.select(options.tools.is_some())?;
        let template =
            self.env.get_template(name).map_err(|e| LmError::UnsupportedModel(format!("chat template \"{name}\" in {}: {e}", self.origin)))?;

        let mut prepared = Vec::with_capacity(messages.len());
        for (i, message) in messages.iter().enumerate() {
            prepared.push(from_json(&prepare_message(message, i)?));
        }
        let tools = match &options.tools {
            None => Value::from(()),
            Some(tools) => {
                if let Some(i) = tools.iter().position(|t| !t.is_object()) {
                    return Err(LmError::InvalidArgument(format!("tools[{i}] must be a JSON schema object")));
                }
                Value::from(tools.iter().map(from_json).collect::<Vec<_>>())
            }
        };

        // Same precedence as transformers: special tokens, then kwargs.
        let mut context: Vec<(String, Value)> = vec![
            ("messages".into(), Value::from(prepared)),
            ("tools".into(), tools),
            ("documents".into(), Value::from(())),
            ("add_generation_prompt".into(), Value::from(options.add_generation_prompt)),
        ];
        let mut set = |key: &str, value: Value| match context.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => context.push((key.to_string(), value)),
        };
        for (name, token) in special_tokens {
            set(name, Value::from(token.as_str()));
        }
        if let Some(thinking) = options.enable_thinking {
            set("enable_thinking", Value::from(thinking));
        }
        for (key, value) in &options.extra {
            set(key, from_json(value));
        }

        template.render(Value::from_pairs(context)).map_err(|e| render_error(&e, name, &self.origin))
    }
}

/// transformers drops keys whose value is None, then copies reasoning given
/// as `reasoning_content`, `thinking` or `reasoning` into both
/// `reasoning_content` and `thinking` (`_alias_reasoning_fields`).
fn prepare_message(message: &serde_json::Value, index: usize) -> Result<serde_json::Value> {
    let Some(object) = message.as_object() else {
        return Err(LmError::InvalidArgument(format!("messages[{index}] must be an object with \"role\" and \"content\"")));
    };
    let mut cleaned: Map<String, serde_json::Value> = object.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())).collect();
    let reasoning = ["reasoning_content", "thinking", "reasoning"].iter().find_map(|k| cleaned.get(*k).cloned());
    if let Some(reasoning) = reasoning {
        // `{"thinking": r, **message, "reasoning_content": r}`: "thinking"
        // comes first (its value from the message if it has one) and an
        // existing "reasoning_content" keeps its place.
        let mut aliased = Map::new();
        aliased.insert("thinking".into(), reasoning.clone());
        for (k, v) in std::mem::take(&mut cleaned) {
            aliased.insert(k, v);
        }
        aliased.insert("reasoning_content".into(), reasoning);
        cleaned = aliased;
    }
    Ok(serde_json::Value::Object(cleaned))
}

fn render_error(e: &minijinja::Error, name: &str, origin: &str) -> LmError {
    let detail = e.detail().unwrap_or_default();
    match detail.strip_prefix(RAISED_PREFIX) {
        Some(raised) => LmError::InvalidArgument(format!("the chat template of {origin} rejected the messages: {raised}")),
        None => LmError::InvalidArgument(format!("rendering chat template \"{name}\" of {origin} failed: {e}")),
    }
}

/// transformers' `{% generation %}...{% endgeneration %}` only marks
/// assistant text for masks; rendering ignores it. Rewriting the tags as an
/// always-true `if` keeps the whitespace control (`-`, trim_blocks) identical.
fn without_generation_tags(template: &str) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        let Some(end) = tag.find("%}") else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let body = inner.trim_start_matches(['-', '+']).trim_end_matches(['-', '+']).trim();
        let replacement = match body {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(r) => {
                let lead = &inner[..inner.len() - inner.trim_start_matches(['-', '+']).len()];
                let trail = &inner[inner.trim_end_matches(['-', '+']).len()..];
                out.push_str(&format!("{{%{lead} {r} {trail}%}}"));
            }
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn templates(src: &str) -> ChatTemplates {
        ChatTemplates::compile(&ChatTemplateSource::Single(src.into()), "test".into())
    }

    #[test]
    fn drops_none_and_aliases_reasoning() {
        let m = prepare_message(&json!({"role": "assistant", "content": null, "reasoning": "r"}), 0).unwrap();
        assert_eq!(m, json!({"thinking": "r", "role": "assistant", "reasoning": "r", "reasoning_content": "r"}));
        let keys: Vec<&String> = m.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["thinking", "role", "reasoning", "reasoning_content"]);
    }

    #[test]
    fn generation_tags_render_their_body() {
        let t = templates("{% for m in messages %}{%- generation -%} {{ m.content }} {%- endgeneration %}|{% endfor %}");
        let out = t.render(&[json!({"role": "user", "content": "hi"})], &Default::default(), &[]).unwrap();
        assert_eq!(out, "hi|");
    }

    #[test]
    fn selects_named_templates_like_transformers() {
        let src = ChatTemplateSource::Named(vec![("default".into(), "D".into()), ("tool_use".into(), "T".into())]);
        let t = ChatTemplates::compile(&src, "x".into());
        let msgs = [json!({"role": "user", "content": "a"})];
        assert_eq!(t.render(&msgs, &Default::default(), &[]).unwrap(), "D");
        let with_tools = ChatTemplateOptions { tools: Some(vec![]), ..Default::default() };
        assert_eq!(t.render(&msgs, &with_tools, &[]).unwrap(), "T");
    }

    #[test]
    fn extra_variables_reach_the_template() {
        let t = templates("{{ reasoning_effort | default('medium') }} {{ bos_token }}");
        let msgs = [json!({"role": "user", "content": "a"})];
        let bos = [("bos_token", "<s>".to_string())];
        assert_eq!(t.render(&msgs, &Default::default(), &bos).unwrap(), "medium <s>");
        let mut extra = Map::new();
        extra.insert("reasoning_effort".into(), json!("high"));
        extra.insert("bos_token".into(), json!("<B>"));
        let options = ChatTemplateOptions { extra, ..Default::default() };
        assert_eq!(t.render(&msgs, &options, &bos).unwrap(), "high <B>");
        for key in RESERVED_VARIABLES {
            let mut extra = Map::new();
            extra.insert(key.into(), json!(true));
            let e = t.render(&msgs, &ChatTemplateOptions { extra, ..Default::default() }, &bos).unwrap_err();
            assert_eq!(e.code(), "INVALID_ARGUMENT");
            assert!(e.message().contains(key), "{e}");
        }
    }

    #[test]
    fn errors_have_codes() {
        let t = templates("{{ raise_exception('roles must alternate') }}");
        let e = t.render(&[json!({"role": "user", "content": "a"})], &Default::default(), &[]).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(e.message().ends_with("roles must alternate"), "{e}");
        let e = t.render(&[], &Default::default(), &[]).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        let e = t.render(&[json!("hi")], &Default::default(), &[]).unwrap_err();
        assert!(e.message().contains("messages[0]"), "{e}");
        let broken = templates("{% if %}");
        let e = broken.render(&[json!({"role": "user", "content": "a"})], &Default::default(), &[]).unwrap_err();
        assert_eq!(e.code(), "UNSUPPORTED_MODEL");
        let none = ChatTemplates::compile(&ChatTemplateSource::None, "dir".into());
        let e = none.render(&[json!({"role": "user", "content": "a"})], &Default::default(), &[]).unwrap_err();
        assert_eq!(e.code(), "UNSUPPORTED_MODEL");
    }
}
