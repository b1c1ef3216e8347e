//! Greedy decoding's pick as one node: MLX-LM's `argmax(logits -
//! logsumexp(logits))`, whose bits it keeps, mostly without the log-sum-exp.
//!
//! Subtracting one number `c` from every logit keeps their order, but the
//! rounding can make two different logits equal, and then the first of them
//! wins the argmax. So the first index of the largest logit `m` is the answer
//! unless an earlier logit lies within rounding of `m`. With `c` the
//! log-sum-exp, `m - c` lies in `[-ln(n), 0]` for `n` logits: for an earlier
//! logit `x` at `d = m - x`, the exact differences `x - c` and `m - c` are at
//! most `ln(n) + d` from 0, under 32 for any vocabulary below `e^30` and `d <
//! 1`, where float32's spacing is at most 2^-19, so they round to the same
//! float only if `d <= 2^-19`. Where the nearest earlier logit is closer than
//! `TIE_GAP` (or a logit is NaN or +inf, or every one is -inf), the row is
//! computed as MLX does: `math::row_logsumexp` (the `logsumexp_last` kernel's
//! own bits), the subtraction, and MLX's argmax (the first NaN, else the first
//! largest). A decode step of a 151,936-token vocabulary: three passes over
//! the row at most (the largest, where it is, the largest before it) instead
//! of an `exp` per logit and two more nodes (docs/kernels.md).
use crate::cpu::kernel::{cpu_kernel_f32, KernelF32};
use crate::cpu::math::row_logsumexp;
use crate::cpu::row_ops::{row_max, row_max_of_numbers};
use crate::{Array, Dtype, Result};

/// An earlier logit at least this far below the largest cannot tie with it
/// after the subtraction (2^-16, eight times the 2^-19 above, which also
/// covers this gap's own rounding).
const TIE_GAP: f32 = 1.0 / 65536.0;

/// Per row of float32 `x`, the index of the largest of `x - logsumexp(x)`
/// over the last axis as MLX's `argmax` gives it (uint32, the last axis
/// dropped). `None` for other dtypes, empty rows and rows of more than 2^24
/// values (the index passes through a float32): the caller runs MLX's ops.
pub fn greedy_last(x: &Array) -> Result<Option<Array>> {
    let mut shape = x.shape();
    let n = shape.pop().unwrap_or(0);
    if x.dtype() != Dtype::Float32 || n <= 0 || n > 1 << 24 {
        return Ok(None);
    }
    cpu_kernel_f32("GreedyPick", GREEDY, &[], &[x], &shape)?.astype(Dtype::Uint32).map(Some)
}

const GREEDY: KernelF32 = |_, inputs, out| {
    let x = inputs[0];
    if out.is_empty() {
        return;
    }
    let n = x.len() / out.len();
    for (r, o) in out.iter_mut().enumerate() {
        *o = row_pick(&x[r * n..(r + 1) * n]) as f32;
    }
};

/// One row's pick.
fn row_pick(x: &[f32]) -> usize {
    let m = row_max(x);
    if m.is_finite() {
        let at = first_equal(x, m);
        let before = row_max_of_numbers(&x[..at]);
        if m - before >= TIE_GAP {
            return at;
        }
    }
    as_mlx(x)
}

/// The first index holding `v` (which `x` holds), eight values a step.
fn first_equal(x: &[f32], v: f32) -> usize {
    let mut chunks = x.chunks_exact(8);
    let mut base = 0;
    for c in &mut chunks {
        if c.iter().fold(false, |any, &e| any | (e == v)) {
            break;
        }
        base += 8;
    }
    base + x[base..].iter().position(|&e| e == v).unwrap_or(x.len() - base)
}

/// MLX's way: `x - logsumexp(x)`, then the first NaN, else the first largest.
fn as_mlx(x: &[f32]) -> usize {
    let c = row_logsumexp(x);
    let mut best = (0, f32::NEG_INFINITY);
    for (i, &v) in x.iter().enumerate() {
        let y = v - c;
        if y.is_nan() {
            return i;
        }
        if y > best.1 || i == 0 {
            best = (i, y);
        }
    }
    best.0
}
