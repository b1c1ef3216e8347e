//! Top-p with MLX-LM 0.32.2's exact threshold, without its full device sort.
//!
//! MLX-LM sorts the log-probabilities ascending, sums `exp` of them from the top
//! down in float32 (a reverse exclusive `cumsum`: `mass_above`), takes
//! `total = mass_above[0] + p[0]`, counts the positions whose mass above is at
//! least `top_p * total`, and keeps every log-probability not below the one at
//! that count. The float32 sums depend on the summation order, so the same
//! threshold needs the same descending order, but not the device's argsort
//! (about 20 ms for 151,936 floats on the CPU backend):
//! - once the running sum `s` is at least the largest probability `d0`, adding
//!   any `x < ulp(d0) / 2` leaves it unchanged (round to nearest), so such
//!   entries can be dropped before sorting without changing any sum;
//! - the threshold entry itself always raises the sum (its mass above is below
//!   `top_p * total`, the next one is not), so it is never a dropped entry;
//! - the rest is radix-sorted by value: equal log-probabilities have equal
//!   probabilities, so the order among ties does not change a sum.
//!
//! `exp` is MLX's own CPU formula (`mlx::cpu::math::cpu_exp`), computed only for
//! terms that can count. The kernel runs as one node of the MLX graph on the
//! CPU stream (`mlx::cpu::kernel`); on a GPU the device sort is cheap and
//! `top_p_sorted` runs.
use mlx::cpu::{kernel, math as cpu_math, row_ops};
use mlx::{Array, Dtype, Result};

/// Keeps the log-probabilities of the top-p nucleus, -inf elsewhere.
pub fn top_p(logprobs: &Array, p: f32, use_kernel: bool) -> Result<Array> {
    let vocab = logprobs.dim(-1);
    // The kernel gets the vocabulary size as a float32 parameter. Its output is
    // float32; the kept values and -inf are exact in the input's dtype.
    if use_kernel && logprobs.ndim() > 0 && vocab > 0 && vocab < 1 << 24 {
        return kernel::cpu_kernel_f32_in_place("TopPMask", mask_kernel, &[p, vocab as f32], logprobs, &[])?.astype(logprobs.dtype());
    }
    let threshold = sorted_threshold(logprobs, p)?;
    let neg_inf = logprobs.scalar_like(f64::NEG_INFINITY)?;
    Array::where_(&logprobs.less(&threshold)?, &neg_inf, logprobs)
}

/// MLX-LM's own computation: a full sort and a reverse exclusive cumsum.
fn sorted_threshold(logprobs: &Array, p: f32) -> Result<Array> {
    let sorted = logprobs.sort(-1)?;
    let probs = sorted.astype(Dtype::Float32)?.exp()?;
    let mass_above = probs.cumsum(-1, true, false)?;
    let total = mass_above.slice_axis(-1, 0, 1)?.add(&probs.slice_axis(-1, 0, 1)?)?;
    let dropped = mass_above.greater_equal(&total.multiply_scalar(p as f64)?)?.sum(&[-1], true)?;
    sorted.take_along_axis(&dropped, -1)
}

/// The device-sort form, kept public so tests and the micro-benchmark can
/// compare the two bit for bit.
pub fn top_p_sorted(logprobs: &Array, p: f32) -> Result<Array> {
    top_p(logprobs, p, false)
}

/// params: top_p, vocabulary size; `out` holds the rows of log-probabilities
/// and is masked in place: -inf below each row's threshold, as MLX-LM's `where`.
fn mask_kernel(params: &[f32], _inputs: &[&[f32]], out: &mut [f32]) {
    let (p, v) = (params[0], params[1] as usize);
    if v == 0 || !out.len().is_multiple_of(v) {
        out.fill(f32::NAN);
        return;
    }
    // Scratch per call, not thread-local: this runs on MLX's stream thread,
    // which MLX tears down at process exit, and a thread-local with a
    // destructor there is one more thing that exit would have to order.
    let mut s = (Vec::new(), Vec::new());
    for row in out.chunks_mut(v) {
        mask_row(row, p, &mut s);
    }
}

mlx::avx2_fma_dispatch!(fn mask_row(row: &mut [f32], p: f32, s: &mut (Vec<u64>, Vec<u64>)) => mask_row_body);

#[inline(always)]
fn mask_row_body(row: &mut [f32], p: f32, s: &mut (Vec<u64>, Vec<u64>)) {
    let t = row_threshold(row, p, s);
    row_ops::mask_below(row, t);
}

/// Maps a float to a u32 whose unsigned order is the float's order, inverted so
/// that an ascending radix sort gives descending floats.
fn descending_key(x: f32) -> u32 {
    let b = x.to_bits();
    !(if b >> 31 == 1 { !b } else { b | 0x8000_0000 })
}

