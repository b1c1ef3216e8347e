//! Live parity of the `lm` tokenizer with transformers 5 and MLX-LM 0.32.2.
//!
//! One run of `tokenizer_ref.py` (in the project venv at `.cache/venv`)
//! answers every case; each test below compares one area. A missing venv or
//! npm tokenizer is a failure, not a skip: parity is the contract.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use lm::tokenizer::{DetokenizerKind, Tokenizer};
use serde_json::{json, Value};

// A test crate root resolves modules next to itself; these live in a
// folder that cargo does not take for a test target.
mod cases;
mod folders;

use cases::{chat_cases, encode_texts, random_ids, stream_cases};
use folders::{bos_variant, copy_tokenizer, model_folder, python, word_level};

// ---------------------------------------------------------------- reference

struct Fixture {
    qwen: PathBuf,
    bos: PathBuf,
    words: PathBuf,
    word_streams: Vec<Vec<u32>>,
    eos_models: Vec<PathBuf>,
    chat: Vec<Value>,
    streams: Vec<Vec<u32>>,
    decodes: Vec<Vec<u32>>,
    prompts: Vec<String>,
    answer: Value,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let python = python();
        let qwen = copy_tokenizer("qwen3");
        let bos = bos_variant();
        let words = word_level();
        let mut word_streams = vec![vec![1, 2, 3, 4, 1], vec![1, 5, 2, 2, 3, 7, 4, 4, 1, 8, 9], vec![6, 1, 10, 6]];
        word_streams.extend((20..26).map(|seed| random_ids(seed, 40, 12)));
        let eos_models = vec![
            model_folder(&qwen, "eos-a", r#"{"eos_token_id": [151643, 151645]}"#, Some(r#"{"eos_token_id": 151643}"#)),
            model_folder(&qwen, "eos-b", r#"{"eos_token_id": 151643}"#, None),
            model_folder(&qwen, "eos-c", r#"{"model_type": "qwen3"}"#, Some(r#"{"eos_token_id": []}"#)),
            model_folder(&qwen, "eos-d", r#"{"eos_token_id": 7}"#, Some("{broken json")),
        ];
        let tok = load(&qwen);
        let chat = chat_cases();
        let streams = stream_cases(&tok);
        let mut decodes: Vec<Vec<u32>> = encode_texts().iter().map(|t| tok.encode(t, false).unwrap()).collect();
        decodes.extend(streams.iter().cloned());
        decodes.push(vec![151643, 151644, 151645, 151667, 151668, 151669, 151935, 4_000_000]);
        let prompts: Vec<String> = ["Hello", "<|endoftext|>Hello", " <|endoftext|>", "<|im_start|>user"].iter().map(|s| s.to_string()).collect();

        let encode_req: Vec<Value> = encode_texts()
            .iter()
            .flat_map(|t| [json!({"text": t, "add_special_tokens": false}), json!({"text": t, "add_special_tokens": true})])
            .collect();
        let request = json!({
            "tokenizers": [
                {"dir": qwen, "encode": encode_req, "decode": decodes, "chat": chat, "stream": streams, "prompts": prompts},
                {"dir": bos, "encode": encode_req, "chat": chat, "prompts": prompts},
                {"dir": words, "decode": word_streams, "stream": word_streams},
            ],
            "model_eos": eos_models,
        });
        let answer = run_reference(&python, &request);
        Fixture { qwen, bos, words, word_streams, eos_models, chat, streams, decodes, prompts, answer }
    })
}

fn run_reference(python: &Path, request: &Value) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tokenizer_ref.py");
    let mut child = Command::new(python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("could not start {}: {e}", python.display()));
    let body = serde_json::to_vec(request).unwrap();
    child.stdin.take().unwrap().write_all(&body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{} failed ({}):\n{}", script.display(), out.status, String::from_utf8_lossy(&out.stderr));
    let answer: Value = serde_json::from_slice(&out.stdout).expect("reference output is JSON");
    // For debugging a mismatch: LM_PARITY_DUMP=file.json keeps both sides.
    if let Some(path) = std::env::var_os("LM_PARITY_DUMP") {
        let dump = json!({"request": request, "answer": answer});
        std::fs::write(path, serde_json::to_string_pretty(&dump).unwrap()).unwrap();
    }
    answer
}

/// Tokenizers are slow to parse in debug builds; load each folder once.
fn load(dir: &Path) -> Tokenizer {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, Tokenizer>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    cache.entry(dir.to_path_buf()).or_insert_with(|| Tokenizer::from_dir(dir).unwrap()).clone()
}

fn reference(i: usize) -> &'static Value {
    &fixture().answer["tokenizers"][i]
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

// ---------------------------------------------------------------- tests

#[test]
fn tokenizer_info_matches_transformers() {
    let f = fixture();
    for (i, dir) in [&f.qwen, &f.bos].into_iter().enumerate() {
        let tok = load(dir);
        let info = &reference(i)["info"];
        assert_eq!(tok.vocab_size() as u64, info["len"].as_u64().unwrap(), "len(tokenizer)");
        assert_eq!(tok.base_vocab_size() as u64, info["vocab_size"].as_u64().unwrap());
        assert_eq!(tok.bos_token(), info["bos_token"].as_str());
        assert_eq!(tok.bos_token_id().map(u64::from), info["bos_token_id"].as_u64());
        assert_eq!(tok.eos_token(), info["eos_token"].as_str());
        assert_eq!(tok.eos_token_id().map(u64::from), info["eos_token_id"].as_u64());
        let map: serde_json::Map<String, Value> = tok.special_tokens().iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        assert_eq!(Value::Object(map), info["special_tokens_map"]);
        assert_eq!(info["detokenizer"], "BPEStreamingDetokenizer");
        assert_eq!(tok.detokenizer_kind(), DetokenizerKind::Bpe);
    }
}

#[test]
fn encode_matches_transformers() {
    let f = fixture();
    for (i, dir) in [&f.qwen, &f.bos].into_iter().enumerate() {
        let tok = load(dir);
        let expected = reference(i)["encode"].as_array().unwrap();
        let mut n = 0;
        for text in encode_texts() {
            for add_special in [false, true] {
                let ours = tok.encode(&text, add_special).unwrap();
                assert_eq!(ours, ids(&expected[n]), "encode({text:?}, add_special_tokens={add_special}) in {dir:?}");
                n += 1;
            }
        }
        assert_eq!(n, expected.len());
    }
}

#[test]
fn decode_matches_transformers() {
    let f = fixture();
    let tok = load(&f.qwen);
    let expected = reference(0)["decode"].as_array().unwrap();
    assert_eq!(expected.len(), f.decodes.len());
    for (ids, want) in f.decodes.iter().zip(expected) {
        assert_eq!(tok.decode(ids).unwrap(), want.as_str().unwrap(), "decode({ids:?})");
    }
    // Round trip of text without special tokens is exact for this tokenizer.
    for text in encode_texts() {
        let ids = tok.encode(&text, false).unwrap();
        let nfc_sensitive = text.contains('\u{301}') || text.contains('Å');
        if !nfc_sensitive {
            assert_eq!(tok.decode(&ids).unwrap(), text);
        }
    }
}

#[test]
fn raw_prompt_bos_rule_matches_mlx_lm() {
    let f = fixture();
    for (i, dir) in [&f.qwen, &f.bos].into_iter().enumerate() {
        let tok = load(dir);
        let expected = reference(i)["prompts"].as_array().unwrap();
        for (prompt, want) in f.prompts.iter().zip(expected) {
            assert_eq!(tok.encode_prompt(prompt).unwrap(), ids(want), "prompt {prompt:?} in {dir:?}");
        }
    }
}

#[test]
fn chat_template_matches_transformers() {
    let f = fixture();
    assert!(f.chat.len() >= 8);
    for (i, dir) in [&f.qwen, &f.bos].into_iter().enumerate() {
        let tok = load(dir);
        let expected = reference(i)["chat"].as_array().unwrap();
        for (case, want) in f.chat.iter().zip(expected) {
            let messages = case["messages"].as_array().unwrap();
            let tools = case["tools"].as_array().cloned();
            let ours = tok.apply_chat_template(messages, case["add_generation_prompt"].as_bool().unwrap(), case["enable_thinking"].as_bool(), tools);
            match (&ours, want.get("text")) {
                (Ok(text), Some(Value::String(w))) => assert_eq!(text, w, "case {case}"),
                (Err(e), None) => {
                    assert_eq!(e.code(), "INVALID_ARGUMENT", "case {case}: {e}");
                }
                _ => panic!("case {case} in {dir:?}: ours {ours:?}, reference {want}"),
            }
        }
    }
}

#[test]
fn streaming_matches_mlx_lm() {
    let f = fixture();
    let tok = load(&f.qwen);
    let expected = reference(0)["stream"].as_array().unwrap();
    let text_derived = 5; // the first cases are encodings of valid text
    for (n, (ids, want)) in f.streams.iter().zip(expected).enumerate() {
        let mut detok = tok.detokenizer();
        let mut chunks: Vec<String> = ids.iter().map(|&id| detok.add_token(id)).collect();
        chunks.push(detok.finalize());
        let want: Vec<&str> = want.as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
        assert_eq!(chunks, want, "chunks for ids {ids:?}");
        if n < text_derived {
            // Valid text never shows a replacement char mid-stream, and the
            // stream equals decode() apart from MLX-LM's leading-space trim.
            assert!(chunks.iter().all(|c| !c.contains('\u{FFFD}')), "{chunks:?}");
            let decoded = tok.decode(ids).unwrap();
            let decoded = decoded.strip_prefix(' ').unwrap_or(&decoded);
            assert_eq!(chunks.concat(), decoded);
        }
    }
}

#[test]
fn model_eos_ids_match_mlx_lm() {
    let f = fixture();
    let expected = f.answer["model_eos"].as_array().unwrap();
    for (dir, want) in f.eos_models.iter().zip(expected) {
        let tok = Tokenizer::from_model_dir(dir).unwrap();
        assert_eq!(tok.eos_token_ids(), ids(want).as_slice(), "{dir:?}");
    }
}

#[test]
fn naive_streaming_matches_mlx_lm() {
    let f = fixture();
    let tok = load(&f.words);
    let answer = reference(2);
    assert_eq!(answer["info"]["detokenizer"], "NaiveStreamingDetokenizer");
    assert_eq!(tok.detokenizer_kind(), DetokenizerKind::Naive);
    let decodes = answer["decode"].as_array().unwrap();
    let streams = answer["stream"].as_array().unwrap();
    for ((ids, want_text), want_chunks) in f.word_streams.iter().zip(decodes).zip(streams) {
        assert_eq!(tok.decode(ids).unwrap(), want_text.as_str().unwrap(), "decode({ids:?})");
        let mut detok = tok.detokenizer();
        let mut chunks: Vec<String> = ids.iter().map(|&id| detok.add_token(id)).collect();
        chunks.push(detok.finalize());
        let want: Vec<&str> = want_chunks.as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
        assert_eq!(chunks, want, "chunks for ids {ids:?}");
    }
}
