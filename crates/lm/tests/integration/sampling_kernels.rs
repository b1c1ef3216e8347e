//! The CPU sampling kernels must give exactly what MLX-LM's device ops give:
//! top-p keeps (the sort path is MLX-LM's computation op for op, and the parity
//! suite checks it against MLX-LM itself). Compared bit for bit over rows
//! shaped like real, flat, peaked, tied, masked and bf16 log-probabilities.
use lm::categorical::categorical;
use lm::top_p::{top_p, top_p_sorted};
use mlx::{random, Array, Dtype};

const VOCAB: i32 = 151_936;

fn logprobs(logits: &Array) -> Array {
    logits.subtract(&logits.logsumexp(&[-1], true).unwrap()).unwrap()
}

fn normal_row(seed: u64, n: i32, scale: f32) -> Array {
    let key = random::key(seed).unwrap();
    random::normal(&[1, n], Dtype::Float32, 0.0, scale, Some(&key)).unwrap()
}

fn assert_same(name: &str, lp: &Array, p: f32) -> usize {
    let fast = top_p(lp, p, true).unwrap();
    let slow = top_p_sorted(lp, p).unwrap();
    let a: Vec<f32> = fast.astype(Dtype::Float32).unwrap().to_vec().unwrap();
    let b: Vec<f32> = slow.astype(Dtype::Float32).unwrap().to_vec().unwrap();
    assert_eq!(a.len(), b.len());
    let diff = a.iter().zip(&b).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
    assert_eq!(diff, 0, "{name}, top_p {p}: {diff} entries differ");
    b.iter().filter(|x| x.is_finite()).count()
}

const PS: [f32; 7] = [0.05, 0.3, 0.5, 0.8, 0.9, 0.95, 0.999];

#[test]
fn same_threshold_as_the_sort_on_many_distributions() {
    assert!(mlx::cpu::kernel::cpu_default(), "these tests run on the CPU backend");
    let mut kept_counts = Vec::new();
    for (i, scale) in [0.3f32, 1.0, 2.0, 4.0, 8.0, 20.0, 60.0].iter().enumerate() {
        let lp = logprobs(&normal_row(100 + i as u64, VOCAB, *scale));
        for p in PS {
            kept_counts.push(assert_same(&format!("normal scale {scale}"), &lp, p));
        }
    }
    // The cases span the nucleus from one token to most of the vocabulary, so
    // both the early cut and the long sum are exercised.
    assert!(kept_counts.contains(&1), "{kept_counts:?}");
    assert!(kept_counts.iter().any(|&k| k > 100_000), "{kept_counts:?}");
}

#[test]
fn ties_masked_entries_bf16_and_batches() {
    // Coarse values: many exact ties at every threshold.
    let coarse = normal_row(7, VOCAB, 3.0).multiply_scalar(4.0).unwrap().round().unwrap().divide_scalar(4.0).unwrap();
    let lp = logprobs(&coarse);
    for p in PS {
        assert_same("ties", &lp, p);
    }
    // Entries already at -inf (as after a logit bias of -inf or another filter).
    let row = normal_row(8, VOCAB, 2.0);
    let mask = random::uniform(0.0, 1.0, &[1, VOCAB], Dtype::Float32, Some(&random::key(9).unwrap())).unwrap().less_scalar(0.5).unwrap();
    let masked = Array::where_(&mask, &row.scalar_like(f64::NEG_INFINITY).unwrap(), &row).unwrap();
    for p in PS {
        assert_same("masked", &logprobs(&masked), p);
    }
    // A bf16 model's log-probabilities.
    let bf = logprobs(&normal_row(10, VOCAB, 3.0).astype(Dtype::Bfloat16).unwrap());
    for p in PS {
        assert_same("bf16", &bf, p);
    }
    // One dominant token, and a small vocabulary.
    let mut peaked: Vec<f32> = vec![0.0; 5000];
    peaked[1234] = 30.0;
    peaked[17] = 27.0;
    let lp = logprobs(&Array::from_slice(&peaked, &[1, 5000]).unwrap());
    for p in PS {
        assert_same("peaked", &lp, p);
    }
    // A batch of two rows (as T3's guidance pair): each row gets its own threshold.
    let two = Array::concatenate(&[&normal_row(11, 4096, 1.0), &normal_row(12, 4096, 6.0)], 0).unwrap();
    for p in PS {
        assert_same("batch", &logprobs(&two), p);
    }
}

#[test]
fn nan_rows_do_not_crash() {
    let mut v = vec![0.5f32; 1000];
    v[3] = f32::NAN;
    let lp = Array::from_slice(&v, &[1, 1000]).unwrap();
    let out = top_p(&lp, 0.9, true).unwrap();
    out.eval().unwrap();
    let all_nan = Array::full(&[1, 64], f64::NAN, Dtype::Float32).unwrap();
    top_p(&all_nan, 0.5, true).unwrap().eval().unwrap();
}

/// The categorical kernel against MLX's `random.categorical` with the same key,
/// of `logits * scale` (MLX-LM's draw at temperature `1 / scale`).
fn assert_same_draws(name: &str, logits: &Array, scale: f64, seeds: std::ops::Range<u64>) {
    let scaled = if scale == 1.0 { logits.clone() } else { logits.multiply_scalar(scale).unwrap() };
    for s in seeds {
        let key = random::key(s).unwrap();
        let fast = categorical(logits, scale, &key, true).unwrap().to_vec::<u32>().unwrap();
        let slow = random::categorical(&scaled, -1, Some(&key)).unwrap().to_vec::<u32>().unwrap();
        assert_eq!(fast, slow, "{name}, scale {scale}, key {s}");
    }
}

