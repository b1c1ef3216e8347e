//! STUB (replaced by the helper's S3TokenizerV2).
use std::path::{Path, PathBuf};

use mlx::Array;

use crate::{Result, TtsError};

pub struct S3TokenizerV2;

impl S3TokenizerV2 {
    pub fn load(_path: &Path) -> Result<S3TokenizerV2> {
        Err(TtsError::UnsupportedModel("stub".into()))
    }
    pub fn tokens(&self, _mel: &Array) -> Result<Vec<i32>> {
        Err(TtsError::UnsupportedModel("stub".into()))
    }
}

pub fn find(_explicit: Option<&Path>) -> Result<PathBuf> {
    Err(TtsError::ModelNotFound("stub".into()))
}
