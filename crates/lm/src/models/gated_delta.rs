//! The Gated DeltaNet linear-attention layer of Qwen3-Next and Qwen3.5, as
//! MLX-LM's `qwen3_5.GatedDeltaNet` and `gated_delta.py` (the ops path MLX-LM
//! takes on the CPU, not its Metal kernel): projections into q, k, v (one
//! `in_proj_qkv`), the output gate `z`, the write strength `b` and the decay
//! input `a`; a causal depthwise convolution over q, k and v whose last
//! `kernel - 1` inputs are kept; q and k L2-normalized; then per head a
//! `[value, key]` state decayed by `g = exp(-exp(A_log) * softplus(a + dt_bias))`
//! and corrected toward each new value by the delta rule, read out by q; a
//! gated RMSNorm and `out_proj`. The state is float32 whatever the compute
//! dtype. The cache is an `ArraysCache` of two: the convolution's inputs and
//! the recurrent state.
use mlx::nn::{self, Linear};
use mlx::signal::conv1d;
use mlx::{Array, Compiled, Dtype};

use crate::cache::Cache;
use crate::error::Result;
use crate::parallel::{self, Cut, Split};
use crate::weights::Weights;

/// The sizes of a layer, from the config's `linear_*` fields.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub hidden: i32,
    pub k_heads: i32,
    pub v_heads: i32,
    pub k_dim: i32,
    pub v_dim: i32,
    pub kernel: i32,
    pub eps: f32,
}

impl Dims {
    fn key_dim(&self) -> i32 {
        self.k_heads * self.k_dim
    }

    fn value_dim(&self) -> i32 {
        self.v_heads * self.v_dim
    }

    /// Channels the convolution runs over: q, k and v.
    fn conv_dim(&self) -> i32 {
        2 * self.key_dim() + self.value_dim()
    }
}

pub struct GatedDeltaNet {
    in_proj_qkv: Linear,
    in_proj_z: Linear,
    in_proj_b: Linear,
    in_proj_a: Linear,
    /// `[conv_dim, kernel, 1]`, one filter per channel.
    conv_weight: Array,
    dt_bias: Array,
    a_log: Array,
    /// The gated RMSNorm's weight (`[v_dim]`, not offset by one).
    norm_weight: Array,
    out_proj: Linear,
    d: Dims,
}

type Traced = std::result::Result<Compiled, mlx::Error>;

/// MLX-LM's `compute_g` (compiled shapeless): the per-step decay, float32.
fn compute_g(a_log: &Array, a: &Array, dt_bias: &Array) -> mlx::Result<Array> {
    thread_local! {
        static G: Traced = Compiled::new(
            |xs: &[Array]| {
                // nn.softplus: logaddexp(x, 0).
                let softplus = xs[1].add(&xs[2])?.logaddexp_scalar(0.0)?;
                Ok(vec![xs[0].astype(Dtype::Float32)?.exp()?.negative()?.multiply(&softplus)?.exp()?])
            },
            true,
        );
    }
    nn::call_first(&G, &[a_log, a, dt_bias])
}

/// MLX-LM's `_gated_delta_step_ops` (compiled, not shapeless), without a
/// mask: one position. q, k `[B, H, Dk]`, v `[B, H, Dv]`, g and beta `[B, H]`,
/// state `[B, H, Dv, Dk]` -> y `[B, H, Dv]` (in q's dtype), the new state.
fn step(q: &Array, k: &Array, v: &Array, g: &Array, beta: &Array, state: &Array) -> mlx::Result<(Array, Array)> {
    thread_local! {
        static STEP: Traced = Compiled::new(
            |xs: &[Array]| {
                let (q, k, v, g, beta, state) = (&xs[0], &xs[1], &xs[2], &xs[3], &xs[4], &xs[5]);
                let state = state.multiply(&g.expand_dims(&[-1, -2])?)?;
                let k = k.expand_dims(&[-2])?;
                let kv_mem = state.multiply(&k)?.sum(&[-1], false)?;
                let delta = v.subtract(&kv_mem)?.multiply(&beta.expand_dims(&[-1])?)?;
                let state = state.add(&k.multiply(&delta.expand_dims(&[-1])?)?)?;
                let y = state.multiply(&q.expand_dims(&[-2])?)?.sum(&[-1], false)?;
                Ok(vec![y.astype(q.dtype())?, state])
            },
            false,
        );
    }
    STEP.with(|f| {
        let f = f.as_ref().map_err(Clone::clone)?;
        let mut out = f.call(&[q, k, v, g, beta, state])?;
        let state = out.pop().ok_or_else(|| mlx::Error::new("the delta step returned no state"))?;
        let y = out.pop().ok_or_else(|| mlx::Error::new("the delta step returned no output"))?;
        Ok((y, state))
    })
}

