//! The KV state of one token sequence for one model, kept between requests:
//! a chat's turns, an agent's loop, a server's conversations. A request reuses
//! the longest common prefix of what the cache holds and its prompt, trims the
//! rest and feeds only what is new. Files are MLX-LM's (`cache::file`), with
//! our token ids in the metadata so that a file reloads with its prefix known.
use std::collections::HashMap;
use std::path::Path;

use mlx::Dtype;

use crate::cache::{self, load_file, make_model_caches, save_file, trim_all, Cache, CacheOptions, LayerCaches, LayerKind};
use crate::error::{LmError, Result};
use crate::models::LanguageModel;

/// The metadata key our files keep the token ids under (a JSON array).
pub const TOKENS_KEY: &str = "tokens";

/// What a cache's layers must match in a model: per cache its KV heads and
/// head size (`LanguageModel::cache_heads`), and the dtype.
#[derive(Debug, Clone, PartialEq)]
struct Shape {
    heads: Vec<(i32, i32)>,
    dtype: Dtype,
}

impl Shape {
    fn of(model: &dyn LanguageModel) -> Shape {
        Shape { heads: model.cache_heads(), dtype: model.dtype() }
    }

    fn layers(&self) -> usize {
        self.heads.len()
    }
}

/// What a model's caches must fit to take a prompt cache's options: its layer kinds and head
/// sizes. Taken at load, so that a binding can check the options at once, before the cache is
/// made where the model lives.
#[derive(Debug, Clone)]
pub struct CacheFit {
    heads: Vec<(i32, i32)>,
    layout: Option<Vec<LayerKind>>,
}

impl CacheFit {
    pub fn of(model: &dyn LanguageModel) -> CacheFit {
        CacheFit { heads: model.cache_heads(), layout: model.cache_layout() }
    }

    /// The options as MLX-LM would take them on this model (`INVALID_ARGUMENT` where it raises).
    pub fn check(&self, options: &CacheOptions) -> Result<()> {
        options.validate().map_err(LmError::InvalidArgument)?;
        if options.kv_bits.is_none() {
            return Ok(());
        }
        // MLX-LM's RotatingKVCache.to_quantized raises NotImplementedError (once the layer holds
        // quantized_kv_start positions): a model with sliding-window layers cannot take kvBits.
        if self.layout.iter().flatten().any(|k| matches!(k, LayerKind::Window(_))) {
            return Err(LmError::InvalidArgument(
                "kvBits: this model's sliding-window layers keep rotating caches, which MLX-LM cannot quantize".into(),
            ));
        }
        if let Some(&(_, dim)) = self.heads.iter().find(|(_, d)| d % options.kv_group_size != 0) {
            return Err(LmError::InvalidArgument(format!(
                "kvGroupSize {} does not divide this model's head size {dim} (MLX quantizes keys and values in groups along it)",
                options.kv_group_size
            )));
        }
        Ok(())
    }
}

pub struct PromptCache {
    layers: LayerCaches,
    /// The ids of the positions held after the first `unknown`.
    tokens: Vec<u32>,
    /// Positions at the start whose ids are not known (a file without them).
    unknown: usize,
    options: CacheOptions,
    shape: Shape,
    /// Outlives the request (the caller keeps it): generation then feeds it
    /// the last sampled id too.
    kept: bool,
    /// The model's own cache kinds, if it fixes them (`LanguageModel::cache_layout`).
    layout: Option<Vec<LayerKind>>,
}

impl PromptCache {
    /// An empty cache for `model`, kept by the caller between requests.
    pub fn new(model: &dyn LanguageModel, options: CacheOptions) -> Result<PromptCache> {
        CacheFit::of(model).check(&options)?;
        let layout = model.cache_layout();
        let shape = Shape::of(model);
        let layers = make_model_caches(layout.as_deref(), shape.layers(), &options);
        Ok(PromptCache { layers, tokens: Vec::new(), unknown: 0, options, shape, kept: true, layout })
    }

    /// An empty cache for one request only (never fed past its last id).
    pub fn scratch(model: &dyn LanguageModel) -> PromptCache {
        let shape = Shape::of(model);
        let options = CacheOptions::default();
        let layout = model.cache_layout();
        let layers = make_model_caches(layout.as_deref(), shape.layers(), &options);
        PromptCache { layers, tokens: Vec::new(), unknown: 0, options, shape, kept: false, layout }
    }

    pub fn is_kept(&self) -> bool {
        self.kept
    }

