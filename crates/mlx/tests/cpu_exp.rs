//! `mlx::kernel::cpu_exp` must equal MLX's own CPU `exp` bit for bit: the top-p
//! kernel's probabilities (and so MLX-LM parity) rest on it.
use mlx::kernel::cpu_exp;
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
