//! `mlx::cpu_math` must equal MLX's own CPU `exp` bit for bit: the top-p
//! kernel's probabilities (and so MLX-LM parity) rest on it.
use mlx::cpu_math::{cpu_exp, logsumexp_last};
use mlx::{Array, Dtype};

fn check(xs: &[f32]) {
    let dev: Vec<f32> = Array::from_slice(xs, &[xs.len() as i32]).unwrap().exp().unwrap().to_vec().unwrap();
    for (x, d) in xs.iter().zip(&dev) {
        let c = cpu_exp(*x);
        assert!(c.to_bits() == d.to_bits() || (c.is_nan() && d.is_nan()), "exp({x:e}) = {d:e} on MLX, {c:e} here");
    }
}

#[test]
fn equals_mlx_exp_bit_for_bit() {
    assert_eq!(Dtype::Float32, Array::scalar(1.0, Dtype::Float32).unwrap().dtype());
    // Every float32 with one of 2^13 mantissa patterns over the whole exponent
    // range, both signs, plus the edges of the clamps.
    let mut xs: Vec<f32> = Vec::new();
    for exp_bits in 0u32..256 {
        for m in (0u32..(1 << 23)).step_by(1 << 10) {
            for sign in [0u32, 1] {
                xs.push(f32::from_bits(sign << 31 | exp_bits << 23 | m | (m >> 13)));
            }
        }
    }
    // Dense in the range log-probabilities live in.
    let mut v = -104.0f32;
    while v < 1.0 {
        xs.push(v);
        v += 1.0 / 4096.0;
    }
    xs.extend([88.0, 88.000_01, -88.0, -88.000_01, 0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN, f32::MAX]);
    check(&xs);
}

#[test]
fn logsumexp_equals_mlx_bit_for_bit() {
    use mlx::random;
    let cases: Vec<Array> = vec![
        random::normal(&[1, 151_936], Dtype::Float32, 0.0, 3.0, Some(&random::key(1).unwrap())).unwrap(),
        random::normal(&[1, 151_936], Dtype::Float32, -40.0, 30.0, Some(&random::key(2).unwrap())).unwrap(),
        random::normal(&[3, 1000], Dtype::Float32, 5.0, 100.0, Some(&random::key(3).unwrap())).unwrap(),
        random::normal(&[2, 4096], Dtype::Bfloat16, 0.0, 4.0, Some(&random::key(4).unwrap())).unwrap(),
        Array::from_slice(&[f32::NEG_INFINITY, 0.0, -88.0, -88.000_01, 1e-30], &[1, 5]).unwrap(),
        Array::from_slice(&[f32::NEG_INFINITY; 4], &[1, 4]).unwrap(),
        Array::from_slice(&[1.0, f32::INFINITY, 2.0], &[1, 3]).unwrap(),
    ];
    for (i, x) in cases.iter().enumerate() {
        let ours = logsumexp_last(x).unwrap();
        let theirs = x.logsumexp(&[-1], true).unwrap();
        assert_eq!(ours.dtype(), theirs.dtype(), "case {i}");
        assert_eq!(ours.shape(), theirs.shape(), "case {i}");
        let a: Vec<u32> = ours.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect();
        let b: Vec<u32> = theirs.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect();
        assert_eq!(a, b, "case {i}");
    }
}
