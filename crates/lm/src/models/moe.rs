//! Mixture-of-experts blocks as MLX-LM's `switch_layers.py` holds them: the
//! experts' weights stacked along a first axis (`switch_mlp.{gate,up,down}_proj`,
//! plain or quantized), run by MLX's `gather_mm` / `gather_qmm` on the experts
//! each token was routed to; and the softmax top-k router of Qwen3-MoE and
//! its kin.
use std::sync::Arc;

use mlx::distributed::Group;
use mlx::nn::{self, Linear};
use mlx::quant::{gather_mm, gather_qmm};
use mlx::{Array, Dtype, Result as MlxResult};

use super::decoder::FeedForward;
use crate::error::{LmError, Result};
use crate::parallel::Split;
use crate::weights::Weights;

/// One projection of every expert: `[experts, out, in]`, and a bias per expert
/// where the family has one.
pub struct SwitchLinear {
    weights: SwitchWeights,
    bias: Option<Array>,
}

enum SwitchWeights {
    Dense {
        weight: Array,
    },
    /// `biases` in affine mode only; always MLX's `gather_qmm` (`q.precision` unused).
    Quantized {
        weight: Array,
        scales: Array,
        biases: Option<Array>,
        q: nn::QuantParams,
    },
}

impl SwitchLinear {
    /// `{prefix}.weight` (and `.scales` when quantized, `.biases` too in affine
    /// mode, `.bias` with `bias`) for `experts` experts. With a `split`, in a
    /// tensor-parallel group only this process's slice of every expert, as MLX's `shard_inplace` cuts stacked weights. `Inputs`:
    /// the bias stays whole but is divided by the group's size, since every
    /// process adds it before the block's sum (as MLX-LM's GPT-OSS `shard`).
    pub fn load(w: &mut Weights, prefix: &str, experts: i32, in_dims: i32, out_dims: i32, bias: bool, split: Option<Split>) -> Result<SwitchLinear> {
        let (axis, bias_axis) = match split {
            None => (None, None),
            Some(Split::Outputs) => (Some(1), Some(-1)),
            Some(Split::Inputs) => (Some(-1), None),
        };
        let mut bias = match bias {
            true => Some(w.take_split(&format!("{prefix}.bias"), &[experts, out_dims], bias_axis)?),
            false => None,
        };
        if let (Some(Split::Inputs), Some(b), Some(shard)) = (split, &bias, w.tensor_shard()) {
            bias = Some(b.divide(&b.scalar_like(shard.size as f64)?)?);
        }
        Ok(SwitchLinear { weights: SwitchWeights::load(w, prefix, experts, in_dims, out_dims, axis)?, bias })
    }

    /// `x` `[..., 1, in]` through the expert each entry of `indices` names.
    fn forward(&self, x: &Array, indices: &Array, sorted: bool) -> MlxResult<Array> {
        let y = self.weights.forward(x, indices, sorted)?;
        match &self.bias {
            None => Ok(y),
            Some(b) => y.add(&b.take(indices, Some(0))?.expand_dims(&[-2])?),
        }
    }
}

impl SwitchWeights {
    fn load(w: &mut Weights, prefix: &str, experts: i32, in_dims: i32, out_dims: i32, axis: Option<i32>) -> Result<SwitchWeights> {
        match w.quant_params(prefix, in_dims)? {
            None => {
                let weight = w.take_split(&format!("{prefix}.weight"), &[experts, out_dims, in_dims], axis)?;
                // MLX's CPU `gather_mm` runs float32 only (MLX-LM fails there at the first
                // token with "[GatherMM::eval] Currently only supports float32"): said at
                // load, with what does run.
                if weight.dtype() != Dtype::Float32 && mlx::cpu::kernel::cpu_default() {
                    return Err(LmError::UnsupportedModel(format!(
                        "{prefix}: {:?} experts do not run on MLX's CPU backend (its gather_mm takes float32 only); \
                         load with dtype 'float32', or use a quantized conversion",
                        weight.dtype()
                    )));
                }
                Ok(SwitchWeights::Dense { weight })
            }
            // `quant_params` checked that the inputs fit the groups and the width.
            Some(q) => {
                let (weight, scales, biases) = w.take_packed(prefix, &[experts], out_dims, in_dims, &q, axis)?;
                Ok(SwitchWeights::Quantized { weight, scales, biases, q })
            }
        }
    }

    fn forward(&self, x: &Array, indices: &Array, sorted: bool) -> MlxResult<Array> {
        match self {
            SwitchWeights::Dense { weight } => gather_mm(x, &weight.swapaxes(-1, -2)?, indices, sorted),
            SwitchWeights::Quantized { weight, scales, biases, q } => {
                gather_qmm(x, weight, scales, biases.as_ref(), indices, true, q.group_size, q.bits, q.mode, sorted)
            }
        }
    }
}

