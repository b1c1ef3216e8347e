// C shim over MLX. Each entry point runs its body inside guard(), which turns
// any C++ exception into a non-zero status plus a thread-local message, so no
// exception ever crosses the extern "C" boundary.
#include "shim.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <mlx/mlx.h>
#include <mlx/backend/cpu/encoder.h>
#include <mlx/primitives.h>

namespace mx = mlx::core;

#ifdef MLXN_OPENBLAS
extern "C" char* openblas_get_config(void);
// cblas.h's prototype, its enums as the ints they are (CblasRowMajor 101,
// CblasNoTrans 111, CblasTrans 112), so no BLAS header is needed to build.
extern "C" void cblas_sgemm(int order, int transa, int transb, int m, int n, int k, float alpha, const float* a,
                            int lda, const float* b, int ldb, float beta, float* c, int ldc);
#endif

struct mlxn_array_s {
  mx::array a;
};

// A distributed group (MLX's Group holds a shared_ptr to its backend).
struct mlxn_group_s {
  mx::distributed::Group g;
};

struct mlxn_closure_s {
  std::function<std::vector<mx::array>(const std::vector<mx::array>&)> fn;
  std::shared_ptr<void> ctx;
};

namespace {

thread_local std::string g_error;

template <typename F>
int guard(F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    g_error = e.what();
  } catch (...) {
    g_error = "unknown C++ exception";
  }
  return 1;
}

mlxn_array wrap(mx::array a) { return new mlxn_array_s{std::move(a)}; }

const mx::distributed::Group& G(mlxn_group g) {
  if (!g) throw std::invalid_argument("null group handle");
  return g->g;
}

const mx::array& A(mlxn_array h) {
  if (!h) throw std::invalid_argument("null array handle");
  return h->a;
}

std::optional<mx::array> opt(mlxn_array h) {
  if (!h) return std::nullopt;
  return h->a;
}

mx::Shape shape_of(const int32_t* s, size_t n) { return mx::Shape(s, s + n); }
std::vector<int> ints(const int32_t* s, size_t n) { return std::vector<int>(s, s + n); }

mx::Dtype dtype_of(int code) {
  using V = mx::Dtype::Val;
  switch (static_cast<V>(code)) {
    case V::bool_: return mx::bool_;
    case V::uint8: return mx::uint8;
    case V::uint16: return mx::uint16;
    case V::uint32: return mx::uint32;
    case V::uint64: return mx::uint64;
    case V::int8: return mx::int8;
    case V::int16: return mx::int16;
    case V::int32: return mx::int32;
    case V::int64: return mx::int64;
    case V::float16: return mx::float16;
    case V::float32: return mx::float32;
    case V::float64: return mx::float64;
    case V::bfloat16: return mx::bfloat16;
    case V::complex64: return mx::complex64;
  }
  throw std::invalid_argument("unknown dtype code " + std::to_string(code));
}

std::vector<mx::array> unwrap_all(const mlxn_array* hs, size_t n) {
  std::vector<mx::array> v;
  v.reserve(n);
  for (size_t i = 0; i < n; ++i) v.push_back(A(hs[i]));
  return v;
}

void copy_cstr(const std::string& s, char* buf, size_t len) {
  if (!buf || len == 0) return;
  size_t n = std::min(s.size(), len - 1);
  std::memcpy(buf, s.data(), n);
  buf[n] = 0;
}

}  // namespace

