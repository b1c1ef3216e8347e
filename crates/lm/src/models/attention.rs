//! Self-attention as MLX-LM's families write it (q/k/v projections, optional
//! per-head q/k norms, RoPE at the cache's offset, the cache, the output
//! projection), and attention over what a cache fetched: MLX's fused kernel
//! for plain keys and values, MLX-LM's `quantized_scaled_dot_product_attention`
//! for quantized ones.
use mlx::cpu::decode_attention::{decode_attention, CachedKv};
use mlx::cpu::exact_attention::exact_decode_attention;
use mlx::cpu::kernel::Kernel;
use mlx::fast::{scaled_dot_product_attention, scaled_dot_product_attention_sinks, AttentionMask};
use mlx::nn::{Linear, RmsNorm, Rope};
use mlx::quant::{quantized_matmul_mlx, Mode, Precision};
use mlx::{Array, Dtype, Result};

use crate::cache::{causal_mask, Cache, CacheMask, Fetched, KvCache, QuantizedArrays};
use crate::parallel::Split;
use crate::weights::Weights;

/// One layer's attention. The RoPE is the caller's (families differ in how
/// many they have: one for all layers, or local and global ones).
/// The query, key and value projections: three layers, or one fused
/// `qkv_proj` whose output is split (Phi-3's checkpoint, or three quantized
/// layers held as one at load, `Weights::linear_fused`: one matmul per step
/// instead of three, with the same bits);
/// `KeysAsValues`: the values are the keys' projection, taken before the key
/// norm (Gemma 4's `attention_k_eq_v`); `QueriesOnly`: the layer attends over
/// an earlier layer's keys and values (`forward_shared`, Gemma 4's KV-shared layers).
pub enum Projections {
    Separate { q: Linear, k: Linear, v: Linear },
    Fused { qkv: Linear },
    KeysAsValues { q: Linear, k: Linear },
    QueriesOnly { q: Linear },
}

impl Projections {
    /// `{prefix}.qkv_proj` when the weights have it, else `q_proj`, `k_proj`
    /// and `v_proj` (held as one where `Weights::linear_fused` can).
    pub fn load(w: &mut Weights, prefix: &str, dims: i32, q_out: i32, kv_out: i32, bias: bool) -> crate::error::Result<Projections> {
        let fused = format!("{prefix}.qkv_proj");
        if w.contains(&format!("{fused}.weight")) {
            if w.tensor_shard().is_some() {
                return Err(crate::LmError::UnsupportedModel(format!(
                    "{fused} (queries, keys and values in one layer) cannot be split across processes"
                )));
            }
            return Ok(Projections::Fused { qkv: w.linear(&fused, dims, q_out + 2 * kv_out, bias)? });
        }
        let names = ["q_proj", "k_proj", "v_proj"].map(|n| format!("{prefix}.{n}"));
        if let Some(qkv) = w.linear_fused(&names, dims, &[q_out, kv_out, kv_out], bias)? {
            return Ok(Projections::Fused { qkv });
        }
        // In a tensor-parallel group, this process's heads (`q_out`, `kv_out` are the whole layer's).
        Ok(Projections::Separate {
            q: w.linear_split(&format!("{prefix}.q_proj"), dims, q_out, bias, Split::Outputs)?,
            k: w.linear_split(&format!("{prefix}.k_proj"), dims, kv_out, bias, Split::Outputs)?,
            v: w.linear_split(&format!("{prefix}.v_proj"), dims, kv_out, bias, Split::Outputs)?,
        })
    }
}

pub struct SelfAttention {
    pub qkv: Projections,
    pub o_proj: Linear,
    pub q_norm: Option<RmsNorm>,
    pub k_norm: Option<RmsNorm>,
    /// The eps of an RMSNorm without weight on each value head (Gemma 4); None: values as projected.
    pub v_norm: Option<f32>,
    pub heads: i32,
    pub kv_heads: i32,
    pub head_dim: i32,
    pub scale: f32,
    /// Llama 4's query scaling by position, `(beta, original context)`
    /// (Ministral 3): queries times `1 + beta * ln(1 + floor(pos / original))`.
    pub position_scale: Option<(f32, i32)>,
    /// Per-head attention sink logits (GPT-OSS).
    pub sinks: Option<Array>,
    /// Qwen3-Next / Qwen3.5: `q_proj` gives each head its queries and as many
    /// gate values after them; the output is times `sigmoid(gate)` before `o_proj`.
    pub output_gate: bool,
}

