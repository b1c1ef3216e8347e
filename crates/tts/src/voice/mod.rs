//! Voice cloning, the front of mlx-audio's `Model.prepare_conditionals`: a reference clip read
//! and checked (`wav`), resampled to 24 kHz and 16 kHz as mlx-audio resamples (`resample`),
//! Turbo's loudness normalisation (`loudness`), its log-mel front ends and CAMPPlus's filter
//! bank (`mel`), the voice encoder's speaker embedding for T3 (`encoder`), CAMPPlus's x-vector
//! for S3Gen (`campplus`), the S3 speech tokenizer (`s3tokenizer`), and the whole conditioning
//! from a clip (`clone`). Chatterbox Turbo's `prepare_conditionals` differs in places
//! (`Flavor`).
use std::path::Path;

use lm::weights::Weights;

use crate::config::ChatterboxConfig;
use crate::Result;

pub mod campplus;
pub mod clone;
pub mod encoder;
pub mod loudness;
pub mod mel;
pub mod resample;
pub mod s3tokenizer;
pub mod wav;

pub use campplus::CamPlus;
pub use encoder::VoiceEncoder;
pub use s3tokenizer::S3TokenizerV2;
pub use wav::{read_wav, Clip};

/// The speech tokenizer's and the voice encoder's rate.
pub const S3_SR: u32 = 16_000;
/// S3Gen's (and the output audio's) rate.
pub const S3GEN_SR: u32 = 24_000;
/// Chatterbox's T3 prompt tokens come from the first 6 s at 16 kHz.
pub const ENC_COND_LEN: usize = 6 * S3_SR as usize;
/// Turbo's T3 prompt tokens and speaker embedding come from the first 15 s at 16 kHz.
pub const TURBO_ENC_COND_LEN: usize = 15 * S3_SR as usize;
/// S3Gen's reference is the first 10 s at 24 kHz (both models).
pub const DEC_COND_LEN: usize = 10 * S3GEN_SR as usize;
/// Turbo asks for a clip longer than this (mlx-audio asserts it).
pub const TURBO_MIN_SECONDS: f64 = 5.0;
/// Turbo normalises the clip's loudness to this before anything else.
pub const TURBO_TARGET_LUFS: f64 = -27.0;

/// Whose `prepare_conditionals` a voice is made by: Chatterbox's (also Multilingual's) or
/// Chatterbox Turbo's (`chatterbox_turbo.py`), which differs in what it does to the clip
/// (`ReferenceSignals::turbo`), in CAMPPlus's filter bank and statistics pooling
/// (`campplus`), in the voice encoder's normalisation (`encoder`), and in having no emotion
/// input. Its tensors are named otherwise too (`s3gen::turbo_names`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Chatterbox,
    Turbo,
}

/// The signals `prepare_conditionals` derives from a clip `(ref_wav, ref_sr)`.
pub struct ReferenceSignals {
    /// The clip at 24 kHz, cut to 10 s: S3Gen's mel and (at 16 kHz) its x-vector.
    pub wav24: Vec<f32>,
    /// `wav24` resampled to 16 kHz, as `embed_ref` resamples S3Gen's reference for CAMPPlus
    /// (and Chatterbox's S3Gen tokens).
    pub wav16_from_24: Vec<f32>,
    /// The whole clip at 16 kHz: Chatterbox's voice encoder input; for Turbo, the 24 kHz clip
    /// (normalised, before the cut) at 16 kHz, the source of its tokens and speaker embedding.
    pub wav16_full: Vec<f32>,
    flavor: Flavor,
}

impl ReferenceSignals {
    /// Chatterbox's: the clip to 24 kHz (cut to 10 s, then to 16 kHz) and, separately, to 16 kHz.
    pub fn new(clip: &Clip) -> ReferenceSignals {
        let mut wav24 = resample::resample(&clip.samples, clip.sample_rate, S3GEN_SR);
        wav24.truncate(DEC_COND_LEN);
        let wav16_from_24 = resample::resample(&wav24, S3GEN_SR, S3_SR);
        let wav16_full = resample::resample(&clip.samples, clip.sample_rate, S3_SR);
        ReferenceSignals { wav24, wav16_from_24, wav16_full, flavor: Flavor::Chatterbox }
    }

