//! The row passes of `mlx::cpu::row_ops` against plain loops, bit for bit.

#[test]
fn mask_below_equals_where() {
    use mlx::cpu::row_ops::mask_below;
    let mut v: Vec<f32> = (0..1003).map(|i| (i as f32 * 0.61).cos() * 4.0).collect();
    for (i, x) in [(0, f32::NAN), (9, -0.0), (10, 0.0), (11, f32::NEG_INFINITY), (12, f32::INFINITY), (1002, f32::NAN), (1001, -7.0)] {
        v[i] = x;
    }
    for t in [-1.5f32, 0.0, -0.0, f32::NEG_INFINITY, f32::INFINITY, f32::NAN] {
        for len in [0usize, 3, 8, 13, 1003] {
            let x = &v[..len];
            let mut ours = x.to_vec();
            mask_below(&mut ours, t);
            let want: Vec<u32> = x.iter().map(|&e| if e < t { f32::NEG_INFINITY } else { e }.to_bits()).collect();
            assert_eq!(ours.iter().map(|e| e.to_bits()).collect::<Vec<_>>(), want, "t {t}, length {len}");
        }
    }
}

#[test]
fn candidates_come_in_index_order_with_their_mapped_values() {
    use mlx::cpu::math::cpu_exp;
    use mlx::cpu::row_ops::{for_each_candidate, row_max, row_max_of_numbers, row_max_scaled};
    let mut v: Vec<f32> = (0..5003).map(|i| (i as f32 * 0.37).sin() * 30.0).collect();
    v[4999] = f32::NAN;
    let keep = |x: f32| !(x < 20.0);
    let mut got = Vec::new();
    for_each_candidate(&v, keep, cpu_exp, |i, x, e| got.push((i, x.to_bits(), e.to_bits())));
    let want: Vec<_> = v.iter().enumerate().filter(|(_, &x)| keep(x)).map(|(i, &x)| (i, x.to_bits(), cpu_exp(x).to_bits())).collect();
    assert!(want.len() > 100 && want.iter().any(|w| w.0 == 4999), "{} candidates", want.len());
    assert_eq!(got, want);
    // The maxima: NaN propagating or ignored, and of the scaled values.
    assert!(row_max(&v).is_nan());
    let numbers = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    assert_eq!(row_max_of_numbers(&v), numbers);
    let scaled: Vec<f32> = v[..4999].iter().map(|x| x * 1.7).collect();
    assert_eq!(row_max_scaled(&v[..4999], 1.7), scaled.iter().copied().fold(f32::NEG_INFINITY, f32::max));
    assert_eq!(row_max_of_numbers(&[]), f32::NEG_INFINITY);
    assert_eq!(row_max_of_numbers(&[f32::NAN; 11]), f32::NEG_INFINITY);
}
