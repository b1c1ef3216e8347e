//! Model families, found by `model_type` in `registry`. Qwen3, Llama (and
//! Mistral) and Qwen2 share one decoder.
pub mod attention;
mod decoder;
mod family_config;
mod gated_delta;
mod gemma3;
mod gemma4;
mod gpt_oss;
mod lfm2;
mod ministral3;
mod moe;
mod phi3;
mod qwen3_5;
mod qwen3_moe;
pub mod registry;
mod smollm3;

pub use decoder::{Decoder, DecoderStack};
pub use mlx::quant::Precision;

use std::path::Path;

use mlx::{Array, Dtype};

use crate::cache::{Cache, LayerCaches};
use crate::config::ModelConfig;
use crate::error::Result;

/// A causal language model the generation loop can drive.
pub trait LanguageModel: Send {
    /// Logits `[B, L, vocab]` for `ids` `[B, L]` (only the last position when `last_only`).
    /// `caches` are the caller's (one per layer, from `new_caches` or kept from
    /// an earlier call): the model appends to them.
    fn forward(&self, ids: &Array, caches: &mut [Box<dyn Cache>], last_only: bool) -> mlx::Result<Array>;
    /// Next-token logits `[B, vocab]` for one token per sequence (`ids` `[B, 1]`),
    /// each sequence with its own caches. By default one `forward` per row;
    /// a family that can runs them as one pass.
    fn forward_batch(&self, ids: &Array, caches: &mut [&mut [Box<dyn Cache>]]) -> mlx::Result<Array> {
        let mut rows = Vec::with_capacity(caches.len());
        for (b, c) in caches.iter_mut().enumerate() {
            let logits = self.forward(&ids.slice_axis(0, b as i32, b as i32 + 1)?, c, true)?;
            let v = logits.dim(-1);
            rows.push(logits.reshape(&[1, v])?);
        }
        let refs: Vec<&Array> = rows.iter().collect();
        Array::concatenate(&refs, 0)
    }
    /// Feeds one prompt chunk per sequence (`chunks[i]` into `caches[i]`), as
    /// `forward` would one at a time; only the caches change (the caller
    /// evaluates them). By default one `forward` per chunk; a family that can
    /// runs them as one pass.
    fn prefill_batch(&self, chunks: &[&[u32]], caches: &mut [&mut [Box<dyn Cache>]]) -> mlx::Result<()> {
        prefill_each(self, chunks, caches)
    }
    /// Fresh caches, one per layer (the kinds `cache_layout` names, else growing ones).
    fn new_caches(&self) -> LayerCaches {
        let n = self.config().num_hidden_layers as usize;
        crate::cache::make_model_caches(self.cache_layout().as_deref(), n, &crate::cache::CacheOptions::default())
    }
    /// The cache kind of each layer when the family fixes it (sliding-window
    /// layers); None: every layer takes the kind the caller's options ask for.
    fn cache_layout(&self) -> Option<Vec<crate::cache::LayerKind>> {
        None
    }
    fn config(&self) -> &ModelConfig;
    /// Key/value heads each layer's cache holds (this process's share in a
    /// tensor-parallel group).
    fn kv_heads(&self) -> i32 {
        self.config().num_key_value_heads
    }
    /// Key/value heads and head size of each cache, in `new_caches`' order:
    /// by default one per layer (or per `cache_layout` entry, which may be
    /// fewer when later layers reuse earlier ones' keys), all alike.
    fn cache_heads(&self) -> Vec<(i32, i32)> {
        let n = self.cache_layout().map_or(self.config().num_hidden_layers as usize, |k| k.len());
        vec![(self.kv_heads(), self.config().head_dim); n]
    }
    fn dtype(&self) -> Dtype;
    /// The quantization of the bulk of the weights, if quantized.
    fn quantization(&self) -> Option<crate::config::Quantization> {
        self.config().quantization()
    }
}

/// `LanguageModel::prefill_batch` one chunk at a time.
pub fn prefill_each<M: LanguageModel + ?Sized>(model: &M, chunks: &[&[u32]], caches: &mut [&mut [Box<dyn Cache>]]) -> mlx::Result<()> {
    for (chunk, c) in chunks.iter().zip(caches.iter_mut()) {
        let ids: Vec<i32> = chunk.iter().map(|&t| t as i32).collect();
        // The last position's logits stay lazy and are never computed.
        model.forward(&Array::from_slice(&ids, &[1, ids.len() as i32])?, c, true)?;
    }
    Ok(())
}

/// How a model is loaded (`loadModel`'s options).
#[derive(Clone, Default)]
pub struct LoadOptions {
    /// Compute dtype; float weights are cast to it (None: as stored).
    pub dtype: Option<Dtype>,
    /// How quantized matmuls are computed; None: the model's default
    /// (`precision_for`).
    pub precision: Option<Precision>,
    /// This process's place in a group that splits the model: it loads and
    /// runs only its slice of every layer (tensor) or its layers (pipeline).
    pub shard: Option<crate::parallel::Shard>,
}

