//! Raw declarations of the C shim in `shim/shim.h`. Every function returns 0 on
//! success; on failure `mlxn_last_error` holds MLX's message for this thread.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_void};

#[repr(C)]
pub struct mlxn_array_s {
    _private: [u8; 0],
}
pub type mlxn_array = *mut mlxn_array_s;
#[repr(C)]
pub struct mlxn_group_s {
    _private: [u8; 0],
}
pub type mlxn_group = *mut mlxn_group_s;

#[repr(C)]
pub struct mlxn_closure_s {
    _private: [u8; 0],
}
pub type mlxn_closure = *mut mlxn_closure_s;

pub type mlxn_fn = unsafe extern "C" fn(
    ctx: *mut c_void,
    inputs: *const mlxn_array,
    n_inputs: usize,
    outputs: *mut mlxn_array,
    n_outputs: *mut usize,
    max_outputs: usize,
) -> c_int;
pub type mlxn_cpu_kernel_fn = unsafe extern "C" fn(
    ctx: *const c_void,
    params: *const f32,
    n_params: usize,
    inputs: *const *const f32,
    input_sizes: *const usize,
    n_inputs: usize,
    out: *mut f32,
    out_size: usize,
);
pub type mlxn_tensor_cb = unsafe extern "C" fn(ctx: *mut c_void, name: *const c_char, a: mlxn_array) -> c_int;
pub type mlxn_meta_cb = unsafe extern "C" fn(ctx: *mut c_void, key: *const c_char, value: *const c_char) -> c_int;

