//! A causal prompt's attention weights, `softmax(where(mask, q k^T, lowest))`
//! with the bits of MLX's CPU ops, without scoring the masked half.
//!
//! MLX scores every query against every key (one `cblas_sgemm` per head) and
//! masks half of them away. Here the queries go in blocks of `BLOCK` rows,
//! each scored against only the keys up to its last query by the same
//! OpenBLAS call on fewer rows and columns, and `cpu::math`'s causal softmax
//! (`softmax_causal_last`) reads only those. At a 384-token prompt that is 58%
//! of the products.
//!
//! Whether a score's bits survive the smaller call is OpenBLAS's business:
//! with its AVX-512 kernels (SkylakeX, Cooperlake, Sapphire Rapids core types)
//! each score is one run over the head dimension, whatever the call's size, as
//! long as the call stays off its small-matrix kernel (a block's rows times
//! columns above 1200, which blocks of at least 64 rows keep); its Haswell and
//! Zen kernels sum differently by tile. So the first use compares this path
//! with the whole product on probe shapes, and it runs only if every bit
//! agrees; otherwise (and with `MLX_NODE_ATTENTION_KERNEL=0`, or no OpenBLAS
//! linked) the caller runs MLX's product.
use std::sync::OnceLock;

use mlx_sys as sys;

use crate::cpu::kernel::{cpu_kernel_f32, Kernel, KernelF32};
use crate::cpu::math::{par_chunks_at, softmax_causal_last, softmax_rows_causal, PARALLEL_MIN};
use crate::{Array, Dtype, Result};

/// Query rows per block; the last block takes the rest (up to `2 * BLOCK - 1`).
const BLOCK: usize = 64;

/// The attention weights of queries `q` `[..., L, D]` (scaled; the leading axes
/// `B, n_kv[, repeats]`) against keys `k` `[B, n_kv, S, D]`, the queries being
/// the last `L` of the `S` positions: what `softmax_causal_last(q @ k^T)` gives
/// (keys broadcast over the repeats), as `[..., L, S]`. `None` where this path
/// does not apply: switched off or not calibrated (`active`), not float32, fewer than
/// `2 * BLOCK` queries, more queries than keys, shapes that do not fit.
pub fn causal_weights(q: &Array, k: &Array) -> Result<Option<Array>> {
    if q.dtype() != Dtype::Float32 || k.dtype() != Dtype::Float32 || q.ndim() < 3 || k.ndim() != 4 {
        return Ok(None);
    }
    let (l, d, s) = (q.dim(-2) as usize, q.dim(-1) as usize, k.dim(2) as usize);
    let mats = q.size() / (l * d).max(1);
    let kv_mats = (k.dim(0) * k.dim(1)) as usize;
    let fits = l >= 2 * BLOCK
        && s >= l
        && d > 0
        && k.dim(3) as usize == d
        && q.dim(0) == k.dim(0)
        && q.dim(1) == k.dim(1)
        && kv_mats > 0
        && mats.is_multiple_of(kv_mats)
        // Sizes travel as float parameters: exact below 2^24 (and OpenBLAS's `int`s).
        && [mats, s, d].iter().all(|&n| n < 1 << 24);
    if !fits || !active() {
        return Ok(None);
    }
    Ok(Some(run(q, k, mats, mats / kv_mats)?))
}

fn run(q: &Array, k: &Array, mats: usize, repeats: usize) -> Result<Array> {
    let (l, d, s) = (q.dim(-2), q.dim(-1), k.dim(2));
    let mut shape = q.shape();
    *shape.last_mut().expect("q has axes") = s;
    let params = [mats, repeats, l as usize, s as usize, d as usize].map(|v| v as f32);
    cpu_kernel_f32("CausalWeights", WEIGHTS, &params, &[q, k], &shape)
}

/// The row blocks `[r0, r1)` of `l` queries.
fn blocks(l: usize) -> impl Iterator<Item = (usize, usize)> {
    let n = (l / BLOCK).max(1);
    (0..n).map(move |j| (j * BLOCK, if j + 1 == n { l } else { (j + 1) * BLOCK }))
}

