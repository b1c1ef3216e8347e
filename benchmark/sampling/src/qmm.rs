//! The CPU quantized-matmul kernels against MLX's own op on the same inputs:
//! 4-bit weights at a Qwen3-0.6B layer's and LM head's shapes (group 64, and
//! group 32 with float16 scales held as float32, as in a model converted from
//! a GGUF Q4_0 file) and SmolLM2-135M's (group 32, its LM head 8-bit), in
//! float32 and bfloat16.
//! The exact kernel's output is checked bit for bit against MLX's before
//! either is timed; the fast one (`precision: 'fast'`, `cpu::qmm_int8`) is
//! timed beside them, with its largest difference from MLX's output relative
//! to the largest output, and so is the fast kernel on weights repacked once
//! as a model's fast layers are at load (`quant::Repacked`), checked for the
//! fast kernel's bits; and the exact kernel on weights repacked as a model's
//! exact layers are (`qmm_exact_repack`), checked for MLX's bits.
use std::time::Instant;

use mlx::quant::{quantize, quantized_matmul, quantized_matmul_mlx, Mode, Precision, Repacked};
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

/// Medians in ms of each of `fs` over `runs` runs, taken in turn (so that a
/// busy machine slows them alike), after one warm-up of each.
fn medians(runs: usize, fs: &[&dyn Fn() -> Array]) -> Vec<f64> {
    let time = |h: &dyn Fn() -> Array| {
        let s = Instant::now();
        h().eval().unwrap();
        s.elapsed().as_secs_f64() * 1e3
    };
    let mut t = vec![Vec::with_capacity(runs); fs.len()];
    fs.iter().for_each(|f| _ = time(f));
    for _ in 0..runs {
        for (f, t) in fs.iter().zip(&mut t) {
            t.push(time(f));
        }
    }
    t.into_iter()
        .map(|mut v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect()
}

/// `filter`: only the shapes whose description contains it (`--qmm prefill`).
pub fn main(filter: Option<&str>) {
    let mut scales_rows = Vec::new();
    println!("\n### Quantized matmul\n");
    println!("| shape (rows x in -> out, bits/group) | dtype | MLX's op, ms (sd) | exact kernel, ms (sd) | speed-up | same bits | fast kernel, ms (sd) | fast / exact | fast's error | repacked, ms (sd) | repacked / fast | exact repacked, ms (sd) | exact repacked / exact |");
    println!("|---|---|--:|--:|--:|:-:|--:|--:|--:|--:|--:|--:|--:|");
    let shapes = [
        (1, 1024, 3072, 4, 64, "decode, MLP up"),
        (1, 1024, 151_936, 4, 64, "decode, LM head"),
        (2, 1024, 3072, 4, 64, "batch of 2, MLP up"),
        (4, 1024, 3072, 4, 64, "batch of 4, MLP up"),
        (8, 1024, 3072, 4, 64, "batch of 8, MLP up"),
        (91, 1024, 3072, 4, 64, "91-token prefill, MLP up"),
        (1, 576, 1536, 4, 32, "SmolLM2 decode, MLP up"),
        (1, 576, 49_152, 8, 32, "SmolLM2 decode, LM head"),
        (380, 576, 1536, 4, 32, "SmolLM2 380-token prefill, MLP up"),
        (1, 1024, 3072, 4, 32, "Q4_0 decode, MLP up"),
        (1, 1024, 151_936, 4, 32, "Q4_0 decode, LM head"),
        (384, 1024, 3072, 4, 32, "Q4_0 384-token prefill, MLP up"),
    ];
    for dtype in [Dtype::Float32, Dtype::Bfloat16] {
        for &(m, k, n, bits, gs, what) in shapes.iter().filter(|s| filter.is_none_or(|f| s.5.contains(f))) {
            let key = |s: u64| random::key(s).unwrap();
            let x = random::normal(&[m, k], Dtype::Float32, 0.0, 1.0, Some(&key(1))).unwrap().astype(dtype).unwrap();
            let w = random::normal(&[n, k], Dtype::Float32, 0.0, 0.05, Some(&key(2))).unwrap();
            // A GGUF Q4_0 model's scales are float16 values, stored as float32 by the conversion.
            let q4_0 = what.starts_with("Q4_0");
            let (wq, s, b) = quantize(&w.astype(if q4_0 { Dtype::Float16 } else { dtype }).unwrap(), gs, bits, Mode::Affine).unwrap();
            let b = b.expect("affine quantization has biases");
            let (s, b) = if q4_0 { (s.astype(Dtype::Float32).unwrap(), b.astype(Dtype::Float32).unwrap()) } else { (s, b) };
            // Q4_0's biases are -8 times its scales (the weights' values differ; the work is the same).
            let b = if q4_0 { s.multiply_scalar(-8.0).unwrap() } else { b };
            mlx::eval(&[&x, &wq, &s, &b]).unwrap();
            let ours = || quantized_matmul(&x, &wq, &s, Some(&b), true, gs, bits, Mode::Affine, Precision::Exact).unwrap();
            let fast = || quantized_matmul(&x, &wq, &s, Some(&b), true, gs, bits, Mode::Affine, Precision::Fast).unwrap();
            let r = Repacked::new(&wq, &s, &b, gs, bits, Precision::Fast).unwrap().expect("the fast kernel applies");
            let re = Repacked::new(&wq, &s, &b, gs, bits, Precision::Exact).unwrap().expect("the exact kernel applies");
            mlx::eval(&[r.arrays(), re.arrays()].concat()).unwrap();
            let repacked = || r.matmul(&x).unwrap();
            let exact_repacked = || re.matmul(&x).unwrap();
            let theirs = || quantized_matmul_mlx(&x, &wq, &s, Some(&b), true, gs, bits, Mode::Affine).unwrap();
            let vals = |a: Array| a.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap();
            let want = vals(theirs());
            let same = vals(ours()).iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{what} {dtype:?}: the kernel's output differs from MLX's op");
            let same_repacked = vals(exact_repacked()).iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same_repacked, "{what} {dtype:?}: the exact kernel on repacked weights differs from MLX's op");
            let top = want.iter().fold(0f32, |a, v| a.max(v.abs()));
            let same_fast = vals(repacked()).iter().zip(&vals(fast())).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same_fast, "{what} {dtype:?}: the repacked weights give other bits than the fast kernel's");
            let err = vals(fast()).iter().zip(&want).fold(0f32, |a, (f, w)| a.max((f - w).abs())) / top;
            // MLX's bfloat16 op and its prefills are slow enough that a few runs say enough.
            let runs = if dtype == Dtype::Bfloat16 || m > 1 { 5 } else { 20 };
            let (tm, sm) = time_ms(runs, theirs);
            let (to, so) = time_ms(runs.max(20), ours);
            let (tf, sf) = time_ms(runs.max(20), fast);
            let (tr, sr) = time_ms(runs.max(20), repacked);
            let (te, se) = time_ms(runs.max(20), exact_repacked);
            if q4_0 {
                // The same layer with its scales and biases held in float32 (nudged off float16
                // values, which costs the same work), and in float16 (biases nudged off -8 times
                // the scales by a float16 step), against the scales alone.
                let nudge = |a: &Array, by: f64| a.multiply_scalar(1.0 + by).unwrap();
                let r32 =
                    Repacked::new(&wq, &nudge(&s, 1.0 / 1_048_576.0), &nudge(&b, 1.0 / 1_048_576.0), gs, bits, Precision::Fast).unwrap().unwrap();
                let r16 = Repacked::new(
                    &wq,
                    &s,
                    &nudge(&b, 1.0 / 1024.0).astype(Dtype::Float16).unwrap().astype(Dtype::Float32).unwrap(),
                    gs,
                    bits,
                    Precision::Fast,
                )
                .unwrap()
                .unwrap();
                mlx::eval(&[r32.arrays(), r16.arrays()].concat()).unwrap();
                let bytes = |r: &Repacked| r.arrays().iter().map(|a| a.size() * 4).sum::<usize>();
                assert!(bytes(&r32) > bytes(&r16) && bytes(&r16) > bytes(&r), "{what}: scales held in 32, 16 bits, or alone");
                let t = medians(if m > 1 { 20 } else { 100 }, &[&|| r32.matmul(&x).unwrap(), &|| r16.matmul(&x).unwrap(), &repacked]);
                scales_rows.push(format!(
                    "| {m} x {k} -> {n}, {bits}/{gs} ({what}) | {} | {:.3} | {:.3} | {:.3} | {:.2} | {:.2} |",
                    dtype.name(),
                    t[0],
                    t[1],
                    t[2],
                    t[1] / t[0],
                    t[2] / t[0]
                ));
            }
            println!(
                "| {m} x {k} -> {n}, {bits}/{gs} ({what}) | {} | {tm:.2} ({sm:.2}) | {to:.3} ({so:.3}) | {:.1}x | {} | {tf:.3} ({sf:.3}) | {:.2} | {err:.1e} | {tr:.3} ({sr:.3}) | {:.2} | {te:.3} ({se:.3}) | {:.2} |",
                dtype.name(),
                tm / to,
                if same { "yes" } else { "no" },
                tf / to,
                tr / tf,
                te / to,
            );
        }
    }
    if !scales_rows.is_empty() {
        println!("\n#### Repacked weights: scales and biases in float32, float16, or the float16 scales alone (medians, runs in turn)\n");
        println!("| shape | dtype | float32, ms | float16, ms | scales alone, ms | float16 / float32 | scales alone / float32 |");
        println!("|---|---|--:|--:|--:|--:|--:|");
        scales_rows.iter().for_each(|r| println!("{r}"));
    }
}
