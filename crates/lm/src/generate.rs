//! The one generation loop, for every model (text models and Chatterbox's T3):
//! prefill, then one step ahead of the host through async_eval, one host sync
//! per token. What turns a token into logits and how a token is picked are
//! pluggable (`LogitsSource`, `TokenSampler`); the loop itself is not.
use std::time::Instant;

use mlx::{memory, random, Array, Result as MlxResult};

use crate::cache::Cache;
use crate::error::{LmError, Result};
use crate::models::LanguageModel;
use crate::sampling::{LogitsProcessors, Sampler, SamplingOptions};

#[derive(Debug, Clone)]
pub struct GenerateParams {
    pub max_tokens: usize,
    pub sampling: SamplingOptions,
    pub prefill_step_size: usize,
    pub seed: Option<u64>,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams { max_tokens: 256, sampling: SamplingOptions::default(), prefill_step_size: 2048, seed: None }
    }
}

/// What the caller wants after seeing a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Continue,
    Stop,
}

#[derive(Debug, Clone, Default)]
pub struct GenerationStats {
    pub prompt_tokens: usize,
    /// Tokens handed to the callback.
    pub generated: usize,
    pub prompt_seconds: f64,
    pub generation_seconds: f64,
    pub peak_memory: usize,
}

/// `count` per second over `seconds`, 0 when no time was measured (the
/// `*_tps` figures of a generation's result).
pub fn per_second(count: usize, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// The model side of the loop: feeds what it is given and returns lazy logits
/// `[1, vocab]` for the next token. Nothing here may read a value on the host.
pub trait LogitsSource {
    /// Feeds the whole prompt (the source owns it); may evaluate its caches
    /// along the way, as chunked prefill does.
    fn prefill(&mut self) -> Result<Array>;
    /// Feeds the token just sampled (lazy, shape `[1]`).
    fn step(&mut self, token: &Array) -> MlxResult<Array>;
}

/// Picks the next token (lazy, shape `[1]`) from processed `[1, vocab]` logits.
pub trait TokenSampler {
    fn sample(&self, logits: &Array, keys: &mut random::KeySequence) -> MlxResult<Array>;

    /// `logits - logsumexp(logits)`, when the loop normalizes.
    fn logprobs(&self, logits: &Array) -> MlxResult<Array> {
        logits.subtract(&logits.logsumexp(&[], true)?)
    }
}

impl TokenSampler for Sampler {
    fn sample(&self, logits: &Array, keys: &mut random::KeySequence) -> MlxResult<Array> {
        Sampler::sample(self, logits, keys)
    }

    fn logprobs(&self, logits: &Array) -> MlxResult<Array> {
        Sampler::logprobs(self, logits)
    }
}

/// How tokens are chosen, for one run of `run_loop`.
pub struct Decoding<'a> {
    pub processors: &'a LogitsProcessors,
    pub sampler: &'a dyn TokenSampler,
    /// The token ids the processors see before the first new one (1-d);
    /// ignored when there are no processors.
    pub history: Option<Array>,
    /// Log-softmax the processed logits before sampling, as MLX-LM does.
    /// mlx-audio's T3 samples the raw logits, which changes what top-p keeps.
    pub normalize: bool,
    pub max_tokens: usize,
}

/// Runs `source` until `on_token` says stop or `max_tokens` ids were handed
/// out (at least one is). Stop tokens are the caller's business: it sees
/// every id and returns `Next::Stop`. No step past the last token is computed.
pub fn run_loop(
    source: &mut dyn LogitsSource,
    decoding: Decoding,
    keys: &mut random::KeySequence,
    mut on_token: impl FnMut(u32) -> Result<Next>,
) -> Result<GenerationStats> {
    memory::reset_peak()?;
    let mut stats = GenerationStats::default();
    let t0 = Instant::now();
    let Decoding { processors, sampler, history, normalize, max_tokens } = decoding;
    let mut history = if processors.is_empty() { None } else { history };

    // The processors see each new token appended to the history before they
    // run on the logits it produced.
    let mut pick = |logits: Array, fed: Option<&Array>, keys: &mut random::KeySequence| -> MlxResult<Array> {
        let mut logits = logits;
        if !processors.is_empty() {
            if let Some(t) = fed {
                history = Some(match &history {
                    Some(h) => Array::concatenate(&[h, t], 0)?,
                    None => t.clone(),
                });
            }
            if let Some(h) = &history {
                logits = processors.apply(h, logits)?;
            }
        }
        if normalize {
            logits = sampler.logprobs(&logits)?;
        }
        sampler.sample(&logits, keys)
    };

    let first = source.prefill()?;
    let mut y = pick(first, None, keys)?;
    mlx::async_eval(&[&y])?;
    let mut n = 0usize;
    let mut t_gen = Instant::now();
    loop {
        // The first id is read and handed over before the next step is queued:
        // MLX blocks an eval while about 100 ops are in flight, so queuing a
        // whole decode step first would hold the first token back by most of
        // that step (and a first token that stops would cost a step for nothing).
        let first = n == 0;
        if first {
            let token = y.item::<u32>()?;
            stats.prompt_seconds = t0.elapsed().as_secs_f64();
            t_gen = Instant::now();
            stats.generated += 1;
            if on_token(token)? == Next::Stop {
                break;
            }
        }
        // Then each step is scheduled before waiting on the current one, unless
        // this is the last. If the current token ends the generation, that step
        // is dropped and so are its random draws: whoever continues the sequence
        // (the vocoder after T3) sees it as the reference, which never took that
        // step, leaves it.
        let keys_before = keys.clone();
        let next = if n + 1 < max_tokens {
            let logits = source.step(&y)?;
            Some(pick(logits, Some(&y), keys)?)
        } else {
            None
        };
        if let Some(nx) = &next {
            mlx::async_eval(&[nx])?;
        }
        if !first {
            let token = y.item::<u32>()?;
            stats.generated += 1;
            if on_token(token)? == Next::Stop {
                *keys = keys_before;
                break;
            }
        }
        match next {
            Some(nx) => y = nx,
            None => break,
        }
        n += 1;
        if n.is_multiple_of(256) {
            memory::clear_cache()?;
        }
    }
    stats.generation_seconds = t_gen.elapsed().as_secs_f64();
    stats.peak_memory = memory::stats()?.peak;
    Ok(stats)
}

