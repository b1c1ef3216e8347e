//! `mlx::cpu::greedy::greedy_last` must pick what MLX-LM's greedy decoding
//! picks, `argmax(x - logsumexp(x))` as MLX's ops compute it, on every row:
//! also where the subtraction's rounding makes an earlier logit tie with the
//! largest one, and with NaN and infinities.
use mlx::cpu::greedy::greedy_last;
use mlx::{random, Array, Dtype};

fn mlx_pick(x: &Array) -> Vec<u32> {
    x.subtract(&x.logsumexp(&[-1], true).unwrap()).unwrap().argmax(-1, false).unwrap().to_vec::<u32>().unwrap()
}

fn first_largest(row: &[f32]) -> usize {
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    row.iter().position(|&v| v == m).unwrap()
}

fn check(rows: &[Vec<f32>]) -> usize {
    let n = rows[0].len();
    let flat: Vec<f32> = rows.concat();
    let x = Array::from_slice(&flat, &[rows.len() as i32, n as i32]).unwrap();
    let ours = greedy_last(&x).unwrap().expect("float32 rows are picked");
    assert_eq!(ours.dtype(), Dtype::Uint32);
    assert_eq!(ours.shape(), vec![rows.len() as i32]);
    let ours = ours.to_vec::<u32>().unwrap();
    let theirs = mlx_pick(&x);
    assert_eq!(ours, theirs);
    // How many rows MLX answers with other than the first largest logit.
    rows.iter().zip(&theirs).filter(|(r, &t)| r.iter().all(|v| v.is_finite()) && first_largest(r) != t as usize).count()
}

#[test]
fn picks_as_mlx_on_random_logits() {
    let key = |s: u64| Some(random::key(s).unwrap());
    for (n, seed) in [(151_936, 1u64), (49_152, 2), (37, 3), (8, 4), (1, 5)] {
        let x = random::normal(&[4, n], Dtype::Float32, 0.0, 3.0, key(seed).as_ref()).unwrap();
        let rows: Vec<Vec<f32>> = x.to_vec::<f32>().unwrap().chunks(n as usize).map(|c| c.to_vec()).collect();
        check(&rows);
    }
}

#[test]
fn picks_as_mlx_where_rounding_ties_an_earlier_logit() {
    // A large vocabulary of near-equal logits puts `m - logsumexp` near -ln(n), where float32's
    // spacing (2^-20) is wider than one step below `m` = 1: an earlier logit one or a few steps
    // below the largest then rounds to the same log-probability, and MLX picks it.
    let n = 151_936;
    let mut rows = Vec::new();
    for (i, steps) in [1u32, 2, 3, 5, 8, 16, 64, 128, 129, 140, 1000].into_iter().enumerate() {
        let m = 1.0f32;
        let below = f32::from_bits(m.to_bits() - steps);
        let mut row = vec![0.5f32; n];
        let at = 1000 + 37 * i;
        row[at] = m;
        row[17 + i] = below;
        rows.push(row);
    }
    let tied = check(&rows);
    // Both sides of the gap: some rows tie (MLX picks the earlier logit), some do not.
    assert!(tied >= 3 && tied < rows.len(), "{tied} of {} rows tied", rows.len());
}

#[test]
fn picks_as_mlx_with_nan_and_infinities() {
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    let cases: Vec<Vec<f32>> = vec![
        vec![1.0, nan, 3.0, 2.0],
        vec![nan, 1.0, 3.0, nan],
        vec![1.0, 3.0, 3.0, 2.0],
        vec![-inf, -inf, -inf, -inf],
        vec![-inf, 2.0, -inf, 1.0],
        vec![1.0, inf, 2.0, inf],
        vec![3.0, 1.0, 2.0, 3.0],
        vec![f32::MAX, -f32::MAX, 0.0, f32::MAX],
        vec![-1e30, -1e30, -1e30, -1e30],
    ];
    for c in &cases {
        check(std::slice::from_ref(c));
    }
}

#[test]
fn leaves_to_mlx_what_it_cannot_pick() {
    let ints = Array::from_slice(&[1i32, 2, 3], &[1, 3]).unwrap();
    assert!(greedy_last(&ints).unwrap().is_none());
    let empty = Array::zeros(&[2, 0], Dtype::Float32).unwrap();
    assert!(greedy_last(&empty).unwrap().is_none());
}
