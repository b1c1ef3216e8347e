use super::linear::{Linear, QuantParams};
use crate::quant::{dequantize, Mode, Repacked};
use crate::{Array, Result};

/// Token embedding table, dense or quantized; `as_linear` is the tied LM head.
pub enum Embedding {
    Dense {
        weight: Array,
    },
    /// `biases` in affine mode only.
    Quantized {
        weight: Array,
        scales: Array,
        biases: Option<Array>,
        q: QuantParams,
    },
    /// A tied table held only in the repacked layout (`Embedding::repacked`):
    /// the LM head runs on it as a repacked layer of its precision, and
    /// lookups read its columns with `Quantized`'s bits.
    Repacked {
        table: Box<Repacked>,
    },
}

impl Embedding {
    pub fn forward(&self, ids: &Array) -> Result<Array> {
        match self {
            Embedding::Dense { weight } => weight.take(ids, Some(0)),
            Embedding::Quantized { weight, scales, biases, q } => {
                let w = weight.take(ids, Some(0))?;
                let s = scales.take(ids, Some(0))?;
                let b = biases.as_ref().map(|b| b.take(ids, Some(0))).transpose()?;
                dequantize(&w, &s, b.as_ref(), q.group_size, q.bits, q.mode)
            }
            Embedding::Repacked { table } => table.rows(ids),
        }
    }

    /// `x @ W^T`, the output projection when embeddings are tied.
    pub fn as_linear(&self, x: &Array) -> Result<Array> {
        match self {
            Embedding::Dense { weight } => Linear::Dense { weight: weight.clone(), bias: None }.forward(x),
            Embedding::Quantized { weight, scales, biases, q } => {
                Linear::Quantized { weight: weight.clone(), scales: scales.clone(), biases: biases.clone(), bias: None, q: *q }.forward(x)
            }
            // The layer's own matmul (`Linear::Repacked`), without building one.
            Embedding::Repacked { table } => table.matmul(x),
        }
    }

    /// A tied table (also the LM head) held only in the repacked layout
    /// where a head in MLX's layout would run its precision's kernel per call:
    /// affine, scales and biases of one dtype, and the kernel applies
    /// (`quant::Repacked::new`). The head then has the per-call kernel's bits
    /// without its per-call layout, and the table is not held twice; anything
    /// else as it is.
    pub fn repacked(self) -> Result<Embedding> {
        if let Embedding::Quantized { weight, scales, biases: Some(biases), q } = &self {
            if q.mode == Mode::Affine && scales.dtype() == biases.dtype() {
                if let Some(table) = Repacked::new(weight, scales, biases, q.group_size, q.bits, q.precision)? {
                    return Ok(Embedding::Repacked { table: Box::new(table) });
                }
            }
        }
        Ok(self)
    }

    /// The arrays the table holds (to read them at load time).
    pub fn arrays(&self) -> Vec<&Array> {
        match self {
            Embedding::Dense { weight } => vec![weight],
            Embedding::Quantized { weight, scales, biases, .. } => [Some(weight), Some(scales), biases.as_ref()].into_iter().flatten().collect(),
            Embedding::Repacked { table } => table.arrays().to_vec(),
        }
    }
}