extern "C" {

const char* mlxn_last_error(void) { return g_error.c_str(); }

void mlxn_set_error(const char* msg) { g_error = msg ? msg : ""; }

const char* mlxn_version(void) { return mx::version(); }

// mlxn_device_info asks the backend for the device's properties (on CUDA a
// driver query per call); the kernels' per-op device check needs only the type.
int mlxn_default_device_is_cpu(void) {
  try {
    return mx::default_device().type == mx::Device::cpu ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

int mlxn_device_info(char* buf, size_t len) {
  return guard([&] {
    auto d = mx::default_device();
    std::string s = d.type == mx::Device::gpu ? "gpu" : "cpu";
    auto info = mx::device_info(d);
    auto it = info.find("device_name");
    if (it != info.end() && std::holds_alternative<std::string>(it->second)) {
      s += ":" + std::get<std::string>(it->second);
    }
    copy_cstr(s, buf, len);
  });
}

// Reports the file that serves cblas_sgemm for this library's own lookup scope:
// the loader resolves libmlx's calls through the same scope, so this is what
// MLX actually uses, not what the build intended.
int mlxn_blas_library(char* buf, size_t len) {
  return guard([&] {
    Dl_info self;
    if (!dladdr(reinterpret_cast<void*>(&mlxn_blas_library), &self) || !self.dli_fname) {
      throw std::runtime_error("dladdr failed on the shim itself");
    }
    void* handle = dlopen(self.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    void* sym = dlsym(handle ? handle : RTLD_DEFAULT, "cblas_sgemm");
    if (handle) dlclose(handle);
#ifdef MLXN_OPENBLAS
    // Referencing an OpenBLAS symbol keeps it in the addon's needed libraries
    // (ahead of libmlx), which is what routes libmlx's cblas_* calls to it.
    (void)openblas_get_config();
#endif
    std::string name = "none";
    Dl_info where;
    if (sym && dladdr(sym, &where) && where.dli_fname) name = where.dli_fname;
    copy_cstr(name, buf, len);
  });
}

int mlxn_sgemm_nt(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
#ifdef MLXN_OPENBLAS
  // The call MLX's CPU matmul makes for `a @ b.T` (b's transposed view).
  cblas_sgemm(101, 111, 112, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  return 0;
#else
  (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c, (void)ldc;
  return -1;
#endif
}

int mlxn_openblas_core(char* buf, size_t len) {
  return guard([&] {
    // Looked up, not linked: any BLAS (or none) may serve libmlx.
    using corename_fn = char* (*)();
    auto f = reinterpret_cast<corename_fn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    copy_cstr(f ? std::string(f()) : std::string(), buf, len);
  });
}

void mlxn_free(mlxn_array a) { delete a; }

int mlxn_clone(mlxn_array a, mlxn_array* out) {
  return guard([&] { *out = wrap(A(a)); });
}

int mlxn_ndim(mlxn_array a, size_t* out) {
  return guard([&] { *out = A(a).ndim(); });
}

int mlxn_shape(mlxn_array a, int32_t* out, size_t cap) {
  return guard([&] {
    const auto& s = A(a).shape();
    if (s.size() > cap) throw std::invalid_argument("shape buffer too small");
    for (size_t i = 0; i < s.size(); ++i) out[i] = s[i];
  });
}

int mlxn_dtype(mlxn_array a, int* out) {
  return guard([&] { *out = static_cast<int>(A(a).dtype().val()); });
}

int mlxn_size(mlxn_array a, size_t* out) {
  return guard([&] { *out = A(a).size(); });
}

int mlxn_from_data(const void* data, const int32_t* shape, size_t ndim, int dtype, mlxn_array* out) {
  return guard([&] {
    auto dt = dtype_of(dtype);
    auto sh = shape_of(shape, ndim);
    size_t n = 1;
    for (auto d : sh) {
      if (d < 0) throw std::invalid_argument("negative dimension in shape");
      n *= static_cast<size_t>(d);
    }
    // Copy the bytes into an MLX-owned buffer: the caller's memory may go away.
    auto buf = mx::allocator::malloc(n * dt.size());
    if (n) std::memcpy(buf.buffer().raw_ptr(), data, n * dt.size());
    *out = wrap(mx::array(std::move(buf), sh, dt));
  });
}

// Converted on the host, as MLX's Python binding converts a Python float (through a C
// float) or int. A float64 array plus a cast op would fail on the GPU, which has no float64.
int mlxn_from_f64(double v, int dtype, mlxn_array* out) {
  return guard([&] {
    auto dt = dtype_of(dtype);
    if (dt == mx::float64) {
      *out = wrap(mx::array(v, dt));
    } else if (mx::issubdtype(dt, mx::inexact)) {
      *out = wrap(mx::array(static_cast<float>(v), dt));
    } else if (dt == mx::bool_) {
      *out = wrap(mx::array(v != 0.0));
    } else {
      *out = wrap(mx::array(static_cast<int64_t>(v), dt));
    }
  });
}

int mlxn_full(const int32_t* shape, size_t ndim, mlxn_array v, int dtype, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::full(shape_of(shape, ndim), A(v), dtype_of(dtype))); });
}

int mlxn_arange(double start, double stop, double step, int dtype, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::arange(start, stop, step, dtype_of(dtype))); });
}

int mlxn_read(mlxn_array h, int dtype, void* dst, size_t len) {
  return guard([&] {
    auto dt = dtype_of(dtype);
    auto a = A(h);
    // Wait for this array alone first: a new op (astype, contiguous) would queue
    // behind whatever was scheduled since, such as the next decode step.
    a.eval();
    if (a.dtype() != dt || !a.flags().row_contiguous) {
      a = mx::contiguous(mx::astype(a, dt));
      a.eval();
    }
    if (a.size() * dt.size() != len) {
      throw std::invalid_argument("read of " + std::to_string(len) + " bytes from an array of " +
                                  std::to_string(a.size() * dt.size()));
    }
    if (len) std::memcpy(dst, a.data<void>(), len);
  });
}

int mlxn_unary(int op, mlxn_array h, mlxn_array* out) {
  return guard([&] {
    const auto& a = A(h);
    mx::array r = [&]() -> mx::array {
      switch (op) {
#define X(name) case MLXN_UNARY_##name: return mx::name(a);
        MLXN_UNARY_OPS(X)
#undef X
      }
      throw std::invalid_argument("unknown unary op " + std::to_string(op));
    }();
    *out = wrap(std::move(r));
  });
}

int mlxn_binary(int op, mlxn_array ha, mlxn_array hb, mlxn_array* out) {
  return guard([&] {
    const auto& a = A(ha);
    const auto& b = A(hb);
    mx::array r = [&]() -> mx::array {
      switch (op) {
#define X(name) case MLXN_BINARY_##name: return mx::name(a, b);
        MLXN_BINARY_OPS(X)
#undef X
      }
      throw std::invalid_argument("unknown binary op " + std::to_string(op));
    }();
    *out = wrap(std::move(r));
  });
}

int mlxn_where(mlxn_array c, mlxn_array a, mlxn_array b, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::where(A(c), A(a), A(b))); });
}

int mlxn_astype(mlxn_array a, int dtype, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::astype(A(a), dtype_of(dtype))); });
}

int mlxn_view(mlxn_array a, int dtype, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::view(A(a), dtype_of(dtype))); });
}

int mlxn_matmul(mlxn_array a, mlxn_array b, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::matmul(A(a), A(b))); });
}

int mlxn_addmm(mlxn_array c, mlxn_array a, mlxn_array b, float alpha, float beta, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::addmm(A(c), A(a), A(b), alpha, beta)); });
}

int mlxn_clip(mlxn_array a, mlxn_array lo, mlxn_array hi, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::clip(A(a), opt(lo), opt(hi))); });
}

