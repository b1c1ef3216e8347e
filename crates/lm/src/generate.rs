//! The one generation loop, for every model (text models and Chatterbox's T3):
//! prefill, then one step ahead of the host through async_eval, one host sync
//! per token. What turns a token into logits and how a token is picked are
//! pluggable (`LogitsSource`, `TokenSampler`); the loop itself is not.
use std::time::Instant;

use mlx::{memory, random, Array, Result as MlxResult};

use crate::cache::{maybe_quantize, Cache, CacheOptions};
use crate::error::{LmError, Result};
use crate::models::LanguageModel;
use crate::options::{integer, Checked};
use crate::prompt_cache::PromptCache;
use crate::sampling::{LogitsProcessors, Sampler, SamplingOptions};

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct GenerateParams {
    pub max_tokens: usize,
    pub sampling: SamplingOptions,
    pub prefill_step_size: usize,
    pub seed: Option<u64>,
    /// Report each token's log-probability and this many top alternatives
    /// (0..=20, MLX-LM's `logprobs`: after the processors, before the sampler).
    pub logprobs: Option<usize>,
}

/// The most `top_logprobs` a request may ask for (as OpenAI's API).
pub const MAX_TOP_LOGPROBS: usize = 20;

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams { max_tokens: 256, sampling: SamplingOptions::default(), prefill_step_size: 2048, seed: None, logprobs: None }
    }
}

impl GenerateParams {
    /// The one range check of these parameters (see `crate::options`).
    pub fn validate(&self, vocab: u32) -> Checked {
        let sizes = i32::MAX.into();
        integer("max_tokens", self.max_tokens as i128, 1, sizes)?;
        check_prefill_step_size(self.prefill_step_size)?;
        if let Some(seed) = self.seed {
            integer("seed", seed.into(), 0, u32::MAX.into())?;
        }
        if let Some(k) = self.logprobs {
            integer("top_logprobs", k as i128, 0, MAX_TOP_LOGPROBS as i128)?;
        }
        self.sampling.validate(vocab)
    }
}

/// The prompt chunk size's range (also for `prefill`, which takes it alone).
pub fn check_prefill_step_size(n: usize) -> Checked {
    integer("prefill_step_size", n as i128, 1, i32::MAX.into())
}

/// A sampled id and, when asked for, its log-probability and the top ones.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    pub token: u32,
    pub logprobs: Option<TokenLogprobs>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    pub logprob: f32,
    /// Highest first (ties: lower id first).
    pub top: Vec<(u32, f32)>,
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

    /// `sample(logprobs(logits))` as one node where that is the argmax and a
    /// CPU kernel may give it (`mlx::cpu::greedy`); `None` otherwise.
    fn greedy(&self, _logits: &Array) -> MlxResult<Option<Array>> {
        Ok(None)
    }
}

impl TokenSampler for Sampler {
    fn sample(&self, logits: &Array, keys: &mut random::KeySequence) -> MlxResult<Array> {
        Sampler::sample(self, logits, keys)
    }

    fn logprobs(&self, logits: &Array) -> MlxResult<Array> {
        Sampler::logprobs(self, logits)
    }

    fn greedy(&self, logits: &Array) -> MlxResult<Option<Array>> {
        Sampler::greedy(self, logits)
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
    /// Read each token's log-probability and this many top ones (needs `normalize`).
    pub logprobs: Option<usize>,
}

/// The lazy arrays behind a `TokenLogprobs`: the chosen id's value, and the
/// ids and values of the top `k`.
pub struct LazyLogprobs {
    chosen: Array,
    top: Option<(Array, Array)>,
}

impl LazyLogprobs {
    fn new(logprobs: &Array, token: &Array, k: usize) -> MlxResult<LazyLogprobs> {
        let chosen = logprobs.take_along_axis(&token.reshape(&[1, 1])?, -1)?;
        let top = if k > 0 {
            let v = logprobs.dim(-1);
            let k = (k as i32).min(v);
            let ids = logprobs.negative()?.argpartition(k - 1, -1)?.slice_axis(1, 0, k)?;
            let values = logprobs.take_along_axis(&ids, -1)?;
            Some((ids, values))
        } else {
            None
        };
        Ok(LazyLogprobs { chosen, top })
    }

    fn arrays(&self) -> Vec<&Array> {
        let mut v = vec![&self.chosen];
        if let Some((i, x)) = &self.top {
            v.push(i);
            v.push(x);
        }
        v
    }

