//! Top-k with MLX-LM's exact mask, without a vocabulary-sized argpartition.
//!
//! MLX-LM sets -inf at the indices `argpartition(-x, k - 1)[k:]`. MLX's CPU
//! argpartition orders by value, then by index (`v1 < v2 || (v1 == v2 && a <
//! b)`, NaNs last), so the kept set is fully determined: every value above the
//! k-th largest `t`, then the lowest indices of those equal to `t` until there
//! are k (-0 and +0 count as equal, as in that comparison). The kernel finds
//! `t` and writes that mask in two passes over the row; in decoding, after
//! min-p or top-p, fewer than k values are usually finite and `t` is -inf, so
//! the row comes back unchanged. With NaNs in the row and fewer than k other
//! values, which NaNs MLX keeps is not defined; the kernel keeps the first.
use mlx::cpu::kernel;
use mlx::{Array, Result};

/// Keeps the `k` largest log-probabilities (MLX-LM's ties), -inf elsewhere.
pub fn top_k(logprobs: &Array, k: i32, use_kernel: bool) -> Result<Array> {
    let vocab = logprobs.dim(-1);
    // The kernel gets the vocabulary size as a float32 parameter.
    if use_kernel && logprobs.ndim() > 0 && vocab > 0 && vocab < 1 << 24 {
        let params = [k.clamp(0, vocab) as f32, vocab as f32];
        return kernel::cpu_kernel_f32_in_place("TopKMask", mask_kernel, &params, logprobs, &[])?.astype(logprobs.dtype());
    }
    top_k_partitioned(logprobs, k)
}

/// MLX-LM's form: the partition's first k indices are the kept ones, so
/// writing their values into a -inf array gives its result with a k-element
/// scatter instead of a vocabulary-sized one. Public so that tests compare
/// the two bit for bit.
pub fn top_k_partitioned(logprobs: &Array, k: i32) -> Result<Array> {
    let idx = logprobs.negative()?.argpartition(k - 1, -1)?.slice_axis(-1, 0, k)?;
    let kept = logprobs.take_along_axis(&idx, -1)?;
    let neg_inf = Array::full(&logprobs.shape(), f64::NEG_INFINITY, logprobs.dtype())?;
    neg_inf.put_along_axis(&idx, &kept, -1)
}

/// params: k, vocabulary size; `out` holds the rows and is masked in place.
fn mask_kernel(params: &[f32], _inputs: &[&[f32]], out: &mut [f32]) {
    let (k, v) = (params[0] as usize, params[1] as usize);
    if v == 0 || !out.len().is_multiple_of(v) {
        out.fill(f32::NAN);
        return;
    }
    // Scratch per call, not thread-local (see `top_p::mask_kernel`).
    let mut scratch = Vec::new();
    for row in out.chunks_mut(v) {
        mask_row(row, k, &mut scratch);
    }
}

fn mask_row(row: &mut [f32], k: usize, scratch: &mut Vec<f32>) {
    if k == 0 {
        row.fill(f32::NEG_INFINITY);
        return;
    }
    let (above_neg_inf, neg_inf) = count_finite_and_neg_inf(row);
    // `t`: the k-th largest value; NaN when fewer than k values are not NaN.
    let t = if above_neg_inf < k {
        if above_neg_inf + neg_inf < k {
            f32::NAN
        } else {
            f32::NEG_INFINITY
        }
    } else {
        scratch.clear();
        scratch.extend(row.iter().copied().filter(|x| *x > f32::NEG_INFINITY));
        // No NaN in `scratch`: the comparison is total there, and -0 == +0.
        let (_, t, _) = scratch.select_nth_unstable_by(k - 1, |a, b| b.partial_cmp(a).expect("no NaN"));
        *t
    };
    // The usual case after min-p or top-p: fewer than k values above -inf, all
    // of them kept, and the rest is -inf already unless it is NaN.
    if t == f32::NEG_INFINITY && above_neg_inf + neg_inf == row.len() {
        return;
    }
    if t.is_nan() {
        // Every non-NaN value is kept, then the first NaNs up to k.
        let mut nans = k - row.iter().filter(|x| !x.is_nan()).count();
        for x in row.iter_mut().filter(|x| x.is_nan()) {
            if nans > 0 {
                nans -= 1;
            } else {
                *x = f32::NEG_INFINITY;
            }
        }
        return;
    }
    let mut ties = k - row.iter().filter(|x| **x > t).count();
    for x in row.iter_mut() {
        if *x > t {
            continue;
        }
        if *x == t && ties > 0 {
            ties -= 1;
        } else {
            *x = f32::NEG_INFINITY;
        }
    }
}

/// How many values are above -inf and how many are -inf, in one pass of eight
/// lanes (the rest are NaN). Rows are below 2^24 long.
fn count_finite_and_neg_inf(row: &[f32]) -> (usize, usize) {
    let (mut above, mut at) = ([0u32; 8], [0u32; 8]);
    let mut chunks = row.chunks_exact(8);
    for c in &mut chunks {
        for j in 0..8 {
            above[j] += (c[j] > f32::NEG_INFINITY) as u32;
            at[j] += (c[j] == f32::NEG_INFINITY) as u32;
        }
    }
    let tail = chunks.remainder();
    let sum = |l: [u32; 8]| l.iter().map(|&n| n as usize).sum::<usize>();
    (sum(above) + tail.iter().filter(|x| **x > f32::NEG_INFINITY).count(), sum(at) + tail.iter().filter(|x| **x == f32::NEG_INFINITY).count())
}
