//! The pre-norm decoder shared by Llama, Mistral, Qwen2, Qwen3, SmolLM3 and
//! Qwen3-MoE: RMSNorm, GQA attention with RoPE (Qwen3 adds per-head q/k
//! RMSNorm, Qwen2 q/k/v bias), a feed-forward block per layer (the SwiGLU MLP,
//! or a family's own such as a mixture of experts), tied or separate LM head.
//! Weight names follow Hugging Face.
//!
//! `DecoderStack` is the layer stack plus final norm on its own, loadable under
//! any name prefix and fed embeddings, so other models (Chatterbox's T3) run
//! their own inputs and heads on the same blocks.

use mlx::nn::{Embedding, Linear, RmsNorm, Rope};
use mlx::{Array, Dtype};

use super::attention::{Projections, SelfAttention};
use super::moe::Activation;
use super::LanguageModel;
use crate::cache::{kv_caches, Cache, LayerCaches, LayerKind};
use crate::config::{ModelConfig, RopeScaling};
use crate::error::Result;
use crate::parallel::{self, Shard, Split};
use crate::weights::Weights;

/// A layer's feed-forward block (`mlp` in the checkpoints).
pub trait FeedForward: Send {
    fn forward(&self, x: &Array) -> mlx::Result<Array>;
}

/// `down(silu(gate(x)) * up(x))`, or another `activation` of gate and up.
pub struct Mlp {
    gate_up: GateUp,
    down_proj: Linear,
    activation: Activation,
}

/// The gate and up projections: two layers, or one whose output is split in
/// halves (Phi-3's `gate_up_proj`, or two quantized layers held as one at
/// load, `Weights::linear_fused`: one matmul per step instead of two, with
/// the same bits).
enum GateUp {
    Separate { gate: Linear, up: Linear },
    Fused(Linear),
}

impl GateUp {
    /// `{prefix}.{gate}` and `{prefix}.{up}`, held as one where `Weights::linear_fused` can
    /// (otherwise, in a tensor-parallel group, this process's share of the hidden units).
    fn load(w: &mut Weights, prefix: &str, [gate, up]: [&str; 2], dims: i32, hidden: i32, bias: bool) -> Result<GateUp> {
        let names = [gate, up].map(|n| format!("{prefix}.{n}"));
        if let Some(fused) = w.linear_fused(&names, dims, &[hidden, hidden], bias)? {
            return Ok(GateUp::Fused(fused));
        }
        let [gate, up] = names;
        Ok(GateUp::Separate {
            gate: w.linear_split(&gate, dims, hidden, bias, Split::Outputs)?,
            up: w.linear_split(&up, dims, hidden, bias, Split::Outputs)?,
        })
    }

    fn forward(&self, x: &Array) -> mlx::Result<(Array, Array)> {
        match self {
            GateUp::Separate { gate, up } => Ok((gate.forward(x)?, up.forward(x)?)),
            GateUp::Fused(gate_up) => Self::halves(gate_up.forward(x)?),
        }
    }

    /// A joined layer's output as gate and up: one split node, not a slice per half.
    fn halves(y: Array) -> mlx::Result<(Array, Array)> {
        let [gate, up]: [Array; 2] = y.split_equal(2, -1)?.try_into().map_err(|_| mlx::Error::new("split into gate and up: not two halves"))?;
        Ok((gate, up))
    }
}

impl Mlp {
    /// `{prefix}.gate_proj`, `up_proj` and `down_proj`, `hidden` wide inside
    /// (in a tensor-parallel group, this process's share of the hidden units).
    pub fn load(w: &mut Weights, prefix: &str, dims: i32, hidden: i32, bias: bool) -> Result<Mlp> {
        Self::load_named(w, prefix, ["gate_proj", "up_proj", "down_proj"], dims, hidden, bias)
    }

