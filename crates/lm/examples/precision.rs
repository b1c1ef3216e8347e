//! How close `precision: 'fast'` stays to exact on a model: the model loaded
//! both ways steps through the same tokens; at every position the two
//! next-token distributions are compared (top-1 agreement and
//! KL(exact || fast)). The tokens are the exact model's own text, sampled at
//! temperature 0.8 with a fixed seed after each prompt, so the positions are
//! those a user's generation meets. Then each prompt with its text is run
//! again as one prompt (prefill) on both sides, where fast mode's many-row
//! kernel runs, and the distributions are compared at every position of it
//! (`prefill` in the output).
//!
//! `cargo run --release -p lm --example precision -- MODEL_DIR [TOKENS_PER_PROMPT]`
//! prints one JSON object; `npm run bench:llama` (`--quality-only` for this
//! alone) runs it and writes its "Fast precision quality" section of
//! `benchmark/RESULTS-llama.md`.
use std::path::PathBuf;

use lm::models::{load_with_progress, LanguageModel, LoadOptions, Precision};
use lm::tokenizer::Tokenizer;
use mlx::{Array, Dtype};

const PROMPTS: [&str; 5] = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how vaccines train the immune system, in simple terms.",
    "What are the main differences between Python and JavaScript?",
    "Give me a recipe for a vegetable soup and explain each step.",
    "Summarize the causes and consequences of the French Revolution.",
];

/// Natural-log probabilities of one position's logits, in f64.
fn log_softmax(v: &[f32]) -> Vec<f64> {
    let max = v.iter().fold(f32::MIN, |a, &b| a.max(b)) as f64;
    let lse = v.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln() + max;
    v.iter().map(|&x| x as f64 - lse).collect()
}

fn logits_f32(logits: &Array) -> Vec<f32> {
    logits.astype(Dtype::Float32).and_then(|a| a.to_vec()).expect("logits")
}

/// Top-1 agreement and KL(exact || fast) over positions.
#[derive(Default)]
struct Stats {
    agree: usize,
    kls: Vec<f64>,
}

impl Stats {
    fn push(&mut self, exact: &[f64], fast: &[f64]) {
        self.agree += (argmax(exact) == argmax(fast)) as usize;
        self.kls.push(exact.iter().zip(fast).map(|(&a, &b)| a.exp() * (a - b)).sum::<f64>().max(0.0));
    }

    fn json(&self) -> serde_json::Value {
        let n = self.kls.len();
        let mut sorted = self.kls.clone();
        sorted.sort_by(f64::total_cmp);
        let q = |p: f64| sorted[((n - 1) as f64 * p).round() as usize];
        serde_json::json!({
            "positions": n,
            "top1Agreement": self.agree as f64 / n as f64,
            "meanKl": self.kls.iter().sum::<f64>() / n as f64,
            "medianKl": q(0.5),
            "p99Kl": q(0.99),
            "maxKl": sorted[n - 1],
        })
    }
}

fn argmax(v: &[f64]) -> usize {
    v.iter().enumerate().fold(0, |best, (i, &x)| if x > v[best] { i } else { best })
}

/// xorshift64*: a fixed, dependency-free stream for the sampled text.
struct Rng(u64);
impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545F4914F6CDD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn sample(logp: &[f64], temperature: f64, rng: &mut Rng) -> u32 {
    let w: Vec<f64> = logp.iter().map(|&l| (l / temperature).exp()).collect();
    let mut r = rng.next_f64() * w.iter().sum::<f64>();
    for (i, &x) in w.iter().enumerate() {
        r -= x;
        if r <= 0.0 {
            return i as u32;
        }
    }
    (w.len() - 1) as u32
}

fn step(model: &dyn LanguageModel, ids: &[u32], caches: &mut [Box<dyn lm::cache::Cache>]) -> Vec<f64> {
    let input = Array::from_slice(ids, &[1, ids.len() as i32]).expect("ids");
    let logits = model.forward(&input, caches, true).expect("forward");
    log_softmax(&logits_f32(&logits))
}

/// Every position's log-probabilities for `ids` run as one prompt.
fn prefill(model: &dyn LanguageModel, ids: &[u32]) -> Vec<Vec<f64>> {
    let input = Array::from_slice(ids, &[1, ids.len() as i32]).expect("ids");
    let logits = logits_f32(&model.forward(&input, &mut model.new_caches(), false).expect("forward"));
    logits.chunks_exact(logits.len() / ids.len()).map(log_softmax).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(args.get(1).expect("usage: precision MODEL_DIR [TOKENS_PER_PROMPT]"));
    let per_prompt: usize = args.get(2).map_or(256, |n| n.parse().expect("TOKENS_PER_PROMPT"));
    let load = |precision| load_with_progress(&dir, &LoadOptions { precision: Some(precision), ..Default::default() }, &mut |_| {}).expect("load");
    let (exact, fast) = (load(Precision::Exact), load(Precision::Fast));
    let tok = Tokenizer::from_model_dir(&dir).expect("tokenizer");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut decode, mut prompts) = (Stats::default(), Stats::default());
    for prompt in PROMPTS {
        let msg = serde_json::json!({ "role": "user", "content": prompt });
        let text = tok.apply_chat_template(&[msg], true, None, None).expect("template");
        let mut ids = tok.encode_prompt(&text).expect("encode");
        let (mut ce, mut cf) = (exact.new_caches(), fast.new_caches());
        let (mut pe, mut pf) = (step(exact.as_ref(), &ids, &mut ce), step(fast.as_ref(), &ids, &mut cf));
        for _ in 0..per_prompt {
            decode.push(&pe, &pf);
            let next = sample(&pe, 0.8, &mut rng);
            ids.push(next);
            pe = step(exact.as_ref(), &[next], &mut ce);
            pf = step(fast.as_ref(), &[next], &mut cf);
        }
        // The prompt and its text as one prompt, every position compared.
        for (e, f) in prefill(exact.as_ref(), &ids).iter().zip(&prefill(fast.as_ref(), &ids)) {
            prompts.push(e, f);
        }
    }
    let mut out = decode.json();
    out["prefill"] = prompts.json();
    // The kernels the comparison is between (the others run alike on both sides): the
    // matmuls, and fast mode's decode attention.
    let compared = |k: &str| k.starts_with("qmm") || k == "decodeAttention";
    out["kernels"] =
        serde_json::json!(mlx::info::cpu_kernels().into_iter().filter(|(k, _)| compared(k)).collect::<std::collections::BTreeMap<_, _>>());
    println!("{out}");
}
