//! Text generation jobs on a model's worker thread, reporting chunks and the
//! result through a channel. The worker owns the model and every prompt cache
//! made for it (freed with it).
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use lm::batch::{Request, Scheduler};
use lm::generate::TokenLogprobs;
use lm::models::LanguageModel;
use lm::prompt_cache::PromptCache;
use lm::text::{Chunk, TextOutcome};
use lm::tokenizer::Tokenizer;
use lm::LmError;
use mlx::Dtype;
use tokio::sync::{mpsc as tmpsc, oneshot};

use crate::follow::{Leader, Op};
use crate::options::ParsedOptions;
use crate::prompt_cache::{CacheSlot, SlotRef};
use crate::worker::{guarded, Tick, Worker, WorkerHandle};

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
    pub quantization: Option<lm::config::Quantization>,
    /// What a prompt cache's options must fit (checked when one is created).
    pub cache_fit: lm::prompt_cache::CacheFit,
    pub context_length: i32,
    /// The precision the loaders built the quantized layers with.
    pub precision: lm::models::Precision,
    /// `(rank, size)` in the tensor-parallel group, if the model is split.
    pub shard: Option<(i32, i32)>,
}

/// `loadModel`'s `distributed` option: the MLX backend to join and how long
/// to wait for the other processes.
pub struct Distributed {
    pub backend: String,
    pub strategy: lm::parallel::Strategy,
    pub timeout: std::time::Duration,
    /// Rank 0 alone takes calls; the others `follow()` it (crate::follow).
    pub leader: bool,
}

/// A job waiting for a prompt cache that a running generation holds.
type Deferred = (Arc<CacheSlot>, Box<dyn FnOnce(&mut ModelState) + Send>);

/// What the worker thread owns: the model, its batch scheduler, and the prompt
/// caches made for it, which are freed with it (their JS objects may outlive it).
pub struct ModelState {
    pub model: Box<dyn LanguageModel>,
    caches: Vec<SlotRef>,
    pub scheduler: Scheduler,
    deferred: VecDeque<Deferred>,
    /// This process's place in the group of a split model.
    pub shard: Option<lm::parallel::Shard>,
    /// Rank 0 of a model whose other processes follow it.
    pub leader: Option<Leader>,
    /// A follower's connection to rank 0, where it waits while idle (crate::follow).
    doorbell: Option<std::net::TcpStream>,
}

/// Sequences decoded together at most by default (more wait for a place;
/// `loadModel`'s `maxBatch`).
pub const MAX_BATCH: usize = 8;

impl ModelState {
    /// Starts `req` (on the prompt cache `cache`: its id and options): at once,
    /// or, on a leader, at the next step of every process.
    fn admit(&mut self, req: Request, cache: Option<(u64, lm::cache::CacheOptions)>) {
        match &mut self.leader {
            Some(leader) => leader.start(req, cache),
            None => self.scheduler.admit(self.model.as_ref(), req),
        }
    }

    /// A prompt cache changed outside a generation (trimmed, freed): a leader's
    /// followers make the same change to their copy.
    pub fn mirror(&mut self, op: Op) {
        if let Some(leader) = &mut self.leader {
            leader.push(op);
        }
    }

    pub fn register(&mut self, slot: SlotRef) {
        if !self.caches.iter().any(|s| s.ptr_eq(&slot)) {
            self.caches.retain(|s| s.strong_count() > 0);
            self.caches.push(slot);
        }
    }

    /// Runs `job` now if `slot` is free (and no earlier job waits for it), else
    /// once the generation holding it has given it back: operations on one
    /// cache run in the order they were asked for.
    fn when_free(&mut self, slot: Arc<CacheSlot>, job: impl FnOnce(&mut ModelState) + Send + 'static) {
        let queued = self.deferred.iter().any(|(s, _)| Arc::ptr_eq(s, &slot));
        if slot.is_busy() || queued {
            self.deferred.push_back((slot, Box::new(job)));
        } else {
            job(self);
        }
    }

    /// Starts the deferred jobs whose cache is free, in order per cache.
    fn run_deferred(&mut self) {
        let mut skipped: Vec<Arc<CacheSlot>> = Vec::new();
        let mut i = 0;
        while i < self.deferred.len() {
            let slot = &self.deferred[i].0;
            if slot.is_busy() || skipped.iter().any(|s| Arc::ptr_eq(s, slot)) {
                skipped.push(slot.clone());
                i += 1;
                continue;
            }
            let (_, job) = self.deferred.remove(i).expect("index in range");
            job(self);
        }
    }
}