    /// As `load`, the three layers under other `names` (gate, up, down; LFM2's `w1`, `w3`, `w2`).
    pub fn load_named(w: &mut Weights, prefix: &str, names: [&str; 3], dims: i32, hidden: i32, bias: bool) -> Result<Mlp> {
        let [gate, up, down] = names;
        Ok(Mlp {
            gate_up: GateUp::load(w, prefix, [gate, up], dims, hidden, bias)?,
            down_proj: w.linear_split(&format!("{prefix}.{down}"), hidden, dims, bias, Split::Inputs)?,
            activation: Activation::SwiGlu,
        })
    }

    /// As `load`, `down_proj` left unsummed in a tensor-parallel group: its
    /// caller sums the block's output over the group (a shared expert beside
    /// the routed ones, summed with them once, as MLX-LM's `shard_inplace`).
    pub fn load_unsummed(w: &mut Weights, prefix: &str, dims: i32, hidden: i32) -> Result<Mlp> {
        Ok(Mlp {
            gate_up: GateUp::load(w, prefix, ["gate_proj", "up_proj"], dims, hidden, false)?,
            down_proj: w.linear_unsummed(&format!("{prefix}.down_proj"), hidden, dims, Split::Inputs)?,
            activation: Activation::SwiGlu,
        })
    }

    /// The MLP with `gate_proj` and `up_proj` stored as one `gate_up_proj`
    /// whose output is split in halves (Phi-3).
    pub fn load_gate_up(w: &mut Weights, prefix: &str, dims: i32, hidden: i32) -> Result<Mlp> {
        Ok(Mlp {
            gate_up: GateUp::Fused(w.linear(&format!("{prefix}.gate_up_proj"), dims, 2 * hidden, false)?),
            down_proj: w.linear(&format!("{prefix}.down_proj"), hidden, dims, false)?,
            activation: Activation::SwiGlu,
        })
    }

    /// The same layers with gate and up combined by `activation` (Gemma's GeGLU).
    pub fn with_activation(self, activation: Activation) -> Mlp {
        Mlp { activation, ..self }
    }
}

impl FeedForward for Mlp {
    fn forward(&self, x: &Array) -> mlx::Result<Array> {
        let (gate, up) = match &self.gate_up {
            GateUp::Fused(gate_up) => {
                let y = gate_up.forward(x)?;
                // SwiGLU on a joined gate/up reads the halves in place: no split, no copies.
                if matches!(self.activation, Activation::SwiGlu) {
                    if let Some(h) = mlx::cpu::math::swiglu_halves(&y)? {
                        return self.down_proj.forward(&h);
                    }
                }
                GateUp::halves(y)?
            }
            separate => separate.forward(x)?,
        };
        self.down_proj.forward(&self.activation.apply(&gate, &up)?)
    }
}

/// Builds layer `i`'s feed-forward block from `{prefix}` (`model.layers.i.mlp`).
pub type FeedForwardLoader<'a> = dyn Fn(&mut Weights, usize, &str) -> Result<Box<dyn FeedForward>> + 'a;

struct Block {
    attn: SelfAttention,
    mlp: Box<dyn FeedForward>,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
}

/// `{prefix}.layers.N.*` and `{prefix}.norm`: hidden states in, final-normed hidden states out.
pub struct DecoderStack {
    config: ModelConfig,
    /// This process's layers: all of them, or in a pipeline `first..` of the model's.
    layers: Vec<Block>,
    first: usize,
    /// This process's place in a pipeline, if the model is split into one.
    pipeline: Option<Shard>,
    norm: RmsNorm,
    rope: Rope,
    /// Layers that apply no RoPE (SmolLM3's NoPE layers); empty: none.
    nope: Vec<bool>,
}

/// A text model: token embeddings, the stack, and the LM head (or the tied embeddings).
pub struct Decoder {
    embed_tokens: Embedding,
    pub(super) stack: DecoderStack,
    lm_head: Option<Linear>,
    dtype: Dtype,
    /// Per-layer cache kinds when the family fixes them (sliding-window layers).
    pub(super) layout: Option<Vec<LayerKind>>,
}

