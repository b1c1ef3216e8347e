//! Chatterbox's English text tokenizer: a Hugging Face `tokenizer.json` whose
//! vocabulary spells spaces as `[SPACE]` and has `[START]` / `[STOP]`.
use std::path::Path;

use crate::{Result, TtsError};

pub struct TextTokenizer {
    hf: tokenizers::Tokenizer,
}

const SPACE: &str = "[SPACE]";

impl TextTokenizer {
    pub fn from_file(path: &Path) -> Result<TextTokenizer> {
        let bytes = std::fs::read(path).map_err(|e| TtsError::ModelNotFound(format!("cannot read {}: {e}", path.display())))?;
        let hf = tokenizers::Tokenizer::from_bytes(&bytes)
            .map_err(|e| TtsError::InvalidWeights(format!("{}: not a valid tokenizer: {e}", path.display())))?;
        for required in ["[START]", "[STOP]"] {
            if hf.token_to_id(required).is_none() {
                return Err(TtsError::InvalidWeights(format!("{}: the vocabulary has no {required} token", path.display())));
            }
        }
        Ok(TextTokenizer { hf })
    }

    /// Ids of already normalised text, spaces spelled `[SPACE]`, without
    /// start/stop tokens (the model adds its own).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let spelled = text.replace(' ', SPACE);
        let enc = self.hf.encode(spelled.as_str(), true).map_err(|e| TtsError::InvalidArgument(format!("cannot tokenize the text: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    pub fn vocab_size(&self) -> usize {
        self.hf.get_vocab_size(true)
    }
}
