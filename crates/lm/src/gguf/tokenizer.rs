//! A GGUF file's tokenizer: llama.cpp's `tokenizer.ggml.*` metadata turned
//! back into the `tokenizer.json` and `tokenizer_config.json` the model's
//! folder had, then loaded like any other (`Tokenizer::from_parts`).
//!
//! Byte-level BPE (`tokenizer.ggml.model` = "gpt2") gets the pre-tokenizer
//! that `tokenizer.ggml.pre` names, as the original tokenizer.json has it.
//! Control tokens become special added tokens and user-defined tokens plain
//! added ones, as transformers' GGUF loader adds them; llama.cpp's `[PAD<n>]`
//! fillers (type unused) are left out, so those ids decode to nothing as
//! they do with the original tokenizer.
use serde_json::{json, Value};

use super::config::Arch;
use super::file::{GgufFile, Meta};
use crate::error::{LmError, Result};
use crate::tokenizer::{byte_level, ChatTemplateSource, Tokenizer, TokenizerConfig};

// llama.cpp's token types.
const UNKNOWN: u64 = 2;
const CONTROL: u64 = 3;
const USER_DEFINED: u64 = 4;
const UNUSED: u64 = 5;

const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
// Mistral Nemo's (tekken) and GPT-4o's (o200k: Phi-4-mini, Llama 4) splits, as transformers' GGUF loader has them.
const TEKKEN_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

fn byte_level(use_regex: bool) -> Value {
    json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": use_regex})
}

fn split_then_bytes(pattern: &str) -> Value {
    json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false},
        byte_level(false),
    ]})
}

/// (normalizer, pre-tokenizer, ignore_merges) for a `tokenizer.ggml.pre` name,
/// as the model families' own tokenizer.json files have them.
fn pre_tokenizer(pre: &str) -> Option<(Value, Value, bool)> {
    Some(match pre {
        "default" | "gpt-2" | "gpt2" => (Value::Null, byte_level(true), false),
        "llama3" | "llama-v3" | "llama-bpe" | "smaug-bpe" => (Value::Null, split_then_bytes(LLAMA3_SPLIT), true),
        "qwen2" | "deepseek-r1-qwen" => (json!({"type": "NFC"}), split_then_bytes(QWEN2_SPLIT), false),
        "tekken" | "pixtral" => (Value::Null, split_then_bytes(TEKKEN_SPLIT), false),
        "gpt-4o" | "llama4" => (Value::Null, split_then_bytes(GPT4O_SPLIT), false),
        "smollm" => {
            (Value::Null, json!({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true}, byte_level(true)]}), false)
        }
        _ => return None,
    })
}

fn strings<'a>(file: &'a GgufFile, key: &str) -> Result<Option<Vec<&'a str>>> {
    let Some(v) = file.get(key) else { return Ok(None) };
    let items = v.as_array().ok_or_else(|| bad(file, format!("{key} must be an array of strings")))?;
    items.iter().map(|m| m.as_str().ok_or_else(|| bad(file, format!("{key} must be an array of strings")))).collect::<Result<Vec<_>>>().map(Some)
}

fn bad(file: &GgufFile, what: String) -> LmError {
    LmError::InvalidWeights(format!("{}: {what}", file.path.display()))
}

fn token_id(file: &GgufFile, key: &str, n: usize) -> Result<Option<u32>> {
    match file.get(key) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(id) if (id as usize) < n => Ok(Some(id as u32)),
            _ => Err(bad(file, format!("{key} ({v:?}) is not a token id below the vocabulary size {n}"))),
        },
    }
}

/// Tokens llama.cpp ends generation on wherever a vocabulary has them, named
/// in the file or not (llama-vocab.cpp): Gemma's files name `<eos>` and stop
/// a chat turn at `<end_of_turn>` only through this.
const END_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
];

