//! llama.cpp's K-quants (Q4_K, Q5_K, Q6_K: what its Q4_K_M and Q5_K_M files
//! hold) as MLX affine quantized layers, groups of 32. MLX's GGUF reader turns
//! Q4_K and Q6_K into float16 and refuses Q5_K, so a file with K-quants is
//! read here, tensor by tensor.
//!
//! - Q4_K and Q5_K: per super-block of 256 weights, float16 `d` and `dmin`,
//!   and per sub-block of 32 a 6-bit scale `sc` and min `m`; a weight is
//!   `d * sc * q - dmin * m`. That is MLX's affine form exactly: scale
//!   `d * sc` and bias `-(dmin * m)` in float32 (both exact: 11 + 6 bits),
//!   and `q` as the packed value (4 bits; Q5_K's 5 bits packed at 8, which
//!   the CPU kernels run). `scale * q + bias` then rounds once where llama.cpp's
//!   `d1 * q - m1` rounds once, so the weights are the stored ones, bit for bit.
//! - Q6_K: sub-blocks of 16 with an 8-bit scale each. MLX has no groups of 16,
//!   so the weights (`d * sc * (q - 32)`, as llama.cpp computes them, in
//!   float32) are quantized again by MLX's own `quantize` at 8 bits in groups
//!   of 32: each within one step of that 8-bit grid of its stored value
//!   (MLX's quantize keeps each group's largest magnitude exact, so the
//!   other end can round by up to a step).
use mlx::cpu::half::f16_value;
use mlx::quant::{quantize, Mode};
use mlx::{Array, Dtype};

use super::file::GgmlType;
use crate::error::{LmError, Result};

/// Weights per super-block.
const QK: usize = 256;
/// MLX's group for every converted layer.
const GROUP: usize = 32;
/// Q6_K rows requantized per call of MLX's `quantize` (bounds the float32
/// copy of a large embedding: 8 MB at 1024 columns).
const Q6_ROWS: usize = 2048;

pub fn is_kquant(t: GgmlType) -> bool {
    matches!(t, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K)
}

/// The bits of the converted layer (`weight`'s packing).
fn bits(t: GgmlType) -> usize {
    if t == GgmlType::Q4_K {
        4
    } else {
        8
    }
}