#[test]
fn categorical_draws_equal_mlx() {
    // A full row, as with temperature alone: scaled by MLX first, and by the kernel.
    let lp = logprobs(&normal_row(20, VOCAB, 2.0));
    assert_same_draws("flat", &lp.multiply_scalar(1.0 / 0.7).unwrap(), 1.0, 0..40);
    assert_same_draws("flat", &lp, 1.0 / 0.7, 0..40);
    assert_same_draws("flat", &lp, 1.0 / 1.3, 0..20);
    // After top-p / top-k: a few finite entries among -inf, some of them tied.
    for (i, p) in [0.3f32, 0.9, 0.99].iter().enumerate() {
        let lp = logprobs(&normal_row(30 + i as u64, VOCAB, 6.0));
        let kept = top_p(&lp, *p, true).unwrap();
        assert_same_draws("top-p filtered", &kept.multiply_scalar(1.0 / 0.7).unwrap(), 1.0, 0..200);
        assert_same_draws("top-p filtered", &kept, 1.0 / 0.7, 0..200);
    }
    let coarse = normal_row(40, VOCAB, 3.0).multiply_scalar(2.0).unwrap().round().unwrap();
    assert_same_draws("ties", &top_p(&logprobs(&coarse), 0.5, true).unwrap(), 1.0, 0..200);
    assert_same_draws("ties", &top_p(&logprobs(&coarse), 0.5, true).unwrap(), 2.0, 0..100);
    // One token left, an all -inf row, a [vocab] row, a row whose length is not
    // a multiple of eight, NaN and +inf entries, and bf16 logits (the kernel
    // scales float32 only; bf16 rounds the product first, on MLX's side).
    let mut one = vec![f32::NEG_INFINITY; 1000];
    one[321] = -3.0;
    assert_same_draws("one", &Array::from_slice(&one, &[1, 1000]).unwrap(), 1.0 / 0.7, 0..5);
    let none = vec![f32::NEG_INFINITY; 1000];
    assert_same_draws("none", &Array::from_slice(&none, &[1, 1000]).unwrap(), 1.0, 0..5);
    assert_same_draws("1-d", &normal_row(50, 5000, 1.0).reshape(&[5000]).unwrap(), 1.0 / 0.7, 0..20);
    assert_same_draws("odd length", &normal_row(52, 1003, 1.0), 1.0 / 0.7, 0..40);
    let mut odd: Vec<f32> = (0..1003).map(|i| (i as f32 * 0.37).sin() * 5.0).collect();
    odd[1001] = f32::INFINITY;
    odd[7] = f32::INFINITY;
    assert_same_draws("+inf", &Array::from_slice(&odd, &[1, 1003]).unwrap(), 1.0 / 0.7, 0..40);
    odd[500] = f32::NAN;
    assert_same_draws("NaN", &Array::from_slice(&odd, &[1, 1003]).unwrap(), 1.0 / 0.7, 0..5);
    let bf = normal_row(51, VOCAB, 3.0).astype(Dtype::Bfloat16).unwrap();
    assert_same_draws("bf16", &bf, 1.0, 0..20);
    assert_same_draws("bf16", &bf, 1.0 / 0.7, 0..20);
}

/// Whole chains: the kernels against MLX's ops compiled as MLX-LM compiles
/// them, the same token for every key.
#[test]
fn chains_with_kernels_equal_compiled_ops() {
    use lm::sampling::{Sampler, SamplingOptions};
    use mlx::random::KeySequence;
    let base = SamplingOptions { temperature: 0.7, ..Default::default() };
    let configs = [
        base.clone(),
        SamplingOptions { top_p: 0.9, ..base.clone() },
        SamplingOptions { min_p: 0.05, min_tokens_to_keep: 3, ..base.clone() },
        SamplingOptions { top_k: 40, ..base.clone() },
        SamplingOptions { xtc_probability: 0.5, xtc_threshold: 0.05, xtc_special_tokens: vec![5, 9], ..base.clone() },
        SamplingOptions { top_p: 0.9, min_p: 0.05, top_k: 40, ..base.clone() },
        SamplingOptions { temperature: 1.3, top_p: 0.5, top_k: 5, ..base.clone() },
        SamplingOptions { min_p: 0.1, ..base.clone() },
        SamplingOptions { temperature: 0.9, top_p: 0.95, min_p: 0.02, ..base.clone() },
        SamplingOptions { top_p: 0.9, min_p: 0.05, top_k: 40, xtc_probability: 0.5, xtc_threshold: 0.05, ..base.clone() },
    ];
    // The bfloat16 row takes the kernels' other-dtype paths (top-p's cast threshold, min-p's ops).
    let rows = [
        logprobs(&normal_row(60, VOCAB, 2.0)),
        logprobs(&normal_row(61, VOCAB, 8.0)),
        logprobs(&normal_row(62, VOCAB, 4.0)).astype(Dtype::Bfloat16).unwrap(),
    ];
    for (c, o) in configs.iter().enumerate() {
        let (fast, slow) = (Sampler::with_kernels(o, true).unwrap(), Sampler::with_kernels(o, false).unwrap());
        for (r, lp) in rows.iter().enumerate() {
            let (mut k1, mut k2) = (KeySequence::new(5).unwrap(), KeySequence::new(5).unwrap());
            for i in 0..30 {
                let a = fast.sample(lp, &mut k1).unwrap().item::<u32>().unwrap();
                let b = slow.sample(lp, &mut k2).unwrap().item::<u32>().unwrap();
                assert_eq!(a, b, "config {c}, row {r}, draw {i}");
            }
        }
    }
}