/// The ids generation stops on: llama.cpp's end-of-generation tokens
/// (EOS, and end-of-turn / end-of-message where the file names them), then
/// those `END_TEXTS` spell.
pub fn eos_ids(file: &GgufFile) -> Result<Vec<u32>> {
    let n = file.get("tokenizer.ggml.tokens").and_then(Meta::as_array).map_or(0, |a| a.len());
    let mut ids = Vec::new();
    for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
        if let Some(id) = token_id(file, key, n)? {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    for (id, t) in strings(file, "tokenizer.ggml.tokens")?.unwrap_or_default().into_iter().enumerate() {
        if END_TEXTS.contains(&t) && !ids.contains(&(id as u32)) {
            ids.push(id as u32);
        }
    }
    Ok(ids)
}

/// The tokenizer of `file`, an `arch` file, which ends generation on `eos` (`eos_ids`).
pub fn tokenizer(file: &GgufFile, arch: &Arch, eos: Vec<u32>) -> Result<Tokenizer> {
    let model = file.get("tokenizer.ggml.model").and_then(Meta::as_str).ok_or_else(|| bad(file, "missing tokenizer.ggml.model".into()))?;
    let tokens = strings(file, "tokenizer.ggml.tokens")?.ok_or_else(|| bad(file, "missing tokenizer.ggml.tokens".into()))?;
    let n = tokens.len();
    let types: Vec<u64> = match file.get("tokenizer.ggml.token_type") {
        None => vec![1; n],
        Some(v) => {
            let a = v.as_array().filter(|a| a.len() == n).ok_or_else(|| bad(file, format!("tokenizer.ggml.token_type must list {n} types")))?;
            a.iter().map(|m| m.as_u64().unwrap_or(1)).collect()
        }
    };
    let json = match model {
        "gpt2" => bpe_json(file, &tokens, &types)?,
        "llama" => spm_json(file, &tokens, &types, arch.spm)?,
        other => {
            return Err(LmError::UnsupportedModel(format!(
                "{}: tokenizer.ggml.model \"{other}\" is not supported (supported: gpt2, llama)",
                file.path.display()
            )))
        }
    };

    let mut config = TokenizerConfig::default();
    for (name, key) in [
        ("bos_token", "tokenizer.ggml.bos_token_id"),
        ("eos_token", "tokenizer.ggml.eos_token_id"),
        ("unk_token", "tokenizer.ggml.unknown_token_id"),
        ("pad_token", "tokenizer.ggml.padding_token_id"),
    ] {
        if let Some(id) = token_id(file, key, n)? {
            config.special_tokens.push((name, tokens[id as usize].to_string()));
        }
    }
    if let Some(t) = file.get("tokenizer.chat_template") {
        let t = t.as_str().ok_or_else(|| bad(file, "tokenizer.chat_template must be a string".into()))?;
        config.chat_template = ChatTemplateSource::Single(t.to_string());
    }
    config.add_bos_token = file.get("tokenizer.ggml.add_bos_token").and_then(Meta::as_bool);
    let bytes = serde_json::to_vec(&json).map_err(|e| bad(file, format!("could not build its tokenizer: {e}")))?;
    let origin = format!("{} (tokenizer.chat_template)", file.path.display());
    let mut tok = Tokenizer::from_parts(&bytes, &file.path, config, &file.path, origin)?;
    tok.add_eos_token_ids(eos);
    Ok(tok)
}

/// GPT-2 style byte-level BPE.
fn bpe_json(file: &GgufFile, tokens: &[&str], types: &[u64]) -> Result<Value> {
    let pre = file.get("tokenizer.ggml.pre").and_then(Meta::as_str).unwrap_or("default");
    let (normalizer, pre_tokenizer, ignore_merges) = pre_tokenizer(pre).ok_or_else(|| {
        LmError::UnsupportedModel(format!(
            "{}: pre-tokenizer \"{pre}\" (tokenizer.ggml.pre) is not supported; supported: default, gpt-2, llama-bpe, llama3, qwen2, deepseek-r1-qwen, smollm, tekken, gpt-4o",
            file.path.display()
        ))
    })?;
    // A vocabulary of single bytes has no merges (gguf-py then writes no key).
    let merges = strings(file, "tokenizer.ggml.merges")?.unwrap_or_default();
    let in_alphabet = |t: &str| t.chars().all(|c| byte_level::byte_of(c).is_some());
    let mut vocab = serde_json::Map::with_capacity(tokens.len());
    let mut added = Vec::new();
    for (id, (&t, &kind)) in tokens.iter().zip(types).enumerate() {
        if kind == UNUSED && t.starts_with("[PAD") {
            continue;
        }
        // A token written outside the byte alphabet is plain text: spell its
        // bytes (as transformers' GGUF loader does) so the model can hold it.
        let spelled = if in_alphabet(t) { t.to_string() } else { t.bytes().map(byte_level::char_of).collect() };
        if kind == CONTROL && in_alphabet(t) || kind == USER_DEFINED {
            added.push(json!({"id": id, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
                "normalized": false, "special": kind == CONTROL}));
        }
        vocab.insert(spelled, json!(id));
    }
    let merges: Vec<Value> = merges
        .iter()
        .map(|m| m.split_once(' ').map(|(a, b)| json!([a, b])).ok_or_else(|| bad(file, format!("merge \"{m}\" is not two tokens"))))
        .collect::<Result<_>>()?;
    let post = post_processor(file, tokens, false)?;
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": post,
        "decoder": byte_level(true),
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": ignore_merges, "vocab": vocab, "merges": merges},
    }))
}

