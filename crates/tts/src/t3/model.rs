//! T3's weights and its pieces of the forward pass: the prompt embeddings
//! (conditioning, text, start-of-speech), speech-token embeddings with their
//! learned positions, and the speech head on the Llama stack's hidden states.
//! Turbo's T3 is the same around a GPT-2 stack, which adds positions itself:
//! no T3 position tables, the raw reference clip as conditioning, one
//! start-of-speech token, a speech head with a bias.
use std::sync::atomic::{AtomicU64, Ordering};

use lm::cache::{Cache, LayerCaches};
use lm::models::DecoderStack;
use lm::weights::Weights;
use mlx::nn::{Embedding, Linear};
use mlx::{Array, Dtype};

use super::cond_enc::CondEncoder;
use super::gpt2::Gpt2Stack;
use super::{T3Cond, T3Config};
use crate::{Result, TtsError};

/// Every T3 tensor is stored under this prefix.
const PREFIX: &str = "t3";

pub struct T3 {
    pub(super) cfg: T3Config,
    /// Tells this model's cached results apart from another's (`T3Cond::clip`).
    id: u64,
    stack: Backbone,
    cond_enc: CondEncoder,
    text_emb: Embedding,
    speech_emb: Embedding,
    /// The learned text and speech position tables (none in Turbo).
    pos_emb: Option<(Embedding, Embedding)>,
    speech_head: Linear,
}

enum Backbone {
    Llama(DecoderStack),
    Gpt2(Gpt2Stack),
}

impl Backbone {
    fn forward(&self, h: Array, caches: &mut [Box<dyn Cache>], last_only: bool) -> mlx::Result<Array> {
        match self {
            Backbone::Llama(s) => s.forward(h, caches, last_only),
            Backbone::Gpt2(s) => s.forward(h, caches, last_only),
        }
    }
}

fn ids(values: &[u32]) -> mlx::Result<Array> {
    let v: Vec<i32> = values.iter().map(|&t| t as i32).collect();
    Array::from_slice(&v, &[1, v.len() as i32])
}

/// `[1, n]` positions `0..n`, as `LearnedPositionEmbeddings.__call__` looks them up.
fn positions(n: usize) -> mlx::Result<Array> {
    Array::arange(0.0, n as f64, 1.0, Dtype::Int32)?.reshape(&[1, -1])
}

impl T3 {
    /// Takes every `t3.*` tensor out of `w`. The Llama's own token embeddings
    /// and LM head, and the text head (a training loss only), are stored in
    /// mlx-audio checkpoints but never used: they are discarded here.
    pub fn load(w: &mut Weights, cfg: &T3Config) -> Result<T3> {
        let p = PREFIX;
        w.discard(|k| {
            k.starts_with("t3.tfmr.model.embed_tokens.")
                || k.starts_with("t3.tfmr.lm_head.")
                || k.starts_with("t3.text_head.")
                || (k.starts_with("t3.tfmr.") && k.contains("self_attn.rotary_emb.inv_freq"))
        });
        let dims = cfg.hidden_size();
        let stack = match &cfg.gpt2 {
            Some(g) => Backbone::Gpt2(Gpt2Stack::load(w, &format!("{p}.tfmr"), g)?),
            None => Backbone::Llama(DecoderStack::load(w, &format!("{p}.tfmr.model"), &cfg.llama)?),
        };
        let cond_enc = CondEncoder::load(w, &format!("{p}.cond_enc"), cfg)?;
        let text_emb = w.embedding(&format!("{p}.text_emb"), cfg.text_tokens_dict_size as i32, dims)?;
        let speech_emb = w.embedding(&format!("{p}.speech_emb"), cfg.speech_tokens_dict_size as i32, dims)?;
        let pos_emb = match cfg.gpt2 {
            Some(_) => None,
            None => Some((
                w.embedding(&format!("{p}.text_pos_emb.emb"), cfg.text_positions(), dims)?,
                w.embedding(&format!("{p}.speech_pos_emb.emb"), cfg.speech_positions(), dims)?,
            )),
        };
        let speech_head = w.linear(&format!("{p}.speech_head"), dims, cfg.speech_tokens_dict_size as i32, cfg.gpt2.is_some())?;
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Ok(T3 { cfg: cfg.clone(), id, stack, cond_enc, text_emb, speech_emb, pos_emb, speech_head })
    }

    pub fn config(&self) -> &T3Config {
        &self.cfg
    }

    /// Whether this is Turbo's T3 (GPT-2 backbone, mlx-audio's `inference_turbo`).
    pub fn turbo(&self) -> bool {
        self.cfg.gpt2.is_some()
    }

    /// The positions a GPT-2 backbone holds (prompt and speech); None for the Llama one.
    pub(super) fn positions(&self) -> Option<i32> {
        match &self.stack {
            Backbone::Llama(_) => None,
            Backbone::Gpt2(s) => Some(s.positions()),
        }
    }

    pub(super) fn new_caches(&self) -> LayerCaches {
        match &self.stack {
            Backbone::Llama(s) => s.new_caches(),
            Backbone::Gpt2(s) => s.new_caches(),
        }
    }