pub(super) fn build_rope(c: &ModelConfig) -> Result<Rope> {
    let dims = c.rope_dims;
    let traditional = c.rope_traditional;
    Ok(match c.rope_scaling {
        RopeScaling::None => Rope::Standard { dims, traditional, base: c.rope_theta, scale: 1.0 },
        RopeScaling::Linear { factor } => Rope::Standard { dims, traditional, base: c.rope_theta, scale: 1.0 / factor },
        RopeScaling::Dynamic { factor } => {
            Rope::DynamicNtk { dims, traditional, base: c.rope_theta, factor, max_positions: c.max_position_embeddings }
        }
        RopeScaling::LongRope { ref long_factor, original_max_positions, long_mscale } => {
            if long_factor.len() as i32 != dims / 2 {
                return Err(crate::LmError::InvalidWeights(format!(
                    "rope_scaling.long_factor has {} values; {} rotated features need {}",
                    long_factor.len(),
                    dims,
                    dims / 2
                )));
            }
            Rope::su_scaled(dims, c.rope_theta, c.max_position_embeddings as f32, original_max_positions, long_factor, long_mscale)?
        }
        RopeScaling::Yarn { factor, original_max_positions, beta_fast, beta_slow, mscale, mscale_all_dim } => {
            Rope::yarn(dims, traditional, c.rope_theta, factor, original_max_positions, beta_fast, beta_slow, mscale, mscale_all_dim)?
        }
        RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_positions } => {
            Rope::llama3(dims, traditional, c.rope_theta, factor, low_freq_factor, high_freq_factor, original_max_positions)?
        }
    })
}

impl DecoderStack {
    /// Takes `{prefix}.layers.{0..n}.*` and `{prefix}.norm.weight` out of `w`
    /// (`prefix` is `model` for Hugging Face checkpoints).
    pub fn load(w: &mut Weights, prefix: &str, config: &ModelConfig) -> Result<DecoderStack> {
        let (h, ff, bias) = (config.hidden_size, config.intermediate_size, config.mlp_bias);
        Self::load_with(w, prefix, config, &|w, _, p| Ok(Box::new(Mlp::load(w, p, h, ff, bias)?)))
    }

    /// As `load`, each layer's feed-forward block built by `ffn`.
    pub fn load_with(w: &mut Weights, prefix: &str, config: &ModelConfig, ffn: &FeedForwardLoader) -> Result<DecoderStack> {
        let c = config;
        let (h, hd) = (c.hidden_size, c.head_dim);
        let (nq, nkv) = (c.num_attention_heads * hd, c.num_key_value_heads * hd);
        // In a tensor-parallel group each process attends with its share of the heads.
        let heads = parallel::divide(w.tensor_shard(), c.num_attention_heads, "num_attention_heads")?;
        let kv_heads = parallel::divide(w.tensor_shard(), c.num_key_value_heads, "num_key_value_heads")?;
        // In a pipeline, this process builds its own layers and drops the others' weights.
        let pipeline = w.pipeline().cloned();
        let own = match &pipeline {
            Some(s) => s.pipeline_layers(c.num_hidden_layers)?,
            None => 0..c.num_hidden_layers,
        };
        let mut layers = Vec::with_capacity(own.len());
        for i in 0..c.num_hidden_layers {
            let p = format!("{prefix}.layers.{i}");
            if !own.contains(&i) {
                let layer = format!("{p}.");
                w.discard(|k| k.starts_with(&layer));
                continue;
            }
            let qk_norm = |w: &mut Weights, name: &str| -> Result<Option<RmsNorm>> {
                if c.qk_norm {
                    Ok(Some(w.rms_norm(&format!("{p}.self_attn.{name}.weight"), hd, c.rms_norm_eps)?))
                } else {
                    Ok(None)
                }
            };
            let attn = SelfAttention {
                qkv: Projections::load(w, &format!("{p}.self_attn"), h, nq, nkv, c.qkv_bias)?,
                o_proj: w.linear_split(&format!("{p}.self_attn.o_proj"), nq, h, c.o_bias, Split::Inputs)?,
                q_norm: qk_norm(w, "q_norm")?,
                k_norm: qk_norm(w, "k_norm")?,
                v_norm: None,
                heads,
                kv_heads,
                head_dim: hd,
                scale: (hd as f32).powf(-0.5),
                position_scale: None,
                sinks: None,
                output_gate: false,
            };
            let mlp = ffn(w, i as usize, &format!("{p}.mlp"))?;
            layers.push(Block {
                attn,
                mlp,
                input_layernorm: w.rms_norm(&format!("{p}.input_layernorm.weight"), h, c.rms_norm_eps)?,
                post_attention_layernorm: w.rms_norm(&format!("{p}.post_attention_layernorm.weight"), h, c.rms_norm_eps)?,
            });
        }
        let norm = w.rms_norm(&format!("{prefix}.norm.weight"), h, c.rms_norm_eps)?;
        let rope = build_rope(c)?;
        Ok(DecoderStack { config: config.clone(), layers, first: own.start as usize, pipeline, norm, rope, nope: Vec::new() })
    }