/// SentencePiece-style vocabulary (`llama`): BPE over the pieces with byte
/// fallback, merges recovered from the vocabulary and its scores, and the
/// Metaspace pre-tokenizer and decoders of transformers' Llama tokenizer (as
/// its GGUF loader builds it). BOS is added unless the file says otherwise.
///
/// The others as transformers' GGUF loader builds them (`Spm`).
fn spm_json(file: &GgufFile, tokens: &[&str], types: &[u64], flavor: Spm) -> Result<Value> {
    let gemma = flavor == Spm::Gemma;
    let scores: Vec<f64> = match file.get("tokenizer.ggml.scores") {
        _ if gemma => (0..tokens.len()).map(|i| -(i as f64)).collect(),
        None => vec![0.0; tokens.len()],
        Some(v) => {
            let a = v
                .as_array()
                .filter(|a| a.len() == tokens.len())
                .ok_or_else(|| bad(file, format!("tokenizer.ggml.scores must list {} scores", tokens.len())))?;
            a.iter().map(|m| m.as_f64().unwrap_or(0.0)).collect()
        }
    };
    let respelled: Vec<String> = tokens
        .iter()
        .map(|&t| match gemma && t.contains(' ') && t.trim().is_empty() {
            true => "\u{2581}".repeat(t.chars().count()),
            false => t.to_string(),
        })
        .collect();
    let mut vocab = serde_json::Map::with_capacity(tokens.len());
    let mut ids = std::collections::HashMap::with_capacity(tokens.len());
    let mut added = Vec::new();
    for (id, ((t, &original), &kind)) in respelled.iter().zip(tokens).zip(types).enumerate() {
        vocab.insert(t.clone(), json!(id));
        ids.insert(t.as_str(), id);
        // The unknown piece is special too, as transformers' Llama tokenizer makes it;
        // a respelled whitespace piece is an ordinary one.
        if kind == CONTROL || kind == USER_DEFINED && t == original || kind == UNKNOWN {
            added.push(json!({"id": id, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
                "normalized": false, "special": kind != USER_DEFINED}));
        }
    }
    let pieces: Vec<&str> = respelled.iter().map(String::as_str).collect();
    let merges = match strings(file, "tokenizer.ggml.merges")? {
        Some(m) => m.iter().filter_map(|m| m.split_once(' ')).map(|(a, b)| json!([a, b])).collect(),
        None => merges_from_scores(&pieces, &scores, &ids),
    };
    let post = post_processor(file, tokens, true)?;
    let spaces = json!({"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"});
    let strip = vec![json!({"type": "Strip", "content": " ", "start": 1, "stop": 0})];
    let (normalizer, pre_tokenizer, mut decoders) = match flavor {
        Spm::Gemma => (spaces, json!({"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false}), vec![]),
        Spm::Phi3 => (json!({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u{2581}"}, spaces]}), Value::Null, strip),
        Spm::Llama => (Value::Null, json!({"type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": "first", "split": false}), strip),
    };
    let mut decoder =
        vec![json!({"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "}), json!({"type": "ByteFallback"}), json!({"type": "Fuse"})];
    decoder.append(&mut decoders);
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": post,
        "decoder": {"type": "Sequence", "decoders": decoder},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": true, "byte_fallback": true, "ignore_merges": false, "vocab": vocab, "merges": merges},
    }))
}

/// How a SentencePiece vocabulary's text is prepared, by architecture.
#[derive(Clone, Copy, PartialEq)]
pub enum Spm {
    /// transformers' Llama tokenizer: Metaspace, a prefix space on the first piece.
    Llama,
    /// Gemma: no prefix space, spaces normalized to `\u{2581}`, and two repairs
    /// of what llama.cpp's converter writes: whitespace pieces it stored with
    /// real spaces ("  ") spelled back as `\u{2581}\u{2581}`, and merges ranked
    /// by the pieces' order in the vocabulary, which Gemma's scores do not follow.
    Gemma,
    /// Phi-3: the prefix space from a normalizer (Phi-3's own tokenizer.json),
    /// so text after a special token gets one too.
    Phi3,
}

/// The merges a SentencePiece BPE vocabulary implies: every split of a piece
/// into two pieces of the vocabulary, best score first, then longer left and
/// right parts first; a piece's own splits in the order of their parts' ids
/// (transformers' `generate_merges`, whose order the tokenizer depends on).
fn merges_from_scores(tokens: &[&str], scores: &[f64], ids: &std::collections::HashMap<&str, usize>) -> Vec<Value> {
    struct Merge<'a> {
        left: &'a str,
        right: &'a str,
        score: f64,
        lens: (usize, usize),
    }
    let mut merges: Vec<Merge> = Vec::new();
    for (i, &piece) in tokens.iter().enumerate() {
        // A repeated piece counts once, with its last score, as a dict would keep it.
        if ids.get(piece) != Some(&i) {
            continue;
        }
        let mut local: Vec<(usize, usize, Merge)> = Vec::new();
        for (at, _) in piece.char_indices().skip(1) {
            let (l, r) = piece.split_at(at);
            if let (Some(&li), Some(&ri)) = (ids.get(l), ids.get(r)) {
                local.push((li, ri, Merge { left: l, right: r, score: scores[i], lens: (l.chars().count(), r.chars().count()) }));
            }
        }
        local.sort_by_key(|m| (m.0, m.1));
        merges.extend(local.into_iter().map(|m| m.2));
    }
    merges.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.lens.cmp(&a.lens)));
    merges.into_iter().map(|m| json!([m.left, m.right])).collect()
}