    /// Reads an MLX-LM prompt-cache file for `model`; its metadata comes back
    /// too. Without our token ids in it, what it holds is a prefix of unknown
    /// tokens that the next input continues.
    pub fn load(model: &dyn LanguageModel, path: &Path) -> Result<(PromptCache, HashMap<String, String>)> {
        let file = load_file(path)?;
        let shape = Shape::of(model);
        check_layers(&file.caches, &shape, model.cache_layout().as_deref(), path)?;
        let held = file.caches.first().map_or(0, |c| c.offset()) as usize;
        let tokens: Vec<u32> = match file.metadata.get(TOKENS_KEY) {
            Some(t) => serde_json::from_str(t)
                .map_err(|e| LmError::InvalidCacheFile(format!("{}: metadata '{TOKENS_KEY}' is not a list of token ids: {e}", path.display())))?,
            None => Vec::new(),
        };
        if tokens.len() > held {
            return Err(LmError::InvalidCacheFile(format!("{}: {} token ids for {held} cached positions", path.display(), tokens.len())));
        }
        let vocab = model.config().vocab_size as u32;
        if let Some(bad) = tokens.iter().find(|&&t| t >= vocab) {
            return Err(LmError::CacheMismatch(format!("{}: token id {bad} is outside this model's vocabulary (size {vocab})", path.display())));
        }
        let options = options_of(&file.caches);
        let layout = model.cache_layout();
        let cache = PromptCache { layers: file.caches, unknown: held - tokens.len(), tokens, options, shape, kept: true, layout };
        Ok((cache, file.metadata))
    }

    /// Writes MLX-LM's format with `metadata`, adding our token ids.
    pub fn save(&self, path: &Path, metadata: &[(String, String)]) -> Result<()> {
        if self.is_empty() {
            return Err(LmError::InvalidArgument("the prompt cache is empty: there is nothing to save".into()));
        }
        let mut meta: Vec<(String, String)> = metadata.iter().filter(|(k, _)| k != TOKENS_KEY).cloned().collect();
        if self.unknown == 0 {
            let ids = serde_json::to_string(&self.tokens).map_err(|e| LmError::Mlx(e.to_string()))?;
            meta.push((TOKENS_KEY.to_string(), ids));
        }
        save_file(path, &self.layers, &meta)
    }

