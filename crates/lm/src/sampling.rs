//! Logits processors and the sampler chain with MLX-LM 0.32.2's semantics and
//! order, all as device ops: no logits ever reach the host.
use mlx::{random, Array, Compiled, Dtype, Result};

use crate::options::{bad, integer, number, Checked};

/// Options as MLX-LM's `make_sampler` / `make_logits_processors` take them.
/// (Serializable: a split model's leader sends them to the other processes.)
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SamplingOptions {
    pub temperature: f32,
    pub top_p: f32,
    pub min_p: f32,
    pub min_tokens_to_keep: i32,
    pub top_k: i32,
    pub xtc_probability: f32,
    pub xtc_threshold: f32,
    pub xtc_special_tokens: Vec<u32>,
    pub repetition_penalty: Option<f32>,
    pub repetition_context_size: i32,
    pub presence_penalty: Option<f32>,
    pub presence_context_size: i32,
    pub frequency_penalty: Option<f32>,
    pub frequency_context_size: i32,
    pub logit_bias: Vec<(u32, f32)>,
}

impl SamplingOptions {
    /// Temperature 0: the argmax, every filter inert (MLX-LM's rule; the one
    /// place it is decided).
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// The one range check of these options (see `crate::options`);
    /// `vocab`: the model's vocabulary size, which bounds ids and `top_k`.
    pub fn validate(&self, vocab: u32) -> Checked {
        let v = vocab as i128;
        number("temperature", self.temperature, 0.0, 1e6)?;
        number("top_p", self.top_p, 0.0, 1.0)?;
        number("min_p", self.min_p, 0.0, 1.0)?;
        integer("min_tokens_to_keep", self.min_tokens_to_keep.into(), 1, v)?;
        integer("top_k", self.top_k.into(), 0, v - 1)?;
        number("xtc_probability", self.xtc_probability, 0.0, 1.0)?;
        number("xtc_threshold", self.xtc_threshold, 0.0, 0.5)?;
        let penalties = [
            ("repetition_penalty", self.repetition_penalty, 0.0, "repetition_context_size", self.repetition_context_size),
            ("presence_penalty", self.presence_penalty, -1e6, "presence_context_size", self.presence_context_size),
            ("frequency_penalty", self.frequency_penalty, -1e6, "frequency_context_size", self.frequency_context_size),
        ];
        for (name, penalty, lo, context, size) in penalties {
            if let Some(p) = penalty {
                number(name, p, lo, 1e6)?;
            }
            integer(context, size.into(), 1, i32::MAX.into())?;
        }
        for &(id, bias) in &self.logit_bias {
            if id >= vocab {
                return bad("logit_bias", format!("key {id} is not a token id in [0, {vocab})"));
            }
            if !bias.is_finite() {
                return bad("logit_bias", format!("value for token {id} must be a finite number, got {bias}"));
            }
        }
        Ok(())
    }
}

impl Default for SamplingOptions {
    fn default() -> Self {
        SamplingOptions {
            temperature: 0.0,
            top_p: 0.0,
            min_p: 0.0,
            min_tokens_to_keep: 1,
            top_k: 0,
            xtc_probability: 0.0,
            xtc_threshold: 0.1,
            xtc_special_tokens: Vec::new(),
            repetition_penalty: None,
            repetition_context_size: 20,
            presence_penalty: None,
            presence_context_size: 20,
            frequency_penalty: None,
            frequency_context_size: 20,
            logit_bias: Vec::new(),
        }
    }
}

enum Penalty {
    Repetition(f32),
    Presence(f32),
    Frequency(f32),
}

/// The processors MLX-LM would build, in its order: logit bias, repetition,
/// presence, frequency (a penalty of 0 or None is left out, as there).
pub struct LogitsProcessors {
    bias: Option<(Array, Array)>,
    penalties: Vec<(Penalty, i32)>,
}

impl LogitsProcessors {
    pub fn new(o: &SamplingOptions) -> Result<LogitsProcessors> {
        let bias = if o.logit_bias.is_empty() {
            None
        } else {
            let ids: Vec<i32> = o.logit_bias.iter().map(|(t, _)| *t as i32).collect();
            let vals: Vec<f32> = o.logit_bias.iter().map(|(_, v)| *v).collect();
            let n = ids.len() as i32;
            Some((Array::from_slice(&ids, &[n])?, Array::from_slice(&vals, &[n])?))
        };
        let mut penalties = Vec::new();
        let active = |p: Option<f32>| p.filter(|&v| v != 0.0);
        if let Some(p) = active(o.repetition_penalty) {
            penalties.push((Penalty::Repetition(p), o.repetition_context_size));
        }
        if let Some(p) = active(o.presence_penalty) {
            penalties.push((Penalty::Presence(p), o.presence_context_size));
        }
        if let Some(p) = active(o.frequency_penalty) {
            penalties.push((Penalty::Frequency(p), o.frequency_context_size));
        }
        Ok(LogitsProcessors { bias, penalties })
    }

