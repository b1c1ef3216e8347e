//! One worker thread per loaded model: it builds the model, owns it and every
//! MLX call for it, and runs jobs in arrival order (concurrent calls queue), so
//! the JS thread never waits on MLX. Text and speech models both run on it.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use lm::LmError;
use tokio::sync::oneshot;

type Job<T> = Box<dyn FnOnce(&mut T) + Send>;

/// What a worker's state does between jobs: a text model's batch scheduler
/// decodes a step whenever it has sequences; other states have nothing to do.
pub trait Tick {
    /// True while `tick` has work: the worker then polls for jobs instead of waiting.
    fn busy(&self) -> bool {
        false
    }
    fn tick(&mut self) {}
}

/// How long a model dropped without dispose() waits for its engine thread (see
/// `Drop for Worker`); jobs are aborted first, so this is a cap, not a usual wait.
pub const DROP_WAIT: Duration = Duration::from_secs(10);

enum Msg<T> {
    Run(Job<T>),
    /// Called once the model is freed.
    Shutdown(Box<dyn FnOnce() + Send>),
}

pub struct Worker<T> {
    tx: mpsc::Sender<Msg<T>>,
}

/// Queues jobs on a worker without owning it (its drop does not shut it down).
pub struct WorkerHandle<T> {
    tx: mpsc::Sender<Msg<T>>,
}

impl<T> WorkerHandle<T> {
    /// As `Worker::run`.
    pub fn run(&self, job: impl FnOnce(&mut T) + Send + 'static) -> bool {
        self.tx.send(Msg::Run(Box::new(job))).is_ok()
    }
}

/// Asks the thread behind `tx` to free its model; `done` runs once it has, or at
/// once when the thread is already gone.
fn send_shutdown<T>(tx: &mpsc::Sender<Msg<T>>, done: Box<dyn FnOnce() + Send>) {
    if let Err(mpsc::SendError(Msg::Shutdown(done))) = tx.send(Msg::Shutdown(done)) {
        done();
    }
}

/// Every engine thread alive, as a way to ask it to shut down (for `shutdown_all`).
type Stopper = Box<dyn Fn(Box<dyn FnOnce() + Send>) + Send>;
static LIVE: Mutex<Vec<(u64, Stopper)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);
static EXITING: AtomicBool = AtomicBool::new(false);

/// True once the process is exiting: running jobs stop at their next step.
pub fn exiting() -> bool {
    EXITING.load(Ordering::Relaxed)
}

/// Called on the process's 'exit' event (index.js), which a process that
/// returns from its event loop and one that calls process.exit() both emit. MLX's
/// static destructors run right after; an engine thread still generating, or freeing
/// a model, meanwhile would corrupt the heap. So: stop every job, then wait (at most
/// `limit` in all) for every engine thread to free its model.
pub fn shutdown_all(limit: Duration) {
    EXITING.store(true, Ordering::SeqCst);
    let (t, r) = mpsc::channel();
    let mut asked = 0;
    if let Ok(live) = LIVE.lock() {
        for (_, stop) in live.iter() {
            let t = t.clone();
            stop(Box::new(move || {
                let _ = t.send(());
            }));
            asked += 1;
        }
    }
    // A request left queued behind a dispose()'s shutdown is dropped unanswered when
    // the engine thread exits (its model already freed); with only the requests'
    // copies of the sender left, that ends the wait at once instead of at `limit`.
    drop(t);
    let deadline = Instant::now() + limit;
    for _ in 0..asked {
        if r.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_err() {
            break;
        }
    }
}

fn forget(id: u64) {
    if let Ok(mut live) = LIVE.lock() {
        live.retain(|(i, _)| *i != id);
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_else(|| "unknown panic".into())
}

/// Runs `f`, turning a panic into an `MLX_ERROR` that names `what`.
pub fn guarded<R>(what: &str, f: impl FnOnce() -> Result<R, LmError>) -> Result<R, LmError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| Err(LmError::Mlx(format!("{what} panicked: {}", panic_message(p)))))
}

