use crate::fast::{self, RopeOffset};
use crate::{Array, Dtype, Result};

/// Rotary position embeddings in the variants MLX-LM's `initialize_rope` builds.
pub enum Rope {
    /// `nn.RoPE`; linear scaling is `scale = 1 / factor`.
    Standard { dims: i32, traditional: bool, base: f32, scale: f32 },
    /// Precomputed frequencies (Llama 3 scaling).
    Freqs { dims: i32, traditional: bool, freqs: Array },
    /// Dynamic NTK: the base grows with the sequence past the trained length.
    DynamicNtk { dims: i32, traditional: bool, base: f32, factor: f32, max_positions: i32 },
    /// No rotation (the NoPE layers of SmolLM3).
    Identity,
    /// Precomputed frequencies with the rotated features scaled first: LongRoPE
    /// / "su" (Phi-3, MLX-LM's `SuScaledRoPE`) and YaRN (`YarnRoPE`).
    Scaled { dims: i32, traditional: bool, freqs: Array, scale: f32 },
}

impl Rope {
    /// Llama 3 frequency table, as MLX-LM's `Llama3RoPE` computes it (in f32).
    pub fn llama3(
        dims: i32,
        traditional: bool,
        base: f32,
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        old_context_len: f32,
    ) -> Result<Rope> {
        let low_freq_wavelen = old_context_len / low_freq_factor;
        let high_freq_wavelen = old_context_len / high_freq_factor;
        let exps = Array::arange(0.0, dims as f64, 2.0, Dtype::Float32)?.divide_scalar(dims as f64)?;
        let freqs = Array::scalar(base as f64, Dtype::Float32)?.power(&exps)?;
        let wavelens = freqs.multiply_scalar(2.0 * std::f64::consts::PI)?;
        let freqs = Array::where_(&wavelens.greater_scalar(low_freq_wavelen as f64)?, &freqs.multiply_scalar(factor as f64)?, &freqs)?;
        let is_medium = wavelens.greater_scalar(high_freq_wavelen as f64)?.logical_and(&wavelens.less_scalar(low_freq_wavelen as f64)?)?;
        let smooth = Array::scalar(old_context_len as f64, Dtype::Float32)?
            .divide(&wavelens)?
            .subtract_scalar(low_freq_factor as f64)?
            .divide_scalar((high_freq_factor - low_freq_factor) as f64)?;
        // freqs / ((1 - smooth) / factor + smooth)
        let denom = smooth.negative()?.add_scalar(1.0)?.divide_scalar(factor as f64)?.add(&smooth)?;
        let smooth_freqs = freqs.divide(&denom)?;
        let freqs = Array::where_(&is_medium, &smooth_freqs, &freqs)?;
        freqs.eval()?;
        Ok(Rope::Freqs { dims, traditional, freqs })
    }

    /// MLX-LM's `SuScaledRoPE(dims, base, max_position_embeddings,
    /// original_max_position_embeddings, long_factor=..., long_mscale=...)`.
    pub fn su_scaled(
        dims: i32,
        base: f32,
        max_positions: f32,
        original_max_positions: f32,
        long_factor: &[f32],
        long_mscale: Option<f32>,
    ) -> Result<Rope> {
        let exps = Array::arange(0.0, dims as f64, 2.0, Dtype::Float32)?.divide_scalar(dims as f64)?;
        let base_freqs = Array::scalar(base as f64, Dtype::Float32)?.power(&exps)?;
        let factors = Array::from_slice(long_factor, &[long_factor.len() as i32])?;
        let freqs = factors.multiply(&base_freqs)?;
        freqs.eval()?;
        let factor = (max_positions / original_max_positions) as f64;
        let default_scale = || (1.0 + factor.ln() / (original_max_positions as f64).ln()).sqrt();
        let scale = long_mscale.map(|m| m as f64).unwrap_or_else(|| if factor <= 1.0 { 1.0 } else { default_scale() });
        Ok(Rope::Scaled { dims, traditional: false, freqs, scale: scale as f32 })
    }

    /// MLX-LM's `ProportionalRoPE` (Gemma 4's full-attention layers): the first
    /// `rotated` of `dims` features turn at `factor * base^(i / dims)` (exponents
    /// over all `dims`, not `rotated`), the rest at an infinite period, so stay.
    pub fn proportional(dims: i32, rotated: i32, traditional: bool, base: f32, factor: f32) -> Result<Rope> {
        if rotated > dims || rotated < 0 || (dims - rotated) % 2 != 0 || dims % 2 != 0 {
            return Err(crate::Error::new(format!("proportional RoPE cannot rotate {rotated} of {dims} features")));
        }
        let exps = Array::arange(0.0, rotated as f64, 2.0, Dtype::Float32)?.divide_scalar(dims as f64)?;
        let turning = Array::scalar(base as f64, Dtype::Float32)?.power(&exps)?.multiply_scalar(factor as f64)?;
        let still = Array::full(&[(dims - rotated) / 2], f64::INFINITY, Dtype::Float32)?;
        let freqs = Array::concatenate(&[&turning, &still], 0)?;
        freqs.eval()?;
        Ok(Rope::Freqs { dims, traditional, freqs })
    }

