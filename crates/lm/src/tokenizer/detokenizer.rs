//! Streaming detokenisation with MLX-LM 0.32.2's choice of algorithm.
//!
//! `mlx_lm.tokenizer_utils.load` looks at `tokenizer.json`'s `decoder`: the
//! exact SentencePiece sequences pick the SPM detokenizer, any `ByteLevel`
//! decoder picks the BPE one, anything else the naive one. The text of
//! every chunk is complete UTF-8 (an incomplete sequence is held back until
//! it completes or `finalize` is called), and the chunks concatenated equal
//! what MLX-LM's `stream_generate` yields for the same ids.

use serde_json::{json, Value};

use super::detok_bpe::BpeDetokenizer;
use super::detok_naive::NaiveDetokenizer;
use super::detok_spm::SpmDetokenizer;
use super::Tokenizer;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetokenizerKind {
    Naive,
    Spm { trim_space: bool },
    Bpe,
}

impl DetokenizerKind {
    /// MLX-LM's `_is_spm_decoder`, `_is_spm_decoder_no_space` and
    /// `_is_bpe_decoder`; the SPM checks are exact structural matches.
    pub fn from_decoder(decoder: Option<&Value>) -> Self {
        let Some(decoder) = decoder else {
            return DetokenizerKind::Naive;
        };
        let replace = json!({"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "});
        let spm = json!({"type": "Sequence", "decoders": [
            replace, {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}
        ]});
        let spm_no_space = json!({"type": "Sequence", "decoders": [
            replace, {"type": "ByteFallback"}, {"type": "Fuse"}
        ]});
        if *decoder == spm {
            DetokenizerKind::Spm { trim_space: true }
        } else if *decoder == spm_no_space {
            DetokenizerKind::Spm { trim_space: false }
        } else if decoder.get("type").and_then(Value::as_str) == Some("ByteLevel") {
            DetokenizerKind::Bpe
        } else {
            DetokenizerKind::Naive
        }
    }
}

enum Inner {
    Bpe(BpeDetokenizer),
    Spm(SpmDetokenizer),
    Naive(NaiveDetokenizer),
}

/// Turns generated ids into text chunks as they arrive.
pub struct StreamingDetokenizer {
    inner: Inner,
    tokens: Vec<u32>,
}

impl StreamingDetokenizer {
    pub fn new(tokenizer: &Tokenizer) -> Self {
        let inner = match tokenizer.detokenizer_kind() {
            DetokenizerKind::Bpe => Inner::Bpe(BpeDetokenizer::new(tokenizer.token_strings())),
            DetokenizerKind::Spm { trim_space } => Inner::Spm(SpmDetokenizer::new(tokenizer.spm_token_bytes(), trim_space)),
            DetokenizerKind::Naive => Inner::Naive(NaiveDetokenizer::new(tokenizer.clone(), tokenizer.decode_cleans_spaces())),
        };
        StreamingDetokenizer { inner, tokens: Vec::new() }
    }

    /// Adds one id and returns the text it completed (often empty).
    pub fn add_token(&mut self, id: u32) -> String {
        self.tokens.push(id);
        match &mut self.inner {
            Inner::Bpe(d) => d.add_token(id),
            Inner::Spm(d) => d.add_token(id),
            Inner::Naive(d) => d.add_token(id),
        }
    }

    /// Flushes held-back text; an incomplete trailing UTF-8 sequence becomes
    /// U+FFFD, as in `decode`.
    pub fn finalize(&mut self) -> String {
        match &mut self.inner {
            Inner::Bpe(d) => d.finalize(),
            Inner::Spm(d) => d.finalize(),
            Inner::Naive(d) => d.finalize(),
        }
    }

    /// Starts over for a new generation.
    pub fn reset(&mut self) {
        self.tokens.clear();
        match &mut self.inner {
            Inner::Bpe(d) => d.reset(),
            Inner::Spm(d) => d.reset(),
            Inner::Naive(d) => d.reset(),
        }
    }

    /// The ids added since the last reset.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_like_mlx_lm() {
        let spm = json!({"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}
        ]});
        assert_eq!(DetokenizerKind::from_decoder(Some(&spm)), DetokenizerKind::Spm { trim_space: true });
        let mut float_stop = spm.clone();
        float_stop["decoders"][3]["stop"] = json!(0.0);
        assert_eq!(DetokenizerKind::from_decoder(Some(&float_stop)), DetokenizerKind::Naive);
        let bpe = json!({"type": "ByteLevel", "add_prefix_space": false});
        assert_eq!(DetokenizerKind::from_decoder(Some(&bpe)), DetokenizerKind::Bpe);
        assert_eq!(DetokenizerKind::from_decoder(None), DetokenizerKind::Naive);
        assert_eq!(DetokenizerKind::from_decoder(Some(&json!({"type": "WordPiece"}))), DetokenizerKind::Naive);
    }
}
