//! MLX's conversions between float32 and its 16-bit float types on CPUs
//! without native ones (x86: `_MLX_Float16`, `_MLX_BFloat16`), whose every
//! operation is a float32 operation rounded back: kernels that give MLX's bits
//! in those types round as these do.

/// MLX's float to bfloat16 conversion (round to nearest even, any NaN to
/// 0x7FC0), as a float32 holding the bfloat16 value.
pub(crate) fn round_bf16(v: f32) -> f32 {
    if v.is_nan() {
        return f32::from_bits(0x7FC0_0000);
    }
    let u = v.to_bits();
    f32::from_bits(u.wrapping_add(((u >> 16) & 1) + 0x7FFF) & 0xFFFF_0000)
}

/// MLX's float to float16 conversion (`_MLX_Float16(float)`, after
/// Maratyszcza's FP16): round to nearest even, subnormals and overflow to
/// infinity included, by letting a float add do the rounding; a NaN keeps its
/// sign and becomes 0x7D00.
pub fn f16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    let sign = ((u >> 16) & 0x8000) as u16;
    if x.is_nan() {
        return sign | 0x7D00;
    }
    // The exponent, at least float16's smallest normal one, moved to float16's bias.
    let expo = (u & 0x7F80_0000).max(0x3880_0000) + (15 << 23);
    let magic = f32::from_bits(expo) + (x.abs() * f32::from_bits(0x7780_0000)) * f32::from_bits(0x0880_0000);
    let m = magic.to_bits();
    sign | (((m >> 13) & 0x7C00) + (m & 0x0FFF)) as u16
}

/// A float16's value as a float32 (exact; MLX's `operator float`).
pub fn f16_value(h: u16) -> f32 {
    let sign = (h as u32 & 0x8000) << 16;
    // The bits without the sign, shifted to the top of a word.
    let two_base = (h as u32) << 17;
    let v = if two_base < 1 << 27 {
        // Zero or subnormal: the mantissa under a magic exponent, the magic taken off.
        f32::from_bits((126 << 23) | (two_base >> 17)) - 0.5
    } else {
        f32::from_bits((0xE0 << 23) + (two_base >> 4)) * f32::from_bits(0x0780_0000)
    };
    f32::from_bits(v.to_bits() | sign)
}

/// `v` rounded to float16 as MLX rounds, as a float32 holding the value.
pub(crate) fn round_f16(v: f32) -> f32 {
    f16_value(f16_bits(v))
}

/// How a 16-bit output dtype rounds each result MLX stores in it.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Rounding {
    None = 0,
    Bf16 = 1,
    F16 = 2,
}

impl Rounding {
    pub(crate) fn of(dtype: crate::Dtype) -> Rounding {
        match dtype {
            crate::Dtype::Bfloat16 => Rounding::Bf16,
            crate::Dtype::Float16 => Rounding::F16,
            _ => Rounding::None,
        }
    }
    pub(crate) fn from_param(v: f32) -> Rounding {
        [Rounding::Bf16, Rounding::F16].into_iter().find(|r| *r as u8 as f32 == v).unwrap_or(Rounding::None)
    }
    #[inline(always)]
    pub(crate) fn round(self, v: f32) -> f32 {
        match self {
            Rounding::None => v,
            Rounding::Bf16 => round_bf16(v),
            Rounding::F16 => round_f16(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Array, Dtype};

    /// Every float16 reads back to itself, and float32 values (rounding
    /// cases, subnormals, overflow) round to MLX's own `astype` bits.
    #[test]
    fn the_float16_conversions_are_mlxs() {
        let all: Vec<u16> = (0..=u16::MAX).filter(|h| !f16_value(*h).is_nan()).collect();
        assert!(all.iter().all(|&h| f16_bits(f16_value(h)) == h));
        let mut xs: Vec<f32> = all.iter().map(|&h| f16_value(h)).collect();
        // Halfway and near-halfway points, tiny and huge values, from a simple sequence.
        xs.extend((0..20_000u32).map(|i| f32::from_bits(0x3000_0000u32.wrapping_add(i.wrapping_mul(2_654_435_761) >> 3))));
        xs.extend([65_520.0, 65_519.99, 1e-8, 3e-5, -6.1e-5, f32::INFINITY, f32::MIN_POSITIVE]);
        let a = Array::from_slice(&xs, &[xs.len() as i32]).unwrap();
        let want: Vec<f32> = a.astype(Dtype::Float16).unwrap().astype(Dtype::Float32).unwrap().to_vec().unwrap();
        for (x, w) in xs.iter().zip(&want) {
            assert_eq!(round_f16(*x).to_bits(), w.to_bits(), "{x:e}");
        }
    }
}
