// Scratch: time of one repacked fast matmul at m rows, weights cold (cycled over many copies).
use mlx::quant::{quantize, Mode, Precision, Repacked};
use mlx::{random, Dtype};
use std::time::Instant;
fn main() {
    let reps: usize = std::env::args().nth(1).map_or(40, |v| v.parse().unwrap());
    let mut out = vec![];
    for &(k, n, copies) in &[(1024usize, 3072usize, 48usize), (3072, 1024, 48), (1024, 151936, 2)] {
        let key = |s: u64| random::key(s).unwrap();
        let ws: Vec<Repacked> = (0..copies)
            .map(|c| {
                let w = random::normal(&[n as i32, k as i32], Dtype::Float32, 0.0, 0.05, Some(&key(2 + c as u64))).unwrap();
                let (wq, s, b) = quantize(&w, 64, 4, Mode::Affine).unwrap();
                Repacked::new(&wq, &s, &b.unwrap(), 64, 4, Precision::Fast).unwrap().unwrap()
            })
            .collect();
        for m in [1, 2, 4, 8] {
            let x = random::normal(&[m, k as i32], Dtype::Float32, 0.0, 1.0, Some(&key(1))).unwrap();
            for w in &ws {
                w.matmul(&x).unwrap().eval().unwrap();
            }
            let mut t: Vec<f64> = (0..reps)
                .map(|i| {
                    let w = &ws[i % copies];
                    let s = Instant::now();
                    w.matmul(&x).unwrap().eval().unwrap();
                    s.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            t.sort_by(f64::total_cmp);
            out.push(format!("{m}x{k}->{n}: {:.3}", t[t.len() / 2]));
        }
    }
    println!("{}", out.join("\n"));
}
