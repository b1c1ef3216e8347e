//! Array operations. Each returns a lazy array; MLX errors (bad shapes, bad
//! axes) come back as `Err` with MLX's message.
use std::os::raw::c_int;

use mlx_sys as sys;

use crate::array::{make, raw_or_null, Array};
use crate::dtype::Dtype;
use crate::error::{check, Error, Result};

// Each op's number comes from shim.h's lists (`sys::op`), by its MLX name.
macro_rules! unary {
    ($($name:ident),* $(,)?) => {
        impl Array {
            $(pub fn $name(&self) -> Result<Array> {
                // SAFETY: `self.raw` is a live handle owned by `self`; `out` and errors as in `make`.
                make(|out| unsafe { sys::mlxn_unary(sys::op::unary::$name, self.raw, out) })
            })*
        }
    };
}

unary!(
    negative,
    exp,
    log,
    sqrt,
    rsqrt,
    abs,
    sin,
    cos,
    tanh,
    sigmoid,
    square,
    erf,
    floor,
    ceil,
    logical_not,
    reciprocal,
    log1p,
    sign,
    stop_gradient,
    copy,
    isnan,
    round,
    expm1,
    isinf,
    log10,
);

macro_rules! binary {
    ($($name:ident, $scalar:ident),* $(,)?) => {
        impl Array {
            $(pub fn $name(&self, other: &Array) -> Result<Array> {
                // SAFETY: both handles are live (owned by borrowed Arrays); `out` and errors as in
                // `make`.
                make(|out| unsafe { sys::mlxn_binary(sys::op::binary::$name, self.raw, other.raw, out) })
            }
            /// With a scalar that takes this array's dtype, as a Python scalar does in MLX.
            pub fn $scalar(&self, v: f64) -> Result<Array> {
                self.$name(&self.scalar_like(v)?)
            })*
        }
    };
}

binary!(
    add,
    add_scalar,
    subtract,
    subtract_scalar,
    multiply,
    multiply_scalar,
    divide,
    divide_scalar,
    maximum,
    maximum_scalar,
    minimum,
    minimum_scalar,
    power,
    power_scalar,
    equal,
    equal_scalar,
    not_equal,
    not_equal_scalar,
    less,
    less_scalar,
    less_equal,
    less_equal_scalar,
    greater,
    greater_scalar,
    greater_equal,
    greater_equal_scalar,
    logical_and,
    logical_and_scalar,
    logical_or,
    logical_or_scalar,
    remainder,
    remainder_scalar,
    floor_divide,
    floor_divide_scalar,
    arctan2,
    arctan2_scalar,
    logaddexp,
    logaddexp_scalar,
);

macro_rules! reductions {
    ($($name:ident),* $(,)?) => {
        impl Array {
            $(pub fn $name(&self, axes: &[i32], keepdims: bool) -> Result<Array> {
                self.reduce(sys::op::reduce::$name, axes, keepdims)
            })*
        }
    };
}

reductions!(sum, max, min, mean, prod, logsumexp, all, any);

macro_rules! scans {
    ($($name:ident),* $(,)?) => {
        impl Array {
            $(pub fn $name(&self, axis: i32, reverse: bool, inclusive: bool) -> Result<Array> {
                // SAFETY: `self.raw` is a live handle owned by `self`; `out` and errors as in `make`.
                make(|out| unsafe { sys::mlxn_scan(sys::op::scan::$name, self.raw, axis, reverse as c_int, inclusive as c_int, out) })
            })*
        }
    };
}

scans!(cumsum, cumprod, cummax, cummin, logcumsumexp);

impl Array {
    /// A scalar in this array's dtype (float arrays), like MLX's weak Python scalars;
    /// integer and bool arrays take an f32 scalar when `v` is fractional.
    pub fn scalar_like(&self, v: f64) -> Result<Array> {
        let dt = self.dtype();
        let dt = if dt.is_float() || v.fract() == 0.0 { dt } else { Dtype::Float32 };
        Array::scalar(v, dt)
    }

    pub fn where_(cond: &Array, a: &Array, b: &Array) -> Result<Array> {
        // SAFETY: the three handles are live (owned by borrowed Arrays); `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_where(cond.raw, a.raw, b.raw, out) })
    }

    pub fn astype(&self, dtype: Dtype) -> Result<Array> {
        if self.dtype() == dtype {
            return Ok(self.clone());
        }
        // SAFETY: `self.raw` is a live handle owned by `self`; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_astype(self.raw, dtype as c_int, out) })
    }

    /// The same bytes read as `dtype` (MLX's `view`): no conversion, and no
    /// copy when the sizes match and the array is contiguous.
    pub fn view(&self, dtype: Dtype) -> Result<Array> {
        // SAFETY: `self.raw` is a live handle owned by `self`; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_view(self.raw, dtype as c_int, out) })
    }

