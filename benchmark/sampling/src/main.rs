//! `cargo run --release -p sampling-bench` (or `npm run bench -- --sampling`):
//! each sampling step measured in isolation over a full 151,936-token vocabulary,
//! with warm-up, mean and standard deviation over repeated runs, and a check that
//! every variant gives the baseline's result. With `--check-dir DIR` it also writes
//! the baselines' outputs there, for benchmark/sampling_ref.py to check MLX-LM's own
//! functions against before timing them as reference rows.
use std::path::{Path, PathBuf};
use std::time::Instant;

mod attention;
mod gemv;
mod profile;
mod qmm;

use lm::sampling::{LogitsProcessors, Sampler, SamplingOptions};
use mlx::random::KeySequence;
use mlx::{random, Array, Dtype};

const VOCAB: i32 = 151_936;
const RUNS: usize = 30;
const WARMUP: usize = 5;

fn stats(name: &str, mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..WARMUP {
        f();
    }
    let mut t = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let s = Instant::now();
        f();
        t.push(s.elapsed().as_secs_f64() * 1e6);
    }
    let mean = t.iter().sum::<f64>() / t.len() as f64;
    let sd = (t.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (t.len() - 1) as f64).sqrt();
    println!("| {name} | {mean:.1} | {sd:.1} |");
    (mean, sd)
}

fn logits() -> Array {
    let x = random::normal(&[1, VOCAB], Dtype::Float32, 0.0, 2.0, Some(&random::key(7).unwrap())).unwrap();
    x.eval().unwrap();
    x
}