    /// Turbo's: the clip to 24 kHz (from a file or samples alike), longer than 5 s or
    /// INVALID_AUDIO, its loudness normalised to -27 LUFS, then to 16 kHz whole; the 24 kHz
    /// signal cut to 10 s for S3Gen.
    pub fn turbo(clip: &Clip) -> Result<ReferenceSignals> {
        let mut wav24 = resample::resample(&clip.samples, clip.sample_rate, S3GEN_SR);
        let seconds = wav24.len() as f64 / S3GEN_SR as f64;
        if seconds <= TURBO_MIN_SECONDS {
            return Err(crate::TtsError::InvalidAudio(format!(
                "the clip is {seconds:.2} s long; a Chatterbox Turbo voice needs a clip longer than {TURBO_MIN_SECONDS} s"
            )));
        }
        loudness::normalize(&mut wav24, S3GEN_SR, TURBO_TARGET_LUFS);
        let wav16_full = resample::resample(&wav24, S3GEN_SR, S3_SR);
        wav24.truncate(DEC_COND_LEN);
        let wav16_from_24 = resample::resample(&wav24, S3GEN_SR, S3_SR);
        Ok(ReferenceSignals { wav24, wav16_from_24, wav16_full, flavor: Flavor::Turbo })
    }

    /// The signal of T3's prompt tokens: the first 6 s at 16 kHz (Turbo: 15 s).
    pub fn wav16(&self) -> &[f32] {
        let len = match self.flavor {
            Flavor::Chatterbox => ENC_COND_LEN,
            Flavor::Turbo => TURBO_ENC_COND_LEN,
        };
        &self.wav16_full[..self.wav16_full.len().min(len)]
    }

    /// The signal of S3Gen's prompt tokens: Chatterbox's 10 s at 24 kHz taken to 16 kHz;
    /// Turbo's first 10 s of the whole clip at 16 kHz (the same samples but near the cut).
    pub fn s3gen_token_signal(&self) -> &[f32] {
        match self.flavor {
            Flavor::Chatterbox => &self.wav16_from_24,
            Flavor::Turbo => &self.wav16_full[..self.wav16_full.len().min(DEC_COND_LEN * S3_SR as usize / S3GEN_SR as usize)],
        }
    }

    /// The voice encoder's signal: Chatterbox's whole clip at 16 kHz; Turbo's first 15 s.
    pub fn voice_encoder_signal(&self) -> &[f32] {
        match self.flavor {
            Flavor::Chatterbox => &self.wav16_full,
            Flavor::Turbo => self.wav16(),
        }
    }
}

/// The two speaker encoders a voice is made with: the voice encoder (T3's speaker embedding) and
/// CAMPPlus (S3Gen's x-vector). Speech synthesis does not use them, so `Chatterbox::load` drops
/// their tensors unread and they are read here, from the same model folder, only when a voice is
/// made (33 MB in float32: CAMPPlus 28, the voice encoder 6).
pub struct SpeakerEncoders {
    pub voice_encoder: VoiceEncoder,
    pub campplus: CamPlus,
}

impl SpeakerEncoders {
    /// The `ve.*` and `s3gen.speaker_encoder.*` tensors of a Chatterbox (or, by `flavor`,
    /// Turbo) folder's weights; every other tensor is left unread (MLX reads a tensor when it is
    /// first evaluated). Turbo's names are renamed onto Chatterbox's first.
    pub fn load(dir: &Path, flavor: Flavor) -> Result<SpeakerEncoders> {
        let config = ChatterboxConfig::from_dir(dir)?;
        let mut w = Weights::load(dir, None, config.quantization())?;
        w.discard(|k| !k.starts_with("ve.") && !k.starts_with("s3gen.speaker_encoder."));
        if flavor == Flavor::Turbo {
            crate::s3gen::turbo_names::rename(&mut w)?;
        }
        let voice_encoder = VoiceEncoder::load(&mut w, "ve.", flavor)?;
        let campplus = CamPlus::load(&mut w, "s3gen.speaker_encoder.", flavor)?;
        w.finish()?;
        Ok(SpeakerEncoders { voice_encoder, campplus })
    }
}
