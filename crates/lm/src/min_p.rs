//! Min-p as MLX-LM computes it: -inf wherever a log-probability is below the
//! row's largest plus `ln(min_p)`. On the CPU one kernel does it in two passes
//! over the row, in place, with the same float32 arithmetic (one addition, NaN
//! propagating through the maximum as MLX's `max` does); elsewhere, and for
//! other dtypes (whose sums round differently) or `min_tokens_to_keep` above
//! one, MLX's ops.
use mlx::cpu::{kernel, row_ops};
use mlx::{Array, Dtype, Result};

pub fn min_p(logprobs: &Array, min_p: f32, keep: i32, use_kernel: bool) -> Result<Array> {
    // The sum `max + ln(min_p)` is float32 on both paths: MLX casts the scalar to the array's dtype.
    let ln_min_p = (min_p as f64).ln();
    let vocab = logprobs.dim(-1);
    if use_kernel && keep <= 1 && logprobs.dtype() == Dtype::Float32 && logprobs.ndim() > 0 && vocab > 0 && vocab < 1 << 24 {
        return kernel::cpu_kernel_f32_in_place("MinPMask", mask_kernel, &[ln_min_p as f32, vocab as f32], logprobs, &[]);
    }
    let top = logprobs.max(&[-1], true)?;
    let scaled = top.add_scalar(ln_min_p)?;
    let mut remove = logprobs.less(&scaled)?;
    if keep > 1 {
        let idx = logprobs.argpartition(-keep, -1)?.slice_axis(-1, vocab - keep, vocab)?;
        let f = Array::scalar(0.0, Dtype::Bool)?.broadcast_to(&idx.shape())?;
        remove = remove.put_along_axis(&idx, &f, -1)?;
    }
    let neg_inf = logprobs.scalar_like(f64::NEG_INFINITY)?;
    Array::where_(&remove, &neg_inf, logprobs)
}

/// params: ln(min_p), vocabulary size; `out` holds the rows and is masked in place.
fn mask_kernel(params: &[f32], _inputs: &[&[f32]], out: &mut [f32]) {
    let (ln_min_p, v) = (params[0], params[1] as usize);
    if v == 0 || !out.len().is_multiple_of(v) {
        out.fill(f32::NAN);
        return;
    }
    for row in out.chunks_mut(v) {
        mask_row(row, ln_min_p);
    }
}

mlx::avx2_fma_dispatch!(fn mask_row(row: &mut [f32], ln_min_p: f32) => mask_row_body);

#[inline(always)]
fn mask_row_body(row: &mut [f32], ln_min_p: f32) {
    // NaN anywhere makes the maximum NaN, and then nothing is below `t`.
    let t = row_ops::row_max(row) + ln_min_p;
    row_ops::mask_below(row, t);
}
