//! `npm run bench -- --profile` (`sampling-bench --profile <model dir> [tokens]`):
//! where a decode step's time goes. Each configuration runs twice:
//! - serialized: every stage is evaluated on its own, so its time is its own:
//!   building the forward graph, running it, building the sampling graph
//!   (processors, log-probabilities, sampler), running it, reading the id;
//! - pipelined, as the generation loop runs: the next step is queued before
//!   the current id is read; the time per token and the parts of it the host
//!   spends blocked queuing the next step (MLX's eval waits while about 100
//!   ops are in flight) and reading the id are reported.
//!
//! Same prompt ids, options and seed for every row; sampling with MLX's ops and
//! with the CPU kernels both (on the CPU backend).
use std::path::Path;
use std::time::Instant;

use lm::cache::Cache;
use lm::models::{LanguageModel, LoadOptions, Precision};
use lm::sampling::{LogitsProcessors, Sampler, SamplingOptions};
use mlx::random::KeySequence;
use mlx::Array;

const PROMPT_TOKENS: usize = 91;

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

struct Step<'a> {
    model: &'a dyn LanguageModel,
    procs: LogitsProcessors,
    sampler: Sampler,
    history: Option<Array>,
}

impl Step<'_> {
    fn forward(&self, ids: &Array, caches: &mut [Box<dyn Cache>]) -> Array {
        let logits = self.model.forward(&ids.reshape(&[1, -1]).unwrap(), caches, true).unwrap();
        let v = logits.dim(-1);
        logits.reshape(&[1, v]).unwrap()
    }

    fn sample(&mut self, logits: Array, fed: Option<&Array>, keys: &mut KeySequence) -> Array {
        let mut logits = logits;
        if !self.procs.is_empty() {
            if let Some(t) = fed {
                self.history = Some(match &self.history {
                    Some(h) => Array::concatenate(&[h, t], 0).unwrap(),
                    None => t.clone(),
                });
            }
            if let Some(h) = &self.history {
                logits = self.procs.apply(h, logits).unwrap();
            }
        }
        let lp = self.sampler.logprobs(&logits).unwrap();
        self.sampler.sample(&lp, keys).unwrap()
    }
}

/// Prefill all but the last prompt id (caches only), as the generation loop does.
fn prefill(step: &Step, prompt: &Array, caches: &mut [Box<dyn Cache>]) -> Array {
    let n = prompt.dim(0);
    step.forward(&prompt.slice_axis(0, 0, n - 1).unwrap(), caches);
    let state: Vec<&Array> = caches.iter().flat_map(|c| c.state()).collect();
    mlx::eval(&state).unwrap();
    prompt.slice_axis(0, n - 1, n).unwrap()
}

fn run(model: &dyn LanguageModel, o: &SamplingOptions, kernels: bool, tokens: usize) -> [f64; 8] {
    let vocab = model.config().vocab_size as usize;
    let ids: Vec<i32> = (0..PROMPT_TOKENS).map(|i| ((i * 7919 + 13) % vocab) as i32).collect();
    let prompt = Array::from_slice(&ids, &[ids.len() as i32]).unwrap();
    // A fresh run up to the first token (evaluated): step, caches, keys, token.
    let start_run = || {
        let mut step = Step {
            model,
            procs: LogitsProcessors::new(o).unwrap(),
            sampler: Sampler::with_kernels(o, kernels).unwrap(),
            history: Some(prompt.clone()),
        };
        let mut caches = model.new_caches();
        let mut keys = KeySequence::new(42).unwrap();
        let last = prefill(&step, &prompt, &mut caches);
        let logits = step.forward(&last, &mut caches);
        let y = step.sample(logits, None, &mut keys);
        y.item::<u32>().unwrap();
        (step, caches, keys, y)
    };

    // Serialized.
    let (mut step, mut caches, mut keys, mut y) = start_run();
    let mut t = [0f64; 5];
    for _ in 0..tokens {
        let s = Instant::now();
        let logits = step.forward(&y, &mut caches);
        t[0] += ms(s);
        let s = Instant::now();
        logits.eval().unwrap();
        t[1] += ms(s);
        let s = Instant::now();
        let next = step.sample(logits, Some(&y), &mut keys);
        t[2] += ms(s);
        let s = Instant::now();
        next.eval().unwrap();
        t[3] += ms(s);
        let s = Instant::now();
        next.item::<u32>().unwrap();
        t[4] += ms(s);
        y = next;
    }

    // Pipelined, as `run_loop`.
    let (mut step, mut caches, mut keys, mut y) = start_run();
    let (mut queue, mut wait, start) = (0f64, 0f64, Instant::now());
    for _ in 0..tokens {
        let logits = step.forward(&y, &mut caches);
        let next = step.sample(logits, Some(&y), &mut keys);
        let s = Instant::now();
        mlx::async_eval(&[&next]).unwrap();
        queue += ms(s);
        let s = Instant::now();
        y.item::<u32>().unwrap();
        wait += ms(s);
        y = next;
    }
    y.item::<u32>().unwrap();
    let total = ms(start);
    let n = tokens as f64;
    [t[0] / n, t[1] / n, t[2] / n, t[3] / n, t[4] / n, total / n, queue / n, wait / n]
}

/// `greedy_only`: the greedy row with the CPU kernels alone.
pub fn main(dir: &Path, tokens: usize, precision: Precision, greedy_only: bool) {
    let options = LoadOptions { precision: Some(precision), ..Default::default() };
    let model = lm::models::load_with_progress(dir, &options, &mut |_| {}).unwrap();
    println!("\n### Decode step profile: {} ({tokens} tokens per row, ms per token, {precision:?} precision)\n", dir.display());
    println!("| configuration | sampling | forward graph | forward run | sampling graph | sampling run | read id | serialized sum | pipelined per token | of it blocked queuing | of it blocked reading |");
    println!("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    let full = SamplingOptions { temperature: 0.7, top_p: 0.9, top_k: 40, min_p: 0.05, repetition_penalty: Some(1.1), ..Default::default() };
    for (name, o) in [("greedy", SamplingOptions::default()), ("full sampling", full)] {
        // The kernels run on the CPU stream only; on a GPU there is one row per configuration.
        for kernels in [false, true] {
            if (kernels && !mlx::cpu::kernel::cpu_default()) || (greedy_only && (name != "greedy" || !kernels)) {
                continue;
            }
            // Warm-up: on a GPU the first use of each kernel compiles it (over 100 ms).
            run(model.as_ref(), &o, kernels, 2);
            let r = run(model.as_ref(), &o, kernels, tokens);
            let sum: f64 = r[..5].iter().sum();
            let how = if kernels { "CPU kernels (mlx-node)" } else { "MLX ops (as MLX-LM)" };
            println!(
                "| {name} | {how} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {sum:.2} | {:.2} | {:.2} | {:.2} |",
                r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]
            );
        }
    }
}