/// How an expert's gate and up projections combine.
#[derive(Clone, Copy)]
pub enum Activation {
    /// `silu(gate) * up`.
    SwiGlu,
    /// GPT-OSS's `swiglu_oai`: the gate clipped from above at 7, up clipped to
    /// [-7, 7], `(up + 1) * gate * sigmoid(1.702 * gate)`.
    SwiGluOai,
    /// `gelu_approx(gate) * up` (Gemma's GeGLU).
    GeGlu,
}

impl Activation {
    pub fn apply(self, gate: &Array, up: &Array) -> MlxResult<Array> {
        match self {
            Activation::SwiGlu => nn::swiglu(gate, up),
            Activation::GeGlu => nn::gelu_approx(gate)?.multiply(up),
            Activation::SwiGluOai => {
                let gate = gate.minimum_scalar(7.0)?;
                let up = up.clip(Some(&up.scalar_like(-7.0)?), Some(&up.scalar_like(7.0)?))?;
                up.add_scalar(1.0)?.multiply(&gate.multiply(&gate.multiply_scalar(1.702)?.sigmoid()?)?)
            }
        }
    }
}

/// The experts' gated MLPs (`SwitchGLU`).
pub struct SwitchGlu {
    gate_proj: SwitchLinear,
    up_proj: SwitchLinear,
    down_proj: SwitchLinear,
    activation: Activation,
    /// In a tensor-parallel group: each process holds a slice of every
    /// expert, and the block's output is summed over the group (`reduce`).
    group: Option<Arc<Group>>,
}

/// From this many (token, expert) pairs on, MLX-LM sorts them by expert first.
const SORT_FROM: i32 = 64;

impl SwitchGlu {
    /// In a tensor-parallel group (`w.tensor_shard()`), this process's slice of the
    /// experts: gate and up by outputs, down by inputs, as MLX-LM shards them.
    pub fn load(w: &mut Weights, prefix: &str, experts: i32, dims: i32, hidden: i32, bias: bool, activation: Activation) -> Result<SwitchGlu> {
        let group = w.tensor_shard().map(|s| s.group.clone());
        let (outputs, inputs) = match group {
            Some(_) => (Some(Split::Outputs), Some(Split::Inputs)),
            None => (None, None),
        };
        Ok(SwitchGlu {
            gate_proj: SwitchLinear::load(w, &format!("{prefix}.gate_proj"), experts, dims, hidden, bias, outputs)?,
            up_proj: SwitchLinear::load(w, &format!("{prefix}.up_proj"), experts, dims, hidden, bias, outputs)?,
            down_proj: SwitchLinear::load(w, &format!("{prefix}.down_proj"), experts, hidden, dims, bias, inputs)?,
            activation,
            group,
        })
    }

    /// The block's output `y`, summed over the tensor-parallel group if there is one.
    pub fn reduce(&self, y: Array) -> MlxResult<Array> {
        match &self.group {
            Some(g) => g.all_sum(&y),
            None => Ok(y),
        }
    }

    /// `x` `[B, L, dims]` through the experts `indices` `[B, L, k]` names:
    /// `[B, L, k, dims]`.
    pub fn forward(&self, x: &Array, indices: &Array) -> MlxResult<Array> {
        let x = x.expand_dims(&[-2, -3])?;
        let sort = indices.size() as i32 >= SORT_FROM;
        let (x, idx, inverse) = if sort {
            // Token rows in expert order, and the order that puts them back.
            let k = indices.dim(-1);
            let flat = indices.reshape(&[-1])?;
            let order = flat.argsort(0)?;
            let inverse = order.argsort(0)?;
            let d = x.dim(-1);
            let rows = x.reshape(&[-1, 1, d])?.take(&order.floor_divide_scalar(k as f64)?, Some(0))?;
            (rows, flat.take(&order, Some(0))?, Some(inverse))
        } else {
            (x, indices.clone(), None)
        };
        let up = self.up_proj.forward(&x, &idx, sort)?;
        let gate = self.gate_proj.forward(&x, &idx, sort)?;
        let mut y = self.down_proj.forward(&self.activation.apply(&gate, &up)?, &idx, sort)?;
        if let Some(inverse) = inverse {
            y = y.take(&inverse, Some(0))?;
            let mut shape = indices.shape();
            shape.extend_from_slice(&y.shape()[1..]);
            y = y.reshape(&shape)?;
        }
        y.squeeze(&[-2])
    }
}

