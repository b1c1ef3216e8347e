//! Work sharing for one kernel call: the calling thread (MLX's stream thread)
//! takes chunks of `0..count` from a shared counter, and helpers from rayon's
//! pool take chunks too once they start. The caller never waits for a helper
//! that has not started: where the other cores are busy (on a 2-core machine,
//! with the thread that builds and queues MLX's graph), the caller does the
//! work alone instead of sleeping until a helper is scheduled.
use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::sync::Arc;

/// Chunks per participating thread: small enough that a late helper still
/// finds work and that the caller's wait for a running helper is one chunk.
const CHUNKS_PER_THREAD: usize = 8;

/// The closure of one call, with its lifetime erased: a helper calls it only
/// while counted in `active` with the call not yet closed (`help`), and the
/// caller does not leave `share` while any helper is counted.
type Work = dyn Fn(Range<usize>) + Sync;

struct Shared {
    next: AtomicUsize,
    /// Helpers inside `help`.
    active: AtomicUsize,
    closed: AtomicBool,
    panicked: AtomicBool,
    count: usize,
    chunk: usize,
    work: *const Work,
}

// SAFETY: `work` points to a `Sync` closure, called only while `share`'s frame holds it (see `Work`);
// the rest are atomics and plain numbers.
unsafe impl Send for Shared {}
// SAFETY: as for Send.
unsafe impl Sync for Shared {}

impl Shared {
    /// Takes chunks until none are left.
    ///
    /// # Safety
    /// `work` must be live: the caller inside `share`, or a helper that entered.
    unsafe fn run(&self) {
        loop {
            let start = self.next.fetch_add(1, Relaxed).saturating_mul(self.chunk);
            if start >= self.count {
                return;
            }
            (*self.work)(start..(start + self.chunk).min(self.count));
        }
    }

    /// A helper's whole part: it enters only while the caller has not closed
    /// the call (SeqCst on both sides: either the caller sees it active, or it
    /// sees the call closed).
    fn help(&self) {
        self.active.fetch_add(1, SeqCst);
        if !self.closed.load(SeqCst) {
            // SAFETY: entered before the close, so the caller waits for `active` to drop before leaving.
            if catch_unwind(AssertUnwindSafe(|| unsafe { self.run() })).is_err() {
                self.panicked.store(true, Relaxed);
            }
        }
        self.active.fetch_sub(1, Release);
    }
}

/// Runs `f` over `0..count` in chunks, on the calling thread and on up to
/// `helpers` threads of rayon's pool as they become free. Each chunk must
/// write only its own part of the output. Returns once every chunk is done.
pub(crate) fn share(count: usize, helpers: usize, f: &(dyn Fn(Range<usize>) + Sync)) {
    let helpers = helpers.min(count.saturating_sub(1));
    if helpers == 0 {
        return f(0..count);
    }
    let chunk = count.div_ceil((helpers + 1) * CHUNKS_PER_THREAD).max(1);
    // SAFETY: only the lifetime is erased; `work` is called by helpers only between their entry and
    // `active` dropping back, and this function does not return before that (the wait below).
    let work: *const Work = unsafe { std::mem::transmute::<*const (dyn Fn(Range<usize>) + Sync + '_), *const Work>(f) };
    let shared = Arc::new(Shared {
        next: AtomicUsize::new(0),
        active: AtomicUsize::new(0),
        closed: AtomicBool::new(false),
        panicked: AtomicBool::new(false),
        count,
        chunk,
        work,
    });
    for _ in 0..helpers {
        let s = Arc::clone(&shared);
        rayon::spawn(move || s.help());
    }
    // SAFETY: `f` is live in this frame.
    let mine = catch_unwind(AssertUnwindSafe(|| unsafe { shared.run() }));
    shared.closed.store(true, SeqCst);
    let mut spins = 0u32;
    while shared.active.load(SeqCst) != 0 {
        // A helper inside a chunk: wait one chunk's time, spinning first.
        spins += 1;
        if spins < 1 << 12 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    if let Err(p) = mine {
        resume_unwind(p);
    }
    if shared.panicked.load(Relaxed) {
        panic!("a kernel's helper thread panicked");
    }
}

/// A mutable buffer whose disjoint parts `share`'s chunks write, one part per
/// chunk.
pub(crate) struct Disjoint<'a, T> {
    ptr: *mut T,
    len: usize,
    _buffer: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: threads reach the buffer only through `part`, whose callers promise disjoint parts.
unsafe impl<T: Send> Sync for Disjoint<'_, T> {}

impl<'a, T> Disjoint<'a, T> {
    pub(crate) fn new(buffer: &'a mut [T]) -> Self {
        Disjoint { ptr: buffer.as_mut_ptr(), len: buffer.len(), _buffer: std::marker::PhantomData }
    }

    /// Elements `start..start + len`.
    ///
    /// # Safety
    /// No other thread may use any of these elements while the part is alive.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn part(&self, start: usize, len: usize) -> &'a mut [T] {
        assert!(start <= self.len && len <= self.len - start, "a part outside its buffer");
        std::slice::from_raw_parts_mut(self.ptr.add(start), len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_index_runs_once() {
        for count in [0, 1, 2, 7, 64, 1000] {
            for helpers in [0, 1, 3] {
                let seen: Vec<AtomicU32> = (0..count).map(|_| AtomicU32::new(0)).collect();
                share(count, helpers, &|r: Range<usize>| r.for_each(|i| _ = seen[i].fetch_add(1, Relaxed)));
                assert!(seen.iter().all(|s| s.load(Relaxed) == 1), "count {count}, helpers {helpers}");
            }
        }
    }

    #[test]
    fn a_panic_in_a_chunk_reaches_the_caller() {
        let r = catch_unwind(|| share(64, 1, &|r: Range<usize>| assert!(!r.contains(&40))));
        assert!(r.is_err());
    }
}