/// Writes a baseline output for sampling_ref.py: raw little-endian float32.
fn save(dir: Option<&Path>, name: &str, a: &Array) {
    if let Some(dir) = dir {
        let bytes: Vec<u8> = a.to_vec::<f32>().unwrap().iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

fn history(n: usize) -> Vec<i32> {
    (0..n).map(|i| ((i * 7919 + 13) % VOCAB as usize) as i32).collect()
}

fn repetition_penalty(check: Option<&Path>) {
    println!("\n### Repetition penalty 1.1 over a 20-token context\n\n| method | mean us | sd us |\n|---|---|---|");
    let x = logits();
    let ctx = history(20);
    let p = 1.1f32;
    let penalise = |v: f32| if v < 0.0 { v * p } else { v / p };
    // Baseline: copy the logits to the host, edit, copy back.
    let host = || {
        let mut v = x.to_vec::<f32>().unwrap();
        for &t in &ctx {
            v[t as usize] = penalise(x.to_vec::<f32>().unwrap()[t as usize]);
        }
        Array::from_slice(&v, &[1, VOCAB]).unwrap()
    };
    let want = host().to_vec::<f32>().unwrap();
    save(check, "repetition-penalty.f32", &host());
    stats("host round trip (copy per lookup, as the seed binding did)", || {
        host().eval().unwrap();
    });
    let host_once = || {
        let mut v = x.to_vec::<f32>().unwrap();
        for &t in &ctx {
            v[t as usize] = penalise(v[t as usize]);
        }
        Array::from_slice(&v, &[1, VOCAB]).unwrap()
    };
    assert_eq!(host_once().to_vec::<f32>().unwrap(), want);
    stats("host round trip (one copy each way)", || {
        host_once().eval().unwrap();
    });
    let loop_update = || {
        let mut y = x.clone();
        for &t in &ctx {
            let cur = y.slice(&[0, t], &[1, t + 1], &[1, 1]).unwrap();
            let neg = cur.less_scalar(0.0).unwrap();
            let new = Array::where_(&neg, &cur.multiply_scalar(p as f64).unwrap(), &cur.divide_scalar(p as f64).unwrap()).unwrap();
            y = y.slice_update(&new, &[0, t], &[1, t + 1], &[1, 1]).unwrap();
        }
        y
    };
    assert_eq!(loop_update().to_vec::<f32>().unwrap(), want);
    stats("device slice update per token id", || {
        loop_update().eval().unwrap();
    });
    let opts = SamplingOptions { repetition_penalty: Some(p), ..Default::default() };
    let procs = LogitsProcessors::new(&opts).unwrap();
    let hist = Array::from_slice(&ctx, &[ctx.len() as i32]).unwrap();
    assert_eq!(procs.apply(&hist, x.clone()).unwrap().to_vec::<f32>().unwrap(), want);
    stats("device gather + scatter (mlx-node)", || {
        procs.apply(&hist, x.clone()).unwrap().eval().unwrap();
    });
}

fn top_p_rows(check: Option<&Path>) {
    // normal(0, 2) logits: top-p 0.9 keeps most of the vocabulary (the long sum);
    // normal(0, 20): a peaked row where a handful of tokens hold the mass.
    for (label, file, scale) in
        [("flat row, normal(0, 2) logits", "top-p-flat.f32", 2.0f32), ("peaked row, normal(0, 20) logits", "top-p-peaked.f32", 20.0)]
    {
        let x = random::normal(&[1, VOCAB], Dtype::Float32, 0.0, scale, Some(&random::key(7).unwrap())).unwrap();
        let lp = x.subtract(&x.logsumexp(&[], true).unwrap()).unwrap();
        lp.eval().unwrap();
        save(check, file, &lm::top_p::top_p_sorted(&lp, 0.9).unwrap());
        top_p(label, &lp);
    }
}

fn bits(a: &Array) -> Vec<u32> {
    a.to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()).collect()
}

fn top_p(label: &str, lp: &Array) {
    let want = bits(&lm::top_p::top_p_sorted(lp, 0.9).unwrap());
    let kept = want.iter().filter(|&&b| f32::from_bits(b).is_finite()).count();
    println!("\n### Top-p 0.9 mask, {label}: keeps {kept} tokens\n\n| method | mean us | sd us |\n|---|---|---|");
    // Host baseline: copy, sort, cumulative mass in MLX-LM's order, threshold, copy back.
    let host = || {
        let v = lp.to_vec::<f32>().unwrap();
        let mut s = v.clone();
        s.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let probs = Array::from_slice(&s, &[1, VOCAB]).unwrap().exp().unwrap().to_vec::<f32>().unwrap();
        let mut acc = 0f32;
        let mut above = vec![0f32; probs.len()];
        for i in (0..probs.len()).rev() {
            above[i] = acc;
            acc += probs[i];
        }
        let total = above[0] + probs[0];
        let dropped = above.iter().filter(|&&m| m >= 0.9 * total).count();
        let thr = s[dropped.min(s.len() - 1)];
        let masked: Vec<f32> = v.iter().map(|&l| if l < thr { f32::NEG_INFINITY } else { l }).collect();
        Array::from_slice(&masked, &[1, VOCAB]).unwrap()
    };
    // Every variant must give the same mask bit for bit before it is timed.
    assert_eq!(bits(&host()), want, "host top-p");
    stats("host sort (copy out, sort, mask, copy back)", || {
        host().eval().unwrap();
    });
    stats("device full sort + cumsum (MLX-LM's method)", || {
        lm::top_p::top_p_sorted(lp, 0.9).unwrap().eval().unwrap();
    });
    assert_eq!(bits(&lm::top_p::top_p(lp, 0.9, true).unwrap()), want, "kernel top-p");
    stats("CPU-stream kernel: drop absorbed terms, radix sort, same sums (mlx-node)", || {
        lm::top_p::top_p(lp, 0.9, true).unwrap().eval().unwrap();
    });
    stats("device sort alone", || {
        lp.sort(-1).unwrap().eval().unwrap();
    });
    stats("device exp alone (the kernel's input)", || {
        lp.exp().unwrap().eval().unwrap();
    });
}

fn chains(check: Option<&Path>) {
    println!("\n### Sampler chains on the flat row (log-probabilities in, token id out)\n\n| method | mean us | sd us |\n|---|---|---|");
    let x = logits();
    let lp = x.subtract(&x.logsumexp(&[], true).unwrap()).unwrap();
    lp.eval().unwrap();
    let base = SamplingOptions { temperature: 0.7, ..Default::default() };
    let configs = [
        ("greedy (argmax)", SamplingOptions::default()),
        ("temperature 0.7 (categorical only)", base.clone()),
        ("+ top-p 0.9", SamplingOptions { top_p: 0.9, ..base.clone() }),
        ("+ min-p 0.05", SamplingOptions { min_p: 0.05, ..base.clone() }),
        ("+ top-k 40", SamplingOptions { top_k: 40, ..base.clone() }),
        ("full: top-p 0.9, min-p 0.05, top-k 40", SamplingOptions { top_p: 0.9, min_p: 0.05, top_k: 40, ..base.clone() }),
    ];
    let mut tokens = Vec::new();
    for (name, o) in configs {
        let draw = |kernels: bool| {
            let sampler = Sampler::with_kernels(&o, kernels).unwrap();
            let lp = lp.clone();
            move || {
                let mut keys = KeySequence::new(3).unwrap();
                sampler.sample(&lp, &mut keys).unwrap().item::<u32>().unwrap()
            }
        };
        let (ops, kernels) = (draw(false), draw(true));
        // The same MLX ops with compilation off process-wide, as mx.disable_compile().
        mlx::transforms::set_compile_enabled(false).unwrap();
        let plain = draw(false);
        mlx::transforms::set_compile_enabled(true).unwrap();
        let token = ops();
        assert_eq!(token, kernels(), "{name}: the kernels must draw MLX's token");
        assert_eq!(token, plain(), "{name}: the uncompiled chain must draw the same token");
        tokens.push(format!("{name:?}: {token}"));
        stats(&format!("{name}: MLX ops, compiled (as MLX-LM)"), || {
            ops();
        });
        if o.temperature != 0.0 {
            stats(&format!("{name}: MLX ops, not compiled"), || {
                plain();
            });
            stats(&format!("{name}: CPU kernels (mlx-node)"), || {
                kernels();
            });
        }
    }
    if let Some(dir) = check {
        // Seed 3, the first draw: `mx.random.seed(3)` then one sampler call in Python.
        std::fs::write(dir.join("chain-tokens.json"), format!("{{{}}}\n", tokens.join(", "))).unwrap();
    }
}

fn argmax() {
    println!("\n### Greedy pick\n\n| method | mean us | sd us |\n|---|---|---|");
    let x = logits();
    let want = x.argmax(-1, false).unwrap().item::<u32>().unwrap();
    stats("copy logits to host + host argmax", || {
        let v = x.to_vec::<f32>().unwrap();
        let mut best = 0usize;
        for (i, &f) in v.iter().enumerate() {
            if f > v[best] {
                best = i;
            }
        }
        assert_eq!(best as u32, want);
    });
    stats("device argmax + read one id", || {
        assert_eq!(x.argmax(-1, false).unwrap().item::<u32>().unwrap(), want);
    });
    stats("device logsumexp (MLX-LM's logprobs step)", || {
        x.logsumexp(&[], true).unwrap().eval().unwrap();
    });
}

fn main() {
    mlx::transforms::use_new_default_stream().unwrap();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--profile") {
        let dir = args.get(2).expect("usage: sampling-bench --profile <model dir> [tokens] [exact|fast] [greedy]");
        let tokens = args.get(3).and_then(|t| t.parse().ok()).unwrap_or(32);
        let precision = if args.get(4).map(String::as_str) == Some("fast") { lm::models::Precision::Fast } else { lm::models::Precision::Exact };
        // `greedy`: only the greedy row with the CPU kernels (a quarter of the time, for repeated rounds).
        let greedy_only = args.get(5).map(String::as_str) == Some("greedy");
        println!("MLX {} on {}, BLAS {}", mlx::info::version(), mlx::info::device().unwrap(), mlx::info::blas_name().unwrap());
        return profile::main(std::path::Path::new(dir), tokens, precision, greedy_only);
    }
    if args.get(1).map(String::as_str) == Some("--attention") {
        return attention::main(args.get(2).map(String::as_str));
    }
    if args.get(1).map(String::as_str) == Some("--gemv") {
        gemv::main();
        return;
    }
    if args.get(1).map(String::as_str) == Some("--qmm") {
        return qmm::main(args.get(2).map(String::as_str));
    }
    println!(
        "MLX {} on {}, BLAS {}; vocabulary {VOCAB}, {RUNS} runs after {WARMUP} warm-up",
        mlx::info::version(),
        mlx::info::device().unwrap(),
        mlx::info::blas_name().unwrap()
    );
    let check: Option<PathBuf> = args.iter().position(|a| a == "--check-dir").map(|i| {
        let dir = PathBuf::from(args.get(i + 1).expect("--check-dir needs a folder"));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    });
    let check = check.as_deref();
    repetition_penalty(check);
    top_p_rows(check);
    chains(check);
    argmax();
    qmm::main(None);
    gemv::main();
}
