use crate::fast;
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

    pub fn forward(&self, x: &Array, offset: i32) -> Result<Array> {
        match self {
            Rope::Identity => Ok(x.clone()),
            Rope::Standard { dims, traditional, base, scale } => fast::rope(x, *dims, *traditional, Some(*base), *scale, offset, None),
            Rope::Freqs { dims, traditional, freqs } => fast::rope(x, *dims, *traditional, None, 1.0, offset, Some(freqs)),
            Rope::DynamicNtk { dims, traditional, base, factor, max_positions } => {
                let seq_len = (x.dim(-2) + offset).max(*max_positions) as f64;
                let (f, m, d) = (*factor as f64, *max_positions as f64, *dims as f64);
                let b = *base as f64 * ((f * seq_len / m) - (f - 1.0)).powf(d / (d - 2.0));
                fast::rope(x, *dims, *traditional, Some(b as f32), 1.0, offset, None)
            }
        }
    }
}