impl SelfAttention {
    /// Queries, keys and values `[B, heads, L, dim]` for `x` `[B, L, hidden]`
    /// (queries and keys RMS-normed per head where the family does), and the
    /// output gate `[B, L, heads * dim]` where there is one.
    pub fn project(&self, x: &Array) -> Result<(Array, Array, Array, Option<Array>)> {
        let s = x.shape();
        let (b, l) = (s[0], s[1]);
        // The norm (per head, so the same bits in either layout) after the transpose: its
        // node gathers the strided heads into `[B, heads, L, dim]` once, which RoPE's node
        // then reads in place (normed first, both copied them: 1% of a prompt's time).
        let heads = |t: Array, n: i32, norm: &Option<RmsNorm>| -> Result<Array> {
            let t = t.reshape(&[b, l, n, -1])?.transpose(&[0, 2, 1, 3])?;
            match norm {
                Some(nm) => nm.forward(&t),
                None => Ok(t),
            }
        };
        let (q, k, v) = match &self.qkv {
            Projections::Separate { q, k, v } => (q.forward(x)?, k.forward(x)?, v.forward(x)?),
            Projections::Fused { qkv } => {
                // One split node (not a slice per part); the queries are what precedes
                // the keys and values (twice as wide where they carry the output gate).
                let all = qkv.forward(x)?;
                let (n, nkv) = (all.dim(-1), self.kv_heads * self.head_dim);
                let [q, k, v]: [Array; 3] =
                    all.split_at(&[n - 2 * nkv, n - nkv], -1)?.try_into().map_err(|_| mlx::Error::new("split into q, k, v: not three parts"))?;
                (q, k, v)
            }
            Projections::KeysAsValues { q, k } => {
                let k = k.forward(x)?;
                (q.forward(x)?, k.clone(), k)
            }
            Projections::QueriesOnly { .. } => return Err(mlx::Error::new("a layer that shares keys and values projects none")),
        };
        let (q, gate) = match self.output_gate {
            false => (q, None),
            true => {
                let halves = q.reshape(&[b, l, self.heads, -1])?.split_equal(2, -1)?;
                (halves[0].clone(), Some(halves[1].reshape(&[b, l, -1])?))
            }
        };
        let q = heads(q, self.heads, &self.q_norm)?;
        let k = heads(k, self.kv_heads, &self.k_norm)?;
        let v = match self.v_norm {
            None => heads(v, self.kv_heads, &None)?,
            Some(eps) => mlx::fast::rms_norm(&v.reshape(&[b, l, self.kv_heads, -1])?, None, eps)?.transpose(&[0, 2, 1, 3])?,
        };
        Ok((q, k, v, gate))
    }

    /// The new positions of each sequence (`q` `[B, heads, L, dim]`, after RoPE
    /// and any position scale) against the keys and values each cache just
    /// fetched, read in its buffers, causally, as one node: `[B, L, heads * dim]`.
    /// In `precision: 'fast'` (taken from the output projection: fast applies to
    /// quantized layers) by `mlx::cpu::decode_attention`, whose sums are not
    /// MLX's; otherwise, for one position per sequence, by
    /// `mlx::cpu::exact_attention` (MLX's bits). None where neither applies
    /// (sinks, quantized or no buffers, shapes the kernels decline): the caller
    /// runs MLX's ops.
    fn attend_in_place(&self, q: &Array, caches: &[&dyn Cache]) -> Result<Option<Array>> {
        let fast = self.reads_in_place();
        if !fast && (self.sinks.is_some() || q.dim(2) != 1) {
            return Ok(None);
        }
        let Some(kv) = caches.iter().map(|c| c.buffers().map(|(keys, values, len)| CachedKv { keys, values, len })).collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        if fast {
            decode_attention(q, &kv, self.scale)
        } else {
            exact_decode_attention(q, &kv, self.scale)
        }
    }

    /// Whether attention may read the caches' buffers with the fast kernel
    /// (`attend_in_place`; switched off, fast precision attends as exact does).
    fn reads_in_place(&self) -> bool {
        self.o_proj.precision() == Precision::Fast && self.sinks.is_none() && Kernel::DecodeAttention.enabled()
    }

