//! Text generation as users see it: token ids in, streamed text out, on the
//! one loop of `generate`. EOS ids end it (never part of the result), the
//! streaming detokenizer turns ids into text without broken UTF-8, stop
//! strings cut it (never emitted), and the finish reason says why it ended.
//! The bindings, a chat and a server all drive this; it knows no JavaScript.
use crate::error::Result;
use crate::generate::{generate, per_second, GenerateParams, Next, TokenLogprobs};
use crate::models::LanguageModel;
use crate::prompt_cache::PromptCache;
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
    /// One per entry of `tokens`, when asked for.
    pub logprobs: Option<Vec<TokenLogprobs>>,
    pub finish_reason: FinishReason,
    pub prompt_tokens: usize,
    /// Prompt tokens served from the cache.
    pub cached_tokens: usize,
    /// Decode steps, a final EOS included (MLX-LM's `generation_tokens`).
    pub generation_tokens: usize,
    pub prompt_tps: f64,
    pub generation_tps: f64,
    pub peak_memory: usize,
}

/// A piece of streamed text: the id that completed it and, when asked for,
/// that id's log-probabilities (none on the last piece, which only flushes).
pub struct Chunk<'a> {
    pub text: &'a str,
    pub token: u32,
    pub logprobs: Option<&'a TokenLogprobs>,
}

/// Generates from `prompt`, the whole input, reusing what `cache` holds of it
/// (a fresh cache: nothing) and leaving the prompt and the reply in it.
/// `should_abort` is asked before each token is taken; `on_chunk` hears each
/// piece of text, and the concatenation of the pieces is `text`.
pub fn generate_text(
    model: &dyn LanguageModel,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    options: &TextOptions,
    cache: &mut PromptCache,
    should_abort: &dyn Fn() -> bool,
    on_chunk: &mut dyn FnMut(Chunk),
) -> Result<TextOutcome> {
    if should_abort() {
        // Aborted before it started: no work at all.
        return Ok(TextOutcome {
            text: String::new(),
            tokens: Vec::new(),
            logprobs: options.params.logprobs.map(|_| Vec::new()),
            finish_reason: FinishReason::Abort,
            prompt_tokens: prompt.len(),
            cached_tokens: 0,
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
    let mut emit = |piece: String, token: u32, logprobs: Option<&TokenLogprobs>, text: &mut String| {
        text.push_str(&piece);
        on_chunk(Chunk { text: &piece, token, logprobs });
    };
    let mut finish = FinishReason::Length;
    let mut tokens = Vec::new();
    let mut logprobs = Vec::new();
    if prompt.is_empty() {
        return Err(crate::LmError::InvalidArgument("the prompt is empty: at least one token is needed".into()));
    }
    let cached = cache.reuse(prompt);
    let stats = generate(model, &prompt[cached..], &options.params, cache, |s| {
        if should_abort() {
            finish = FinishReason::Abort;
            return Ok(Next::Stop);
        }
        let t = s.token;
        last_token = t;
        if tokenizer.is_eos(t) {
            finish = FinishReason::Stop;
            return Ok(Next::Stop);
        }
        tokens.push(t);
        if let Some(lp) = s.logprobs {
            logprobs.push(lp);
        }
        let lp = logprobs.last().filter(|_| options.params.logprobs.is_some());
        match stop.feed(&detok.add_token(t)) {
            Feed::Emit(s) => emit(s, t, lp, &mut text),
            Feed::Stopped(s) => {
                emit(s, t, lp, &mut text);
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
            emit(rest, last_token, None, &mut text);
        }
    }
    Ok(TextOutcome {
        text,
        tokens,
        logprobs: options.params.logprobs.map(|_| logprobs),
        finish_reason: finish,
        prompt_tokens: prompt.len(),
        cached_tokens: cached,
        generation_tokens: stats.generated,
        prompt_tps: per_second(stats.prompt_tokens, stats.prompt_seconds),
        generation_tps: per_second(stats.generated, stats.generation_seconds),
        peak_memory: stats.peak_memory,
    })
}
