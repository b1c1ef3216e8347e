use super::linear::{Linear, QuantParams};
use crate::quant::dequantize;
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
        }
    }

    /// `x @ W^T`, the output projection when embeddings are tied.
    pub fn as_linear(&self, x: &Array) -> Result<Array> {
        self.to_linear().forward(x)
    }

    fn to_linear(&self) -> Linear {
        match self {
            Embedding::Dense { weight } => Linear::Dense { weight: weight.clone(), bias: None },
            Embedding::Quantized { weight, scales, biases, q } => {
                Linear::Quantized { weight: weight.clone(), scales: scales.clone(), biases: biases.clone(), bias: None, q: *q }
            }
        }
    }
}
