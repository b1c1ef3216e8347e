//! `NativePromptCache`, behind index.d.ts's PromptCache: a slot holding one
//! `lm::prompt_cache::PromptCache`, shared by its JS object and the jobs that
//! use it on the model's worker thread. Its MLX arrays are only made, used and
//! freed there; JS reads a snapshot taken after each operation.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use lm::cache::CacheOptions;
use lm::prompt_cache::PromptCache;
use lm::LmError;
use napi_derive::napi;

use crate::engine::ModelState;
use crate::errors::{js_error, Code};
use crate::follow::Op;
use crate::worker::WorkerHandle;

type Result<T> = napi::Result<T, String>;

#[derive(Clone, Default)]
struct Snapshot {
    tokens: Vec<u32>,
    length: usize,
    nbytes: usize,
}

static NEXT_SLOT: AtomicU64 = AtomicU64::new(1);

pub struct CacheSlot {
    /// The engine whose model this cache belongs to.
    pub owner: u64,
    /// Names it to the followers of a split model (crate::follow).
    pub id: u64,
    options: CacheOptions,
    /// Made on first use (on the worker); `None` again once disposed.
    cache: Mutex<Option<PromptCache>>,
    snapshot: Mutex<Snapshot>,
    disposed: AtomicBool,
    /// Taken by a running generation (the batch scheduler holds it).
    busy: AtomicBool,
    metadata: HashMap<String, String>,
    worker: WorkerHandle<ModelState>,
}

impl CacheSlot {
    pub fn new(owner: u64, options: CacheOptions, worker: WorkerHandle<ModelState>) -> Arc<CacheSlot> {
        Arc::new(CacheSlot {
            owner,
            id: NEXT_SLOT.fetch_add(1, Ordering::Relaxed),
            options,
            cache: Mutex::new(None),
            snapshot: Mutex::new(Snapshot::default()),
            disposed: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            metadata: HashMap::new(),
            worker,
        })
    }

    /// A slot holding a cache read from a file (on the worker).
    pub fn loaded(owner: u64, cache: PromptCache, metadata: HashMap<String, String>, worker: WorkerHandle<ModelState>) -> Arc<CacheSlot> {
        let slot = Arc::new(CacheSlot {
            owner,
            id: NEXT_SLOT.fetch_add(1, Ordering::Relaxed),
            options: cache.options().clone(),
            cache: Mutex::new(None),
            snapshot: Mutex::new(Snapshot::default()),
            disposed: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            metadata,
            worker,
        });
        slot.store(cache);
        slot
    }

    fn store(&self, cache: PromptCache) {
        self.update_snapshot(&cache);
        if let Ok(mut c) = self.cache.lock() {
            *c = Some(cache);
        }
    }

    fn update_snapshot(&self, c: &PromptCache) {
        if let Ok(mut s) = self.snapshot.lock() {
            *s = Snapshot { tokens: c.tokens().to_vec(), length: c.len(), nbytes: c.nbytes() };
        }
    }

    pub fn is_disposed(&self) -> bool {
        self.disposed.load(Ordering::SeqCst)
    }

    /// Runs `f` on the cache, on the worker (making it on first use and
    /// registering it with the model state, which frees it with the model).
    pub fn with<R>(
        self: &Arc<Self>,
        state: &mut ModelState,
        f: impl FnOnce(&dyn lm::models::LanguageModel, &mut PromptCache) -> lm::error::Result<R>,
    ) -> lm::error::Result<R> {
        let mut guard = self.cache.lock().map_err(|_| LmError::Mlx("prompt cache lock poisoned".into()))?;
        if self.is_disposed() {
            return Err(LmError::Disposed("the prompt cache has been disposed".into()));
        }
        if guard.is_none() {
            *guard = Some(PromptCache::new(state.model.as_ref(), self.options.clone())?);
        }
        state.register(Arc::downgrade(self));
        let cache = guard.as_mut().expect("made above");
        let result = f(state.model.as_ref(), cache);
        self.update_snapshot(cache);
        result
    }

    pub fn is_busy(&self) -> bool {
        self.busy.load(Ordering::SeqCst)
    }

