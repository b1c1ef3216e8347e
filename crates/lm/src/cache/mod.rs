//! Per-layer caches behind one interface, so that models ask for their keys and
//! values without knowing which kind they got (MLX-LM's `_BaseCache`). Kinds:
//! `KvCache` (grows), `RotatingKvCache` (a window, `maxKvSize`) and
//! `QuantizedKvCache` (`kvBits`), and `ArraysCache` for layers that keep
//! arrays of their own instead (LFM2's convolutions, Qwen3.5's Gated
//! DeltaNet); `file` writes and reads them as MLX-LM's
//! prompt-cache files. A new kind implements `Cache` and, to be saved, names
//! its MLX-LM class and state.
mod arrays;
mod file;
mod kv;
mod mask;
mod quantized;
mod rotating;

pub use arrays::ArraysCache;
pub use file::{load_file, save_file, write_safetensors, CacheFile};
pub use kv::KvCache;
pub use mask::causal_mask;
pub use quantized::QuantizedKvCache;
pub use rotating::RotatingKvCache;

use mlx::{Array, Result};

/// What attention over `n` new queries needs from this cache (owned, so that
/// a kind with an explicit mask can hand it out).
#[derive(Clone)]
pub enum CacheMask {
    /// One query: it sees every cached position.
    None,
    /// MLX's fused causal mode.
    Causal,
    /// An explicit boolean or additive mask.
    Array(Array),
}

/// A quantized tensor as `mlx.core.quantize` returns it.
#[derive(Clone)]
pub struct QuantizedArrays {
    pub w: Array,
    pub scales: Array,
    pub biases: Array,
}

/// What attention reads after an update: plain keys and values, or quantized
/// ones (attention then runs on `quantized_matmul`, as MLX-LM's
/// `quantized_scaled_dot_product_attention`).
#[derive(Clone)]
pub enum Fetched {
    Dense { keys: Array, values: Array },
    Quantized { keys: QuantizedArrays, values: QuantizedArrays, group_size: i32, bits: i32 },
}

/// One entry of a cache's `state` in an MLX-LM prompt-cache file: an array, a
/// scalar (stored as a 0-d int32 array), a tuple of arrays, or None (stored
/// as an empty array marked "none").
#[derive(Clone)]
pub enum StateItem {
    Array(Array),
    Int(i64),
    Group(Vec<Array>),
    /// Python's None (an `ArraysCache`'s unused padding and lengths).
    None,
}

pub trait Cache: Send {
    /// Appends `[B, heads, L, dim]` keys and values; returns what attention
    /// should see (everything cached so far, for `KvCache`).
    fn update_and_fetch(&mut self, keys: &Array, values: &Array) -> Result<Fetched>;
    /// Positions fed so far: the RoPE offset of the next one.
    fn offset(&self) -> i32;
    /// Where the last `update_and_fetch`'s plain keys and values lie: the
    /// cache's whole buffers `[B, heads, capacity, dim]` and how many leading
    /// positions of them it fetched, so that a kernel reads them in place (a
    /// slice of a buffer is not one block: read as one it would be copied,
    /// the whole cache at every step). None where the fetch is not such a
    /// prefix (quantized keys, layers without keys).
    fn buffers(&self) -> Option<(&Array, &Array, i32)> {
        None
    }
    /// The mask for `n` new queries (MLX-LM: none for one, causal otherwise).
    fn mask(&self, n: i32) -> Result<CacheMask> {
        Ok(if n > 1 { CacheMask::Causal } else { CacheMask::None })
    }
    /// Whether `trim` can drop positions (a recurrent state cannot, a rotating
    /// cache not once it has wrapped).
    fn is_trimmable(&self) -> bool {
        true
    }
    /// Drops the last `n` positions; returns how many were dropped.
    fn trim(&mut self, n: i32) -> i32;
    /// The arrays that hold the cache (to evaluate it).
    fn state(&self) -> Vec<&Array>;
    /// Bytes held (of every array in `state`).
    fn nbytes(&self) -> usize {
        self.state().iter().map(|a| a.size() * a.dtype().size()).sum()
    }
    /// MLX-LM's class name for this kind (`KVCache`, ...), as files store it.
    fn class_name(&self) -> &'static str;
    /// MLX-LM's `state` of this kind, in its order, for files.
    fn file_state(&self) -> Result<Vec<StateItem>>;
    /// MLX-LM's `to_quantized` (`kvBits`): `None` for kinds that stay as they are.
    fn to_quantized(&self, _group_size: i32, _bits: i32) -> Option<Result<Box<dyn Cache>>> {
        None
    }
    /// Makes evaluating this cache's state evaluate `dep` first (a pipeline
    /// stage's send, which a prefill that evaluates only the caches must not
    /// skip: MLX-LM's `cache[-1].keys = mx.depends(keys, h)`).
    fn depend_on(&mut self, dep: &Array) -> Result<()>;
    /// This cache as a list of arrays (a convolution or recurrent layer's), if it is one.
    fn as_arrays(&mut self) -> Option<&mut ArraysCache> {
        None
    }
    /// This cache as a plain key/value cache, if it is one (a batched step
    /// appends to several at once: `KvCache::append_rows`).
    fn as_kv(&mut self) -> Option<&mut KvCache> {
        None
    }
}

