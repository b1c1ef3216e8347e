//! Safetensors files through MLX's own reader and writer.
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::path::Path;

use mlx_sys as sys;

use crate::array::Array;
use crate::error::{check, Error, Result};

#[derive(Default)]
struct Loaded {
    tensors: HashMap<String, Array>,
    metadata: HashMap<String, String>,
}

// Safety: the shim calls it only within `load_safetensors`, with that call's `ctx` (`&mut Loaded`, used
// by nothing else meanwhile), a NUL-terminated `name` alive for the callback, and a new handle whose
// ownership passes to us.
unsafe extern "C" fn on_tensor(ctx: *mut c_void, name: *const c_char, a: sys::mlxn_array) -> c_int {
    let loaded = &mut *(ctx as *mut Loaded);
    let name = CStr::from_ptr(name).to_string_lossy().into_owned();
    loaded.tensors.insert(name, Array { raw: a });
    0
}

// Safety: as `on_tensor`, with NUL-terminated `key` and `value` alive for the callback.
unsafe extern "C" fn on_meta(ctx: *mut c_void, key: *const c_char, value: *const c_char) -> c_int {
    let loaded = &mut *(ctx as *mut Loaded);
    loaded.metadata.insert(CStr::from_ptr(key).to_string_lossy().into_owned(), CStr::from_ptr(value).to_string_lossy().into_owned());
    0
}

fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.to_string_lossy().as_bytes()).map_err(|_| Error::new(format!("path {} contains a NUL byte", path.display())))
}

/// Loads every tensor (lazily: data is read when first evaluated) and the metadata.
pub fn load_safetensors(path: &Path) -> Result<(HashMap<String, Array>, HashMap<String, String>)> {
    let p = c_path(path)?;
    let mut loaded = Loaded::default();
    // SAFETY: `p` is a NUL-terminated string alive for the call; the callbacks match the shim's types,
    // and the shim hands `ctx` only to them, synchronously within the call, while `loaded` is not
    // otherwise touched; each tensor handle passes to the callback, which gives it to an Array.
    check(unsafe { sys::mlxn_load_safetensors(p.as_ptr(), on_tensor, Some(on_meta), &mut loaded as *mut Loaded as *mut c_void) })?;
    Ok((loaded.tensors, loaded.metadata))
}

/// Every tensor of a GGUF file through MLX's own loader (read now, not
/// lazily). Q4_0, Q4_1 and Q8_0 tensors come back as MLX's affine
/// quantization: `name` (packed uint32), `<base>.scales` and `<base>.biases`
/// (float16, groups of 32). MLX trusts the file's header: check it first.
pub fn load_gguf(path: &Path) -> Result<HashMap<String, Array>> {
    let p = c_path(path)?;
    let mut loaded = Loaded::default();
    // SAFETY: as in `load_safetensors`: `p` outlives the call, the callback matches the shim's type and
    // gets `ctx` only synchronously within the call, and each handle passes to an Array.
    check(unsafe { sys::mlxn_load_gguf(p.as_ptr(), on_tensor, &mut loaded as *mut Loaded as *mut c_void) })?;
    Ok(loaded.tensors)
}

pub fn save_safetensors(path: &Path, tensors: &[(&str, &Array)], metadata: &[(&str, &str)]) -> Result<()> {
    let p = c_path(path)?;
    let cstr = |s: &str| CString::new(s).map_err(|_| Error::new(format!("name {s:?} contains a NUL byte")));
    let names = tensors.iter().map(|(n, _)| cstr(n)).collect::<Result<Vec<_>>>()?;
    let name_ptrs: Vec<_> = names.iter().map(|c| c.as_ptr()).collect();
    let raws: Vec<_> = tensors.iter().map(|(_, a)| a.raw).collect();
    let keys = metadata.iter().map(|(k, _)| cstr(k)).collect::<Result<Vec<_>>>()?;
    let vals = metadata.iter().map(|(_, v)| cstr(v)).collect::<Result<Vec<_>>>()?;
    let key_ptrs: Vec<_> = keys.iter().map(|c| c.as_ptr()).collect();
    let val_ptrs: Vec<_> = vals.iter().map(|c| c.as_ptr()).collect();
    // SAFETY: `name_ptrs` and `raws` both have `tensors.len()` entries (the `n` passed), `key_ptrs` and
    // `val_ptrs` both `metadata.len()`; they point into `p`, `names`, `keys` and `vals`
    // (NUL-terminated, alive to the end of the call) and at handles owned by the borrowed Arrays; the
    // shim copies what it keeps.
    check(unsafe {
        sys::mlxn_save_safetensors(p.as_ptr(), name_ptrs.as_ptr(), raws.as_ptr(), raws.len(), key_ptrs.as_ptr(), val_ptrs.as_ptr(), key_ptrs.len())
    })
}