    pub fn matmul(&self, other: &Array) -> Result<Array> {
        // SAFETY: both handles are live (owned by borrowed Arrays); `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_matmul(self.raw, other.raw, out) })
    }

    /// `beta * self + alpha * (a @ b)`.
    pub fn addmm(&self, a: &Array, b: &Array, alpha: f32, beta: f32) -> Result<Array> {
        // SAFETY: the three handles are live (owned by borrowed Arrays); `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_addmm(self.raw, a.raw, b.raw, alpha, beta, out) })
    }

    pub fn clip(&self, lo: Option<&Array>, hi: Option<&Array>) -> Result<Array> {
        // SAFETY: `self.raw` is live; `raw_or_null` gives a live handle or null, which the shim reads
        // as no bound; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_clip(self.raw, raw_or_null(lo), raw_or_null(hi), out) })
    }

    /// An empty `axes` reduces over every axis, as MLX's Python `a.sum()` does.
    fn reduce(&self, op: c_int, axes: &[i32], keepdims: bool) -> Result<Array> {
        let all: Vec<i32>;
        let axes = if axes.is_empty() {
            all = (0..self.ndim() as i32).collect();
            &all[..]
        } else {
            axes
        };
        // SAFETY: `self.raw` is live; `axes` is passed with its length; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_reduce(op, self.raw, axes.as_ptr(), axes.len(), keepdims as c_int, out) })
    }

    pub fn argmax(&self, axis: i32, keepdims: bool) -> Result<Array> {
        // SAFETY: `self.raw` is a live handle owned by `self`; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_arg_reduce(sys::op::arg_reduce::argmax, self.raw, axis, keepdims as c_int, out) })
    }
    pub fn argmin(&self, axis: i32, keepdims: bool) -> Result<Array> {
        // SAFETY: `self.raw` is a live handle owned by `self`; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_arg_reduce(sys::op::arg_reduce::argmin, self.raw, axis, keepdims as c_int, out) })
    }

    /// MLX's `var`: the mean squared deviation over `axes`, divided by `n - ddof`.
    pub fn var(&self, axes: &[i32], keepdims: bool, ddof: i32) -> Result<Array> {
        // SAFETY: `self.raw` is live; `axes` is passed with its length; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_var(self.raw, axes.as_ptr(), axes.len(), keepdims as c_int, ddof, out) })
    }

    pub fn softmax(&self, axes: &[i32], precise: bool) -> Result<Array> {
        // SAFETY: `self.raw` is live; `axes` is passed with its length; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_softmax(self.raw, axes.as_ptr(), axes.len(), precise as c_int, out) })
    }

    pub fn reshape(&self, shape: &[i32]) -> Result<Array> {
        // SAFETY: `self.raw` is live; `shape` is passed with its length; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_reshape(self.raw, shape.as_ptr(), shape.len(), out) })
    }

    pub fn transpose(&self, axes: &[i32]) -> Result<Array> {
        // SAFETY: `self.raw` is live; `axes` is passed with its length; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_transpose(self.raw, axes.as_ptr(), axes.len(), out) })
    }

    /// Reverses all axes (`a.T`).
    pub fn t(&self) -> Result<Array> {
        let axes: Vec<i32> = (0..self.ndim() as i32).rev().collect();
        self.transpose(&axes)
    }

    pub fn swapaxes(&self, a: i32, b: i32) -> Result<Array> {
        let n = self.ndim() as i32;
        let norm = |x: i32| if x < 0 { x + n } else { x };
        let (a, b) = (norm(a), norm(b));
        if a < 0 || a >= n || b < 0 || b >= n {
            return Err(Error::new(format!("swapaxes({a}, {b}) on an array with {n} dimensions")));
        }
        let mut axes: Vec<i32> = (0..n).collect();
        axes.swap(a as usize, b as usize);
        self.transpose(&axes)
    }

    pub fn broadcast_to(&self, shape: &[i32]) -> Result<Array> {
        // SAFETY: `self.raw` is live; `shape` is passed with its length; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_broadcast_to(self.raw, shape.as_ptr(), shape.len(), out) })
    }

    pub fn expand_dims(&self, axes: &[i32]) -> Result<Array> {
        // SAFETY: `self.raw` is live; `axes` is passed with its length; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_expand_dims(self.raw, axes.as_ptr(), axes.len(), out) })
    }

    /// Removes the given size-1 axes, or all of them when `axes` is empty.
    pub fn squeeze(&self, axes: &[i32]) -> Result<Array> {
        // SAFETY: `self.raw` is live; `axes` is passed with its length; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_squeeze(self.raw, axes.as_ptr(), axes.len(), out) })
    }

    pub fn flatten(&self) -> Result<Array> {
        self.reshape(&[-1])
    }

