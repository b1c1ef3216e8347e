//! The S3Gen half of a voice (`gen.*` in `conds.safetensors`): the reference
//! clip's speech tokens and mel, which the flow continues from, and its x-vector.
use std::collections::HashMap;
use std::path::Path;

use mlx::{Array, Dtype};

use crate::{Result, TtsError};

/// Mel channels of `prompt_feat`.
const MEL_BINS: i32 = 80;
/// Size of the CAMPPlus x-vector.
const XVECTOR_DIM: i32 = 192;

pub struct GenConds {
    /// `gen.prompt_token` `(1, Tp)`, kept on the host: it is concatenated with
    /// each request's tokens before one upload.
    pub prompt_tokens: Vec<u32>,
    /// `gen.prompt_feat` `(1, Lp, 80)`: the reference mel (normally `Lp = 2 Tp`).
    pub prompt_feat: Array,
    /// `gen.embedding` `(1, 192)`: the speaker x-vector.
    pub embedding: Array,
}

impl GenConds {
    /// Reads the `gen.*` tensors of a voice file (other keys, `t3.*`, are T3's).
    pub fn load(path: &Path) -> Result<GenConds> {
        if !path.is_file() {
            return Err(TtsError::ModelNotFound(format!("voice conditionals {} do not exist", path.display())));
        }
        let (mut tensors, _) = mlx::io::load_safetensors(path).map_err(|e| TtsError::InvalidWeights(format!("{}: {}", path.display(), e.message)))?;
        GenConds::from_tensors(&mut tensors, &path.display().to_string())
    }

    /// Takes the `gen.*` tensors out of an already loaded voice file (so one
    /// read serves T3 and S3Gen); `source` names the file in errors.
    pub fn from_tensors(tensors: &mut HashMap<String, Array>, source: &str) -> Result<GenConds> {
        let bad = |key: &str, msg: String| TtsError::InvalidWeights(format!("{source}: \"{key}\" {msg}"));
        let mut take = |key: &str| tensors.remove(key).ok_or_else(|| bad(key, "is missing".into()));

        let tokens = take("gen.prompt_token")?;
        let shape = tokens.shape();
        if shape.len() != 2 || shape[0] != 1 || tokens.dtype().is_float() {
            return Err(bad("gen.prompt_token", format!("must be integer ids of shape (1, T), got {:?} {shape:?}", tokens.dtype())));
        }
        let ids: Vec<i64> = tokens.astype(Dtype::Int64).and_then(|a| a.to_vec::<i64>()).map_err(|e| bad("gen.prompt_token", e.message))?;
        if let Some(t) = ids.iter().find(|&&t| t < 0 || t > u32::MAX as i64) {
            return Err(bad("gen.prompt_token", format!("holds an invalid token id {t}")));
        }
        let prompt_tokens: Vec<u32> = ids.into_iter().map(|t| t as u32).collect();

        // mlx-audio adds this length to the request's when it builds the
        // encoder mask; any other value than the token count breaks its shapes.
        let len = take("gen.prompt_token_len")?;
        let len_value = if len.size() == 1 && !len.dtype().is_float() {
            len.astype(Dtype::Int64).and_then(|a| a.item::<i64>()).map_err(|e| bad("gen.prompt_token_len", e.message))?
        } else {
            return Err(bad("gen.prompt_token_len", format!("must be one integer, got {:?} {:?}", len.dtype(), len.shape())));
        };
        if len_value != prompt_tokens.len() as i64 {
            return Err(bad("gen.prompt_token_len", format!("is {len_value} but gen.prompt_token holds {} tokens", prompt_tokens.len())));
        }

        let prompt_feat = take("gen.prompt_feat")?;
        let shape = prompt_feat.shape();
        if shape.len() != 3 || shape[0] != 1 || shape[2] != MEL_BINS || !prompt_feat.dtype().is_float() {
            return Err(bad("gen.prompt_feat", format!("must be a float mel of shape (1, T, {MEL_BINS}), got {:?} {shape:?}", prompt_feat.dtype())));
        }

        let embedding = take("gen.embedding")?;
        let shape = embedding.shape();
        if shape != [1, XVECTOR_DIM] || !embedding.dtype().is_float() {
            return Err(bad("gen.embedding", format!("must be a float x-vector of shape (1, {XVECTOR_DIM}), got {:?} {shape:?}", embedding.dtype())));
        }
        // Read now, so a truncated file fails here rather than mid-synthesis.
        mlx::eval(&[&prompt_feat, &embedding]).map_err(|e| TtsError::InvalidWeights(format!("{source}: {}", e.message)))?;
        Ok(GenConds { prompt_tokens, prompt_feat, embedding })
    }
}
