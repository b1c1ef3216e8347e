//! MLX allocator statistics, in bytes.
use mlx_sys as sys;

use crate::error::{check, Result};

#[derive(Debug, Clone, Copy)]
pub struct MemoryStats {
    pub active: usize,
    pub peak: usize,
    pub cache: usize,
}

pub fn stats() -> Result<MemoryStats> {
    let (mut active, mut peak, mut cache) = (0, 0, 0);
    // SAFETY: the three pointers are to locals, written by the shim only on success.
    check(unsafe { sys::mlxn_memory(&mut active, &mut peak, &mut cache) })?;
    Ok(MemoryStats { active, peak, cache })
}

pub fn reset_peak() -> Result<()> {
    // SAFETY: no arguments; the shim catches every C++ exception.
    check(unsafe { sys::mlxn_reset_peak_memory() })
}

pub fn clear_cache() -> Result<()> {
    // SAFETY: no arguments; the shim catches every C++ exception.
    check(unsafe { sys::mlxn_clear_cache() })
}

/// Returns the previous limit.
pub fn set_cache_limit(limit: usize) -> Result<usize> {
    let mut prev = 0;
    // SAFETY: `prev` is a local, written by the shim only on success.
    check(unsafe { sys::mlxn_set_cache_limit(limit, &mut prev) })?;
    Ok(prev)
}
