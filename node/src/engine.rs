//! Text generation jobs on a model's worker thread, reporting chunks and the
//! result through a channel. The worker owns the model and every prompt cache
//! made for it (freed with it).
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use lm::generate::TokenLogprobs;
use lm::models::LanguageModel;
use lm::prompt_cache::PromptCache;
use lm::text::{generate_text, Chunk};
use lm::tokenizer::Tokenizer;
use lm::LmError;
use mlx::Dtype;
use tokio::sync::{mpsc as tmpsc, oneshot};

use crate::options::ParsedOptions;
use crate::prompt_cache::{CacheSlot, SlotRef};
use crate::worker::{guarded, Worker, WorkerHandle};

pub struct Summary {
    pub text: String,
    pub tokens: Vec<u32>,
    pub logprobs: Option<Vec<TokenLogprobs>>,
    pub finish_reason: &'static str,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub generation_tokens: usize,
    pub prompt_tps: f64,
    pub generation_tps: f64,
    pub peak_memory: usize,
}

impl Summary {
    /// The result of a job that generates nothing (a prefill, a save).
    fn empty(finish_reason: &'static str) -> Summary {
        Summary {
            text: String::new(),
            tokens: Vec::new(),
            logprobs: None,
            finish_reason,
            prompt_tokens: 0,
            cached_tokens: 0,
            generation_tokens: 0,
            prompt_tps: 0.0,
            generation_tps: 0.0,
            peak_memory: 0,
        }
    }
}

pub enum Event {
    Chunk { text: String, token: u32, logprobs: Option<TokenLogprobs> },
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
    pub head_dim: i32,
    pub context_length: i32,
}

/// What the worker thread owns: the model, and the prompt caches made for it,
/// which are freed with it (their JS objects may outlive the model).
pub struct ModelState {
    pub model: Box<dyn LanguageModel>,
    caches: Vec<SlotRef>,
}

impl ModelState {
    pub fn register(&mut self, slot: SlotRef) {
        if !self.caches.iter().any(|s| s.ptr_eq(&slot)) {
            self.caches.retain(|s| s.strong_count() > 0);
            self.caches.push(slot);
        }
    }
}

impl Drop for ModelState {
    fn drop(&mut self) {
        for slot in self.caches.iter().filter_map(|s| s.upgrade()) {
            slot.free();
        }
    }
}

static NEXT_ENGINE: AtomicU64 = AtomicU64::new(1);

pub struct Engine {
    worker: Worker<ModelState>,
    tokenizer: Option<Arc<Tokenizer>>,
    /// Tells this engine's prompt caches from another model's.
    pub id: u64,
}

impl Engine {
    /// Starts the thread, which loads the model and tokenizer and then serves jobs.
    /// `progress` hears the fraction of the weights read, on that thread; it is
    /// dropped when loading ends.
    pub fn start(
        dir: PathBuf,
        dtype: Option<Dtype>,
        mut progress: impl FnMut(f64) + Send + 'static,
    ) -> (Engine, oneshot::Receiver<Result<Loaded, LmError>>) {
        let (worker, reply) = Worker::start(move || load_model(&dir, dtype, &mut progress));
        (Engine { worker, tokenizer: None, id: NEXT_ENGINE.fetch_add(1, Ordering::SeqCst) }, reply)
    }

    /// Called once loading succeeded: generation jobs need the tokenizer.
    pub fn with_tokenizer(self, tokenizer: Arc<Tokenizer>) -> Engine {
        Engine { tokenizer: Some(tokenizer), ..self }
    }

    pub fn handle(&self) -> WorkerHandle<ModelState> {
        self.worker.handle()
    }

    /// Queues `job` with an event channel; a job that cannot be queued (the
    /// model is gone) reports DISPOSED.
    fn queue(
        &self,
        job: impl FnOnce(&mut ModelState, &tmpsc::UnboundedSender<Event>) -> Result<Summary, LmError> + Send + 'static,
    ) -> tmpsc::UnboundedReceiver<Event> {
        let (etx, erx) = tmpsc::unbounded_channel();
        let events = etx.clone();
        let queued = self.worker.run(move |state: &mut ModelState| {
            let result = guarded("generation", || job(state, &events));
            let _ = events.send(match result {
                Ok(summary) => Event::Done(summary),
                Err(e) => Event::Failed(e),
            });
        });
        if !queued {
            let _ = etx.send(Event::Failed(LmError::Disposed("the model has been disposed".into())));
        }
        erx
    }

    /// One `generate()` call, on `cache` when given (else a fresh one).
    pub fn generate(
        &self,
        prompt: Vec<u32>,
        opts: ParsedOptions,
        cache: Option<Arc<CacheSlot>>,
        abort: Arc<AtomicBool>,
    ) -> tmpsc::UnboundedReceiver<Event> {
        let Some(tok) = self.tokenizer.clone() else {
            return self.queue(|_, _| Err(LmError::Mlx("the model is not loaded".into())));
        };
        self.queue(move |state, events| {
            let run = |model: &dyn LanguageModel, cache: &mut PromptCache| run_generation(model, &tok, &prompt, &opts, cache, &abort, events);
            match cache {
                Some(slot) => slot.with(state, run),
                None => {
                    let mut scratch = PromptCache::scratch(state.model.as_ref());
                    run(state.model.as_ref(), &mut scratch)
                }
            }
        })
    }

