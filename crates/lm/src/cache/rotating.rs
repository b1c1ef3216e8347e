//! A cache of at most `max_size` positions (`maxKvSize`), as MLX-LM's
//! `RotatingKVCache`: the first `keep` positions stay, the rest is a ring that
//! single-token steps overwrite in place; a multi-token update first puts the
//! ring back in temporal order and keeps `max_size - 1` positions before the
//! new ones, so every new query sees at least `max_size` keys.
use mlx::{Array, Result};

use super::kv::STEP;
use super::{causal_mask, Cache, CacheMask, Fetched, StateItem};

pub struct RotatingKvCache {
    keys: Option<Array>,
    values: Option<Array>,
    offset: i32,
    max_size: i32,
    keep: i32,
    /// Where the next single-token update writes.
    idx: i32,
}

impl RotatingKvCache {
    pub fn new(max_size: i32, keep: i32) -> RotatingKvCache {
        RotatingKvCache { keys: None, values: None, offset: 0, max_size, keep, idx: 0 }
    }

    /// A cache read from a file (`keys`, `values`, `offset`, `keep`, `max_size`, `_idx`).
    pub fn from_state(keys: Array, values: Array, offset: i32, keep: i32, max_size: i32, idx: i32) -> RotatingKvCache {
        RotatingKvCache { keys: Some(keys), values: Some(values), offset, max_size, keep, idx }
    }

    /// `v` without the `trim` positions after the kept ones, then `append`.
    fn cut(&self, trim: i32, v: &Array, append: Option<&Array>) -> Result<Array> {
        let mut parts = Vec::new();
        let (head, tail);
        if trim > 0 {
            head = v.slice_axis(2, 0, self.keep)?;
            tail = v.slice_axis(2, trim + self.keep, v.dim(2))?;
            parts.push(&head);
            parts.push(&tail);
        } else {
            parts.push(v);
        }
        if let Some(a) = append {
            parts.push(a);
        }
        Array::concatenate(&parts, 2)
    }

    /// The ring in temporal order, unused positions cut off.
    fn temporal(&self, v: &Array) -> Result<Array> {
        let len = v.dim(2);
        if self.idx == len {
            Ok(v.clone())
        } else if self.idx < self.offset {
            let kept = v.slice_axis(2, 0, self.keep)?;
            let older = v.slice_axis(2, self.idx, len)?;
            let newer = v.slice_axis(2, self.keep, self.idx)?;
            Array::concatenate(&[&kept, &older, &newer], 2)
        } else {
            v.slice_axis(2, 0, self.idx)
        }
    }

    fn update_concat(&mut self, keys: &Array, values: &Array) -> Result<(Array, Array)> {
        let (k, v) = match (self.keys.take(), self.values.take()) {
            (Some(k), Some(v)) => {
                let k = self.temporal(&k)?;
                let v = self.temporal(&v)?;
                self.idx = k.dim(2);
                let trim = self.idx - self.max_size + 1;
                (self.cut(trim, &k, Some(keys))?, self.cut(trim, &v, Some(values))?)
            }
            _ => (keys.clone(), values.clone()),
        };
        self.offset += keys.dim(2);
        self.idx = k.dim(2);
        self.keys = Some(k.clone());
        self.values = Some(v.clone());
        Ok((k, v))
    }