    fn read(&self) -> MlxResult<TokenLogprobs> {
        let logprob = self.chosen.astype(mlx::Dtype::Float32)?.item::<f32>()?;
        let mut top = Vec::new();
        if let Some((ids, values)) = &self.top {
            let ids = ids.astype(mlx::Dtype::Uint32)?.to_vec::<u32>()?;
            let values = values.astype(mlx::Dtype::Float32)?.to_vec::<f32>()?;
            top = ids.into_iter().zip(values).collect();
            top.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        }
        Ok(TokenLogprobs { logprob, top })
    }
}

/// Turns a step's logits into the next token: the processors (seeing each new
/// token appended to the history first), MLX-LM's log-softmax, the sampler, and
/// the log-probabilities asked for. Lazy: nothing is read on the host.
pub struct Picker<'a> {
    processors: &'a LogitsProcessors,
    sampler: &'a dyn TokenSampler,
    history: Option<Array>,
    normalize: bool,
    logprobs: Option<usize>,
}

impl<'a> Picker<'a> {
    pub fn new(decoding: Decoding<'a>) -> Picker<'a> {
        let Decoding { processors, sampler, history, normalize, logprobs, .. } = decoding;
        let history = if processors.is_empty() { None } else { history };
        Picker { processors, sampler, history, normalize, logprobs }
    }

    /// A picker over borrowed parts, continuing `history` (see `into_history`).
    pub fn from_parts(
        processors: &'a LogitsProcessors,
        sampler: &'a dyn TokenSampler,
        history: Option<Array>,
        logprobs: Option<usize>,
    ) -> Picker<'a> {
        let history = if processors.is_empty() { None } else { history };
        Picker { processors, sampler, history, normalize: true, logprobs }
    }

    /// The history as it stands, for the next `from_parts`.
    pub fn into_history(self) -> Option<Array> {
        self.history
    }

    /// `fed`: the token just fed to the model (None for the prompt's logits).
    pub fn pick(&mut self, logits: Array, fed: Option<&Array>, keys: &mut random::KeySequence) -> MlxResult<(Array, Option<LazyLogprobs>)> {
        let mut logits = logits;
        if !self.processors.is_empty() {
            if let Some(t) = fed {
                self.history = Some(match &self.history {
                    Some(h) => Array::concatenate(&[h, t], 0)?,
                    None => t.clone(),
                });
            }
            if let Some(h) = &self.history {
                logits = self.processors.apply(h, logits)?;
            }
        }
        if self.normalize && self.logprobs.is_none() {
            if let Some(y) = self.sampler.greedy(&logits)? {
                return Ok((y, None));
            }
        }
        if self.normalize {
            logits = self.sampler.logprobs(&logits)?;
        }
        let y = self.sampler.sample(&logits, keys)?;
        let lp = match self.logprobs {
            Some(k) => Some(LazyLogprobs::new(&logits, &y, k)?),
            None => None,
        };
        Ok((y, lp))
    }
}

/// Queues the evaluation of a picked token (and its log-probabilities).
pub fn queue(y: &Array, lp: &Option<LazyLogprobs>) -> MlxResult<()> {
    queue_all(&[(y, lp)])
}

/// Starts computing several picks at once (a batch step's), in one hand-off.
pub fn queue_all(picks: &[(&Array, &Option<LazyLogprobs>)]) -> MlxResult<()> {
    let mut all = Vec::new();
    for (y, lp) in picks {
        all.push(*y);
        if let Some(l) = lp {
            all.extend(l.arrays());
        }
    }
    mlx::async_eval(&all)
}

/// Reads a picked token (waiting for it).
pub fn read(y: &Array, lp: &Option<LazyLogprobs>) -> MlxResult<Sampled> {
    Ok(Sampled { token: y.item::<u32>()?, logprobs: lp.as_ref().map(LazyLogprobs::read).transpose()? })
}