    /// MLX-LM's `YarnRoPE(dims, traditional, max_position_embeddings, base,
    /// scaling_factor, original_max_position_embeddings, beta_fast, beta_slow,
    /// mscale, mscale_all_dim)`; the scalars in f64 as Python computes them.
    #[allow(clippy::too_many_arguments)]
    pub fn yarn(
        dims: i32,
        traditional: bool,
        base: f32,
        factor: f32,
        original_max_positions: f32,
        beta_fast: f32,
        beta_slow: f32,
        mscale: f32,
        mscale_all_dim: f32,
    ) -> Result<Rope> {
        let (d, b, orig) = (dims as f64, base as f64, original_max_positions as f64);
        let correction_dim = |rotations: f64| (d * (orig / (rotations * 2.0 * std::f64::consts::PI)).ln()) / (2.0 * b.ln());
        let low = correction_dim(beta_fast as f64).floor().max(0.0);
        let high = correction_dim(beta_slow as f64).ceil().min(d - 1.0);
        let get_mscale = |scale: f64, m: f64| if scale <= 1.0 { 1.0 } else { 0.1 * m * scale.ln() + 1.0 };
        let input_scale = get_mscale(factor as f64, mscale as f64) / get_mscale(factor as f64, mscale_all_dim as f64);
        let exps = Array::arange(0.0, d, 2.0, Dtype::Float32)?.divide_scalar(d)?;
        let freq_extra = Array::scalar(b, Dtype::Float32)?.power(&exps)?;
        let freq_inter = freq_extra.multiply_scalar(factor as f64)?;
        let high = if low == high { high + 0.001 } else { high };
        let ramp = Array::arange(0.0, (dims / 2) as f64, 1.0, Dtype::Float32)?.subtract_scalar(low)?.divide_scalar(high - low)?;
        let ramp = ramp.clip(Some(&Array::scalar(0.0, Dtype::Float32)?), Some(&Array::scalar(1.0, Dtype::Float32)?))?;
        let mask = ramp.negative()?.add_scalar(1.0)?;
        let num = freq_inter.multiply(&freq_extra)?;
        let den = freq_inter.multiply(&mask)?.add(&freq_extra.multiply(&mask.negative()?.add_scalar(1.0)?)?)?;
        let freqs = num.divide(&den)?;
        freqs.eval()?;
        Ok(Rope::Scaled { dims, traditional, freqs, scale: input_scale as f32 })
    }

    pub fn forward(&self, x: &Array, offset: i32) -> Result<Array> {
        self.apply(x, RopeOffset::At(offset))
    }

    /// `x` `[B, heads, 1, dims]`, row `b` at position `offsets[b]`: one op for
    /// the batch, each row with the bits `forward` gives it alone (dynamic NTK,
    /// whose base follows the position, goes row by row).
    pub fn forward_rows(&self, x: &Array, offsets: &[i32]) -> Result<Array> {
        if let Rope::DynamicNtk { .. } = self {
            let rows =
                offsets.iter().enumerate().map(|(r, &o)| self.forward(&x.slice_axis(0, r as i32, r as i32 + 1)?, o)).collect::<Result<Vec<_>>>()?;
            return Array::concatenate(&rows.iter().collect::<Vec<_>>(), 0);
        }
        let offsets = Array::from_slice(offsets, &[offsets.len() as i32])?;
        self.apply(x, RopeOffset::PerRow(&offsets))
    }

    fn apply(&self, x: &Array, offset: RopeOffset) -> Result<Array> {
        match self {
            Rope::Identity => Ok(x.clone()),
            Rope::Scaled { dims, traditional, freqs, scale } => {
                // x.at[..., :dims].multiply(scale): the rotated part only (a no-op at 1).
                let x = if *scale == 1.0 {
                    x.clone()
                } else if *dims == x.dim(-1) {
                    x.multiply_scalar(*scale as f64)?
                } else {
                    let head = x.slice_axis(-1, 0, *dims)?.multiply_scalar(*scale as f64)?;
                    Array::concatenate(&[&head, &x.slice_axis(-1, *dims, x.dim(-1))?], -1)?
                };
                fast::rope(&x, *dims, *traditional, None, 1.0, offset, Some(freqs))
            }
            Rope::Standard { dims, traditional, base, scale } => fast::rope(x, *dims, *traditional, Some(*base), *scale, offset, None),
            Rope::Freqs { dims, traditional, freqs } => fast::rope(x, *dims, *traditional, None, 1.0, offset, Some(freqs)),
            Rope::DynamicNtk { dims, traditional, base, factor, max_positions } => {
                let RopeOffset::At(offset) = offset else {
                    return Err(crate::Error::new("dynamic NTK RoPE takes one offset (forward_rows goes row by row)"));
                };
                let seq_len = (x.dim(-2) + offset).max(*max_positions) as f64;
                let (f, m, d) = (*factor as f64, *max_positions as f64, *dims as f64);
                let b = *base as f64 * ((f * seq_len / m) - (f - 1.0)).powf(d / (d - 2.0));
                fast::rope(x, *dims, *traditional, Some(b as f32), 1.0, RopeOffset::At(offset), None)
            }
        }
    }
}
