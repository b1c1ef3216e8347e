//! llama.cpp's K-quants (Q2_K to Q6_K: what its Q2_K, Q3_K_M, Q4_K_M and
//! Q5_K_M files hold) as MLX affine quantized layers, groups of 32. MLX's GGUF
//! reader turns Q4_K and Q6_K into float16 and refuses the others, so a file
//! with K-quants is read here, tensor by tensor.
//!
//! - Q4_K and Q5_K: per super-block of 256 weights, float16 `d` and `dmin`,
//!   and per sub-block of 32 a 6-bit scale `sc` and min `m`; a weight is
//!   `d * sc * q - dmin * m`. That is MLX's affine form exactly: scale
//!   `d * sc` and bias `-(dmin * m)` in float32 (both exact: 11 + 6 bits),
//!   and `q` as the packed value (4 bits; Q5_K's 5 bits packed at 8, which
//!   the CPU kernels run). `scale * q + bias` then rounds once where llama.cpp's
//!   `d1 * q - m1` rounds once, so the weights are the stored ones, bit for bit.
//! - Q3_K: sub-blocks of 16, a weight `d * s * q` with a 6-bit signed scale
//!   `s` (-32..31) and `q` in -4..3, so `s * q` is an integer in -124..128
//!   whatever the two sub-blocks of a group are: 8 bits with scale `d` and
//!   bias `-124 * d` (float32) hold it exactly (`d * (s * q + 124) - 124 * d`
//!   rounds to `d * s * q`, which has at most 19 significant bits).
//! - Q2_K and Q6_K: sub-blocks of 16 with a scale each (Q2_K also a min),
//!   which MLX cannot group, and no common 8-bit grid for two of them, so the
//!   weights (as llama.cpp computes them, in float32) are quantized again by
//!   MLX's own `quantize` at 8 bits in groups of 32: each within one step of
//!   that 8-bit grid of its stored value (MLX's quantize keeps each group's
//!   largest magnitude exact, so the other end can round by up to a step).
use mlx::cpu::half::f16_value;
use mlx::quant::{quantize, Mode};
use mlx::{Array, Dtype};
use rayon::prelude::*;

use super::file::GgmlType;
use crate::error::{LmError, Result};

/// Weights per super-block.
const QK: usize = 256;
/// MLX's group for every converted layer.
const GROUP: usize = 32;
/// Blocks one task of the parallel conversion takes.
const PARALLEL_BLOCKS: usize = 256;
/// Rows requantized per call of MLX's `quantize` (bounds the float32 copy of
/// a large embedding: 8 MB at 1024 columns).
const REQUANTIZED_ROWS: usize = 2048;

pub fn is_kquant(t: GgmlType) -> bool {
    matches!(t, GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K)
}