    pub fn concatenate(arrays: &[&Array], axis: i32) -> Result<Array> {
        let raws: Vec<_> = arrays.iter().map(|a| a.raw).collect();
        // SAFETY: `raws` holds live handles borrowed from `arrays` and outlives the call, its length
        // passed with it (the shim copies the arrays, keeping no pointer); `out` and errors as in
        // `make`.
        make(|out| unsafe { sys::mlxn_concatenate(raws.as_ptr(), raws.len(), axis, out) })
    }

    pub fn stack(arrays: &[&Array], axis: i32) -> Result<Array> {
        let raws: Vec<_> = arrays.iter().map(|a| a.raw).collect();
        // SAFETY: `raws` holds live handles borrowed from `arrays` and outlives the call, its length
        // passed with it (the shim copies the arrays, keeping no pointer); `out` and errors as in
        // `make`.
        make(|out| unsafe { sys::mlxn_stack(raws.as_ptr(), raws.len(), axis, out) })
    }

    /// Splits at the given indices along `axis` (`indices.len() + 1` parts).
    pub fn split_at(&self, indices: &[i32], axis: i32) -> Result<Vec<Array>> {
        let cap = indices.len() + 1;
        let mut outs = vec![std::ptr::null_mut(); cap];
        let mut n = 0usize;
        // SAFETY: `self.raw` is live; `indices` is passed with its length; `outs` has `cap` slots and
        // the shim fails before writing any when there would be more parts, else writes `n <= cap` new
        // handles, each owned by the Array made from it below.
        check(unsafe { sys::mlxn_split(self.raw, indices.as_ptr(), indices.len(), axis, outs.as_mut_ptr(), cap, &mut n) })?;
        Ok(outs.into_iter().take(n).map(|raw| Array { raw }).collect())
    }

    /// Row `i` of `self` (`[n, heads, 1, dim]`) written into `caches[i]`
    /// (`[1, heads, capacity, dim]`, `self`'s dtype, 16 or 32 bits) at
    /// `positions[i]`: the updated caches, made by one graph node (a slice
    /// update per row is two nodes a row), each reusing its cache's buffer
    /// where nothing else holds it. CPU only.
    pub fn write_rows(&self, caches: &[&Array], positions: &[i32]) -> Result<Vec<Array>> {
        if caches.len() != positions.len() {
            return Err(Error::new("write_rows: one position per cache"));
        }
        let raws: Vec<_> = caches.iter().map(|a| a.raw).collect();
        let mut outs = vec![std::ptr::null_mut(); caches.len()];
        // SAFETY: `self.raw` and the handles in `raws` are live; `raws`, `positions` and `outs` have
        // the length passed; the shim fails before writing any handle, or writes one new handle per
        // slot, each owned by the Array made from it below.
        check(unsafe { sys::mlxn_write_rows(self.raw, raws.as_ptr(), positions.as_ptr(), caches.len(), outs.as_mut_ptr()) })?;
        Ok(outs.into_iter().map(|raw| Array { raw }).collect())
    }

    /// Splits into `parts` equal pieces along `axis`.
    pub fn split_equal(&self, parts: i32, axis: i32) -> Result<Vec<Array>> {
        let size = self.dim(axis);
        if parts <= 0 || size % parts != 0 {
            return Err(Error::new(format!("cannot split axis of size {size} into {parts} equal parts")));
        }
        let step = size / parts;
        let idx: Vec<i32> = (1..parts).map(|i| i * step).collect();
        self.split_at(&idx, axis)
    }

    pub fn slice(&self, start: &[i32], stop: &[i32], strides: &[i32]) -> Result<Array> {
        if start.len() != stop.len() || start.len() != strides.len() {
            return Err(Error::new("slice: start, stop and strides differ in length"));
        }
        // SAFETY: `self.raw` is live; `start`, `stop` and `strides` all have `start.len()` elements
        // (checked above), the length passed; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_slice(self.raw, start.as_ptr(), stop.as_ptr(), strides.as_ptr(), start.len(), out) })
    }

    /// `a[..., start:stop]` along one axis, stride 1.
    pub fn slice_axis(&self, axis: i32, start: i32, stop: i32) -> Result<Array> {
        let shape = self.shape();
        let n = shape.len() as i32;
        let ax = if axis < 0 { axis + n } else { axis };
        if ax < 0 || ax >= n {
            return Err(Error::new(format!("slice_axis: axis {axis} out of range for {n} dimensions")));
        }
        let mut lo = vec![0; shape.len()];
        let mut hi = shape.clone();
        lo[ax as usize] = start;
        hi[ax as usize] = stop;
        self.slice(&lo, &hi, &vec![1; shape.len()])
    }

