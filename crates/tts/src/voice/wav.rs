//! Reference clips: WAV files (through `hound`) or samples handed over in memory, checked once
//! here so the rest of voice cloning can trust them.
//!
//! Integer PCM of 8, 16, 24 or 32 bits is scaled by 2^(bits-1) and float32 is taken as it is;
//! several channels are averaged into one, as mlx-audio asks miniaudio for (`nchannels=1`).
//! mlx-audio's reader decodes every format to 16-bit integers first; this one keeps the file's
//! own precision, so only 16-bit files give bit-identical samples. Rates are checked so that
//! resampling stays cheap (`RATES`, and no rate that needs an enormous filter).
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use super::{resample, S3GEN_SR, S3_SR};
use crate::{Result, TtsError};

/// Shorter clips are refused: the voice encoder wants at least one 1.6 s window and the speech
/// tokenizer a few tokens, and Resemble asks for several seconds of speech.
pub const MIN_SECONDS: f64 = 1.0;
/// Longer clips are cut here, while reading: mlx-audio's conditioning uses 10 s (S3Gen) and 6 s
/// (T3 tokens), and only the voice encoder sees more (the whole clip, averaged over 1.6 s
/// windows), so a minute is plenty and a ten-minute recording is never read whole.
pub const MAX_SECONDS: f64 = 60.0;
/// Sample rates outside this range are refused (telephone audio to studio rates).
pub const RATES: std::ops::RangeInclusive<u32> = 4_000..=384_000;
/// The longest resampling filter accepted (8 MB of f64 taps): every common rate needs far less
/// (44.1 kHz: 56,449 taps to 16 kHz), an odd one such as 44,101 Hz millions.
const MAX_FILTER_TAPS: usize = 1 << 20;

/// A mono clip at its own sample rate.
#[derive(Debug, Clone)]
pub struct Clip {
    pub samples: Vec<f32>,
    pub sample_rate: u32,
    /// Whether the source was longer than `MAX_SECONDS` and was cut there.
    pub truncated: bool,
}

fn invalid(what: &str, why: impl std::fmt::Display) -> TtsError {
    TtsError::InvalidAudio(format!("{what}: {why}"))
}

/// A rate in `RATES` whose resampling filters to 16 and 24 kHz stay within `MAX_FILTER_TAPS`.
fn check_rate(rate: u32, what: &str) -> Result<()> {
    if !RATES.contains(&rate) {
        return Err(invalid(what, format!("a sample rate of {rate} Hz is not supported; rates from {} to {} Hz are", RATES.start(), RATES.end())));
    }
    let taps = resample::filter_taps(rate, S3_SR).max(resample::filter_taps(rate, S3GEN_SR));
    if taps > MAX_FILTER_TAPS {
        return Err(invalid(
            what,
            format!("a sample rate of {rate} Hz does not divide well with 16 and 24 kHz (resampling would need a {taps}-tap filter); use a common rate such as 16000, 44100 or 48000 Hz"),
        ));
    }
    Ok(())
}

fn max_frames(rate: u32) -> usize {
    (MAX_SECONDS * rate as f64) as usize
}

impl Clip {
    /// Checks samples given in memory (mono), cutting them at `MAX_SECONDS`.
    pub fn from_samples(mut samples: Vec<f32>, sample_rate: u32) -> Result<Clip> {
        check_rate(sample_rate, "audio samples")?;
        let truncated = samples.len() > max_frames(sample_rate);
        samples.truncate(max_frames(sample_rate));
        Clip::checked(samples, sample_rate, truncated, "audio samples")
    }

    fn checked(samples: Vec<f32>, sample_rate: u32, truncated: bool, what: &str) -> Result<Clip> {
        check_rate(sample_rate, what)?;
        let seconds = samples.len() as f64 / sample_rate as f64;
        if seconds < MIN_SECONDS {
            return Err(invalid(what, format!("the clip is {seconds:.2} s long; a voice needs at least {MIN_SECONDS} s")));
        }
        if let Some(i) = samples.iter().position(|s| !s.is_finite()) {
            return Err(invalid(what, format!("sample {i} is {} (samples must be finite)", samples[i])));
        }
        if samples.iter().all(|&s| s == 0.0) {
            return Err(invalid(what, "the clip is silent (every sample is 0)"));
        }
        Ok(Clip { samples, sample_rate, truncated })
    }

    pub fn duration(&self) -> f64 {
        self.samples.len() as f64 / self.sample_rate as f64
    }
}

/// Reads a WAV file into a mono clip (see the module docs), at most `MAX_SECONDS` of it.
pub fn read_wav(path: &Path) -> Result<Clip> {
    let what = path.display().to_string();
    let file = File::open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            TtsError::InvalidArgument(format!("{what}: no such file"))
        } else {
            invalid(&what, e)
        }
    })?;
    let mut reader = hound::WavReader::new(BufReader::new(file)).map_err(|e| match e {
        hound::Error::FormatError(m) if m.contains("RIFF") || m.contains("WAVE") => {
            invalid(&what, format!("not a WAV file ({m}); WAV (PCM or float32) is the audio format read"))
        }
        hound::Error::FormatError(m) => {
            invalid(&what, format!("a malformed or unsupported WAV header ({m}); 8/16/24/32-bit PCM and 32-bit float WAV are read"))
        }
        hound::Error::Unsupported => invalid(&what, "an unsupported WAV encoding; 8/16/24/32-bit PCM and 32-bit float WAV are read"),
        other => invalid(&what, format!("not a readable WAV file ({other})")),
    })?;
    let spec = reader.spec();
    let channels = spec.channels as usize;
    if channels == 0 {
        return Err(invalid(&what, "the WAV header declares 0 channels"));
    }
    check_rate(spec.sample_rate, &what)?;
    let declared = reader.duration() as usize;
    let frames = declared.min(max_frames(spec.sample_rate));
    let ends_early = |read: usize| {
        invalid(
            &what,
            format!("the file ends after {read} of the {declared} frames its header declares (truncated, or a header that claims more data than there is)"),
        )
    };
    let samples = match (spec.sample_format, spec.bits_per_sample) {
        (hound::SampleFormat::Float, 32) => mix(reader.samples::<f32>().map(|s| s.map(f64::from)), channels, frames, ends_early)?,
        (hound::SampleFormat::Int, bits @ (8 | 16 | 24 | 32)) => {
            let scale = 1.0 / f64::from(1u32 << (bits - 1));
            mix(reader.samples::<i32>().map(|s| s.map(|v| f64::from(v) * scale)), channels, frames, ends_early)?
        }
        (format, bits) => {
            return Err(invalid(&what, format!("{bits}-bit {format:?} samples are not supported; 8/16/24/32-bit PCM and 32-bit float are")))
        }
    };
    Clip::checked(samples, spec.sample_rate, declared > frames, &what)
}

/// Averages interleaved channels into `frames` mono samples (in f64, then f32).
fn mix(mut it: impl Iterator<Item = hound::Result<f64>>, channels: usize, frames: usize, ends_early: impl Fn(usize) -> TtsError) -> Result<Vec<f32>> {
    // Grown as samples arrive, not sized by the header, which may lie.
    let mut out = Vec::with_capacity(frames.min(1 << 20));
    for frame in 0..frames {
        let mut sum = 0.0;
        for _ in 0..channels {
            match it.next() {
                Some(Ok(v)) => sum += v,
                _ => return Err(ends_early(frame)),
            }
        }
        out.push((sum / channels as f64) as f32);
    }
    Ok(out)
}