    pub fn is_empty(&self) -> bool {
        self.bias.is_none() && self.penalties.is_empty()
    }

    /// `logits` is `[1, vocab]`; `history` the token ids so far (prompt included).
    pub fn apply(&self, history: &Array, logits: Array) -> Result<Array> {
        let mut logits = logits;
        let dt = logits.dtype();
        if let Some((ids, vals)) = &self.bias {
            logits = add_at(&logits, ids, &vals.astype(dt)?)?;
        }
        let len = history.dim(0);
        if len == 0 {
            return Ok(logits);
        }
        for (penalty, context) in &self.penalties {
            let ctx = if *context > 0 && len > *context { history.slice_axis(0, len - context, len)? } else { history.clone() };
            let idx = ctx.reshape(&[1, -1])?;
            logits = match penalty {
                Penalty::Repetition(p) => {
                    let sel = logits.take_along_axis(&idx, -1)?;
                    let neg = sel.less_scalar(0.0)?;
                    let sel = Array::where_(&neg, &sel.multiply_scalar(*p as f64)?, &sel.divide_scalar(*p as f64)?)?;
                    logits.put_along_axis(&idx, &sel, -1)?
                }
                // `logits[:, t] -= p`: a repeated id is penalised once.
                Penalty::Presence(p) => {
                    let sel = logits.take_along_axis(&idx, -1)?.subtract_scalar(*p as f64)?;
                    logits.put_along_axis(&idx, &sel, -1)?
                }
                // `.at[:, t].subtract(p)`: once per occurrence.
                Penalty::Frequency(p) => {
                    let n = ctx.dim(0);
                    let vals = Array::full(&[n], -(*p as f64), dt)?;
                    add_at(&logits, &ctx, &vals)?
                }
            };
        }
        Ok(logits)
    }
}

/// `logits.at[:, ids].add(vals)` for `[1, vocab]` logits.
fn add_at(logits: &Array, ids: &Array, vals: &Array) -> Result<Array> {
    let n = ids.dim(0);
    logits.scatter_add(&[ids], &vals.reshape(&[n, 1, 1])?, &[1])
}

/// The kernels on the CPU backend, unless `MLX_NODE_SAMPLING_KERNELS=0` asks
/// for MLX's own ops (for the benchmark's before/after rows).
fn use_kernels() -> bool {
    mlx::cpu::kernel::Kernel::Sampling.enabled()
}

type StepFn = Box<dyn Fn(&[&Array]) -> Result<Array> + Send>;

/// One step of MLX-LM's chain (a filter, or the draw). MLX-LM `mx.compile`s
/// each of them, and so do we where MLX's ops run them; on the CPU backend the
/// kernels do the heavy part as one node already and the step runs as it is.
enum Step {
    Plain(StepFn),
    Compiled(Compiled),
}

impl Step {
    fn new(f: StepFn, compile: bool) -> Result<Step> {
        if !compile {
            return Ok(Step::Plain(f));
        }
        let traced = move |ins: &[Array]| {
            let refs: Vec<&Array> = ins.iter().collect();
            Ok(vec![f(&refs)?])
        };
        Ok(Step::Compiled(Compiled::new(traced, false)?))
    }

    fn call(&self, ins: &[&Array]) -> Result<Array> {
        match self {
            Step::Plain(f) => f(ins),
            Step::Compiled(c) => Ok(c.call(ins)?.swap_remove(0)),
        }
    }
}

/// Samples one token id from `[1, vocab]` log-probabilities.
pub struct Sampler {
    /// Log-probabilities through the CPU kernels (same results, without
    /// full-vocabulary sorts and passes).
    kernels: bool,
    /// Filters in MLX-LM's order, each with whether it draws a random key.
    filters: Vec<(Step, bool)>,
    /// Temperature and the categorical draw; None for greedy.
    draw: Option<Step>,
}

