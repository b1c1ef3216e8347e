//! Text generation as users see it: token ids in, streamed text out, on the
//! one loop of `generate`. EOS ids end it (never part of the result), the
//! streaming detokenizer turns ids into text without broken UTF-8, stop
//! strings cut it (never emitted), and the finish reason says why it ended.
//! The bindings, a chat and a server all drive this; it knows no JavaScript.
use crate::cache::Cache;
use crate::error::Result;
use crate::generate::{generate, per_second, GenerateParams, Next};
use crate::models::LanguageModel;
use crate::stop::{Feed, StopMatcher};
use crate::tokenizer::{StreamingDetokenizer, Tokenizer};

#[derive(Debug, Clone, Default)]
pub struct TextOptions {
    pub params: GenerateParams,
    /// Stop strings: generation ends at the first, which is not emitted.
    pub stop: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An EOS id or a stop string.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// `should_abort` said so.
    Abort,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
        }
    }
}

#[derive(Debug, Clone)]
pub struct TextOutcome {
    pub text: String,
    /// Generated ids, EOS not included.
    pub tokens: Vec<u32>,
    pub finish_reason: FinishReason,
    pub prompt_tokens: usize,
    /// Decode steps, a final EOS included (MLX-LM's `generation_tokens`).
    pub generation_tokens: usize,
    pub prompt_tps: f64,
    pub generation_tps: f64,
    pub peak_memory: usize,
}

/// Generates from `prompt` ids into `caches` (the caller's: fresh, or kept
/// from an earlier call that this one continues). `should_abort` is asked
/// before each token is taken; `on_chunk` hears each piece of text with the
/// id that completed it, and the concatenation of the pieces is `text`.
pub fn generate_text(
    model: &dyn LanguageModel,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    options: &TextOptions,
    caches: &mut [Box<dyn Cache>],
    should_abort: &dyn Fn() -> bool,
    on_chunk: &mut dyn FnMut(&str, u32),
) -> Result<TextOutcome> {
    if should_abort() {
        // Aborted before it started: no work at all.
        return Ok(TextOutcome {
            text: String::new(),
            tokens: Vec::new(),
            finish_reason: FinishReason::Abort,
            prompt_tokens: prompt.len(),
            generation_tokens: 0,
            prompt_tps: 0.0,
            generation_tps: 0.0,
            peak_memory: 0,
        });
    }
    let mut detok = StreamingDetokenizer::new(tokenizer);
    let mut stop = StopMatcher::new(options.stop.clone());
    let mut stopped_by_string = false;
    let mut last_token = 0u32;
    let mut text = String::new();
    let mut emit = |piece: String, token: u32, text: &mut String| {
        text.push_str(&piece);
        on_chunk(&piece, token);
    };
    let mut finish = FinishReason::Length;
    let mut tokens = Vec::new();
    let stats = generate(model, prompt, &options.params, caches, |t| {
        if should_abort() {
            finish = FinishReason::Abort;
            return Ok(Next::Stop);
        }
        last_token = t;
        if tokenizer.is_eos(t) {
            finish = FinishReason::Stop;
            return Ok(Next::Stop);
        }
        tokens.push(t);
        match stop.feed(&detok.add_token(t)) {
            Feed::Emit(s) => emit(s, t, &mut text),
            Feed::Stopped(s) => {
                emit(s, t, &mut text);
                finish = FinishReason::Stop;
                stopped_by_string = true;
                return Ok(Next::Stop);
            }
        }
        Ok(Next::Continue)
    })?;
    if !stopped_by_string {
        // What the detokenizer and the stop matcher still hold at the end.
        let mut rest = match stop.feed(&detok.finalize()) {
            Feed::Emit(s) => s,
            Feed::Stopped(s) => {
                finish = FinishReason::Stop;
                s
            }
        };
        rest.push_str(&stop.flush());
        if !rest.is_empty() {
            emit(rest, last_token, &mut text);
        }
    }
    Ok(TextOutcome {
        text,
        tokens,
        finish_reason: finish,
        prompt_tokens: prompt.len(),
        generation_tokens: stats.generated,
        prompt_tps: per_second(prompt.len(), stats.prompt_seconds),
        generation_tps: per_second(stats.generated, stats.generation_seconds),
        peak_memory: stats.peak_memory,
    })
}
