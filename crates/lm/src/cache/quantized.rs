//! Keys and values stored quantized by rows (`kvBits`), as MLX-LM's
//! `QuantizedKVCache`: buffers grow in steps of 256 positions, each update is
//! quantized with `mlx.core.quantize`, and attention reads the packed arrays
//! through `quantized_matmul` (`models::attention`).
use mlx::quant::{quantize, Mode};
use mlx::{Array, Error, Result};

use super::kv::STEP;
use super::{Cache, Fetched, QuantizedArrays, StateItem};

pub struct QuantizedKvCache {
    keys: Option<QuantizedArrays>,
    values: Option<QuantizedArrays>,
    offset: i32,
    group_size: i32,
    bits: i32,
}

fn quantized(x: &Array, group_size: i32, bits: i32) -> Result<QuantizedArrays> {
    let (w, scales, biases) = quantize(x, group_size, bits, Mode::Affine)?;
    let biases = biases.ok_or_else(|| Error::new("affine quantization returned no biases"))?;
    Ok(QuantizedArrays { w, scales, biases })
}

fn map(q: &QuantizedArrays, f: impl Fn(&Array) -> Result<Array>) -> Result<QuantizedArrays> {
    Ok(QuantizedArrays { w: f(&q.w)?, scales: f(&q.scales)?, biases: f(&q.biases)? })
}

/// `q` with `steps` more zero positions on axis 2.
fn grown(q: &QuantizedArrays, steps: i32) -> Result<QuantizedArrays> {
    map(q, |a| {
        let s = a.shape();
        let zeros = Array::zeros(&[s[0], s[1], steps, s[3]], a.dtype())?;
        Array::concatenate(&[a, &zeros], 2)
    })
}

/// `dst` with `src` written at positions `[start, start + src's length)`.
fn written(dst: &QuantizedArrays, src: &QuantizedArrays, start: i32) -> Result<QuantizedArrays> {
    let put = |d: &Array, s: &Array| {
        let ds = d.shape();
        d.slice_update(s, &[0, 0, start, 0], &[ds[0], ds[1], start + s.dim(2), ds[3]], &[1, 1, 1, 1])
    };
    Ok(QuantizedArrays { w: put(&dst.w, &src.w)?, scales: put(&dst.scales, &src.scales)?, biases: put(&dst.biases, &src.biases)? })
}

impl QuantizedKvCache {
    pub fn new(group_size: i32, bits: i32) -> QuantizedKvCache {
        QuantizedKvCache { keys: None, values: None, offset: 0, group_size, bits }
    }

    /// MLX-LM's `KVCache.to_quantized`: the dense buffers (all of them, as it
    /// quantizes them) quantized, the offset kept.
    pub fn from_dense(keys: Option<&Array>, values: Option<&Array>, offset: i32, group_size: i32, bits: i32) -> Result<QuantizedKvCache> {
        let mut q = QuantizedKvCache::new(group_size, bits);
        q.offset = offset;
        if let (Some(k), Some(v)) = (keys, values) {
            q.keys = Some(quantized(k, group_size, bits)?);
            q.values = Some(quantized(v, group_size, bits)?);
        }
        Ok(q)
    }

    /// A cache read from a file.
    pub fn from_state(keys: QuantizedArrays, values: QuantizedArrays, offset: i32, group_size: i32, bits: i32) -> QuantizedKvCache {
        QuantizedKvCache { keys: Some(keys), values: Some(values), offset, group_size, bits }
    }

    fn capacity(&self) -> i32 {
        self.keys.as_ref().map_or(0, |k| k.w.dim(2))
    }

    fn held(&self, q: &QuantizedArrays) -> Result<QuantizedArrays> {
        if self.offset == q.w.dim(2) {
            Ok(q.clone())
        } else {
            map(q, |a| a.slice_axis(2, 0, self.offset))
        }
    }
}

impl Cache for QuantizedKvCache {
    fn update_and_fetch(&mut self, keys: &Array, values: &Array) -> Result<Fetched> {
        let prev = self.offset;
        let n = keys.dim(2);
        let new_k = quantized(keys, self.group_size, self.bits)?;
        let new_v = quantized(values, self.group_size, self.bits)?;
        if self.keys.is_none() || prev + n > self.capacity() {
            let steps = (STEP + n - 1) / STEP * STEP;
            match (self.keys.take(), self.values.take()) {
                (Some(mut k), Some(mut v)) => {
                    if prev % STEP != 0 {
                        k = map(&k, |a| a.slice_axis(2, 0, prev))?;
                        v = map(&v, |a| a.slice_axis(2, 0, prev))?;
                    }
                    self.keys = Some(grown(&k, steps)?);
                    self.values = Some(grown(&v, steps)?);
                }
                _ => {
                    // Zeros shaped as the quantized update, `steps` positions long.
                    let empty = |q: &QuantizedArrays| {
                        map(q, |a| {
                            let s = a.shape();
                            Array::zeros(&[s[0], s[1], steps, s[3]], a.dtype())
                        })
                    };
                    self.keys = Some(empty(&new_k)?);
                    self.values = Some(empty(&new_v)?);
                }
            }
        }
        self.offset += n;
        let k = written(self.keys.as_ref().expect("allocated above"), &new_k, prev)?;
        let v = written(self.values.as_ref().expect("allocated above"), &new_v, prev)?;
        let fetched = Fetched::Quantized { keys: self.held(&k)?, values: self.held(&v)?, group_size: self.group_size, bits: self.bits };
        self.keys = Some(k);
        self.values = Some(v);
        Ok(fetched)
    }

    fn offset(&self) -> i32 {
        self.offset
    }

    fn trim(&mut self, n: i32) -> i32 {
        super::trim_offset(&mut self.offset, n)
    }

    fn depend_on(&mut self, dep: &Array) -> Result<()> {
        if let Some(k) = self.keys.as_mut() {
            k.w = mlx::distributed::depends(&k.w, dep)?;
        }
        Ok(())
    }

    fn state(&self) -> Vec<&Array> {
        self.keys.iter().chain(self.values.iter()).flat_map(|q| [&q.w, &q.scales, &q.biases]).collect()
    }

    fn class_name(&self) -> &'static str {
        "QuantizedKVCache"
    }

    /// `(keys, values, offset, group_size, bits)`, keys and values each a
    /// `(packed, scales, biases)` tuple cut to the held positions.
    fn file_state(&self) -> Result<Vec<StateItem>> {
        let (Some(k), Some(v)) = (&self.keys, &self.values) else {
            return Err(mlx::Error::new("an empty cache has no state to save"));
        };
        let group = |q: QuantizedArrays| StateItem::Group(vec![q.w, q.scales, q.biases]);
        Ok(vec![
            group(self.held(k)?),
            group(self.held(v)?),
            StateItem::Int(self.offset as i64),
            StateItem::Int(self.group_size as i64),
            StateItem::Int(self.bits as i64),
        ])
    }
}
