//! Evaluation, streams and compile.
use std::ffi::CString;
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use mlx_sys as sys;

use crate::array::Array;
use crate::error::{check, Error, Result};

pub fn eval(arrays: &[&Array]) -> Result<()> {
    let raws: Vec<_> = arrays.iter().map(|a| a.raw).collect();
    // SAFETY: `raws` holds live handles borrowed from `arrays` and outlives the call, its length passed
    // with it; the shim copies the arrays, keeping no pointer.
    check(unsafe { sys::mlxn_eval(raws.as_ptr(), raws.len()) })
}

/// Starts evaluating in the background; a later `eval` or read waits for it.
pub fn async_eval(arrays: &[&Array]) -> Result<()> {
    let raws: Vec<_> = arrays.iter().map(|a| a.raw).collect();
    // SAFETY: `raws` holds live handles borrowed from `arrays` and outlives the call, its length passed
    // with it; the shim copies the arrays, keeping no pointer.
    check(unsafe { sys::mlxn_async_eval(raws.as_ptr(), raws.len()) })
}

/// Creates a stream on the default device and makes it this thread's default,
/// so every op issued afterwards on this thread runs there.
pub fn use_new_default_stream() -> Result<i32> {
    let mut idx: c_int = 0;
    // SAFETY: `idx` is a local, written by the shim only on success.
    check(unsafe { sys::mlxn_new_stream(&mut idx) })?;
    // SAFETY: a plain value; the shim catches every C++ exception.
    check(unsafe { sys::mlxn_set_default_stream(idx) })?;
    Ok(idx)
}

/// Turns compilation on or off for the whole process (`mx.disable_compile()`): a
/// [`Compiled`] made while it is off runs its function as plain ops. For benchmarks.
pub fn set_compile_enabled(enabled: bool) -> Result<()> {
    // SAFETY: a plain value; the shim catches every C++ exception.
    check(unsafe { sys::mlxn_set_compile_enabled(enabled as c_int) })
}

pub fn synchronize() -> Result<()> {
    // SAFETY: no arguments; the shim catches every C++ exception.
    check(unsafe { sys::mlxn_synchronize() })
}

type Traced = Box<dyn Fn(&[Array]) -> Result<Vec<Array>> + Send>;

/// A function traced once by `mlx::core::compile` and replayed as a fused graph.
pub struct Compiled {
    raw: sys::mlxn_closure,
}

// SAFETY: the shim's closure is a heap object with no thread affinity, and `Compiled` is not `Sync`, so
// one thread at a time uses it. But `new` does not require the traced function to be `Send`, and `call`
// and drop run and drop it on whichever thread holds this value: callers must only capture what may
// move between threads (Arrays, plain data).
unsafe impl Send for Compiled {}

impl Drop for Compiled {
    fn drop(&mut self) {
        // SAFETY: `self.raw` is the closure `new` got from the shim, owned by `self` and freed only
        // here.
        unsafe { sys::mlxn_closure_free(self.raw) }
    }
}

// Safety: called by the shim only, with `ctx` from `new` (a `Box<Traced>` that lives until
// `drop_traced`), `n_inputs` live handles at `inputs` that the shim owns, and `max_outputs` writable
// slots at `outputs`.
unsafe extern "C" fn trampoline(
    ctx: *mut c_void,
    inputs: *const sys::mlxn_array,
    n_inputs: usize,
    outputs: *mut sys::mlxn_array,
    n_outputs: *mut usize,
    max_outputs: usize,
) -> c_int {
    let f = &*(ctx as *const Traced);
    // The shim owns the input handles; take our own references to them.
    let args: Vec<Array> = (0..n_inputs)
        .map(|i| {
            let mut out = ptr::null_mut();
            sys::mlxn_clone(*inputs.add(i), &mut out);
            Array { raw: out }
        })
        .collect();
    let result = catch_unwind(AssertUnwindSafe(|| f(&args)));
    let fail = |msg: String| {
        let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        sys::mlxn_set_error(c.as_ptr());
        1
    };
    match result {
        Ok(Ok(outs)) if outs.len() <= max_outputs => {
            for (i, a) in outs.into_iter().enumerate() {
                *outputs.add(i) = a.raw;
                *n_outputs = i + 1;
                std::mem::forget(a); // ownership passes to the shim
            }
            0
        }
        Ok(Ok(outs)) => fail(format!("compiled function returned {} outputs, at most {max_outputs}", outs.len())),
        Ok(Err(e)) => fail(e.message),
        Err(_) => fail("compiled function panicked".into()),
    }
}

// Safety: the shim calls it once, when its closure goes (or `mlxn_compile` fails), with the `ctx`
// leaked from a `Box<Traced>` in `new`.
unsafe extern "C" fn drop_traced(ctx: *mut c_void) {
    drop(Box::from_raw(ctx as *mut Traced));
}

impl Compiled {
    /// `shapeless`: reuse the trace when input shapes change (only for graphs
    /// whose ops do not depend on shapes).
    pub fn new(f: impl Fn(&[Array]) -> Result<Vec<Array>> + Send + 'static, shapeless: bool) -> Result<Compiled> {
        let boxed: Box<Traced> = Box::new(Box::new(f));
        let ctx = Box::into_raw(boxed) as *mut c_void;
        let mut raw = ptr::null_mut();
        // On failure the shim has already released ctx through drop_traced.
        // SAFETY: `trampoline` and `drop_traced` have the shim's signatures and contracts; `ctx` is a
        // leaked `Box<Traced>` that the shim owns from here and frees through `drop_traced` exactly
        // once (when the closure goes, or at once on failure); `raw` is a local written only on
        // success.
        check(unsafe { sys::mlxn_compile(trampoline, ctx, Some(drop_traced), shapeless as c_int, &mut raw) })?;
        Ok(Compiled { raw })
    }

    pub fn call(&self, inputs: &[&Array]) -> Result<Vec<Array>> {
        let raws: Vec<_> = inputs.iter().map(|a| a.raw).collect();
        let mut outs = vec![ptr::null_mut(); 64];
        let mut n = 0usize;
        // SAFETY: `self.raw` is the live closure `self` owns; `raws` holds live handles borrowed from
        // `inputs`, its length passed; `outs` has `outs.len()` slots, passed as the maximum, and the
        // shim writes `n` of them (new handles, each owned by the Array made from it below) only on
        // success.
        check(unsafe { sys::mlxn_closure_call(self.raw, raws.as_ptr(), raws.len(), outs.as_mut_ptr(), outs.len(), &mut n) })?;
        let result: Vec<Array> = outs.into_iter().take(n).map(|raw| Array { raw }).collect();
        if result.is_empty() {
            return Err(Error::new("compiled function returned no outputs"));
        }
        Ok(result)
    }
}