const WEIGHTS: KernelF32 = |params, inputs, out| {
    let [mats, repeats, l, s, d] = [0, 1, 2, 3, 4].map(|i| params[i] as usize);
    let ok = inputs.len() == 2
        && repeats > 0
        && mats.is_multiple_of(repeats)
        && l > 0
        && l <= s
        && inputs[0].len() == mats * l * d
        && inputs[1].len() == mats / repeats * s * d
        && out.len() == mats * l * s;
    if !ok {
        out.fill(f32::NAN);
        return;
    }
    let (q, k) = (inputs[0], inputs[1]);
    for m in 0..mats {
        let keys = &k[m / repeats * s * d..];
        for (r0, r1) in blocks(l) {
            // The keys up to the block's last query.
            let cols = s - l + r1;
            let rows = &q[(m * l + r0) * d..];
            let dst = &mut out[(m * l + r0) * s..];
            // SAFETY: `rows` holds the block's `r1 - r0` rows of `d`, `keys` at least
            // `cols <= s` rows of `d`, `dst` the block's `r1 - r0` output rows of `s`,
            // of which the call writes the first `cols` each; the sizes are below 2^24.
            let rc = unsafe {
                sys::mlxn_sgemm_nt(
                    (r1 - r0) as i32,
                    cols as i32,
                    d as i32,
                    rows.as_ptr(),
                    d as i32,
                    keys.as_ptr(),
                    d as i32,
                    dst.as_mut_ptr(),
                    s as i32,
                )
            };
            if rc != 0 {
                out.fill(f32::NAN);
                return;
            }
        }
    }
    // Reads each row's prefix only (the scores written above), writes all of it.
    par_chunks_at(out, s, PARALLEL_MIN, |part, start| softmax_rows_causal(part, s, l, start / s));
};

/// Whether this path runs in this process: `MLX_NODE_ATTENTION_KERNEL` on and
/// the calibration passed (run at the first call).
pub fn active() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    Kernel::Attention.enabled() && *OK.get_or_init(|| calibrate().unwrap_or(false))
}

/// Probe shapes `(B, n_kv, repeats, L, S, D)`: a short prompt and a long one
/// (its calls above OpenBLAS's threading threshold), grouped heads, a chunk
/// after cached keys, a last block of odd length, head dimensions of 64 to 128.
const PROBES: [(i32, i32, i32, i32, i32, i32); 6] = [
    (1, 1, 1, 128, 128, 64),
    (1, 2, 2, 200, 200, 128),
    (1, 1, 1, 150, 407, 128),
    (1, 1, 2, 384, 384, 128),
    (2, 1, 1, 130, 130, 96),
    (1, 1, 1, 700, 700, 80),
];

/// This path against the whole product (`cpu_kernel`'s own switch aside), bit
/// for bit, on `PROBES`.
fn calibrate() -> Result<bool> {
    for (i, &(b, n_kv, rep, l, s, d)) in PROBES.iter().enumerate() {
        let data = |shape: &[i32], seed: u64| -> Result<Array> {
            let n = shape.iter().product();
            crate::cpu::gemv::probe_data(n, seed, -2.0, 2.0)?.reshape(shape)
        };
        let q = data(&[b, n_kv, rep, l, d], 2 * i as u64 + 1)?;
        let k = data(&[b, n_kv, s, d], 2 * i as u64 + 2)?;
        let want = softmax_causal_last(&crate::fast::grouped_scores(&q, &k)?)?;
        let got = run(&q, &k, (b * n_kv * rep) as usize, rep as usize)?;
        let (want, got) = (want.to_vec::<f32>()?, got.to_vec::<f32>()?);
        if want.len() != got.len() || want.iter().zip(&got).any(|(a, b)| a.to_bits() != b.to_bits()) {
            return Ok(false);
        }
    }
    Ok(true)
}
