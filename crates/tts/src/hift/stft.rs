//! The vocoder's short-time Fourier transforms (n_fft 16, hop 4, periodic Hann),
//! written as strided convolutions over precomputed bases: the same sums as
//! mlx-audio's frame gather + FFT and its IFFT + overlap-add, in one op each.
use std::f64::consts::PI;

use mlx::{signal, Array};

use super::conv::SubpixelConv1d;

pub struct Stft {
    n_fft: i32,
    hop: i32,
    /// `[2 * bins, n_fft, 1]`: windowed cos rows then windowed -sin rows.
    analysis: Array,
    /// Real and imaginary bins to windowed frames, overlap-added at the hop.
    synthesis: SubpixelConv1d,
    /// The squared window overlap-added, for the normaliser.
    window_sq: SubpixelConv1d,
}

impl Stft {
    pub fn new(n_fft: i32, hop: i32) -> mlx::Result<Stft> {
        let n = n_fft as usize;
        let bins = n / 2 + 1;
        // scipy's fftbins=True Hann, rounded to f32 as mlx-audio stores it.
        let window: Vec<f64> = (0..n).map(|i| (0.5 * (1.0 - (2.0 * PI * i as f64 / n as f64).cos())) as f32 as f64).collect();
        // Angles reduced mod n_fft so cos/sin of k*i*2pi/n are as exact as f64 allows.
        let angle = |k: usize, i: usize| 2.0 * PI * ((k * i) % n) as f64 / n as f64;

        let mut analysis = vec![0f32; 2 * bins * n];
        for k in 0..bins {
            for i in 0..n {
                analysis[k * n + i] = (window[i] * angle(k, i).cos()) as f32;
                analysis[(bins + k) * n + i] = (-window[i] * angle(k, i).sin()) as f32;
            }
        }
        // Inverse real FFT of a conjugate-symmetric spectrum: interior bins count
        // twice, DC and Nyquist once, their imaginary parts not at all.
        let mut synthesis = vec![0f32; n * 2 * bins];
        for i in 0..n {
            for k in 0..bins {
                let weight = if k == 0 || k == n / 2 { 1.0 } else { 2.0 } / n as f64;
                synthesis[i * 2 * bins + k] = (weight * window[i] * angle(k, i).cos()) as f32;
                synthesis[i * 2 * bins + bins + k] = (-weight * window[i] * angle(k, i).sin()) as f32;
            }
        }
        let window_f32: Vec<f32> = window.iter().map(|&w| w as f32).collect();
        let window = Array::from_slice(&window_f32, &[1, n_fft, 1])?;
        Ok(Stft {
            n_fft,
            hop,
            analysis: Array::from_slice(&analysis, &[2 * bins as i32, n_fft, 1])?,
            synthesis: SubpixelConv1d::new(&Array::from_slice(&synthesis, &[1, n_fft, 2 * bins as i32])?, hop)?,
            window_sq: SubpixelConv1d::new(&window.multiply(&window)?, hop)?,
        })
    }

    /// Centred STFT with reflect padding (as torch.stft): `x` `[B, T]` to
    /// `[B, frames, 2 * bins]`, real parts then imaginary parts, channels-last.
    pub fn forward(&self, x: &Array) -> mlx::Result<Array> {
        let t = x.dim(1);
        let pad = self.n_fft / 2;
        let left: Vec<i32> = (1..=pad).rev().collect();
        let right: Vec<i32> = (t - 1 - pad..t - 1).rev().collect();
        let left = x.take(&Array::from_slice(&left, &[pad])?, Some(1))?;
        let right = x.take(&Array::from_slice(&right, &[pad])?, Some(1))?;
        let padded = Array::concatenate(&[&left, x, &right], 1)?.expand_dims(&[2])?;
        signal::conv1d(&padded, &self.analysis, self.hop, 0, 1, 1)
    }

    /// Inverse of `forward` from log-magnitude and phase logits `[B, frames,
    /// 2 * bins]` (conv_post's output): magnitude `exp` clipped at 100, phase
    /// `sin` of the logits, as HiFT does. Returns `[B, (frames - 1) * hop]`.
    /// The frames of `x` `[B, T]` without centre padding (mlx-audio's Turbo `_stft`):
    /// `(T - n_fft) / hop + 1` of them, `[B, frames, n_fft + 2]`.
    pub fn forward_uncentered(&self, x: &Array) -> mlx::Result<Array> {
        signal::conv1d(&x.expand_dims(&[2])?, &self.analysis, self.hop, 0, 1, 1)
    }

    pub fn inverse(&self, spec: &Array) -> mlx::Result<Array> {
        let bins = self.n_fft / 2 + 1;
        let frames = spec.dim(1);
        let magnitude = spec.slice_axis(2, 0, bins)?.exp()?;
        let magnitude = magnitude.clip(None, Some(&magnitude.scalar_like(1e2)?))?;
        let phase = spec.slice_axis(2, bins, 2 * bins)?.sin()?;
        let real = magnitude.multiply(&phase.cos()?)?;
        let imag = magnitude.multiply(&phase.sin()?)?;
        let complex = Array::concatenate(&[&real, &imag], 2)?;
        let summed = self.synthesis.forward(&complex, 0)?;

        let ones = Array::ones(&[1, frames, 1], mlx::Dtype::Float32)?;
        let norm = self.window_sq.forward(&ones, 0)?.maximum_scalar(1e-8)?;
        let len = summed.dim(1);
        let pad = self.n_fft / 2;
        summed.divide(&norm)?.slice_axis(1, pad, len - pad)?.squeeze(&[2])
    }
}
