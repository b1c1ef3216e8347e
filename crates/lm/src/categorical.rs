//! MLX's `random.categorical` for one row of logits, as a CPU kernel that only
//! does work for tokens that can be drawn.
//!
//! For a single row MLX 0.32 draws by inverse CDF (`categorical_inverse_cdf`):
//! `w = exp(x - max x)`, `cdf` = exclusive cumulative sum of `w` in index
//! order, `v = uniform() * sum(w)`, answer `searchsorted(cdf, v, right) - 1`.
//! On the CPU both the cumsum and the sum add in index order one float at a
//! time, so every partial sum is determined by the nonzero weights alone:
//! after top-p / min-p / top-k almost every logit is -inf and its weight 0,
//! and the kernel sums a few dozen terms instead of making five passes over
//! the vocabulary. `exp` is MLX's own formula (`mlx::cpu::math::cpu_exp`); the
//! uniform draw stays an MLX op, so the random key is used exactly as MLX does.
use mlx::cpu::{kernel, math as cpu_math, row_ops};
use mlx::{random, Array, Dtype, Result};

/// `random::categorical(logits * scale, -1, key)` (MLX-LM's draw at
/// temperature `1 / scale`), identical token for token. The kernel serves
/// `[1, vocab]` logits, the shape MLX draws by inverse CDF (a `[vocab]` row or
/// several rows take MLX's Gumbel path, and MLX's own op). For float32 logits
/// it scales each value itself (the same float32 product as MLX's multiply,
/// without a pass and a buffer of its own); other dtypes round the product to
/// their own precision, so MLX's multiply runs first.
pub fn categorical(logits: &Array, scale: f64, key: &Array, use_kernel: bool) -> Result<Array> {
    let scaled = |x: &Array| if scale == 1.0 { Ok(x.clone()) } else { x.multiply_scalar(scale) };
    if !use_kernel || logits.ndim() != 2 || logits.dim(0) != 1 || logits.dim(1) == 0 {
        return random::categorical(&scaled(logits)?, -1, Some(key));
    }
    let (x, factor) = if logits.dtype() == Dtype::Float32 { (logits.clone(), scale as f32) } else { (scaled(logits)?, 1.0) };
    let u = random::uniform(0.0, 1.0, &[1], Dtype::Float32, Some(key))?;
    let flat = x.reshape(&[-1])?;
    kernel::cpu_kernel_f32("Categorical", draw_kernel, &[factor], &[&flat, &u], &[1])?.astype(Dtype::Uint32)
}

/// params: the scale; inputs: the logits (one row) and the uniform draw; out:
/// the index, as f32 (exact: vocabularies are far below 2^24).
fn draw_kernel(params: &[f32], inputs: &[&[f32]], out: &mut [f32]) {
    let (x, u) = (inputs[0], inputs[1].first().copied().unwrap_or(0.0));
    out[0] = draw(x, params[0], u, &mut Vec::new()) as f32;
}

mlx::avx2_fma_dispatch!(fn draw(x: &[f32], scale: f32, u: f32, w: &mut Vec<(u32, f32)>) -> usize => draw_body);

#[inline(always)]
fn draw_body(x: &[f32], scale: f32, u: f32, w: &mut Vec<(u32, f32)>) -> usize {
    let n = x.len();
    let m = row_ops::row_max_scaled(x, scale);
    w.clear();
    if m.is_infinite() {
        // MLX: with an infinite maximum the draw is uniform over the maximal entries.
        row_ops::for_each_candidate(x, |v| v * scale == m, |v| v, |i, _, _| w.push((i as u32, 1.0)));
    } else {
        // The nonzero weights `exp(x - m)` in index order. MLX's `exp` is
        // exactly 0 below -88, so those are skipped; NaN weights are kept
        // (garbage in, garbage out).
        row_ops::for_each_candidate(
            x,
            |v| !(v * scale - m < -88.0),
            |v| cpu_math::cpu_exp(v * scale - m),
            |i, _, e| {
                if e != 0.0 {
                    w.push((i as u32, e));
                }
            },
        );
    }
    let total = w.iter().fold(0f32, |s, &(_, v)| s + v);
    let target = u * total;
    // The answer is the first index whose exclusive cumulative sum exceeds the
    // target, minus one: the index of the nonzero weight whose partial sum
    // first passes it. If none does, searchsorted returns n and MLX gives n - 1.
    let mut above = 0f32;
    for &(i, v) in w.iter() {
        above += v;
        if target < above {
            return i as usize;
        }
    }
    n.saturating_sub(1)
}
