//! T3 generation on `lm`'s one loop, with mlx-audio's `T3.inference`
//! semantics: classifier-free guidance over a batch of two, repetition
//! penalty over every token so far (start-of-speech included), and
//! mlx-audio's sampler on the raw guided logits.
use lm::cache::LayerCaches;
use lm::generate::{run_loop, Decoding, GenerationStats, LogitsSource, Next, TokenSampler};
use lm::sampling::{LogitsProcessors, Sampler, SamplingOptions};
use mlx::random::KeySequence;
use mlx::{Array, Result as MlxResult};

use super::turbo_sampler::TurboSampler;
use super::{T3Cond, T3};
use crate::{Result, TtsError};

/// What `T3::generate` takes; defaults are Resemble AI's.
#[derive(Debug, Clone)]
pub struct T3Options {
    pub temperature: f32,
    /// Classifier-free guidance weight; 0 turns guidance (and the second batch row) off.
    pub cfg_weight: f32,
    /// Emotion exaggeration; replaces the voice's own `emotion_adv`, as mlx-audio does.
    pub exaggeration: f32,
    pub repetition_penalty: f32,
    pub min_p: f32,
    pub top_p: f32,
    /// The most speech tokens to sample (the stop token included).
    pub max_tokens: usize,
}

impl Default for T3Options {
    fn default() -> Self {
        T3Options { temperature: 0.8, cfg_weight: 0.5, exaggeration: 0.5, repetition_penalty: 1.2, min_p: 0.05, top_p: 1.0, max_tokens: 1000 }
    }
}

impl T3Options {
    /// The one check of these options (the bindings only convert JS values):
    /// INVALID_ARGUMENT naming the option. `max_tokens`: T3's speech positions.
    pub fn validate(&self, max_tokens: usize) -> Result<()> {
        let bad = |name: &str, v: f32, want: &str| TtsError::InvalidArgument(format!("option {name} must be {want}, got {v}"));
        let o = self;
        let at_least_0 = |name: &str, v: f32| if v.is_finite() && v >= 0.0 { Ok(()) } else { Err(bad(name, v, "a finite number >= 0")) };
        at_least_0("temperature", o.temperature)?;
        at_least_0("cfgWeight", o.cfg_weight)?;
        at_least_0("exaggeration", o.exaggeration)?;
        if !(o.repetition_penalty.is_finite() && o.repetition_penalty > 0.0) {
            return Err(bad("repetitionPenalty", o.repetition_penalty, "a finite number > 0"));
        }
        if !(0.0..=1.0).contains(&o.min_p) {
            return Err(bad("minP", o.min_p, "between 0 and 1"));
        }
        if !(0.0..=1.0).contains(&o.top_p) {
            return Err(bad("topP", o.top_p, "between 0 and 1"));
        }
        if o.max_tokens == 0 {
            return Err(TtsError::InvalidArgument("option maxTokens must be at least 1".into()));
        }
        if o.max_tokens > max_tokens {
            return Err(TtsError::InvalidArgument(format!("maxTokens must be at most {max_tokens} (T3's speech positions), got {}", o.max_tokens)));
        }
        Ok(())
    }

    fn guided(&self) -> bool {
        self.cfg_weight > 0.0
    }

    /// mlx-audio's `ChatterboxTurboTTS.generate` defaults (its `max_tokens` of 800 counts
    /// the tokens after the first, so 801 here). Turbo ignores `cfg_weight`, `exaggeration`
    /// and `min_p`, as mlx-audio does.
    pub fn turbo() -> T3Options {
        T3Options { top_p: 0.95, max_tokens: 801, ..T3Options::default() }
    }
}

/// Turbo's top-k (mlx-audio's `generate` default; not an option here).
const TURBO_TOP_K: usize = 1000;

/// The f64 a user most likely typed for `v`: its shortest decimal form.
/// Options reach us as f32, while mlx-audio computes `1 - top_p` on the
/// Python float; `0.9f32 as f64` would give a different f32 threshold.
pub(super) fn typed(v: f32) -> f64 {
    v.to_string().parse().unwrap_or(v as f64)
}

/// mlx-audio's sampler: its vendored `apply_top_p` is the older MLX-LM one,
/// which exponentiates the logits as given (here raw, not normalised) and
/// keeps tokens whose ascending cumulative mass exceeds `1 - top_p`; min-p,
/// temperature and the categorical draw are `lm`'s.
struct T3Sampler {
    /// `1 - top_p` when top-p filtering is on.
    top_p_floor: Option<f64>,
    inner: Sampler,
}

