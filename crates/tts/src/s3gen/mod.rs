//! S3Gen flow: speech tokens to an 80-bin mel at 50 frames/s, by a conformer
//! encoder and causal conditional flow matching, continuing a voice prompt.
//!
//! Streaming notes: both the encoder's attention and the estimator's attention
//! see the whole sequence on this (mlx-audio's) path, and the encoder's
//! pre-lookahead convolution reads 3 tokens ahead, so frames already produced
//! change when tokens are appended. A chunked caller re-runs the flow on the
//! growing sequence with `finalize = false` (the last 3 tokens' frames withheld)
//! and keeps only the frames past what it has already emitted. With a
//! `PromptCache` of the voice the estimator runs over the chunk's frames only,
//! reading the prompt's recorded keys and values (prompt frames then do not see
//! the chunk's, which is the only change to what is computed).
mod activations;
mod conds;
mod config;
mod encoder;
mod estimator;
mod flow;
mod rel_attention;
pub mod turbo_names;

pub use conds::GenConds;
pub use config::S3GenConfig;
pub use flow::{PromptCache, S3GenFlow, MAX_FRAMES, MEL_BINS, SPEECH_VOCAB};
