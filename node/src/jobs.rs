//! The table of a model's running jobs (generations or syntheses): each has
//! an abort flag and a channel of events that JS drains with `nextEvents`.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::UnboundedReceiver;

use crate::errors::{js_error, Code};

type Result<T> = napi::Result<T, String>;

struct Job<E> {
    events: Arc<tokio::sync::Mutex<UnboundedReceiver<E>>>,
    abort: Arc<AtomicBool>,
}

pub struct Jobs<E> {
    table: Mutex<HashMap<u32, Job<E>>>,
    next_id: AtomicU32,
}

impl<E> Jobs<E> {
    pub fn new() -> Self {
        Jobs { table: Mutex::new(HashMap::new()), next_id: AtomicU32::new(1) }
    }

    pub fn add(&self, events: UnboundedReceiver<E>, abort: Arc<AtomicBool>) -> Result<u32> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let job = Job { events: Arc::new(tokio::sync::Mutex::new(events)), abort };
        self.table.lock().map_err(|_| js_error(Code::MlxError, "job table poisoned"))?.insert(id, job);
        Ok(id)
    }

    /// Waits for at least one event of job `id` and returns all that are
    /// ready, up to and including the one `ends` the job (then forgotten).
    pub async fn next(&self, id: u32, ends: impl Fn(&E) -> bool) -> Result<Vec<E>> {
        let events = {
            let table = self.table.lock().map_err(|_| js_error(Code::MlxError, "job table poisoned"))?;
            table.get(&id).map(|j| j.events.clone())
        }
        .ok_or_else(|| js_error(Code::InvalidArgument, format!("no running job with id {id}")))?;
        let mut rx = events.lock().await;
        let mut out = Vec::new();
        let Some(first) = rx.recv().await else {
            self.forget(id);
            return Err(js_error(Code::MlxError, "the engine stopped before finishing"));
        };
        let mut next = Some(first);
        while let Some(ev) = next {
            let last = ends(&ev);
            out.push(ev);
            if last {
                self.forget(id);
                break;
            }
            next = rx.try_recv().ok();
        }
        Ok(out)
    }

    /// Stops job `id` at its next step.
    pub fn abort(&self, id: u32) {
        if let Ok(table) = self.table.lock() {
            if let Some(j) = table.get(&id) {
                j.abort.store(true, Ordering::SeqCst);
            }
        }
    }

    pub fn abort_all(&self) {
        if let Ok(table) = self.table.lock() {
            for j in table.values() {
                j.abort.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Stops listening to job `id` and aborts it.
    pub fn cancel(&self, id: u32) {
        self.abort(id);
        self.forget(id);
    }

    fn forget(&self, id: u32) {
        if let Ok(mut table) = self.table.lock() {
            table.remove(&id);
        }
    }
}

/// What every model class behind JS shares: its job table and whether it was
/// disposed. Declared first in a class, it drops first: its jobs are aborted
/// before the worker's drop waits for the model to be freed.
pub struct Lifecycle<E> {
    pub jobs: Jobs<E>,
    disposed: std::sync::atomic::AtomicBool,
    /// What JS calls it, for the DISPOSED message ("the model", "the speech model").
    what: &'static str,
}

impl<E> Lifecycle<E> {
    pub fn new(what: &'static str) -> Self {
        Lifecycle { jobs: Jobs::new(), disposed: std::sync::atomic::AtomicBool::new(false), what }
    }

    pub fn is_disposed(&self) -> bool {
        self.disposed.load(Ordering::SeqCst)
    }

    /// DISPOSED once disposed.
    pub fn live(&self) -> Result<()> {
        if self.is_disposed() {
            Err(js_error(Code::Disposed, format!("{} has been disposed", self.what)))
        } else {
            Ok(())
        }
    }

    /// Marks it disposed and stops every job at its next step; true the first
    /// time only (the caller then shuts its worker down).
    pub fn dispose(&self) -> bool {
        if self.disposed.swap(true, Ordering::SeqCst) {
            return false;
        }
        self.jobs.abort_all();
        true
    }
}

/// Dropped without dispose() (collected, or at exit): stop its jobs, so that the
/// worker's drop, which waits for the model to be freed, does not wait for them.
impl<E> Drop for Lifecycle<E> {
    fn drop(&mut self) {
        self.jobs.abort_all();
    }
}
