//! Chatterbox text-to-speech on MLX: T3 (text to speech tokens, on `lm`'s Llama
//! blocks and samplers), S3Gen (speech tokens to mel by flow matching) and the
//! HiFT vocoder (mel to 24 kHz audio).
pub mod config;
pub mod hift;
pub mod layers;
pub mod pipeline;
pub mod s3gen;
pub mod streaming;
pub mod t3;
pub mod text;
pub mod text_mtl;
pub mod tokenizer;
pub mod voice;
pub mod voices;

pub use lm::LmError as TtsError;
pub type Result<T> = std::result::Result<T, TtsError>;
