//! The three mel front ends of voice cloning, as mlx-audio computes them with its
//! `mlx_audio.dsp.stft` (symmetric Hann window, frames through `mx.fft.rfft`) and `mel_filters`
//! (slaney scale and norm, built in float32 MLX ops, which this builds op for op):
//! - the voice encoder's 40-bin power mel at 16 kHz (`voice_encoder/melspec.py`);
//! - the S3 tokenizer's 128-bin log-mel at 16 kHz (`s3tokenizer/utils.py`);
//! - S3Gen's 80-bin log-mel at 24 kHz (`s3gen/mel.py`);
//! - CAMPPlus's Kaldi-style 80-bin log filter bank at 16 kHz (`s3gen/xvector.py`'s
//!   `kaldi_fbank`, HTK scale, Povey window), with the mean over time taken off. Turbo's copy
//!   (`extract_fbank_features`) builds Kaldi's own filter bank instead (`Flavor`).
use mlx::{signal, Array, Dtype};

use super::Flavor;
use crate::{Result, TtsError};

/// `hanning(size)` of mlx-audio's dsp: the symmetric window, in f64 then f32.
fn hann(size: usize) -> Vec<f32> {
    let denom = (size - 1) as f64;
    (0..size).map(|n| (0.5 * (1.0 - (2.0 * std::f64::consts::PI * n as f64 / denom).cos())) as f32).collect()
}

/// `x[1:pad+1][::-1] + x + x[-(pad+1):-1][::-1]`.
fn reflect_pad(x: &[f32], pad: usize) -> Result<Vec<f32>> {
    if x.len() <= pad {
        return Err(TtsError::InvalidAudio(format!("{} samples are too few for a spectrogram with {pad} samples of reflect padding", x.len())));
    }
    let n = x.len();
    let mut out = Vec::with_capacity(n + 2 * pad);
    out.extend(x[1..=pad].iter().rev());
    out.extend_from_slice(x);
    out.extend(x[n - 1 - pad..n - 1].iter().rev());
    Ok(out)
}

/// The `[frames, len]` windows of `x`, `len` samples every `hop` (only whole ones).
fn frames(x: &[f32], len: usize, hop: usize) -> Result<Array> {
    if x.len() < len {
        return Err(TtsError::InvalidAudio(format!("{} samples are too few for a {len}-sample spectrogram window", x.len())));
    }
    let frames = 1 + (x.len() - len) / hop;
    let mut data = Vec::with_capacity(frames * len);
    for f in 0..frames {
        data.extend_from_slice(&x[f * hop..f * hop + len]);
    }
    Ok(Array::from_slice(&data, &[frames as i32, len as i32])?)
}

/// `|stft(x)|` with a window of `n_fft` samples (win_length = n_fft) every `hop`, no centring
/// (callers pad first): `[frames, n_fft / 2 + 1]`.
fn stft_magnitude(x: &[f32], n_fft: usize, hop: usize) -> Result<Array> {
    let frames = frames(x, n_fft, hop)?;
    let window = Array::from_slice(&hann(n_fft), &[n_fft as i32])?;
    Ok(signal::rfft(&frames.multiply(&window)?, n_fft as i32, -1)?.abs()?)
}

/// `mx.linspace(start, stop, num)` in float32: `(1 - t) * start + t * stop`, `t = i / (num - 1)`.
fn linspace(start: f64, stop: f64, num: usize) -> Result<Array> {
    let t = Array::arange(0.0, num as f64, 1.0, Dtype::Float32)?.divide_scalar((num - 1) as f64)?;
    let one_minus = t.negative()?.add_scalar(1.0)?;
    Ok(one_minus.multiply_scalar(start)?.add(&t.multiply_scalar(stop)?)?)
}

const SLANEY_F_SP: f64 = 200.0 / 3.0;
const MIN_LOG_HZ: f64 = 1000.0;

fn logstep() -> f64 {
    6.4f64.ln() / 27.0
}

/// The two mel scales of mlx-audio's `mel_filters`, with their normalisations as used here.
#[derive(Clone, Copy, PartialEq)]
enum Scale {
    /// Slaney's scale with "slaney" area normalisation (librosa's default).
    Slaney,
    /// HTK's scale, unnormalised (Kaldi's filter bank).
    Htk,
}

fn hz_to_mel(freq: f64, scale: Scale) -> f64 {
    if scale == Scale::Htk {
        return 2595.0 * (1.0 + freq / 700.0).log10();
    }
    let min_log_mel = MIN_LOG_HZ / SLANEY_F_SP;
    if freq >= MIN_LOG_HZ {
        min_log_mel + (freq / MIN_LOG_HZ).ln() / logstep()
    } else {
        freq / SLANEY_F_SP
    }
}

