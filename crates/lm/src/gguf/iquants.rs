//! llama.cpp's IQ4_NL and IQ4_XS (what its imatrix quantizations of that name hold) as MLX
//! affine layers at 8 bits, groups of 32, exactly. A weight is `d * kv[q]`, `kv` a fixed table
//! of sixteen integers from -127 to 113 (a non-uniform grid MLX cannot hold in 4 bits), with `d`
//! per block of 32 (IQ4_NL: float16) or per 32 of a 256-weight super-block (IQ4_XS:
//! `d * (ls - 32)`, a 6-bit `ls`). So the 8-bit value `kv[q] + 127` (0..240), scale `d` and
//! bias `-127 * d` (float32) give it: `d` has at most 16 significant bits, so `d * value`
//! (24 bits), `127 * d` (23) and their difference (`d * kv[q]`, 23) are all exact.
use super::file::GgmlType;
use super::kquants::{affine, f16_at};
use crate::error::Result;
use mlx::Array;

/// llama.cpp's `kvalues_iq4nl`.
const KV: [i32; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];
/// Added to each table value so that all are 0..240.
const OFFSET: i32 = 127;

pub fn is_iquant(t: GgmlType) -> bool {
    matches!(t, GgmlType::IQ4_NL | GgmlType::IQ4_XS)
}

/// An IQ4_NL or IQ4_XS tensor's (weight, scales, biases) from its `raw` bytes (rows of whole
/// blocks, as the header check has seen to).
pub fn convert(t: GgmlType, rows: usize, cols: usize, raw: &[u8]) -> Result<(Array, Array, Array)> {
    affine(t, rows, cols, raw, if t == GgmlType::IQ4_NL { iq4_nl } else { iq4_xs })
}

/// 32 weights of 16 nibble bytes at scale `d`: byte `j` holds weight `j` (low nibble) and
/// `j + 16` (high), as Q4_0.
fn group(qs: &[u8], d: f32, w: &mut [u8], scale: &mut f32, bias: &mut f32) {
    *scale = d;
    *bias = -(OFFSET as f32) * d;
    for j in 0..16 {
        w[j] = (KV[(qs[j] & 0xF) as usize] + OFFSET) as u8;
        w[j + 16] = (KV[(qs[j] >> 4) as usize] + OFFSET) as u8;
    }
}

/// IQ4_NL (18 bytes): float16 d, 16 nibble bytes.
fn iq4_nl(block: &[u8], w: &mut [u8], scales: &mut [f32], biases: &mut [f32]) {
    group(&block[2..18], f16_at(block, 0), w, &mut scales[0], &mut biases[0]);
}

/// IQ4_XS (136 bytes): float16 d, the eight 6-bit scales' top two bits in a u16 (two per
/// group, from bit 0) and low four in four bytes (two per byte, the low nibble first), then
/// 16 nibble bytes per group.
fn iq4_xs(block: &[u8], w: &mut [u8], scales: &mut [f32], biases: &mut [f32]) {
    let (d, high) = (f16_at(block, 0), u16::from_le_bytes([block[2], block[3]]));
    for g in 0..8 {
        let ls = ((block[4 + g / 2] >> (4 * (g % 2))) & 0xF) as i32 | (((high >> (2 * g)) & 3) as i32) << 4;
        let qs = &block[8 + 16 * g..8 + 16 * (g + 1)];
        group(qs, d * (ls - 32) as f32, &mut w[32 * g..32 * (g + 1)], &mut scales[g], &mut biases[g]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IQ4_XS block with every table index and the scales at both ends of their range:
    /// each weight comes back as `d * (ls - 32) * kv[q]`, bit for bit, through MLX's
    /// `scale * value + bias`.
    #[test]
    fn iq4_xs_weights_are_exact_at_8_bits() {
        let ls = |g: usize| [0u8, 63, 1, 62, 32, 31, 17, 45][g];
        let q = |i: usize| (i * 7 % 16) as u8;
        let mut block = [0u8; 136];
        let d = mlx::cpu::half::f16_value(mlx::cpu::half::f16_bits(0.000_731));
        block[0..2].copy_from_slice(&mlx::cpu::half::f16_bits(d).to_le_bytes());
        let mut high = 0u16;
        for g in 0..8 {
            block[4 + g / 2] |= (ls(g) & 0xF) << (4 * (g % 2));
            high |= ((ls(g) >> 4) as u16) << (2 * g);
            for j in 0..32 {
                let at = 8 + 16 * g + j % 16;
                block[at] |= q(32 * g + j) << if j < 16 { 0 } else { 4 };
            }
        }
        block[2..4].copy_from_slice(&high.to_le_bytes());
        let (mut w, mut s, mut z) = ([0u8; 256], [0f32; 8], [0f32; 8]);
        iq4_xs(&block, &mut w, &mut s, &mut z);
        for i in 0..256 {
            let want = d * (ls(i / 32) as i32 - 32) as f32 * KV[q(i) as usize] as f32;
            assert_eq!(s[i / 32] * w[i] as f32 + z[i / 32], want, "weight {i}");
        }
    }
}
