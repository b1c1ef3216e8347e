//! T3: text tokens to speech tokens. A Llama backbone (`lm`'s decoder stack,
//! fed embeddings) over a prompt of voice conditioning, text and a
//! start-of-speech token, sampled by `lm`'s generation loop with
//! classifier-free guidance. Reference: mlx-audio's `chatterbox/t3`.
mod cond;
mod cond_enc;
mod config;
mod gpt2;
mod inference;
mod model;
mod perceiver;
mod turbo_sampler;

pub use cond::T3Cond;
pub use config::T3Config;
pub use gpt2::Gpt2Config;
pub use inference::T3Options;
pub use model::T3;