impl TokenSampler for T3Sampler {
    fn sample(&self, logits: &Array, keys: &mut KeySequence) -> MlxResult<Array> {
        match self.top_p_floor {
            None => self.inner.sample(logits, keys),
            Some(floor) => {
                let probs = logits.exp()?;
                let order = logits.argsort(-1)?;
                let mass = probs.take_along_axis(&order, -1)?.cumsum(-1, false, true)?;
                let mass = Array::zeros(&probs.shape(), probs.dtype())?.put_along_axis(&order, &mass, -1)?;
                let keep = mass.greater_scalar(floor)?;
                let filtered = Array::where_(&keep, logits, &logits.scalar_like(f64::NEG_INFINITY)?)?;
                self.inner.sample(&filtered, keys)
            }
        }
    }
}

/// The model side of T3's loop: one full-prompt prefill, then one speech
/// token at a time (duplicated over the guidance batch).
struct T3Steps<'a> {
    t3: &'a T3,
    caches: LayerCaches,
    prompt: Option<Array>,
    cfg_weight: Option<f32>,
    /// Speech position of the next token fed (the prompt's start token is at 0).
    position: i32,
}

impl T3Steps<'_> {
    fn logits(&mut self, embeds: Array) -> MlxResult<Array> {
        let logits = self.t3.speech_logits(embeds, &mut self.caches)?;
        match self.cfg_weight {
            // cond + w * (cond - uncond)
            Some(w) => {
                let cond = logits.slice_axis(0, 0, 1)?;
                let uncond = logits.slice_axis(0, 1, 2)?;
                cond.add(&cond.subtract(&uncond)?.multiply_scalar(w as f64)?)
            }
            None => Ok(logits),
        }
    }
}

impl LogitsSource for T3Steps<'_> {
    fn prefill(&mut self) -> lm::error::Result<Array> {
        let prompt = self.prompt.take().ok_or_else(|| TtsError::Mlx("T3 prefill ran twice".into()))?;
        Ok(self.logits(prompt)?)
    }

    fn step(&mut self, token: &Array) -> MlxResult<Array> {
        let mut e = self.t3.speech_embedding(token, self.position)?;
        self.position += 1;
        if self.cfg_weight.is_some() {
            e = Array::concatenate(&[&e, &e], 0)?;
        }
        self.logits(e)
    }
}