    /// Runs `h` `[B, L, hidden]` through every layer (appending to `caches`,
    /// one per layer of the model) and the final norm; only the last position
    /// when `last_only`. In a pipeline, as MLX-LM's `PipelineMixin` models: the
    /// hidden states come from the next rank (but on the last, which runs the
    /// first layers), go through this rank's layers, on to the previous rank,
    /// and rank 0's final states are shared with every rank.
    pub fn forward(&self, h: Array, caches: &mut [Box<dyn Cache>], last_only: bool) -> mlx::Result<Array> {
        let l = h.dim(1);
        let mut h = match &self.pipeline {
            Some(p) => p.stage_input(h)?,
            None => h,
        };
        for (j, layer) in self.layers.iter().enumerate() {
            let i = self.first + j;
            let r = layer.attn.forward(&layer.input_layernorm.forward(&h)?, caches[i].as_mut(), self.rope_of(i))?;
            let hh = h.add(&r)?;
            let x = layer.post_attention_layernorm.forward(&hh)?;
            h = hh.add(&layer.mlp.forward(&x)?)?;
        }
        if let Some(p) = &self.pipeline {
            h = p.stage_output(h, caches[self.first + self.layers.len() - 1].as_mut())?;
        }
        // The norm is per position, so slicing first gives the same values for less work.
        if last_only && l > 1 {
            h = h.slice_axis(1, l - 1, l)?;
        }
        self.norm.forward(&h)
    }

    /// One new position for each of B sequences, `h` `[B, 1, hidden]`, each with
    /// its own caches: the projections and the MLP run on all rows at once (the
    /// weights are read once), attention row by row against that row's cache.
    pub fn forward_rows(&self, h: Array, caches: &mut [&mut [Box<dyn Cache>]]) -> mlx::Result<Array> {
        if self.pipeline.is_some() {
            return Err(mlx::Error::new("a model split into a pipeline decodes one sequence at a time"));
        }
        let mut h = h;
        for (l, layer) in self.layers.iter().enumerate() {
            let r = layer.attn.forward_rows(&layer.input_layernorm.forward(&h)?, caches, l, self.rope_of(l))?;
            let hh = h.add(&r)?;
            let x = layer.post_attention_layernorm.forward(&hh)?;
            h = hh.add(&layer.mlp.forward(&x)?)?;
        }
        self.norm.forward(&h)
    }

    /// Several sequences' prompt chunks through every layer in one pass, each
    /// appended to its own caches (`h` and `lens` as `SelfAttention::forward_chunks`
    /// takes them). Nothing comes out: a chunk's logits are not needed (the
    /// prompt's last token is fed by a decode step), so only the caches'
    /// arrays are evaluated.
    pub fn forward_chunks(&self, h: Array, lens: &[i32], caches: &mut [&mut [Box<dyn Cache>]]) -> mlx::Result<()> {
        if self.pipeline.is_some() {
            return Err(mlx::Error::new("a model split into a pipeline feeds one prompt at a time"));
        }
        let mut h = h;
        for (l, layer) in self.layers.iter().enumerate() {
            let r = layer.attn.forward_chunks(&layer.input_layernorm.forward(&h)?, lens, caches, l, self.rope_of(l))?;
            let hh = h.add(&r)?;
            let x = layer.post_attention_layernorm.forward(&hh)?;
            h = hh.add(&layer.mlp.forward(&x)?)?;
        }
        Ok(())
    }

