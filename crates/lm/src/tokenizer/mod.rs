//! Tokenizer, chat template and streaming detokenizer of a model folder,
//! matching transformers 5 (`AutoTokenizer`) and MLX-LM 0.32.2.

pub(crate) mod byte_level;
mod chat_template;
mod config;
mod detok_bpe;
mod detok_naive;
mod detok_spm;
mod detokenizer;
mod eos;
mod pyjson;
mod template_env;
mod template_values;
mod thinking;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use tokenizers::models::ModelWrapper;

pub use chat_template::ChatTemplateOptions;
pub use config::{AddedTokenInfo, ChatTemplateSource, TokenizerConfig};
pub use detokenizer::{DetokenizerKind, StreamingDetokenizer};
pub use eos::config_eos_token_ids;

use crate::error::{LmError, Result};
use chat_template::ChatTemplates;

struct Shared {
    hf: tokenizers::Tokenizer,
    dir: PathBuf,
    config: TokenizerConfig,
    bos_token_id: Option<u32>,
    eos_token_id: Option<u32>,
    /// transformers' decode clean-up, already reduced by its BPE exception.
    clean_up_spaces: bool,
    detokenizer_kind: DetokenizerKind,
    templates: ChatTemplates,
    // Built on first use: only the detokenizer kind in use needs its table.
    token_strings: OnceLock<Arc<Vec<String>>>,
    spm_bytes: OnceLock<Arc<Vec<Vec<u8>>>>,
    cleans_spaces: OnceLock<bool>,
}

/// A loaded tokenizer. Cloning is cheap (shared data); each clone has its
/// own EOS id set.
#[derive(Clone)]
pub struct Tokenizer {
    shared: Arc<Shared>,
    eos_token_ids: Vec<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("dir", &self.shared.dir)
            .field("vocab_size", &self.vocab_size())
            .field("eos_token_ids", &self.eos_token_ids)
            .finish()
    }
}

