//! `resolveModelNative`: a Hugging Face model id to its local snapshot folder (crates/hub),
//! downloading what is missing on a thread of its own, never on the JS thread.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use napi::bindgen_prelude::PromiseRaw;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Env, Status};
use napi_derive::napi;
use tokio::sync::oneshot;

use crate::errors::{hub_error, js_error, plain, Code};

/// The abort flag of one resolve: index.js sets it when the load's AbortSignal fires.
#[napi]
pub struct HubAbort {
    flag: Arc<AtomicBool>,
}

#[napi]
impl HubAbort {
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        HubAbort { flag: Arc::new(AtomicBool::new(false)) }
    }

    #[napi]
    pub fn abort(&self) {
        self.flag.store(true, Ordering::SeqCst);
    }
}

#[napi(object)]
pub struct DownloadProgress {
    pub file: String,
    pub bytes_done: f64,
    pub bytes_total: f64,
}

/// Called on the JS thread; it must not throw (lib/load-progress.js wraps the user's callback).
type ProgressFn = ThreadsafeFunction<DownloadProgress, (), DownloadProgress, Status, false>;

/// Resolves to the absolute snapshot folder of `id` (`org/name[@revision]`); `kind` is
/// 'lm' or 'tts' (which files to fetch). Errors carry MODEL_NOT_FOUND, AUTH_REQUIRED,
/// DOWNLOAD_FAILED, INVALID_ARGUMENT or ABORTED as their message's prefix.
#[napi(ts_return_type = "Promise<string>")]
pub fn resolve_model_native<'env>(
    env: &'env Env,
    id: String,
    kind: String,
    abort: &HubAbort,
    on_progress: Option<ProgressFn>,
) -> napi::Result<PromiseRaw<'env, String>> {
    // Read here, on the JS thread, where process.env is written too.
    let config = ::hub::Config::from_env();
    let flag = abort.flag.clone();
    let (tx, rx) = oneshot::channel();
    let work = move || {
        let id = ::hub::HubId::parse(&id)?;
        let kind = ::hub::ModelKind::parse(&kind)?;
        // NonBlocking: the download never waits for JS; reports are ~10 a second per file.
        let mut report = |file: &str, done: u64, total: u64| {
            if let Some(cb) = &on_progress {
                let p = DownloadProgress { file: file.to_string(), bytes_done: done as f64, bytes_total: total as f64 };
                cb.call(p, ThreadsafeFunctionCallMode::NonBlocking);
            }
        };
        let stop = || flag.load(Ordering::SeqCst) || crate::worker::exiting();
        ::hub::resolve(&id, kind, &config, &mut report, &stop)
    };
    std::thread::Builder::new()
        .name("mlx-node-hub".into())
        .spawn(move || {
            let result = catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|_| Err(::hub::HubError::failed("the download thread panicked")));
            let _ = tx.send(result);
        })
        .map_err(|e| plain(js_error(Code::MlxError, format!("could not start the download thread: {e}"))))?;
    env.spawn_future(async move {
        let result = rx.await.map_err(|_| plain(js_error(Code::MlxError, "the download thread stopped")))?;
        result.map(|dir| dir.to_string_lossy().into_owned()).map_err(|e| plain(hub_error(e)))
    })
}
