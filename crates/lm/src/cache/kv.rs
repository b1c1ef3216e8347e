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

    /// Room for `n` more positions: the buffers grow by whole steps of 256,
    /// as MLX-LM's (new ones shaped as the keys `ks` and values `vs` given,
    /// with room on axis 2).
    fn make_room(&mut self, n: i32, (ks, kd): (&[i32], mlx::Dtype), (vs, vd): (&[i32], mlx::Dtype)) -> Result<()> {
        let capacity = self.keys.as_ref().map_or(0, |k| k.dim(2));
        if self.keys.is_none() || self.offset + n > capacity {
            let steps = (STEP + n - 1) / STEP;
            let new_k = Array::zeros(&[ks[0], ks[1], steps * STEP, ks[3]], kd)?;
            let new_v = Array::zeros(&[vs[0], vs[1], steps * STEP, vs[3]], vd)?;
            match (self.keys.take(), self.values.take()) {
                (Some(mut k), Some(mut v)) => {
                    if self.offset % STEP != 0 {
                        k = k.slice_axis(2, 0, self.offset)?;
                        v = v.slice_axis(2, 0, self.offset)?;
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
        Ok(())
    }

    /// One new position for each of several caches (a batched decode step's
    /// rows): row `i` of `keys`/`values` `[B, heads, 1, dim]` is appended to
    /// `caches[i]`, all rows by one graph node for the keys and one for the
    /// values (`Array::write_rows`) where a slice update per row took two
    /// nodes a row; the same values as `update_and_fetch` row by row. False,
    /// with nothing written, where it does not apply (another device, the
    /// decode-attention kernel switched off, a cache holding another dtype
    /// than the rows'): the caller updates row by row.
    pub fn append_rows(caches: &mut [&mut KvCache], keys: &Array, values: &Array) -> Result<bool> {
        // A held buffer must be one sequence's, laid out and typed as the rows.
        let fits = |held: &Option<Array>, rows: &Array| {
            held.as_ref()
                .is_none_or(|h| h.dtype() == rows.dtype() && h.ndim() == 4 && [h.dim(0), h.dim(1), h.dim(3)] == [1, rows.dim(1), rows.dim(3)])
        };
        // Switched with the decode-attention kernel (`MLX_NODE_DECODE_ATTENTION_KERNEL=0`, or all
        // kernels off): MLX's own ops, a slice update per row, as on other devices.
        if !mlx::cpu::kernel::Kernel::DecodeAttention.enabled()
            || keys.ndim() != 4
            || values.ndim() != 4
            || keys.dim(0) as usize != caches.len()
            || keys.dim(2) != 1
            || keys.dtype() != values.dtype()
            || caches.iter().any(|c| !fits(&c.keys, keys) || !fits(&c.values, values))
        {
            return Ok(false);
        }
        let (mut ks, mut vs) = (keys.shape(), values.shape());
        (ks[0], vs[0]) = (1, 1);
        for c in caches.iter_mut() {
            c.make_room(1, (&ks, keys.dtype()), (&vs, values.dtype()))?;
        }
        let positions: Vec<i32> = caches.iter().map(|c| c.offset).collect();
        let buffers =
            |pick: fn(&KvCache) -> &Option<Array>| -> Vec<&Array> { caches.iter().map(|c| pick(c).as_ref().expect("made room above")).collect() };
        let new_keys = keys.write_rows(&buffers(|c| &c.keys), &positions)?;
        let new_values = values.write_rows(&buffers(|c| &c.values), &positions)?;
        for ((c, k), v) in caches.iter_mut().zip(new_keys).zip(new_values) {
            (c.keys, c.values) = (Some(k), Some(v));
            c.offset += 1;
        }
        Ok(true)
    }

    /// What `update_and_fetch` returns after the last update: the held positions.
    pub fn fetched(&self) -> Result<Fetched> {
        let (keys, values) = self.held()?.ok_or_else(|| mlx::Error::new("an empty cache has nothing to fetch"))?;
        Ok(Fetched::Dense { keys, values })
    }

    /// The held positions, `[..offset]` (the buffers themselves when full: no slice node).
    fn held(&self) -> Result<Option<(Array, Array)>> {
        match (&self.keys, &self.values) {
            (Some(k), Some(v)) if self.offset < k.dim(2) => Ok(Some((k.slice_axis(2, 0, self.offset)?, v.slice_axis(2, 0, self.offset)?))),
            (Some(k), Some(v)) => Ok(Some((k.clone(), v.clone()))),
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
        self.make_room(keys.dim(2), (&keys.shape(), keys.dtype()), (&values.shape(), values.dtype()))?;
        self.offset += keys.dim(2);
        let (k, v) = (self.keys.as_ref().expect("allocated above"), self.values.as_ref().expect("allocated above"));
        let ks = k.shape();
        let vs = v.shape();
        let k = k.slice_update(keys, &[0, 0, prev, 0], &[ks[0], ks[1], self.offset, ks[3]], &[1, 1, 1, 1])?;
        let v = v.slice_update(values, &[0, 0, prev, 0], &[vs[0], vs[1], self.offset, vs[3]], &[1, 1, 1, 1])?;
        self.keys = Some(k);
        self.values = Some(v);
        self.fetched()
    }

    fn as_kv(&mut self) -> Option<&mut KvCache> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use mlx::Dtype;

    use super::*;

    /// Rows appended together (`append_rows`) hold what `update_and_fetch`
    /// holds row by row, bit for bit: caches of different lengths, one new
    /// and one starting at a step boundary, past a growth of 256 positions,
    /// in float32 and float16; a cache whose arrays are also held elsewhere
    /// (a snapshot) is copied, not written in place, so the snapshot keeps its
    /// values.
    #[test]
    fn rows_appended_together_hold_what_updates_row_by_row_hold() {
        if !mlx::cpu::kernel::Kernel::DecodeAttention.enabled() {
            // Switched off: declined, nothing written (the caller goes row by row).
            let mut c = KvCache::default();
            let rows = Array::zeros(&[1, 3, 1, 8], Dtype::Float32).unwrap();
            assert!(!KvCache::append_rows(&mut [&mut c], &rows, &rows).unwrap());
            assert_eq!(c.offset(), 0);
            return;
        }
        for dtype in [Dtype::Float32, Dtype::Float16] {
            let seq = |n: i32, at: f64| {
                Array::arange(at, at + (3 * n * 8) as f64, 1.0, Dtype::Float32).unwrap().reshape(&[1, 3, n, 8]).unwrap().astype(dtype).unwrap()
            };
            // Three sequences: a prompt of 5, a prompt of 256 (full buffer), none yet.
            let prompts = [5, 256, 0];
            let mut together: Vec<KvCache> = (0..3).map(|_| KvCache::default()).collect();
            let mut apart: Vec<KvCache> = (0..3).map(|_| KvCache::default()).collect();
            for (i, &n) in prompts.iter().enumerate() {
                if n > 0 {
                    for c in [&mut together[i], &mut apart[i]] {
                        c.update_and_fetch(&seq(n, 1000.0 * i as f64), &seq(n, 1000.0 * i as f64 + 0.5)).unwrap();
                    }
                }
            }
            let mut snapshot = None;
            for step in 0..260 {
                let (k, v) = (seq(1, 7.0 * step as f64), seq(1, 7.0 * step as f64 + 0.25));
                let (k, v) = (
                    Array::concatenate(
                        &[&k, &k.add_scalar(1.0).unwrap().astype(dtype).unwrap(), &k.add_scalar(2.0).unwrap().astype(dtype).unwrap()],
                        0,
                    )
                    .unwrap(),
                    Array::concatenate(&[&v, &v, &v], 0).unwrap(),
                );
                let mut refs: Vec<&mut KvCache> = together.iter_mut().collect();
                assert!(KvCache::append_rows(&mut refs, &k, &v).unwrap(), "{dtype:?}: append_rows declined");
                for (r, c) in apart.iter_mut().enumerate() {
                    let r = r as i32;
                    c.update_and_fetch(&k.slice_axis(0, r, r + 1).unwrap(), &v.slice_axis(0, r, r + 1).unwrap()).unwrap();
                }
                if step == 100 {
                    // Held elsewhere from here on: the next appends must leave it as it is.
                    let (keys, _, len) = together[0].buffers().unwrap();
                    keys.eval().unwrap();
                    // The whole buffer: the next appends write past `len`, into its room.
                    snapshot = Some((keys.clone(), keys.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap(), len));
                }
                for (i, (a, b)) in together.iter().zip(&apart).enumerate() {
                    assert_eq!(a.offset(), b.offset());
                    let (Fetched::Dense { keys: ka, values: va }, Fetched::Dense { keys: kb, values: vb }) =
                        (a.fetched().unwrap(), b.fetched().unwrap())
                    else {
                        panic!("dense")
                    };
                    let bits = |x: &Array| x.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap().iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&ka), bits(&kb), "{dtype:?}, step {step}, sequence {i}: keys");
                    assert_eq!(bits(&va), bits(&vb), "{dtype:?}, step {step}, sequence {i}: values");
                }
            }
            let (held, values, len) = snapshot.expect("taken at step 100");
            assert_eq!(held.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap(), values, "{dtype:?}: a held cache was written");
            assert!(together[0].offset() > len);
        }
    }

    /// Where the rows cannot be appended together (a cache of another dtype
    /// than the rows, rows of another count than the caches), nothing is
    /// written and the caller is told to go row by row.
    #[test]
    fn append_rows_declines_what_it_does_not_fit() {
        let kv = |dtype| Array::zeros(&[2, 3, 1, 8], dtype).unwrap();
        let mut held = KvCache::default();
        held.update_and_fetch(&kv(Dtype::Float32).slice_axis(0, 0, 1).unwrap(), &kv(Dtype::Float32).slice_axis(0, 0, 1).unwrap()).unwrap();
        let mut fresh = KvCache::default();
        let mut refs = vec![&mut held, &mut fresh];
        assert!(!KvCache::append_rows(&mut refs, &kv(Dtype::Float16), &kv(Dtype::Float16)).unwrap());
        let mut one = vec![&mut fresh];
        assert!(!KvCache::append_rows(&mut one, &kv(Dtype::Float32), &kv(Dtype::Float32)).unwrap());
        assert_eq!((held.offset(), fresh.offset()), (1, 0));
    }
}