    /// New keys and values `[B, kv_heads, L, dim]` as `cache` should store
    /// them. Where the fast kernel reads the cache, float32 ones become
    /// float16, as llama.cpp's default cache: a decode step reads half the
    /// bytes (docs/kernels.md#a-float16-kv-cache; `MLX_NODE_HALF_KV=0` keeps float32). A cache that already holds
    /// another dtype (from a file) keeps it, and a quantized one quantizes what
    /// it is given.
    fn for_cache(&self, k: Array, v: Array, cache: &dyn Cache) -> Result<(Array, Array)> {
        let held = cache.buffers().map(|(keys, _, _)| keys.dtype());
        let half = half_cache_on()
            && self.reads_in_place()
            && k.dtype() == Dtype::Float32
            && held.map_or(cache.class_name() != "QuantizedKVCache", |d| d == Dtype::Float16);
        if !half {
            return Ok((k, v));
        }
        Ok((k.astype(Dtype::Float16)?, v.astype(Dtype::Float16)?))
    }

    /// `o_proj` of the heads' outputs `[B, L, heads * dim]`, gated where the family gates them.
    fn output(&self, o: &Array, gate: Option<Array>) -> Result<Array> {
        match gate {
            None => self.o_proj.forward(o),
            Some(g) => self.o_proj.forward(&o.multiply(&g.sigmoid()?)?),
        }
    }

    /// Queries `[B, heads, L, dim]` alone, RMS-normed per head where the family does
    /// (a layer that shares keys and values: never gated).
    fn project_queries(&self, x: &Array) -> Result<Array> {
        if self.output_gate {
            return Err(mlx::Error::new("a gated attention layer cannot share another layer's keys and values"));
        }
        let q = match &self.qkv {
            Projections::Separate { q, .. } | Projections::KeysAsValues { q, .. } | Projections::QueriesOnly { q } => q.forward(x)?,
            Projections::Fused { .. } => return self.project(x).map(|(q, _, _, _)| q),
        };
        let q = q.reshape(&[x.dim(0), x.dim(1), self.heads, -1])?;
        let q = match &self.q_norm {
            Some(n) => n.forward(&q)?,
            None => q,
        };
        q.transpose(&[0, 2, 1, 3])
    }

    /// Queries `[B, heads, L, dim]` at positions `offset..` times their
    /// position scale, op for op as MLX-LM's `_get_llama_4_attn_scale`.
    fn scale_positions(&self, q: Array, offset: i32) -> Result<Array> {
        let Some((beta, original)) = self.position_scale else { return Ok(q) };
        let l = q.dim(2);
        let pos = Array::arange(0.0, l as f64, 1.0, Dtype::Int32)?.add_scalar(offset as f64)?;
        let scaling = pos
            .divide(&Array::scalar(original as f64, Dtype::Int32)?)?
            .floor()?
            .add_scalar(1.0)?
            .log()?
            .multiply_scalar(beta as f64)?
            .add_scalar(1.0)?;
        q.multiply(&scaling.expand_dims(&[1])?.astype(q.dtype())?)
    }

    /// `x` `[B, L, hidden]` through attention, appending to `cache`.
    pub fn forward(&self, x: &Array, cache: &mut dyn Cache, rope: &Rope) -> Result<Array> {
        self.forward_keeping(x, cache, rope).map(|(o, _)| o)
    }

    /// As `forward`, also handing back what this layer attended over, for
    /// later layers that share it (`forward_shared`).
    pub fn forward_keeping(&self, x: &Array, cache: &mut dyn Cache, rope: &Rope) -> Result<(Array, Attended)> {
        let (q, k, v, gate) = self.project(x)?;
        let (o, kept) = self.attend_new(q, k, v, cache, rope)?;
        Ok((self.output(&o, gate)?, kept))
    }

