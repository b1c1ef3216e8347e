//! STUB (replaced by the helper's CAMPPlus).
use lm::weights::Weights;
use mlx::Array;

use crate::{Result, TtsError};

pub struct CamPlus;

impl CamPlus {
    pub fn load(_w: &mut Weights, _prefix: &str) -> Result<CamPlus> {
        Err(TtsError::UnsupportedModel("stub".into()))
    }
    pub fn embed(&self, _wav16: &[f32]) -> Result<Array> {
        Err(TtsError::UnsupportedModel("stub".into()))
    }
}
