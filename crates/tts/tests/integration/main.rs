//! The tts crate's integration tests, one module per file, in one test binary: each binary links the
//! crate again (thin LTO), so one binary instead of one per file saves minutes of CI's build.
mod campplus;
mod common;
mod hift;
mod s3gen;
mod s3tokenizer;
mod t3;
mod turbo_stream;
mod turbo_voice;
mod voice;
