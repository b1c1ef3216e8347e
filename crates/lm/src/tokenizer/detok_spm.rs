//! MLX-LM 0.32.2 `SPMStreamingDetokenizer`, for SentencePiece-style
//! decoders (`Replace ▁`, `ByteFallback`, `Fuse`[, `Strip`]).

use std::sync::Arc;

const SEP: &[u8] = "\u{2581}".as_bytes();

pub struct SpmDetokenizer {
    /// Bytes per id: `<0xNN>` byte tokens as that byte, others as UTF-8.
    tokens: Arc<Vec<Vec<u8>>>,
    trim_space: bool,
    unflushed: Vec<u8>,
    emitted_any: bool,
}

/// The byte table MLX-LM builds from `convert_ids_to_tokens`.
pub fn byte_table(tokens: &[String]) -> Vec<Vec<u8>> {
    tokens
        .iter()
        .map(|t| {
            let hex = t.strip_prefix("<0x").and_then(|r| r.get(..2));
            match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(b) => vec![b],
                None => t.as_bytes().to_vec(),
            }
        })
        .collect()
}

impl SpmDetokenizer {
    pub fn new(tokens: Arc<Vec<Vec<u8>>>, trim_space: bool) -> Self {
        SpmDetokenizer { tokens, trim_space, unflushed: Vec::new(), emitted_any: false }
    }

    pub fn reset(&mut self) {
        self.unflushed.clear();
        self.emitted_any = false;
    }

    pub fn add_token(&mut self, id: u32) -> String {
        // MLX-LM raises IndexError for ids past the table; they add nothing here.
        if let Some(bytes) = self.tokens.get(id as usize) {
            self.unflushed.extend_from_slice(bytes);
        }
        self.try_flush(false)
    }

    pub fn finalize(&mut self) -> String {
        self.try_flush(true)
    }

    fn try_flush(&mut self, force: bool) -> String {
        let replaced = replace_sep(&self.unflushed);
        let mut text = String::from_utf8_lossy(&replaced).into_owned();
        if !force && text.ends_with('\u{FFFD}') {
            return String::new();
        }
        if !self.emitted_any && self.trim_space && text.starts_with(' ') {
            text.remove(0);
        }
        if !text.is_empty() {
            self.emitted_any = true;
        }
        self.unflushed.clear();
        text
    }
}

fn replace_sep(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(SEP) {
            out.push(b' ');
            i += SEP.len();
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_like_mlx_lm() {
        let table = byte_table(&["▁Hello".into(), "<0xE4>".into(), "<0xB8>".into(), "<0xAD>".into(), "▁x".into()]);
        let mut d = SpmDetokenizer::new(Arc::new(table.clone()), true);
        let chunks: Vec<String> = [0u32, 1, 2, 3, 4].iter().map(|&i| d.add_token(i)).collect();
        assert_eq!(chunks, ["Hello", "", "", "中", " x"]);
        assert_eq!(d.finalize(), "");
        let mut d = SpmDetokenizer::new(Arc::new(table), false);
        assert_eq!(d.add_token(0), " Hello");
    }
}
