//! `cargo run --release -p sampling-bench` (or `npm run bench -- --sampling`):
//! each sampling step measured in isolation over a full 151,936-token vocabulary,
//! with warm-up, mean and standard deviation over repeated runs, and a check that
//! every variant gives the baseline's result.
use std::time::Instant;

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

fn history(n: usize) -> Vec<i32> {
    (0..n).map(|i| ((i * 7919 + 13) % VOCAB as usize) as i32).collect()
}

fn repetition_penalty() {
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

fn top_p() {
    println!("\n### Top-p 0.9 mask\n\n| method | mean us | sd us |\n|---|---|---|");
    let x = logits();
    let lp = x.subtract(&x.logsumexp(&[], true).unwrap()).unwrap();
    lp.eval().unwrap();
    let opts = SamplingOptions { temperature: 1.0, top_p: 0.9, ..Default::default() };
    let sampler = Sampler::new(&opts).unwrap();
    // The kept set through the whole sampler is checked by drawing with the same key.
    let device = || {
        let mut keys = KeySequence::new(3).unwrap();
        sampler.sample(&lp, &mut keys).unwrap()
    };
    let want = device().item::<u32>().unwrap();
    // Host baseline: copy, sort, cumulative mass in MLX-LM's order, threshold, copy back.
    let host = || {
        let v = lp.to_vec::<f32>().unwrap();
        let mut s = v.clone();
        s.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let probs: Vec<f32> = s.iter().map(|l| l.exp()).collect();
        let mut above = vec![0f32; probs.len()];
        let mut acc = 0f32;
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
    let draw = |a: &Array| {
        let mut keys = KeySequence::new(3).unwrap();
        random::categorical(a, -1, Some(&keys.next().unwrap())).unwrap().item::<u32>().unwrap()
    };
    assert_eq!(draw(&host()), want, "host top-p must keep the same set as the device chain");
    stats("host sort (copy out, sort, mask, copy back)", || {
        host().eval().unwrap();
    });
    stats("device full sort (MLX-LM's method, mlx-node today)", || {
        device().eval().unwrap();
    });
    stats("device sort alone", || {
        lp.sort(-1).unwrap().eval().unwrap();
    });
    stats("device argpartition for top-2048 (a partial method's first step)", || {
        lp.argpartition(VOCAB - 2048, -1).unwrap().eval().unwrap();
    });
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
    println!("MLX {} on {}, BLAS {}; vocabulary {VOCAB}, {RUNS} runs after {WARMUP} warm-up", mlx::info::version(), mlx::info::device().unwrap(), mlx::info::blas_name().unwrap());
    repetition_penalty();
    top_p();
    argmax();
}
