//! A voice from a reference clip: mlx-audio's `Model.prepare_conditionals` (with S3Gen's
//! `embed_ref`), or Chatterbox Turbo's (`Flavor::Turbo`), giving the tensors a
//! `conds.safetensors` holds, under the same names, so one representation serves synthesis
//! (`pipeline::Voice::from_tensors`) and `save`.
use std::collections::HashMap;
use std::path::Path;

use mlx::{Array, Dtype};

use super::mel::{s3_tokenizer_log_mel, s3gen_mel};
use super::s3tokenizer::S3TokenizerV2;
use super::{resample, Clip, Flavor, ReferenceSignals, SpeakerEncoders, S3GEN_SR};
use crate::{Result, TtsError};

/// The three networks of cloning: the voice encoder (T3's speaker embedding), CAMPPlus (S3Gen's
/// x-vector) and the S3 speech tokenizer (both prompts' tokens).
pub struct VoiceCloner {
    encoders: SpeakerEncoders,
    tokenizer: S3TokenizerV2,
    /// T3's prompt keeps this many tokens (`speech_cond_prompt_len`).
    prompt_len: usize,
    flavor: Flavor,
}

/// Where a clip came from: mlx-audio's Chatterbox treats a file and samples differently (see
/// `signals`); its Turbo takes both to 24 kHz first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClipSource {
    File,
    Samples,
}

impl VoiceCloner {
    /// The voice encoder (`ve.*`) and CAMPPlus (`s3gen.speaker_encoder.*`) from the Chatterbox
    /// (or Turbo) checkpoint in `dir` (only those tensors are read), the tokenizer from
    /// `tokenizer` (its `model.safetensors`).
    pub fn load(dir: &Path, tokenizer: &Path, prompt_len: usize, flavor: Flavor) -> Result<VoiceCloner> {
        let tokenizer = S3TokenizerV2::load(tokenizer)?;
        Ok(VoiceCloner { encoders: SpeakerEncoders::load(dir, flavor)?, tokenizer, prompt_len, flavor })
    }

    /// The conditioning tensors of `clip`, named as in `conds.safetensors`: `t3.speaker_emb`,
    /// `t3.cond_prompt_speech_tokens`, `t3.emotion_adv`, `gen.prompt_token`,
    /// `gen.prompt_token_len`, `gen.prompt_feat`, `gen.prompt_feat_len`, `gen.embedding`
    /// (Turbo: no `t3.emotion_adv`, its T3 has no emotion input and its conds file none).
    /// `keep_going` is asked between the networks.
    pub fn conditionals(&self, clip: &Clip, source: ClipSource, exaggeration: f32, keep_going: &dyn Fn() -> bool) -> Result<HashMap<String, Array>> {
        let sig = match self.flavor {
            Flavor::Chatterbox => signals(clip, source)?,
            Flavor::Turbo => ReferenceSignals::turbo(clip)?,
        };
        let stopped = || TtsError::Aborted("the voice was not made: stopped".into());

        // S3Gen's reference (`embed_ref`): the 24 kHz mel, the tokens of the same 10 s at 16 kHz,
        // cut so that the mel has two frames per token, and the x-vector.
        let mel = s3gen_mel(&sig.wav24)?.transpose(&[1, 0])?.expand_dims(&[0])?;
        let mut tokens = self.tokenizer.tokens(&s3_tokenizer_log_mel(sig.s3gen_token_signal())?)?;
        if !keep_going() {
            return Err(stopped());
        }
        let frames = mel.dim(1) as usize;
        let mel = if tokens.len() < frames / 2 {
            mel.slice_axis(1, 0, 2 * tokens.len() as i32)?
        } else {
            tokens.truncate(frames / 2);
            mel
        };
        if tokens.is_empty() {
            return Err(TtsError::InvalidAudio("the clip gives the speech tokenizer no tokens".into()));
        }
        let embedding = self.encoders.campplus.embed(&sig.wav16_from_24)?;
        if !keep_going() {
            return Err(stopped());
        }

        // T3's: the tokens of the first 6 s at 16 kHz (Turbo: 15 s), kept to the prompt length,
        // and the voice encoder's embedding of the whole clip (Turbo: of the same 15 s).
        let mut t3_tokens = self.tokenizer.tokens(&s3_tokenizer_log_mel(sig.wav16())?)?;
        t3_tokens.truncate(self.prompt_len);
        let speaker = self.encoders.voice_encoder.embed(sig.voice_encoder_signal())?;

        let ids = |t: &[i32]| Array::from_slice(t, &[1, t.len() as i32]);
        let len = |n: usize| Array::from_slice(&[n as i32], &[1]);
        let feat_len = mel.dim(1) as usize;
        let mut tensors = vec![
            ("t3.speaker_emb", speaker),
            ("t3.cond_prompt_speech_tokens", ids(&t3_tokens)?),
            ("gen.prompt_token", ids(&tokens)?),
            ("gen.prompt_token_len", len(tokens.len())?),
            ("gen.prompt_feat", mel),
            ("gen.prompt_feat_len", len(feat_len)?),
            ("gen.embedding", embedding),
        ];
        if self.flavor == Flavor::Chatterbox {
            tensors.push(("t3.emotion_adv", Array::full(&[1, 1, 1], exaggeration as f64, Dtype::Float32)?));
        }
        let refs: Vec<&Array> = tensors.iter().map(|(_, a)| a).collect();
        mlx::eval(&refs)?;
        Ok(tensors.into_iter().map(|(k, a)| (k.to_string(), a)).collect())
    }
}

/// What `prepare_conditionals` derives from the clip. Given a file path, mlx-audio loads it
/// resampled to 24 kHz and treats that as the clip, so its 16 kHz signals come from the 24 kHz
/// one; given samples, it resamples the original to 16 kHz directly.
fn signals(clip: &Clip, source: ClipSource) -> Result<ReferenceSignals> {
    match source {
        ClipSource::Samples => Ok(ReferenceSignals::new(clip)),
        ClipSource::File if clip.sample_rate == S3GEN_SR => Ok(ReferenceSignals::new(clip)),
        ClipSource::File => {
            let at24 = Clip::from_samples(resample::resample(&clip.samples, clip.sample_rate, S3GEN_SR), S3GEN_SR)?;
            Ok(ReferenceSignals::new(&at24))
        }
    }
}
