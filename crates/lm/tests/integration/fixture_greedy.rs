//! Greedy tokens of every fixture model against MLX-LM's, which the test setup
//! (scripts/fixtures.py) recorded live from MLX-LM when it wrote the fixtures.
//!
//! The fixtures come in two sets, each in its own folder (scripts/fixtures.js): the shared
//! decoder's model types (`.cache/fixtures`, written by `npm test`) and every other family's
//! (`.cache/fixtures-families`, written by `npm run test:families`). `MLX_NODE_FIXTURE_GREEDY`
//! picks which this checks: `core` (`npm test`), `families` (`npm run test:families`), or unset
//! for both. Between the two commands every fixture is checked.
use std::path::PathBuf;

use lm::generate::{generate, GenerateParams, Next};
use lm::prompt_cache::PromptCache;
use lm::tokenizer::Tokenizer;

/// The shared decoder's model types: the core set (scripts/fixtures.py's `CORE_TYPES`).
const CORE_TYPES: [&str; 4] = ["qwen3", "llama", "mistral", "qwen2"];

/// The set's folder.
fn folder(set: &str) -> PathBuf {
    let name = if set == "core" { "fixtures" } else { "fixtures-families" };
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache").join(name)
}

/// The sets `MLX_NODE_FIXTURE_GREEDY` names.
fn sets(var: Option<&str>) -> Vec<&'static str> {
    match var {
        None => vec!["core", "families"],
        Some("core") => vec!["core"],
        Some("families") => vec!["families"],
        Some(other) => panic!("MLX_NODE_FIXTURE_GREEDY={other}: expected core or families (or unset for both)"),
    }
}

/// Checks every fixture of one set; returns how many cases (two a fixture) it checked.
fn check_set(set: &str) -> usize {
    let index_path = folder(set).join("index.json");
    let hint = if set == "core" { "node scripts/fixtures.js" } else { "node scripts/fixtures.js --families" };
    let text = std::fs::read_to_string(&index_path).unwrap_or_else(|e| panic!("{}: {e}; run `{hint}` first", index_path.display()));
    let index: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(index["set"].as_str(), Some(set), "{}", index_path.display());
    let mut checked = 0;
    for (name, fx) in index["fixtures"].as_object().unwrap() {
        // Each folder holds its own set only (the split is by model type).
        let model_type = fx["modelType"].as_str().unwrap();
        assert_eq!(CORE_TYPES.contains(&model_type), set == "core", "{name} ({model_type}) in the {set} set");
        let dir = folder(set).join(fx["path"].as_str().unwrap());
        let model = lm::models::load(&dir, None).unwrap_or_else(|e| panic!("{name}: {e}"));
        let tok = Tokenizer::from_model_dir(&dir).unwrap();
        let greedy = &fx["greedy"];
        let max = greedy["maxTokens"].as_u64().unwrap() as usize;
        let chat = tok.apply_chat_template(greedy["messages"].as_array().unwrap(), true, None, None).unwrap();
        for (label, prompt) in [("prompt", greedy["promptText"].as_str().unwrap().to_string()), ("chat", chat)] {
            let ids = tok.encode_prompt(&prompt).unwrap();
            let params = GenerateParams { max_tokens: max, ..Default::default() };
            let mut out = Vec::new();
            let mut cache = PromptCache::scratch(model.as_ref());
            generate(model.as_ref(), &ids, &params, &mut cache, |s| {
                let t = s.token;
                if tok.is_eos(t) {
                    return Ok(Next::Stop);
                }
                out.push(t);
                Ok(Next::Continue)
            })
            .unwrap();
            let want: Vec<u32> = greedy[label]["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
            assert_eq!(out, want, "{name} ({label})");
            checked += 1;
        }
    }
    // Each set holds 19 or more fixtures (two cases each); fewer means the index lost some.
    assert!(checked >= 38, "only {checked} cases checked in the {set} set");
    checked
}

#[test]
fn greedy_tokens_match_mlx_lm_on_every_fixture() {
    let var = std::env::var("MLX_NODE_FIXTURE_GREEDY").ok().filter(|s| !s.is_empty());
    for set in sets(var.as_deref()) {
        check_set(set);
    }
}

#[test]
fn an_unknown_fixture_set_is_refused() {
    assert_eq!(sets(Some("core")), ["core"]);
    assert_eq!(sets(None), ["core", "families"]);
    assert!(std::panic::catch_unwind(|| sets(Some("all"))).is_err(), "an unknown set name must fail, not check nothing");
}
