//! MLX-LM 0.32.2 `NaiveStreamingDetokenizer`: re-decodes the tokens of the
//! current line on every step (O(line length) per token), for tokenizers
//! whose decoder is neither byte-level nor SentencePiece.

use super::Tokenizer;

pub struct NaiveDetokenizer {
    tokenizer: Tokenizer,
    /// Whether decode() removes the space in "a ,b" (clean-up is on); then a
    /// trailing space is held back since the next token may remove it.
    clean_spaces: bool,
    committed: String,
    committed_chars: usize,
    current_tokens: Vec<u32>,
    current_text: String,
    /// Chars of `text` already returned (Python's `offset`).
    offset: usize,
}

impl NaiveDetokenizer {
    pub fn new(tokenizer: Tokenizer, clean_spaces: bool) -> Self {
        NaiveDetokenizer {
            tokenizer,
            clean_spaces,
            committed: String::new(),
            committed_chars: 0,
            current_tokens: Vec::new(),
            current_text: String::new(),
            offset: 0,
        }
    }

    pub fn reset(&mut self) {
        self.committed.clear();
        self.committed_chars = 0;
        self.current_tokens.clear();
        self.current_text.clear();
        self.offset = 0;
    }

    pub fn add_token(&mut self, id: u32) -> String {
        self.current_tokens.push(id);
        self.refresh();
        self.last_segment()
    }

    pub fn finalize(&mut self) -> String {
        let tail = self.tokenizer.decode(&self.current_tokens).unwrap_or_default();
        self.commit(&tail);
        self.current_tokens.clear();
        self.current_text.clear();
        self.last_segment()
    }

    /// The `text` property: decode the current line, hold back trailing
    /// U+FFFD (incomplete chars) or a cleanable space, commit on newline.
    fn refresh(&mut self) {
        if !self.current_tokens.is_empty() {
            let mut text = self.tokenizer.decode(&self.current_tokens).unwrap_or_default();
            if text.ends_with('\u{FFFD}') {
                let kept = text.trim_end_matches('\u{FFFD}').len();
                text.truncate(kept);
            } else if self.clean_spaces && text.ends_with(' ') {
                text.pop();
            }
            self.current_text = text;
        }
        if self.current_text.ends_with('\n') {
            let line = std::mem::take(&mut self.current_text);
            self.commit(&line);
            self.current_tokens.clear();
        }
    }

    fn commit(&mut self, text: &str) {
        self.committed.push_str(text);
        self.committed_chars += text.chars().count();
    }

    /// `text[offset:]` in chars, then `offset = len(text)`.
    fn last_segment(&mut self) -> String {
        let current_chars = self.current_text.chars().count();
        let total = self.committed_chars + current_chars;
        let segment = if self.offset <= self.committed_chars {
            // The unreturned committed chars are the last `back` ones.
            let back = self.committed_chars - self.offset;
            let start = match back {
                0 => self.committed.len(),
                n => self.committed.char_indices().rev().nth(n - 1).map_or(0, |(i, _)| i),
            };
            format!("{}{}", &self.committed[start..], self.current_text)
        } else {
            self.current_text.chars().skip(self.offset - self.committed_chars).collect()
        };
        self.offset = total;
        segment
    }
}