/// `mel_to_hz` of mlx-audio's `mel_filters`, in its float32 ops.
fn mel_to_hz(mels: &Array, scale: Scale) -> Result<Array> {
    if scale == Scale::Htk {
        let exponent = mels.divide_scalar(2595.0)?;
        return Ok(exponent.scalar_like(10.0)?.power(&exponent)?.subtract_scalar(1.0)?.multiply_scalar(700.0)?);
    }
    let min_log_mel = MIN_LOG_HZ / SLANEY_F_SP;
    let linear = mels.multiply_scalar(SLANEY_F_SP)?.add_scalar(0.0)?;
    let log = mels.subtract_scalar(min_log_mel)?.multiply_scalar(logstep())?.exp()?.multiply_scalar(MIN_LOG_HZ)?;
    Ok(Array::where_(&mels.greater_equal_scalar(min_log_mel)?, &log, &linear)?)
}

/// mlx-audio's `mel_filters` (slaney: `norm="slaney", mel_scale="slaney"`; HTK: `norm=None,
/// mel_scale="htk"`): `[n_mels, n_fft / 2 + 1]`.
fn mel_filters(sample_rate: u32, n_fft: usize, n_mels: usize, f_min: f64, f_max: f64, scale: Scale) -> Result<Array> {
    let n_freqs = n_fft / 2 + 1;
    let all_freqs = linspace(0.0, (sample_rate / 2) as f64, n_freqs)?;
    let m_pts = linspace(hz_to_mel(f_min, scale), hz_to_mel(f_max, scale), n_mels + 2)?;
    let f_pts = mel_to_hz(&m_pts, scale)?;

    let m = (n_mels + 2) as i32;
    let f_diff = f_pts.slice_axis(0, 1, m)?.subtract(&f_pts.slice_axis(0, 0, m - 1)?)?;
    let slopes = f_pts.expand_dims(&[0])?.subtract(&all_freqs.expand_dims(&[1])?)?;
    let down = slopes.slice_axis(1, 0, m - 2)?.negative()?.divide(&f_diff.slice_axis(0, 0, m - 2)?)?;
    let up = slopes.slice_axis(1, 2, m)?.divide(&f_diff.slice_axis(0, 1, m - 1)?)?;
    let bank = down.minimum(&up)?.maximum_scalar(0.0)?;
    if scale == Scale::Htk {
        return Ok(bank.transpose(&[1, 0])?);
    }
    let width = f_pts.slice_axis(0, 2, m)?.subtract(&f_pts.slice_axis(0, 0, m - 2)?)?;
    let enorm = width.scalar_like(2.0)?.divide(&width)?;
    Ok(bank.multiply(&enorm.expand_dims(&[0])?)?.transpose(&[1, 0])?)
}

/// The voice encoder's mel (VoiceEncConfig defaults: n_fft 400, hop 160, 40 bins up to
/// 8 kHz, power 2, amplitude, not normalised) of a 16 kHz signal: `[frames, 40]`.
pub fn voice_encoder_mel(wav: &[f32]) -> Result<Array> {
    let spec = stft_magnitude(&reflect_pad(wav, 200)?, 400, 160)?.power_scalar(2.0)?;
    Ok(spec.matmul(&mel_filters(16000, 400, 40, 0.0, 8000.0, Scale::Slaney)?.transpose(&[1, 0])?)?)
}

/// The S3 tokenizer's log-mel of a 16 kHz signal: `[128, frames - 1]` (the last STFT frame
/// dropped as torch.stft's caller does), `log10` clamped at 1e-10 and to 8 below the maximum,
/// then `(x + 4) / 4`.
pub fn s3_tokenizer_log_mel(wav: &[f32]) -> Result<Array> {
    let spec = stft_magnitude(&reflect_pad(wav, 200)?, 400, 160)?;
    let spec = spec.slice_axis(0, 0, spec.dim(0) - 1)?.power_scalar(2.0)?;
    let mel = spec.matmul(&mel_filters(16000, 400, 128, 0.0, 8000.0, Scale::Slaney)?.transpose(&[1, 0])?)?.transpose(&[1, 0])?;
    let log = mel.maximum_scalar(1e-10)?.log10()?;
    let log = log.maximum(&log.max(&[], false)?.subtract_scalar(8.0)?)?;
    Ok(log.add_scalar(4.0)?.divide_scalar(4.0)?)
}

/// S3Gen's mel of a 24 kHz signal: reflect padding of (1920 - 480) / 2, uncentred STFT
/// (n_fft 1920, hop 480), 80 bins up to 8 kHz of the magnitude, natural log clamped at 1e-5:
/// `[80, frames]`.
pub fn s3gen_mel(wav: &[f32]) -> Result<Array> {
    let spec = stft_magnitude(&reflect_pad(wav, (1920 - 480) / 2)?, 1920, 480)?;
    let mel = spec.matmul(&mel_filters(24000, 1920, 80, 0.0, 8000.0, Scale::Slaney)?.transpose(&[1, 0])?)?.transpose(&[1, 0])?;
    Ok(mel.maximum_scalar(1e-5)?.log()?)
}