impl Sampler {
    pub fn new(o: &SamplingOptions) -> Result<Sampler> {
        Sampler::with_kernels(o, use_kernels())
    }

    /// `kernels` false: MLX's own ops throughout, compiled as MLX-LM compiles
    /// them (the GPU path, and the benchmark's baseline).
    pub fn with_kernels(o: &SamplingOptions, kernels: bool) -> Result<Sampler> {
        let compile = !kernels;
        let mut filters = Vec::new();
        if o.is_greedy() {
            return Ok(Sampler { kernels, filters, draw: None });
        }
        if 0.0 < o.top_p && o.top_p < 1.0 {
            let p = o.top_p;
            filters.push((Step::new(Box::new(move |x| crate::top_p::top_p(x[0], p, kernels)), compile)?, false));
        }
        if o.min_p != 0.0 {
            let (m, keep) = (o.min_p, o.min_tokens_to_keep);
            filters.push((Step::new(Box::new(move |x| crate::min_p::min_p(x[0], m, keep, kernels)), compile)?, false));
        }
        if o.xtc_probability > 0.0 {
            let special = if o.xtc_special_tokens.is_empty() {
                None
            } else {
                let ids: Vec<i32> = o.xtc_special_tokens.iter().map(|&t| t as i32).collect();
                Some(Array::from_slice(&ids, &[ids.len() as i32])?)
            };
            let (prob, threshold) = (o.xtc_probability, o.xtc_threshold);
            let f: StepFn = Box::new(move |x| xtc(x[0], x[1], prob, threshold, special.as_ref()));
            filters.push((Step::new(f, compile)?, true));
        }
        if o.top_k > 0 {
            let k = o.top_k;
            filters.push((Step::new(Box::new(move |x| crate::top_k::top_k(x[0], k, kernels)), compile)?, false));
        }
        let inv_temp = 1.0 / o.temperature as f64;
        let draw: StepFn = Box::new(move |x| crate::categorical::categorical(x[0], inv_temp, x[1], kernels));
        Ok(Sampler { kernels, filters, draw: Some(Step::new(draw, compile)?) })
    }

    /// MLX-LM's `logits - logsumexp(logits)`, the sampler's input.
    pub fn logprobs(&self, logits: &Array) -> Result<Array> {
        let lse = if self.kernels { mlx::cpu::math::logsumexp_last(logits)? } else { logits.logsumexp(&[], true)? };
        logits.subtract(&lse)
    }

    /// Temperature 0 with the CPU kernels on float32 logits: the argmax of
    /// their log-probabilities as one kernel node, the same bits
    /// (`mlx::cpu::greedy`). `None` where `sample(logprobs(..))` runs instead.
    pub fn greedy(&self, logits: &Array) -> Result<Option<Array>> {
        if self.draw.is_some() || !self.kernels {
            return Ok(None);
        }
        mlx::cpu::greedy::greedy_last(logits)
    }

    /// Random draws come from `keys` in MLX-LM's order (XTC's coin, then the categorical).
    pub fn sample(&self, logprobs: &Array, keys: &mut random::KeySequence) -> Result<Array> {
        let Some(draw) = &self.draw else {
            return logprobs.argmax(-1, false);
        };
        let mut x = logprobs.clone();
        for (step, takes_key) in &self.filters {
            x = if *takes_key { step.call(&[&x, &keys.next()?])? } else { step.call(&[&x])? };
        }
        draw.call(&[&x, &keys.next()?])
    }
}

fn xtc(logits: &Array, key: &Array, probability: f32, threshold: f32, special: Option<&Array>) -> Result<Array> {
    let probs = logits.softmax(&[-1], false)?;
    let inf = probs.scalar_like(f64::INFINITY)?;
    let above = probs.greater_scalar(threshold as f64)?;
    let floor = Array::where_(&above, &probs, &inf)?.min(&[-1], true)?;
    let mut mask = probs.greater(&floor)?;
    if let Some(ids) = special {
        let n = ids.dim(0);
        let f = Array::full(&[n, 1, 1], 0.0, Dtype::Bool)?;
        mask = mask.scatter(&[ids], &f, &[1])?;
    }
    let u = random::uniform(0.0, 1.0, &[], Dtype::Float32, Some(key))?;
    let neg_inf = logits.scalar_like(f64::NEG_INFINITY)?;
    let filtered = Array::where_(&mask, &neg_inf, logits)?;
    Array::where_(&u.greater_scalar(probability as f64)?, logits, &filtered)
}
