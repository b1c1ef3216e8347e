//! The error type of the `lm` crate.
//!
//! Every variant maps to one stable code string that the Node binding exposes
//! as `error.code` (see docs/text-generation.md, "Abort and errors"); the message names the file, key
//! or option at fault.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LmError {
    /// A model folder or one of its required files does not exist.
    ModelNotFound(String),
    /// A caller-supplied value is out of range or of the wrong shape.
    InvalidArgument(String),
    /// The model folder is readable but uses something this crate cannot run
    /// (unknown architecture, no chat template, template syntax we lack).
    UnsupportedModel(String),
    /// A model file exists but its content is malformed (bad JSON, bad
    /// tokenizer definition, wrong tensor shapes).
    InvalidWeights(String),
    /// The model was used after `dispose()`.
    Disposed(String),
    /// Work stopped because the caller aborted it.
    Aborted(String),
    /// A prompt cache that does not fit the model it is used with (another
    /// model's layers, heads, head size or dtype).
    CacheMismatch(String),
    /// A prompt-cache (or chat) file that is truncated or not one.
    InvalidCacheFile(String),
    /// The processes of a distributed model could not start or stay together
    /// (a peer unreachable within the timeout, lost, or holding another model).
    Distributed(String),
    /// A reference audio clip that cannot serve as a voice (not a WAV file, truncated,
    /// non-finite samples, silence, too short); the speech crate's voice cloning raises it.
    InvalidAudio(String),
    /// MLX itself reported a failure.
    Mlx(String),
}

impl LmError {
    /// The stable code string for this error, as exposed to JavaScript.
    pub fn code(&self) -> &'static str {
        match self {
            LmError::ModelNotFound(_) => "MODEL_NOT_FOUND",
            LmError::InvalidArgument(_) => "INVALID_ARGUMENT",
            LmError::UnsupportedModel(_) => "UNSUPPORTED_MODEL",
            LmError::InvalidWeights(_) => "INVALID_WEIGHTS",
            LmError::Disposed(_) => "DISPOSED",
            LmError::Aborted(_) => "ABORTED",
            LmError::CacheMismatch(_) => "CACHE_MISMATCH",
            LmError::InvalidCacheFile(_) => "INVALID_CACHE_FILE",
            LmError::Distributed(_) => "DISTRIBUTED_ERROR",
            LmError::InvalidAudio(_) => "INVALID_AUDIO",
            LmError::Mlx(_) => "MLX_ERROR",
        }
    }

    /// The human-readable message, without the code.
    pub fn message(&self) -> &str {
        match self {
            LmError::ModelNotFound(m)
            | LmError::InvalidArgument(m)
            | LmError::UnsupportedModel(m)
            | LmError::InvalidWeights(m)
            | LmError::Disposed(m)
            | LmError::Aborted(m)
            | LmError::CacheMismatch(m)
            | LmError::InvalidCacheFile(m)
            | LmError::Distributed(m)
            | LmError::InvalidAudio(m)
            | LmError::Mlx(m) => m,
        }
    }
}

impl fmt::Display for LmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.message())
    }
}

impl std::error::Error for LmError {}

pub type Result<T, E = LmError> = std::result::Result<T, E>;

impl From<mlx::Error> for LmError {
    /// MLX's distributed backends tag their failures (a peer lost mid-step:
    /// "[ring] connection to a peer was lost"); those are `Distributed`.
    fn from(e: mlx::Error) -> Self {
        const BACKENDS: [&str; 5] = ["[ring]", "[mpi]", "[nccl]", "[jaccl]", "[distributed]"];
        if BACKENDS.iter().any(|tag| e.message.starts_with(tag)) {
            LmError::Distributed(e.message)
        } else {
            LmError::Mlx(e.message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable() {
        let cases = [
            (LmError::ModelNotFound("a".into()), "MODEL_NOT_FOUND"),
            (LmError::InvalidArgument("a".into()), "INVALID_ARGUMENT"),
            (LmError::UnsupportedModel("a".into()), "UNSUPPORTED_MODEL"),
            (LmError::InvalidWeights("a".into()), "INVALID_WEIGHTS"),
            (LmError::Disposed("a".into()), "DISPOSED"),
            (LmError::Aborted("a".into()), "ABORTED"),
            (LmError::CacheMismatch("a".into()), "CACHE_MISMATCH"),
            (LmError::InvalidCacheFile("a".into()), "INVALID_CACHE_FILE"),
            (LmError::InvalidAudio("a".into()), "INVALID_AUDIO"),
            (LmError::Mlx("a".into()), "MLX_ERROR"),
        ];
        for (err, code) in cases {
            assert_eq!(err.code(), code);
            assert_eq!(err.message(), "a");
            assert_eq!(err.to_string(), format!("{code}: a"));
        }
    }
}
