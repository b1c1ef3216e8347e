//! Per-layer key/value cache that grows in steps of 256 positions, as MLX-LM's
//! `KVCache`: a slice update per token instead of a concatenate.
use mlx::{Array, Result};

use super::{Cache, Fetched, QuantizedKvCache, StateItem};

pub(super) const STEP: i32 = 256;

#[derive(Default)]
pub struct KvCache {
    keys: Option<Array>,
    values: Option<Array>,
    offset: i32,
}

impl KvCache {
    /// A cache holding `keys`/`values` `[B, heads, >= offset, dim]` (as a file gives them).
    pub fn from_state(keys: Array, values: Array, offset: i32) -> KvCache {
        KvCache { keys: Some(keys), values: Some(values), offset }
    }

    /// The held positions, `[..offset]`.
    fn held(&self) -> Result<Option<(Array, Array)>> {
        match (&self.keys, &self.values) {
            (Some(k), Some(v)) => Ok(Some((k.slice_axis(2, 0, self.offset)?, v.slice_axis(2, 0, self.offset)?))),
            _ => Ok(None),
        }
    }
}

impl Cache for KvCache {
    fn offset(&self) -> i32 {
        self.offset
    }

    /// The positions `[..offset]` of the buffers.
    fn buffers(&self) -> Option<(&Array, &Array, i32)> {
        let (k, v) = (self.keys.as_ref()?, self.values.as_ref()?);
        Some((k, v, self.offset.min(k.dim(2))))
    }

    /// As MLX-LM's `KVCache.trim`: the positions stay allocated and are
    /// overwritten by the next update.
    fn trim(&mut self, n: i32) -> i32 {
        super::trim_offset(&mut self.offset, n)
    }

    fn depend_on(&mut self, dep: &Array) -> Result<()> {
        super::keys_depend_on(&mut self.keys, dep)
    }

    /// The allocated buffers (positions past `offset` included, as evaluating
    /// them is what materialises the cache).
    fn state(&self) -> Vec<&Array> {
        self.keys.iter().chain(self.values.iter()).collect()
    }

    fn class_name(&self) -> &'static str {
        "KVCache"
    }

    /// `(keys, values, offset)` as MLX-LM's state, the keys and values cut to
    /// the held positions (MLX-LM saves its whole buffer; it reads either).
    fn file_state(&self) -> Result<Vec<StateItem>> {
        let (k, v) = self.held()?.ok_or_else(|| mlx::Error::new("an empty cache has no state to save"))?;
        Ok(vec![StateItem::Array(k), StateItem::Array(v), StateItem::Int(self.offset as i64)])
    }

    /// MLX-LM's `KVCache.to_quantized`: the whole buffer, quantized by rows.
    fn to_quantized(&self, group_size: i32, bits: i32) -> Option<Result<Box<dyn Cache>>> {
        Some(
            QuantizedKvCache::from_dense(self.keys.as_ref(), self.values.as_ref(), self.offset, group_size, bits)
                .map(|q| Box::new(q) as Box<dyn Cache>),
        )
    }

    /// Appends `[B, heads, L, dim]` keys and values; returns everything cached so far.
    fn update_and_fetch(&mut self, keys: &Array, values: &Array) -> Result<Fetched> {
        let prev = self.offset;
        let n = keys.dim(2);
        let capacity = self.keys.as_ref().map_or(0, |k| k.dim(2));
        if self.keys.is_none() || prev + n > capacity {
            let ks = keys.shape();
            let vs = values.shape();
            let steps = (STEP + n - 1) / STEP;
            let new_k = Array::zeros(&[ks[0], ks[1], steps * STEP, ks[3]], keys.dtype())?;
            let new_v = Array::zeros(&[vs[0], vs[1], steps * STEP, vs[3]], values.dtype())?;
            match (self.keys.take(), self.values.take()) {
                (Some(mut k), Some(mut v)) => {
                    if prev % STEP != 0 {
                        k = k.slice_axis(2, 0, prev)?;
                        v = v.slice_axis(2, 0, prev)?;
                    }
                    self.keys = Some(Array::concatenate(&[&k, &new_k], 2)?);
                    self.values = Some(Array::concatenate(&[&v, &new_v], 2)?);
                }
                _ => {
                    self.keys = Some(new_k);
                    self.values = Some(new_v);
                }
            }
        }
        self.offset += n;
        let (k, v) = (self.keys.as_ref().expect("allocated above"), self.values.as_ref().expect("allocated above"));
        let ks = k.shape();
        let vs = v.shape();
        let k = k.slice_update(keys, &[0, 0, prev, 0], &[ks[0], ks[1], self.offset, ks[3]], &[1, 1, 1, 1])?;
        let v = v.slice_update(values, &[0, 0, prev, 0], &[vs[0], vs[1], self.offset, vs[3]], &[1, 1, 1, 1])?;
        let (keys, values) =
            if self.offset < k.dim(2) { (k.slice_axis(2, 0, self.offset)?, v.slice_axis(2, 0, self.offset)?) } else { (k.clone(), v.clone()) };
        self.keys = Some(k);
        self.values = Some(v);
        Ok(Fetched::Dense { keys, values })
    }
}
