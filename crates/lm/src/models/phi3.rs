//! Phi-3, Phi-3.5 and Phi-4-mini (`phi3`), as MLX-LM's `phi3.py`: the shared
//! decoder with a fused `qkv_proj` (picked up from the weights by
//! `Projections::load`) and a fused `gate_up_proj` MLP; partial rotary
//! (`partial_rotary_factor`) and LongRoPE / "su" scaling come from the shared
//! config and RoPE variants.
use mlx::Dtype;

use super::decoder::{Decoder, FeedForward, Mlp};
use super::LanguageModel;
use crate::config::ModelConfig;
use crate::error::Result;
use crate::weights::Weights;

pub(super) fn build(config: ModelConfig, w: Weights, dtype: Option<Dtype>, progress: &mut dyn FnMut(f64)) -> Result<Box<dyn LanguageModel>> {
    let (h, ff) = (config.hidden_size, config.intermediate_size);
    let ffn = |w: &mut Weights, _: usize, p: &str| -> Result<Box<dyn FeedForward>> { Ok(Box::new(Mlp::load_gate_up(w, p, h, ff)?)) };
    Ok(Box::new(Decoder::build_with(config, w, dtype, progress, &ffn)?))
}
