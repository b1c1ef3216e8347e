//! Convolutions (channels-last, as MLX) and real FFTs.
use mlx_sys as sys;

use crate::array::{make, Array};
use crate::error::Result;

pub fn conv1d(x: &Array, w: &Array, stride: i32, padding: i32, dilation: i32, groups: i32) -> Result<Array> {
    // SAFETY: `x.raw` and `w.raw` are live handles owned by borrowed Arrays; `out` and errors as in
    // `make`.
    make(|out| unsafe { sys::mlxn_conv1d(x.raw, w.raw, stride, padding, dilation, groups, out) })
}

pub fn conv_transpose1d(x: &Array, w: &Array, stride: i32, padding: i32, dilation: i32, output_padding: i32, groups: i32) -> Result<Array> {
    // SAFETY: `x.raw` and `w.raw` are live handles owned by borrowed Arrays; `out` and errors as in
    // `make`.
    make(|out| unsafe { sys::mlxn_conv_transpose1d(x.raw, w.raw, stride, padding, dilation, output_padding, groups, out) })
}

pub fn conv2d(x: &Array, w: &Array, stride: (i32, i32), padding: (i32, i32), dilation: (i32, i32), groups: i32) -> Result<Array> {
    // SAFETY: `x.raw` and `w.raw` are live handles owned by borrowed Arrays; `out` and errors as in
    // `make`.
    make(|out| unsafe { sys::mlxn_conv2d(x.raw, w.raw, stride.0, stride.1, padding.0, padding.1, dilation.0, dilation.1, groups, out) })
}

pub fn rfft(a: &Array, n: i32, axis: i32) -> Result<Array> {
    // SAFETY: `a.raw` is a live handle owned by a borrowed Array; `out` and errors as in `make`.
    make(|out| unsafe { sys::mlxn_rfft(a.raw, n, axis, out) })
}

pub fn irfft(a: &Array, n: i32, axis: i32) -> Result<Array> {
    // SAFETY: `a.raw` is a live handle owned by a borrowed Array; `out` and errors as in `make`.
    make(|out| unsafe { sys::mlxn_irfft(a.raw, n, axis, out) })
}
