//! llama.cpp's MXFP4 (GPT-OSS's experts) as MLX's `mxfp4` mode, exactly: both are the OCP
//! microscaling format, 32 four-bit E2M1 values sharing one E8M0 scale byte. ggml's block of
//! 17 bytes is the scale, then 16 bytes whose low nibbles hold values 0-15 and high nibbles
//! values 16-31; MLX packs the values in order, two to a byte (the even one low), with the
//! scale bytes beside them in a uint8 array. Only the nibbles move: ggml's `value * 2^(e-128)`
//! over its doubled table is MLX's `value * 2^(e-127)` over E2M1's own.
use rayon::prelude::*;

use crate::error::{LmError, Result};
use mlx::{Array, Dtype};

const BLOCK_BYTES: usize = 17;
const VALUES: usize = 32;
/// Blocks per task on the rayon pool.
const PARALLEL_BLOCKS: usize = 4096;

/// An MXFP4 tensor of `rows` rows of `cols` values, from its `raw` bytes (rows of whole blocks,
/// as the header check has seen to): MLX's packed uint32 weight `[rows, cols / 8]` and uint8
/// scales `[rows, cols / 32]`.
pub fn convert(rows: usize, cols: usize, raw: &[u8]) -> Result<(Array, Array)> {
    let blocks = rows * cols / VALUES;
    let (mut w, mut s) = (vec![0u8; blocks * VALUES / 2], vec![0u8; blocks]);
    w.par_chunks_mut(VALUES / 2 * PARALLEL_BLOCKS)
        .zip(s.par_chunks_mut(PARALLEL_BLOCKS))
        .zip(raw.par_chunks(BLOCK_BYTES * PARALLEL_BLOCKS))
        .for_each(|((w, s), raw)| {
            for (i, block) in raw.chunks_exact(BLOCK_BYTES).enumerate() {
                s[i] = block[0];
                repack(&block[1..], &mut w[i * VALUES / 2..(i + 1) * VALUES / 2]);
            }
        });
    let mlx = |e: mlx::Error| LmError::Mlx(e.message);
    let w = Array::from_bytes(&w, &[rows as i32, (cols / 8) as i32], Dtype::Uint32).map_err(mlx)?;
    let s = Array::from_bytes(&s, &[rows as i32, (cols / VALUES) as i32], Dtype::Uint8).map_err(mlx)?;
    Ok((w, s))
}

/// ggml's 16 nibble bytes (value `j` low in byte `j`, value `j + 16` high) in MLX's order
/// (values `2k` and `2k + 1` in byte `k`, the even one low).
fn repack(qs: &[u8], out: &mut [u8]) {
    let value = |i: usize| if i < 16 { qs[i] & 0xF } else { qs[i - 16] >> 4 };
    for (k, o) in out.iter_mut().enumerate() {
        *o = value(2 * k) | (value(2 * k + 1) << 4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value lands where MLX reads it: value `i` at nibble `i % 8` of word `i / 8`.
    #[test]
    fn values_land_in_order() {
        // Values 0-15 are 0-15 (low nibbles), values 16-31 are 15 down to 0 (high nibbles).
        let mut qs = [0u8; 16];
        for (j, q) in qs.iter_mut().enumerate() {
            *q = (j as u8) | ((15 - j as u8) << 4);
        }
        let mut out = [0u8; 16];
        repack(&qs, &mut out);
        let words: Vec<u32> = out.chunks(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        for i in 0..32 {
            let want = if i < 16 { i } else { 31 - i };
            assert_eq!((words[i / 8] >> (4 * (i % 8))) & 0xF, want as u32, "value {i}");
        }
    }
}
