//! `lm::text::generate_text`, the loop every text request runs, on the
//! float32 Qwen3 fixture: MLX-LM's greedy tokens (recorded when the fixtures
//! were written), stop strings, aborts, and caches the caller keeps and trims.
use std::path::PathBuf;

use lm::cache::trim_all;
use lm::generate::GenerateParams;
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

#[test]
fn greedy_text_equals_mlx_lm_and_the_chunks_add_up() {
    let (model, tok, prompt, want) = fixture();
    let mut chunks = String::new();
    let mut caches = model.new_caches();
    let o = generate_text(model.as_ref(), &tok, &prompt, &options(want.len(), &[]), &mut caches, &|| false, &mut |s, _| chunks.push_str(s)).unwrap();
    assert_eq!(o.tokens, want);
    assert_eq!(o.finish_reason, FinishReason::Length);
    assert_eq!(o.text, text_of(&tok, &want));
    assert_eq!(chunks, o.text);
    assert_eq!((o.prompt_tokens, o.generation_tokens), (prompt.len(), want.len()));
    // The caches hold the prompt and every token fed back: all but the last sampled one.
    assert!(caches.iter().all(|c| c.offset() as usize == prompt.len() + want.len() - 1));
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
    let o = generate_text(model.as_ref(), &tok, &prompt, &options(want.len(), &[stop]), &mut model.new_caches(), &|| false, &mut |s, _| {
        chunks.push_str(s)
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
    let o = generate_text(model.as_ref(), &tok, &prompt, &options(8, &[]), &mut model.new_caches(), &|| true, &mut |_, _| {}).unwrap();
    assert_eq!((o.finish_reason, o.tokens.len(), o.generation_tokens), (FinishReason::Abort, 0, 0));
    let seen = std::cell::Cell::new(0);
    let o = generate_text(model.as_ref(), &tok, &prompt, &options(want.len(), &[]), &mut model.new_caches(), &|| seen.get() >= 3, &mut |_, _| {
        seen.set(seen.get() + 1)
    })
    .unwrap();
    assert_eq!(o.finish_reason, FinishReason::Abort);
    assert_eq!(o.tokens, want[..o.tokens.len()]);
    assert!(o.tokens.len() < want.len());
}

#[test]
fn kept_caches_trimmed_back_to_the_prompt_give_the_same_tokens_again() {
    let (model, tok, prompt, want) = fixture();
    let mut caches = model.new_caches();
    let first = generate_text(model.as_ref(), &tok, &prompt, &options(want.len(), &[]), &mut caches, &|| false, &mut |_, _| {}).unwrap();
    // Back to all but the prompt's last token, which the loop feeds alone after the
    // chunked prefill anyway: the same computation again, so the same bits on any CPU.
    let held = caches[0].offset();
    let keep = prompt.len() as i32 - 1;
    assert_eq!(trim_all(&mut caches, held - keep), Some(held - keep));
    assert!(caches.iter().all(|c| c.offset() == keep));
    let again =
        generate_text(model.as_ref(), &tok, &prompt[prompt.len() - 1..], &options(want.len(), &[]), &mut caches, &|| false, &mut |_, _| {}).unwrap();
    assert_eq!(again.tokens, first.tokens);
    assert_eq!(first.tokens, want);
}

#[test]
fn caches_for_another_model_shape_are_refused() {
    let (model, tok, prompt, _) = fixture();
    let mut too_few = lm::cache::kv_caches(1);
    let err = generate_text(model.as_ref(), &tok, &prompt, &options(4, &[]), &mut too_few, &|| false, &mut |_, _| {}).unwrap_err();
    assert!(matches!(err, lm::LmError::InvalidArgument(_)), "{err}");
}