    fn update_in_place(&mut self, keys: &Array, values: &Array) -> Result<(Array, Array)> {
        let s = keys.dim(2);
        let prev = self.offset;
        let grow = match &self.keys {
            None => true,
            Some(k) => prev >= k.dim(2) && k.dim(2) < self.max_size,
        };
        if grow {
            let size = STEP.min(self.max_size - prev);
            let (ks, vs) = (keys.shape(), values.shape());
            let new_k = Array::zeros(&[ks[0], ks[1], size, ks[3]], keys.dtype())?;
            let new_v = Array::zeros(&[vs[0], vs[1], size, vs[3]], values.dtype())?;
            let (k, v) = match (self.keys.take(), self.values.take()) {
                (Some(k), Some(v)) => (Array::concatenate(&[&k, &new_k], 2)?, Array::concatenate(&[&v, &new_v], 2)?),
                _ => (new_k, new_v),
            };
            self.keys = Some(k);
            self.values = Some(v);
            self.idx = prev;
        }
        let (mut k, mut v) = (self.keys.take().expect("allocated above"), self.values.take().expect("allocated above"));
        let trim = k.dim(2) - self.max_size;
        if trim > 0 {
            k = self.cut(trim, &k, None)?;
            v = self.cut(trim, &v, None)?;
            self.idx = self.max_size;
        }
        if self.idx == self.max_size {
            self.idx = self.keep;
        }
        let put = |dst: &Array, src: &Array, idx: i32| {
            let d = dst.shape();
            dst.slice_update(src, &[0, 0, idx, 0], &[d[0], d[1], idx + s, d[3]], &[1, 1, 1, 1])
        };
        let k = put(&k, keys, self.idx)?;
        let v = put(&v, values, self.idx)?;
        self.offset += s;
        self.idx += s;
        let out = if self.offset < k.dim(2) { (k.slice_axis(2, 0, self.offset)?, v.slice_axis(2, 0, self.offset)?) } else { (k.clone(), v.clone()) };
        self.keys = Some(k);
        self.values = Some(v);
        Ok(out)
    }
}

impl Cache for RotatingKvCache {
    fn update_and_fetch(&mut self, keys: &Array, values: &Array) -> Result<Fetched> {
        let (keys, values) = if keys.dim(2) == 1 { self.update_in_place(keys, values)? } else { self.update_concat(keys, values)? };
        Ok(Fetched::Dense { keys, values })
    }

    fn offset(&self) -> i32 {
        self.offset
    }

    /// The ring as it lies, until it is full the positions `[..offset]`
    /// (what either update fetches; attention without a mask does not
    /// depend on the order of the keys).
    fn buffers(&self) -> Option<(&Array, &Array, i32)> {
        let (k, v) = (self.keys.as_ref()?, self.values.as_ref()?);
        Some((k, v, self.offset.min(k.dim(2))))
    }

    /// MLX-LM's `make_mask` without a model window: several queries that
    /// would see more than `max_size` keys get an explicit windowed mask.
    fn mask(&self, n: i32) -> Result<CacheMask> {
        if n <= 1 {
            return Ok(CacheMask::None);
        }
        let offset = (self.max_size - 1).min(self.offset);
        if offset + n > self.max_size {
            Ok(CacheMask::Array(causal_mask(n, offset, Some(self.max_size))?))
        } else {
            Ok(CacheMask::Causal)
        }
    }

    /// Only until the ring has wrapped.
    fn is_trimmable(&self) -> bool {
        self.offset < self.max_size
    }

    fn trim(&mut self, n: i32) -> i32 {
        let n = super::trim_offset(&mut self.offset, n);
        self.idx -= n;
        n
    }

    fn depend_on(&mut self, dep: &Array) -> Result<()> {
        super::keys_depend_on(&mut self.keys, dep)
    }

    fn state(&self) -> Vec<&Array> {
        self.keys.iter().chain(self.values.iter()).collect()
    }

    fn class_name(&self) -> &'static str {
        "RotatingKVCache"
    }

    /// `(keys, values, offset, keep, max_size, _idx)` with the whole buffers
    /// (the ring's layout is part of the state).
    fn file_state(&self) -> Result<Vec<StateItem>> {
        let (Some(k), Some(v)) = (&self.keys, &self.values) else {
            return Err(mlx::Error::new("an empty cache has no state to save"));
        };
        Ok(vec![
            StateItem::Array(k.clone()),
            StateItem::Array(v.clone()),
            StateItem::Int(self.offset as i64),
            StateItem::Int(self.keep as i64),
            StateItem::Int(self.max_size as i64),
            StateItem::Int(self.idx as i64),
        ])
    }
}
