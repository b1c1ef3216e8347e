//! llama.cpp's 32-weight block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) as MLX
//! affine layers, for files read tensor by tensor (`super::read_each`: those
//! with K-quants, or with Q5_0/Q5_1, which MLX's reader does not load). Each
//! block is one MLX group of 32 with float16 scale and bias, as MLX's reader
//! maps Q4_0, Q4_1 and Q8_0: Q4_0 `d * (q - 8)` as scale `d`, bias `-8 * d`;
//! Q4_1 `d * q + m` as `d`, `m`; Q8_0 `d * q` (signed) as `d`, `-128 * d`
//! with `q + 128` stored; Q5_0 `d * (q - 16)` as `d`, `-16 * d` and Q5_1
//! `d * q + m` as `d`, `m`, their 5-bit values packed at 8 (as the CPU
//! kernels run 5-bit layers). The biases are rounded to float16 as MLX's
//! reader rounds them (exact but for overflow: they are powers of two times
//! `d`), so the weights are the stored ones.
use mlx::cpu::half::{f16_bits, f16_value};
use mlx::{Array, Dtype};

use super::file::GgmlType;
use crate::error::{LmError, Result};

const BLOCK: usize = 32;

pub fn is_block32(t: GgmlType) -> bool {
    matches!(t, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0)
}

/// (weight, scales, biases) of a `rows` x `cols` 32-weight block tensor
/// from its `raw` bytes, whose size the header check has matched to its type.
pub fn convert(t: GgmlType, rows: usize, cols: usize, raw: &[u8]) -> Result<(Array, Array, Array)> {
    let b = super::config::loaded_bits(t).unwrap_or(8);
    let groups = rows * cols / BLOCK;
    let (mut w, mut s, mut z) = (vec![0u8; rows * cols * b / 8], Vec::with_capacity(2 * groups), Vec::with_capacity(2 * groups));
    for (block, out) in raw.chunks_exact(t.block_bytes()).zip(w.chunks_exact_mut(BLOCK * b / 8)) {
        let d = u16::from_le_bytes([block[0], block[1]]);
        let scaled = |k: f32| f16_bits(k * f16_value(d));
        let bias = match t {
            GgmlType::Q4_0 => scaled(-8.0),
            GgmlType::Q5_0 => scaled(-16.0),
            GgmlType::Q8_0 => scaled(-128.0),
            _ => u16::from_le_bytes([block[2], block[3]]),
        };
        s.extend_from_slice(&d.to_le_bytes());
        z.extend_from_slice(&bias.to_le_bytes());
        let q = values(t, block);
        if b == 4 {
            for (i, o) in out.iter_mut().enumerate() {
                *o = q[2 * i] | (q[2 * i + 1] << 4);
            }
        } else {
            out.copy_from_slice(&q);
        }
    }
    let mlx = |e: mlx::Error| LmError::Mlx(e.message);
    let shape = |n: usize| [rows as i32, n as i32];
    Ok((
        Array::from_bytes(&w, &shape(cols * b / 32), Dtype::Uint32).map_err(mlx)?,
        Array::from_bytes(&s, &shape(cols / BLOCK), Dtype::Float16).map_err(mlx)?,
        Array::from_bytes(&z, &shape(cols / BLOCK), Dtype::Float16).map_err(mlx)?,
    ))
}

/// A block's 32 unsigned values in index order. Q4/Q5: weight `j < 16` in
/// the low nibble of byte `j`, weight `j + 16` in its high nibble; Q5's
/// fifth bit of weight `j` is bit `j` of the 32-bit `qh` before them.
fn values(t: GgmlType, block: &[u8]) -> [u8; BLOCK] {
    let mut q = [0u8; BLOCK];
    if t == GgmlType::Q8_0 {
        for (v, &b) in q.iter_mut().zip(&block[2..]) {
            *v = b ^ 0x80;
        }
        return q;
    }
    let (qh, qs) = match t {
        GgmlType::Q4_0 => (0, &block[2..18]),
        GgmlType::Q4_1 => (0, &block[4..20]),
        GgmlType::Q5_0 => (u32::from_le_bytes([block[2], block[3], block[4], block[5]]), &block[6..22]),
        _ => (u32::from_le_bytes([block[4], block[5], block[6], block[7]]), &block[8..24]),
    };
    for j in 0..16 {
        q[j] = (qs[j] & 0xF) | (((qh >> j) & 1) << 4) as u8;
        q[j + 16] = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4) as u8;
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Q5_0's fifth bits: weight `j` takes bit `j` of `qh`, for both halves.
    #[test]
    fn q5_0_values_take_their_fifth_bit() {
        let mut block = [0u8; 22];
        let qh: u32 = 0b1010_0000_0000_0001_0000_0000_0000_0011;
        block[2..6].copy_from_slice(&qh.to_le_bytes());
        for j in 0..16 {
            block[6 + j] = (j as u8) | ((15 - j as u8) << 4);
        }
        let q = values(GgmlType::Q5_0, &block);
        for j in 0..32 {
            let low = if j < 16 { j as u8 } else { 15 - (j as u8 - 16) };
            assert_eq!(q[j], low | ((((qh >> j) & 1) as u8) << 4), "weight {j}");
        }
    }
}
