//! The T3 half of a voice (`t3.*` in `conds.safetensors`): the speaker
//! embedding, the reference clip's speech tokens and its emotion setting.
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use mlx::{Array, Dtype};

use crate::{Result, TtsError};

pub struct T3Cond {
    /// `t3.speaker_emb`, flattened to `[1, N]` (the voice encoder's
    /// embedding), in the file's dtype as mlx-audio uses it.
    pub speaker_emb: Array,
    /// `t3.cond_prompt_speech_tokens` `(1, T)`: the reference clip as speech tokens.
    pub prompt_speech_tokens: Option<Vec<u32>>,
    /// `t3.emotion_adv` `(1, 1, 1)` in the file's dtype (mlx-audio's float32
    /// 0.5 when absent), and its value: see [`Self::emotion`].
    emotion_adv: Array,
    emotion_value: f64,
    /// The conditioning encoder's output for the reference clip, kept for the
    /// model (`T3::id`) that computed it: it depends on the voice and the
    /// weights only, and the perceiver over a 150-token clip costs as much as
    /// three speech tokens.
    pub(super) clip: Mutex<Option<(u64, Array)>>,
}

impl T3Cond {
    /// Reads the `t3.*` tensors of a `conds.safetensors`; other keys are left for S3Gen.
    pub fn load(path: &Path) -> Result<T3Cond> {
        if !path.is_file() {
            return Err(TtsError::ModelNotFound(format!("voice conditionals {} do not exist", path.display())));
        }
        let (tensors, _) = mlx::io::load_safetensors(path).map_err(|e| TtsError::InvalidWeights(format!("{}: {}", path.display(), e.message)))?;
        T3Cond::from_tensors(tensors, path)
    }

    /// From already loaded tensors; `path` only names the file in errors.
    pub fn from_tensors(mut tensors: HashMap<String, Array>, path: &Path) -> Result<T3Cond> {
        let file = path.display().to_string();
        let bad = |key: &str, msg: String| TtsError::InvalidWeights(format!("{file}: \"{key}\" {msg}"));

        // mlx-audio would fall back to a zero speaker; Resemble AI's original
        // requires one, and a voice without it is not a voice.
        let key = "t3.speaker_emb";
        let speaker = tensors.remove(key).ok_or_else(|| bad(key, "is missing".into()))?;
        if !speaker.dtype().is_float() || speaker.size() == 0 || speaker.shape().first() != Some(&1) {
            return Err(bad(key, format!("must be a float tensor (1, N), got {:?} {:?}", speaker.dtype(), speaker.shape())));
        }
        let speaker_emb = speaker.reshape(&[1, -1]).map_err(|e| bad(key, e.message))?;
        // Read it now, so a truncated file fails here rather than mid-synthesis.
        speaker_emb.eval().map_err(|e| bad(key, e.message))?;

        let key = "t3.cond_prompt_speech_tokens";
        let prompt_speech_tokens = match tensors.remove(key) {
            None => None,
            Some(t) => {
                let shape = t.shape();
                if shape.len() != 2 || shape[0] != 1 || t.dtype().is_float() {
                    return Err(bad(key, format!("must be integer ids of shape (1, T), got {:?} {shape:?}", t.dtype())));
                }
                let ids: Vec<i64> = t.astype(Dtype::Int64).and_then(|a| a.to_vec::<i64>()).map_err(|e| bad(key, e.message))?;
                if let Some(v) = ids.iter().find(|&&v| v < 0 || v > u32::MAX as i64) {
                    return Err(bad(key, format!("holds an invalid token id {v}")));
                }
                Some(ids.into_iter().map(|v| v as u32).collect())
            }
        };

        let key = "t3.emotion_adv";
        let emotion_adv = match tensors.remove(key) {
            None => Array::full(&[1, 1, 1], 0.5, Dtype::Float32),
            Some(t) if t.dtype().is_float() && t.size() == 1 => t.reshape(&[1, 1, 1]),
            Some(t) => return Err(bad(key, format!("must be one float, got {:?} {:?}", t.dtype(), t.shape()))),
        }
        .map_err(|e| bad(key, e.message))?;
        let emotion_value =
            emotion_adv.astype(Dtype::Float32).and_then(|a| a.reshape(&[])).and_then(|a| a.item::<f32>()).map_err(|e| bad(key, e.message))? as f64;
        Ok(T3Cond { speaker_emb, prompt_speech_tokens, emotion_adv, emotion_value, clip: Mutex::new(None) })
    }

    /// The emotion input `(1, 1, 1)` for `exaggeration` (the f64 the user
    /// typed), as mlx-audio's `generate` feeds it: the voice's own tensor, in
    /// its dtype, when it holds that value, otherwise `exaggeration` as float32.
    /// The dtype carries on: a float16 voice makes a float16 emotion position.
    /// (mlx-audio also writes the replacement into its loaded voice, so there a
    /// call after another exaggeration gets float32 whatever it asks; this
    /// follows a freshly loaded model on every call.)
    pub(super) fn emotion(&self, exaggeration: f64) -> mlx::Result<Array> {
        if exaggeration == self.emotion_value {
            return Ok(self.emotion_adv.clone());
        }
        Array::full(&[1, 1, 1], exaggeration, Dtype::Float32)
    }
}
