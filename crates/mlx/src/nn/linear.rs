use std::sync::Arc;

use crate::distributed::Group;
use crate::quant::{dequantize, quantized_matmul, Mode, Precision, Repacked};
use crate::{Array, Error, Result};

/// Quantization parameters of one packed weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantParams {
    pub group_size: i32,
    pub bits: i32,
    /// MLX's packing: affine (with biases) or a floating-point mode (without).
    pub mode: Mode,
    /// How its matmul is computed (the model's `precision` load option).
    pub precision: Precision,
}

/// `y = x W^T + b`, with W either dense or quantized (MLX packing; `biases`
/// in affine mode only).
pub enum Linear {
    Dense {
        weight: Array,
        bias: Option<Array>,
    },
    Quantized {
        weight: Array,
        scales: Array,
        biases: Option<Array>,
        bias: Option<Array>,
        q: QuantParams,
    },
    /// A quantized layer whose weights were laid out once, at load time, for
    /// its precision's kernel (`Linear::repacked`); only that kernel reads
    /// them.
    Repacked {
        weight: Box<Repacked>,
        bias: Option<Array>,
    },
    /// This process's columns of W (its share of the inputs, `part` holding no
    /// bias), the partial products summed over `group`, then the bias: MLX's
    /// `ShardedToAllLinear` (and its quantized twin), op for op.
    ShardedToAll {
        part: Box<Linear>,
        bias: Option<Array>,
        group: Arc<Group>,
    },
    /// This process's rows of W (its share of the outputs), every process's
    /// outputs then gathered along the last axis in rank order: MLX's
    /// `AllToShardedLinear` followed by MLX-LM's `gather_last_axis` (a
    /// vocabulary-split LM head).
    Gathered {
        part: Box<Linear>,
        group: Arc<Group>,
    },
}

impl Linear {
    pub fn forward(&self, x: &Array) -> Result<Array> {
        match self {
            Linear::Dense { weight, bias } => {
                // One or two rows on the CPU: OpenBLAS's bits without its packing.
                if let Some(y) = crate::cpu::gemv::matmul_t(x, weight, bias.as_ref())? {
                    return Ok(y);
                }
                match bias {
                    // addmm is what mlx.nn.Linear uses with a bias: one fused op.
                    Some(b) => b.addmm(x, &weight.t()?, 1.0, 1.0),
                    None => x.matmul(&weight.t()?),
                }
            }
            Linear::Quantized { weight, scales, biases, bias, q } => {
                let y = quantized_matmul(x, weight, scales, biases.as_ref(), true, q.group_size, q.bits, q.mode, q.precision)?;
                match bias {
                    Some(b) => y.add(b),
                    None => Ok(y),
                }
            }
            Linear::Repacked { weight, bias } => {
                let y = weight.matmul(x)?;
                match bias {
                    Some(b) => y.add(b),
                    None => Ok(y),
                }
            }
            Linear::ShardedToAll { part, bias, group } => {
                let y = group.all_sum(&part.forward(x)?)?;
                match bias {
                    Some(b) => y.add(b),
                    None => Ok(y),
                }
            }
            Linear::Gathered { part, group } => {
                let y = part.forward(x)?;
                let (n, shape) = (group.size()?, y.shape());
                let size = y.dim(-1);
                // [ranks * rows, size] to [rows, ranks * size], in rank order.
                let parts = group.all_gather(&y.reshape(&[-1, size])?)?;
                let mut out = shape[..shape.len() - 1].to_vec();
                out.push(n * size);
                parts.reshape(&[n, -1, size])?.transpose(&[1, 0, 2])?.reshape(&out)
            }
        }
    }

    /// [`Self::forward`] by `cpu::rows`'s kernel where it applies (a dense
    /// float32 weight on the CPU): about twice as fast for a few dozen rows,
    /// but not MLX's bits; for callers that compare results within a tolerance.
    pub fn forward_rows(&self, x: &Array) -> Result<Array> {
        if let Linear::Dense { weight, bias } = self {
            if let Some(y) = crate::cpu::rows::matmul_t(x, weight, bias.as_ref())? {
                return Ok(y);
            }
        }
        self.forward(x)
    }

    /// The precision its matmul is computed in: the model's `precision` load
    /// option for a quantized layer, `Exact` for a dense one (fast applies to
    /// quantized layers only).
    pub fn precision(&self) -> Precision {
        match self {
            Linear::Dense { .. } => Precision::Exact,
            Linear::Quantized { q, .. } => q.precision,
            Linear::Repacked { weight, .. } => weight.precision(),
            Linear::ShardedToAll { part, .. } | Linear::Gathered { part, .. } => part.precision(),
        }
    }