    /// The conditioning positions `[1, L, dims]` for `cond` with emotion
    /// exaggeration `exaggeration` (mlx-audio's `prepare_conditioning`).
    pub fn cond_embeddings(&self, cond: &T3Cond, exaggeration: f32) -> Result<Array> {
        let n = cond.speaker_emb.size() as i32;
        if n != self.cond_enc.speaker_embed_size() {
            return Err(TtsError::InvalidArgument(format!(
                "voice: t3.speaker_emb has {n} values, this model expects {}",
                self.cond_enc.speaker_embed_size()
            )));
        }
        let clip = match &cond.prompt_speech_tokens {
            None => None,
            Some(tokens) => Some(self.clip_embeddings(cond, tokens)?),
        };
        let emotion = cond.emotion(super::inference::typed(exaggeration))?;
        Ok(self.cond_enc.forward(&cond.speaker_emb, clip.as_ref(), &emotion)?)
    }

    /// The reference clip `tokens` of `cond` through the conditioning encoder's
    /// perceiver, evaluated, from `cond`'s cache when this model made it.
    fn clip_embeddings(&self, cond: &T3Cond, tokens: &[u32]) -> Result<Array> {
        let mut cached = cond.clip.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((id, clip)) = cached.as_ref() {
            if *id == self.id {
                return Ok(clip.clone());
            }
        }
        let vocab = self.cfg.speech_tokens_dict_size;
        if let Some(bad) = tokens.iter().find(|&&t| t >= vocab) {
            return Err(TtsError::InvalidArgument(format!(
                "voice: t3.cond_prompt_speech_tokens holds id {bad}, outside the speech vocabulary ({vocab})"
            )));
        }
        let max = match &self.stack {
            Backbone::Llama(_) => self.cfg.speech_positions(),
            Backbone::Gpt2(s) => s.positions(),
        } as usize;
        if tokens.len() > max {
            return Err(TtsError::InvalidArgument(format!("voice: t3.cond_prompt_speech_tokens has {} tokens, at most {max} fit", tokens.len())));
        }
        let mut emb = self.speech_emb.forward(&ids(tokens)?)?;
        if let Some((_, speech_pos)) = &self.pos_emb {
            emb = emb.add(&speech_pos.forward(&positions(tokens.len())?)?)?;
        }
        let clip = self.cond_enc.clip(&emb)?;
        clip.eval()?;
        *cached = Some((self.id, clip.clone()));
        Ok(clip)
    }

    /// The whole prompt `[B, L, dims]`: conditioning, text with its positions,
    /// then start-of-speech twice (position 0 both times), as mlx-audio's
    /// `_prepare_inference_context`. With `cfg`, `B = 2` and the second row
    /// has its text embeddings zeroed (positions kept): the unconditional half.
    pub fn prompt_embeddings(&self, cond: &T3Cond, text: &[u32], exaggeration: f32, cfg: bool) -> Result<Array> {
        let vocab = self.cfg.text_tokens_dict_size;
        if text.is_empty() {
            return Err(TtsError::InvalidArgument("T3 needs at least one text token".into()));
        }
        if let Some(bad) = text.iter().find(|&&t| t >= vocab) {
            return Err(TtsError::InvalidArgument(format!("text token id {bad} is outside T3's text vocabulary ({vocab})")));
        }
        let max = self.cfg.text_positions() as usize;
        if text.len() > max {
            return Err(TtsError::InvalidArgument(format!(
                "the text is {} tokens long, T3 takes at most {max}: split it into shorter pieces",
                text.len()
            )));
        }
        let b = if cfg { 2 } else { 1 };
        let cond_emb = self.cond_embeddings(cond, exaggeration)?;
        let mut text_emb = self.text_emb.forward(&ids(text)?)?;
        let Some((text_pos, speech_pos)) = &self.pos_emb else {
            // Turbo (`T3.prepare_input_embeds`): [cond | text | start], no guidance.
            let start = self.speech_emb.forward(&ids(&[self.cfg.start_speech_token])?)?;
            return Ok(Array::concatenate(&[&cond_emb, &text_emb, &start], 1)?);
        };
        if cfg {
            text_emb = Array::concatenate(&[&text_emb, &Array::zeros(&text_emb.shape(), text_emb.dtype())?], 0)?;
        }
        let text_emb = text_emb.add(&text_pos.forward(&positions(text.len())?)?)?;
        let start = ids(&[self.cfg.start_speech_token])?;
        let start_emb = self.speech_emb.forward(&start)?.add(&speech_pos.forward(&positions(1)?)?)?;
        let bos = self.speech_embedding(&start, 0)?;
        let widen = |a: &Array| -> mlx::Result<Array> {
            let s = a.shape();
            a.broadcast_to(&[b, s[1], s[2]])
        };
        Ok(Array::concatenate(&[&widen(&cond_emb)?, &text_emb, &widen(&start_emb)?, &widen(&bos)?], 1)?)
    }

    /// `[1, 1, dims]`: the embedding of speech token `token` (any int array of
    /// one element) at speech position `pos`.
    pub(super) fn speech_embedding(&self, token: &Array, pos: i32) -> mlx::Result<Array> {
        let e = self.speech_emb.forward(&token.reshape(&[1, 1])?)?;
        match &self.pos_emb {
            Some((_, speech_pos)) => e.add(&speech_pos.forward(&Array::from_slice(&[pos], &[1, 1])?)?),
            None => Ok(e),
        }
    }

    /// Runs `embeds` through the stack; returns the speech logits `[B, vocab]`
    /// of the last position.
    pub(super) fn speech_logits(&self, embeds: Array, caches: &mut [Box<dyn Cache>]) -> mlx::Result<Array> {
        let h = self.stack.forward(embeds, caches, true)?;
        let logits = self.speech_head.forward(&h)?;
        logits.squeeze(&[1])
    }
}