int mlxn_reduce(int op, mlxn_array h, const int32_t* axes_p, size_t n_axes, int keepdims, mlxn_array* out) {
  return guard([&] {
    const auto& a = A(h);
    std::vector<int> axes = ints(axes_p, n_axes);
    bool kd = keepdims != 0;
    mx::array r = [&]() -> mx::array {
      switch (op) {
#define X(name) case MLXN_REDUCE_##name: return mx::name(a, axes, kd);
        MLXN_REDUCE_OPS(X)
#undef X
      }
      throw std::invalid_argument("unknown reduce op " + std::to_string(op));
    }();
    *out = wrap(std::move(r));
  });
}

int mlxn_arg_reduce(int op, mlxn_array a, int axis, int keepdims, mlxn_array* out) {
  return guard([&] {
    switch (op) {
#define X(name) case MLXN_ARG_REDUCE_##name: *out = wrap(mx::name(A(a), axis, keepdims != 0)); return;
      MLXN_ARG_REDUCE_OPS(X)
#undef X
    }
    throw std::invalid_argument("unknown arg reduce op " + std::to_string(op));
  });
}

int mlxn_var(mlxn_array a, const int32_t* axes, size_t n_axes, int keepdims, int ddof, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::var(A(a), ints(axes, n_axes), keepdims != 0, ddof)); });
}

int mlxn_softmax(mlxn_array a, const int32_t* axes, size_t n_axes, int precise, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::softmax(A(a), ints(axes, n_axes), precise != 0)); });
}

int mlxn_scan(int op, mlxn_array h, int axis, int reverse, int inclusive, mlxn_array* out) {
  return guard([&] {
    const auto& a = A(h);
    bool r = reverse != 0, inc = inclusive != 0;
    switch (op) {
#define X(name) case MLXN_SCAN_##name: *out = wrap(mx::name(a, axis, r, inc)); return;
        MLXN_SCAN_OPS(X)
#undef X
      }
    throw std::invalid_argument("unknown scan op " + std::to_string(op));
  });
}

int mlxn_reshape(mlxn_array a, const int32_t* shape, size_t ndim, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::reshape(A(a), shape_of(shape, ndim))); });
}

int mlxn_transpose(mlxn_array a, const int32_t* axes, size_t n, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::transpose(A(a), ints(axes, n))); });
}

int mlxn_broadcast_to(mlxn_array a, const int32_t* shape, size_t ndim, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::broadcast_to(A(a), shape_of(shape, ndim))); });
}

int mlxn_expand_dims(mlxn_array a, const int32_t* axes, size_t n, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::expand_dims(A(a), ints(axes, n))); });
}

int mlxn_squeeze(mlxn_array a, const int32_t* axes, size_t n, mlxn_array* out) {
  return guard([&] { *out = wrap(n ? mx::squeeze(A(a), ints(axes, n)) : mx::squeeze(A(a))); });
}

int mlxn_concatenate(const mlxn_array* arrays, size_t n, int axis, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::concatenate(unwrap_all(arrays, n), axis)); });
}

int mlxn_stack(const mlxn_array* arrays, size_t n, int axis, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::stack(unwrap_all(arrays, n), axis)); });
}

int mlxn_split(mlxn_array a, const int32_t* indices, size_t n_idx, int axis, mlxn_array* outs, size_t cap, size_t* n_out) {
  return guard([&] {
    auto parts = mx::split(A(a), shape_of(indices, n_idx), axis);
    if (parts.size() > cap) throw std::invalid_argument("split output buffer too small");
    for (size_t i = 0; i < parts.size(); ++i) outs[i] = wrap(parts[i]);
    *n_out = parts.size();
  });
}

int mlxn_slice(mlxn_array a, const int32_t* start, const int32_t* stop, const int32_t* strides, size_t n, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::slice(A(a), shape_of(start, n), shape_of(stop, n), shape_of(strides, n))); });
}

int mlxn_slice_update(mlxn_array src, mlxn_array upd, const int32_t* start, const int32_t* stop, const int32_t* strides, size_t n, mlxn_array* out) {
  return guard([&] {
    *out = wrap(mx::slice_update(A(src), A(upd), shape_of(start, n), shape_of(stop, n), shape_of(strides, n)));
  });
}

int mlxn_pad(mlxn_array a, const int32_t* axes, const int32_t* lo, const int32_t* hi, size_t n, mlxn_array value, mlxn_array* out) {
  return guard([&] {
    *out = wrap(mx::pad(A(a), ints(axes, n), shape_of(lo, n), shape_of(hi, n), A(value)));
  });
}

int mlxn_repeat(mlxn_array a, int repeats, int axis, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::repeat(A(a), repeats, axis)); });
}

int mlxn_tri(int op, mlxn_array a, int k, mlxn_array* out) {
  return guard([&] { *out = wrap(op == 0 ? mx::tril(A(a), k) : mx::triu(A(a), k)); });
}

int mlxn_contiguous(mlxn_array a, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::contiguous(A(a))); });
}

int mlxn_take(mlxn_array a, mlxn_array idx, int axis, int has_axis, mlxn_array* out) {
  return guard([&] { *out = wrap(has_axis ? mx::take(A(a), A(idx), axis) : mx::take(A(a), A(idx))); });
}

int mlxn_take_along_axis(mlxn_array a, mlxn_array idx, int axis, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::take_along_axis(A(a), A(idx), axis)); });
}

int mlxn_put_along_axis(mlxn_array a, mlxn_array idx, mlxn_array vals, int axis, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::put_along_axis(A(a), A(idx), A(vals), axis)); });
}

int mlxn_scatter(int op, mlxn_array a, const mlxn_array* indices, size_t n_idx, mlxn_array updates, const int32_t* axes, mlxn_array* out) {
  return guard([&] {
    auto idx = unwrap_all(indices, n_idx);
    auto ax = ints(axes, n_idx);
    if (op == 0) *out = wrap(mx::scatter(A(a), idx, A(updates), ax));
    else if (op == 1) *out = wrap(mx::scatter_add(A(a), idx, A(updates), ax));
    else throw std::invalid_argument("unknown scatter op " + std::to_string(op));
  });
}

