use std::ffi::CStr;
use std::fmt;

/// An MLX failure, carrying MLX's own message (or ours for misuse caught in Rust).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub message: String,
}

impl Error {
    pub fn new(message: impl Into<String>) -> Self {
        Error { message: message.into() }
    }

    /// The message the shim stored for this thread after a failed call.
    pub(crate) fn last() -> Self {
        // SAFETY: the shim returns a pointer to a thread-local, NUL-terminated string.
        let msg = unsafe { CStr::from_ptr(mlx_sys::mlxn_last_error()) };
        Error::new(msg.to_string_lossy().into_owned())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Turns a shim status into a Result.
pub(crate) fn check(rc: std::os::raw::c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::last())
    }
}
