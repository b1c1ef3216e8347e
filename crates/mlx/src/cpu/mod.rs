//! The custom CPU kernels (docs/kernels.md): each runs as one node of an MLX
//! graph on the CPU stream (`kernel`), gives MLX's or OpenBLAS's exact bits, is
//! chosen at run time from the CPU's features, and has an off switch.
pub mod attention;
pub mod causal_weights;
pub mod decode_attention;
pub mod exact_attention;
pub mod gemv;
pub mod greedy;
pub mod half;
pub mod kernel;
pub mod math;
pub(crate) mod qmm;
pub(crate) mod qmm_exact_repack;
pub(crate) mod qmm_int8;
pub(crate) mod qmm_quantize;
pub(crate) mod qmm_repack;
pub(crate) mod qmm_repack_rows;
pub mod rms_norm;
pub mod rope;
pub mod row_ops;
pub mod rows;
pub(crate) mod share;
