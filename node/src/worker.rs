//! One worker thread per loaded model: it builds the model, owns it and every
//! MLX call for it, and runs jobs in arrival order (concurrent calls queue), so
//! the JS thread never waits on MLX. Text and speech models both run on it.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;

use lm::LmError;
use tokio::sync::oneshot;

type Job<T> = Box<dyn FnOnce(&mut T) + Send>;

enum Msg<T> {
    Run(Job<T>),
    Shutdown(oneshot::Sender<()>),
}

pub struct Worker<T> {
    tx: mpsc::Sender<Msg<T>>,
}

impl<T> Clone for Worker<T> {
    fn clone(&self) -> Self {
        Worker { tx: self.tx.clone() }
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

/// Runs `f`, turning a panic into an `MLX_ERROR` that names `what`.
pub fn guarded<R>(what: &str, f: impl FnOnce() -> Result<R, LmError>) -> Result<R, LmError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| Err(LmError::Mlx(format!("{what} panicked: {}", panic_message(p)))))
}

impl<T: 'static> Worker<T> {
    /// Starts the thread; `load` runs on it (after giving it its own MLX stream,
    /// as MLX-LM's generation_stream) and returns the model and what the caller
    /// should hear back.
    pub fn start<I: Send + 'static>(
        load: impl FnOnce() -> Result<(T, I), LmError> + Send + 'static,
    ) -> (Worker<T>, oneshot::Receiver<Result<I, LmError>>) {
        let (reply_tx, reply_rx) = oneshot::channel();
        let (tx, rx) = mpsc::channel::<Msg<T>>();
        let spawned = std::thread::Builder::new().name("mlx-node-engine".into()).spawn(move || {
            let loaded = guarded("loading", || {
                mlx::transforms::use_new_default_stream()?;
                load()
            });
            match loaded {
                Ok((mut model, info)) => {
                    if reply_tx.send(Ok(info)).is_ok() {
                        serve(&mut model, rx);
                    }
                }
                Err(e) => {
                    let _ = reply_tx.send(Err(e));
                }
            }
        });
        if let Err(e) = spawned {
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

    /// Asks the thread to finish queued work, free the model and exit.
    pub fn shutdown(&self) -> oneshot::Receiver<()> {
        let (t, r) = oneshot::channel();
        if let Err(mpsc::SendError(Msg::Shutdown(done))) = self.tx.send(Msg::Shutdown(t)) {
            let _ = done.send(());
        }
        r
    }
}

fn serve<T>(model: &mut T, rx: mpsc::Receiver<Msg<T>>) {
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Shutdown(done) => {
                let _ = done.send(());
                return;
            }
            Msg::Run(job) => {
                // A job reports its own errors; a panic only loses that job.
                let _ = catch_unwind(AssertUnwindSafe(|| job(model)));
                let _ = mlx::memory::clear_cache();
            }
        }
    }
}