/// A K-quant tensor's (weight, scales, biases) from its `raw` bytes: a
/// `rows` x `cols` matrix, whose size the header check has matched to its
/// type (rows of whole blocks).
pub fn convert(t: GgmlType, rows: usize, cols: usize, raw: &[u8]) -> Result<(Array, Array, Array)> {
    let mlx = |e: mlx::Error| LmError::Mlx(e.message);
    let shape = |n: usize| [rows as i32, n as i32];
    match t {
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let b = bits(t);
            let (mut w, mut s, mut z) = (vec![0u8; rows * cols * b / 8], vec![0f32; rows * cols / GROUP], vec![0f32; rows * cols / GROUP]);
            for (i, block) in raw.chunks_exact(t.block_bytes()).enumerate() {
                let groups = i * QK / GROUP..(i + 1) * QK / GROUP;
                let out = &mut w[i * QK * b / 8..(i + 1) * QK * b / 8];
                if b == 4 {
                    q4_k(block, out, &mut s[groups.clone()], &mut z[groups]);
                } else {
                    q5_k(block, out, &mut s[groups.clone()], &mut z[groups]);
                }
            }
            let w = Array::from_bytes(&w, &shape(cols * b / 32), Dtype::Uint32).map_err(mlx)?;
            let s = Array::from_slice(&s, &shape(cols / GROUP)).map_err(mlx)?;
            let z = Array::from_slice(&z, &shape(cols / GROUP)).map_err(mlx)?;
            Ok((w, s, z))
        }
        GgmlType::Q6_K => {
            let (blocks_per_row, block_bytes) = (cols / QK, t.block_bytes());
            let (mut ws, mut ss, mut zs) = (Vec::new(), Vec::new(), Vec::new());
            let mut values = vec![0f32; Q6_ROWS.min(rows) * cols];
            for first in (0..rows).step_by(Q6_ROWS) {
                let n = Q6_ROWS.min(rows - first);
                let blocks = &raw[first * blocks_per_row * block_bytes..(first + n) * blocks_per_row * block_bytes];
                for (block, y) in blocks.chunks_exact(block_bytes).zip(values.chunks_exact_mut(QK)) {
                    q6_k(block, y);
                }
                let v = Array::from_slice(&values[..n * cols], &[n as i32, cols as i32]).map_err(mlx)?;
                let (w, s, z) = quantize(&v, GROUP as i32, 8, Mode::Affine).map_err(mlx)?;
                ws.push(w);
                ss.push(s);
                zs.push(z.expect("affine quantization has biases"));
            }
            let cat = |parts: &[Array]| Array::concatenate(&parts.iter().collect::<Vec<_>>(), 0).map_err(mlx);
            Ok((cat(&ws)?, cat(&ss)?, cat(&zs)?))
        }
        _ => Err(LmError::InvalidWeights(format!("{} is not a K-quant", t.name()))),
    }
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_value(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// Sub-block `j`'s 6-bit scale and min from a Q4_K/Q5_K block's 12 bytes
/// (llama.cpp's `get_scale_min_k4`): the first four whole in the low six bits
/// of bytes 0-3 and 4-7, the last four split between the low and high
/// nibbles of bytes 8-11 and the top two bits of bytes 0-7.
fn scale_min(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Each sub-block's MLX scale and bias.
fn groups(block: &[u8], scales: &mut [f32], biases: &mut [f32]) {
    let (d, dmin, sc) = (f16_at(block, 0), f16_at(block, 2), &block[4..16]);
    for j in 0..QK / GROUP {
        let (s, m) = scale_min(j, sc);
        scales[j] = d * s as f32;
        biases[j] = -(dmin * m as f32);
    }
}

/// Q4_K (144 bytes: d, dmin, 12 scale bytes, 128 bytes of nibbles): each 32
/// bytes of nibbles hold two sub-blocks, the low nibbles the first. MLX packs
/// 4-bit values in index order, two a byte, the low nibble first.
fn q4_k(block: &[u8], w: &mut [u8], scales: &mut [f32], biases: &mut [f32]) {
    groups(block, scales, biases);
    let qs = &block[16..144];
    for c in 0..4 {
        for half in 0..2 {
            let q = |l: usize| (qs[32 * c + l] >> (4 * half)) & 0xF;
            let out = &mut w[(64 * c + 32 * half) / 2..][..16];
            for (i, o) in out.iter_mut().enumerate() {
                *o = q(2 * i) | (q(2 * i + 1) << 4);
            }
        }
    }
}

/// Q5_K (176 bytes: d, dmin, 12 scale bytes, 32 bytes of fifth bits, 128 of
/// nibbles): as Q4_K, with bit `2c` (first sub-block of pair `c`) or `2c + 1`
/// of `qh[l]` adding 16. Packed at 8 bits: a byte a weight.
fn q5_k(block: &[u8], w: &mut [u8], scales: &mut [f32], biases: &mut [f32]) {
    groups(block, scales, biases);
    let (qh, qs) = (&block[16..48], &block[48..176]);
    for c in 0..4 {
        for half in 0..2 {
            let bit = 1u8 << (2 * c + half);
            for l in 0..32 {
                let high = if qh[l] & bit != 0 { 16 } else { 0 };
                w[64 * c + 32 * half + l] = ((qs[32 * c + l] >> (4 * half)) & 0xF) + high;
            }
        }
    }
}

/// Q6_K (210 bytes: 128 of low nibbles, 64 of high bit pairs, 16 int8 scales,
/// d) as float32 weights, computed as llama.cpp computes them:
/// `(d * sc) * (q - 32)`. Per half of 128 weights, `ql[l]` holds weights `l`
/// and `l + 64` (low, high nibble), `ql[l + 32]` weights `l + 32` and `l + 96`,
/// and `qh[l]` their top two bits in that order (weights `l`, `l + 32`,
/// `l + 64`, `l + 96`); sub-block `i` (16 weights) has scale `sc[i]`.
fn q6_k(block: &[u8], y: &mut [f32]) {
    let (d, sc) = (f16_at(block, 208), &block[192..208]);
    for n in 0..2 {
        let (ql, qh) = (&block[64 * n..64 * n + 64], &block[128 + 32 * n..128 + 32 * n + 32]);
        for l in 0..32 {
            let q = [
                (ql[l] & 0xF) | (qh[l] & 3) << 4,
                (ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4,
                (ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4,
                (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4,
            ];
            for (k, &q) in q.iter().enumerate() {
                let at = 128 * n + 32 * k + l;
                y[at] = (d * sc[at / 16] as i8 as f32) * (q as i32 - 32) as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every sub-block's scale and min round-trips through the 12-byte
    /// packing as llama.cpp's quantizer writes it (`make_qkx2_quants`'
    /// caller): the first four in bytes 0-7, the last four's low nibbles in
    /// bytes 8-11 and their top two bits above bytes 0-7's six.
    #[test]
    fn scale_min_unpacks_all_eight_sub_blocks() {
        let (sc, m): ([u8; 8], [u8; 8]) = ([1, 63, 17, 40, 5, 62, 33, 48], [0, 9, 63, 21, 60, 2, 47, 16]);
        let mut q = [0u8; 12];
        for j in 0..4 {
            q[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
            q[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
            q[j + 8] = (sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4);
        }
        for j in 0..8 {
            assert_eq!(scale_min(j, &q), (sc[j], m[j]), "sub-block {j}");
        }
    }

    /// A Q6_K block whose every weight is known: `q - 32` for weight `i` is
    /// `i % 64 - 32`, scale `i / 16 + 1`, d 0.5.
    #[test]
    fn q6_k_weights_land_in_index_order() {
        let want = |i: usize| 0.5 * (i / 16 + 1) as f32 * ((i % 64) as f32 - 32.0);
        let mut block = [0u8; 210];
        for i in 0..QK {
            let q = (i % 64) as u8;
            let (n, r) = (i / 128, i % 128);
            let (k, l) = (r / 32, r % 32);
            let (lo_byte, shift) = match k {
                0 => (l, 0),
                1 => (l + 32, 0),
                2 => (l, 4),
                _ => (l + 32, 4),
            };
            block[64 * n + lo_byte] |= (q & 0xF) << shift;
            block[128 + 32 * n + l] |= (q >> 4) << (2 * k);
        }
        for (i, s) in block[192..208].iter_mut().enumerate() {
            *s = i as u8 + 1;
        }
        block[208..210].copy_from_slice(&0x3800u16.to_le_bytes());
        let mut y = [0f32; QK];
        q6_k(&block, &mut y);
        for (i, &v) in y.iter().enumerate() {
            assert_eq!(v, want(i), "weight {i}");
        }
    }
}
