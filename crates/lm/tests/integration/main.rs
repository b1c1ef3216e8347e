//! The lm crate's integration tests, one module per file, in one test binary: each binary links the
//! crate again (thin LTO), so one binary instead of one per file saves minutes of CI's build.
mod batch;
mod filter_kernels;
mod fixture_greedy;
mod fused_projections;
mod load_progress;
mod sampling_kernels;
mod text_loop;
mod tokenizer_parity;