    /// Positions held: the most any layer holds (in a pipeline, a process's
    /// caches of the other processes' layers stay empty).
    pub fn len(&self) -> usize {
        self.layers.iter().map(|c| c.offset()).max().unwrap_or(0) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ids held after the unknown prefix.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Positions at the start whose ids are unknown (from a file without them).
    pub fn unknown(&self) -> usize {
        self.unknown
    }

    pub fn nbytes(&self) -> usize {
        self.layers.iter().map(|c| c.nbytes()).sum()
    }

    pub fn options(&self) -> &CacheOptions {
        &self.options
    }

    /// Fails with `CacheMismatch` when `model` is not shaped as the model this cache was made for.
    pub fn check_model(&self, model: &dyn LanguageModel) -> Result<()> {
        let want = Shape::of(model);
        if want != self.shape {
            return Err(LmError::CacheMismatch(format!("the prompt cache was made for a model shaped {:?}, not {want:?}", self.shape)));
        }
        Ok(())
    }

    /// Drops the last `n` positions (fewer when fewer are held); returns how
    /// many were dropped. A rotating cache that has wrapped cannot trim: 0.
    pub fn trim(&mut self, n: usize) -> usize {
        let n = n.min(self.len());
        match trim_all(&mut self.layers, n as i32) {
            Some(done) => {
                let done = done.max(0) as usize;
                self.forget(done);
                done
            }
            None => 0,
        }
    }

    /// Empties the cache (same kind and options).
    pub fn clear(&mut self) {
        self.layers = make_model_caches(self.layout.as_deref(), self.shape.layers(), &self.options);
        self.tokens.clear();
        self.unknown = 0;
    }

    /// Readies the cache for `prompt`: keeps the longest common prefix of the
    /// known ids and the prompt, but always leaves at least one prompt token to
    /// feed (its logits are needed); returns how many prompt tokens it serves.
    /// With an unknown prefix the prompt continues it. When what must go
    /// cannot be trimmed (a wrapped rotating cache), the cache starts over.
    pub fn reuse(&mut self, prompt: &[u32]) -> usize {
        let common = self.tokens.iter().zip(prompt).take_while(|(a, b)| a == b).count();
        let keep = common.min(prompt.len().saturating_sub(1));
        let drop = self.tokens.len() - keep;
        if drop > 0 && self.trim(drop) != drop {
            self.clear();
            return 0;
        }
        keep
    }

    /// Records `ids` as fed after what is held.
    pub(crate) fn extend(&mut self, ids: &[u32]) {
        self.tokens.extend_from_slice(ids);
        debug_assert_eq!(self.unknown + self.tokens.len(), self.len());
    }

    /// Forgets the last `n` recorded positions (known ids first, then unknown ones).
    fn forget(&mut self, n: usize) {
        let from_known = n.min(self.tokens.len());
        self.tokens.truncate(self.tokens.len() - from_known);
        self.unknown -= (n - from_known).min(self.unknown);
    }

    pub(crate) fn parts_mut(&mut self) -> (&mut [Box<dyn Cache>], &CacheOptions) {
        (&mut self.layers, &self.options)
    }
}

/// A file's layers against the model: count, kinds (a layer's own arrays,
/// as many as the model's layer keeps, where it is not attention), heads,
/// head size, dtype.
fn check_layers(caches: &[Box<dyn Cache>], shape: &Shape, layout: Option<&[LayerKind]>, path: &Path) -> Result<()> {
    let mismatch = |what: String| LmError::CacheMismatch(format!("{}: {what}", path.display()));
    if caches.len() != shape.layers() {
        return Err(mismatch(format!("the file has {} layers, the model {}", caches.len(), shape.layers())));
    }
    let offset = caches[0].offset();
    for (l, c) in caches.iter().enumerate() {
        if c.offset() != offset {
            return Err(LmError::InvalidCacheFile(format!("{}: layer {l} holds {} positions, layer 0 {offset}", path.display(), c.offset())));
        }
        let state = c.file_state().map_err(|e| LmError::InvalidCacheFile(format!("{}: layer {l}: {}", path.display(), e.message)))?;
        let arrays_file = c.class_name() == "ArraysCache";
        let arrays_model = match layout.and_then(|k| k.get(l)) {
            Some(LayerKind::Arrays(n)) => Some(*n),
            _ => None,
        };
        if arrays_file != arrays_model.is_some() {
            let kind = |arrays: bool| if arrays { "a convolution or recurrent layer's state" } else { "keys and values" };
            return Err(mismatch(format!(
                "layer {l} holds {} in the file, the model's layer {l} needs {}",
                kind(arrays_file),
                kind(arrays_model.is_some())
            )));
        }
        if let (Some(n), Some(cache::StateItem::Group(s))) = (arrays_model, state.first()) {
            if s.len() != n {
                return Err(mismatch(format!("layer {l} holds {} arrays in the file, the model's layer {l} keeps {n}", s.len())));
            }
            // The first is the layer's inputs (a convolution's), in the compute dtype.
            if s[0].dtype() != shape.dtype {
                return Err(mismatch(format!(
                    "layer {l} holds a {} convolution state, the model computes in {}",
                    s[0].dtype().name(),
                    shape.dtype.name()
                )));
            }
            continue;
        }
        let (heads, dim, dtype) = match state.first() {
            Some(cache::StateItem::Array(k)) => (k.dim(1), k.dim(3), k.dtype()),
            Some(cache::StateItem::Group(q)) if q.len() == 3 => {
                let bits = match state.get(4) {
                    Some(cache::StateItem::Int(b)) => *b as i32,
                    _ => 0,
                };
                let dim = if bits > 0 { q[0].dim(3) * 32 / bits } else { 0 };
                (q[0].dim(1), dim, q[1].dtype())
            }
            _ => return Err(LmError::InvalidCacheFile(format!("{}: layer {l} has no keys", path.display()))),
        };
        let (kv_heads, head_dim) = shape.heads[l];
        // Fast precision keeps a float32 model's keys and values in float16 (docs/kernels.md).
        let dtype_fits = dtype == shape.dtype || (shape.dtype == Dtype::Float32 && dtype == Dtype::Float16);
        if (heads, dim) != (kv_heads, head_dim) || !dtype_fits {
            return Err(mismatch(format!(
                "layer {l} holds {heads} heads of size {dim} in {}, the model uses {kv_heads} heads of size {head_dim} in {}",
                dtype.name(),
                shape.dtype.name()
            )));
        }
    }
    Ok(())
}

/// The options that would make caches of these kinds (for `clear`).
fn options_of(caches: &[Box<dyn Cache>]) -> CacheOptions {
    let mut o = CacheOptions::default();
    if let Some(c) = caches.first() {
        if let Ok(state) = c.file_state() {
            let int = |i: usize| match state.get(i) {
                Some(cache::StateItem::Int(v)) => Some(*v as i32),
                _ => None,
            };
            match c.class_name() {
                "RotatingKVCache" => o.max_kv_size = int(4),
                "QuantizedKVCache" => {
                    o.kv_group_size = int(3).unwrap_or(64);
                    o.kv_bits = int(4);
                    o.quantized_kv_start = 0;
                }
                _ => {}
            }
        }
    }
    o
}