/// `keys` made to depend on `dep` (for `Cache::depend_on`); nothing to do while empty.
fn keys_depend_on(keys: &mut Option<Array>, dep: &Array) -> Result<()> {
    if let Some(k) = keys.as_ref() {
        *keys = Some(mlx::distributed::depends(k, dep)?);
    }
    Ok(())
}

/// MLX-LM's trim of a cache that keeps its buffers: the last `n` positions
/// (at most all) are forgotten and overwritten by the next update.
fn trim_offset(offset: &mut i32, n: i32) -> i32 {
    let n = n.clamp(0, *offset);
    *offset -= n;
    n
}

/// One cache per layer of a model.
pub type LayerCaches = Vec<Box<dyn Cache>>;

/// How a prompt cache stores keys and values (MLX-LM's `max_kv_size`,
/// `kv_bits`, `kv_group_size`, `quantized_kv_start`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CacheOptions {
    /// A rotating cache of this many positions (4 kept at the start), as MLX-LM's.
    pub max_kv_size: Option<i32>,
    /// Quantize keys and values to this many bits once `quantized_kv_start`
    /// positions are held.
    pub kv_bits: Option<i32>,
    pub kv_group_size: i32,
    pub quantized_kv_start: i32,
}

/// MLX-LM's defaults (`generate_step`: group 64, start 5000).
impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions { max_kv_size: None, kv_bits: None, kv_group_size: 64, quantized_kv_start: 5000 }
    }
}

impl CacheOptions {
    /// Checks the values as MLX-LM would accept them (bits MLX can quantize to).
    pub fn validate(&self) -> std::result::Result<(), String> {
        if let Some(m) = self.max_kv_size {
            if m < 1 {
                return Err(format!("maxKvSize must be at least 1, got {m}"));
            }
        }
        if let Some(b) = self.kv_bits {
            if ![2, 3, 4, 5, 6, 8].contains(&b) {
                return Err(format!("kvBits must be one of 2, 3, 4, 5, 6, 8, got {b}"));
            }
            if self.max_kv_size.is_some() {
                return Err("kvBits and maxKvSize cannot be combined (MLX-LM cannot quantize a rotating cache)".into());
            }
        }
        if ![32, 64, 128].contains(&self.kv_group_size) {
            return Err(format!("kvGroupSize must be 32, 64 or 128, got {}", self.kv_group_size));
        }
        if self.quantized_kv_start < 0 {
            return Err(format!("quantizedKvStart must be at least 0, got {}", self.quantized_kv_start));
        }
        Ok(())
    }
}

/// `n` fresh caches of the kind `options` asks for (MLX-LM's `make_prompt_cache`).
pub fn make_caches(n: usize, options: &CacheOptions) -> LayerCaches {
    (0..n)
        .map(|_| match options.max_kv_size {
            Some(max) => Box::new(RotatingKvCache::new(max, 4)) as Box<dyn Cache>,
            None => Box::new(KvCache::default()) as Box<dyn Cache>,
        })
        .collect()
}

