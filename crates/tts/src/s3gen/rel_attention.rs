//! ESPnet relative-position self-attention (Transformer-XL style, Appendix B of
//! arXiv:1901.02860) as the S3Gen conformer uses it, and its sinusoidal table.
use lm::weights::Weights;
use mlx::nn::Linear;
use mlx::{Array, Dtype};

use crate::layers::{linear, project};
use crate::Result;

/// The rows of the table for offsets `hi, hi - 1, ..., lo`: `(1, hi - lo + 1, dims)`.
fn offset_table(hi: i32, lo: i32, dims: i32) -> mlx::Result<Array> {
    let n = hi - lo + 1;
    let offsets: Vec<f32> = (0..n).map(|i| (hi - i) as f32).collect();
    let offsets = Array::from_slice(&offsets, &[n, 1])?;
    let inv_freq = Array::arange(0.0, dims as f64, 2.0, Dtype::Float32)?.multiply_scalar(-(10000f64.ln() / dims as f64))?.exp()?;
    let angles = offsets.multiply(&inv_freq.reshape(&[1, dims / 2])?)?;
    Array::stack(&[&angles.sin()?, &angles.cos()?], -1)?.reshape(&[1, n, dims])
}

/// The position table for the last `new` of `len` positions (queries) against
/// all `len` (keys): sinusoids for the relative offsets `len - 1` down to
/// `-(new - 1)`, interleaved sin/cos per frequency, `(1, len + new - 1, dims)`.
/// With `new == len` it is the whole sequence's table; mlx-audio slices the same
/// rows out of a float32 table precomputed for 5000 positions, each row computed alike.
pub fn trailing_positions(len: i32, new: i32, dims: i32) -> mlx::Result<Array> {
    offset_table(len - 1, -(new - 1), dims)
}

/// Keys and values of earlier positions that a forward's queries also attend
/// to (heads first, `(B, H, P, d)` each), as [`RelPositionAttention::forward`]
/// returns them.
pub type KeysValues = (Array, Array);

pub struct RelPositionAttention {
    q: Linear,
    k: Linear,
    v: Linear,
    out: Linear,
    pos: Linear,
    /// Learned per-head biases added to the query for the content (`u`) and
    /// position (`v`) terms.
    bias_u: Array,
    bias_v: Array,
    heads: i32,
    head_dim: i32,
}

impl RelPositionAttention {
    pub fn load(w: &mut Weights, prefix: &str, dims: i32, heads: i32) -> Result<Self> {
        let head_dim = dims / heads;
        Ok(RelPositionAttention {
            q: linear(w, &format!("{prefix}.linear_q"), dims, dims, true)?,
            k: linear(w, &format!("{prefix}.linear_k"), dims, dims, true)?,
            v: linear(w, &format!("{prefix}.linear_v"), dims, dims, true)?,
            out: linear(w, &format!("{prefix}.linear_out"), dims, dims, true)?,
            pos: linear(w, &format!("{prefix}.linear_pos"), dims, dims, false)?,
            bias_u: w.take(&format!("{prefix}.pos_bias_u"), &[heads, head_dim])?,
            bias_v: w.take(&format!("{prefix}.pos_bias_v"), &[heads, head_dim])?,
            heads,
            head_dim,
        })
    }