extern "C" {
    pub fn mlxn_last_error() -> *const c_char;
    pub fn mlxn_set_error(msg: *const c_char);
    pub fn mlxn_version() -> *const c_char;
    pub fn mlxn_device_info(buf: *mut c_char, len: usize) -> c_int;
    pub fn mlxn_default_device_is_cpu() -> c_int;
    pub fn mlxn_blas_library(buf: *mut c_char, len: usize) -> c_int;
    pub fn mlxn_openblas_core(buf: *mut c_char, len: usize) -> c_int;
    pub fn mlxn_sgemm_nt(m: c_int, n: c_int, k: c_int, a: *const f32, lda: c_int, b: *const f32, ldb: c_int, c: *mut f32, ldc: c_int) -> c_int;

    pub fn mlxn_free(a: mlxn_array);
    pub fn mlxn_clone(a: mlxn_array, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_ndim(a: mlxn_array, out: *mut usize) -> c_int;
    pub fn mlxn_shape(a: mlxn_array, out: *mut i32, cap: usize) -> c_int;
    pub fn mlxn_dtype(a: mlxn_array, out: *mut c_int) -> c_int;
    pub fn mlxn_size(a: mlxn_array, out: *mut usize) -> c_int;

    pub fn mlxn_from_data(data: *const c_void, shape: *const i32, ndim: usize, dtype: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_from_f64(v: f64, dtype: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_full(shape: *const i32, ndim: usize, v: mlxn_array, dtype: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_arange(start: f64, stop: f64, step: f64, dtype: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_read(a: mlxn_array, dtype: c_int, dst: *mut c_void, len: usize) -> c_int;

    pub fn mlxn_unary(op: c_int, a: mlxn_array, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_binary(op: c_int, a: mlxn_array, b: mlxn_array, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_where(c: mlxn_array, a: mlxn_array, b: mlxn_array, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_astype(a: mlxn_array, dtype: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_view(a: mlxn_array, dtype: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_matmul(a: mlxn_array, b: mlxn_array, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_addmm(c: mlxn_array, a: mlxn_array, b: mlxn_array, alpha: f32, beta: f32, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_clip(a: mlxn_array, lo: mlxn_array, hi: mlxn_array, out: *mut mlxn_array) -> c_int;

    pub fn mlxn_reduce(op: c_int, a: mlxn_array, axes: *const i32, n_axes: usize, keepdims: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_arg_reduce(op: c_int, a: mlxn_array, axis: c_int, keepdims: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_softmax(a: mlxn_array, axes: *const i32, n_axes: usize, precise: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_var(a: mlxn_array, axes: *const i32, n_axes: usize, keepdims: c_int, ddof: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_scan(op: c_int, a: mlxn_array, axis: c_int, reverse: c_int, inclusive: c_int, out: *mut mlxn_array) -> c_int;

    pub fn mlxn_reshape(a: mlxn_array, shape: *const i32, ndim: usize, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_transpose(a: mlxn_array, axes: *const i32, n: usize, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_broadcast_to(a: mlxn_array, shape: *const i32, ndim: usize, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_expand_dims(a: mlxn_array, axes: *const i32, n: usize, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_squeeze(a: mlxn_array, axes: *const i32, n: usize, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_concatenate(arrays: *const mlxn_array, n: usize, axis: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_stack(arrays: *const mlxn_array, n: usize, axis: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_split(a: mlxn_array, indices: *const i32, n_idx: usize, axis: c_int, outs: *mut mlxn_array, cap: usize, n_out: *mut usize) -> c_int;
    pub fn mlxn_slice(a: mlxn_array, start: *const i32, stop: *const i32, strides: *const i32, n: usize, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_slice_update(
        src: mlxn_array,
        upd: mlxn_array,
        start: *const i32,
        stop: *const i32,
        strides: *const i32,
        n: usize,
        out: *mut mlxn_array,
    ) -> c_int;
    pub fn mlxn_pad(a: mlxn_array, axes: *const i32, lo: *const i32, hi: *const i32, n: usize, value: mlxn_array, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_repeat(a: mlxn_array, repeats: c_int, axis: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_tri(op: c_int, a: mlxn_array, k: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_contiguous(a: mlxn_array, out: *mut mlxn_array) -> c_int;

    pub fn mlxn_take(a: mlxn_array, idx: mlxn_array, axis: c_int, has_axis: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_take_along_axis(a: mlxn_array, idx: mlxn_array, axis: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_put_along_axis(a: mlxn_array, idx: mlxn_array, vals: mlxn_array, axis: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_scatter(
        op: c_int,
        a: mlxn_array,
        indices: *const mlxn_array,
        n_idx: usize,
        updates: mlxn_array,
        axes: *const i32,
        out: *mut mlxn_array,
    ) -> c_int;

    pub fn mlxn_sort(op: c_int, a: mlxn_array, axis: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_partition(op: c_int, a: mlxn_array, kth: c_int, axis: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_topk(a: mlxn_array, k: c_int, axis: c_int, out: *mut mlxn_array) -> c_int;

    pub fn mlxn_random_seed(seed: u64) -> c_int;
    pub fn mlxn_random_key(seed: u64, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_random_split(key: mlxn_array, num: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_random_uniform(
        lo: mlxn_array,
        hi: mlxn_array,
        shape: *const i32,
        ndim: usize,
        dtype: c_int,
        key: mlxn_array,
        out: *mut mlxn_array,
    ) -> c_int;
    pub fn mlxn_random_normal(shape: *const i32, ndim: usize, dtype: c_int, loc: f32, scale: f32, key: mlxn_array, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_random_gumbel(shape: *const i32, ndim: usize, dtype: c_int, key: mlxn_array, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_random_categorical(logits: mlxn_array, axis: c_int, key: mlxn_array, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_random_bernoulli(p: mlxn_array, key: mlxn_array, out: *mut mlxn_array) -> c_int;

    pub fn mlxn_rms_norm(x: mlxn_array, w: mlxn_array, eps: f32, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_layer_norm(x: mlxn_array, w: mlxn_array, b: mlxn_array, eps: f32, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_rope(
        x: mlxn_array,
        dims: c_int,
        traditional: c_int,
        base: f32,
        has_base: c_int,
        scale: f32,
        offset: c_int,
        offsets: mlxn_array,
        freqs: mlxn_array,
        out: *mut mlxn_array,
    ) -> c_int;
    pub fn mlxn_sdpa(
        q: mlxn_array,
        k: mlxn_array,
        v: mlxn_array,
        scale: f32,
        mask_mode: *const c_char,
        mask: mlxn_array,
        sinks: mlxn_array,
        out: *mut mlxn_array,
    ) -> c_int;

    /// `mode`: MLX's quantization mode, NUL-terminated (null = "affine"); only affine
    /// writes `biases`, the others set it to null.
    pub fn mlxn_quantize(
        w: mlxn_array,
        group_size: c_int,
        bits: c_int,
        mode: *const c_char,
        wq: *mut mlxn_array,
        scales: *mut mlxn_array,
        biases: *mut mlxn_array,
    ) -> c_int;
    pub fn mlxn_dequantize(
        w: mlxn_array,
        scales: mlxn_array,
        biases: mlxn_array,
        group_size: c_int,
        bits: c_int,
        mode: *const c_char,
        out: *mut mlxn_array,
    ) -> c_int;
    pub fn mlxn_gather_mm(a: mlxn_array, b: mlxn_array, lhs: mlxn_array, rhs: mlxn_array, sorted: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_gather_qmm(
        x: mlxn_array,
        w: mlxn_array,
        scales: mlxn_array,
        biases: mlxn_array,
        lhs: mlxn_array,
        rhs: mlxn_array,
        transpose: c_int,
        group_size: c_int,
        bits: c_int,
        mode: *const c_char,
        sorted: c_int,
        out: *mut mlxn_array,
    ) -> c_int;
    pub fn mlxn_quantized_matmul(
        x: mlxn_array,
        w: mlxn_array,
        scales: mlxn_array,
        biases: mlxn_array,
        transpose: c_int,
        group_size: c_int,
        bits: c_int,
        mode: *const c_char,
        out: *mut mlxn_array,
    ) -> c_int;

    pub fn mlxn_conv1d(x: mlxn_array, w: mlxn_array, stride: c_int, padding: c_int, dilation: c_int, groups: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_conv_transpose1d(
        x: mlxn_array,
        w: mlxn_array,
        stride: c_int,
        padding: c_int,
        dilation: c_int,
        output_padding: c_int,
        groups: c_int,
        out: *mut mlxn_array,
    ) -> c_int;
    pub fn mlxn_conv2d(
        x: mlxn_array,
        w: mlxn_array,
        sh: c_int,
        sw: c_int,
        ph: c_int,
        pw: c_int,
        dh: c_int,
        dw: c_int,
        groups: c_int,
        out: *mut mlxn_array,
    ) -> c_int;
    pub fn mlxn_rfft(a: mlxn_array, n: c_int, axis: c_int, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_irfft(a: mlxn_array, n: c_int, axis: c_int, out: *mut mlxn_array) -> c_int;

    pub fn mlxn_eval(arrays: *const mlxn_array, n: usize) -> c_int;
    pub fn mlxn_async_eval(arrays: *const mlxn_array, n: usize) -> c_int;
    pub fn mlxn_new_stream(out_index: *mut c_int) -> c_int;
    pub fn mlxn_set_default_stream(index: c_int) -> c_int;
    pub fn mlxn_synchronize() -> c_int;
    pub fn mlxn_set_compile_enabled(enabled: c_int) -> c_int;
    pub fn mlxn_compile(
        f: mlxn_fn,
        ctx: *mut c_void,
        drop_ctx: Option<unsafe extern "C" fn(*mut c_void)>,
        shapeless: c_int,
        out: *mut mlxn_closure,
    ) -> c_int;
    pub fn mlxn_closure_call(
        c: mlxn_closure,
        inputs: *const mlxn_array,
        n_inputs: usize,
        outputs: *mut mlxn_array,
        max_outputs: usize,
        n_outputs: *mut usize,
    ) -> c_int;
    pub fn mlxn_closure_free(c: mlxn_closure);
    pub fn mlxn_cpu_kernel_f32(
        name: *const c_char,
        f: mlxn_cpu_kernel_fn,
        ctx: *const c_void,
        params: *const f32,
        n_params: usize,
        inputs: *const mlxn_array,
        n_inputs: usize,
        out_shape: *const i32,
        out_ndim: usize,
        flags: c_int,
        out: *mut mlxn_array,
    ) -> c_int;

    pub fn mlxn_write_rows(rows: mlxn_array, caches: *const mlxn_array, pos: *const i32, n: usize, outs: *mut mlxn_array) -> c_int;
    pub fn mlxn_memory(active: *mut usize, peak: *mut usize, cache: *mut usize) -> c_int;
    pub fn mlxn_reset_peak_memory() -> c_int;
    pub fn mlxn_clear_cache() -> c_int;

    pub fn mlxn_distributed_is_available(backend: *const c_char, out: *mut c_int) -> c_int;
    pub fn mlxn_distributed_init(backend: *const c_char, strict: c_int, out: *mut mlxn_group) -> c_int;
    pub fn mlxn_group_free(g: mlxn_group);
    pub fn mlxn_group_rank(g: mlxn_group, out: *mut c_int) -> c_int;
    pub fn mlxn_group_size(g: mlxn_group, out: *mut c_int) -> c_int;
    pub fn mlxn_all_sum(x: mlxn_array, g: mlxn_group, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_all_gather(x: mlxn_array, g: mlxn_group, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_send(x: mlxn_array, dst: c_int, g: mlxn_group, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_recv_like(like: mlxn_array, src: c_int, g: mlxn_group, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_depends(x: mlxn_array, dep: mlxn_array, out: *mut mlxn_array) -> c_int;
    pub fn mlxn_set_cache_limit(limit: usize, previous: *mut usize) -> c_int;

    pub fn mlxn_load_safetensors(path: *const c_char, on_tensor: mlxn_tensor_cb, on_meta: Option<mlxn_meta_cb>, ctx: *mut c_void) -> c_int;
    pub fn mlxn_load_gguf(path: *const c_char, on_tensor: mlxn_tensor_cb, ctx: *mut c_void) -> c_int;
    pub fn mlxn_save_safetensors(
        path: *const c_char,
        names: *const *const c_char,
        arrays: *const mlxn_array,
        n: usize,
        meta_keys: *const *const c_char,
        meta_values: *const *const c_char,
        n_meta: usize,
    ) -> c_int;
}

include!(concat!(env!("OUT_DIR"), "/ops.rs"));
