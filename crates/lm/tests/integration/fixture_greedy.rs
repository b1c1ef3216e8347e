//! Greedy tokens of every fixture model against MLX-LM's, which the test setup
//! (scripts/fixtures.py) recorded live from MLX-LM when it wrote the fixtures.
use std::path::PathBuf;

use lm::generate::{generate, GenerateParams, Next};
use lm::prompt_cache::PromptCache;
use lm::tokenizer::Tokenizer;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/fixtures")
}

#[test]
fn greedy_tokens_match_mlx_lm_on_every_fixture() {
    let index_path = fixtures().join("index.json");
    let text = std::fs::read_to_string(&index_path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `npm test` (or node scripts/fixtures.js) first", index_path.display()));
    let index: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut checked = 0;
    for (name, fx) in index["fixtures"].as_object().unwrap() {
        let dir = fixtures().join(fx["path"].as_str().unwrap());
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
    assert!(checked >= 20, "only {checked} cases checked");
}
