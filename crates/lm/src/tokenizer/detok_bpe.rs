//! MLX-LM 0.32.2 `BPEStreamingDetokenizer`, for tokenizers whose decoder is
//! `ByteLevel` (Qwen, Llama 3, GPT-2 style).
//!
//! Token strings are collected until their bytes decode without a trailing
//! U+FFFD (an incomplete UTF-8 sequence) and the last token is not a lone
//! space, then flushed. Each flush costs the length of the held text, so a
//! token is O(1) amortised. Quirks kept on purpose, because MLX-LM's
//! `stream_generate` text is the reference:
//! - the first non-empty flush loses one leading space;
//! - while streaming, byte 0 ('Ā') is emitted as the text "Ā" (a falsy-zero
//!   test in `_decode_bytes`); `finalize` decodes it as NUL;
//! - ids at or past the vocabulary length stream as "!".

use std::sync::Arc;

use super::byte_level::byte_of;

pub struct BpeDetokenizer {
    /// Token string per id (`convert_ids_to_tokens(range(len(tokenizer)))`).
    tokens: Arc<Vec<String>>,
    unflushed: String,
    emitted_any: bool,
}

impl BpeDetokenizer {
    pub fn new(tokens: Arc<Vec<String>>) -> Self {
        BpeDetokenizer { tokens, unflushed: String::new(), emitted_any: false }
    }

    pub fn reset(&mut self) {
        self.unflushed.clear();
        self.emitted_any = false;
    }

    pub fn add_token(&mut self, id: u32) -> String {
        let piece: &str = match self.tokens.get(id as usize) {
            Some(s) => s,
            None => "!",
        };
        self.unflushed.push_str(piece);
        let text = decode_streaming(&self.unflushed);
        let mut chars = piece.chars();
        let lone_space = matches!((chars.next(), chars.next()), (Some(c), None) if byte_of(c) == Some(b' '));
        if !text.ends_with('\u{FFFD}') && !lone_space {
            self.unflushed.clear();
            return self.trim_first_space(text);
        }
        String::new()
    }

    pub fn finalize(&mut self) -> String {
        let mut bytes = Vec::with_capacity(self.unflushed.len());
        for c in self.unflushed.chars() {
            match byte_of(c) {
                Some(b) => bytes.push(b),
                // MLX-LM raises KeyError here; keep the char's own bytes.
                None => push_utf8(&mut bytes, c),
            }
        }
        self.unflushed.clear();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        self.trim_first_space(text)
    }

    fn trim_first_space(&mut self, text: String) -> String {
        let out = if !self.emitted_any && text.starts_with(' ') { text[1..].to_string() } else { text };
        if !out.is_empty() {
            self.emitted_any = true;
        }
        out
    }
}

/// `_decode_bytes`: alphabet chars become their byte, except byte 0, which
/// (being falsy in Python) falls through to the char's UTF-8 like any char
/// outside the alphabet.
fn decode_streaming(seq: &str) -> String {
    let mut bytes = Vec::with_capacity(seq.len());
    for c in seq.chars() {
        match byte_of(c) {
            Some(b) if b != 0 => bytes.push(b),
            _ => push_utf8(&mut bytes, c),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn push_utf8(bytes: &mut Vec<u8>, c: char) {
    let mut buf = [0u8; 4];
    bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detok(tokens: &[&str]) -> BpeDetokenizer {
        BpeDetokenizer::new(Arc::new(tokens.iter().map(|s| s.to_string()).collect()))
    }

    fn stream(d: &mut BpeDetokenizer, ids: &[u32]) -> Vec<String> {
        let mut out: Vec<String> = ids.iter().map(|&i| d.add_token(i)).collect();
        out.push(d.finalize());
        out
    }

    #[test]
    fn holds_incomplete_utf8() {
        // "中" is E4 B8 AD: 'ä', '¸', and 0xAD, which the alphabet spells 'Ń'.
        let mut d = detok(&["ä", "¸Ń", "a"]);
        assert_eq!(stream(&mut d, &[0, 1, 2]), ["", "中", "a", ""]);
    }

    #[test]
    fn trims_first_space_and_holds_lone_spaces() {
        let mut d = detok(&["ĠHi", "Ġ", "there", "<|im_end|>"]);
        assert_eq!(stream(&mut d, &[0, 1, 2, 3]), ["Hi", "", " there", "<|im_end|>", ""]);
        d.reset();
        assert_eq!(stream(&mut d, &[1]), ["", ""]);
    }

    #[test]
    fn keeps_mlx_lm_quirks() {
        let mut d = detok(&["Ā"]);
        assert_eq!(stream(&mut d, &[0, 5]), ["Ā", "!", ""]);
        // A trailing incomplete sequence is flushed as U+FFFD at the end.
        let mut d = detok(&["ä"]);
        assert_eq!(stream(&mut d, &[0]), ["", "\u{FFFD}"]);
    }
}
