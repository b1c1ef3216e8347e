// C interface over MLX. Every function returns 0 on success and non-zero on
// failure; on failure mlxn_last_error() holds the message (thread-local).
// Arrays are opaque handles owned by the caller and released with mlxn_free.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mlxn_array_s* mlxn_array;
typedef struct mlxn_closure_s* mlxn_closure;

// A Rust-built function for compile: fills outputs (caller-owned handles).
typedef int (*mlxn_fn)(void* ctx, const mlxn_array* inputs, size_t n_inputs,
                       mlxn_array* outputs, size_t* n_outputs, size_t max_outputs);

const char* mlxn_last_error(void);
// Lets a Rust callback (compile) report why it failed.
void mlxn_set_error(const char* msg);

// Info
const char* mlxn_version(void);
int mlxn_device_info(char* buf, size_t len);
// 1 when the default device is the CPU; cheap enough to ask per op (no device query).
int mlxn_default_device_is_cpu(void);
int mlxn_blas_library(char* buf, size_t len);
// OpenBLAS's core type (openblas_get_corename), or "" when OpenBLAS is not loaded.
int mlxn_openblas_core(char* buf, size_t len);
// Row-major c[m x n] (ldc) = a[m x k] (lda) times b[n x k] (ldb) transposed, by
// the OpenBLAS the addon links, as MLX's CPU matmul calls it for `a @ b.T`; -1
// (nothing written) where the build links no OpenBLAS. No MLX state: callable
// from inside a CPU kernel.
int mlxn_sgemm_nt(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc);

// Lifetime and inspection
void mlxn_free(mlxn_array a);
int mlxn_clone(mlxn_array a, mlxn_array* out);
int mlxn_ndim(mlxn_array a, size_t* out);
int mlxn_shape(mlxn_array a, int32_t* out, size_t cap);
int mlxn_dtype(mlxn_array a, int* out);
int mlxn_size(mlxn_array a, size_t* out);

// Creation and data
int mlxn_from_data(const void* data, const int32_t* shape, size_t ndim, int dtype, mlxn_array* out);
int mlxn_from_f64(double v, int dtype, mlxn_array* out);
int mlxn_full(const int32_t* shape, size_t ndim, mlxn_array v, int dtype, mlxn_array* out);
int mlxn_arange(double start, double stop, double step, int dtype, mlxn_array* out);
// Evaluates, converts to `dtype` and copies `len` bytes out (len must equal size * itemsize).
int mlxn_read(mlxn_array a, int dtype, void* dst, size_t len);

// The ops behind mlxn_unary, mlxn_binary, mlxn_reduce, mlxn_arg_reduce and mlxn_scan,
// each named as MLX's function. These lists are the one place that numbers them
// (by position): shim.cpp switches over them, and mlx-sys's build.rs reads them
// to give Rust the same numbers (`mlx_sys::op`). Append only where a number must
// not move; any order works as both sides follow the list.
#define MLXN_UNARY_OPS(X) X(negative) X(exp) X(log) X(sqrt) X(rsqrt) X(abs) X(sin) X(cos) X(tanh) X(sigmoid) X(square) X(erf) X(floor) X(ceil) X(logical_not) X(reciprocal) X(log1p) X(sign) X(stop_gradient) X(copy) X(isnan) X(round) X(expm1) X(isinf) X(log10)
#define MLXN_BINARY_OPS(X) X(add) X(subtract) X(multiply) X(divide) X(maximum) X(minimum) X(power) X(equal) X(not_equal) X(less) X(less_equal) X(greater) X(greater_equal) X(logical_and) X(logical_or) X(remainder) X(floor_divide) X(arctan2) X(logaddexp)
#define MLXN_REDUCE_OPS(X) X(sum) X(max) X(min) X(mean) X(prod) X(logsumexp) X(all) X(any)
#define MLXN_ARG_REDUCE_OPS(X) X(argmax) X(argmin)
#define MLXN_SCAN_OPS(X) X(cumsum) X(cumprod) X(cummax) X(cummin) X(logcumsumexp)
enum {
#define X(name) MLXN_UNARY_##name,
  MLXN_UNARY_OPS(X)
#undef X
};
enum {
#define X(name) MLXN_BINARY_##name,
  MLXN_BINARY_OPS(X)
#undef X
};
enum {
#define X(name) MLXN_REDUCE_##name,
  MLXN_REDUCE_OPS(X)
#undef X
};
enum {
#define X(name) MLXN_ARG_REDUCE_##name,
  MLXN_ARG_REDUCE_OPS(X)
#undef X
};
enum {
#define X(name) MLXN_SCAN_##name,
  MLXN_SCAN_OPS(X)
#undef X
};

