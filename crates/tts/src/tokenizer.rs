//! Chatterbox's text tokenizer: a Hugging Face `tokenizer.json` whose
//! vocabulary spells spaces as `[SPACE]` and has `[START]` / `[STOP]`. The
//! multilingual checkpoints' one also has the `[xx]` language tags, and their
//! text is prepared per language first (`text_mtl`). Turbo's is GPT-2's
//! byte-level BPE, fed the text as it is (after Turbo's `punc_norm`), read
//! from a `tokenizer.json` or, as Resemble publishes Turbo, from GPT-2's
//! `vocab.json` and `merges.txt` (`gpt2_files`).
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
            let json = dir.join("tokenizer.json");
            let hf = match (json.exists(), dir.join("vocab.json").exists()) {
                (false, true) => gpt2_files(dir)?,
                (false, false) => {
                    return Err(TtsError::ModelNotFound(format!("{}: no tokenizer.json, nor GPT-2's vocab.json and merges.txt", dir.display())))
                }
                (true, _) => read_hf(&json)?,
            };
            return Ok(TextTokenizer { hf, mtl: None, turbo: true });
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

/// GPT-2's tokenizer from `vocab.json` and `merges.txt`, built as transformers'
/// `GPT2Tokenizer` builds it (what mlx-audio's `AutoTokenizer.from_pretrained`
/// gets for such a folder): byte-level BPE without prefixes or suffixes, a
/// byte-level pre-tokenizer (`add_prefix_space` from `tokenizer_config.json`,
/// false by default) and decoder, a BOS first only with `add_bos_token`, and the
/// folder's added tokens (`added_tokens.json` and the config's
/// `added_tokens_decoder`) matched whole before BPE.
fn gpt2_files(dir: &Path) -> Result<tokenizers::Tokenizer> {
    use tokenizers::models::bpe::BPE;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::processors::template::TemplateProcessing;
    use tokenizers::{AddedToken, Tokenizer};

    let (vocab, merges) = (dir.join("vocab.json"), dir.join("merges.txt"));
    if !merges.exists() {
        return Err(TtsError::ModelNotFound(format!(
            "{} has vocab.json but no merges.txt (GPT-2's tokenizer needs both, or a tokenizer.json)",
            dir.display()
        )));
    }
    let invalid =
        |what: &Path, e: &dyn std::fmt::Display| TtsError::InvalidWeights(format!("{}: not a valid GPT-2 tokenizer file: {e}", what.display()));
    let bpe = BPE::from_file(&vocab.to_string_lossy(), &merges.to_string_lossy())
        .continuing_subword_prefix(String::new())
        .end_of_word_suffix(String::new())
        .build()
        .map_err(|e| invalid(&vocab, &e))?;
    let config = read_json(&dir.join("tokenizer_config.json"))?;
    let flag = |key: &str| config.get(key).and_then(|v| v.as_bool()).unwrap_or(false);
    let mut tok = Tokenizer::new(bpe);
    tok.with_pre_tokenizer(Some(ByteLevel::new(flag("add_prefix_space"), true, true)));
    tok.with_decoder(Some(ByteLevel::default()));
    // Added tokens: the config's table (with its `special` flags), then
    // added_tokens.json's names; ids come from the files, so they are checked.
    let mut added: Vec<(String, u32, bool)> = Vec::new();
    if let Some(table) = config.get("added_tokens_decoder").and_then(|v| v.as_object()) {
        for (id, entry) in table {
            let content = entry.get("content").and_then(|c| c.as_str());
            let id = id.parse::<u32>().ok();
            if let (Some(content), Some(id)) = (content, id) {
                added.push((content.to_string(), id, entry.get("special").and_then(|s| s.as_bool()).unwrap_or(false)));
            }
        }
    }
    let extra = read_json(&dir.join("added_tokens.json"))?;
    for (content, id) in extra.as_object().into_iter().flatten() {
        if let Some(id) = id.as_u64() {
            if !added.iter().any(|(c, _, _)| c == content) {
                added.push((content.clone(), id as u32, false));
            }
        }
    }
    added.sort_by_key(|(_, id, _)| *id);
    for (content, id, special) in &added {
        let token = AddedToken::from(content.clone(), *special);
        if *special {
            tok.add_special_tokens(std::slice::from_ref(&token));
        } else {
            tok.add_tokens(std::slice::from_ref(&token));
        }
        if tok.token_to_id(content) != Some(*id) {
            return Err(TtsError::InvalidWeights(format!(
                "{}: added token {content:?} should have id {id}, the vocabulary gives it {:?}",
                dir.display(),
                tok.token_to_id(content)
            )));
        }
    }
    if flag("add_bos_token") {
        let bos = config.get("bos_token").and_then(|b| b.as_str().or_else(|| b.get("content").and_then(|c| c.as_str()))).unwrap_or("<|endoftext|>");
        let id =
            tok.token_to_id(bos).ok_or_else(|| TtsError::InvalidWeights(format!("{}: bos_token {bos:?} is not in the vocabulary", dir.display())))?;
        let template = TemplateProcessing::builder()
            .try_single(format!("{bos}:0 $A:0"))
            .and_then(|b| b.special_tokens(vec![(bos.to_string(), id)]).build().map_err(|e| e.to_string()))
            .map_err(|e| invalid(&dir.join("tokenizer_config.json"), &e))?;
        tok.with_post_processor(Some(template));
    }
    Ok(tok)
}

/// A JSON file of the folder (`lm`'s reader), `{}` when it is not there.
fn read_json(path: &Path) -> Result<serde_json::Value> {
    if !path.exists() {
        return Ok(serde_json::Value::Object(Default::default()));
    }
    lm::config::read_json(path)
}
