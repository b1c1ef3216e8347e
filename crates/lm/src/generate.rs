//! The one generation loop, for every model family: chunked prefill, then one
//! step ahead of the host through async_eval, one host sync per token.
use std::time::Instant;

use mlx::{memory, random, Array, Result as MlxResult};

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

struct Stepper<'a> {
    model: &'a dyn LanguageModel,
    caches: Vec<crate::cache::KvCache>,
    processors: LogitsProcessors,
    sampler: Sampler,
    /// Every token so far, on device; kept only when a processor reads it.
    history: Option<Array>,
    keys: random::KeySequence,
}

impl Stepper<'_> {
    fn record(&mut self, ids: &Array) -> MlxResult<()> {
        if self.processors.is_empty() {
            return Ok(());
        }
        self.history = Some(match &self.history {
            Some(h) => Array::concatenate(&[h, ids], 0)?,
            None => ids.clone(),
        });
        Ok(())
    }

    /// Feeds `ids` (1-d) and returns the sampled next token (lazy, shape [1]).
    fn step(&mut self, ids: &Array) -> MlxResult<Array> {
        let logits = self.model.forward(&ids.reshape(&[1, -1])?, &mut self.caches, true)?;
        let v = logits.dim(-1);
        let mut logits = logits.reshape(&[1, v])?;
        if !self.processors.is_empty() {
            self.record(ids)?;
            let h = self.history.as_ref().expect("recorded above");
            logits = self.processors.apply(h, logits)?;
        }
        let logprobs = logits.subtract(&logits.logsumexp(&[], true)?)?;
        self.sampler.sample(&logprobs, &mut self.keys)
    }
}

/// Runs generation; `on_token` sees each sampled id in order and may stop it.
/// EOS handling belongs to the caller (it sees the EOS id and returns Stop).
pub fn generate(
    model: &dyn LanguageModel,
    prompt: &[u32],
    params: &GenerateParams,
    mut on_token: impl FnMut(u32) -> Result<Next>,
) -> Result<GenerationStats> {
    if prompt.is_empty() {
        return Err(LmError::InvalidArgument("the prompt is empty: at least one token is needed".into()));
    }
    let vocab = model.config().vocab_size as u32;
    if let Some(&bad) = prompt.iter().find(|&&t| t >= vocab) {
        return Err(LmError::InvalidArgument(format!("token id {bad} is outside the vocabulary (size {vocab})")));
    }
    memory::reset_peak()?;
    let mut stats = GenerationStats { prompt_tokens: prompt.len(), ..Default::default() };
    let t0 = Instant::now();
    let mut s = Stepper {
        model,
        caches: model.new_caches(),
        processors: LogitsProcessors::new(&params.sampling)?,
        sampler: Sampler::new(&params.sampling)?,
        history: None,
        // Same seed, same draws in the same order as MLX-LM after mx.random.seed(seed).
        keys: match params.seed {
            Some(seed) => random::KeySequence::new(seed)?,
            None => random::KeySequence::from_time()?,
        },
    };
    let ids: Vec<i32> = prompt.iter().map(|&t| t as i32).collect();
    let all = Array::from_slice(&ids, &[ids.len() as i32])?;

    // Prefill all but the last prompt token in chunks; only the caches are evaluated.
    let step_size = params.prefill_step_size.max(1);
    let mut done = 0usize;
    while prompt.len() - done > 1 {
        let n = (prompt.len() - done - 1).min(step_size);
        let chunk = all.slice_axis(0, done as i32, (done + n) as i32)?;
        model.forward(&chunk.reshape(&[1, -1])?, &mut s.caches, true)?;
        let state: Vec<&Array> = s.caches.iter().flat_map(|c| c.state()).collect();
        mlx::eval(&state)?;
        s.record(&chunk)?;
        done += n;
        memory::clear_cache()?;
    }

    let rest = all.slice_axis(0, done as i32, prompt.len() as i32)?;
    let mut y = s.step(&rest)?;
    mlx::async_eval(&[&y])?;
    let mut n = 0usize;
    let mut t_gen = Instant::now();
    loop {
        // Schedule the next step before waiting on this one, unless this is the last.
        let next = if n + 1 < params.max_tokens { Some(s.step(&y)?) } else { None };
        if let Some(nx) = &next {
            mlx::async_eval(&[nx])?;
        }
        let token = y.item::<u32>()?;
        if n == 0 {
            stats.prompt_seconds = t0.elapsed().as_secs_f64();
            t_gen = Instant::now();
        }
        stats.generated += 1;
        let verdict = on_token(token)?;
        if verdict == Next::Stop {
            break;
        }
        match next {
            Some(nx) => y = nx,
            None => break,
        }
        n += 1;
        if n % 256 == 0 {
            memory::clear_cache()?;
        }
    }
    stats.generation_seconds = t_gen.elapsed().as_secs_f64();
    stats.peak_memory = memory::stats()?.peak;
    Ok(stats)
}