/// BOS/EOS added around every encoding, as the file's add_bos/add_eos flags
/// say (`bos_default` when it has no add_bos flag).
fn post_processor(file: &GgufFile, tokens: &[&str], bos_default: bool) -> Result<Value> {
    let flag = |k: &str, default: bool| file.get(k).and_then(Meta::as_bool).unwrap_or(default);
    let n = tokens.len();
    let bos = if flag("tokenizer.ggml.add_bos_token", bos_default) { token_id(file, "tokenizer.ggml.bos_token_id", n)? } else { None };
    let eos = if flag("tokenizer.ggml.add_eos_token", false) { token_id(file, "tokenizer.ggml.eos_token_id", n)? } else { None };
    if bos.is_none() && eos.is_none() {
        return Ok(Value::Null);
    }
    let special = |id: u32| json!({"SpecialToken": {"id": tokens[id as usize], "type_id": 0}});
    let mut single = Vec::new();
    let mut specials = serde_json::Map::new();
    for (id, at_start) in [(bos, true), (eos, false)] {
        if let Some(id) = id {
            specials.insert(tokens[id as usize].to_string(), json!({"id": tokens[id as usize], "ids": [id], "tokens": [tokens[id as usize]]}));
            if at_start {
                single.push(special(id));
            }
        }
    }
    single.push(json!({"Sequence": {"id": "A", "type_id": 0}}));
    if let Some(id) = eos {
        single.push(special(id));
    }
    let mut pair = single.clone();
    pair.push(json!({"Sequence": {"id": "B", "type_id": 1}}));
    Ok(json!({"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials}))
}

#[cfg(test)]
mod tests {
    use tokenizers::{PreTokenizedString, PreTokenizer, PreTokenizerWrapper};

    fn pieces(pre: &str, text: &str) -> Vec<String> {
        let (_, json, _) = super::pre_tokenizer(pre).unwrap();
        let p: PreTokenizerWrapper = serde_json::from_value(json).unwrap();
        let mut s = PreTokenizedString::from(text);
        p.pre_tokenize(&mut s).unwrap();
        s.get_splits(tokenizers::OffsetReferential::Original, tokenizers::OffsetType::Byte).into_iter().map(|(t, _, _)| t.to_string()).collect()
    }

    /// The pieces transformers' GGUF tokenizers (`pre-gpt-4o`, `pre-tekken` fixtures) make of the same
    /// text with `pre_tokenizer.pre_tokenize_str`: GPT-4o keeps contractions and runs of three digits,
    /// tekken splits both (Qwen's single-digit vocabulary in the fixtures cannot tell these apart).
    #[test]
    fn gpt4o_and_tekken_split_as_transformers() {
        let text = "it's 12345 camelCase/path\n";
        assert_eq!(pieces("gpt-4o", text), ["it's", "Ġ", "123", "45", "Ġcamel", "Case", "/path", "Ċ"]);
        assert_eq!(pieces("tekken", text), ["it", "'s", "Ġ", "1", "2", "3", "4", "5", "Ġcamel", "Case", "/path", "Ċ"]);
    }
}
