//! MLX random numbers. A `None` key draws from the thread's global key
//! sequence, which `seed` resets, exactly as MLX (and so MLX-LM) does.
use std::os::raw::c_int;

use mlx_sys as sys;

use crate::array::{make, raw_or_null, Array};
use crate::dtype::Dtype;
use crate::error::{check, Result};

pub fn seed(seed: u64) -> Result<()> {
    // SAFETY: a plain value; the shim catches every C++ exception.
    check(unsafe { sys::mlxn_random_seed(seed) })
}

pub fn key(seed: u64) -> Result<Array> {
    // SAFETY: a plain value; `out` and errors as in `make`.
    make(|out| unsafe { sys::mlxn_random_key(seed, out) })
}

/// A key sequence with MLX's own semantics (`KeySequence`: seed -> key(seed);
/// next -> split, keep the first half, hand out the second), held by its owner
/// rather than in MLX's per-thread global, whose inline accessor cannot be
/// shared reliably across the library boundary.
#[derive(Clone)]
pub struct KeySequence {
    key: Array,
}

impl KeySequence {
    pub fn new(seed: u64) -> Result<KeySequence> {
        Ok(KeySequence { key: key(seed)? })
    }

    /// Seeded from the clock, as MLX's global sequence is when never seeded.
    pub fn from_time() -> Result<KeySequence> {
        let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        KeySequence::new(ms)
    }

    pub fn next(&mut self) -> Result<Array> {
        let both = split(&self.key, 2)?;
        self.key = both.slice_axis(0, 0, 1)?.squeeze(&[0])?;
        both.slice_axis(0, 1, 2)?.squeeze(&[0])
    }
}

pub fn split(key: &Array, num: i32) -> Result<Array> {
    // SAFETY: `key.raw` is a live handle owned by a borrowed Array; `out` and errors as in `make`.
    make(|out| unsafe { sys::mlxn_random_split(key.raw, num, out) })
}

pub fn uniform(lo: f64, hi: f64, shape: &[i32], dtype: Dtype, key: Option<&Array>) -> Result<Array> {
    let lo = Array::scalar(lo, dtype)?;
    let hi = Array::scalar(hi, dtype)?;
    // SAFETY: `lo.raw` and `hi.raw` are live; `shape` is passed with its length; the key is a live
    // handle or null (the global key sequence); `out` and errors as in `make`.
    make(|out| unsafe { sys::mlxn_random_uniform(lo.raw, hi.raw, shape.as_ptr(), shape.len(), dtype as c_int, raw_or_null(key), out) })
}

pub fn normal(shape: &[i32], dtype: Dtype, loc: f32, scale: f32, key: Option<&Array>) -> Result<Array> {
    // SAFETY: `shape` is passed with its length; the key is a live handle or null (the global key
    // sequence); `out` and errors as in `make`.
    make(|out| unsafe { sys::mlxn_random_normal(shape.as_ptr(), shape.len(), dtype as c_int, loc, scale, raw_or_null(key), out) })
}

pub fn gumbel(shape: &[i32], dtype: Dtype, key: Option<&Array>) -> Result<Array> {
    // SAFETY: `shape` is passed with its length; the key is a live handle or null (the global key
    // sequence); `out` and errors as in `make`.
    make(|out| unsafe { sys::mlxn_random_gumbel(shape.as_ptr(), shape.len(), dtype as c_int, raw_or_null(key), out) })
}

pub fn categorical(logits: &Array, axis: i32, key: Option<&Array>) -> Result<Array> {
    // SAFETY: `logits.raw` is live; the key is a live handle or null (the global key sequence); `out`
    // and errors as in `make`.
    make(|out| unsafe { sys::mlxn_random_categorical(logits.raw, axis, raw_or_null(key), out) })
}

pub fn bernoulli(p: &Array, key: Option<&Array>) -> Result<Array> {
    // SAFETY: `p.raw` is live; the key is a live handle or null (the global key sequence); `out` and
    // errors as in `make`.
    make(|out| unsafe { sys::mlxn_random_bernoulli(p.raw, raw_or_null(key), out) })
}