/// A softmax router over `experts`, the top `top_k` of them per token
/// (renormalized when `norm_topk_prob`), their outputs summed by weight.
pub struct SparseMoe {
    gate: Linear,
    switch_mlp: SwitchGlu,
    experts: i32,
    top_k: i32,
    norm_topk_prob: bool,
}

impl SparseMoe {
    /// `{prefix}.gate` and `{prefix}.switch_mlp`.
    pub fn load(w: &mut Weights, prefix: &str, dims: i32, hidden: i32, experts: i32, top_k: i32, norm_topk_prob: bool) -> Result<SparseMoe> {
        Ok(SparseMoe {
            gate: w.linear(&format!("{prefix}.gate"), dims, experts, false)?,
            switch_mlp: SwitchGlu::load(w, &format!("{prefix}.switch_mlp"), experts, dims, hidden, false, Activation::SwiGlu)?,
            experts,
            top_k,
            norm_topk_prob,
        })
    }
}

impl SparseMoe {
    /// The weighted sum of the routed experts' outputs, this process's share
    /// of it in a tensor-parallel group (summed over the group by `forward`).
    fn forward_unsummed(&self, x: &Array) -> MlxResult<Array> {
        let gates = self.gate.forward(x)?.softmax(&[-1], true)?;
        let k = self.top_k;
        let inds = gates.argpartition(self.experts - k, -1)?.slice_axis(-1, self.experts - k, self.experts)?;
        let mut scores = gates.take_along_axis(&inds, -1)?;
        if self.norm_topk_prob {
            scores = scores.divide(&scores.sum(&[-1], true)?)?;
        }
        let y = self.switch_mlp.forward(x, &inds)?;
        y.multiply(&scores.expand_dims(&[-1])?)?.sum(&[-2], false)?.astype(y.dtype())
    }
}

impl FeedForward for SparseMoe {
    fn forward(&self, x: &Array) -> MlxResult<Array> {
        self.switch_mlp.reduce(self.forward_unsummed(x)?)
    }
}

/// GPT-OSS's block: a biased router, its top `top_k` logits softmaxed into
/// the weights of those experts.
pub struct TopKMoe {
    router: Linear,
    experts: SwitchGlu,
    num_experts: i32,
    top_k: i32,
}

impl TopKMoe {
    pub fn new(router: Linear, experts: SwitchGlu, num_experts: i32, top_k: i32) -> TopKMoe {
        TopKMoe { router, experts, num_experts, top_k }
    }
}

impl FeedForward for TopKMoe {
    fn forward(&self, x: &Array) -> MlxResult<Array> {
        let g = self.router.forward(x)?;
        let (e, k) = (self.num_experts, self.top_k);
        let inds = g.argpartition(e - k, -1)?.slice_axis(-1, e - k, e)?;
        let weights = g.take_along_axis(&inds, -1)?.softmax(&[-1], true)?;
        let y = self.experts.forward(x, &inds)?.multiply(&weights.expand_dims(&[-1])?)?.sum(&[-2], false)?;
        self.experts.reduce(y)
    }
}

/// Qwen3-Next's and Qwen3.5's block: the softmax top-k experts plus one
/// shared expert (a SwiGLU MLP) that every token takes, weighted by
/// `sigmoid(shared_expert_gate(x))`. In a tensor-parallel group both hold
/// this process's slice, and their sum is summed over the group once (as
/// MLX-LM's Qwen3-Next block).
pub struct SharedExpertMoe {
    experts: SparseMoe,
    shared_expert: super::decoder::Mlp,
    shared_expert_gate: Linear,
}

impl SharedExpertMoe {
    /// `experts` (loaded from `{prefix}.gate` and `switch_mlp`), then
    /// `{prefix}.shared_expert` (`shared_hidden` wide) and `shared_expert_gate`.
    pub fn load(w: &mut Weights, prefix: &str, dims: i32, shared_hidden: i32, experts: SparseMoe) -> Result<Self> {
        Ok(SharedExpertMoe {
            experts,
            shared_expert: super::decoder::Mlp::load_unsummed(w, &format!("{prefix}.shared_expert"), dims, shared_hidden)?,
            shared_expert_gate: w.linear(&format!("{prefix}.shared_expert_gate"), dims, 1, false)?,
        })
    }
}

impl FeedForward for SharedExpertMoe {
    fn forward(&self, x: &Array) -> MlxResult<Array> {
        let y = self.experts.forward_unsummed(x)?;
        let shared = self.shared_expert_gate.forward(x)?.sigmoid()?.multiply(&self.shared_expert.forward(x)?)?;
        self.experts.switch_mlp.reduce(y.add(&shared)?)
    }
}