/// MLX-LM's `gated_delta_ops`: the recurrence over `T` positions, one step
/// each. q, k `[B, T, Hk, Dk]`, v `[B, T, Hv, Dv]`, g and beta `[B, T, Hv]`
/// -> y `[B, T, Hv, Dv]` and the state after the last position.
fn gated_delta_ops(q: &Array, k: &Array, v: &Array, g: &Array, beta: &Array, state: Array) -> mlx::Result<(Array, Array)> {
    let repeat = v.dim(2) / q.dim(2);
    let (q, k) = match repeat > 1 {
        true => (q.repeat(repeat, -2)?, k.repeat(repeat, -2)?),
        false => (q.clone(), k.clone()),
    };
    let at = |x: &Array, t: i32| x.slice_axis(1, t, t + 1)?.squeeze(&[1]);
    let mut state = state;
    let mut ys = Vec::with_capacity(q.dim(1) as usize);
    for t in 0..q.dim(1) {
        let (y, s) = step(&at(&q, t)?, &at(&k, t)?, &at(v, t)?, &at(g, t)?, &at(beta, t)?, &state)?;
        ys.push(y);
        state = s;
    }
    Ok((Array::stack(&ys.iter().collect::<Vec<_>>(), 1)?, state))
}

impl GatedDeltaNet {
    /// `{prefix}.in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`,
    /// `conv1d.weight`, `dt_bias`, `A_log`, `norm.weight`, `out_proj`. In a
    /// tensor-parallel group, as MLX-LM's Qwen3.5 `shard()`: this process's key
    /// and value heads (q, k and v each split, in the projection and the
    /// convolution alike; z, b, a, the decay's parameters), `out_proj` by its
    /// inputs, summed over the group.
    pub fn load(w: &mut Weights, prefix: &str, d: Dims) -> Result<GatedDeltaNet> {
        let (h, hv) = (d.hidden, d.v_heads);
        let own = Dims {
            k_heads: parallel::divide(w.tensor_shard(), d.k_heads, "linear_num_key_heads")?,
            v_heads: parallel::divide(w.tensor_shard(), d.v_heads, "linear_num_value_heads")?,
            ..d
        };
        let qkv_parts = Cut::Segments(vec![d.key_dim(), 2 * d.key_dim()]);
        w.cut_layer(&format!("{prefix}.in_proj_qkv"), qkv_parts.clone());
        w.cut_layer(&format!("{prefix}.conv1d.weight"), qkv_parts);
        Ok(GatedDeltaNet {
            in_proj_qkv: w.linear_split(&format!("{prefix}.in_proj_qkv"), h, d.conv_dim(), false, Split::Outputs)?,
            in_proj_z: w.linear_split(&format!("{prefix}.in_proj_z"), h, d.value_dim(), false, Split::Outputs)?,
            in_proj_b: w.linear_split(&format!("{prefix}.in_proj_b"), h, hv, false, Split::Outputs)?,
            in_proj_a: w.linear_split(&format!("{prefix}.in_proj_a"), h, hv, false, Split::Outputs)?,
            conv_weight: w.take_split(&format!("{prefix}.conv1d.weight"), &[d.conv_dim(), d.kernel, 1], Some(0))?,
            dt_bias: w.take_split(&format!("{prefix}.dt_bias"), &[hv], Some(0))?,
            a_log: w.take_split(&format!("{prefix}.A_log"), &[hv], Some(0))?,
            norm_weight: w.take(&format!("{prefix}.norm.weight"), &[d.v_dim])?,
            out_proj: w.linear_split(&format!("{prefix}.out_proj"), d.value_dim(), h, false, Split::Inputs)?,
            d: own,
        })
    }

