//! MLX's `fast::rope` as one node, with MLX's bits (float32, bfloat16, float16). On the CPU
//! MLX has no RoPE kernel: `fast.cpp` runs its fallback, about twenty graph
//! nodes per call (the positions, the frequencies, their product, `cos` and
//! `sin`, the halves, four products, a difference, a sum, the concatenation),
//! twice per decoder layer (docs/decode-profile.md). As those ops compute it
//! on Linux (one lane, each op rounding on its own):
//!
//! - positions `p = (f32(t) + f32(offset)) * scale`;
//! - frequencies `f_i = exp(f32(-i) * (logf(base) / f32(dims / 2)))` with MLX's
//!   `exp`, or `1 / freqs_i` where the caller gives them;
//! - `theta = p * f_i`, MLX's `cos` and `sin` of it;
//! - `x1 * cos - x2 * sin` and `x1 * sin + x2 * cos` for the pairs (halves, or
//!   neighbours when `traditional`); the dimensions past `dims` as they are.
//!
//! In a 16-bit `x` (a bfloat16 model's) MLX stores `cos`, `sin`, each product
//! and each sum in that dtype, so each is rounded to it here too.
use crate::cpu::half::Rounding;
use crate::cpu::kernel::{cpu_kernel_f32, Kernel, KernelF32};
use crate::cpu::math::{cpu_cos, cpu_cos_reduced, cpu_exp, cpu_sin, cpu_sin_reduced, par_chunks_at, sin_needs_libm, PARALLEL_MIN};
use crate::fast::RopeOffset;
use crate::{Array, Dtype, Result};

/// Parameters: `[b, heads, t, d, dims, traditional, scale, base, has freqs, per row, offset, rounding]`.
const PARAMS: usize = 12;

/// `x` `[B, heads, T, D]` rotated as MLX's `fast::rope`, or `None` where the
/// kernel does not apply (switched off, not the CPU, not a float dtype or not
/// four axes, arguments MLX would refuse: MLX's op then runs and reports them).
pub fn rope(
    x: &Array,
    dims: i32,
    traditional: bool,
    base: Option<f32>,
    scale: f32,
    offset: RopeOffset,
    freqs: Option<&Array>,
) -> Result<Option<Array>> {
    let float = matches!(x.dtype(), Dtype::Float32 | Dtype::Bfloat16 | Dtype::Float16);
    if !float || x.ndim() != 4 || !Kernel::Math.enabled() {
        return Ok(None);
    }
    let (b, heads, t, d) = (x.dim(0), x.dim(1), x.dim(2), x.dim(3));
    let half = dims / 2;
    let freqs_fit = freqs.is_none_or(|f| f.dtype() == Dtype::Float32 && f.ndim() == 1 && f.dim(0) == half);
    let rows_fit = match &offset {
        RopeOffset::At(_) => true,
        RopeOffset::PerRow(o) => o.dtype() == Dtype::Int32 && o.ndim() == 1 && o.dim(0) == b,
    };
    // Sizes and offsets travel as float parameters: exact below 2^24.
    let small = |v: i64| (0..1 << 24).contains(&v);
    let at = match offset {
        RopeOffset::At(o) => o,
        RopeOffset::PerRow(_) => 0,
    };
    let fits = dims > 0
        && dims % 2 == 0
        && dims <= d
        && base.is_some() != freqs.is_some()
        && freqs_fit
        && rows_fit
        && [b, heads, t, d].iter().all(|&n| small(n as i64))
        && small(at.unsigned_abs() as i64);
    if !fits {
        return Ok(None);
    }
    let params: [f32; PARAMS] = [
        b as f32,
        heads as f32,
        t as f32,
        d as f32,
        dims as f32,
        traditional as u8 as f32,
        scale,
        base.unwrap_or(0.0),
        freqs.is_some() as u8 as f32,
        matches!(offset, RopeOffset::PerRow(_)) as u8 as f32,
        at as f32,
        Rounding::of(x.dtype()) as u8 as f32,
    ];
    let mut inputs = vec![x];
    inputs.extend(freqs);
    if let RopeOffset::PerRow(o) = &offset {
        inputs.push(o);
    }
    // The node widens a 16-bit `x` to float32 (exact); its float32 result holds values of
    // `x`'s dtype, so the cast back is exact.
    let y = cpu_kernel_f32("Rope", ROPE, &params, &inputs, &x.shape())?;
    Ok(Some(if x.dtype() == Dtype::Float32 { y } else { y.astype(x.dtype())? }))
}

