//! Chatterbox's text tokenizer: a Hugging Face `tokenizer.json` whose
//! vocabulary spells spaces as `[SPACE]` and has `[START]` / `[STOP]`. The
//! multilingual checkpoints' one also has the `[xx]` language tags, and their
//! text is prepared per language first (`text_mtl`). Turbo's is GPT-2's
//! byte-level BPE, fed the text as it is (after Turbo's `punc_norm`).
use std::path::Path;

use crate::config::ChatterboxConfig;
use crate::text::{punc_norm, punc_norm_turbo};
use crate::text_mtl::{check_language, MtlText, Preprocessing};
use crate::{Result, TtsError};

pub struct TextTokenizer {
    hf: tokenizers::Tokenizer,
    /// The multilingual preparation; `None` for the English checkpoint.
    mtl: Option<MtlText>,
    /// Turbo's GPT-2 tokenizer: no `[SPACE]` spelling, no `[START]`/`[STOP]`.
    turbo: bool,
}

const SPACE: &str = "[SPACE]";

impl TextTokenizer {
    /// The tokenizer of the model folder `dir` (its `tokenizer.json`), English or
    /// multilingual as its config.json says.
    pub fn for_model(dir: &Path, config: &ChatterboxConfig) -> Result<TextTokenizer> {
        if config.turbo() {
            return Ok(TextTokenizer { hf: read_hf(&dir.join("tokenizer.json"))?, mtl: None, turbo: true });
        }
        let mut tokenizer = Self::from_file(&dir.join("tokenizer.json"))?;
        if let Some(preprocessing) = config.multilingual() {
            tokenizer.mtl = Some(MtlText::load(dir, preprocessing)?);
        }
        Ok(tokenizer)
    }

    /// An English tokenizer from a `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<TextTokenizer> {
        let hf = read_hf(path)?;
        for required in ["[START]", "[STOP]"] {
            if hf.token_to_id(required).is_none() {
                return Err(TtsError::InvalidWeights(format!("{}: the vocabulary has no {required} token", path.display())));
            }
        }
        Ok(TextTokenizer { hf, mtl: None, turbo: false })
    }

    pub fn multilingual(&self) -> bool {
        self.mtl.is_some()
    }

    /// Ids of one piece of raw text in `language` (`None`: English), without
    /// start/stop tokens: mlx-audio's `Model._tokenize_text`.
    pub fn text_ids(&self, text: &str, language: Option<&str>) -> Result<Vec<u32>> {
        let language = check_language(language, self.multilingual())?;
        if self.turbo {
            let text = punc_norm_turbo(text);
            let enc = self.hf.encode(text.as_str(), true).map_err(|e| TtsError::InvalidArgument(format!("cannot tokenize the text: {e}")))?;
            return Ok(enc.get_ids().to_vec());
        }
        match &self.mtl {
            None => self.encode(&punc_norm(text, true)),
            Some(mtl) => {
                let text = punc_norm(text, mtl.preprocessing != Preprocessing::V3);
                self.encode(&mtl.prepare(&text, &language))
            }
        }
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

fn read_hf(path: &Path) -> Result<tokenizers::Tokenizer> {
    let bytes = std::fs::read(path).map_err(|e| TtsError::ModelNotFound(format!("cannot read {}: {e}", path.display())))?;
    tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| TtsError::InvalidWeights(format!("{}: not a valid tokenizer: {e}", path.display())))
}