    /// Several sequences' prompt chunks in one pass, each appended to its own
    /// caches of this `layer`: `x` holds their positions one after another
    /// (`lens` long each), as rows `[N, 1, hidden]` or as one prompt `[1, N,
    /// hidden]` (the layout the matmuls see, see `Decoder::prefill_batch`). The
    /// projections run on all positions at once (the weights are read once);
    /// RoPE, the cache and attention run per sequence on its own positions, as
    /// `forward` runs them for that chunk alone. Returns `x`'s shape.
    pub fn forward_chunks(&self, x: &Array, lens: &[i32], caches: &mut [&mut [Box<dyn Cache>]], layer: usize, rope: &Rope) -> Result<Array> {
        let as_rows = x.dim(0) > 1;
        let (q, k, v, gate) = self.project(x)?;
        // One sequence's positions of `[N, heads, 1, dim]` (rows) or `[1, heads, N, dim]` as `[1, heads, len, dim]`.
        let part = |t: &Array, at: i32, len: i32| match as_rows {
            true => t.slice_axis(0, at, at + len)?.transpose(&[2, 1, 0, 3]),
            false => t.slice_axis(2, at, at + len),
        };
        let mut outs = Vec::with_capacity(lens.len());
        let mut at = 0;
        for (seq, &len) in caches.iter_mut().zip(lens) {
            let (o, _) = self.attend_new(part(&q, at, len)?, part(&k, at, len)?, part(&v, at, len)?, seq[layer].as_mut(), rope)?;
            outs.push(if as_rows { o.reshape(&[len, 1, -1])? } else { o });
            at += len;
        }
        let o = Array::concatenate(&outs.iter().collect::<Vec<_>>(), if as_rows { 0 } else { 1 })?;
        self.output(&o, gate)
    }

    /// New positions `q`, `k`, `v` `[B, heads, L, dim]` (as projected) at the
    /// cache's offset: RoPE, the cache's update, attention over what it holds.
    /// The heads' outputs `[B, L, heads * dim]`, before the output projection.
    fn attend_new(&self, q: Array, k: Array, v: Array, cache: &mut dyn Cache, rope: &Rope) -> Result<(Array, Attended)> {
        let (b, l) = (q.dim(0), q.dim(2));
        let offset = cache.offset();
        let q = self.scale_positions(rope.forward(&q, offset)?, offset)?;
        let k = rope.forward(&k, offset)?;
        let mask = cache.mask(l)?;
        let (k, v) = self.for_cache(k, v, &*cache)?;
        let fetched = cache.update_and_fetch(&k, &v)?;
        let kept = Attended { fetched: fetched.clone(), mask: mask.clone(), offset };
        // One new position sees the whole cache; a prompt's chunk sees it causally, which the
        // kernel does for a plain cache's buffers (a rotating cache's ring need not hold its
        // positions in order).
        let in_place = match &mask {
            CacheMask::None => l == 1,
            CacheMask::Causal => cache.class_name() == "KVCache",
            CacheMask::Array(_) => false,
        };
        if in_place {
            if let Some(o) = self.attend_in_place(&q, &[&*cache])? {
                return Ok((o, kept));
            }
        }
        let o = attend(&q, fetched, self.scale, mask, self.sinks.as_ref())?;
        Ok((o.transpose(&[0, 2, 1, 3])?.reshape(&[b, l, -1])?, kept))
    }

