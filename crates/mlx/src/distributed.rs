//! MLX's own distributed layer (`mlx.core.distributed`): a group of processes
//! on one of MLX's backends ("ring" over TCP, "mpi", "any" for the first that
//! works), set up from the environment MLX reads, as `mlx.launch` sets it
//! (`MLX_RANK`, `MLX_HOSTFILE` for the ring). The collectives are lazy graph
//! ops, evaluated like any other.
use std::ffi::CString;
use std::os::raw::c_int;
use std::ptr;

use crate::array::make;
use crate::error::check;
use mlx_sys as sys;

use crate::{Array, Error, Result};

/// The processes taking part, and this one's rank among them.
pub struct Group {
    raw: sys::mlxn_group,
}

// SAFETY: the handle owns an MLX Group (a shared pointer to its backend, which
// MLX uses from its stream threads); nothing here hands out references into it.
unsafe impl Send for Group {}
// SAFETY: every method only reads the handle (rank, size, or building a graph
// node that holds its own copy of the group); layers of one model share a
// group through an `Arc` and all run on that model's engine thread.
unsafe impl Sync for Group {}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: `raw` is a live handle this value owns.
        unsafe { sys::mlxn_group_free(self.raw) }
    }
}

fn name(backend: &str) -> Result<CString> {
    CString::new(backend).map_err(|_| Error::new("a backend name has no NUL byte"))
}

/// Whether MLX was built with `backend` ("ring", "mpi", "nccl", "jaccl", "any").
pub fn is_available(backend: &str) -> Result<bool> {
    let b = name(backend)?;
    let mut out: c_int = 0;
    // SAFETY: `b` is NUL-terminated and alive for the call; `out` is a local.
    check(unsafe { sys::mlxn_distributed_is_available(b.as_ptr(), &mut out) })?;
    Ok(out != 0)
}

/// Joins the group `backend` describes from the environment. With `strict`, a
/// backend that cannot start is an error; without, MLX falls back to a group of
/// this process alone (rank 0 of 1).
pub fn init(backend: &str, strict: bool) -> Result<Group> {
    let b = name(backend)?;
    let mut raw = ptr::null_mut();
    // SAFETY: `b` is NUL-terminated and alive for the call; `raw` is written only on success.
    check(unsafe { sys::mlxn_distributed_init(b.as_ptr(), strict as c_int, &mut raw) })?;
    if raw.is_null() {
        return Err(Error::new("MLX returned a null group"));
    }
    Ok(Group { raw })
}

impl Group {
    pub fn rank(&self) -> Result<i32> {
        let mut out: c_int = 0;
        // SAFETY: `self.raw` is live; `out` is a local.
        check(unsafe { sys::mlxn_group_rank(self.raw, &mut out) })?;
        Ok(out)
    }

    pub fn size(&self) -> Result<i32> {
        let mut out: c_int = 0;
        // SAFETY: `self.raw` is live; `out` is a local.
        check(unsafe { sys::mlxn_group_size(self.raw, &mut out) })?;
        Ok(out)
    }

    /// The element-wise sum of `x` over the group (every rank gets it).
    pub fn all_sum(&self, x: &Array) -> Result<Array> {
        // SAFETY: both handles are live for the call; `out` and errors as in `make`.
        make(|out| unsafe { sys::mlxn_all_sum(x.raw, self.raw, out) })
    }

    /// Every rank's `x` concatenated along the first axis, in rank order.
    pub fn all_gather(&self, x: &Array) -> Result<Array> {
        // SAFETY: as in `all_sum`.
        make(|out| unsafe { sys::mlxn_all_gather(x.raw, self.raw, out) })
    }

    /// Sends `x` to rank `dst`; evaluating the result performs the send.
    pub fn send(&self, x: &Array, dst: i32) -> Result<Array> {
        // SAFETY: as in `all_sum`.
        make(|out| unsafe { sys::mlxn_send(x.raw, dst, self.raw, out) })
    }

    /// An array shaped and typed like `like`, received from rank `src`.
    pub fn recv_like(&self, like: &Array, src: i32) -> Result<Array> {
        // SAFETY: as in `all_sum`.
        make(|out| unsafe { sys::mlxn_recv_like(like.raw, src, self.raw, out) })
    }
}

/// `x`, evaluated only once `dep` is: keeps a side effect (a `send`) in the
/// graph of what is evaluated, as `mx.depends`.
pub fn depends(x: &Array, dep: &Array) -> Result<Array> {
    // SAFETY: both handles are live for the call; `out` and errors as in `make`.
    make(|out| unsafe { sys::mlxn_depends(x.raw, dep.raw, out) })
}
