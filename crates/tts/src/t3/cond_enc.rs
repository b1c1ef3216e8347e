//! T3's conditioning encoder: the positions that open every prompt, in order
//! speaker (one), reference clip (32 after the perceiver), emotion (one).
use lm::weights::Weights;
use mlx::nn::Linear;
use mlx::Array;

use super::perceiver::Perceiver;
use super::T3Config;
use crate::Result;

pub struct CondEncoder {
    speaker_embed_size: i32,
    spkr_enc: Linear,
    emotion_adv_fc: Option<Linear>,
    perceiver: Option<Perceiver>,
}

impl CondEncoder {
    pub fn load(w: &mut Weights, prefix: &str, cfg: &T3Config) -> Result<CondEncoder> {
        let dims = cfg.hidden_size();
        let emotion_adv_fc = if cfg.emotion_adv { Some(w.linear(&format!("{prefix}.emotion_adv_fc"), 1, dims, false)?) } else { None };
        let perceiver = if cfg.use_perceiver_resampler { Some(Perceiver::load(w, &format!("{prefix}.perceiver"), dims)?) } else { None };
        Ok(CondEncoder {
            speaker_embed_size: cfg.speaker_embed_size,
            spkr_enc: w.linear(&format!("{prefix}.spkr_enc"), cfg.speaker_embed_size, dims, true)?,
            emotion_adv_fc,
            perceiver,
        })
    }

    pub fn speaker_embed_size(&self) -> i32 {
        self.speaker_embed_size
    }

    /// The embedded reference clip `[1, T, dims]` as conditioning positions:
    /// through the perceiver when the model has one.
    pub fn clip(&self, prompt: &Array) -> mlx::Result<Array> {
        match &self.perceiver {
            Some(perceiver) => perceiver.forward(prompt),
            None => Ok(prompt.clone()),
        }
    }

    /// `speaker` `[1, speaker_embed_size]`; `clip` the reference clip from
    /// [`Self::clip`], if any; `emotion` `(1, 1, 1)`. Returns `[1, L, dims]`.
    pub fn forward(&self, speaker: &Array, clip: Option<&Array>, emotion: &Array) -> mlx::Result<Array> {
        let mut parts = vec![self.spkr_enc.forward(speaker)?.expand_dims(&[1])?];
        if let Some(c) = clip {
            parts.push(c.clone());
        }
        if let Some(fc) = &self.emotion_adv_fc {
            parts.push(fc.forward(emotion)?);
        }
        let refs: Vec<&Array> = parts.iter().collect();
        Array::concatenate(&refs, 1)
    }
}