/// Runs `source` until `on_token` says stop or `max_tokens` ids were handed
/// out (at least one is). Stop tokens are the caller's business: it sees
/// every id and returns `Next::Stop`. No step past the last token is computed.
pub fn run_loop(
    source: &mut dyn LogitsSource,
    decoding: Decoding,
    keys: &mut random::KeySequence,
    mut on_token: impl FnMut(Sampled) -> Result<Next>,
) -> Result<GenerationStats> {
    memory::reset_peak()?;
    let mut stats = GenerationStats::default();
    let t0 = Instant::now();
    let max_tokens = decoding.max_tokens;
    let mut picker = Picker::new(decoding);
    let first = source.prefill()?;
    let (mut y, mut lp) = picker.pick(first, None, keys)?;
    queue(&y, &lp)?;
    let mut n = 0usize;
    let mut t_gen = Instant::now();
    loop {
        // The first id is read and handed over before the next step is queued:
        // MLX blocks an eval while about 100 ops are in flight, so queuing a
        // whole decode step first would hold the first token back by most of
        // that step (and a first token that stops would cost a step for nothing).
        let first = n == 0;
        if first {
            let sampled = read(&y, &lp)?;
            stats.prompt_seconds = t0.elapsed().as_secs_f64();
            t_gen = Instant::now();
            stats.generated += 1;
            if on_token(sampled)? == Next::Stop {
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
            Some(picker.pick(logits, Some(&y), keys)?)
        } else {
            None
        };
        if let Some((nx, nlp)) = &next {
            queue(nx, nlp)?;
        }
        if !first {
            let sampled = read(&y, &lp)?;
            stats.generated += 1;
            if on_token(sampled)? == Next::Stop {
                *keys = keys_before;
                break;
            }
        }
        match next {
            Some((nx, nlp)) => {
                y = nx;
                lp = nlp;
            }
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
pub(crate) struct TextSource<'a> {
    model: &'a dyn LanguageModel,
    caches: &'a mut [Box<dyn Cache>],
    options: &'a CacheOptions,
    prompt: Array,
    prefill_step_size: usize,
    /// Asked between prefill chunks.
    should_abort: &'a dyn Fn() -> bool,
}

impl TextSource<'_> {
    /// Runs `ids` `[L]` into the caches (MLX-LM's `_model_call`, then its
    /// `maybe_quantize_kv_cache`); lazy logits of the last position.
    pub(crate) fn feed(&mut self, ids: &Array) -> MlxResult<Array> {
        let logits = self.model.forward(&ids.reshape(&[1, -1])?, &mut *self.caches, true)?;
        maybe_quantize(self.caches, self.options)?;
        let v = logits.dim(-1);
        logits.reshape(&[1, v])
    }

    /// Feeds all but the last `keep` prompt tokens in chunks of at most
    /// `prefill_step_size`, evaluating the caches after each (until
    /// `should_abort` says stop); returns how many were fed.
    fn prefill_chunks(&mut self, keep: usize) -> MlxResult<usize> {
        let len = self.prompt.dim(0) as usize;
        let step_size = self.prefill_step_size.max(1);
        let mut done = 0usize;
        while len - done > keep && !(self.should_abort)() {
            let n = (len - done - keep).min(step_size);
            let chunk = self.prompt.slice_axis(0, done as i32, (done + n) as i32)?;
            self.feed(&chunk)?;
            let state: Vec<&Array> = self.caches.iter().flat_map(|c| c.state()).collect();
            mlx::eval(&state)?;
            done += n;
            memory::clear_cache()?;
        }
        Ok(done)
    }
}

impl LogitsSource for TextSource<'_> {
    fn prefill(&mut self) -> Result<Array> {
        let done = self.prefill_chunks(1)?;
        let len = self.prompt.dim(0);
        let rest = self.prompt.slice_axis(0, done as i32, len)?;
        Ok(self.feed(&rest)?)
    }

    fn step(&mut self, token: &Array) -> MlxResult<Array> {
        self.feed(token)
    }
}

fn check_prompt(model: &dyn LanguageModel, prompt: &[u32]) -> Result<Array> {
    if prompt.is_empty() {
        return Err(LmError::InvalidArgument("the prompt is empty: at least one token is needed".into()));
    }
    let vocab = model.config().vocab_size as u32;
    if let Some(&bad) = prompt.iter().find(|&&t| t >= vocab) {
        return Err(LmError::InvalidArgument(format!("token id {bad} is outside the vocabulary (size {vocab})")));
    }
    let ids: Vec<i32> = prompt.iter().map(|&t| t as i32).collect();
    Ok(Array::from_slice(&ids, &[ids.len() as i32])?)
}

/// Runs `prompt` into `cache` with no generation, as MLX-LM's `cache_prompt`
/// (chunks of `prefill_step_size`, the last token alone). `should_abort` is
/// asked between chunks; an aborted prefill keeps the tokens fed so far and
/// returns false.
pub fn prefill(
    model: &dyn LanguageModel,
    prompt: &[u32],
    prefill_step_size: usize,
    cache: &mut PromptCache,
    should_abort: &dyn Fn() -> bool,
) -> Result<bool> {
    check_prefill_step_size(prefill_step_size)?;
    let all = check_prompt(model, prompt)?;
    cache.check_model(model)?;
    let (layers, options) = cache.parts_mut();
    let mut source = TextSource { model, caches: layers, options, prompt: all, prefill_step_size, should_abort };
    let mut done = source.prefill_chunks(1)?;
    if done + 1 == prompt.len() && !should_abort() {
        let last = source.prompt.slice_axis(0, done as i32, prompt.len() as i32)?;
        source.feed(&last)?;
        let state: Vec<&Array> = source.caches.iter().flat_map(|c| c.state()).collect();
        mlx::eval(&state)?;
        done += 1;
    }
    cache.extend(&prompt[..done]);
    Ok(done == prompt.len())
}

/// Runs a text model with MLX-LM's semantics on `prompt`, which continues what
/// `cache` holds (a fresh cache: from nothing). `on_token` sees each sampled
/// id in order and may stop it; EOS handling belongs to the caller (it sees
/// the EOS id and returns Stop). The logits processors see the cache's known
/// tokens, then the prompt, then each new id (MLX-LM's see only what its call
/// was given: with a cache, its penalties ignore the cached prefix; ours give
/// a request the same answer whether or not its prefix was cached). A kept
/// cache ends holding the prompt and every sampled id, EOS included, as
/// MLX-LM's; a scratch one may miss the last id, which is never fed.
pub fn generate(
    model: &dyn LanguageModel,
    prompt: &[u32],
    params: &GenerateParams,
    cache: &mut PromptCache,
    mut on_token: impl FnMut(Sampled) -> Result<Next>,
) -> Result<GenerationStats> {
    let all = check_prompt(model, prompt)?;
    cache.check_model(model)?;
    params.validate(model.config().vocab_size as u32)?;
    let processors = LogitsProcessors::new(&params.sampling)?;
    let sampler = Sampler::new(&params.sampling)?;
    // Same seed, same draws in the same order as MLX-LM after mx.random.seed(seed).
    let mut keys = match params.seed {
        Some(seed) => random::KeySequence::new(seed)?,
        None => random::KeySequence::from_time()?,
    };
    let history = if processors.is_empty() || cache.tokens().is_empty() {
        all.clone()
    } else {
        let known: Vec<i32> = cache.tokens().iter().chain(prompt).map(|&t| t as i32).collect();
        Array::from_slice(&known, &[known.len() as i32])?
    };
    let before = cache.len();
    let mut sampled = Vec::new();
    let stats = {
        let (layers, options) = cache.parts_mut();
        let mut source =
            TextSource { model, caches: layers, options, prompt: all, prefill_step_size: params.prefill_step_size, should_abort: &|| false };
        let decoding = Decoding {
            processors: &processors,
            sampler: &sampler,
            history: Some(history),
            normalize: true,
            max_tokens: params.max_tokens,
            logprobs: params.logprobs,
        };
        run_loop(&mut source, decoding, &mut keys, |s| {
            sampled.push(s.token);
            on_token(s)
        })
    };
    let mut stats = stats?;
    settle_cache(model, cache, before, prompt, &sampled)?;
    stats.prompt_tokens = prompt.len();
    Ok(stats)
}

/// After a generation: records what `cache` now holds past `before` (the fed
/// prompt, then the ids fed back: all sampled but, maybe, the last). A cache
/// that outlives the call gets the last id too, as MLX-LM's loop feeds every
/// id it hands out: the next request then continues from the same keys and
/// values as MLX-LM's would.
pub(crate) fn settle_cache(model: &dyn LanguageModel, cache: &mut PromptCache, before: usize, prompt: &[u32], sampled: &[u32]) -> Result<()> {
    let held = cache.len().saturating_sub(before);
    let all: Vec<u32> = prompt.iter().chain(sampled).copied().collect();
    cache.extend(&all[..held.min(all.len())]);
    if cache.is_kept() && held < all.len() {
        let rest = &all[held..];
        feed(model, cache, rest)?;
        eval_cache(cache)?;
        cache.extend(rest);
    }
    Ok(())
}

/// Runs `ids` into `cache` in one model call (then MLX-LM's quantization
/// check); lazy logits `[1, vocab]` of the last position.
pub(crate) fn feed(model: &dyn LanguageModel, cache: &mut PromptCache, ids: &[u32]) -> MlxResult<Array> {
    let ids = Array::from_slice(&ids.iter().map(|&t| t as i32).collect::<Vec<_>>(), &[ids.len() as i32])?;
    let (layers, options) = cache.parts_mut();
    let mut source = TextSource { model, caches: layers, options, prompt: ids.clone(), prefill_step_size: 1, should_abort: &|| false };
    source.feed(&ids)
}

/// Evaluates what `cache` holds (after a prefill chunk, as MLX-LM's loop does).
pub(crate) fn eval_cache(cache: &mut PromptCache) -> MlxResult<()> {
    let (layers, _) = cache.parts_mut();
    let state: Vec<&Array> = layers.iter().flat_map(|c| c.state()).collect();
    mlx::eval(&state)
}
