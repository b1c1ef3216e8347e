//! Float32 kernels written in Rust that run as one node of an MLX graph on the
//! CPU stream, for work MLX's CPU ops do slowly (for example a full sort where
//! only a sum in sorted order is needed). The kernel sees the inputs' buffers in
//! place: no copy to the host, no extra sync.
use std::ffi::CString;
use std::ops::Range;
use std::os::raw::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::slice;
use std::sync::OnceLock;

use mlx_sys as sys;

use crate::array::make;
use crate::error::{Error, Result};
use crate::Array;

/// `params` are the numbers given at build time; each input is one
/// row-contiguous float32 buffer; `out` is the output to fill. It runs on MLX's
/// stream thread and cannot report an error: it must handle any input (NaN
/// included) and write every output element.
pub type KernelF32 = fn(params: &[f32], inputs: &[&[f32]], out: &mut [f32]);

// Safety: called by the shim only (`build`), with `ctx` a `KernelF32` and the buffers described at each
// use below.
unsafe extern "C" fn trampoline(
    ctx: *const c_void,
    params: *const f32,
    n_params: usize,
    inputs: *const *const f32,
    sizes: *const usize,
    n_inputs: usize,
    out: *mut f32,
    out_size: usize,
) {
    // SAFETY: `ctx` is the `KernelF32` that `build` passed as `f as *const c_void`: a non-null function
    // pointer, the size of a data pointer on every target MLX supports, turned back into the type it
    // came from.
    let f: KernelF32 = std::mem::transmute::<*const c_void, KernelF32>(ctx);
    // SAFETY: `params` is the node's own copy of the parameters, `n_params` floats that live for this
    // call (null only when empty, which is not read).
    let params = if n_params == 0 { &[][..] } else { slice::from_raw_parts(params, n_params) };
    // SAFETY: `sizes[i]` and `inputs[i]` (i < `n_inputs`) give each input's row-contiguous, aligned
    // float32 buffer and its length, kept alive by the dispatched task for this call and not written
    // during it; none is the output's buffer (in place, input 0, whose buffer the output may take over,
    // is not handed over).
    let ins: Vec<&[f32]> = (0..n_inputs)
        .map(|i| {
            let n = *sizes.add(i);
            if n == 0 {
                &[][..]
            } else {
                slice::from_raw_parts(*inputs.add(i), n)
            }
        })
        .collect();
    // SAFETY: `out` is the output's own float32 buffer of `out_size` elements, which only this call
    // writes while it runs. (Fresh from the allocator it is uninitialized unless in place: a
    // `KernelF32` must write `out` before it reads it.)
    let out = if out_size == 0 { &mut [][..] } else { slice::from_raw_parts_mut(out, out_size) };
    // A panic must not unwind into C++; the output then reads as NaN.
    if catch_unwind(AssertUnwindSafe(|| f(params, &ins, &mut *out))).is_err() {
        out.fill(f32::NAN);
    }
}

/// True when MLX's default device is the CPU, where `cpu_kernel_f32` may run.
/// Asked once per op that has a kernel, so it must not query the device: on
/// CUDA, `info::device()` reads the device's free memory each call, and asking
/// it per quantized matmul made the 4-bit 0.6B model's decode graph take
/// 2.1-3.2 ms per token to build on an H100 against 1.5 ms for the float32 one.
pub fn cpu_default() -> bool {
    // SAFETY: no arguments; the shim function catches its own exceptions (returning 0).
    unsafe { sys::mlxn_default_device_is_cpu() == 1 }
}

/// The custom CPU kernels, each with its own off switch (an environment
/// variable set to `0`); `MLX_NODE_CPU_KERNELS=0` switches them all off, which
/// leaves MLX's own ops everywhere (the path Metal and CUDA builds take).
/// Read once per process. `docs/kernels.md` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// `cpu::gemv`: float32 `x @ w.T` for one or two rows with OpenBLAS's bits.
    Gemv,
    /// `cpu::qmm`: quantized matmul.
    Qmm,
    /// `cpu::rows`: float32 `x @ w.T` for a few dozen rows (S3Gen, within tolerance).
    Rows,
    /// `attention_cpu`: float32 attention on the CPU stream.
    Attention,
    /// `cpu::math`: softmax, GELU, sin and SwiGLU with MLX's bits.
    Math,
    /// `lm::sampling`: top-p, min-p, top-k and the categorical draw.
    Sampling,
    /// `tts`: Snake and Mish activations.
    Speech,
    /// `cpu::qmm_int8`: quantized matmul on 8-bit activations (`precision: 'fast'`).
    QmmInt8,
    /// `cpu::decode_attention`: a decode step's attention as one node (`precision: 'fast'`).
    DecodeAttention,
}

