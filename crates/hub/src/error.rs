//! Errors with the public API's stable codes (index.d.ts `ErrorCode`).
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No such repo, revision or file on the hub, or not cached while offline.
    NotFound,
    /// HTTP 401/403: a private or gated repo without a token that may read it.
    AuthRequired,
    /// Network failure, a cut connection that retries could not resume, a size or hash mismatch.
    DownloadFailed,
    /// A malformed model id, revision or kind.
    InvalidArgument,
    /// The caller's abort flag was set.
    Aborted,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubError {
    pub kind: Kind,
    pub message: String,
    /// Network trouble or a server-side error (5xx, 429): worth a retry, and the cache may
    /// stand in for the hub (as huggingface_hub does).
    pub retryable: bool,
}

impl HubError {
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        HubError { kind, message: message.into(), retryable: false }
    }

    pub fn retryable(message: impl Into<String>) -> Self {
        HubError { retryable: true, ..Self::failed(message) }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Kind::NotFound, message)
    }

    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(Kind::DownloadFailed, message)
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(Kind::InvalidArgument, message)
    }

    pub fn aborted() -> Self {
        Self::new(Kind::Aborted, "the download was aborted")
    }

    /// The public error code.
    pub fn code(&self) -> &'static str {
        match self.kind {
            Kind::NotFound => "MODEL_NOT_FOUND",
            Kind::AuthRequired => "AUTH_REQUIRED",
            Kind::DownloadFailed => "DOWNLOAD_FAILED",
            Kind::InvalidArgument => "INVALID_ARGUMENT",
            Kind::Aborted => "ABORTED",
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for HubError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.message)
    }
}

impl std::error::Error for HubError {}

pub type Result<T> = std::result::Result<T, HubError>;