    pub fn is_pipeline(&self) -> bool {
        self.pipeline.is_some()
    }

    /// Scales every layer's queries by position as Llama 4 does (`beta`, original context).
    pub fn set_position_scale(&mut self, beta: f32, original: i32) {
        for layer in &mut self.layers {
            layer.attn.position_scale = Some((beta, original));
        }
    }

    /// Per-head attention sink logits, one array per layer (GPT-OSS).
    pub fn set_sinks(&mut self, sinks: Vec<Array>) {
        for (layer, s) in self.layers.iter_mut().zip(sinks) {
            layer.attn.sinks = Some(s);
        }
    }

    /// Marks the layers that apply no RoPE (`true` = NoPE), one flag per layer.
    pub fn set_nope_layers(&mut self, nope: Vec<bool>) {
        self.nope = nope;
    }

    fn rope_of(&self, layer: usize) -> &Rope {
        const IDENTITY: &Rope = &Rope::Identity;
        if self.nope.get(layer).copied().unwrap_or(false) {
            IDENTITY
        } else {
            &self.rope
        }
    }

    pub fn new_caches(&self) -> LayerCaches {
        kv_caches(self.config.num_hidden_layers as usize)
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }
}

/// As MLX-LM's sanitize for these families: tied models ignore a stored
/// lm_head; rotary tables are recomputed.
pub(super) fn sanitize(config: &ModelConfig, w: &mut Weights) -> Result<()> {
    let tied = config.tie_word_embeddings;
    w.discard(|k| k.contains("self_attn.rotary_emb.inv_freq") || (tied && k == "lm_head.weight"));
    Ok(())
}

pub(super) fn build(config: ModelConfig, w: Weights, dtype: Option<Dtype>, progress: &mut dyn FnMut(f64)) -> Result<Box<dyn LanguageModel>> {
    Ok(Box::new(Decoder::build(config, w, dtype, progress)?))
}

impl Decoder {
    /// `progress` hears the fraction of weight bytes read (see `Weights::finish_with_progress`).
    pub(super) fn build(config: ModelConfig, w: Weights, dtype: Option<Dtype>, progress: &mut dyn FnMut(f64)) -> Result<Decoder> {
        let (h, ff, bias) = (config.hidden_size, config.intermediate_size, config.mlp_bias);
        Self::build_with(config, w, dtype, progress, &|w, _, p| Ok(Box::new(Mlp::load(w, p, h, ff, bias)?)))
    }

    /// As `build`, each layer's feed-forward block built by `ffn`.
    pub(super) fn build_with(
        config: ModelConfig,
        mut w: Weights,
        dtype: Option<Dtype>,
        progress: &mut dyn FnMut(f64),
        ffn: &FeedForwardLoader,
    ) -> Result<Decoder> {
        let native = w.native_dtype().unwrap_or(Dtype::Float32);
        let dtype = dtype.unwrap_or(native);

        let c = &config;
        let embed_tokens = match c.tie_word_embeddings {
            true => w.tied_embedding("model.embed_tokens", c.vocab_size, c.hidden_size)?,
            false => w.embedding("model.embed_tokens", c.vocab_size, c.hidden_size)?,
        };
        let stack = DecoderStack::load_with(&mut w, "model", c, ffn)?;
        let lm_head = if config.tie_word_embeddings { None } else { Some(w.linear("lm_head", c.hidden_size, c.vocab_size, false)?) };
        w.finish_with_progress(progress)?;

        Ok(Decoder { embed_tokens, stack, lm_head, dtype, layout: None })
    }
}

