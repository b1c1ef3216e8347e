//! Text generation as users see it: token ids in, streamed text out, on the
//! one loop of `generate`. EOS ids end it (never part of the result), the
//! streaming detokenizer turns ids into text without broken UTF-8, stop
//! strings cut it (never emitted), and the finish reason says why it ended.
//! The bindings, a chat and a server all drive this; it knows no JavaScript.
use crate::error::Result;
use crate::generate::{generate, per_second, GenerateParams, Next, Sampled, TokenLogprobs};
use crate::models::LanguageModel;
use crate::options::{bad, Checked};
use crate::prompt_cache::PromptCache;
use crate::stop::{Feed, StopMatcher};
use crate::tokenizer::{StreamingDetokenizer, Tokenizer};

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct TextOptions {
    pub params: GenerateParams,
    /// Stop strings: generation ends at the first, which is not emitted.
    pub stop: Vec<String>,
}

impl TextOptions {
    /// The one range check of these options (see `crate::options`).
    pub fn validate(&self, vocab: u32) -> Checked {
        if let Some(s) = self.stop.iter().find(|s| s.is_empty()) {
            return bad("stop", format!("must hold non-empty strings, got {s:?}"));
        }
        self.params.validate(vocab)
    }
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

/// The text side of one generation, a token at a time: EOS ends it (never
/// part of the result), the streaming detokenizer turns ids into text, stop
/// strings cut it. The solo loop and the batch scheduler both feed it.
pub struct TextState {
    detok: StreamingDetokenizer,
    stop: StopMatcher,
    eos: Vec<u32>,
    text: String,
    tokens: Vec<u32>,
    logprobs: Option<Vec<TokenLogprobs>>,
    last_token: u32,
    finish: FinishReason,
    stopped_by_string: bool,
}

impl TextState {
    pub fn new(tokenizer: &Tokenizer, options: &TextOptions) -> TextState {
        TextState {
            detok: StreamingDetokenizer::new(tokenizer),
            stop: StopMatcher::new(options.stop.clone()),
            eos: tokenizer.eos_token_ids().to_vec(),
            text: String::new(),
            tokens: Vec::new(),
            logprobs: options.params.logprobs.map(|_| Vec::new()),
            last_token: 0,
            finish: FinishReason::Length,
            stopped_by_string: false,
        }
    }

    fn emit(&mut self, piece: String, token: u32, with_logprobs: bool, on_chunk: &mut dyn FnMut(Chunk)) {
        self.text.push_str(&piece);
        let lp = if with_logprobs { self.logprobs.as_ref().and_then(|l| l.last()) } else { None };
        on_chunk(Chunk { text: &piece, token, logprobs: lp });
    }

    /// Takes the next sampled id; `Next::Stop` once the text has ended.
    pub fn take(&mut self, s: Sampled, on_chunk: &mut dyn FnMut(Chunk)) -> Next {
        let t = s.token;
        self.last_token = t;
        if self.eos.contains(&t) {
            self.finish = FinishReason::Stop;
            return Next::Stop;
        }
        self.tokens.push(t);
        if let (Some(all), Some(lp)) = (self.logprobs.as_mut(), s.logprobs) {
            all.push(lp);
        }
        match self.stop.feed(&self.detok.add_token(t)) {
            Feed::Emit(piece) => self.emit(piece, t, true, on_chunk),
            Feed::Stopped(piece) => {
                self.emit(piece, t, true, on_chunk);
                self.finish = FinishReason::Stop;
                self.stopped_by_string = true;
                return Next::Stop;
            }
        }
        Next::Continue
    }

    /// Ends it as aborted (the token that was being taken is dropped).
    pub fn abort(&mut self) {
        self.finish = FinishReason::Abort;
    }

    /// Flushes what the detokenizer and the stop matcher still hold.
    pub fn end(&mut self, on_chunk: &mut dyn FnMut(Chunk)) {
        if self.stopped_by_string {
            return;
        }
        let mut rest = match self.stop.feed(&self.detok.finalize()) {
            Feed::Emit(s) => s,
            Feed::Stopped(s) => {
                self.finish = FinishReason::Stop;
                s
            }
        };
        rest.push_str(&self.stop.flush());
        if !rest.is_empty() {
            let last = self.last_token;
            self.emit(rest, last, false, on_chunk);
        }
    }

    /// The result, with the loop's figures.
    pub fn outcome(self, prompt_tokens: usize, cached_tokens: usize, stats: &crate::generate::GenerationStats) -> TextOutcome {
        TextOutcome {
            text: self.text,
            tokens: self.tokens,
            logprobs: self.logprobs,
            finish_reason: self.finish,
            prompt_tokens,
            cached_tokens,
            generation_tokens: stats.generated,
            prompt_tps: per_second(stats.prompt_tokens, stats.prompt_seconds),
            generation_tps: per_second(stats.generated, stats.generation_seconds),
            peak_memory: stats.peak_memory,
        }
    }
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
    let mut state = TextState::new(tokenizer, options);
    if should_abort() {
        // Aborted before it started: no work at all.
        state.abort();
        return Ok(state.outcome(prompt.len(), 0, &Default::default()));
    }
    if prompt.is_empty() {
        return Err(crate::LmError::InvalidArgument("the prompt is empty: at least one token is needed".into()));
    }
    let cached = cache.reuse(prompt);
    let stats = generate(model, &prompt[cached..], &options.params, cache, |s| {
        if should_abort() {
            state.abort();
            return Ok(Next::Stop);
        }
        Ok(state.take(s, on_chunk))
    })?;
    state.end(on_chunk);
    Ok(state.outcome(prompt.len(), cached, &stats))
}