int mlxn_sort(int op, mlxn_array a, int axis, mlxn_array* out) {
  return guard([&] { *out = wrap(op == 0 ? mx::sort(A(a), axis) : mx::argsort(A(a), axis)); });
}

int mlxn_partition(int op, mlxn_array a, int kth, int axis, mlxn_array* out) {
  return guard([&] { *out = wrap(op == 0 ? mx::partition(A(a), kth, axis) : mx::argpartition(A(a), kth, axis)); });
}

int mlxn_topk(mlxn_array a, int k, int axis, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::topk(A(a), k, axis)); });
}

int mlxn_random_seed(uint64_t seed) {
  return guard([&] { mx::random::seed(seed); });
}

int mlxn_random_key(uint64_t seed, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::random::key(seed)); });
}

int mlxn_random_split(mlxn_array key, int num, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::random::split(A(key), num)); });
}

int mlxn_random_uniform(mlxn_array lo, mlxn_array hi, const int32_t* shape, size_t ndim, int dtype, mlxn_array key, mlxn_array* out) {
  return guard([&] {
    *out = wrap(mx::random::uniform(A(lo), A(hi), shape_of(shape, ndim), dtype_of(dtype), opt(key)));
  });
}

int mlxn_random_normal(const int32_t* shape, size_t ndim, int dtype, float loc, float scale, mlxn_array key, mlxn_array* out) {
  return guard([&] {
    *out = wrap(mx::random::normal(shape_of(shape, ndim), dtype_of(dtype), loc, scale, opt(key)));
  });
}

int mlxn_random_gumbel(const int32_t* shape, size_t ndim, int dtype, mlxn_array key, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::random::gumbel(shape_of(shape, ndim), dtype_of(dtype), opt(key))); });
}

int mlxn_random_categorical(mlxn_array logits, int axis, mlxn_array key, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::random::categorical(A(logits), axis, opt(key))); });
}

int mlxn_random_bernoulli(mlxn_array p, mlxn_array key, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::random::bernoulli(A(p), opt(key))); });
}

int mlxn_rms_norm(mlxn_array x, mlxn_array w, float eps, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::fast::rms_norm(A(x), opt(w), eps)); });
}

int mlxn_layer_norm(mlxn_array x, mlxn_array w, mlxn_array b, float eps, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::fast::layer_norm(A(x), opt(w), opt(b), eps)); });
}

int mlxn_rope(mlxn_array x, int dims, int traditional, float base, int has_base, float scale, int offset, mlxn_array offsets, mlxn_array freqs,
              mlxn_array* out) {
  return guard([&] {
    std::optional<float> b = has_base ? std::optional<float>(base) : std::nullopt;
    if (offsets) {
      *out = wrap(mx::fast::rope(A(x), dims, traditional != 0, b, scale, A(offsets), opt(freqs)));
    } else {
      *out = wrap(mx::fast::rope(A(x), dims, traditional != 0, b, scale, offset, opt(freqs)));
    }
  });
}

int mlxn_sdpa(mlxn_array q, mlxn_array k, mlxn_array v, float scale, const char* mask_mode, mlxn_array mask, mlxn_array sinks,
              mlxn_array* out) {
  return guard([&] {
    std::string mode = mask_mode ? mask_mode : "";
    if (mask && mode.empty()) mode = "array";
    *out = wrap(mx::fast::scaled_dot_product_attention(A(q), A(k), A(v), scale, mode, opt(mask), opt(sinks)));
  });
}

// `mode` is MLX's quantization mode ("affine", "mxfp4", "nvfp4", "mxfp8"); null means "affine".
// Only affine has biases: for the others `*biases` is set to null and `biases` must be null.
int mlxn_quantize(mlxn_array w, int group_size, int bits, const char* mode, mlxn_array* wq, mlxn_array* scales, mlxn_array* biases) {
  return guard([&] {
    std::string m = mode ? mode : "affine";
    auto r = mx::quantize(A(w), group_size, bits, m);
    if (r.size() < 2 || (m == "affine" && r.size() < 3)) throw std::runtime_error("quantize (" + m + ") returned too few arrays");
    *wq = wrap(r[0]);
    *scales = wrap(r[1]);
    *biases = r.size() > 2 ? wrap(r[2]) : nullptr;
  });
}

int mlxn_dequantize(mlxn_array w, mlxn_array scales, mlxn_array biases, int group_size, int bits, const char* mode, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::dequantize(A(w), A(scales), opt(biases), group_size, bits, mode ? mode : "affine")); });
}

int mlxn_quantized_matmul(mlxn_array x, mlxn_array w, mlxn_array scales, mlxn_array biases, int transpose, int group_size, int bits,
                          const char* mode, mlxn_array* out) {
  return guard([&] {
    *out = wrap(mx::quantized_matmul(A(x), A(w), A(scales), opt(biases), transpose != 0, group_size, bits, mode ? mode : "affine"));
  });
}

// MoE expert matmuls: each row of `a`/`x` against the expert its index names.
int mlxn_gather_mm(mlxn_array a, mlxn_array b, mlxn_array lhs, mlxn_array rhs, int sorted, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::gather_mm(A(a), A(b), opt(lhs), opt(rhs), sorted != 0)); });
}

int mlxn_gather_qmm(mlxn_array x, mlxn_array w, mlxn_array scales, mlxn_array biases, mlxn_array lhs, mlxn_array rhs, int transpose,
                    int group_size, int bits, const char* mode, int sorted, mlxn_array* out) {
  return guard([&] {
    *out = wrap(mx::gather_qmm(A(x), A(w), A(scales), opt(biases), opt(lhs), opt(rhs), transpose != 0, group_size, bits,
                               mode ? mode : "affine", std::nullopt, sorted != 0));
  });
}

