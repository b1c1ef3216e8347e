//! The state of a layer that is not attention, as MLX-LM's `ArraysCache(size)`
//! holds it: a fixed list of arrays the layer reads and replaces at every
//! call. LFM2's short convolution keeps one (its last `kernel - 1` inputs);
//! a Gated DeltaNet layer (Qwen3.5) two (those inputs, and the recurrent
//! state of every head). It keeps no keys or values, cannot be cut back (the
//! past is folded into the arrays, not kept as positions), and counts the
//! positions fed so that a prompt cache knows how many it holds (MLX-LM's
//! does not: a file's `ArraysCache` layers take the count of its attention
//! layers).
use mlx::{Array, Result};

use super::{Cache, Fetched, StateItem};

pub struct ArraysCache {
    arrays: Vec<Option<Array>>,
    offset: i32,
}

impl ArraysCache {
    /// An empty cache of `size` arrays.
    pub fn new(size: usize) -> ArraysCache {
        ArraysCache { arrays: vec![None; size], offset: 0 }
    }

    /// A cache holding `arrays` after `offset` positions (as a file gives it).
    pub fn from_state(arrays: Vec<Array>, offset: i32) -> ArraysCache {
        ArraysCache { arrays: arrays.into_iter().map(Some).collect(), offset }
    }

    /// Sets the positions held (a file's `ArraysCache` layers do not count
    /// them; its attention layers do).
    pub fn set_offset(&mut self, offset: i32) {
        self.offset = offset;
    }

    /// How many arrays it holds (set or not).
    pub fn size(&self) -> usize {
        self.arrays.len()
    }

    /// Array `i`; None before the layer first set it.
    pub fn get(&self, i: usize) -> Option<&Array> {
        self.arrays.get(i).and_then(Option::as_ref)
    }

    /// Replaces array `i` (an index past `size` is the layer's error).
    pub fn set(&mut self, i: usize, a: Array) -> Result<()> {
        let n = self.arrays.len();
        let slot = self.arrays.get_mut(i).ok_or_else(|| mlx::Error::new(format!("this layer's cache holds {n} arrays, not {}", i + 1)))?;
        *slot = Some(a);
        Ok(())
    }

    /// Counts `n` more positions fed (MLX-LM's `advance`).
    pub fn advance(&mut self, n: i32) {
        self.offset += n;
    }
}

impl Cache for ArraysCache {
    fn update_and_fetch(&mut self, _keys: &Array, _values: &Array) -> Result<Fetched> {
        Err(mlx::Error::new("this layer's cache holds no keys or values"))
    }

    fn offset(&self) -> i32 {
        self.offset
    }

    fn is_trimmable(&self) -> bool {
        false
    }

    fn trim(&mut self, _n: i32) -> i32 {
        0
    }

    fn state(&self) -> Vec<&Array> {
        self.arrays.iter().flatten().collect()
    }

    fn class_name(&self) -> &'static str {
        "ArraysCache"
    }

    /// MLX-LM's `ArraysCache` state: the list of arrays, then its left
    /// padding and lengths, None outside a batch.
    fn file_state(&self) -> Result<Vec<StateItem>> {
        let arrays = self.arrays.iter().cloned().collect::<Option<Vec<Array>>>();
        let arrays = arrays.ok_or_else(|| mlx::Error::new("an empty cache has no state to save"))?;
        Ok(vec![StateItem::Group(arrays), StateItem::None, StateItem::None])
    }

    fn depend_on(&mut self, dep: &Array) -> Result<()> {
        match self.arrays.first_mut() {
            Some(first) => super::keys_depend_on(first, dep),
            None => Ok(()),
        }
    }

    fn as_arrays(&mut self) -> Option<&mut ArraysCache> {
        Some(self)
    }
}