/// A layer's cache kind where the model fixes it (MLX-LM's `make_cache` on a
/// model): a growing cache, or a window of the last `n` positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    Growing,
    Window(i32),
    /// A layer's own arrays, this many (`ArraysCache`): a convolution's
    /// state (LFM2), or that and a recurrent state (Qwen3.5).
    Arrays(usize),
}

/// Fresh caches for a model: its own kinds when it fixes them (then, as in
/// MLX-LM's `make_prompt_cache`, `max_kv_size` does not apply), else
/// `make_caches` for its `n` layers.
pub fn make_model_caches(layout: Option<&[LayerKind]>, n: usize, options: &CacheOptions) -> LayerCaches {
    match layout {
        None => make_caches(n, options),
        Some(kinds) => kinds
            .iter()
            .map(|k| match *k {
                LayerKind::Growing => Box::new(KvCache::default()) as Box<dyn Cache>,
                LayerKind::Window(w) => Box::new(RotatingKvCache::new(w, 0)) as Box<dyn Cache>,
                LayerKind::Arrays(n) => Box::new(ArraysCache::new(n)) as Box<dyn Cache>,
            })
            .collect(),
    }
}

/// `n` fresh `KvCache`s.
pub fn kv_caches(n: usize) -> LayerCaches {
    make_caches(n, &CacheOptions::default())
}

/// MLX-LM's `maybe_quantize_kv_cache`: every layer that can be quantized and
/// holds at least `quantized_kv_start` positions becomes its quantized kind.
pub fn maybe_quantize(caches: &mut [Box<dyn Cache>], options: &CacheOptions) -> Result<()> {
    let Some(bits) = options.kv_bits else { return Ok(()) };
    for c in caches.iter_mut() {
        if c.offset() >= options.quantized_kv_start {
            if let Some(q) = c.to_quantized(options.kv_group_size, bits) {
                *c = q?;
            }
        }
    }
    Ok(())
}

/// Drops the last `n` positions from every layer (all or none: `None` when
/// some layer cannot trim, and then nothing changed).
pub fn trim_all(caches: &mut [Box<dyn Cache>], n: i32) -> Option<i32> {
    if !caches.iter().all(|c| c.is_trimmable()) {
        return None;
    }
    // Only the layers that hold positions: in a pipeline, the other processes' layers are empty here.
    Some(caches.iter_mut().filter(|c| c.offset() > 0).map(|c| c.trim(n)).min().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx::Dtype;

    /// `buffers` after each update: its first `len` positions are exactly what
    /// the update fetched (what the decode-attention kernel reads in place), for
    /// a growing cache past its 256-position step and a rotating one before
    /// and after it wraps (with kept positions, and after a multi-token update).
    #[test]
    fn buffers_hold_what_the_update_fetched() {
        let caches: [Box<dyn Cache>; 3] = [Box::new(KvCache::default()), Box::new(RotatingKvCache::new(6, 2)), Box::new(RotatingKvCache::new(5, 0))];
        for (i, mut cache) in caches.into_iter().enumerate() {
            let mut pos = 0.0;
            // A prompt of 3, single steps past the window, a prompt of 2, more steps; the
            // growing cache also crosses its step of 256.
            let steps: Vec<i32> = if i == 0 { [vec![3], vec![1; 260]].concat() } else { [vec![3], vec![1; 6], vec![2], vec![1; 4]].concat() };
            for (s, &n) in steps.iter().enumerate() {
                let kv =
                    |off: f64| Array::arange(pos + off, pos + off + (2 * n * 8) as f64, 1.0, Dtype::Float32).unwrap().reshape(&[1, 2, n, 8]).unwrap();
                let (k, v) = (kv(0.0), kv(0.5));
                pos += (2 * n * 8) as f64;
                let Fetched::Dense { keys, values } = cache.update_and_fetch(&k, &v).unwrap() else { panic!("dense") };
                let (bk, bv, len) = cache.buffers().expect("buffers after an update");
                let held = |b: &Array| b.slice_axis(2, 0, len).unwrap().to_vec::<f32>().unwrap();
                assert_eq!(held(bk), keys.to_vec::<f32>().unwrap(), "cache {i}, step {s}: keys");
                assert_eq!(held(bv), values.to_vec::<f32>().unwrap(), "cache {i}, step {s}: values");
            }
        }
        assert!(QuantizedKvCache::new(64, 4).buffers().is_none());
    }
}