// Elementwise
int mlxn_unary(int op, mlxn_array a, mlxn_array* out);
int mlxn_binary(int op, mlxn_array a, mlxn_array b, mlxn_array* out);
int mlxn_where(mlxn_array c, mlxn_array a, mlxn_array b, mlxn_array* out);
int mlxn_astype(mlxn_array a, int dtype, mlxn_array* out);
// The same bytes read as another dtype of the same size (no conversion).
int mlxn_view(mlxn_array a, int dtype, mlxn_array* out);
int mlxn_matmul(mlxn_array a, mlxn_array b, mlxn_array* out);
int mlxn_addmm(mlxn_array c, mlxn_array a, mlxn_array b, float alpha, float beta, mlxn_array* out);
int mlxn_clip(mlxn_array a, mlxn_array lo, mlxn_array hi, mlxn_array* out);

// Reductions
int mlxn_reduce(int op, mlxn_array a, const int32_t* axes, size_t n_axes, int keepdims, mlxn_array* out);
int mlxn_arg_reduce(int op, mlxn_array a, int axis, int keepdims, mlxn_array* out);
int mlxn_softmax(mlxn_array a, const int32_t* axes, size_t n_axes, int precise, mlxn_array* out);
int mlxn_var(mlxn_array a, const int32_t* axes, size_t n_axes, int keepdims, int ddof, mlxn_array* out);
int mlxn_scan(int op, mlxn_array a, int axis, int reverse, int inclusive, mlxn_array* out);

// Shape
int mlxn_reshape(mlxn_array a, const int32_t* shape, size_t ndim, mlxn_array* out);
int mlxn_transpose(mlxn_array a, const int32_t* axes, size_t n, mlxn_array* out);
int mlxn_broadcast_to(mlxn_array a, const int32_t* shape, size_t ndim, mlxn_array* out);
int mlxn_expand_dims(mlxn_array a, const int32_t* axes, size_t n, mlxn_array* out);
int mlxn_squeeze(mlxn_array a, const int32_t* axes, size_t n, mlxn_array* out);
int mlxn_concatenate(const mlxn_array* arrays, size_t n, int axis, mlxn_array* out);
int mlxn_stack(const mlxn_array* arrays, size_t n, int axis, mlxn_array* out);
// Splits at the given indices along axis; writes up to cap handles, count in n_out.
int mlxn_split(mlxn_array a, const int32_t* indices, size_t n_idx, int axis, mlxn_array* outs, size_t cap, size_t* n_out);
int mlxn_slice(mlxn_array a, const int32_t* start, const int32_t* stop, const int32_t* strides, size_t n, mlxn_array* out);
int mlxn_slice_update(mlxn_array src, mlxn_array upd, const int32_t* start, const int32_t* stop, const int32_t* strides, size_t n, mlxn_array* out);
int mlxn_pad(mlxn_array a, const int32_t* axes, const int32_t* lo, const int32_t* hi, size_t n, mlxn_array value, mlxn_array* out);
int mlxn_repeat(mlxn_array a, int repeats, int axis, mlxn_array* out);
int mlxn_tri(int op, mlxn_array a, int k, mlxn_array* out);
int mlxn_contiguous(mlxn_array a, mlxn_array* out);

// Indexing
int mlxn_take(mlxn_array a, mlxn_array idx, int axis, int has_axis, mlxn_array* out);
int mlxn_take_along_axis(mlxn_array a, mlxn_array idx, int axis, mlxn_array* out);
int mlxn_put_along_axis(mlxn_array a, mlxn_array idx, mlxn_array vals, int axis, mlxn_array* out);
int mlxn_scatter(int op, mlxn_array a, const mlxn_array* indices, size_t n_idx, mlxn_array updates, const int32_t* axes, mlxn_array* out);