impl Kernel {
    pub const ALL: [Kernel; 9] = [
        Kernel::Gemv,
        Kernel::Qmm,
        Kernel::Rows,
        Kernel::Attention,
        Kernel::Math,
        Kernel::Sampling,
        Kernel::Speech,
        Kernel::QmmInt8,
        Kernel::DecodeAttention,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kernel::Gemv => "gemv",
            Kernel::Qmm => "qmm",
            Kernel::Rows => "rows",
            Kernel::Attention => "attention",
            Kernel::Math => "math",
            Kernel::Sampling => "sampling",
            Kernel::Speech => "speech",
            Kernel::QmmInt8 => "qmmInt8",
            Kernel::DecodeAttention => "decodeAttention",
        }
    }

    /// The variable that switches this kernel off.
    pub fn switch(self) -> &'static str {
        match self {
            Kernel::Gemv => "MLX_NODE_GEMV_KERNEL",
            Kernel::Qmm => "MLX_NODE_QMM_KERNEL",
            Kernel::Rows => "MLX_NODE_ROWS_KERNEL",
            Kernel::Attention => "MLX_NODE_ATTENTION_KERNEL",
            Kernel::Math => "MLX_NODE_MATH_KERNELS",
            Kernel::Sampling => "MLX_NODE_SAMPLING_KERNELS",
            Kernel::Speech => "MLX_NODE_SPEECH_KERNELS",
            Kernel::QmmInt8 => "MLX_NODE_QMM_INT8_KERNEL",
            Kernel::DecodeAttention => "MLX_NODE_DECODE_ATTENTION_KERNEL",
        }
    }

    /// Whether neither its own switch nor `MLX_NODE_CPU_KERNELS` is `0`.
    pub fn switched_on(self) -> bool {
        static ON: OnceLock<[bool; 9]> = OnceLock::new();
        let on = ON.get_or_init(|| {
            let off = |var: &str| std::env::var(var).is_ok_and(|v| v.trim() == "0");
            let all_off = off("MLX_NODE_CPU_KERNELS");
            Kernel::ALL.map(|k| !all_off && !off(k.switch()))
        });
        // `ALL` lists the variants in declaration order.
        on[self as usize]
    }

    /// Switched on and MLX's default device is the CPU: the kernel may run
    /// (it may still decline an input, or need AVX2 and FMA).
    pub fn enabled(self) -> bool {
        self.switched_on() && cpu_default()
    }
}

/// A graph node computing `f(params, inputs) -> out` on the CPU stream. Inputs
/// are cast to float32 (a no-op when they already are), except uint32 ones
/// (packed quantized weights), which `f` sees as their bits; a view that is not
/// one row-contiguous block is copied into one by the node itself (no graph
/// node of its own: one per input was a dispatch per input, for a copy that
/// hardly ever happens).
pub fn cpu_kernel_f32(name: &str, f: KernelF32, params: &[f32], inputs: &[&Array], out_shape: &[i32]) -> Result<Array> {
    build(name, f, params, inputs, out_shape, 0)
}

/// `cpu_kernel_f32`, except that float16 and bfloat16 inputs reach `f` as
/// their bits, two values to a word (lower-indexed in the low half) and their
/// sizes in words, as uint32 ones do: a 16-bit KV cache read in place with no
/// cast and no reinterpreting view node per cache (two per sequence and layer
/// in a batched step). Such an input must hold an even number of values.
pub fn cpu_kernel_f32_bits16(name: &str, f: KernelF32, params: &[f32], inputs: &[&Array], out_shape: &[i32]) -> Result<Array> {
    build(name, f, params, inputs, out_shape, BITS16)
}

// The shim's `flags` (shim.h).
const IN_PLACE: i32 = 1;
const BITS16: i32 = 2;

/// A graph node that rewrites `x`'s values in place: `f` gets `out` holding a
/// float32 copy of `x` and `inputs` without `x`. The copy is free when MLX may
/// donate `x`'s buffer (nothing else uses `x`), as its element-wise ops do, so
/// the node costs no second buffer of `x`'s size.
pub fn cpu_kernel_f32_in_place(name: &str, f: KernelF32, params: &[f32], x: &Array, others: &[&Array]) -> Result<Array> {
    let inputs: Vec<&Array> = std::iter::once(x).chain(others.iter().copied()).collect();
    build(name, f, params, &inputs, &x.shape(), IN_PLACE)
}

fn build(name: &str, f: KernelF32, params: &[f32], inputs: &[&Array], out_shape: &[i32], flags: i32) -> Result<Array> {
    let name = CString::new(name).map_err(|_| Error::new("kernel name contains NUL"))?;
    let raws: Vec<_> = inputs.iter().map(|a| a.raw).collect();
    // SAFETY: `name` (NUL-terminated), `params`, `raws` and `out_shape` outlive the call, each slice
    // passed with its length (`params` as null when empty), and the node copies the name and
    // parameters it keeps; the handles in `raws` are live; `trampoline` has the shim's kernel
    // signature, and `f as *const c_void` is the `KernelF32` it turns back into a function (a `fn` is
    // `'static`, so the node may run it at any later eval); `out` and errors as in `make`.
    make(|out| unsafe {
        sys::mlxn_cpu_kernel_f32(
            name.as_ptr(),
            trampoline,
            f as *const c_void,
            if params.is_empty() { ptr::null() } else { params.as_ptr() },
            params.len(),
            raws.as_ptr(),
            raws.len(),
            out_shape.as_ptr(),
            out_shape.len(),
            flags,
            out,
        )
    })
}

/// Runs `f` over `0..count` (column blocks of a kernel's output), shared in
/// chunks with rayon's pool when `parallel` (`share`: the calling thread works
/// too and never waits for a pool thread that has not started). Each range must
/// write only its own part of the output.
pub(crate) fn par_ranges(count: usize, parallel: bool, f: impl Fn(Range<usize>) + Sync) {
    let helpers = if parallel { rayon::current_num_threads() - 1 } else { 0 };
    super::share::share(count, helpers, &f);
}

/// A kernel's output buffer shared by the threads of `par_ranges`, which
/// write disjoint elements.
#[derive(Clone, Copy)]
pub(crate) struct OutPtr(pub(crate) *mut f32);
// SAFETY: every thread writes a disjoint set of elements (its own columns).
unsafe impl Send for OutPtr {}
// SAFETY: as for Send: the threads sharing it write disjoint elements, none reads another's, and
// `par_ranges` joins them all before the buffer is used again.
unsafe impl Sync for OutPtr {}