impl T3 {
    fn steps(&self, cond: &T3Cond, text: &[u32], opts: &T3Options) -> Result<T3Steps<'_>> {
        opts.validate(self.cfg.max_speech_tokens)?;
        let guided = opts.guided() && !self.turbo();
        let prompt = self.prompt_embeddings(cond, text, opts.exaggeration, guided)?;
        if let Some(positions) = self.positions() {
            // GPT-2's positions hold the prompt and every token fed back (all but the last).
            let need = prompt.dim(1) as usize + opts.max_tokens - 1;
            if need > positions as usize {
                return Err(TtsError::InvalidArgument(format!(
                    "the prompt ({} positions) and maxTokens {} need {need} positions, Turbo's T3 holds {positions}: lower maxTokens or split the text",
                    prompt.dim(1),
                    opts.max_tokens
                )));
            }
        }
        Ok(T3Steps { t3: self, caches: self.new_caches(), prompt: Some(prompt), cfg_weight: guided.then_some(opts.cfg_weight), position: 1 })
    }

    /// The guided logits `[1, vocab]` for the first speech token, before any
    /// processing: for checks against mlx-audio.
    pub fn first_logits(&self, cond: &T3Cond, text: &[u32], opts: &T3Options) -> Result<Array> {
        self.steps(cond, text, opts)?.prefill()
    }

    /// Samples speech tokens for `text` (ids already wrapped in the start and
    /// stop text tokens) until the stop-speech token or `max_tokens`.
    /// Returns what mlx-audio's `T3.inference` does: the start-speech token,
    /// then every sampled id (the stop token included when sampled).
    /// `on_token` sees each sampled id and may stop early; draws come from
    /// `keys` in mlx-audio's order (one per sampled token unless greedy).
    /// With the ids, the loop's timings and the prompt's length in positions
    /// (conditioning, text and start-speech tokens).
    pub fn generate(
        &self,
        cond: &T3Cond,
        text: &[u32],
        opts: &T3Options,
        keys: &mut KeySequence,
        mut on_token: impl FnMut(u32) -> Result<Next>,
    ) -> Result<(Vec<u32>, GenerationStats)> {
        let start = self.cfg.start_speech_token;
        let stop = self.cfg.stop_speech_token;
        let mut steps = self.steps(cond, text, opts)?;
        let prompt_tokens = steps.prompt.as_ref().map_or(0, |p| p.dim(1) as usize);
        let mut out = vec![start];
        if opts.max_tokens == 0 {
            return Ok((out, GenerationStats { prompt_tokens, ..GenerationStats::default() }));
        }
        let turbo = self.turbo();
        let sampling = SamplingOptions {
            temperature: opts.temperature,
            min_p: if turbo { 0.0 } else { opts.min_p },
            repetition_penalty: Some(opts.repetition_penalty),
            // Every token generated so far counts, as mlx-audio sets it.
            repetition_context_size: opts.max_tokens.min(i32::MAX as usize) as i32,
            ..SamplingOptions::default()
        };
        let top_p_on = !sampling.is_greedy() && opts.top_p > 0.0 && opts.top_p < 1.0;
        let chatterbox_sampler;
        let turbo_sampler;
        let sampler: &dyn TokenSampler = if turbo {
            turbo_sampler = TurboSampler { temperature: opts.temperature, top_k: TURBO_TOP_K, top_p: opts.top_p };
            &turbo_sampler
        } else {
            chatterbox_sampler = T3Sampler {
                top_p_floor: top_p_on.then(|| 1.0 - typed(opts.top_p)),
                // MLX's own (compiled) ops, not lm's CPU kernels: over a vocabulary
                // of 8,194 the kernels gained nothing measurable (40 fixture tokens,
                // 294-300 ms either way). The heap corruption at exit once blamed on
                // them was dispose() racing the process's exit (f88e041); 26 runs
                // of the speech tests with the kernels on were clean since.
                inner: Sampler::with_kernels(&sampling, false)?,
            };
            &chatterbox_sampler
        };
        let processors = LogitsProcessors::new(&sampling)?;
        let decoding = Decoding {
            processors: &processors,
            sampler,
            // Turbo's penalty covers the sampled tokens only (not the start token).
            history: if turbo { None } else { Some(Array::from_slice(&[start], &[1])?) },
            normalize: false,
            max_tokens: opts.max_tokens,
            logprobs: None,
        };
        let mut stats = run_loop(&mut steps, decoding, keys, |s| {
            let t = s.token;
            out.push(t);
            let verdict = on_token(t)?;
            Ok(if t == stop { Next::Stop } else { verdict })
        })?;
        stats.prompt_tokens = prompt_tokens;
        Ok((out, stats))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every id `T3Sampler` draws from `logits` over a few keys, at temperature 1.
    fn drawn(logits: &[f32], top_p: f32) -> Vec<u32> {
        let sampling = SamplingOptions { temperature: 1.0, ..SamplingOptions::default() };
        let sampler = T3Sampler { top_p_floor: Some(1.0 - typed(top_p)), inner: Sampler::new(&sampling).unwrap() };
        let x = Array::from_slice(logits, &[1, logits.len() as i32]).unwrap();
        let mut keys = KeySequence::new(3).unwrap();
        let mut ids: Vec<u32> = (0..64).map(|_| sampler.sample(&x, &mut keys).unwrap().item::<u32>().unwrap()).collect();
        ids.sort();
        ids.dedup();
        ids
    }

    // Expected sets from mlx-audio's `apply_top_p` on the same logits. On raw
    // logits whose exponentials sum below one, it keeps far less than a
    // normalised top-p would (which keeps ids 1, 2 and 3 in the first case).
    #[test]
    fn top_p_is_mlx_audio_s_on_raw_logits() {
        assert_eq!(drawn(&[-5.0, -4.0, -3.0, -2.0], 0.9), vec![3]);
        assert_eq!(drawn(&[1.0, 2.0, 0.5, -6.0], 0.9), vec![0, 1, 2]);
    }

    #[test]
    fn typed_recovers_the_decimal() {
        assert_eq!(typed(0.9), 0.9);
        assert_eq!((1.0 - typed(0.9)) as f32, (1.0f64 - 0.9) as f32);
    }
}