    /// The layer as its matmul runs fastest where that keeps its results: an
    /// affine-quantized layer with its weights repacked for its precision's
    /// kernel (`quant::Repacked`: fast, `cpu::qmm_int8`'s bits; exact,
    /// `cpu::qmm`'s and MLX's; no per-call layout either way), where that
    /// kernel applies (decided now, once: not with `MLX_NODE_QMM_INT8_KERNEL=0`
    /// for fast or `MLX_NODE_QMM_KERNEL=0` for exact, nor off the CPU);
    /// anything else as it is.
    /// The repacked layer holds only the new layout, so a layer whose weights
    /// are also read another way (a tied embedding's table) must not be
    /// passed here.
    pub fn repacked(self) -> Result<Linear> {
        if let Linear::Quantized { weight, scales, biases: Some(biases), bias, q } = &self {
            if q.mode == Mode::Affine {
                if let Some(r) = Repacked::new(weight, scales, biases, q.group_size, q.bits, q.precision)? {
                    return Ok(Linear::Repacked { weight: Box::new(r), bias: bias.clone() });
                }
            }
        }
        Ok(self)
    }

    /// The arrays the layer holds (to read them at load time).
    pub fn arrays(&self) -> Vec<&Array> {
        match self {
            Linear::Dense { weight, bias } => std::iter::once(weight).chain(bias).collect(),
            Linear::Quantized { weight, scales, biases, bias, .. } => {
                [Some(weight), Some(scales), biases.as_ref(), bias.as_ref()].into_iter().flatten().collect()
            }
            Linear::Repacked { weight, bias } => weight.arrays().into_iter().chain(bias).collect(),
            Linear::ShardedToAll { part, bias, .. } => part.arrays().into_iter().chain(bias).collect(),
            Linear::Gathered { part, .. } => part.arrays(),
        }
    }

    /// Quantized layers with the same input size and `QuantParams`, as one
    /// whose outputs are theirs side by side (packed weights, scales, biases
    /// and bias concatenated along the output axis); `None` for anything else
    /// (dense or split layers, differing parameters, a bias on some only).
    /// On the CPU each output of a quantized matmul is computed from its own
    /// row of the weight alone (MLX's op, `cpu::qmm`, `cpu::qmm_int8`), so it
    /// keeps its bits whatever rows sit beside it (`lm`'s
    /// `tests/integration/fused_projections.rs`).
    pub fn concat_outputs(parts: &[Linear]) -> Result<Option<Linear>> {
        let Some(Linear::Quantized { q, .. }) = parts.first() else { return Ok(None) };
        let (mut weights, mut scales, mut biases, mut bias) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for p in parts {
            let Linear::Quantized { weight: w, scales: s, biases: b, bias: c, q: pq } = p else { return Ok(None) };
            if pq != q || w.ndim() != 2 || w.dim(-1) != weights.first().map_or(w.dim(-1), |f: &&Array| f.dim(-1)) {
                return Ok(None);
            }
            weights.push(w);
            scales.push(s);
            biases.extend(b);
            bias.extend(c);
        }
        // All or none of the parts have (affine) biases and a bias.
        let all_or_none = |v: &[&Array]| v.is_empty() || v.len() == parts.len();
        let one_dtype = |v: &[&Array]| v.windows(2).all(|p| p[0].dtype() == p[1].dtype());
        if ![&weights, &scales, &biases, &bias].iter().all(|v| all_or_none(v.as_slice()) && one_dtype(v.as_slice())) {
            return Ok(None);
        }
        let concat = |v: &[&Array]| if v.is_empty() { Ok(None) } else { Array::concatenate(v, 0).map(Some) };
        Ok(Some(Linear::Quantized {
            weight: Array::concatenate(&weights, 0)?,
            scales: Array::concatenate(&scales, 0)?,
            biases: concat(biases.as_slice())?,
            bias: concat(bias.as_slice())?,
            q: *q,
        }))
    }

    /// The weight as a dense matrix (dequantized if packed).
    pub fn dense_weight(&self) -> Result<Array> {
        match self {
            Linear::Dense { weight, .. } => Ok(weight.clone()),
            Linear::Quantized { weight, scales, biases, q, .. } => dequantize(weight, scales, biases.as_ref(), q.group_size, q.bits, q.mode),
            Linear::ShardedToAll { .. } | Linear::Gathered { .. } => {
                Err(Error::new("a layer split across processes holds only its share of the weight"))
            }
            Linear::Repacked { .. } => Err(Error::new("a repacked layer holds its weight in the repacked kernels' layout only")),
        }
    }
}
