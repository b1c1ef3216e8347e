//! MLX-LM's `create_causal_mask`: which of `offset + n` positions each of `n`
//! new queries sees, optionally only the last `window` of them.
use mlx::{Array, Dtype, Result};

/// Boolean `[n, offset + n]`: query `i` (at position `offset + i`) sees key `j`
/// when `j <= offset + i` and, with a window, `offset + i < j + window`.
pub fn causal_mask(n: i32, offset: i32, window: Option<i32>) -> Result<Array> {
    let keys = Array::arange(0.0, (offset + n) as f64, 1.0, Dtype::Int32)?.reshape(&[1, -1])?;
    let queries = Array::arange(offset as f64, (offset + n) as f64, 1.0, Dtype::Int32)?.reshape(&[-1, 1])?;
    let mask = queries.greater_equal(&keys)?;
    match window {
        Some(w) => mask.logical_and(&queries.less(&keys.add_scalar(w as f64)?)?),
        None => Ok(mask),
    }
}