    pub fn slice_update(&self, update: &Array, start: &[i32], stop: &[i32], strides: &[i32]) -> Result<Array> {
        if start.len() != stop.len() || start.len() != strides.len() {
            return Err(Error::new("slice_update: start, stop and strides differ in length"));
        }
        // SAFETY: both handles are live; `start`, `stop` and `strides` all have `start.len()` elements
        // (checked above), the length passed; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_slice_update(self.raw, update.raw, start.as_ptr(), stop.as_ptr(), strides.as_ptr(), start.len(), out) })
    }

    pub fn pad(&self, axes: &[i32], lo: &[i32], hi: &[i32], value: f64) -> Result<Array> {
        if axes.len() != lo.len() || axes.len() != hi.len() {
            return Err(Error::new("pad: axes, low and high widths differ in length"));
        }
        let v = self.scalar_like(value)?;
        // SAFETY: `self.raw` and `v.raw` are live; `axes`, `lo` and `hi` all have `axes.len()` elements
        // (checked above), the length passed; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_pad(self.raw, axes.as_ptr(), lo.as_ptr(), hi.as_ptr(), axes.len(), v.raw, out) })
    }

    pub fn repeat(&self, repeats: i32, axis: i32) -> Result<Array> {
        // SAFETY: `self.raw` is a live handle owned by `self`; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_repeat(self.raw, repeats, axis, out) })
    }

    pub fn tril(&self, k: i32) -> Result<Array> {
        // SAFETY: `self.raw` is a live handle owned by `self`; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_tri(0, self.raw, k, out) })
    }

    pub fn triu(&self, k: i32) -> Result<Array> {
        // SAFETY: `self.raw` is a live handle owned by `self`; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_tri(1, self.raw, k, out) })
    }

    pub fn contiguous(&self) -> Result<Array> {
        // SAFETY: `self.raw` is a live handle owned by `self`; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_contiguous(self.raw, out) })
    }

    /// Gathers along `axis` (or from the flattened array when `axis` is None).
    pub fn take(&self, indices: &Array, axis: Option<i32>) -> Result<Array> {
        // SAFETY: both handles are live (owned by borrowed Arrays); `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_take(self.raw, indices.raw, axis.unwrap_or(0), axis.is_some() as c_int, out) })
    }

    pub fn take_along_axis(&self, indices: &Array, axis: i32) -> Result<Array> {
        // SAFETY: both handles are live (owned by borrowed Arrays); `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_take_along_axis(self.raw, indices.raw, axis, out) })
    }

    pub fn put_along_axis(&self, indices: &Array, values: &Array, axis: i32) -> Result<Array> {
        // SAFETY: the three handles are live (owned by borrowed Arrays); `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_put_along_axis(self.raw, indices.raw, values.raw, axis, out) })
    }

    fn scatter_op(&self, op: c_int, indices: &[&Array], updates: &Array, axes: &[i32]) -> Result<Array> {
        if indices.len() != axes.len() {
            return Err(Error::new("scatter: one index array per axis is required"));
        }
        let raws: Vec<_> = indices.iter().map(|a| a.raw).collect();
        // SAFETY: `self.raw`, `updates.raw` and the handles in `raws` are live; the shim reads
        // `raws.len()` handles and as many axes, and `axes.len() == indices.len() == raws.len()`
        // (checked above); `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_scatter(op, self.raw, raws.as_ptr(), raws.len(), updates.raw, axes.as_ptr(), out) })
    }

    /// MLX `scatter`: `updates` has shape `indices.shape + self.shape` with the
    /// indexed axes set to 1.
    pub fn scatter(&self, indices: &[&Array], updates: &Array, axes: &[i32]) -> Result<Array> {
        self.scatter_op(0, indices, updates, axes)
    }

    pub fn scatter_add(&self, indices: &[&Array], updates: &Array, axes: &[i32]) -> Result<Array> {
        self.scatter_op(1, indices, updates, axes)
    }

    pub fn sort(&self, axis: i32) -> Result<Array> {
        // SAFETY: `self.raw` is a live handle owned by `self`; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_sort(0, self.raw, axis, out) })
    }

    pub fn argsort(&self, axis: i32) -> Result<Array> {
        // SAFETY: `self.raw` is a live handle owned by `self`; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_sort(1, self.raw, axis, out) })
    }

    pub fn partition(&self, kth: i32, axis: i32) -> Result<Array> {
        // SAFETY: `self.raw` is a live handle owned by `self`; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_partition(0, self.raw, kth, axis, out) })
    }

    pub fn argpartition(&self, kth: i32, axis: i32) -> Result<Array> {
        // SAFETY: `self.raw` is a live handle owned by `self`; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_partition(1, self.raw, kth, axis, out) })
    }

    pub fn topk(&self, k: i32, axis: i32) -> Result<Array> {
        // SAFETY: `self.raw` is a live handle owned by `self`; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_topk(self.raw, k, axis, out) })
    }
}