// Sorting
int mlxn_sort(int op, mlxn_array a, int axis, mlxn_array* out);
int mlxn_partition(int op, mlxn_array a, int kth, int axis, mlxn_array* out);
int mlxn_topk(mlxn_array a, int k, int axis, mlxn_array* out);

// Random (key may be NULL: the thread's global key sequence is used)
int mlxn_random_seed(uint64_t seed);
int mlxn_random_key(uint64_t seed, mlxn_array* out);
int mlxn_random_split(mlxn_array key, int num, mlxn_array* out);
int mlxn_random_uniform(mlxn_array lo, mlxn_array hi, const int32_t* shape, size_t ndim, int dtype, mlxn_array key, mlxn_array* out);
int mlxn_random_normal(const int32_t* shape, size_t ndim, int dtype, float loc, float scale, mlxn_array key, mlxn_array* out);
int mlxn_random_gumbel(const int32_t* shape, size_t ndim, int dtype, mlxn_array key, mlxn_array* out);
int mlxn_random_categorical(mlxn_array logits, int axis, mlxn_array key, mlxn_array* out);
int mlxn_random_bernoulli(mlxn_array p, mlxn_array key, mlxn_array* out);

// fast::
int mlxn_rms_norm(mlxn_array x, mlxn_array w, float eps, mlxn_array* out);
int mlxn_layer_norm(mlxn_array x, mlxn_array w, mlxn_array b, float eps, mlxn_array* out);
// `offsets` (int32 `[B]`, one position per batch row) replaces `offset` when not null.
int mlxn_rope(mlxn_array x, int dims, int traditional, float base, int has_base, float scale, int offset, mlxn_array offsets, mlxn_array freqs,
              mlxn_array* out);
// mask_mode: "" (none or array mask), "causal"
int mlxn_sdpa(mlxn_array q, mlxn_array k, mlxn_array v, float scale, const char* mask_mode, mlxn_array mask, mlxn_array sinks,
              mlxn_array* out);

// Quantization
// `mode`: MLX's quantization mode ("affine", "mxfp4", "nvfp4", "mxfp8"; null = "affine"). Only
// affine has biases: `mlxn_quantize` sets `*biases` to null for the others.
int mlxn_quantize(mlxn_array w, int group_size, int bits, const char* mode, mlxn_array* wq, mlxn_array* scales, mlxn_array* biases);
int mlxn_dequantize(mlxn_array w, mlxn_array scales, mlxn_array biases, int group_size, int bits, const char* mode, mlxn_array* out);
int mlxn_gather_mm(mlxn_array a, mlxn_array b, mlxn_array lhs, mlxn_array rhs, int sorted, mlxn_array* out);
int mlxn_gather_qmm(mlxn_array x, mlxn_array w, mlxn_array scales, mlxn_array biases, mlxn_array lhs, mlxn_array rhs, int transpose,
                    int group_size, int bits, const char* mode, int sorted, mlxn_array* out);
int mlxn_quantized_matmul(mlxn_array x, mlxn_array w, mlxn_array scales, mlxn_array biases, int transpose, int group_size, int bits,
                          const char* mode, mlxn_array* out);

// Convolution and FFT (channels-last, as MLX)
int mlxn_conv1d(mlxn_array x, mlxn_array w, int stride, int padding, int dilation, int groups, mlxn_array* out);
int mlxn_conv_transpose1d(mlxn_array x, mlxn_array w, int stride, int padding, int dilation, int output_padding, int groups, mlxn_array* out);
int mlxn_conv2d(mlxn_array x, mlxn_array w, int sh, int sw, int ph, int pw, int dh, int dw, int groups, mlxn_array* out);
int mlxn_rfft(mlxn_array a, int n, int axis, mlxn_array* out);
int mlxn_irfft(mlxn_array a, int n, int axis, mlxn_array* out);

// Evaluation, streams, compile
int mlxn_eval(const mlxn_array* arrays, size_t n);
int mlxn_async_eval(const mlxn_array* arrays, size_t n);
int mlxn_new_stream(int* out_index);
int mlxn_set_default_stream(int index);
int mlxn_synchronize(void);
int mlxn_set_compile_enabled(int enabled);
int mlxn_compile(mlxn_fn fn, void* ctx, void (*drop_ctx)(void*), int shapeless, mlxn_closure* out);
int mlxn_closure_call(mlxn_closure c, const mlxn_array* inputs, size_t n_inputs, mlxn_array* outputs, size_t max_outputs, size_t* n_outputs);
void mlxn_closure_free(mlxn_closure c);