/// Below this distance from the largest log-probability, a term is under half
/// an ulp of the largest probability whatever rounding `exp` does:
/// e^-17.5 < 2^-25 (and half an ulp of d is at least d * 2^-25).
const SURELY_ABSORBED: f32 = 17.5;

#[inline(always)]
fn row_threshold(lp: &[f32], p: f32, s: &mut (Vec<u64>, Vec<u64>)) -> f32 {
    // d0: the probability of the largest log-probability, the first term of the sum.
    let top = row_ops::row_max_of_numbers(lp);
    let d0 = cpu_math::cpu_exp(top);
    let half_ulp = (f32::from_bits(d0.to_bits().wrapping_add(1)) - d0) * 0.5;
    let (items, tmp) = s;
    items.clear();
    collect_terms(lp, top - SURELY_ABSORBED, half_ulp, items);
    radix_sort_high32(items, tmp);
    let mut total = 0f32;
    for &it in items.iter() {
        total += f32::from_bits(it as u32);
    }
    let target = total * p;
    let mut above = 0f32;
    let mut last = None;
    for &it in items.iter() {
        if above >= target {
            break;
        }
        above += f32::from_bits(it as u32);
        last = Some(it);
    }
    // MLX-LM keeps everything not below this entry; with no entry (an empty or
    // all-NaN row) nothing is cut.
    match last {
        Some(it) => key_value(it),
        None => f32::NEG_INFINITY,
    }
}

/// Pushes (descending key, probability bits) for every term that can change a
/// sum. Probabilities are exactly MLX's `exp`; `!(x < half_ulp)` also keeps
/// NaN, so garbage in stays garbage out, as in MLX.
#[inline(always)]
fn collect_terms(lp: &[f32], cut: f32, half_ulp: f32, items: &mut Vec<u64>) {
    row_ops::for_each_candidate(
        lp,
        |l| !(l < cut),
        cpu_math::cpu_exp,
        |_, l, x| {
            if !(x < half_ulp) {
                items.push(((descending_key(l) as u64) << 32) | x.to_bits() as u64);
            }
        },
    )
}

fn key_value(it: u64) -> f32 {
    let k = !((it >> 32) as u32);
    f32::from_bits(if k >> 31 == 1 { k & 0x7fff_ffff } else { !k })
}

/// Stable LSD radix sort on the upper 32 bits, 11 bits per pass; a pass where
/// every item has the same digit is skipped.
fn radix_sort_high32(items: &mut Vec<u64>, tmp: &mut Vec<u64>) {
    const BITS: u32 = 11;
    const BUCKETS: usize = 1 << BITS;
    let mut counts = vec![[0usize; BUCKETS]; 3];
    for &it in items.iter() {
        let k = (it >> 32) as u32;
        for (pass, c) in counts.iter_mut().enumerate() {
            c[((k >> (pass as u32 * BITS)) as usize) & (BUCKETS - 1)] += 1;
        }
    }
    tmp.clear();
    tmp.resize(items.len(), 0);
    for (pass, c) in counts.iter_mut().enumerate() {
        if c.contains(&items.len()) {
            continue;
        }
        let mut sum = 0;
        for n in c.iter_mut() {
            let here = *n;
            *n = sum;
            sum += here;
        }
        let shift = 32 + pass as u32 * BITS;
        for &it in items.iter() {
            let d = ((it >> shift) as usize) & (BUCKETS - 1);
            tmp[c[d]] = it;
            c[d] += 1;
        }
        std::mem::swap(items, tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_floats_descending() {
        let xs = [f32::INFINITY, 3.5, 1.0, 0.0, -0.0, -1e-30, -2.0, -7.25, f32::NEG_INFINITY];
        for w in xs.windows(2) {
            assert!(descending_key(w[0]) <= descending_key(w[1]), "{} {}", w[0], w[1]);
        }
        for &x in &xs {
            let it = (descending_key(x) as u64) << 32;
            assert_eq!(key_value(it).to_bits(), x.to_bits());
        }
    }

    #[test]
    fn radix_sort_is_a_sort() {
        let mut v: Vec<u64> = (0..5000u64).map(|i| (i.wrapping_mul(2654435761) % 100_003) << 32 | i).collect();
        let mut expect = v.clone();
        expect.sort_by_key(|x| x >> 32);
        let mut tmp = Vec::new();
        radix_sort_high32(&mut v, &mut tmp);
        assert_eq!(v.iter().map(|x| x >> 32).collect::<Vec<_>>(), expect.iter().map(|x| x >> 32).collect::<Vec<_>>());
    }
}
