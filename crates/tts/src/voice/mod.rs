//! Voice cloning, the front of mlx-audio's `Model.prepare_conditionals`: a reference clip read
//! and checked (`wav`), resampled to 24 kHz and 16 kHz as mlx-audio resamples (`resample`), its
//! log-mel front ends and CAMPPlus's filter bank (`mel`), the voice encoder's speaker
//! embedding for T3 (`encoder`), CAMPPlus's x-vector for S3Gen (`campplus`), the S3 speech
//! tokenizer (`s3tokenizer`), and the whole conditioning from a clip (`clone`).
use std::path::Path;

use lm::weights::Weights;

use crate::config::ChatterboxConfig;
use crate::Result;

pub mod campplus;
pub mod clone;
pub mod encoder;
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
/// T3's prompt tokens come from the first 6 s at 16 kHz.
pub const ENC_COND_LEN: usize = 6 * S3_SR as usize;
/// S3Gen's reference is the first 10 s at 24 kHz.
pub const DEC_COND_LEN: usize = 10 * S3GEN_SR as usize;

/// The signals `prepare_conditionals` derives from a clip `(ref_wav, ref_sr)`.
pub struct ReferenceSignals {
    /// The clip at 24 kHz, cut to 10 s: S3Gen's mel and (at 16 kHz) its tokens and x-vector.
    pub wav24: Vec<f32>,
    /// `wav24` resampled to 16 kHz, as the original resamples S3Gen's reference.
    pub wav16_from_24: Vec<f32>,
    /// The whole clip at 16 kHz: the voice encoder's input.
    pub wav16_full: Vec<f32>,
}

impl ReferenceSignals {
    pub fn new(clip: &Clip) -> ReferenceSignals {
        let mut wav24 = resample::resample(&clip.samples, clip.sample_rate, S3GEN_SR);
        wav24.truncate(DEC_COND_LEN);
        let wav16_from_24 = resample::resample(&wav24, S3GEN_SR, S3_SR);
        let wav16_full = resample::resample(&clip.samples, clip.sample_rate, S3_SR);
        ReferenceSignals { wav24, wav16_from_24, wav16_full }
    }

    /// The first 6 s at 16 kHz: the signal of T3's prompt tokens.
    pub fn wav16(&self) -> &[f32] {
        &self.wav16_full[..self.wav16_full.len().min(ENC_COND_LEN)]
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
    /// The `ve.*` and `s3gen.speaker_encoder.*` tensors of a Chatterbox folder's weights; every
    /// other tensor is left unread (MLX reads a tensor when it is first evaluated).
    pub fn load(dir: &Path) -> Result<SpeakerEncoders> {
        let config = ChatterboxConfig::from_dir(dir)?;
        let mut w = Weights::load(dir, None, config.quantization())?;
        w.discard(|k| !k.starts_with("ve.") && !k.starts_with("s3gen.speaker_encoder."));
        let voice_encoder = VoiceEncoder::load(&mut w, "ve.")?;
        let campplus = CamPlus::load(&mut w, "s3gen.speaker_encoder.")?;
        w.finish()?;
        Ok(SpeakerEncoders { voice_encoder, campplus })
    }
}
