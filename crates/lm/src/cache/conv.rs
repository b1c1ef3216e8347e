//! The state of a short convolution layer (LFM2's `ShortConv`), as MLX-LM's
//! `ArraysCache(size=1)` holds it: the last `kernel - 1` inputs of the
//! convolution, which the next positions convolve with. It keeps no keys or
//! values, cannot be cut back (a convolution's past is not a list of
//! positions), and counts the positions fed so that a prompt cache knows how
//! many it holds (MLX-LM's does not: a file's convolution layers take the
//! count of its attention layers).
use mlx::{Array, Result};

use super::{Cache, Fetched, StateItem};

#[derive(Default)]
pub struct ConvCache {
    state: Option<Array>,
    offset: i32,
}

impl ConvCache {
    /// A cache holding `state` after `offset` positions (as a file gives it).
    pub fn from_state(state: Array, offset: i32) -> ConvCache {
        ConvCache { state: Some(state), offset }
    }

    /// Sets the positions held (a file's convolution layers do not count
    /// them; its attention layers do).
    pub fn set_offset(&mut self, offset: i32) {
        self.offset = offset;
    }

    /// The held inputs `[B, kernel - 1, channels]`; None before the first position.
    pub fn state(&self) -> Option<&Array> {
        self.state.as_ref()
    }

    /// Keeps `state` after feeding `n` more positions.
    pub fn update(&mut self, state: Array, n: i32) {
        self.state = Some(state);
        self.offset += n;
    }
}

impl Cache for ConvCache {
    fn update_and_fetch(&mut self, _keys: &Array, _values: &Array) -> Result<Fetched> {
        Err(mlx::Error::new("a convolution layer's cache holds no keys or values"))
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
        self.state.iter().collect()
    }

    fn class_name(&self) -> &'static str {
        "ArraysCache"
    }

    /// MLX-LM's `ArraysCache` state: the list of arrays (here the one
    /// state), then its left padding and lengths, None outside a batch.
    fn file_state(&self) -> Result<Vec<StateItem>> {
        let s = self.state.clone().ok_or_else(|| mlx::Error::new("an empty cache has no state to save"))?;
        Ok(vec![StateItem::Group(vec![s]), StateItem::None, StateItem::None])
    }

    fn depend_on(&mut self, dep: &Array) -> Result<()> {
        super::keys_depend_on(&mut self.state, dep)
    }

    fn as_conv(&mut self) -> Option<&mut ConvCache> {
        Some(self)
    }
}