impl Tokenizer {
    /// Loads `tokenizer.json` (required) and `tokenizer_config.json`
    /// (optional) from `dir`. EOS ids are the tokenizer's own; use
    /// [`Tokenizer::from_model_dir`] for MLX-LM's full EOS set.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(LmError::ModelNotFound(format!("model folder {} does not exist", dir.display())));
        }
        let path = dir.join("tokenizer.json");
        let bytes = std::fs::read(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => LmError::ModelNotFound(format!("{} not found", path.display())),
            _ => LmError::InvalidWeights(format!("could not read {}: {e}", path.display())),
        })?;
        let config = TokenizerConfig::load(dir)?;
        let origin = if dir.join("chat_template.jinja").is_file() { dir.join("chat_template.jinja") } else { dir.join("tokenizer_config.json") };
        Self::from_parts(&bytes, &path, config, dir, origin.display().to_string())
    }

    /// A tokenizer from a `tokenizer.json` (`bytes`, read from `path`, for
    /// messages) and its config; `dir` is what [`Tokenizer::dir`] reports and
    /// `template_origin` names the chat template's source in errors.
    pub fn from_parts(bytes: &[u8], path: &Path, config: TokenizerConfig, dir: &Path, template_origin: String) -> Result<Self> {
        // Only the decoder is needed as JSON; skipping the rest is cheaper
        // than building a full `Value` of a multi-megabyte file.
        #[derive(serde::Deserialize)]
        struct DecoderOnly {
            decoder: Option<serde_json::Value>,
        }
        let peek: DecoderOnly =
            serde_json::from_slice(bytes).map_err(|e| LmError::InvalidWeights(format!("{} is not valid JSON: {e}", path.display())))?;
        let detokenizer_kind = DetokenizerKind::from_decoder(peek.decoder.as_ref());
        let hf = tokenizers::Tokenizer::from_bytes(bytes)
            .map_err(|e| LmError::InvalidWeights(format!("{} is not a valid tokenizer definition: {e}", path.display())))?;

        let token_id = |name: &str| config.special_token(name).and_then(|t| hf.token_to_id(t));
        let bos_token_id = token_id("bos_token");
        let eos_token_id = token_id("eos_token");
        // transformers 5 skips the clean-up for BPE models: it would remove
        // real spaces before punctuation.
        let is_bpe = matches!(hf.get_model(), ModelWrapper::BPE(_));
        let clean_up_spaces = config.clean_up_tokenization_spaces && (!is_bpe || config.clean_up_for_bpe);
        let templates = ChatTemplates::compile(&config.chat_template, template_origin);

        let tokenizer = Tokenizer {
            eos_token_ids: eos_token_id.into_iter().collect(),
            shared: Arc::new(Shared {
                hf,
                dir: dir.to_path_buf(),
                config,
                bos_token_id,
                eos_token_id,
                clean_up_spaces,
                detokenizer_kind,
                templates,
                token_strings: OnceLock::new(),
                spm_bytes: OnceLock::new(),
                cleans_spaces: OnceLock::new(),
            }),
        };
        // Build the detokenizer's table now rather than on the first
        // generated token.
        match detokenizer_kind {
            DetokenizerKind::Bpe => drop(tokenizer.token_strings()),
            DetokenizerKind::Spm { .. } => drop(tokenizer.spm_token_bytes()),
            DetokenizerKind::Naive => {}
        }
        Ok(tokenizer)
    }

    /// Loads the tokenizer of a model folder with MLX-LM's EOS set: the ids
    /// of `config.json` / `generation_config.json` `eos_token_id` plus the
    /// tokenizer's `eos_token`.
    pub fn from_model_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let mut tokenizer = Self::from_dir(dir.as_ref())?;
        tokenizer.add_eos_token_ids(config_eos_token_ids(dir.as_ref())?);
        Ok(tokenizer)
    }

    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    pub fn config(&self) -> &TokenizerConfig {
        &self.shared.config
    }

    /// The underlying Hugging Face tokenizer.
    pub fn hf(&self) -> &tokenizers::Tokenizer {
        &self.shared.hf
    }

    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let encoding =
            self.shared.hf.encode_fast(text, add_special_tokens).map_err(|e| LmError::InvalidArgument(format!("could not encode text: {e}")))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// MLX-LM's rule for raw string prompts (`stream_generate`): add special
    /// tokens unless the tokenizer has a BOS token and the prompt already
    /// starts with it.
    pub fn prompt_adds_special_tokens(&self, prompt: &str) -> bool {
        match self.bos_token() {
            None => true,
            Some(bos) => !prompt.starts_with(bos),
        }
    }

    /// Encodes a raw string prompt with MLX-LM's BOS rule.
    pub fn encode_prompt(&self, prompt: &str) -> Result<Vec<u32>> {
        self.encode(prompt, self.prompt_adds_special_tokens(prompt))
    }

    /// transformers' `decode(ids)`: special tokens kept, clean-up as the
    /// config says. Unknown ids decode to nothing.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.decode_with(ids, false)
    }

    pub fn decode_with(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        let text = self.shared.hf.decode(ids, skip_special_tokens).map_err(|e| LmError::InvalidArgument(format!("could not decode ids: {e}")))?;
        Ok(if self.shared.clean_up_spaces { clean_up_tokenization(&text) } else { text })
    }

    /// `len(tokenizer)`: every id that decodes, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.shared.hf.get_vocab_size(true)
    }

    /// transformers' `tokenizer.vocab_size`: the model vocabulary without
    /// added tokens.
    pub fn base_vocab_size(&self) -> usize {
        self.shared.hf.get_vocab_size(false)
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.shared.hf.token_to_id(token)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.shared.hf.id_to_token(id)
    }

    pub fn bos_token(&self) -> Option<&str> {
        self.shared.config.special_token("bos_token")
    }

    pub fn bos_token_id(&self) -> Option<u32> {
        self.shared.bos_token_id
    }

    pub fn eos_token(&self) -> Option<&str> {
        self.shared.config.special_token("eos_token")
    }

    pub fn eos_token_id(&self) -> Option<u32> {
        self.shared.eos_token_id
    }

    /// Ids that end generation, ascending.
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos_token_ids
    }

    pub fn is_eos(&self, id: u32) -> bool {
        self.eos_token_ids.binary_search(&id).is_ok()
    }

    pub fn add_eos_token_ids(&mut self, ids: impl IntoIterator<Item = u32>) {
        self.eos_token_ids.extend(ids);
        self.eos_token_ids.sort_unstable();
        self.eos_token_ids.dedup();
    }

    /// MLX-LM's `add_eos_token`: an id given as text or a token string.
    pub fn add_eos_token(&mut self, token: &str) -> Result<()> {
        let id = match token.parse::<u32>() {
            Ok(id) => id,
            Err(_) => self.token_to_id(token).ok_or_else(|| LmError::InvalidArgument(format!("'{token}' is not a token for this tokenizer")))?,
        };
        self.add_eos_token_ids([id]);
        Ok(())
    }

    /// The named special tokens that are set, as the template sees them.
    pub fn special_tokens(&self) -> &[(&'static str, String)] {
        &self.shared.config.special_tokens
    }

    pub fn has_chat_template(&self) -> bool {
        !self.shared.templates.is_empty()
    }

    /// transformers' `apply_chat_template(messages, tools=tools,
    /// add_generation_prompt=..., enable_thinking=..., tokenize=False)`.
    /// Messages are JSON objects (`role`, `content`, and whatever else the
    /// template reads, such as `tool_calls` or `reasoning_content`).
    pub fn apply_chat_template(
        &self,
        messages: &[serde_json::Value],
        add_generation_prompt: bool,
        enable_thinking: Option<bool>,
        tools: Option<Vec<serde_json::Value>>,
    ) -> Result<String> {
        let options = ChatTemplateOptions { add_generation_prompt, enable_thinking, tools, extra: Default::default() };
        self.apply_chat_template_with(messages, &options)
    }

    pub fn apply_chat_template_with(&self, messages: &[serde_json::Value], options: &ChatTemplateOptions) -> Result<String> {
        self.shared.templates.render(messages, options, self.special_tokens())
    }

    /// Reasoning markers (`<think>`, `</think>` for Qwen3) by MLX-LM's rule.
    pub fn thinking_markers(&self) -> Option<(&'static str, &'static str)> {
        thinking::infer_thinking(|t| self.shared.hf.token_to_id(t).is_some())
    }

    /// MLX-LM renders chat prompts with `enable_thinking=has_thinking` when
    /// the caller leaves it unset; transformers passes nothing. Qwen3's
    /// template treats unset and `true` alike.
    pub fn has_thinking(&self) -> bool {
        self.thinking_markers().is_some()
    }

    /// A fresh streaming detokenizer (MLX-LM's choice of algorithm).
    pub fn detokenizer(&self) -> StreamingDetokenizer {
        StreamingDetokenizer::new(self)
    }

    pub fn detokenizer_kind(&self) -> DetokenizerKind {
        self.shared.detokenizer_kind
    }

    /// `convert_ids_to_tokens(range(len(tokenizer)))`; holes become "".
    fn token_strings(&self) -> Arc<Vec<String>> {
        self.shared
            .token_strings
            .get_or_init(|| {
                // Same result as `id_to_token` per id (added tokens win over
                // the model vocabulary), in half the time.
                let hf = &self.shared.hf;
                let mut table = vec![String::new(); hf.get_vocab_size(true)];
                for (token, id) in hf.get_vocab(false) {
                    if let Some(slot) = table.get_mut(id as usize) {
                        *slot = token;
                    }
                }
                for (id, added) in hf.get_added_tokens_decoder() {
                    if let Some(slot) = table.get_mut(id as usize) {
                        slot.clone_from(&added.content);
                    }
                }
                Arc::new(table)
            })
            .clone()
    }

    fn spm_token_bytes(&self) -> Arc<Vec<Vec<u8>>> {
        self.shared.spm_bytes.get_or_init(|| Arc::new(detok_spm::byte_table(&self.token_strings()))).clone()
    }

    /// MLX-LM's probe: does decode() remove the space in "a ,b"?
    fn decode_cleans_spaces(&self) -> bool {
        *self.shared.cleans_spaces.get_or_init(|| {
            let ids = self.encode("a ,b", false).unwrap_or_default();
            !self.decode(&ids).unwrap_or_default().contains(" ,")
        })
    }
}

/// transformers' `clean_up_tokenization`.
fn clean_up_tokenization(text: &str) -> String {
    text.replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
}

#[cfg(test)]
mod tests;