impl Tick for ModelState {
    fn busy(&self) -> bool {
        !self.scheduler.is_idle() || !self.deferred.is_empty() || self.leader.as_ref().is_some_and(Leader::has_news)
    }

    fn tick(&mut self) {
        self.run_deferred();
        if let Some(leader) = &mut self.leader {
            // Every step of a leader is one of its followers': say what changes first.
            match leader.exchange(self.scheduler.is_idle()) {
                Ok(starts) => {
                    for req in starts {
                        self.scheduler.admit(self.model.as_ref(), req);
                    }
                }
                Err(e) => return self.scheduler.fail_all(self.model.as_ref(), e),
            }
        }
        if !self.scheduler.is_idle() {
            self.scheduler.tick(self.model.as_ref());
        }
    }
}

impl Drop for ModelState {
    fn drop(&mut self) {
        // Running sequences end as aborted (their caches go back first); waiting jobs are dropped.
        let idle = self.scheduler.is_idle();
        self.scheduler.abort_all(self.model.as_ref());
        if let Some(leader) = &mut self.leader {
            leader.end(idle);
        }
        self.deferred.clear();
        for slot in self.caches.iter().filter_map(|s| s.upgrade()) {
            slot.free();
        }
    }
}

static NEXT_ENGINE: AtomicU64 = AtomicU64::new(1);

pub struct Engine {
    worker: Worker<ModelState>,
    /// Tells this engine's prompt caches from another model's.
    pub id: u64,
}

impl Engine {
    /// Starts the thread, which loads the model and tokenizer and then serves jobs.
    /// `progress` hears the fraction of the weights read, on that thread; it is
    /// dropped when loading ends.
    pub fn start(
        dir: PathBuf,
        options: lm::models::LoadOptions,
        distributed: Option<Distributed>,
        max_batch: usize,
        mut progress: impl FnMut(f64) + Send + 'static,
    ) -> (Engine, oneshot::Receiver<Result<Loaded, LmError>>) {
        let (worker, reply) = Worker::start(move || {
            let mut options = options;
            let mut led = None;
            if let Some(d) = distributed {
                // On this thread: MLX's collectives run where the model does.
                options.shard = Some(lm::parallel::join(&d.backend, d.strategy, d.timeout)?);
                led = d.leader.then_some(d.timeout);
            }
            let (mut state, loaded) = load_model(&dir, &options, max_batch, &mut progress)?;
            state.shard = options.shard.clone();
            if let (Some(timeout), Some(shard)) = (led, &state.shard) {
                if shard.rank == 0 {
                    state.leader = Some(Leader::new(shard.clone(), max_batch, timeout)?);
                } else {
                    state.doorbell = crate::follow::join_doorbell(shard, timeout)?;
                }
            }
            Ok((state, loaded))
        });
        (Engine { worker, id: NEXT_ENGINE.fetch_add(1, Ordering::SeqCst) }, reply)
    }

    pub fn handle(&self) -> WorkerHandle<ModelState> {
        self.worker.handle()
    }

    /// Queues `job`, which uses `slot`, with an event channel: it runs once no
    /// earlier operation holds that cache. A job that cannot be queued (the
    /// model is gone) reports DISPOSED.
    fn queue_on(
        &self,
        slot: Arc<CacheSlot>,
        job: impl FnOnce(&mut ModelState, &tmpsc::UnboundedSender<Event>) -> Result<Summary, LmError> + Send + 'static,
    ) -> tmpsc::UnboundedReceiver<Event> {
        let (etx, erx) = tmpsc::unbounded_channel();
        let events = etx.clone();
        let queued = self.worker.run(move |state: &mut ModelState| {
            state.when_free(slot, move |state| {
                let result = guarded("prompt cache", || job(state, &events));
                let _ = events.send(match result {
                    Ok(summary) => Event::Done(summary),
                    Err(e) => Event::Failed(e),
                });
            });
        });
        if !queued {
            let _ = etx.send(Event::Failed(LmError::Disposed("the model has been disposed".into())));
        }
        erx
    }