    /// `x` `(B, T, D)`: the last `T` positions; `earlier`: the keys and values
    /// of the positions before them (none: `x` is the whole sequence). `pos` is
    /// [`trailing_positions`] for `x`'s positions among all, the whole
    /// sequence's [`trailing_positions`]`(T, T)` without `earlier`. Full context (the
    /// inference path has no padding and no chunk mask). Returns the output
    /// and `x`'s own keys and values. After `earlier` (a streamed chunk, compared
    /// with whole renders within a tolerance) the projections run on the
    /// few-row kernel ([`Linear::forward_rows`]).
    pub fn forward(&self, x: &Array, pos: &Array, earlier: Option<&KeysValues>) -> mlx::Result<(Array, KeysValues)> {
        let rows = earlier.is_some();
        let (b, t) = (x.dim(0), x.dim(1));
        let (h, d) = (self.heads, self.head_dim);
        let heads_first = |a: &Array| a.reshape(&[b, t, h, d])?.transpose(&[0, 2, 1, 3]);
        let q = project(&self.q, x, rows)?.reshape(&[b, t, h, d])?;
        let own = (heads_first(&project(&self.k, x, rows)?)?, heads_first(&project(&self.v, x, rows)?)?);
        let (k, v) = match earlier {
            Some((pk, pv)) => (Array::concatenate(&[pk, &own.0], 2)?, Array::concatenate(&[pv, &own.1], 2)?),
            None => own.clone(),
        };
        let p = project(&self.pos, pos, rows)?.reshape(&[pos.dim(0), -1, h, d])?.transpose(&[0, 2, 1, 3])?;

        let q_u = q.add(&self.bias_u)?.transpose(&[0, 2, 1, 3])?;
        let q_v = q.add(&self.bias_v)?.transpose(&[0, 2, 1, 3])?;
        let content = q_u.matmul(&k.swapaxes(-2, -1)?)?;
        let position = rel_shift(&q_v.matmul(&p.swapaxes(-2, -1)?)?, k.dim(2))?;
        let scores = content.add(&position)?.divide_scalar((d as f64).sqrt())?;
        let attn = mlx::cpu::math::softmax_last(&scores)?;
        let y = attn.matmul(&v)?.transpose(&[0, 2, 1, 3])?.reshape(&[b, t, h * d])?;
        Ok((project(&self.out, &y, rows)?, own))
    }
}

/// Turns scores of the last `T` of `len` positions against the relative
/// offsets `len - 1, ..., -(T - 1)` (`x` `(B, H, T, len + T - 1)`) into scores
/// against the `len` keys: `out[i][j] = x[i][j + T-1 - i]`, the offset being
/// query minus key. Pure data movement (ESPnet's pad-and-reshape trick,
/// generalised): row `i` of the result starts `T - 1 + i (len + T - 1)`
/// elements into `x` padded by one column.
fn rel_shift(x: &Array, len: i32) -> mlx::Result<Array> {
    let s = x.shape();
    let (b, h, t, n) = (s[0], s[1], s[2], s[3]);
    debug_assert_eq!(n, len + t - 1);
    let flat = x.pad(&[3], &[0], &[1], 0.0)?.reshape(&[b, h, t * (n + 1)])?;
    flat.slice_axis(2, t - 1, t - 1 + t * n)?.reshape(&[b, h, t, n])?.slice_axis(3, 0, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(a: &Array) -> Vec<f32> {
        a.flatten().unwrap().to_vec::<f32>().unwrap()
    }

    /// The shift picks, for query `i` and key `j`, the column of offset `i - j`.
    #[test]
    fn shift_reads_the_offset_of_each_query_key_pair() {
        for (len, t) in [(1, 1), (5, 5), (7, 3), (6, 1), (9, 9)] {
            let n = len + t - 1;
            // Column c holds offset len - 1 - c; row i is query len - t + i.
            let mut x = Vec::new();
            for i in 0..t {
                for c in 0..n {
                    x.push((1000 * i + (len - 1 - c) + 100) as f32);
                }
            }
            let x = Array::from_slice(&x, &[1, 1, t, n]).unwrap();
            let got = values(&rel_shift(&x, len).unwrap());
            let mut want = Vec::new();
            for i in 0..t {
                for j in 0..len {
                    want.push((1000 * i + (len - t + i - j) + 100) as f32);
                }
            }
            assert_eq!(got, want, "len {len}, {t} queries");
        }
    }

    /// The trailing table is the last rows' slice of the whole one, bit for bit.
    #[test]
    fn trailing_table_is_a_slice_of_the_whole_one() {
        let (len, new, dims) = (11, 4, 16);
        let whole = trailing_positions(len, len, dims).unwrap();
        let tail = trailing_positions(len, new, dims).unwrap();
        assert_eq!(values(&tail), values(&whole.slice_axis(1, 0, len + new - 1).unwrap()));
    }
}