/// A text model fed token ids: chunked prefill of all but the last prompt
/// token (only the caches are evaluated), then one token at a time.
struct TextSource<'a> {
    model: &'a dyn LanguageModel,
    caches: &'a mut [Box<dyn Cache>],
    prompt: Array,
    prefill_step_size: usize,
}

impl TextSource<'_> {
    fn logits(&mut self, ids: &Array) -> MlxResult<Array> {
        let logits = self.model.forward(&ids.reshape(&[1, -1])?, &mut *self.caches, true)?;
        let v = logits.dim(-1);
        logits.reshape(&[1, v])
    }
}

impl LogitsSource for TextSource<'_> {
    fn prefill(&mut self) -> Result<Array> {
        let len = self.prompt.dim(0) as usize;
        let step_size = self.prefill_step_size.max(1);
        let mut done = 0usize;
        while len - done > 1 {
            let n = (len - done - 1).min(step_size);
            let chunk = self.prompt.slice_axis(0, done as i32, (done + n) as i32)?;
            self.model.forward(&chunk.reshape(&[1, -1])?, &mut *self.caches, true)?;
            let state: Vec<&Array> = self.caches.iter().flat_map(|c| c.state()).collect();
            mlx::eval(&state)?;
            done += n;
            memory::clear_cache()?;
        }
        let rest = self.prompt.slice_axis(0, done as i32, len as i32)?;
        Ok(self.logits(&rest)?)
    }

    fn step(&mut self, token: &Array) -> MlxResult<Array> {
        self.logits(token)
    }
}

/// Runs a text model on `prompt` ids with MLX-LM's semantics; `on_token`
/// sees each sampled id in order and may stop it. EOS handling belongs to
/// the caller (it sees the EOS id and returns Stop). `caches` are the
/// caller's (`model.new_caches()`, or kept from an earlier call, which the
/// prompt then continues); they end holding the prompt and every token fed
/// back (the last sampled id is not fed).
pub fn generate(
    model: &dyn LanguageModel,
    prompt: &[u32],
    params: &GenerateParams,
    caches: &mut [Box<dyn Cache>],
    on_token: impl FnMut(u32) -> Result<Next>,
) -> Result<GenerationStats> {
    if prompt.is_empty() {
        return Err(LmError::InvalidArgument("the prompt is empty: at least one token is needed".into()));
    }
    let vocab = model.config().vocab_size as u32;
    if let Some(&bad) = prompt.iter().find(|&&t| t >= vocab) {
        return Err(LmError::InvalidArgument(format!("token id {bad} is outside the vocabulary (size {vocab})")));
    }
    let processors = LogitsProcessors::new(&params.sampling)?;
    let sampler = Sampler::new(&params.sampling)?;
    // Same seed, same draws in the same order as MLX-LM after mx.random.seed(seed).
    let mut keys = match params.seed {
        Some(seed) => random::KeySequence::new(seed)?,
        None => random::KeySequence::from_time()?,
    };
    let ids: Vec<i32> = prompt.iter().map(|&t| t as i32).collect();
    let all = Array::from_slice(&ids, &[ids.len() as i32])?;
    if caches.len() != model.config().num_hidden_layers as usize {
        return Err(LmError::InvalidArgument(format!("{} caches given for a model of {} layers", caches.len(), model.config().num_hidden_layers)));
    }
    let mut source = TextSource { model, caches, prompt: all.clone(), prefill_step_size: params.prefill_step_size };
    let decoding = Decoding { processors: &processors, sampler: &sampler, history: Some(all), normalize: true, max_tokens: params.max_tokens };
    let mut stats = run_loop(&mut source, decoding, &mut keys, on_token)?;
    stats.prompt_tokens = prompt.len();
    Ok(stats)
}
