//! Per-layer caches behind one interface, so that models ask for their keys and
//! values without knowing which kind they got (MLX-LM's `_BaseCache`). Today's
//! kind is `KvCache`; rotating (sliding windows), quantized and recurrent-state
//! kinds, and the prompt-cache files, implement the same trait.
mod kv;

pub use kv::KvCache;

use mlx::{Array, Result};

/// What attention over `n` new queries needs from this cache (owned, so that
/// a kind with an explicit mask can hand it out).
pub enum CacheMask {
    /// One query: it sees every cached position.
    None,
    /// MLX's fused causal mode.
    Causal,
    /// An explicit boolean or additive mask.
    Array(Array),
}

pub trait Cache: Send {
    /// Appends `[B, heads, L, dim]` keys and values; returns what attention
    /// should see (everything cached so far, for `KvCache`).
    fn update_and_fetch(&mut self, keys: &Array, values: &Array) -> Result<(Array, Array)>;
    /// Positions fed so far: the RoPE offset of the next one.
    fn offset(&self) -> i32;
    /// The mask for `n` new queries (MLX-LM: none for one, causal otherwise).
    fn mask(&self, n: i32) -> CacheMask {
        if n > 1 {
            CacheMask::Causal
        } else {
            CacheMask::None
        }
    }
    /// Whether `trim` can drop positions (a recurrent state cannot).
    fn is_trimmable(&self) -> bool {
        true
    }
    /// Drops the last `n` positions; returns how many were dropped.
    fn trim(&mut self, n: i32) -> i32;
    /// The arrays that hold the cache (to evaluate it, or to save it).
    fn state(&self) -> Vec<&Array>;
    /// Bytes held.
    fn nbytes(&self) -> usize;
}

/// One cache per layer of a model.
pub type LayerCaches = Vec<Box<dyn Cache>>;

/// `n` fresh `KvCache`s.
pub fn kv_caches(n: usize) -> LayerCaches {
    (0..n).map(|_| Box::new(KvCache::default()) as Box<dyn Cache>).collect()
}

/// Drops the last `n` positions from every layer (all or none: `None` when
/// some layer cannot trim, and then nothing changed).
pub fn trim_all(caches: &mut [Box<dyn Cache>], n: i32) -> Option<i32> {
    if !caches.iter().all(|c| c.is_trimmable()) {
        return None;
    }
    Some(caches.iter_mut().map(|c| c.trim(n)).min().unwrap_or(0))
}
