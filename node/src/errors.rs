//! JS errors with a stable `code` property (see index.js for how it is exposed).
use napi::{Error, Status};

/// The codes the public API documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)]
pub enum Code {
    ModelNotFound,
    UnsupportedModel,
    InvalidWeights,
    InvalidArgument,
    Disposed,
    Aborted,
    CacheMismatch,
    InvalidCacheFile,
    CacheBusy,
    AuthRequired,
    DownloadFailed,
    DistributedError,
    MlxError,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::ModelNotFound => "MODEL_NOT_FOUND",
            Code::UnsupportedModel => "UNSUPPORTED_MODEL",
            Code::InvalidWeights => "INVALID_WEIGHTS",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::Disposed => "DISPOSED",
            Code::Aborted => "ABORTED",
            Code::CacheMismatch => "CACHE_MISMATCH",
            Code::InvalidCacheFile => "INVALID_CACHE_FILE",
            Code::CacheBusy => "CACHE_BUSY",
            Code::AuthRequired => "AUTH_REQUIRED",
            Code::DownloadFailed => "DOWNLOAD_FAILED",
            Code::DistributedError => "DISTRIBUTED_ERROR",
            Code::MlxError => "MLX_ERROR",
        }
    }
}

/// napi-rs puts the status string in `error.code`; using our code as the
/// status gives JS `err.code === 'INVALID_ARGUMENT'` etc.
pub fn js_error(code: Code, message: impl Into<String>) -> Error<String> {
    Error::new(code.as_str().to_string(), message.into())
}

pub fn mlx_error(e: mlx::Error) -> Error<String> {
    js_error(Code::MlxError, e.message)
}

/// For async functions, whose errors napi-rs requires to carry a `Status`.
pub fn plain(e: Error<String>) -> Error {
    Error::new(Status::GenericFailure, format!("{}: {}", e.status, e.reason))
}

pub fn lm_error(e: lm::LmError) -> Error<String> {
    Error::new(e.code().to_string(), e.message().to_string())
}

pub fn hub_error(e: ::hub::HubError) -> Error<String> {
    Error::new(e.code().to_string(), e.message)
}
