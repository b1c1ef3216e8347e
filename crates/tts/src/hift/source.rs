//! Neural source filter (`SourceModuleHnNSF` with its `SineGen`): F0 upsampled
//! to the sample rate becomes a sum of harmonics (plus noise where unvoiced),
//! merged into one excitation channel.
use std::f64::consts::PI;

use lm::weights::Weights;
use mlx::nn::Linear;
use mlx::random::{self, KeySequence};
use mlx::{Array, Dtype};

use super::config::HiftConfig;
use crate::layers;
use crate::Result;

pub struct SourceModule {
    merge: Linear,
    sampling_rate: f64,
    harmonics: i32,
    sine_amp: f64,
    noise_std: f64,
    voiced_threshold: f64,
    upsample: i32,
    /// Turbo's `SineGen` (see `HiftConfig::turbo`).
    turbo: bool,
}

impl SourceModule {
    pub fn load(w: &mut Weights, prefix: &str, cfg: &HiftConfig) -> Result<SourceModule> {
        let harmonics = cfg.nb_harmonics + 1;
        Ok(SourceModule {
            merge: layers::linear(w, &format!("{prefix}.l_linear"), harmonics, 1, true)?,
            sampling_rate: cfg.sampling_rate as f64,
            harmonics,
            sine_amp: cfg.nsf_alpha as f64,
            noise_std: cfg.nsf_sigma as f64,
            voiced_threshold: cfg.nsf_voiced_threshold as f64,
            upsample: cfg.samples_per_frame(),
            turbo: cfg.turbo,
        })
    }

    /// F0 per mel frame `[B, T_mel]` to the excitation `[B, 1, T_mel * 480]`.
    ///
    /// Draws three keys, in mlx-audio's order: the initial phases (uniform
    /// `[B, H, 1]`), the additive noise (normal `[B, H, T]`), and the noise
    /// branch's normal `[B, T, 1]`, which the vocoder discards (the key is
    /// still consumed, so later draws stay in step).
    pub fn forward(&self, f0: &Array, keys: &mut KeySequence) -> Result<Array> {
        let b = f0.dim(0);
        // Nearest-neighbour upsampling: [B, 1, T].
        let f0 = f0.expand_dims(&[1])?.repeat(self.upsample, 2)?;
        let t = f0.dim(2);
        let h = self.harmonics;

        let mult: Vec<f32> = (1..=h).map(|i| i as f32).collect();
        let mult = Array::from_slice(&mult, &[1, h, 1])?;
        // Per-sample phase increments in cycles, [B, H, T]; wrapped cumulative phase.
        let steps = f0.multiply(&mult)?.divide_scalar(self.sampling_rate)?;
        let cycles = steps.cumsum(-1, false, true)?;
        let theta = match self.turbo {
            true => cycles.multiply_scalar(2.0 * PI)?.remainder_scalar(2.0 * PI)?,
            false => cycles.remainder_scalar(1.0)?.multiply_scalar(2.0 * PI)?,
        };

        // Random initial phase per harmonic, none for the fundamental.
        let phase = if self.turbo {
            let overtones = random::uniform(-PI, PI, &[b, h - 1, 1], Dtype::Float32, Some(&keys.next()?))?;
            Array::concatenate(&[&Array::zeros(&[b, 1, 1], Dtype::Float32)?, &overtones], 1)?
        } else {
            let phase = random::uniform(-PI, PI, &[b, h, 1], Dtype::Float32, Some(&keys.next()?))?;
            let not_fundamental = Array::arange(0.0, h as f64, 1.0, Dtype::Int32)?.reshape(&[1, h, 1])?.greater_scalar(0.0)?;
            Array::where_(&not_fundamental, &phase, &phase.scalar_like(0.0)?)?
        };
        let sines = mlx::cpu::math::sin(&theta.add(&phase)?)?.multiply_scalar(self.sine_amp)?;

        let uv = f0.greater_scalar(self.voiced_threshold)?.astype(Dtype::Float32)?;
        let unvoiced = uv.scalar_like(1.0)?.subtract(&uv)?;
        let noise_amp = uv.multiply_scalar(self.noise_std)?.add(&unvoiced.multiply_scalar(self.sine_amp)?.divide_scalar(3.0)?)?;
        let noise = noise_amp.multiply(&random::normal(&[b, h, t], Dtype::Float32, 0.0, 1.0, Some(&keys.next()?))?)?;
        let sines = sines.multiply(&uv)?.add(&noise)?;

        let merged = self.merge.forward(&sines.swapaxes(1, 2)?)?.tanh()?;
        // The noise branch mlx-audio draws and the vocoder never uses.
        keys.next()?;
        Ok(merged.swapaxes(1, 2)?)
    }
}
