use std::os::raw::c_int;
use std::ptr;

use mlx_sys as sys;

use crate::dtype::{Dtype, Element};
use crate::error::{check, Error, Result};

/// An MLX array. Owns one shim handle and frees it on drop; cloning is cheap
/// (MLX arrays share their graph node and data).
pub struct Array {
    pub(crate) raw: sys::mlxn_array,
}

// MLX arrays are reference counted graph nodes; a handle may move between
// threads. All evaluation of a model happens on its engine thread.
// SAFETY: the handle is a heap-allocated `mx::array` (a reference-counted pointer to its node) with no
// thread affinity, so moving it, or freeing it in another thread, is fine. `Array` is not `Sync`; but
// clones share one graph node, so that no two threads work on one graph at once rests on the convention
// above, not on the type.
unsafe impl Send for Array {}

impl Drop for Array {
    fn drop(&mut self) {
        // SAFETY: raw is a live handle this value owns.
        unsafe { sys::mlxn_free(self.raw) }
    }
}

impl Clone for Array {
    fn clone(&self) -> Self {
        let mut out = ptr::null_mut();
        // mlxn_clone only allocates a handle; it fails only on allocation failure.
        // SAFETY: `self.raw` is a live handle owned by `self` (freed only in Drop); `out` is a local
        // that the shim writes only on success.
        check(unsafe { sys::mlxn_clone(self.raw, &mut out) }).expect("cloning an MLX array handle");
        Array { raw: out }
    }
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Array({:?}, {})", self.shape(), self.dtype().name())
    }
}

/// Calls a shim function that writes one array handle.
///
/// The contract the `unsafe` shim calls in this crate rely on (their SAFETY
/// comments say "`out` and errors as in `make`"): every shim entry point runs
/// its body in `guard`, which catches every C++ exception and returns non-zero
/// with the message kept for this thread, so nothing unwinds into Rust; it
/// writes `*out` only on success, with a new handle that the returned `Array`
/// then owns (freed only in its Drop); and it reads the handles and the
/// (pointer, length) pairs it is given only during the call, copying what it
/// keeps. Handles passed in are live: each belongs to an `Array` the caller
/// holds or borrows across the call, or is null where the shim reads null as
/// "none" (`raw_or_null`).
pub(crate) fn make(f: impl FnOnce(*mut sys::mlxn_array) -> c_int) -> Result<Array> {
    let mut out = ptr::null_mut();
    check(f(&mut out))?;
    if out.is_null() {
        return Err(Error::new("MLX returned a null array"));
    }
    Ok(Array { raw: out })
}

pub(crate) fn raw_or_null(a: Option<&Array>) -> sys::mlxn_array {
    a.map_or(ptr::null_mut(), |a| a.raw)
}

impl Array {
    pub fn from_slice<T: Element>(data: &[T], shape: &[i32]) -> Result<Array> {
        let n: i64 = shape.iter().map(|&d| d as i64).product();
        if n < 0 || n as usize != data.len() {
            return Err(Error::new(format!("{} elements do not fill shape {:?}", data.len(), shape)));
        }
        // SAFETY: `data` and `shape` are borrowed for the call, each pointer passed with its length;
        // the check above makes `data` hold exactly the shape's element count, and the shim copies that
        // many `T::DTYPE.size()`-byte elements (each `Element` type has that size) into its own buffer,
        // keeping no pointer; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_from_data(data.as_ptr().cast(), shape.as_ptr(), shape.len(), T::DTYPE as c_int, out) })
    }

    /// Builds an array of any dtype (f16 and bf16 included) from its raw little-endian bytes.
    pub fn from_bytes(bytes: &[u8], shape: &[i32], dtype: Dtype) -> Result<Array> {
        let n: i64 = shape.iter().map(|&d| d as i64).product();
        if n < 0 || n as usize * dtype.size() != bytes.len() {
            return Err(Error::new(format!("{} bytes do not fill shape {:?} of {}", bytes.len(), shape, dtype.name())));
        }
        // SAFETY: `bytes` and `shape` are borrowed for the call, each pointer passed with its length;
        // the check above makes `bytes.len()` the shape's element count times `dtype.size()`, exactly
        // what the shim copies into its own buffer; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_from_data(bytes.as_ptr().cast(), shape.as_ptr(), shape.len(), dtype as c_int, out) })
    }

