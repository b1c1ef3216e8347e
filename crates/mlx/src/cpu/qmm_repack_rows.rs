//! Token lookups in an embedding table held only in `qmm_repack`'s layout (a
//! tied LM head's, in fast precision): the ids' columns gathered from the
//! tiles and dequantized with the bits of MLX's `take` then `dequantize`.
//!
//! MLX's CPU `dequantize` computes `scale * q + bias` in the scales' type `T`,
//! each operation a float32 one rounded back to `T` for float16 and bfloat16
//! (`cpu::half`). The layout holds the scales and biases widened exactly to
//! float32 (or in 16 bits where they are 16-bit values), so the same steps on
//! them give the same bits. A lookup is one row of `k` values a decode step
//! (a prompt: a few hundred), next to a matmul over the whole table: scalar
//! code is enough.
use crate::cpu::half::{round_bf16, round_f16};
use crate::cpu::kernel::KernelF32;
use crate::cpu::qmm_int8::TILE;
use crate::cpu::qmm_repack::{dims, format, repacked_weight, scale_bias, tile_words};

/// `params`: `[k, n, group_size, bits, format, c, dtype]` (`format, c`:
/// `SbFormat::params`; `dtype` 0: float32,
/// 1: float16, 2: bfloat16, the original scales'); `inputs`: the ids (as
/// float32, exact below 2^24), the repacked weights and scales; `out`: one row
/// of `k` per id.
pub(crate) const ROWS: KernelF32 = |params, inputs, out| {
    let [k, n, gs, bits] = dims(params);
    let (ids, w, sb) = (inputs[0], inputs[1], inputs[2]);
    let (Some(format), Some(&dtype)) = (format(params), params.get(6)) else { return out.fill(f32::NAN) };
    let ok = k > 0
        && n > 0
        && matches!(bits, 2 | 4 | 8)
        && gs > 0
        && k % gs == 0
        && out.len() == ids.len() * k
        && w.len() == n.div_ceil(TILE) * tile_words(k, bits)
        && sb.len() == n.div_ceil(TILE) * (k / gs) * format.group_words();
    if !ok {
        return out.fill(f32::NAN);
    }
    // SAFETY: f32 and u32 have the same size and alignment; the words are only read as integers.
    let w = unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u32>(), w.len()) };
    let round: fn(f32) -> f32 = match dtype as u8 {
        1 => round_f16,
        2 => round_bf16,
        _ => |v| v,
    };
    for (&id, row) in ids.iter().zip(out.chunks_exact_mut(k)) {
        // A negative id counts from the end, as in MLX's `take`.
        let id = if id < 0.0 { id + n as f32 } else { id };
        if !(id >= 0.0 && id < n as f32 && id.fract() == 0.0) {
            row.fill(f32::NAN);
            continue;
        }
        let col = id as usize;
        for (g, part) in row.chunks_exact_mut(gs).enumerate() {
            let (scale, bias) = scale_bias(sb, format, k / gs, col, g);
            for (i, v) in part.iter_mut().enumerate() {
                let q = repacked_weight(w, k, bits, col, g * gs + i) as f32;
                *v = round(round(scale * q) + bias);
            }
        }
    }
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::qmm_repack::tests::repack;
    use crate::cpu::qmm_repack::SbFormat;
    use crate::quant::{dequantize, quantize, Mode};
    use crate::{random, Array, Dtype};

    /// Rows looked up in the repacked table have the bits of MLX's `take`
    /// then `dequantize`, for float32, float16 and bfloat16 scales (each held
    /// in float32 and in its own 16 bits), every width, and negative ids.
    #[test]
    fn lookups_give_mlxs_take_and_dequantize_bits() {
        let (n, k) = (21, 128);
        let ids = [0i32, 20, 7, -1, 8, 13];
        let id_arr = Array::from_slice(&ids, &[2, 3]).unwrap();
        let cases = [(Dtype::Float32, 4, 32), (Dtype::Float16, 4, 64), (Dtype::Bfloat16, 2, 32), (Dtype::Float16, 8, 128), (Dtype::Bfloat16, 4, 32)];
        for (i, &(dtype, bits, gs)) in cases.iter().enumerate() {
            let w = random::normal(&[n, k], Dtype::Float32, 0.0, 0.1, Some(&random::key(60 + i as u64).unwrap())).unwrap().astype(dtype).unwrap();
            let (wq, s, b) = quantize(&w, gs, bits, Mode::Affine).unwrap();
            let b = b.unwrap();
            let want = dequantize(
                &wq.take(&id_arr, Some(0)).unwrap(),
                &s.take(&id_arr, Some(0)).unwrap(),
                Some(&b.take(&id_arr, Some(0)).unwrap()),
                gs,
                bits,
                Mode::Affine,
            )
            .unwrap();
            assert_eq!(want.dtype(), dtype);
            let want: Vec<f32> = want.astype(Dtype::Float32).unwrap().to_vec().unwrap();
            let host = |a: &Array| a.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap();
            let (s, b) = (host(&s), host(&b));
            let code = [Dtype::Float32, Dtype::Float16, Dtype::Bfloat16].iter().position(|&d| d == dtype).unwrap();
            let formats = match dtype {
                Dtype::Float16 => vec![SbFormat::F32, SbFormat::F16],
                Dtype::Bfloat16 => vec![SbFormat::F32, SbFormat::Bf16],
                _ => vec![SbFormat::F32],
            };
            for format in formats {
                let (words, sb, _) = repack(&wq.to_vec::<u32>().unwrap(), &s, &b, (k as usize, n as usize, gs as usize, bits as usize), format);
                let [fc, c] = format.params();
                let params = [k as f32, n as f32, gs as f32, bits as f32, fc, c, code as f32];
                let wf: Vec<f32> = words.iter().map(|&u| f32::from_bits(u)).collect();
                let idf: Vec<f32> = ids.iter().map(|&v| v as f32).collect();
                let mut got = vec![0f32; ids.len() * k as usize];
                ROWS(&params, &[&idf, &wf, &sb], &mut got);
                let same = got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits());
                assert!(same, "case {i}: {dtype:?} scales held as {format:?}");
            }
        }
    }

    #[test]
    fn an_id_out_of_range_gives_a_row_of_nan() {
        let (n, k, gs, bits) = (9usize, 64usize, 32usize, 4usize);
        let (w, s, b) = (vec![0x1234_5678u32; n * k * bits / 32], vec![0.5f32; n * k / gs], vec![-1f32; n * k / gs]);
        // Biases -2 times the scales: held as the scales alone.
        let (words, sb, format) = repack(&w, &s, &b, (k, n, gs, bits), SbFormat::F16Scaled(-2.0));
        let [fc, c] = format.params();
        let wf: Vec<f32> = words.iter().map(|&u| f32::from_bits(u)).collect();
        let mut got = vec![0f32; 4 * k];
        ROWS(&[k as f32, n as f32, gs as f32, bits as f32, fc, c, 0.0], &[&[9.0, -10.0, 3.0, 2.5], &wf, &sb], &mut got);
        let rows: Vec<&[f32]> = got.chunks(k).collect();
        assert!(rows[0].iter().chain(rows[1]).chain(rows[3]).all(|v| v.is_nan()));
        // Weight 0 of row 3 is the word's low nibble, 8: 0.5 * 8 - 1.
        assert!(rows[2].iter().all(|v| v.is_finite()) && rows[2][0] == 3.0);
    }
}