int mlxn_conv1d(mlxn_array x, mlxn_array w, int stride, int padding, int dilation, int groups, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::conv1d(A(x), A(w), stride, padding, dilation, groups)); });
}

int mlxn_conv_transpose1d(mlxn_array x, mlxn_array w, int stride, int padding, int dilation, int output_padding, int groups, mlxn_array* out) {
  return guard([&] {
    *out = wrap(mx::conv_transpose1d(A(x), A(w), stride, padding, dilation, output_padding, groups));
  });
}

int mlxn_conv2d(mlxn_array x, mlxn_array w, int sh, int sw, int ph, int pw, int dh, int dw, int groups, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::conv2d(A(x), A(w), {sh, sw}, {ph, pw}, {dh, dw}, groups)); });
}

int mlxn_rfft(mlxn_array a, int n, int axis, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::fft::rfft(A(a), n, axis)); });
}

int mlxn_irfft(mlxn_array a, int n, int axis, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::fft::irfft(A(a), n, axis)); });
}

int mlxn_eval(const mlxn_array* arrays, size_t n) {
  return guard([&] { mx::eval(unwrap_all(arrays, n)); });
}

int mlxn_async_eval(const mlxn_array* arrays, size_t n) {
  return guard([&] { mx::async_eval(unwrap_all(arrays, n)); });
}

// Streams are per thread in MLX; the engine thread makes its own and sets it
// as its default so every op it issues lands there.
int mlxn_new_stream(int* out_index) {
  return guard([&] { *out_index = mx::new_stream(mx::default_device()).index; });
}

int mlxn_set_default_stream(int index) {
  return guard([&] { mx::set_default_stream(mx::Stream(index, mx::default_device())); });
}

// Process-wide, as mx.disable_compile(): compile() made afterwards returns the plain function.
int mlxn_set_compile_enabled(int enabled) {
  return guard([&] { enabled ? mx::enable_compile() : mx::disable_compile(); });
}

int mlxn_synchronize(void) {
  return guard([&] { mx::synchronize(); });
}

int mlxn_compile(mlxn_fn fn, void* ctx, void (*drop_ctx)(void*), int shapeless, mlxn_closure* out) {
  std::shared_ptr<void> owned(ctx, [drop_ctx](void* p) {
    if (drop_ctx) drop_ctx(p);
  });
  return guard([&] {
    auto traced = [fn, ctx](const std::vector<mx::array>& inputs) {
      std::vector<mlxn_array> in;
      in.reserve(inputs.size());
      for (auto& a : inputs) in.push_back(wrap(a));
      std::vector<mlxn_array> outs(64, nullptr);
      size_t n_out = 0;
      int rc = fn(ctx, in.data(), in.size(), outs.data(), &n_out, outs.size());
      for (auto h : in) delete h;
      std::vector<mx::array> result;
      for (size_t i = 0; i < n_out && i < outs.size(); ++i) {
        if (rc == 0) result.push_back(outs[i]->a);
        delete outs[i];
      }
      if (rc != 0) throw std::runtime_error("compiled function failed: " + g_error);
      return result;
    };
    auto c = new mlxn_closure_s{mx::compile(traced, shapeless != 0), owned};
    *out = c;
  });
}

int mlxn_closure_call(mlxn_closure c, const mlxn_array* inputs, size_t n_inputs, mlxn_array* outputs, size_t max_outputs, size_t* n_outputs) {
  return guard([&] {
    if (!c) throw std::invalid_argument("null closure");
    auto r = c->fn(unwrap_all(inputs, n_inputs));
    if (r.size() > max_outputs) throw std::invalid_argument("closure output buffer too small");
    for (size_t i = 0; i < r.size(); ++i) outputs[i] = wrap(r[i]);
    *n_outputs = r.size();
  });
}

void mlxn_closure_free(mlxn_closure c) {
  try {
    delete c;
  } catch (...) {
  }
}