    /// Takes the cache out for a generation (made on first use); `give_back` returns it.
    pub fn take(self: &Arc<Self>, state: &mut ModelState) -> lm::error::Result<PromptCache> {
        let mut guard = self.cache.lock().map_err(|_| LmError::Mlx("prompt cache lock poisoned".into()))?;
        if self.is_disposed() {
            return Err(LmError::Disposed("the prompt cache has been disposed".into()));
        }
        let cache = match guard.take() {
            Some(c) => c,
            None => PromptCache::new(state.model.as_ref(), self.options.clone())?,
        };
        state.register(Arc::downgrade(self));
        self.busy.store(true, Ordering::SeqCst);
        Ok(cache)
    }

    /// Puts back what `take` took (freed instead when disposed meanwhile).
    pub fn give_back(&self, cache: PromptCache) {
        if !self.is_disposed() {
            self.update_snapshot(&cache);
            if let Ok(mut c) = self.cache.lock() {
                *c = Some(cache);
            }
        }
        self.busy.store(false, Ordering::SeqCst);
    }

    /// Frees the cache now (on the worker, or wherever the model state goes).
    pub fn free(&self) {
        if let Ok(mut c) = self.cache.lock() {
            *c = None;
        }
    }
}

/// What `ModelState` keeps to free its caches with the model.
pub type SlotRef = Weak<CacheSlot>;

#[napi]
pub struct NativePromptCache {
    pub(crate) slot: Arc<CacheSlot>,
}

impl NativePromptCache {
    fn live(&self) -> Result<()> {
        if self.slot.is_disposed() {
            Err(js_error(Code::Disposed, "the prompt cache has been disposed"))
        } else {
            Ok(())
        }
    }
}

#[napi]
impl NativePromptCache {
    #[napi(getter)]
    pub fn tokens(&self) -> Vec<u32> {
        self.slot.snapshot.lock().map(|s| s.tokens.clone()).unwrap_or_default()
    }

    #[napi(getter)]
    pub fn length(&self) -> u32 {
        self.slot.snapshot.lock().map(|s| s.length as u32).unwrap_or(0)
    }

    #[napi(getter)]
    pub fn nbytes(&self) -> f64 {
        self.slot.snapshot.lock().map(|s| s.nbytes as f64).unwrap_or(0.0)
    }

    #[napi(getter)]
    pub fn disposed(&self) -> bool {
        self.slot.is_disposed()
    }

    /// The metadata of the file it was loaded from (empty otherwise).
    #[napi(getter)]
    pub fn metadata(&self) -> HashMap<String, String> {
        self.slot.metadata.clone()
    }

    /// Drops the last `n` positions now. A cache in use by a running prefill or
    /// generation cannot be trimmed (CACHE_BUSY): await that first.
    #[napi]
    pub fn trim(&self, n: u32) -> Result<u32> {
        self.live()?;
        if self.slot.is_busy() {
            return Err(js_error(Code::CacheBusy, "the prompt cache is in use by a running generation; await it before trim()"));
        }
        let mut guard = match self.slot.cache.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::WouldBlock) => {
                return Err(js_error(Code::CacheBusy, "the prompt cache is in use by a running prefill or generation; await it before trim()"))
            }
            Err(_) => return Err(js_error(Code::MlxError, "prompt cache lock poisoned")),
        };
        let Some(cache) = guard.as_mut() else { return Ok(0) };
        // Integer bookkeeping only: no MLX work happens on this thread.
        let done = cache.trim(n as usize);
        self.slot.update_snapshot(cache);
        if done > 0 {
            // Before any later job on this cache (the worker runs jobs in order).
            let (id, n) = (self.slot.id, done);
            self.slot.worker.run(move |state| state.mirror(Op::Trim { cache: id, n }));
        }
        Ok(done as u32)
    }

    /// Frees the cache (after the operations already queued on it); later use fails with DISPOSED.
    #[napi]
    pub fn dispose(&self) {
        if self.slot.disposed.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Ok(mut s) = self.slot.snapshot.lock() {
            *s = Snapshot::default();
        }
        let slot = self.slot.clone();
        // When the model is gone, its state already freed the cache.
        self.slot.worker.run(move |state| {
            slot.free();
            state.mirror(Op::Free { cache: slot.id });
        });
    }
}

/// Collected without dispose(): free the arrays on the worker, not on the JS thread.
impl Drop for NativePromptCache {
    fn drop(&mut self) {
        let slot = self.slot.clone();
        self.slot.worker.run(move |state| {
            slot.free();
            state.mirror(Op::Free { cache: slot.id });
        });
    }
}
