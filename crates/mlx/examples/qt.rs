use mlx::quant::{quantize, Mode, Precision, Repacked};
use mlx::{random, Dtype};
use std::time::Instant;
fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().unwrap()).collect();
    let (k, n, bits, gs) = (args[0], args[1], args[2] as i32, args[3] as i32);
    for &m in &args[4..] {
        let key = |s: u64| random::key(s).unwrap();
        let x = random::normal(&[m as i32, k as i32], Dtype::Float32, 0.0, 1.0, Some(&key(1))).unwrap();
        let x = if std::env::var("BF").is_ok() { x.astype(Dtype::Bfloat16).unwrap() } else { x };
        let w = random::normal(&[n as i32, k as i32], Dtype::Float32, 0.0, 0.05, Some(&key(2))).unwrap();
        let w = if std::env::var("BF").is_ok() { w.astype(Dtype::Bfloat16).unwrap() } else { w };
        let (wq, s, b) = quantize(&w, gs, bits, Mode::Affine).unwrap();
        let b = b.unwrap();
        let r = Repacked::new(&wq, &s, &b, gs, bits, Precision::Fast).unwrap().unwrap();
        let re = Repacked::new(&wq, &s, &b, gs, bits, Precision::Exact).unwrap().unwrap();
        mlx::eval(&[r.arrays(), re.arrays()].concat()).unwrap();
        x.eval().unwrap();
        let mut best = [f64::MAX; 2];
        for _ in 0..30 {
            for (i, rr) in [&r, &re].iter().enumerate() {
                let t = Instant::now();
                rr.matmul(&x).unwrap().eval().unwrap();
                best[i] = best[i].min(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        println!(
            "m {m}: int8 {:.3} ms  exact {:.3} ms  ratio {:.2}  exact GMAC/s {:.1}",
            best[0],
            best[1],
            best[1] / best[0],
            (m * n * k) as f64 / best[1] / 1e6
        );
    }
}
