//! One engine thread per model: it owns the model and every MLX call for it,
//! runs jobs in arrival order (concurrent calls queue), and reports through
//! channels, so the JS thread never waits on MLX.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use lm::generate::{generate, Next};
use lm::models::LanguageModel;
use lm::tokenizer::{StreamingDetokenizer, Tokenizer};
use lm::LmError;
use mlx::Dtype;
use tokio::sync::{mpsc as tmpsc, oneshot};

use crate::options::ParsedOptions;
use crate::stop::{Feed, StopMatcher};

pub struct Summary {
    pub text: String,
    pub tokens: Vec<u32>,
    pub finish_reason: &'static str,
    pub prompt_tokens: usize,
    pub generation_tokens: usize,
    pub prompt_tps: f64,
    pub generation_tps: f64,
    pub peak_memory: usize,
}

pub enum Event {
    Chunk { text: String, token: u32 },
    Done(Summary),
    Failed(LmError),
}

pub struct Loaded {
    pub tokenizer: Arc<Tokenizer>,
    pub model_type: String,
    pub num_layers: i32,
    pub vocab_size: i32,
    pub dtype: Dtype,
    pub quantization: Option<(i32, i32)>,
}

enum Job {
    Generate { prompt: Vec<u32>, opts: ParsedOptions, abort: Arc<AtomicBool>, events: tmpsc::UnboundedSender<Event> },
    Shutdown { done: oneshot::Sender<()> },
}

#[derive(Clone)]
pub struct Engine {
    tx: mpsc::Sender<Job>,
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

impl Engine {
    /// Starts the thread, which loads the model and tokenizer and then serves jobs.
    pub fn start(dir: PathBuf, dtype: Option<Dtype>) -> (Engine, oneshot::Receiver<Result<Loaded, LmError>>) {
        let (reply_tx, reply_rx) = oneshot::channel();
        let (tx, rx) = mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new().name("mlx-node-engine".into()).spawn(move || {
            let load = catch_unwind(AssertUnwindSafe(|| load_model(&dir, dtype)))
                .unwrap_or_else(|p| Err(LmError::Mlx(format!("loading panicked: {}", panic_message(p)))));
            match load {
                Ok((model, loaded)) => {
                    let tok = loaded.tokenizer.clone();
                    if reply_tx.send(Ok(loaded)).is_ok() {
                        run_jobs(model.as_ref(), &tok, rx);
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
            return (Engine { tx }, r);
        }
        (Engine { tx }, reply_rx)
    }

    pub fn generate(&self, prompt: Vec<u32>, opts: ParsedOptions, abort: Arc<AtomicBool>) -> tmpsc::UnboundedReceiver<Event> {
        let (etx, erx) = tmpsc::unbounded_channel();
        let job = Job::Generate { prompt, opts, abort, events: etx.clone() };
        if self.tx.send(job).is_err() {
            let _ = etx.send(Event::Failed(LmError::Disposed("the model has been disposed".into())));
        }
        erx
    }

    /// Asks the thread to finish queued work, free the model and exit.
    pub fn shutdown(&self) -> oneshot::Receiver<()> {
        let (t, r) = oneshot::channel();
        if let Err(mpsc::SendError(Job::Shutdown { done })) = self.tx.send(Job::Shutdown { done: t }) {
            let _ = done.send(());
        }
        r
    }
}

fn load_model(dir: &std::path::Path, dtype: Option<Dtype>) -> Result<(Box<dyn LanguageModel>, Loaded), LmError> {
    if !dir.is_dir() {
        return Err(LmError::ModelNotFound(format!("model folder {} does not exist", dir.display())));
    }
    // A dedicated stream for this model's work, as MLX-LM's generation_stream.
    mlx::transforms::use_new_default_stream()?;
    let model = lm::models::load(dir, dtype)?;
    let tokenizer = Arc::new(Tokenizer::from_model_dir(dir)?);
    let c = model.config();
    let loaded = Loaded {
        tokenizer,
        model_type: c.model_type.clone(),
        num_layers: c.num_hidden_layers,
        vocab_size: c.vocab_size,
        dtype: model.dtype(),
        quantization: model.quantization(),
    };
    Ok((model, loaded))
}

fn run_jobs(model: &dyn LanguageModel, tok: &Tokenizer, rx: mpsc::Receiver<Job>) {
    while let Ok(job) = rx.recv() {
        match job {
            Job::Shutdown { done } => {
                let _ = done.send(());
                return;
            }
            Job::Generate { prompt, opts, abort, events } => {
                let result = catch_unwind(AssertUnwindSafe(|| run_generation(model, tok, &prompt, opts, &abort, &events)))
                    .unwrap_or_else(|p| Err(LmError::Mlx(format!("generation panicked: {}", panic_message(p)))));
                let _ = events.send(match result {
                    Ok(summary) => Event::Done(summary),
                    Err(e) => Event::Failed(e),
                });
                let _ = mlx::memory::clear_cache();
            }
        }
    }
}

fn run_generation(
    model: &dyn LanguageModel,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: ParsedOptions,
    abort: &AtomicBool,
    events: &tmpsc::UnboundedSender<Event>,
) -> Result<Summary, LmError> {
    let mut detok = StreamingDetokenizer::new(tok);
    let mut stop = StopMatcher::new(opts.stop);
    let mut text = String::new();
    let mut tokens = Vec::new();
    let mut finish = "length";
    let mut stopped_by_string = false;
    let mut last_token = 0u32;
    let emit = |piece: String, token: u32, text: &mut String| {
        text.push_str(&piece);
        let _ = events.send(Event::Chunk { text: piece, token });
    };
    if abort.load(Ordering::Relaxed) {
        // Aborted while queued: no work at all.
        return Ok(Summary {
            text,
            tokens,
            finish_reason: "abort",
            prompt_tokens: prompt.len(),
            generation_tokens: 0,
            prompt_tps: 0.0,
            generation_tps: 0.0,
            peak_memory: 0,
        });
    }
    let stats = generate(model, prompt, &opts.params, |t| {
        // A closed receiver means JS stopped listening (it broke out of for-await).
        if abort.load(Ordering::Relaxed) || events.is_closed() {
            finish = "abort";
            return Ok(Next::Stop);
        }
        last_token = t;
        if tok.is_eos(t) {
            finish = "stop";
            return Ok(Next::Stop);
        }
        tokens.push(t);
        match stop.feed(&detok.add_token(t)) {
            Feed::Emit(s) => emit(s, t, &mut text),
            Feed::Stopped(s) => {
                emit(s, t, &mut text);
                finish = "stop";
                stopped_by_string = true;
                return Ok(Next::Stop);
            }
        }
        Ok(Next::Continue)
    })?;
    if !stopped_by_string {
        // What the detokenizer and the stop matcher still hold at the end.
        let mut rest = match stop.feed(&detok.finalize()) {
            Feed::Emit(s) => s,
            Feed::Stopped(s) => {
                finish = "stop";
                s
            }
        };
        rest.push_str(&stop.flush());
        if !rest.is_empty() {
            emit(rest, last_token, &mut text);
        }
    }
    let gen_n = stats.generated;
    Ok(Summary {
        text,
        tokens,
        finish_reason: finish,
        prompt_tokens: prompt.len(),
        generation_tokens: gen_n,
        prompt_tps: if stats.prompt_seconds > 0.0 { prompt.len() as f64 / stats.prompt_seconds } else { 0.0 },
        generation_tps: if stats.generation_seconds > 0.0 { gen_n as f64 / stats.generation_seconds } else { 0.0 },
        peak_memory: stats.peak_memory,
    })
}
