//! Files a model needs from a repo of its own, found as huggingface_hub finds one offline: the
//! S3 speech tokenizer's weights, which mlx-audio's Chatterbox downloads from
//! `mlx-community/S3TokenizerV2` beside the checkpoint. Only the cache is read.
use std::path::{Path, PathBuf};

use crate::cache::RepoCache;
use crate::config::Config;
use crate::error::{HubError, Result};

/// One file of a repo's `main`, what it is, and the loadTTS option that names it instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachedFile {
    pub repo: &'static str,
    pub file: &'static str,
    /// What the file is, for messages.
    pub what: &'static str,
    pub option: &'static str,
}

/// S3TokenizerV2's weights, as mlx-audio's Chatterbox loads them.
pub const S3_TOKENIZER: CachedFile =
    CachedFile { repo: "mlx-community/S3TokenizerV2", file: "model.safetensors", what: "the S3 speech tokenizer's weights", option: "s3Tokenizer" };

impl CachedFile {
    /// `explicit` (the file, or a folder holding it) when given; else the file in the snapshot
    /// of the repo's `main` under `config`'s cache folder (`HF_HUB_CACHE`, else `$HF_HOME/hub`,
    /// else `~/.cache/huggingface/hub`). Missing: `MODEL_NOT_FOUND` naming the file, the repo
    /// and the option.
    pub fn find(&self, explicit: Option<&Path>, config: &Config) -> Result<PathBuf> {
        let CachedFile { repo, file, what, option } = *self;
        if let Some(p) = explicit {
            let inside = p.join(file);
            return match (p.is_file(), p.is_dir() && inside.is_file()) {
                (true, _) => Ok(p.to_path_buf()),
                (_, true) => Ok(inside),
                _ => Err(HubError::not_found(format!(
                    "{what} were not found: {} does not exist (the `{option}` option takes {repo}'s {file} or the folder holding it)",
                    if p.is_dir() { inside.display() } else { p.display() }
                ))),
            };
        }
        let fix = format!("download it (`hf download {repo} {file}`) or pass the folder holding it as loadTTS's `{option}` option");
        let Some(cache) = config.cache_dir.as_deref() else {
            return Err(HubError::not_found(format!(
                "{what} ({file} of the Hugging Face repo {repo}) cannot be looked up: there is no Hugging Face cache folder \
                 (HF_HUB_CACHE, HF_HOME and HOME are unset); {fix}"
            )));
        };
        RepoCache::new(cache, repo).cached_file("main", file).ok_or_else(|| {
            HubError::not_found(format!(
                "{what}, {file} of the Hugging Face repo {repo}, are not in the Hugging Face cache at {}: {fix}",
                cache.display()
            ))
        })
    }
}

/// [`S3_TOKENIZER`]'s `find`.
pub fn find_s3_tokenizer(explicit: Option<&Path>, config: &Config) -> Result<PathBuf> {
    S3_TOKENIZER.find(explicit, config)
}