    /// `x` through attention over an earlier layer's keys and values, with its
    /// mask and positions (MLX-LM's `shared_kv`: the layer has no cache).
    pub fn forward_shared(&self, x: &Array, shared: &Attended, rope: &Rope) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        if matches!(shared.fetched, Fetched::Quantized { .. }) {
            // MLX-LM passes such a layer no cache, so it cannot attend over quantized keys.
            return Err(mlx::Error::new("a quantized KV cache cannot be shared between layers (kvBits; as in MLX-LM)"));
        }
        let q = self.scale_positions(rope.forward(&self.project_queries(x)?, shared.offset)?, shared.offset)?;
        let o = attend(&q, shared.fetched.clone(), self.scale, shared.mask.clone(), self.sinks.as_ref())?;
        self.o_proj.forward(&o.transpose(&[0, 2, 1, 3])?.reshape(&[b, l, -1])?)
    }

    /// One new position for each of B sequences (`x` `[B, 1, hidden]`): the
    /// projections run on all rows at once, attention row by row against that
    /// row's cache of this `layer`.
    pub fn forward_rows(&self, x: &Array, caches: &mut [&mut [Box<dyn Cache>]], layer: usize, rope: &Rope) -> Result<Array> {
        let b = x.dim(0);
        let (q, k, v, gate) = self.project(x)?;
        // RoPE for all rows in one op, each at its own cache's position.
        let offsets: Vec<i32> = caches.iter().map(|seq| seq[layer].offset()).collect();
        let q = rope.forward_rows(&q, &offsets)?;
        let k = rope.forward_rows(&k, &offsets)?;
        let (k, v) = self.for_cache(k, v, caches.first().map(|seq| &*seq[layer]).ok_or_else(|| mlx::Error::new("no rows"))?)?;
        // Plain caches take every row's keys and values in one node each (`KvCache::append_rows`);
        // what attention fetched is then only built if the in-place kernels decline. Others
        // append row by row (one split node for the rows' keys and values).
        let mut kvs: Vec<&mut KvCache> = caches.iter_mut().filter_map(|seq| seq[layer].as_kv()).collect();
        let together = kvs.len() == b as usize && KvCache::append_rows(&mut kvs, &k, &v)?;
        drop(kvs);
        let mut fetched = Vec::with_capacity(b as usize);
        if !together {
            let (ks, vs) = if b == 1 { (vec![k], vec![v]) } else { (k.split_equal(b, 0)?, v.split_equal(b, 0)?) };
            for ((seq, k), v) in caches.iter_mut().zip(&ks).zip(&vs) {
                let cache = seq[layer].as_mut();
                let mask = cache.mask(1)?;
                fetched.push((cache.update_and_fetch(k, v)?, mask));
            }
        }
        if fetched.iter().all(|(_, mask)| matches!(mask, CacheMask::None)) && self.position_scale.is_none() {
            let layer_caches: Vec<&dyn Cache> = caches.iter().map(|seq| seq[layer].as_ref()).collect();
            if let Some(o) = self.attend_in_place(&q, &layer_caches)? {
                return self.output(&o, gate);
            }
        }
        if together {
            for seq in caches.iter_mut() {
                fetched.push((seq[layer].as_kv().expect("a plain cache").fetched()?, CacheMask::None));
            }
        }
        let dense: Vec<(Array, Array)> = fetched
            .iter()
            .filter_map(|f| match f {
                (Fetched::Dense { keys, values }, CacheMask::None) => Some((keys.clone(), values.clone())),
                _ => None,
            })
            .collect();
        let o = if dense.len() == fetched.len() && self.sinks.is_none() && self.position_scale.is_none() {
            mlx::fast::attention_rows(&q, &dense, self.scale)?
        } else {
            let mut outs = Vec::with_capacity(b as usize);
            for (row, (f, mask)) in fetched.into_iter().enumerate() {
                let r = row as i32;
                let q = self.scale_positions(q.slice_axis(0, r, r + 1)?, offsets[row])?;
                outs.push(attend(&q, f, self.scale, mask, self.sinks.as_ref())?);
            }
            Array::concatenate(&outs.iter().collect::<Vec<_>>(), 0)?
        };
        self.output(&o.transpose(&[0, 2, 1, 3])?.reshape(&[b, 1, -1])?, gate)
    }
}

/// What one layer attended over: the keys and values its cache served, the
/// mask, and the position of its first query.
pub struct Attended {
    pub fetched: Fetched,
    pub mask: CacheMask,
    pub offset: i32,
}

/// `queries` `[B, heads, L, D]` against the fetched keys and values.
pub fn attend(queries: &Array, fetched: Fetched, scale: f32, mask: CacheMask, sinks: Option<&Array>) -> Result<Array> {
    match fetched {
        Fetched::Dense { keys, values } => {
            let mask = match &mask {
                CacheMask::None => AttentionMask::None,
                CacheMask::Causal => AttentionMask::Causal,
                CacheMask::Array(m) => AttentionMask::Array(m),
            };
            match sinks {
                None => scaled_dot_product_attention(queries, &keys, &values, scale, mask),
                Some(s) => scaled_dot_product_attention_sinks(queries, &keys, &values, scale, mask, Some(s)),
            }
        }
        Fetched::Quantized { .. } if sinks.is_some() => {
            Err(mlx::Error::new("a quantized KV cache cannot be used with attention sinks (as in MLX-LM)"))
        }
        Fetched::Quantized { keys, values, group_size, bits } => quantized(queries, &keys, &values, scale, mask, group_size, bits),
    }
}