namespace {

// Copies a strided array of 32-bit (float32, uint32) or 16-bit elements (a
// transposed, sliced or broadcast view) into `dst` in row order, a run of the
// last axis at a time (one memcpy when that axis is dense, as in a column slice
// of a matrix). C++ linkage (a template, and the record below that calls it),
// inside the file's extern "C" block.
extern "C++" {
template <typename T>
void gather_rows(const T* src, const mx::Shape& shape, const mx::Strides& strides, T* dst) {
  if (shape.empty()) {
    dst[0] = src[0];
    return;
  }
  const int last = static_cast<int>(shape.size()) - 1;
  const size_t run = shape[last];
  const int64_t step = strides[last];
  size_t runs = 1;
  for (int d = 0; d < last; d++) runs *= shape[d];
  for (size_t r = 0; r < runs; r++) {
    size_t rest = r;
    int64_t at = 0;
    for (int d = last - 1; d >= 0; d--) {
      at += static_cast<int64_t>(rest % shape[d]) * strides[d];
      rest /= shape[d];
    }
    T* out = dst + r * run;
    if (step == 1) {
      std::memcpy(out, src + at, run * sizeof(T));
    } else {
      for (size_t j = 0; j < run; j++) out[j] = src[at + static_cast<int64_t>(j) * step];
    }
  }
}

// A strided input to copy into a row-contiguous buffer inside a node's task
// (`gather_rows` by the element size, 2 or 4 bytes), recorded when the node is
// evaluated (MLX knows an input's strides only then).
struct Gather {
  const void* src;
  mx::Shape shape;
  mx::Strides strides;
  void* dst;
  size_t esize;

  void run() const {
    if (esize == 2) {
      gather_rows(static_cast<const uint16_t*>(src), shape, strides, static_cast<uint16_t*>(dst));
    } else {
      gather_rows(static_cast<const uint32_t*>(src), shape, strides, static_cast<uint32_t*>(dst));
    }
  }
};
}  // extern "C++"

// The primitive behind mlxn_cpu_kernel_f32. Its inputs are made float32 when
// the node is built; an input that is not one row-contiguous block when it is
// evaluated (a view: MLX knows only then) is copied into one by the node's own
// task, so that the graph gets no `contiguous` node per input (a node of its own
// each, dispatched on the stream, though it copies nothing for the usual
// row-contiguous input: four per quantized matmul).
// In place: the output starts as a copy of input 0, which is not handed to the
// kernel; its buffer becomes the output's when MLX may donate it (as MLX's own
// element-wise ops do), so the node needs no second buffer of that size.
class CpuKernelF32 : public mx::Primitive {
 public:
  CpuKernelF32(mx::Stream s, std::string name, mlxn_cpu_kernel_fn fn, const void* ctx, std::vector<float> params,
               bool in_place, bool bits16)
      : mx::Primitive(s),
        name_(std::move(name)),
        fn_(fn),
        ctx_(ctx),
        params_(std::move(params)),
        in_place_(in_place),
        bits16_(bits16) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    auto is16 = [&](const mx::array& in) {
      return bits16_ && (in.dtype() == mx::float16 || in.dtype() == mx::bfloat16);
    };
    for (auto& in : inputs) {
      if (in.dtype() != mx::float32 && in.dtype() != mx::uint32 && !is16(in))
        throw std::runtime_error(name_ + ": inputs must be float32 (or uint32)");
      if (is16(in) && in.size() % 2 != 0) throw std::runtime_error(name_ + ": a 16-bit input needs an even size");
    }
    auto& out = outputs[0];
    std::vector<Gather> gathers;
    // The task holds the input and output buffers (not the arrays: releasing
    // graph nodes on the stream thread would race with the calling thread
    // detaching the same graph), so they outlive it whatever the caller drops.
    std::vector<std::shared_ptr<mx::array::Data>> keep;
    auto gathered = [&](const mx::array& in, uint32_t* dst) {
      gathers.push_back({in.data<void>(), in.shape(), in.strides(), dst, is16(in) ? size_t{2} : size_t{4}});
    };
    const float* copy_from = nullptr;
    if (in_place_ && inputs[0].flags().row_contiguous && inputs[0].is_donatable() && inputs[0].nbytes() == out.nbytes()) {
      out.copy_shared_buffer(inputs[0]);
    } else {
      out.set_data(mx::allocator::malloc(out.nbytes()));
      if (in_place_ && inputs[0].flags().row_contiguous) copy_from = inputs[0].data<float>();
      if (in_place_ && !inputs[0].flags().row_contiguous) gathered(inputs[0], out.data<uint32_t>());
    }
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& in : inputs) enc.set_input_array(in);
    enc.set_output_array(out);
    std::vector<const float*> ptrs;
    std::vector<size_t> sizes;
    for (size_t i = 0; i < inputs.size(); i++) {
      keep.push_back(inputs[i].data_shared_ptr());
      if (in_place_ && i == 0) continue;
      const void* data = inputs[i].data<uint32_t>();
      if (!inputs[i].flags().row_contiguous) {
        mx::array copy(inputs[i].shape(), inputs[i].dtype(), nullptr, {});
        copy.set_data(mx::allocator::malloc(copy.nbytes()));
        gathered(inputs[i], copy.data<uint32_t>());
        data = copy.data<uint32_t>();
        keep.push_back(copy.data_shared_ptr());
      }
      // A uint32 input (packed quantized weights) reaches the kernel as its bits, and so does a
      // 16-bit one under bits16 (its size in 32-bit words).
      ptrs.push_back(static_cast<const float*>(data));
      sizes.push_back(is16(inputs[i]) ? inputs[i].size() / 2 : inputs[i].size());
    }
    keep.push_back(out.data_shared_ptr());
    enc.dispatch([fn = fn_, ctx = ctx_, params = params_, ptrs = std::move(ptrs), sizes = std::move(sizes),
                  keep = std::move(keep), gathers = std::move(gathers), copy_from, out_ptr = out.data<float>(),
                  out_size = out.size()]() {
      for (auto& g : gathers) g.run();
      if (copy_from) std::memcpy(out_ptr, copy_from, out_size * sizeof(float));
      fn(ctx, params.data(), params.size(), ptrs.data(), sizes.data(), ptrs.size(), out_ptr, out_size);
    });
    // MLX's evaluator runs ahead of the stream's thread by up to ten tasks of ten dispatches,
    // allocating each node's output as it goes, and an MLX op is a dispatch or two. A node here
    // stands for up to some twenty of them (RoPE) and writes as much as several, so with one
    // dispatch it let the evaluator allocate far more ahead of the computation than MLX's ops
    // would: a prefill's peak rose by a quarter at 2048 tokens. It counts as one more (empty)
    // dispatch per 32 KiB it writes, up to 8 (more would flood the window, whose throttle waits
    // for one task per node: benchmark/peak-memory.md); a decode step's small outputs add none.
    for (size_t i = 0, n = std::min<size_t>(8, out.nbytes() / (32 << 10)); i < n; i++) enc.dispatch([] {});
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error(name_ + " runs on the CPU only");
  }

  const char* name() const override { return name_.c_str(); }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const CpuKernelF32*>(&other);
    return o && o->fn_ == fn_ && o->ctx_ == ctx_ && o->params_ == params_ && o->name_ == name_ &&
           o->in_place_ == in_place_ && o->bits16_ == bits16_;
  }

 private:
  std::string name_;
  mlxn_cpu_kernel_fn fn_;
  const void* ctx_;
  std::vector<float> params_;
  bool in_place_;
  bool bits16_;
};