impl LoadOptions {
    /// The precision a model of `config` runs in: the one asked for, or by
    /// default fast for affine-quantized weights on the CPU (the mode
    /// `cpu::qmm_int8` computes, whose gate docs/kernels.md#fast-precision
    /// measures) and exact otherwise: float models (whose layers stay exact
    /// either way), the floating-point modes (no fast kernel), other devices
    /// (Metal, CUDA). Both loaders build with it
    /// and the bindings report it, so it is decided here only.
    pub fn precision_for(&self, config: &ModelConfig) -> Precision {
        self.precision.unwrap_or_else(|| {
            let affine = config
                .raw
                .get("quantization")
                .filter(|q| q.is_object())
                .is_some_and(|q| q.get("mode").and_then(serde_json::Value::as_str).is_none_or(|m| m == mlx::quant::Mode::Affine.name()));
            if affine && mlx::cpu::kernel::cpu_default() {
                Precision::Fast
            } else {
                Precision::Exact
            }
        })
    }
}

/// The model in exact precision (MLX's arithmetic, MLX-LM's tokens: what the
/// Rust tests compare), weights as stored or cast to `dtype`.
pub fn load(dir: &Path, dtype: Option<Dtype>) -> Result<Box<dyn LanguageModel>> {
    load_with_progress(dir, &LoadOptions { dtype, precision: Some(Precision::Exact), ..LoadOptions::default() }, &mut |_| {})
}

/// As `load`, with all the options, telling `progress` the fraction of the
/// weights read so far (increasing, the last exactly 1).
pub fn load_with_progress(dir: &Path, options: &LoadOptions, progress: &mut dyn FnMut(f64)) -> Result<Box<dyn LanguageModel>> {
    registry::load(dir, options, progress)
}

/// What `loadModel(path)` loads: a model folder (config.json, safetensors,
/// tokenizer files) or a GGUF file, with its tokenizer (MLX-LM's EOS set).
pub fn load_with_tokenizer(
    path: &Path,
    options: &LoadOptions,
    progress: &mut dyn FnMut(f64),
) -> Result<(Box<dyn LanguageModel>, crate::tokenizer::Tokenizer)> {
    let Some(shard) = &options.shard else { return load_alone(path, options, progress) };
    // Every step that one process fails, all fail: a process left behind would
    // wait for the others' partial results without end. Different models
    // are refused before any weight is read.
    let fingerprint = crate::parallel::fingerprint(path);
    shard.check_same(*fingerprint.as_ref().unwrap_or(&0), "model")?;
    fingerprint?;
    let loaded = load_alone(path, options, progress);
    shard.check_all(loaded.is_ok(), "loading the model")?;
    loaded
}

/// `side()` on a thread of its own while `main()` runs on this one, for parts of a load that
/// do not depend on each other (a tokenizer beside the weights); where no thread can start,
/// `side()` runs here after `main()`. Both finish before it returns. A panic in `side` is an
/// `InvalidWeights` error naming `what` (a malformed file the parsing library choked on).
pub(crate) fn beside<T: Send, R>(what: &str, side: impl Fn() -> Result<T> + Sync, main: impl FnOnce() -> R) -> (Result<T>, R) {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new().name("mlx-node-load".into()).spawn_scoped(scope, &side).ok();
        let r = main();
        let t = match thread {
            Some(t) => t.join().unwrap_or_else(|_| Err(crate::LmError::InvalidWeights(format!("{what} failed (the library panicked)")))),
            None => side(),
        };
        (t, r)
    })
}

/// Runs the one-time calibrations of the float kernels (`mlx::cpu::gemv` and
/// `mlx::cpu::exact_attention`: probe products through MLX) now, for a model that will take them
/// (float32 arithmetic with MLX's bits: a float model's matmuls, exact decode attention), so that
/// the first request does not pay them (0.1-0.15 s and about 20 MB of peak memory on a 2-core
/// Zen 4). Quantized models in fast precision never ask.
fn warm_kernels(model: &dyn LanguageModel, options: &LoadOptions) {
    let exact = model.quantization().is_none() || options.precision_for(model.config()) == Precision::Exact;
    if model.dtype() == Dtype::Float32 && exact {
        mlx::cpu::gemv::active();
        mlx::cpu::exact_attention::active();
    }
}

fn load_alone(path: &Path, options: &LoadOptions, progress: &mut dyn FnMut(f64)) -> Result<(Box<dyn LanguageModel>, crate::tokenizer::Tokenizer)> {
    if crate::gguf::is_gguf(path) {
        return crate::gguf::load(path, options, progress).inspect(|(m, _)| warm_kernels(&**m, options));
    }
    if !path.is_dir() {
        return Err(crate::LmError::ModelNotFound(format!("model folder or .gguf file {} does not exist", path.display())));
    }
    // The tokenizer is read beside the weights: parsing a large tokenizer.json (Qwen3's 11 MB)
    // takes about as long as reading a small model's weights. The model's errors come first.
    let what = format!("reading the tokenizer of {}", path.display());
    let (tokenizer, model) = beside(
        &what,
        || crate::tokenizer::Tokenizer::from_model_dir(path),
        || load_with_progress(path, options, progress).inspect(|m| warm_kernels(&**m, options)),
    );
    let model = model?;
    let tokenizer = tokenizer?;
    Ok((model, tokenizer))
}