/// The logits of `h`: the LM head, or the embedding read as one where the head is tied.
pub fn logits(embed_tokens: &Embedding, lm_head: Option<&Linear>, h: &Array) -> mlx::Result<Array> {
    match lm_head {
        Some(head) => head.forward(h),
        None => embed_tokens.as_linear(h),
    }
}

impl LanguageModel for Decoder {
    fn forward(&self, ids: &Array, caches: &mut [Box<dyn Cache>], last_only: bool) -> mlx::Result<Array> {
        let h = self.stack.forward(self.embed_tokens.forward(ids)?, caches, last_only)?;
        logits(&self.embed_tokens, self.lm_head.as_ref(), &h)
    }

    /// One sequence: exactly `forward` (the same operations, so the same bits as
    /// a solo run). Several: one pass over all rows.
    fn forward_batch(&self, ids: &Array, caches: &mut [&mut [Box<dyn Cache>]]) -> mlx::Result<Array> {
        let b = ids.dim(0);
        let logits = if b == 1 {
            self.forward(ids, caches[0], true)?
        } else {
            let h = self.stack.forward_rows(self.embed_tokens.forward(ids)?, caches)?;
            logits(&self.embed_tokens, self.lm_head.as_ref(), &h)?
        };
        let v = logits.dim(-1);
        logits.reshape(&[b, v])
    }

    /// Chunks of fewer than `FAST_EXACT_MIN_POSITIONS` positions go in one pass
    /// as rows (`[N, 1, hidden]`), longer ones in another as one prompt (`[1,
    /// N, hidden]`): each chunk's matmuls then take the kernel they take alone
    /// (fast precision runs prompt chunks of that length on another kernel on
    /// some CPUs, `mlx::quant::fast_prompt_runs_exact`), and every kernel
    /// computes rows apart, so each sequence gets its solo bits but for the
    /// reduction order of float32 matmuls. A group of one, or a pipeline, runs
    /// alone (`forward`).
    fn prefill_batch(&self, chunks: &[&[u32]], caches: &mut [&mut [Box<dyn Cache>]]) -> mlx::Result<()> {
        let long = |c: &&[u32]| c.len() >= mlx::quant::FAST_EXACT_MIN_POSITIONS as usize;
        for as_rows in [true, false] {
            let group: Vec<usize> = (0..chunks.len()).filter(|&i| long(&chunks[i]) != as_rows).collect();
            let mut own: Vec<&mut [Box<dyn Cache>]> =
                caches.iter_mut().enumerate().filter(|(i, _)| group.contains(i)).map(|(_, c)| &mut **c).collect();
            let parts: Vec<&[u32]> = group.iter().map(|&i| chunks[i]).collect();
            if parts.len() < 2 || self.stack.is_pipeline() {
                super::prefill_each(self, &parts, &mut own)?;
                continue;
            }
            let ids: Vec<i32> = parts.iter().flat_map(|c| c.iter().map(|&t| t as i32)).collect();
            let n = ids.len() as i32;
            let shape = if as_rows { [n, 1] } else { [1, n] };
            let ids = Array::from_slice(&ids, &shape)?;
            let lens: Vec<i32> = parts.iter().map(|c| c.len() as i32).collect();
            self.stack.forward_chunks(self.embed_tokens.forward(&ids)?, &lens, &mut own)?;
        }
        Ok(())
    }

    fn new_caches(&self) -> LayerCaches {
        match &self.layout {
            None => self.stack.new_caches(),
            Some(kinds) => crate::cache::make_model_caches(Some(kinds), kinds.len(), &crate::cache::CacheOptions::default()),
        }
    }

    fn cache_layout(&self) -> Option<Vec<LayerKind>> {
        self.layout.clone()
    }

    fn config(&self) -> &ModelConfig {
        self.stack.config()
    }

    fn kv_heads(&self) -> i32 {
        self.stack.layers.first().map_or(self.config().num_key_value_heads, |l| l.attn.kv_heads)
    }

    fn dtype(&self) -> Dtype {
        self.dtype
    }
}