/// A K-quant tensor's (weight, scales, biases) from its `raw` bytes: a
/// `rows` x `cols` matrix, whose size the header check has matched to its
/// type (rows of whole blocks).
pub fn convert(t: GgmlType, rows: usize, cols: usize, raw: &[u8]) -> Result<(Array, Array, Array)> {
    let mlx = |e: mlx::Error| LmError::Mlx(e.message);
    match t {
        GgmlType::Q3_K => affine(t, rows, cols, raw, q3_k),
        GgmlType::Q4_K => affine(t, rows, cols, raw, q4_k),
        GgmlType::Q5_K => affine(t, rows, cols, raw, q5_k),
        GgmlType::Q2_K | GgmlType::Q6_K => {
            let decode: fn(&[u8], &mut [f32]) = if t == GgmlType::Q2_K { q2_k } else { q6_k };
            let (blocks_per_row, block_bytes) = (cols / QK, t.block_bytes());
            let (mut ws, mut ss, mut zs) = (Vec::new(), Vec::new(), Vec::new());
            let mut values = vec![0f32; REQUANTIZED_ROWS.min(rows) * cols];
            for first in (0..rows).step_by(REQUANTIZED_ROWS) {
                let n = REQUANTIZED_ROWS.min(rows - first);
                let blocks = &raw[first * blocks_per_row * block_bytes..(first + n) * blocks_per_row * block_bytes];
                values[..n * cols].par_chunks_mut(QK * PARALLEL_BLOCKS).zip(blocks.par_chunks(block_bytes * PARALLEL_BLOCKS)).for_each(
                    |(y, blocks)| {
                        for (block, y) in blocks.chunks_exact(block_bytes).zip(y.chunks_exact_mut(QK)) {
                            decode(block, y);
                        }
                    },
                );
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

/// One block's weights, packed at the layer's bits, and its groups' scales and biases.
pub type BlockFn = fn(&[u8], &mut [u8], &mut [f32], &mut [f32]);

/// (weight, scales, biases) of a tensor of type `t` whose blocks each map exactly to MLX
/// affine groups of 32 with float32 scales and biases (`block` decodes one).
pub fn affine(t: GgmlType, rows: usize, cols: usize, raw: &[u8], block: BlockFn) -> Result<(Array, Array, Array)> {
    let mlx = |e: mlx::Error| LmError::Mlx(e.message);
    let shape = |n: usize| [rows as i32, n as i32];
    let (b, n, size) = (super::config::loaded_bits(t).unwrap_or(8), t.block_values(), t.block_bytes());
    let (mut w, mut s, mut z) = (vec![0u8; rows * cols * b / 8], vec![0f32; rows * cols / GROUP], vec![0f32; rows * cols / GROUP]);
    let (bytes, groups) = (n * b / 8, n / GROUP);
    // Runs of blocks on every core: a large model's tensors convert in a fraction of the time.
    w.par_chunks_mut(bytes * PARALLEL_BLOCKS)
        .zip(s.par_chunks_mut(groups * PARALLEL_BLOCKS))
        .zip(z.par_chunks_mut(groups * PARALLEL_BLOCKS))
        .zip(raw.par_chunks(size * PARALLEL_BLOCKS))
        .for_each(|(((w, s), z), raw)| {
            for (i, raw) in raw.chunks_exact(size).enumerate() {
                let g = i * groups..(i + 1) * groups;
                block(raw, &mut w[i * bytes..(i + 1) * bytes], &mut s[g.clone()], &mut z[g]);
            }
        });
    let w = Array::from_bytes(&w, &shape(cols * b / 32), Dtype::Uint32).map_err(mlx)?;
    let s = Array::from_slice(&s, &shape(cols / GROUP)).map_err(mlx)?;
    let z = Array::from_slice(&z, &shape(cols / GROUP)).map_err(mlx)?;
    Ok((w, s, z))
}

pub fn f16_at(b: &[u8], at: usize) -> f32 {
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

/// Q3_K's offset: `s * q + 124` is in 0..252 for every 6-bit signed scale
/// `s` and `q` in -4..3.
const Q3_OFFSET: i32 = 124;

/// Sub-block `j`'s 6-bit scale from a Q3_K block's 12 scale bytes: its low
/// four bits in byte `j` (low nibble) or `j - 8` (high nibble), its top two in
/// byte `8 + j % 4` at bit `2 * (j / 4)`; stored with 32 added.
fn scale3(j: usize, sc: &[u8]) -> i32 {
    let low = if j < 8 { sc[j] & 0xF } else { sc[j - 8] >> 4 };
    let high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
    (low | high << 4) as i32 - 32
}

/// Q3_K (110 bytes: 32 of high bits, 64 of low bit pairs, 12 scale bytes,
/// float16 d) as 8-bit values `s * q + 124`, scale `d` and bias `-124 * d`.
/// Weight `128 h + 32 k + l` has its low two bits at bit `2 k` of
/// `qs[32 h + l]` and its high bit at bit `4 h + k` of `hmask[l]`; a clear
/// high bit subtracts 4.
fn q3_k(block: &[u8], w: &mut [u8], scales: &mut [f32], biases: &mut [f32]) {
    let (hmask, qs, sc, d) = (&block[0..32], &block[32..96], &block[96..108], f16_at(block, 108));
    scales.fill(d);
    biases.fill(-(Q3_OFFSET as f32) * d);
    for (i, o) in w[..QK].iter_mut().enumerate() {
        let (h, k, l) = (i / 128, i % 128 / 32, i % 32);
        let low = ((qs[32 * h + l] >> (2 * k)) & 3) as i32;
        let q = if hmask[l] >> (i / 32) & 1 == 1 { low } else { low - 4 };
        *o = (scale3(i / 16, sc) * q + Q3_OFFSET) as u8;
    }
}

/// Q2_K (84 bytes: 16 scale bytes, 64 of bit pairs, float16 d and dmin) as
/// float32 weights, computed as llama.cpp computes them:
/// `(d * sc) * q - dmin * m` with `sc` and `m` the low and high nibbles of
/// sub-block `i / 16`'s byte. Weight `128 h + 32 k + l` is at bit `2 k` of
/// `qs[32 h + l]`.
fn q2_k(block: &[u8], y: &mut [f32]) {
    let (sc, qs, d, dmin) = (&block[0..16], &block[16..80], f16_at(block, 80), f16_at(block, 82));
    for (i, y) in y[..QK].iter_mut().enumerate() {
        let (h, k, l) = (i / 128, i % 128 / 32, i % 32);
        let q = (qs[32 * h + l] >> (2 * k)) & 3;
        let s = sc[i / 16];
        *y = (d * (s & 0xF) as f32) * q as f32 - dmin * (s >> 4) as f32;
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

    /// A Q3_K block packed as llama.cpp's quantizer packs it, with scales at
    /// both ends of their range (stored 0 and 63: -32 and 31) and every `q`:
    /// each weight comes back as `d * s * q`, bit for bit, through MLX's
    /// `scale * value + bias`.
    #[test]
    fn q3_k_weights_are_exact_at_8_bits() {
        let scale = |j: usize| [0u8, 63, 1, 62, 31, 32, 33, 17, 45, 5, 60, 2, 48, 29, 11, 40][j];
        let q = |i: usize| (i * 5 % 8) as i32 - 4;
        let mut block = [0u8; 110];
        for j in 0..16 {
            let s = scale(j);
            block[96 + if j < 8 { j } else { j - 8 }] |= (s & 0xF) << if j < 8 { 0 } else { 4 };
            block[96 + 8 + j % 4] |= (s >> 4) << (2 * (j / 4));
        }
        for i in 0..QK {
            let u = (q(i) + 4) as u8;
            let (h, k, l) = (i / 128, i % 128 / 32, i % 32);
            block[32 + 32 * h + l] |= (u & 3) << (2 * k);
            block[l] |= (u >> 2) << (i / 32);
        }
        let d = 0.000_123_4f32;
        let d16 = mlx::cpu::half::f16_bits(d);
        block[108..110].copy_from_slice(&d16.to_le_bytes());
        let d = f16_value(d16);
        let (mut w, mut s, mut z) = ([0u8; QK], [0f32; 8], [0f32; 8]);
        q3_k(&block, &mut w, &mut s, &mut z);
        for i in 0..QK {
            let want = d * (scale(i / 16) as i32 - 32) as f32 * q(i) as f32;
            assert_eq!(s[i / 32] * w[i] as f32 + z[i / 32], want, "weight {i}");
        }
    }

    /// A Q2_K block with every nibble of scale and min and every `q`:
    /// `(d * sc) * q - dmin * m` per weight, in index order.
    #[test]
    fn q2_k_weights_land_in_index_order() {
        let (sc, m, q) = (|j: usize| (j * 7 % 16) as u8, |j: usize| (15 - j) as u8, |i: usize| (i * 3 % 4) as u8);
        let mut block = [0u8; 84];
        for j in 0..16 {
            block[j] = sc(j) | m(j) << 4;
        }
        for i in 0..QK {
            let (h, k, l) = (i / 128, i % 128 / 32, i % 32);
            block[16 + 32 * h + l] |= q(i) << (2 * k);
        }
        block[80..82].copy_from_slice(&0x3800u16.to_le_bytes());
        block[82..84].copy_from_slice(&0x3400u16.to_le_bytes());
        let mut y = [0f32; QK];
        q2_k(&block, &mut y);
        for (i, &v) in y.iter().enumerate() {
            assert_eq!(v, 0.5 * sc(i / 16) as f32 * q(i) as f32 - 0.25 * m(i / 16) as f32, "weight {i}");
        }
    }
}
