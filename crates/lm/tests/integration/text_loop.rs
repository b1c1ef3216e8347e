//! `lm::text::generate_text`, the loop every text request runs, on the
//! float32 Qwen3 fixture: MLX-LM's greedy tokens (recorded when the fixtures
//! were written), stop strings, aborts, and caches the caller keeps and trims.
use std::path::PathBuf;

use lm::generate::{prefill, GenerateParams};
use lm::models::LanguageModel;
use lm::prompt_cache::PromptCache;
use lm::text::{generate_text, FinishReason, TextOptions};
use lm::tokenizer::Tokenizer;

fn fixture() -> (Box<dyn lm::models::LanguageModel>, Tokenizer, Vec<u32>, Vec<u32>) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/fixtures");
    let index_path = root.join("index.json");
    let text = std::fs::read_to_string(&index_path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `npm test` (or node scripts/fixtures.js) first", index_path.display()));
    let index: serde_json::Value = serde_json::from_str(&text).unwrap();
    let fx = &index["fixtures"]["qwen3-f32"];
    let dir = root.join(fx["path"].as_str().unwrap());
    let model = lm::models::load(&dir, None).unwrap();
    let tok = Tokenizer::from_model_dir(&dir).unwrap();
    let greedy = &fx["greedy"];
    let prompt = tok.encode_prompt(greedy["promptText"].as_str().unwrap()).unwrap();
    let want = greedy["prompt"]["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    (model, tok, prompt, want)
}

/// The text of `ids` as the streaming detokenizer gives it: MLX-LM's, which
/// drops the leading space of the first token (the JS parity tests compare
/// the text with MLX-LM's own).
fn text_of(tok: &Tokenizer, ids: &[u32]) -> String {
    let full = tok.decode(ids).unwrap();
    full.strip_prefix(' ').unwrap_or(&full).to_string()
}

fn options(max_tokens: usize, stop: &[&str]) -> TextOptions {
    TextOptions { params: GenerateParams { max_tokens, ..Default::default() }, stop: stop.iter().map(|s| s.to_string()).collect() }
}

fn fresh(model: &dyn LanguageModel) -> PromptCache {
    PromptCache::new(model, Default::default()).unwrap()
}

#[test]
fn greedy_text_equals_mlx_lm_and_the_chunks_add_up() {
    let (model, tok, prompt, want) = fixture();
    let mut chunks = String::new();
    let mut cache = fresh(model.as_ref());
    let o = generate_text(model.as_ref(), &tok, &prompt, &options(want.len(), &[]), &mut cache, &|| false, &mut |c| chunks.push_str(c.text)).unwrap();
    assert_eq!(o.tokens, want);
    assert_eq!(o.finish_reason, FinishReason::Length);
    assert_eq!(o.text, text_of(&tok, &want));
    assert_eq!(chunks, o.text);
    assert_eq!((o.prompt_tokens, o.cached_tokens, o.generation_tokens), (prompt.len(), 0, want.len()));
    // A kept cache holds the prompt and every sampled token, as MLX-LM's; a
    // scratch one all but the last, which nothing needed.
    assert_eq!(cache.len(), prompt.len() + want.len());
    let held: Vec<u32> = prompt.iter().chain(&want).copied().collect();
    assert_eq!(cache.tokens(), &held[..]);
    let mut scratch = PromptCache::scratch(model.as_ref());
    generate_text(model.as_ref(), &tok, &prompt, &options(want.len(), &[]), &mut scratch, &|| false, &mut |_| {}).unwrap();
    assert_eq!(scratch.tokens(), &held[..held.len() - 1]);
}

#[test]
fn a_stop_string_ends_the_text_before_it() {
    let (model, tok, prompt, want) = fixture();
    let full = text_of(&tok, &want);
    // A stop string from the middle of the reference text (a few characters, on char boundaries).
    let chars: Vec<(usize, char)> = full.char_indices().collect();
    let (start, end) = (chars[chars.len() / 2].0, chars[(chars.len() / 2 + 3).min(chars.len() - 1)].0);
    let stop = &full[start..end];
    let cut = full.find(stop).unwrap();
    let mut chunks = String::new();
    let o = generate_text(model.as_ref(), &tok, &prompt, &options(want.len(), &[stop]), &mut fresh(model.as_ref()), &|| false, &mut |c| {
        chunks.push_str(c.text)
    })
    .unwrap();
    assert_eq!(o.finish_reason, FinishReason::Stop);
    assert_eq!(o.text, full[..cut]);
    assert_eq!(chunks, o.text);
    assert!(want.starts_with(&o.tokens), "the tokens up to the stop are the reference's");
}

#[test]
fn an_abort_before_the_start_does_no_work_and_one_during_stops_at_the_next_token() {
    let (model, tok, prompt, want) = fixture();
    let o = generate_text(model.as_ref(), &tok, &prompt, &options(8, &[]), &mut fresh(model.as_ref()), &|| true, &mut |_| {}).unwrap();
    assert_eq!((o.finish_reason, o.tokens.len(), o.generation_tokens), (FinishReason::Abort, 0, 0));
    let seen = std::cell::Cell::new(0);
    let o = generate_text(model.as_ref(), &tok, &prompt, &options(want.len(), &[]), &mut fresh(model.as_ref()), &|| seen.get() >= 3, &mut |_| {
        seen.set(seen.get() + 1)
    })
    .unwrap();
    assert_eq!(o.finish_reason, FinishReason::Abort);
    assert_eq!(o.tokens, want[..o.tokens.len()]);
    assert!(o.tokens.len() < want.len());
}

#[test]
fn a_kept_cache_serves_the_prompt_again_and_gives_the_same_tokens() {
    let (model, tok, prompt, want) = fixture();
    let mut cache = fresh(model.as_ref());
    let first = generate_text(model.as_ref(), &tok, &prompt, &options(want.len(), &[]), &mut cache, &|| false, &mut |_| {}).unwrap();
    // The same prompt again: all of it but its last token comes from the cache (that
    // token is fed alone after the chunked prefill anyway: the same computation, so
    // the same bits on any CPU).
    let again = generate_text(model.as_ref(), &tok, &prompt, &options(want.len(), &[]), &mut cache, &|| false, &mut |_| {}).unwrap();
    assert_eq!(again.cached_tokens, prompt.len() - 1);
    assert_eq!(again.tokens, first.tokens);
    assert_eq!(first.tokens, want);
}

#[test]
fn trim_and_prefill_keep_the_token_record_in_step() {
    let (model, _tok, prompt, _) = fixture();
    let mut cache = fresh(model.as_ref());
    assert!(prefill(model.as_ref(), &prompt, 3, &mut cache, &|| false).unwrap());
    assert_eq!((cache.len(), cache.tokens()), (prompt.len(), &prompt[..]));
    assert_eq!(cache.trim(2), 2);
    assert_eq!((cache.len(), cache.tokens()), (prompt.len() - 2, &prompt[..prompt.len() - 2]));
    assert_eq!(cache.trim(1000), prompt.len() - 2);
    assert!(cache.is_empty() && cache.tokens().is_empty());
    // An abort between chunks keeps what was fed.
    let calls = std::cell::Cell::new(0);
    let done = prefill(model.as_ref(), &prompt, 2, &mut cache, &|| {
        calls.set(calls.get() + 1);
        calls.get() > 2
    })
    .unwrap();
    assert!(!done);
    assert_eq!((cache.len(), cache.tokens()), (4, &prompt[..4]));
}

#[test]
fn logprobs_are_log_softmax_values_with_the_top_ones_sorted() {
    let (model, tok, prompt, want) = fixture();
    let mut o = options(6, &[]);
    o.params.logprobs = Some(5);
    let r = generate_text(model.as_ref(), &tok, &prompt, &o, &mut fresh(model.as_ref()), &|| false, &mut |_| {}).unwrap();
    assert_eq!(r.tokens, want[..6]);
    let lps = r.logprobs.unwrap();
    assert_eq!(lps.len(), 6);
    for (lp, &t) in lps.iter().zip(&r.tokens) {
        assert_eq!(lp.top.len(), 5);
        // Greedy: the chosen token is the most likely one.
        assert_eq!(lp.top[0], (t, lp.logprob));
        assert!(lp.logprob <= 0.0 && lp.top.windows(2).all(|w| w[0].1 >= w[1].1));
    }
    o.params.logprobs = Some(21);
    let err = generate_text(model.as_ref(), &tok, &prompt, &o, &mut fresh(model.as_ref()), &|| false, &mut |_| {}).unwrap_err();
    assert!(matches!(err, lm::LmError::InvalidArgument(_)), "{err}");
}

#[test]
fn a_saved_cache_reloads_with_its_tokens_and_continues_the_same() {
    let (model, tok, prompt, want) = fixture();
    let mut cache = fresh(model.as_ref());
    assert!(prefill(model.as_ref(), &prompt, 2048, &mut cache, &|| false).unwrap());
    let dir = std::env::temp_dir().join(format!("mlx-node-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cache.safetensors");
    cache.save(&path, &[("model".into(), "fixture".into())]).unwrap();
    let (mut loaded, meta) = PromptCache::load(model.as_ref(), &path).unwrap();
    assert_eq!(meta.get("model").map(String::as_str), Some("fixture"));
    assert_eq!((loaded.len(), loaded.tokens(), loaded.unknown()), (prompt.len(), &prompt[..], 0));
    let a = generate_text(model.as_ref(), &tok, &prompt, &options(want.len(), &[]), &mut loaded, &|| false, &mut |_| {}).unwrap();
    assert_eq!((a.cached_tokens, &a.tokens), (prompt.len() - 1, &want));
    // Truncated: every array is read at load, so it fails there.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = PromptCache::load(model.as_ref(), &path).err().unwrap();
    assert!(matches!(err, lm::LmError::InvalidCacheFile(_)), "{err}");
    // Not a cache file at all.
    std::fs::write(&path, b"not a safetensors file").unwrap();
    let err = PromptCache::load(model.as_ref(), &path).err().unwrap();
    assert!(matches!(err, lm::LmError::InvalidCacheFile(_)), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_cache_for_another_model_shape_is_refused() {
    let (model, tok, prompt, _) = fixture();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/fixtures");
    let index: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(root.join("index.json")).unwrap()).unwrap();
    let other = lm::models::load(&root.join(index["fixtures"]["qwen3-bf16"]["path"].as_str().unwrap()), None).unwrap();
    let mut theirs = fresh(other.as_ref());
    let err = generate_text(model.as_ref(), &tok, &prompt, &options(4, &[]), &mut theirs, &|| false, &mut |_| {}).unwrap_err();
    assert!(matches!(err, lm::LmError::CacheMismatch(_)), "{err}");
}