/// Kaldi's Povey window as mlx-audio computes it: `(0.5 - 0.5 cos(2 pi n / (size - 1)))^0.85`
/// over an int32 `arange`, in float32.
fn povey_window(size: usize) -> Result<Array> {
    let n = Array::arange(0.0, size as f64, 1.0, Dtype::Int32)?;
    let cos = n.multiply_scalar(2.0 * std::f64::consts::PI)?.divide_scalar((size - 1) as f64)?.cos()?;
    let half = cos.multiply_scalar(0.5)?;
    Ok(half.scalar_like(0.5)?.subtract(&half)?.power_scalar(0.85)?)
}

/// Kaldi's mel filter bank as Turbo's `_get_mel_banks_kaldi` builds it, in f64: triangles
/// linear in Kaldi's mel (`1127 ln(1 + f / 700)`) between `low` Hz and the Nyquist frequency,
/// over the `n_fft / 2` bins below Nyquist, and a zero column for the Nyquist bin:
/// `[n_mels, n_fft / 2 + 1]` in f32. (mlx-audio's `mel_filters`, Chatterbox's, draws its
/// triangles linear in Hz.)
fn kaldi_mel_banks(sample_rate: u32, n_fft: usize, n_mels: usize, low: f64) -> Result<Array> {
    let mel = |f: f64| 1127.0 * (1.0 + f / 700.0).ln();
    let bin_width = sample_rate as f64 / n_fft as f64;
    let (mel_low, mel_high) = (mel(low), mel(0.5 * sample_rate as f64));
    let delta = (mel_high - mel_low) / (n_mels + 1) as f64;
    let cols = n_fft / 2 + 1;
    let mut bank = vec![0f32; n_mels * cols];
    for i in 0..n_mels {
        let (left, center, right) = (mel_low + i as f64 * delta, mel_low + (i + 1) as f64 * delta, mel_low + (i + 2) as f64 * delta);
        for j in 0..n_fft / 2 {
            let m = mel(bin_width * j as f64);
            let w = if m > left && m <= center {
                (m - left) / (center - left)
            } else if m > center && m < right {
                (right - m) / (right - center)
            } else {
                0.0
            };
            bank[i * cols + j] = w as f32;
        }
    }
    Ok(Array::from_slice(&bank, &[n_mels as i32, cols as i32])?)
}

/// `kaldi_fbank` of `s3gen/xvector.py` (CAMPPlus's input) of a 16 kHz signal: 25 ms frames every
/// 10 ms (only whole ones), each with its mean removed, pre-emphasis 0.97, the Povey window, a
/// 512-point power spectrum, 80 mel bins from 20 Hz (Chatterbox: mlx-audio's HTK `mel_filters`;
/// Turbo: Kaldi's own, `kaldi_mel_banks`), natural log clamped at f32 epsilon: `[frames, 80]`.
/// (Turbo's reference computes in f64; this in f32, as Chatterbox's.)
pub fn kaldi_fbank(wav16: &[f32], flavor: Flavor) -> Result<Array> {
    const WIN: i32 = 400;
    const N_FFT: i32 = 512;
    let frames = frames(wav16, WIN as usize, 160)?;
    let frames = frames.subtract(&frames.mean(&[1], true)?)?;
    let head = frames.slice_axis(1, 0, 1)?;
    let rest = frames.slice_axis(1, 1, WIN)?.subtract(&frames.slice_axis(1, 0, WIN - 1)?.multiply_scalar(0.97)?)?;
    let frames = Array::concatenate(&[&head, &rest], 1)?.multiply(&povey_window(WIN as usize)?.expand_dims(&[0])?)?;
    let zeros = Array::zeros(&[frames.dim(0), N_FFT - WIN], frames.dtype())?;
    let frames = Array::concatenate(&[&frames, &zeros], 1)?;
    let power = signal::rfft(&frames, N_FFT, -1)?.abs()?.power_scalar(2.0)?;
    let bank = match flavor {
        Flavor::Chatterbox => mel_filters(16000, N_FFT as usize, 80, 20.0, 8000.0, Scale::Htk)?,
        Flavor::Turbo => kaldi_mel_banks(16000, N_FFT as usize, 80, 20.0)?,
    };
    Ok(power.matmul(&bank.transpose(&[1, 0])?)?.maximum_scalar(1.1920929e-07)?.log()?)
}

/// CAMPPlus's features (its `inference`): `kaldi_fbank` less its mean over time.
pub fn campplus_features(wav16: &[f32], flavor: Flavor) -> Result<Array> {
    let fbank = kaldi_fbank(wav16, flavor)?;
    Ok(fbank.subtract(&fbank.mean(&[0], true)?)?)
}