    /// Runs `prompt` into `cache` without generating; the summary counts the tokens fed.
    pub fn prefill(
        &self,
        prompt: Vec<u32>,
        prefill_step_size: usize,
        slot: Arc<CacheSlot>,
        abort: Arc<AtomicBool>,
    ) -> tmpsc::UnboundedReceiver<Event> {
        self.queue(move |state, events| {
            let should_abort = || abort.load(Ordering::Relaxed) || events.is_closed() || crate::worker::exiting();
            let t0 = std::time::Instant::now();
            let done = slot.with(state, |model, cache| lm::generate::prefill(model, &prompt, prefill_step_size, cache, &should_abort))?;
            Ok(Summary {
                prompt_tokens: prompt.len(),
                prompt_tps: lm::generate::per_second(prompt.len(), t0.elapsed().as_secs_f64()),
                ..Summary::empty(if done { "stop" } else { "abort" })
            })
        })
    }

    /// Reads an MLX-LM prompt-cache file into a new slot of this engine.
    pub fn load_cache(&self, path: PathBuf) -> oneshot::Receiver<Result<Arc<CacheSlot>, LmError>> {
        let (tx, rx) = oneshot::channel();
        let (owner, handle) = (self.id, self.handle());
        let queued = self.worker.run(move |state: &mut ModelState| {
            let loaded = guarded("loading a prompt cache", || PromptCache::load(state.model.as_ref(), &path));
            let _ = tx.send(loaded.map(|(cache, metadata)| {
                let slot = CacheSlot::loaded(owner, cache, metadata, handle);
                state.register(Arc::downgrade(&slot));
                slot
            }));
        });
        if !queued {
            let (t, r) = oneshot::channel();
            let _ = t.send(Err(LmError::Disposed("the model has been disposed".into())));
            return r;
        }
        rx
    }

    /// Writes `slot`'s cache as MLX-LM's prompt-cache file (a job like a
    /// generation: its result is an empty summary).
    pub fn save_cache(&self, slot: Arc<CacheSlot>, path: PathBuf, metadata: Vec<(String, String)>) -> tmpsc::UnboundedReceiver<Event> {
        self.queue(move |state, _| {
            slot.with(state, |_, cache| cache.save(&path, &metadata))?;
            Ok(Summary::empty("stop"))
        })
    }

    pub fn shutdown(&self) -> oneshot::Receiver<()> {
        self.worker.shutdown()
    }
}

fn load_model(dir: &std::path::Path, dtype: Option<Dtype>, progress: &mut dyn FnMut(f64)) -> Result<(ModelState, Loaded), LmError> {
    if !dir.is_dir() {
        return Err(LmError::ModelNotFound(format!("model folder {} does not exist", dir.display())));
    }
    let model = lm::models::load_with_progress(dir, dtype, progress)?;
    let tokenizer = Arc::new(Tokenizer::from_model_dir(dir)?);
    let c = model.config();
    let loaded = Loaded {
        tokenizer,
        model_type: c.model_type.clone(),
        num_layers: c.num_hidden_layers,
        vocab_size: c.vocab_size,
        dtype: model.dtype(),
        quantization: model.quantization(),
        head_dim: c.head_dim,
        context_length: c.max_position_embeddings,
    };
    Ok((ModelState { model, caches: Vec::new() }, loaded))
}

/// One `generate()` call: `lm`'s text loop on `cache`, its chunks and result
/// turned into events. It stops early when JS aborts, stops listening (a
/// closed receiver: it broke out of for-await) or the process exits.
fn run_generation(
    model: &dyn LanguageModel,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: &ParsedOptions,
    cache: &mut PromptCache,
    abort: &AtomicBool,
    events: &tmpsc::UnboundedSender<Event>,
) -> Result<Summary, LmError> {
    let should_abort = || abort.load(Ordering::Relaxed) || events.is_closed() || crate::worker::exiting();
    let mut on_chunk = |c: Chunk| {
        let _ = events.send(Event::Chunk { text: c.text.to_string(), token: c.token, logprobs: c.logprobs.cloned() });
    };
    let o = generate_text(model, tok, prompt, opts, cache, &should_abort, &mut on_chunk)?;
    Ok(Summary {
        text: o.text,
        tokens: o.tokens,
        logprobs: o.logprobs,
        finish_reason: o.finish_reason.as_str(),
        prompt_tokens: o.prompt_tokens,
        cached_tokens: o.cached_tokens,
        generation_tokens: o.generation_tokens,
        prompt_tps: o.prompt_tps,
        generation_tps: o.generation_tps,
        peak_memory: o.peak_memory,
    })
}