// A float32 kernel written by the caller, run as one node of the graph on MLX's
// CPU stream (the caller's code, not a host round trip). `fn` gets the
// caller's ctx and parameters, each input as one row-contiguous buffer, and the
// output buffer to fill; it runs on MLX's stream thread and must not fail (it
// writes what it can and returns). Throws on a GPU default device.
// `flags`: MLXN_KERNEL_IN_PLACE: the output (shaped as input 0) starts as
// input 0's values, in its buffer when MLX may donate it, and `fn` gets only
// the other inputs. MLXN_KERNEL_BITS16: float16 and bfloat16 inputs reach
// `fn` as their bits, two values to a word (their sizes in words), instead of
// cast to float32.
#define MLXN_KERNEL_IN_PLACE 1
#define MLXN_KERNEL_BITS16 2
typedef void (*mlxn_cpu_kernel_fn)(const void* ctx, const float* params, size_t n_params,
                                   const float* const* inputs, const size_t* input_sizes, size_t n_inputs,
                                   float* out, size_t out_size);
int mlxn_cpu_kernel_f32(const char* name, mlxn_cpu_kernel_fn fn, const void* ctx, const float* params,
                        size_t n_params, const mlxn_array* inputs, size_t n_inputs, const int32_t* out_shape,
                        size_t out_ndim, int flags, mlxn_array* out);

// Memory
// Row i of `rows` [n, heads, 1, dim] written into cache i [1, heads, capacity,
// dim] (the rows' dtype, 16 or 32 bits) at position pos[i]: n new arrays, in
// `outs`, one graph node (CPU only; each cache's buffer is reused where MLX
// may donate it).
int mlxn_write_rows(mlxn_array rows, const mlxn_array* caches, const int32_t* pos, size_t n, mlxn_array* outs);
int mlxn_memory(size_t* active, size_t* peak, size_t* cache);
int mlxn_reset_peak_memory(void);
int mlxn_clear_cache(void);
int mlxn_set_cache_limit(size_t limit, size_t* previous);

// Safetensors. Loaded arrays are returned one at a time through a callback.
typedef int (*mlxn_tensor_cb)(void* ctx, const char* name, mlxn_array a);
typedef int (*mlxn_meta_cb)(void* ctx, const char* key, const char* value);
int mlxn_load_safetensors(const char* path, mlxn_tensor_cb on_tensor, mlxn_meta_cb on_meta, void* ctx);
int mlxn_load_gguf(const char* path, mlxn_tensor_cb on_tensor, void* ctx);
int mlxn_save_safetensors(const char* path, const char* const* names, const mlxn_array* arrays, size_t n,
                          const char* const* meta_keys, const char* const* meta_values, size_t n_meta);

// Distributed: MLX's own backends ("ring", "mpi", "any", ...), configured as MLX reads its
// environment (MLX_RANK, MLX_HOSTFILE, as mlx.launch sets them). A group is an opaque handle
// released with mlxn_group_free. The collectives are lazy ops like any other.
typedef struct mlxn_group_s* mlxn_group;
int mlxn_distributed_is_available(const char* backend, int* out);
int mlxn_distributed_init(const char* backend, int strict, mlxn_group* out);
void mlxn_group_free(mlxn_group g);
int mlxn_group_rank(mlxn_group g, int* out);
int mlxn_group_size(mlxn_group g, int* out);
int mlxn_all_sum(mlxn_array x, mlxn_group g, mlxn_array* out);
int mlxn_all_gather(mlxn_array x, mlxn_group g, mlxn_array* out);
int mlxn_send(mlxn_array x, int dst, mlxn_group g, mlxn_array* out);
int mlxn_recv_like(mlxn_array like, int src, mlxn_group g, mlxn_array* out);
/* x, evaluated only after dep (mx::depends): a side effect such as a send kept in the graph. */
int mlxn_depends(mlxn_array x, mlxn_array dep, mlxn_array* out);

#ifdef __cplusplus
}
#endif