    /// One `generate()` call, on `cache` when given (else a scratch one): it joins
    /// the model's batch scheduler, which decodes it with the others running.
    pub fn generate(
        &self,
        prompt: Vec<u32>,
        opts: ParsedOptions,
        cache: Option<Arc<CacheSlot>>,
        abort: Arc<AtomicBool>,
    ) -> tmpsc::UnboundedReceiver<Event> {
        let (etx, erx) = tmpsc::unbounded_channel();
        let events = etx.clone();
        let queued = self.worker.run(move |state: &mut ModelState| {
            let on_chunk_events = events.clone();
            let abort_events = events.clone();
            let request = move |cache: PromptCache, give_back: Option<Arc<CacheSlot>>| Request {
                prompt,
                options: opts,
                cache,
                should_abort: Box::new(move || abort.load(Ordering::Relaxed) || abort_events.is_closed() || crate::worker::exiting()),
                on_chunk: Box::new(move |c: Chunk| {
                    let _ = on_chunk_events.send(Event::Chunk { text: c.text.to_string(), token: c.token, logprobs: c.logprobs.cloned() });
                }),
                on_done: Box::new(move |result, cache| {
                    // The cache goes back before JS hears the result.
                    if let Some(slot) = give_back {
                        slot.give_back(cache);
                    }
                    let _ = events.send(match result {
                        Ok(o) => Event::Done(summary(o)),
                        Err(e) => Event::Failed(e),
                    });
                }),
            };
            match cache {
                None => {
                    let req = request(PromptCache::scratch(state.model.as_ref()), None);
                    state.admit(req, None);
                }
                Some(slot) => state.when_free(slot.clone(), move |state| match slot.take(state) {
                    Ok(cache) => {
                        let mirrored = Some((slot.id, cache.options().clone()));
                        let req = request(cache, Some(slot));
                        state.admit(req, mirrored);
                    }
                    Err(e) => {
                        let _ = etx.send(Event::Failed(e));
                    }
                }),
            }
        });
        if !queued {
            let (t, r) = tmpsc::unbounded_channel();
            let _ = t.send(Event::Failed(LmError::Disposed("the model has been disposed".into())));
            return r;
        }
        erx
    }

    /// On a follower (a process other than rank 0 of a model split with
    /// `leader`): runs rank 0's generations with it until rank 0's model is
    /// disposed. The job holds the engine thread all that time.
    pub fn follow(&self) -> tmpsc::UnboundedReceiver<Event> {
        let (etx, erx) = tmpsc::unbounded_channel();
        let events = etx.clone();
        let queued = self.worker.run(move |state: &mut ModelState| {
            let result = guarded("following rank 0", || match state.shard.clone() {
                Some(shard) => {
                    let mut bell = state.doorbell.take();
                    let followed = crate::follow::follow(state, &shard, bell.as_mut());
                    state.doorbell = bell;
                    followed
                }
                None => Err(LmError::InvalidArgument("follow() needs a model split across processes".into())),
            });
            let _ = events.send(match result {
                Ok(()) => Event::Done(Summary::empty("stop")),
                Err(e) => Event::Failed(e),
            });
        });
        if !queued {
            let _ = etx.send(Event::Failed(LmError::Disposed("the model has been disposed".into())));
        }
        erx
    }

    /// Runs `prompt` into `cache` without generating; the summary counts the tokens fed.
    pub fn prefill(
        &self,
        prompt: Vec<u32>,
        prefill_step_size: usize,
        slot: Arc<CacheSlot>,
        abort: Arc<AtomicBool>,
    ) -> tmpsc::UnboundedReceiver<Event> {
        self.queue_on(slot.clone(), move |state, events| {
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
        self.queue_on(slot.clone(), move |state, _| {
            slot.with(state, |_, cache| cache.save(&path, &metadata))?;
            Ok(Summary::empty("stop"))
        })
    }

    pub fn shutdown(&self) -> oneshot::Receiver<()> {
        self.worker.shutdown()
    }
}

fn load_model(
    dir: &std::path::Path,
    options: &lm::models::LoadOptions,
    max_batch: usize,
    progress: &mut dyn FnMut(f64),
) -> Result<(ModelState, Loaded), LmError> {
    let (model, tokenizer) = lm::models::load_with_tokenizer(dir, options, progress)?;
    let tokenizer = Arc::new(tokenizer);
    let c = model.config();
    let loaded = Loaded {
        tokenizer: tokenizer.clone(),
        model_type: c.model_type.clone(),
        num_layers: c.num_hidden_layers,
        vocab_size: c.vocab_size,
        dtype: model.dtype(),
        quantization: model.quantization(),
        cache_fit: lm::prompt_cache::CacheFit::of(model.as_ref()),
        context_length: c.max_position_embeddings,
        precision: options.precision_for(c),
        shard: options.shard.as_ref().map(|s| (s.rank, s.size)),
    };
    let scheduler = Scheduler::new(tokenizer.clone(), max_batch);
    Ok((ModelState { model, caches: Vec::new(), scheduler, deferred: VecDeque::new(), shard: None, leader: None, doorbell: None }, loaded))
}

/// A finished generation as the bindings report it.
fn summary(o: TextOutcome) -> Summary {
    Summary {
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
    }
}