// The primitive behind mlxn_write_rows: row i of `rows` [B, H, 1, D] into
// cache i [1, H, C_i, D] at position pos[i]. Output i takes over cache i's
// buffer where MLX may donate it (nothing else holds the cache: the usual
// case, as for MLX's own slice_update), else starts as a copy of it; then one
// task writes every row. One node where a slice_update per row was two nodes
// per sequence and layer of a batched decode step (a row slice and the update).
// Output i's inputs are `rows` and cache i alone (mlxn_write_rows), not every
// cache: MLX gives each output of a node its own list of the inputs, so with
// the whole list each cache would be held once per output and never be
// donatable (every cache copied whole at every step). The caches are scheduled
// before the node is made, so that MLX, which walks the inputs of only one
// output of a node, has nothing of theirs left to run.
class WriteRows : public mx::Primitive {
 public:
  WriteRows(mx::Stream s, std::vector<int32_t> pos) : mx::Primitive(s), pos_(std::move(pos)) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    const auto& rows = inputs[0];
    const size_t esize = rows.itemsize();
    const size_t heads = rows.shape(1), d = rows.shape(3);
    auto& enc = mx::cpu::get_command_encoder(stream());
    std::vector<std::shared_ptr<mx::array::Data>> keep;
    std::vector<Gather> gathers;
    auto gather = [&](const mx::array& in, void* dst) { gathers.push_back({in.data<void>(), in.shape(), in.strides(), dst, esize}); };
    enc.set_input_array(rows);
    for (auto& out : outputs) enc.set_input_array(out.inputs()[1]);
    const void* src = rows.data<void>();
    keep.push_back(rows.data_shared_ptr());
    if (!rows.flags().row_contiguous) {
      mx::array copy(rows.shape(), rows.dtype(), nullptr, {});
      copy.set_data(mx::allocator::malloc(copy.nbytes()));
      gather(rows, copy.data<void>());
      src = copy.data<void>();
      keep.push_back(copy.data_shared_ptr());
    }
    std::vector<char*> dsts;
    std::vector<size_t> caps;
    for (size_t i = 0; i < outputs.size(); i++) {
      const auto& cache = outputs[i].inputs()[1];
      auto& out = outputs[i];
      if (cache.flags().row_contiguous && cache.is_donatable()) {
        out.copy_shared_buffer(cache);
      } else {
        out.set_data(mx::allocator::malloc(out.nbytes()));
        keep.push_back(cache.data_shared_ptr());
        gather(cache, out.data<void>());
      }
      enc.set_output_array(out);
      keep.push_back(out.data_shared_ptr());
      dsts.push_back(out.data<char>());
      caps.push_back(cache.shape(2));
    }
    enc.dispatch([src = static_cast<const char*>(src), dsts = std::move(dsts), caps = std::move(caps), pos = pos_,
                  keep = std::move(keep), gathers = std::move(gathers), esize, heads, d]() {
      for (auto& g : gathers) g.run();
      const size_t run = d * esize;
      for (size_t i = 0; i < dsts.size(); i++) {
        for (size_t h = 0; h < heads; h++) {
          std::memcpy(dsts[i] + (h * caps[i] + pos[i]) * run, src + (i * heads + h) * run, run);
        }
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("WriteRows runs on the CPU only");
  }

  const char* name() const override { return "WriteRows"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const WriteRows*>(&other);
    return o && o->pos_ == pos_;
  }

 private:
  std::vector<int32_t> pos_;
};

}  // namespace

int mlxn_cpu_kernel_f32(const char* name, mlxn_cpu_kernel_fn fn, const void* ctx, const float* params,
                        size_t n_params, const mlxn_array* inputs, size_t n_inputs, const int32_t* out_shape,
                        size_t out_ndim, int flags, mlxn_array* out) {
  return guard([&] {
    if (!fn) throw std::invalid_argument("null kernel function");
    const bool in_place = flags & MLXN_KERNEL_IN_PLACE, bits16 = flags & MLXN_KERNEL_BITS16;
    if (in_place && (n_inputs == 0 || mx::Shape(out_shape, out_shape + out_ndim) != unwrap_all(inputs, 1)[0].shape()))
      throw std::invalid_argument("an in-place kernel's output has the shape of its first input");
    auto s = mx::default_stream(mx::default_device());
    if (s.device != mx::Device::cpu) throw std::invalid_argument("CPU kernels need the CPU device");
    std::vector<mx::array> ins;
    // uint32 inputs stay as they are (their bits reach the kernel: no cast, and no
    // reinterpreting view node per call), and so do 16-bit float ones under
    // bits16; any other dtype is cast to float32 (a no-op for float32). Views are
    // made row-contiguous by the node itself.
    for (auto& a : unwrap_all(inputs, n_inputs)) {
      const bool raw = a.dtype() == mx::uint32 || (bits16 && (a.dtype() == mx::float16 || a.dtype() == mx::bfloat16));
      ins.push_back(raw ? a : mx::astype(a, mx::float32));
    }
    auto prim = std::make_shared<CpuKernelF32>(s, name ? name : "CpuKernelF32", fn, ctx,
                                               std::vector<float>(params, params + n_params), in_place, bits16);
    *out = wrap(mx::array(shape_of(out_shape, out_ndim), mx::float32, std::move(prim), std::move(ins)));
  });
}

int mlxn_write_rows(mlxn_array rows, const mlxn_array* caches, const int32_t* pos, size_t n, mlxn_array* outs) {
  return guard([&] {
    const auto& r = A(rows);
    if (r.ndim() != 4 || r.shape(0) != static_cast<int>(n) || r.shape(2) != 1)
      throw std::invalid_argument("write_rows: rows must be [n, heads, 1, dim]");
    if (r.itemsize() != 2 && r.itemsize() != 4) throw std::invalid_argument("write_rows: 16- or 32-bit values only");
    auto s = mx::default_stream(mx::default_device());
    if (s.device != mx::Device::cpu) throw std::invalid_argument("write_rows needs the CPU device");
    std::vector<mx::array> unscheduled;
    for (size_t i = 0; i < n; i++) {
      const auto& c = A(caches[i]);
      if (c.ndim() != 4 || c.shape(0) != 1 || c.shape(1) != r.shape(1) || c.shape(3) != r.shape(3) || c.dtype() != r.dtype())
        throw std::invalid_argument("write_rows: each cache must be [1, heads, capacity, dim] of the rows' dtype");
      if (pos[i] < 0 || pos[i] >= c.shape(2)) throw std::invalid_argument("write_rows: position outside the cache");
      if (c.status() == mx::array::Status::unscheduled) unscheduled.push_back(c);
    }
    // A new or grown cache (once per 256 positions) is queued now, without waiting for it.
    if (!unscheduled.empty()) mx::async_eval(std::move(unscheduled));
    // As mx::array::make_arrays, but output i gets only `rows` and cache i as inputs (above).
    auto prim = std::make_shared<WriteRows>(s, std::vector<int32_t>(pos, pos + n));
    std::vector<mx::array> made;
    for (size_t i = 0; i < n; i++) made.emplace_back(A(caches[i]).shape(), r.dtype(), prim, std::vector<mx::array>{r, A(caches[i])});
    for (size_t i = 0; i < n; i++) {
      auto siblings = made;
      siblings.erase(siblings.begin() + i);
      made[i].set_siblings(std::move(siblings), static_cast<uint16_t>(i));
    }
    for (size_t i = 0; i < n; i++) outs[i] = wrap(made[i]);
  });
}

int mlxn_memory(size_t* active, size_t* peak, size_t* cache) {
  return guard([&] {
    *active = mx::get_active_memory();
    *peak = mx::get_peak_memory();
    *cache = mx::get_cache_memory();
  });
}

int mlxn_reset_peak_memory(void) {
  return guard([&] { mx::reset_peak_memory(); });
}

int mlxn_clear_cache(void) {
  return guard([&] { mx::clear_cache(); });
}

int mlxn_set_cache_limit(size_t limit, size_t* previous) {
  return guard([&] { *previous = mx::set_cache_limit(limit); });
}

int mlxn_load_safetensors(const char* path, mlxn_tensor_cb on_tensor, mlxn_meta_cb on_meta, void* ctx) {
  return guard([&] {
    auto [tensors, meta] = mx::load_safetensors(std::string(path));
    for (auto& [k, v] : meta) {
      if (on_meta && on_meta(ctx, k.c_str(), v.c_str()) != 0) throw std::runtime_error(g_error);
    }
    for (auto& [k, v] : tensors) {
      // Ownership of the handle passes to the callback.
      if (on_tensor(ctx, k.c_str(), wrap(v)) != 0) throw std::runtime_error(g_error);
    }
  });
}

// Tensors only: the caller reads (and bounds-checks) the header itself.
int mlxn_load_gguf(const char* path, mlxn_tensor_cb on_tensor, void* ctx) {
  return guard([&] {
    auto loaded = mx::load_gguf(std::string(path));
    for (auto& [k, v] : loaded.first) {
      // Ownership of the handle passes to the callback.
      if (on_tensor(ctx, k.c_str(), wrap(v)) != 0) throw std::runtime_error(g_error);
    }
  });
}

int mlxn_save_safetensors(const char* path, const char* const* names, const mlxn_array* arrays, size_t n,
                          const char* const* meta_keys, const char* const* meta_values, size_t n_meta) {
  return guard([&] {
    std::unordered_map<std::string, mx::array> m;
    for (size_t i = 0; i < n; ++i) m.insert({names[i], A(arrays[i])});
    std::unordered_map<std::string, std::string> meta;
    for (size_t i = 0; i < n_meta; ++i) meta[meta_keys[i]] = meta_values[i];
    mx::save_safetensors(std::string(path), m, meta);
  });
}

// ---- Distributed ----

int mlxn_distributed_is_available(const char* backend, int* out) {
  return guard([&] { *out = mx::distributed::is_available(std::string(backend ? backend : "any")) ? 1 : 0; });
}

int mlxn_distributed_init(const char* backend, int strict, mlxn_group* out) {
  return guard([&] { *out = new mlxn_group_s{mx::distributed::init(strict != 0, std::string(backend ? backend : "any"))}; });
}

void mlxn_group_free(mlxn_group g) { delete g; }

int mlxn_group_rank(mlxn_group g, int* out) {
  return guard([&] { *out = G(g).rank(); });
}

int mlxn_group_size(mlxn_group g, int* out) {
  return guard([&] { *out = G(g).size(); });
}

int mlxn_all_sum(mlxn_array x, mlxn_group g, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::distributed::all_sum(A(x), G(g))); });
}

int mlxn_all_gather(mlxn_array x, mlxn_group g, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::distributed::all_gather(A(x), G(g))); });
}

int mlxn_send(mlxn_array x, int dst, mlxn_group g, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::distributed::send(A(x), dst, G(g))); });
}

int mlxn_recv_like(mlxn_array like, int src, mlxn_group g, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::distributed::recv_like(A(like), src, G(g))); });
}

int mlxn_depends(mlxn_array x, mlxn_array dep, mlxn_array* out) {
  return guard([&] { *out = wrap(mx::depends({A(x)}, {A(dep)})[0]); });
}

}  // extern "C"
