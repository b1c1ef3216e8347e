//! The CPU quantized-matmul kernel against MLX's own op on the same inputs:
//! 4-bit weights, group 64, at a Qwen3-0.6B layer's and LM head's shapes, in
//! float32 and bfloat16. Each kernel output is checked bit for bit against
//! MLX's before either is timed.
use std::time::Instant;

use mlx::quant::{quantize, quantized_matmul, quantized_matmul_mlx};
use mlx::{random, Array, Dtype};

/// Mean and standard deviation in ms over `runs` runs after one warm-up
/// (MLX's bfloat16 op takes over a second per LM head call here).
pub(crate) fn time_ms(runs: usize, f: impl Fn() -> Array) -> (f64, f64) {
    f().eval().unwrap();
    let t: Vec<f64> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            f().eval().unwrap();
            s.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let mean = t.iter().sum::<f64>() / runs as f64;
    let sd = (t.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (runs - 1).max(1) as f64).sqrt();
    (mean, sd)
}

pub fn main() {
    println!("\n### Quantized matmul (4 bits, group 64)\n");
    println!("| shape (rows x in -> out) | dtype | MLX's op, ms (sd) | mlx-node kernel, ms (sd) | speed-up | same bits |");
    println!("|---|---|--:|--:|--:|:-:|");
    let shapes = [(1, 1024, 3072, "decode, MLP up"), (1, 1024, 151_936, "decode, LM head"), (91, 1024, 3072, "91-token prefill, MLP up")];
    for dtype in [Dtype::Float32, Dtype::Bfloat16] {
        for &(m, k, n, what) in &shapes {
            let key = |s: u64| random::key(s).unwrap();
            let x = random::normal(&[m, k], Dtype::Float32, 0.0, 1.0, Some(&key(1))).unwrap().astype(dtype).unwrap();
            let w = random::normal(&[n, k], Dtype::Float32, 0.0, 0.05, Some(&key(2))).unwrap().astype(dtype).unwrap();
            let (wq, s, b) = quantize(&w, 64, 4).unwrap();
            mlx::eval(&[&x, &wq, &s, &b]).unwrap();
            let ours = || quantized_matmul(&x, &wq, &s, Some(&b), true, 64, 4).unwrap();
            let theirs = || quantized_matmul_mlx(&x, &wq, &s, Some(&b), true, 64, 4).unwrap();
            let bits = |a: Array| a.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            let same = bits(ours()) == bits(theirs());
            assert!(same, "{what} {dtype:?}: the kernel's output differs from MLX's op");
            // MLX's bfloat16 op is slow enough that a few runs say enough.
            let runs = if dtype == Dtype::Bfloat16 || m > 1 { 5 } else { 20 };
            let (tm, sm) = time_ms(runs, theirs);
            let (to, so) = time_ms(runs.max(20), ours);
            println!(
                "| {m} x {k} -> {n} ({what}) | {} | {tm:.2} ({sm:.2}) | {to:.2} ({so:.2}) | {:.1}x | {} |",
                dtype.name(),
                tm / to,
                if same { "yes" } else { "no" }
            );
        }
    }
}
