//! Model families, found by `model_type` in `registry`. Qwen3, Llama (and
//! Mistral) and Qwen2 share one decoder.
mod attention;
mod decoder;
pub mod registry;

pub use decoder::{Decoder, DecoderStack};

use std::path::Path;

use mlx::{Array, Dtype};

use crate::cache::{Cache, LayerCaches};
use crate::config::ModelConfig;
use crate::error::Result;

/// A causal language model the generation loop can drive.
pub trait LanguageModel: Send {
    /// Logits `[B, L, vocab]` for `ids` `[B, L]` (only the last position when `last_only`).
    /// `caches` are the caller's (one per layer, from `new_caches` or kept from
    /// an earlier call): the model appends to them.
    fn forward(&self, ids: &Array, caches: &mut [Box<dyn Cache>], last_only: bool) -> mlx::Result<Array>;
    fn new_caches(&self) -> LayerCaches;
    fn config(&self) -> &ModelConfig;
    fn dtype(&self) -> Dtype;
    /// `(bits, group_size)` of the bulk of the weights, if quantized.
    fn quantization(&self) -> Option<(i32, i32)>;
}

pub fn load(dir: &Path, dtype: Option<Dtype>) -> Result<Box<dyn LanguageModel>> {
    load_with_progress(dir, dtype, &mut |_| {})
}

/// As `load`, telling `progress` the fraction of the weights read so far
/// (increasing, the last exactly 1).
pub fn load_with_progress(dir: &Path, dtype: Option<Dtype>, progress: &mut dyn FnMut(f64)) -> Result<Box<dyn LanguageModel>> {
    registry::load(dir, dtype, progress)
}