/// Fast precision's caches hold float16 unless `MLX_NODE_HALF_KV=0` (read once
/// per process; a switch for measuring what it saves, and to keep float32).
fn half_cache_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| !std::env::var("MLX_NODE_HALF_KV").is_ok_and(|v| v.trim() == "0"))
}

/// The most negative finite value of a float dtype (`mx.finfo(dtype).min`).
fn lowest(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::Float16 => -65504.0,
        Dtype::Bfloat16 => -3.3895313892515355e38,
        _ => f32::MIN as f64,
    }
}

/// Scores by `quantized_matmul` against the packed keys, a precise softmax,
/// then `quantized_matmul` with the packed values; grouped query heads share
/// their key/value head through a broadcast axis.
fn quantized(q: &Array, keys: &QuantizedArrays, values: &QuantizedArrays, scale: f32, mask: CacheMask, group_size: i32, bits: i32) -> Result<Array> {
    let s = q.shape();
    let (b, heads, l, d) = (s[0], s[1], s[2], s[3]);
    let kv_heads = keys.w.dim(-3);
    let repeats = heads / kv_heads;
    let mut q = q.multiply_scalar(scale as f64)?;
    let widen = |x: &QuantizedArrays| -> Result<QuantizedArrays> {
        if repeats > 1 {
            Ok(QuantizedArrays { w: x.w.expand_dims(&[-3])?, scales: x.scales.expand_dims(&[-3])?, biases: x.biases.expand_dims(&[-3])? })
        } else {
            Ok(x.clone())
        }
    };
    let (keys, values) = (widen(keys)?, widen(values)?);
    if repeats > 1 {
        q = q.reshape(&[b, kv_heads, repeats, l, d])?;
    }
    let mut scores = quantized_matmul_mlx(&q, &keys.w, &keys.scales, Some(&keys.biases), true, group_size, bits, Mode::Affine)?;
    let mask = match mask {
        CacheMask::None => None,
        CacheMask::Causal => {
            let (ql, kl) = (scores.dim(-2), scores.dim(-1));
            Some(causal_mask(ql, kl - ql, None)?)
        }
        CacheMask::Array(m) => Some(if repeats > 1 && m.ndim() > 3 { m.expand_dims(&[-3])? } else { m }),
    };
    if let Some(m) = mask {
        scores = if m.dtype() == Dtype::Bool {
            Array::where_(&m, &scores, &Array::scalar(lowest(scores.dtype()), scores.dtype())?)?
        } else {
            scores.add(&m)?
        };
    }
    let scores = scores.softmax(&[-1], true)?;
    let out = quantized_matmul_mlx(&scores, &values.w, &values.scales, Some(&values.biases), false, group_size, bits, Mode::Affine)?;
    if repeats > 1 {
        out.reshape(&[b, heads, l, d])
    } else {
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeros(shape: &[i32]) -> Array {
        Array::zeros(shape, Dtype::Float32).unwrap()
    }

    /// MLX-LM gives a layer that shares keys no cache, so it cannot attend over
    /// quantized ones (`kvBits`): an error, not other numbers.
    #[test]
    fn a_shared_layer_refuses_quantized_keys() {
        let linear = |o: i32, i: i32| Linear::Dense { weight: zeros(&[o, i]), bias: None };
        let attn = SelfAttention {
            qkv: Projections::QueriesOnly { q: linear(8, 8) },
            o_proj: linear(8, 8),
            q_norm: None,
            k_norm: None,
            v_norm: None,
            heads: 1,
            kv_heads: 1,
            head_dim: 8,
            scale: 1.0,
            position_scale: None,
            sinks: None,
            output_gate: false,
        };
        let q = || QuantizedArrays { w: zeros(&[1, 1, 2, 1]), scales: zeros(&[1, 1, 2, 1]), biases: zeros(&[1, 1, 2, 1]) };
        let shared = Attended { fetched: Fetched::Quantized { keys: q(), values: q(), group_size: 32, bits: 4 }, mask: CacheMask::None, offset: 2 };
        let Err(err) = attn.forward_shared(&zeros(&[1, 1, 8]), &shared, &Rope::Identity) else {
            panic!("a shared layer attended over quantized keys")
        };
        assert!(err.message.contains("quantized KV cache cannot be shared"), "{}", err.message);
    }
}