const ROPE: KernelF32 = |params, inputs, out| {
    let [b, heads, t, d, dims] = [0, 1, 2, 3, 4].map(|i| params[i] as usize);
    let (traditional, scale, base, has_freqs, per_row, at) = (params[5] != 0.0, params[6], params[7], params[8] != 0.0, params[9] != 0.0, params[10]);
    let rounding = Rounding::from_param(params[11]);
    let half = dims / 2;
    let x = inputs[0];
    let freqs = if has_freqs { inputs.get(1).copied() } else { None };
    let offsets = if per_row { inputs.get(1 + has_freqs as usize).copied() } else { None };
    let ok = x.len() == out.len()
        && out.len() == b * heads * t * d
        && dims <= d
        && freqs.is_none_or(|f| f.len() == half)
        && (!per_row || offsets.is_some_and(|o| o.len() == b));
    if !ok || out.is_empty() {
        out.fill(f32::NAN);
        return;
    }
    let inv = frequencies(base, half, freqs);
    // One table of cos and sin per distinct offset: per batch row, or one for all.
    let tables: Vec<Vec<(f32, f32)>> = match offsets {
        Some(o) => o.iter().map(|&off| angles(t, off, scale, &inv, rounding)).collect(),
        None => vec![angles(t, at, scale, &inv, rounding)],
    };
    let head = t * d;
    par_chunks_at(out, head, PARALLEL_MIN, |part, start| {
        for (i, oh) in part.chunks_exact_mut(head).enumerate() {
            let unit = start / head + i;
            let table = &tables[if per_row { unit / heads } else { 0 }];
            let xh = &x[unit * head..][..head];
            for ((xr, or), cs) in xh.chunks_exact(d).zip(oh.chunks_exact_mut(d)).zip(table.chunks_exact(half)) {
                rotate(xr, or, cs, traditional, rounding);
            }
        }
    });
};

/// `f_i` for `i < half`: `1 / freqs_i`, or MLX's `exp(f32(-i) * c)` with
/// `c = logf(base) / half` (a float `log`, as `std::log` of a float).
fn frequencies(base: f32, half: usize, freqs: Option<&[f32]>) -> Vec<f32> {
    match freqs {
        Some(f) => f.iter().map(|&v| 1.0 / v).collect(),
        None => {
            let c = base.ln() / half as f32;
            // `arange(0, -half, -1)`: exact integers from +0.
            let mut f: Vec<f32> = (0..half).map(|i| (0.0 - i as f32) * c).collect();
            exp_all(&mut f);
            f
        }
    }
}

crate::avx2_fma_dispatch!(fn exp_all(v: &mut [f32]) => exp_all_body);

/// MLX's `exp` of each value (its fused multiply-adds one instruction each with FMA).
#[inline(always)]
fn exp_all_body(v: &mut [f32]) {
    v.iter_mut().for_each(|x| *x = cpu_exp(*x));
}

/// `(cos, sin)` of `theta = p * f_i` for each position `p` of `t` from
/// `offset` (`t` rows of `f.len()`), rounded to `x`'s dtype.
fn angles(t: usize, offset: f32, scale: f32, f: &[f32], rounding: Rounding) -> Vec<(f32, f32)> {
    let theta: Vec<f32> = (0..t).flat_map(|i| f.iter().map(move |&fi| ((i as f32 + offset) * scale) * fi)).collect();
    let mut out = vec![(0f32, 0f32); theta.len()];
    cos_sin(&theta, &mut out);
    if rounding != Rounding::None {
        out.iter_mut().for_each(|(c, s)| (*c, *s) = (rounding.round(*c), rounding.round(*s)));
    }
    out
}

crate::avx2_fma_dispatch!(fn cos_sin(theta: &[f32], out: &mut [(f32, f32)]) => cos_sin_body);

/// Blocks of 64: the arithmetic form (it vectorizes) unless an angle needs libm.
#[inline(always)]
fn cos_sin_body(theta: &[f32], out: &mut [(f32, f32)]) {
    for (tb, ob) in theta.chunks(64).zip(out.chunks_mut(64)) {
        if tb.iter().fold(false, |any, &v| any | sin_needs_libm(v)) {
            tb.iter().zip(ob.iter_mut()).for_each(|(&v, o)| *o = (cpu_cos(v), cpu_sin(v)));
        } else {
            tb.iter().zip(ob.iter_mut()).for_each(|(&v, o)| *o = (cpu_cos_reduced(v), cpu_sin_reduced(v)));
        }
    }
}

/// One row of `d`: its first `dims = 2 * cs.len()` values rotated in pairs,
/// the rest copied.
#[inline]
fn rotate(x: &[f32], out: &mut [f32], cs: &[(f32, f32)], traditional: bool, rounding: Rounding) {
    let half = cs.len();
    let r = |v: f32| rounding.round(v);
    for (i, &(c, s)) in cs.iter().enumerate() {
        let (a, b) = if traditional { (2 * i, 2 * i + 1) } else { (i, half + i) };
        let (x1, x2) = (x[a], x[b]);
        if rounding == Rounding::None {
            out[a] = x1 * c - x2 * s;
            out[b] = x1 * s + x2 * c;
        } else {
            out[a] = r(r(x1 * c) - r(x2 * s));
            out[b] = r(r(x1 * s) + r(x2 * c));
        }
    }
    out[2 * half..].copy_from_slice(&x[2 * half..]);
}