    /// A 0-d array holding `v` converted to `dtype`.
    pub fn scalar(v: f64, dtype: Dtype) -> Result<Array> {
        // SAFETY: plain values only; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_from_f64(v, dtype as c_int, out) })
    }

    pub fn full(shape: &[i32], v: f64, dtype: Dtype) -> Result<Array> {
        let s = Array::scalar(v, dtype)?;
        // SAFETY: `shape` outlives the call and its length is passed with it; `s.raw` is a live handle
        // owned by `s`; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_full(shape.as_ptr(), shape.len(), s.raw, dtype as c_int, out) })
    }

    pub fn zeros(shape: &[i32], dtype: Dtype) -> Result<Array> {
        Array::full(shape, 0.0, dtype)
    }

    pub fn ones(shape: &[i32], dtype: Dtype) -> Result<Array> {
        Array::full(shape, 1.0, dtype)
    }

    pub fn arange(start: f64, stop: f64, step: f64, dtype: Dtype) -> Result<Array> {
        // SAFETY: plain values only; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_arange(start, stop, step, dtype as c_int, out) })
    }

    pub fn ndim(&self) -> usize {
        let mut n = 0usize;
        // Reading properties of a live handle cannot fail.
        // SAFETY: `self.raw` is a live handle owned by `self`; `n` is a local usize the shim writes
        // (only on success).
        unsafe { sys::mlxn_ndim(self.raw, &mut n) };
        n
    }

    pub fn shape(&self) -> Vec<i32> {
        let mut s = vec![0i32; self.ndim()];
        // SAFETY: `self.raw` is live; `s` has room for `s.len()` entries, passed as the capacity, and
        // the shim fails without writing when the shape has more.
        unsafe { sys::mlxn_shape(self.raw, s.as_mut_ptr(), s.len()) };
        s
    }

    /// Size of one axis; negative axes count from the end.
    pub fn dim(&self, axis: i32) -> i32 {
        let s = self.shape();
        let i = if axis < 0 { s.len() as i32 + axis } else { axis };
        s[i as usize]
    }

    pub fn size(&self) -> usize {
        let mut n = 0usize;
        // SAFETY: `self.raw` is live; `n` is a local usize the shim writes (only on success).
        unsafe { sys::mlxn_size(self.raw, &mut n) };
        n
    }

    pub fn dtype(&self) -> Dtype {
        let mut c: c_int = 0;
        // SAFETY: `self.raw` is live; `c` is a local c_int the shim writes (only on success).
        unsafe { sys::mlxn_dtype(self.raw, &mut c) };
        Dtype::from_code(c).unwrap_or(Dtype::Float32)
    }

    /// Evaluates the array and copies it out as `T` (converting dtype if needed).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        let mut v = vec![T::default(); self.size()];
        // SAFETY: `self.raw` is live; `v` holds `size()` elements of `T`, i.e. `v.len() *
        // T::DTYPE.size()` bytes (each `Element` type has its dtype's size), the length passed; the
        // shim fails without writing unless the array has exactly that many bytes in `T::DTYPE`, and
        // MLX writes only valid values of it (bool as 0 or 1).
        check(unsafe { sys::mlxn_read(self.raw, T::DTYPE as c_int, v.as_mut_ptr().cast(), v.len() * T::DTYPE.size()) })?;
        Ok(v)
    }

    /// Evaluates the array and copies its raw bytes out in `dtype`.
    pub fn to_bytes(&self, dtype: Dtype) -> Result<Vec<u8>> {
        let mut v = vec![0u8; self.size() * dtype.size()];
        // SAFETY: `self.raw` is live; `v` has `v.len()` bytes, the length passed, and the shim writes
        // exactly that many or fails without writing; any byte is a valid u8.
        check(unsafe { sys::mlxn_read(self.raw, dtype as c_int, v.as_mut_ptr().cast(), v.len()) })?;
        Ok(v)
    }

    /// The single element of a one-element array.
    pub fn item<T: Element>(&self) -> Result<T> {
        if self.size() != 1 {
            return Err(Error::new(format!("item() on an array of shape {:?}", self.shape())));
        }
        Ok(self.to_vec::<T>()?[0])
    }

    pub fn eval(&self) -> Result<()> {
        crate::transforms::eval(&[self])
    }
}