impl<T: Tick + 'static> Worker<T> {
    /// Starts the thread; `load` runs on it (after giving it its own MLX stream,
    /// as MLX-LM's generation_stream) and returns the model and what the caller
    /// should hear back.
    pub fn start<I: Send + 'static>(
        load: impl FnOnce() -> Result<(T, I), LmError> + Send + 'static,
    ) -> (Worker<T>, oneshot::Receiver<Result<I, LmError>>) {
        let (reply_tx, reply_rx) = oneshot::channel();
        let (tx, rx) = mpsc::channel::<Msg<T>>();
        let id = NEXT_ID.fetch_add(1, Ordering::SeqCst);
        let stopper = tx.clone();
        if let Ok(mut live) = LIVE.lock() {
            live.push((id, Box::new(move |done| send_shutdown(&stopper, done))));
        }
        let spawned = std::thread::Builder::new().name("mlx-node-engine".into()).spawn(move || {
            let loaded = guarded("loading", || {
                mlx::transforms::use_new_default_stream()?;
                load()
            });
            match loaded {
                Ok((model, info)) => {
                    if reply_tx.send(Ok(info)).is_ok() {
                        serve(model, rx);
                    }
                }
                Err(e) => {
                    let _ = reply_tx.send(Err(e));
                }
            }
            forget(id);
        });
        if let Err(e) = spawned {
            forget(id);
            let (t, r) = oneshot::channel();
            let _ = t.send(Err(LmError::Mlx(format!("cannot start the engine thread: {e}"))));
            return (Worker { tx }, r);
        }
        (Worker { tx }, reply_rx)
    }

    /// Queues `job`; false when the worker has shut down (the job is dropped,
    /// so whatever channel it owns closes).
    pub fn run(&self, job: impl FnOnce(&mut T) + Send + 'static) -> bool {
        self.tx.send(Msg::Run(Box::new(job))).is_ok()
    }

    pub fn handle(&self) -> WorkerHandle<T> {
        WorkerHandle { tx: self.tx.clone() }
    }

    /// Asks the thread to finish queued work, free the model and exit.
    pub fn shutdown(&self) -> oneshot::Receiver<()> {
        let (t, r) = oneshot::channel();
        send_shutdown(
            &self.tx,
            Box::new(move || {
                let _ = t.send(());
            }),
        );
        r
    }
}

/// The owner let go without dispose(): its JS object was collected, or Node-API
/// finalizes every object as the environment is torn down at exit. Shut down as
/// dispose() does and wait, at most DROP_WAIT (a job in flight finishes first; the
/// owner aborts its jobs before), for the model to be freed, so that no MLX array is
/// freed while the process runs MLX's static destructors. After dispose() the thread
/// is gone and this returns at once.
impl<T> Drop for Worker<T> {
    fn drop(&mut self) {
        let (t, r) = mpsc::channel();
        send_shutdown(
            &self.tx,
            Box::new(move || {
                let _ = t.send(());
            }),
        );
        let _ = r.recv_timeout(DROP_WAIT);
    }
}

fn serve<T: Tick>(mut model: T, rx: mpsc::Receiver<Msg<T>>) {
    loop {
        // Jobs first (a new request joins the batch before the next step), then a
        // step of whatever the state has running; with nothing running, wait.
        let msg = if model.busy() {
            match rx.try_recv() {
                Ok(msg) => msg,
                Err(mpsc::TryRecvError::Empty) => {
                    if catch_unwind(AssertUnwindSafe(|| model.tick())).is_err() {
                        let _ = mlx::memory::clear_cache();
                    }
                    continue;
                }
                Err(mpsc::TryRecvError::Disconnected) => return,
            }
        } else {
            match rx.recv() {
                Ok(msg) => msg,
                Err(_) => return,
            }
        };
        match msg {
            Msg::Shutdown(done) => {
                // Free the model's arrays and MLX's cache before dispose() resolves: a
                // process that exits right after it runs MLX's static destructors (its
                // allocator among them), and arrays freed on this thread meanwhile
                // corrupted the heap ("corrupted double-linked list" at exit, about one
                // run in ten of the speech tests, whose models take long to free).
                drop(model);
                let _ = mlx::memory::clear_cache();
                done();
                return;
            }
            Msg::Run(job) => {
                // A job reports its own errors; a panic only loses that job.
                let _ = catch_unwind(AssertUnwindSafe(|| job(&mut model)));
                if !model.busy() {
                    let _ = mlx::memory::clear_cache();
                }
            }
        }
    }
}

/// The process is exiting: stop and free every model first (see `shutdown_all`).
#[napi_derive::napi]
pub fn shutdown_for_exit() {
    shutdown_all(DROP_WAIT);
}