    /// `x` `[B, S, hidden]` through the layer, continuing from and updating `cache`.
    pub fn forward(&self, x: &Array, cache: &mut dyn Cache) -> mlx::Result<Array> {
        let d = &self.d;
        let (b, s) = (x.dim(0), x.dim(1));
        let cache = cache.as_arrays().ok_or_else(|| mlx::Error::new("a Gated DeltaNet layer needs an ArraysCache"))?;
        let qkv = self.in_proj_qkv.forward(x)?;
        let z = self.in_proj_z.forward(x)?.reshape(&[b, s, d.v_heads, d.v_dim])?;
        let beta_in = self.in_proj_b.forward(x)?;
        let a = self.in_proj_a.forward(x)?;

        let conv_state = match cache.get(0) {
            Some(c) => c.clone(),
            None => Array::zeros(&[b, d.kernel - 1, d.conv_dim()], x.dtype())?,
        };
        let conv_input = Array::concatenate(&[&conv_state, &qkv], 1)?;
        let n = conv_input.dim(1);
        cache.set(0, conv_input.slice_axis(1, n - (d.kernel - 1), n)?.contiguous()?)?;
        let conv_out = nn::silu_compiled(&conv1d(&conv_input, &self.conv_weight, 1, 0, 1, d.conv_dim())?)?;

        let parts = conv_out.split_at(&[d.key_dim(), 2 * d.key_dim()], -1)?;
        let q = parts[0].reshape(&[b, s, d.k_heads, d.k_dim])?;
        let k = parts[1].reshape(&[b, s, d.k_heads, d.k_dim])?;
        let v = parts[2].reshape(&[b, s, d.v_heads, d.v_dim])?;
        let (q, k) = normalize_qk(&q, &k, d.k_dim)?;

        // gated_delta_update: beta, the decay, a zero float32 state to start from.
        let beta = beta_in.sigmoid()?;
        let g = compute_g(&self.a_log, &a, &self.dt_bias)?;
        let state = match cache.get(1) {
            Some(st) => st.clone(),
            None => Array::zeros(&[b, d.v_heads, d.v_dim, d.k_dim], Dtype::Float32)?,
        };
        let (out, state) = gated_delta_ops(&q, &k, &v, &g, &beta, state)?;
        cache.set(1, state)?;
        cache.advance(s);

        // Qwen3NextRMSNormGated: the norm in the output's dtype, then precise_swiglu with z.
        let normed = mlx::fast::rms_norm(&out, Some(&self.norm_weight), d.eps)?;
        let out = nn::precise_swiglu(&out, &z, &normed)?;
        self.out_proj.forward(&out.reshape(&[b, s, -1])?)
    }
}

/// MLX-LM's `normalize_qk` (eps 1e-6): q and k L2-normalized through
/// `rms_norm` (its eps scaled to a mean's), q also times `dk**-0.5`.
fn normalize_qk(q: &Array, k: &Array, dk: i32) -> mlx::Result<(Array, Array)> {
    let inv_scale = (dk as f64).powf(-0.5);
    let inv_scale_sq = inv_scale * inv_scale;
    let eps = (1e-6 * inv_scale_sq) as f32;
    let q = mlx::fast::rms_norm(q, None, eps)?.multiply_scalar(inv_scale_sq)?;
    let k = mlx::fast::rms_norm(k, None, eps)?.multiply_scalar(inv_scale)?;
    Ok((q, k))
}
