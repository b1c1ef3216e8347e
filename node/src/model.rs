//! The `NativeModel` class behind index.js's LanguageModel.
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use lm::tokenizer::{ChatTemplateOptions, Tokenizer};
use mlx::quant::Precision;
use mlx::Dtype;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::Status;
use napi_derive::napi;
use serde_json::Value;

use std::collections::HashMap;

use lm::generate::TokenLogprobs;

use crate::engine::{Engine, Event};
use crate::errors::{js_error, lm_error, plain, Code};
use crate::jobs::Lifecycle;
use crate::options;
use crate::prompt_cache::{CacheSlot, NativePromptCache};

type Result<T> = napi::Result<T, String>;

#[napi(object)]
pub struct Quantization {
    pub bits: i32,
    pub group_size: i32,
    /// MLX's packing: "affine", "mxfp4", "nvfp4" or "mxfp8".
    pub mode: String,
}

#[napi(object)]
pub struct ModelInfo {
    pub model_type: String,
    /// The most positions the model was made for (`max_position_embeddings`).
    pub context_length: i32,
    pub num_layers: i32,
    pub vocab_size: i32,
    pub dtype: String,
    pub quantization: Option<Quantization>,
    /// This process's place when the model is split across processes.
    pub distributed: Option<DistributedInfo>,
}

#[napi(object)]
pub struct NativeTopLogprob {
    pub token: u32,
    pub logprob: f64,
}

#[napi(object)]
pub struct NativeLogprob {
    pub token: u32,
    pub logprob: f64,
    pub top: Vec<NativeTopLogprob>,
}

fn top_of(lp: &TokenLogprobs) -> Vec<NativeTopLogprob> {
    lp.top.iter().map(|&(token, logprob)| NativeTopLogprob { token, logprob: logprob as f64 }).collect()
}

#[napi(object)]
pub struct NativeResult {
    pub text: String,
    pub tokens: Vec<u32>,
    pub logprobs: Option<Vec<NativeLogprob>>,
    pub finish_reason: String,
    pub prompt_tokens: u32,
    pub cached_tokens: u32,
    pub generation_tokens: u32,
    pub prompt_tps: f64,
    pub generation_tps: f64,
    pub peak_memory: f64,
}

/// One streamed item: a chunk (text + token) or, last, the result.
#[napi(object)]
pub struct NativeEvent {
    pub text: Option<String>,
    pub token: Option<u32>,
    pub logprob: Option<f64>,
    pub top_logprobs: Option<Vec<NativeTopLogprob>>,
    pub result: Option<NativeResult>,
}

#[napi]
pub struct NativeModel {
    /// First: dropped before `engine` (see `Lifecycle`).
    life: Lifecycle<Event>,
    engine: Engine,
    tokenizer: Arc<Tokenizer>,
    info: (String, i32, i32, Dtype, Option<lm::config::Quantization>),
    /// What a prompt cache's options must fit (kvBits: no sliding-window layers, head sizes).
    cache_fit: lm::prompt_cache::CacheFit,
    context_length: i32,
    distributed: Option<DistributedInfo>,
    /// The precision the model runs in (asked for, or its default).
    precision: Precision,
}

/// The one error of calls a split model's role rules out.
fn not_here(what: &str, why: &str) -> napi::Error<String> {
    js_error(Code::InvalidArgument, format!("{what} {why}"))
}

const FOLLOWER: &str =
    "is not available on this process: it follows rank 0 of a split model (distributed.leader); call follow(), and make calls on rank 0";
const MIRRORED: &str = "is not available on a split model led by rank 0 (distributed.leader): the other processes could not repeat it";

fn parse_dtype(s: Option<String>) -> Result<Option<Dtype>> {
    match s.as_deref() {
        None => Ok(None),
        Some(n @ ("float32" | "float16" | "bfloat16")) => Ok(Dtype::from_name(n)),
        Some(other) => Err(js_error(Code::InvalidArgument, format!("option dtype must be 'float32', 'float16' or 'bfloat16', got '{other}'"))),
    }
}

/// Called on the JS thread with the fraction of the weights read. It must not
/// throw (a throw from a threadsafe call ends the process): index.js passes a
/// wrapper that catches.
type ProgressFn = ThreadsafeFunction<f64, (), f64, Status, false>;

/// Async entry points return plain napi errors whose message starts with the
/// code ("INVALID_WEIGHTS: ..."); index.js turns that prefix back into `err.code`.
#[napi]
pub async fn load_model_native(
    path: String,
    dtype: Option<String>,
    on_progress: Option<ProgressFn>,
    max_batch: Option<u32>,
    precision: Option<String>,
    distributed: Option<NativeDistributed>,
) -> napi::Result<NativeModel> {
    load(path, dtype, on_progress, max_batch, precision, distributed).await.map_err(plain)
}

/// `loadModel`'s `distributed` option, checked by index.js.
#[napi(object)]
pub struct NativeDistributed {
    pub backend: String,
    pub strategy: String,
    pub timeout_ms: u32,
    pub leader: bool,
}

#[napi(object)]
#[derive(Clone)]
pub struct DistributedInfo {
    pub rank: i32,
    pub size: i32,
    pub backend: String,
    pub strategy: String,
    /// Rank 0 takes the calls and the others follow it.
    pub leader: bool,
}

fn parse_distributed(d: Option<NativeDistributed>) -> Result<Option<crate::engine::Distributed>> {
    let Some(d) = d else { return Ok(None) };
    if !["ring", "mpi", "any"].contains(&d.backend.as_str()) {
        return Err(js_error(Code::InvalidArgument, format!("option distributed.backend must be 'ring', 'mpi' or 'any', got '{}'", d.backend)));
    }
    let strategy = match d.strategy.as_str() {
        "tensor" => lm::parallel::Strategy::Tensor,
        "pipeline" => lm::parallel::Strategy::Pipeline,
        other => return Err(js_error(Code::InvalidArgument, format!("option distributed.strategy must be 'tensor' or 'pipeline', got '{other}'"))),
    };
    Ok(Some(crate::engine::Distributed {
        backend: d.backend,
        strategy,
        timeout: std::time::Duration::from_millis(d.timeout_ms as u64),
        leader: d.leader,
    }))
}

/// None: the model's default, decided once its quantization is known
/// (`LoadOptions::precision_for`).
fn parse_precision(s: Option<String>) -> Result<Option<Precision>> {
    match s.as_deref() {
        None => Ok(None),
        Some("exact") => Ok(Some(Precision::Exact)),
        Some("fast") => Ok(Some(Precision::Fast)),
        Some(other) => Err(js_error(Code::InvalidArgument, format!("option precision must be 'exact' or 'fast', got '{other}'"))),
    }
}

async fn load(
    path: String,
    dtype: Option<String>,
    on_progress: Option<ProgressFn>,
    max_batch: Option<u32>,
    precision: Option<String>,
    distributed: Option<NativeDistributed>,
) -> Result<NativeModel> {
    let options = lm::models::LoadOptions { dtype: parse_dtype(dtype)?, precision: parse_precision(precision)?, shard: None };
    let names = distributed.as_ref().map(|d| (d.backend.clone(), d.strategy.clone(), d.leader));
    let distributed = parse_distributed(distributed)?;
    // Every process of a split model must run the same steps on the same rows;
    // batching decides rows by timing, so they go one at a time, unless rank 0
    // decides for all (crate::follow).
    let lockstep = distributed.as_ref().is_some_and(|d| !d.leader);
    let max_batch = match max_batch {
        None if lockstep => 1,
        Some(n) if n > 1 && lockstep => {
            return Err(js_error(
                Code::InvalidArgument,
                format!("option maxBatch must be 1 for a distributed model that is not led by rank 0, got {n}"),
            ))
        }
        None => crate::engine::MAX_BATCH,
        Some(n @ 1..=256) => n as usize,
        Some(n) => return Err(js_error(Code::InvalidArgument, format!("option maxBatch must be an integer in [1, 256], got {n}"))),
    };
    // NonBlocking: the engine thread never waits for JS; the queue is unbounded
    // and holds at most the ~100 reports of one load.
    let progress = move |f: f64| {
        if let Some(cb) = &on_progress {
            cb.call(f, ThreadsafeFunctionCallMode::NonBlocking);
        }
    };
    let (engine, reply) = Engine::start(PathBuf::from(&path), options, distributed, max_batch, progress);
    let loaded = reply.await.map_err(|_| js_error(Code::MlxError, "the engine thread stopped while loading"))?.map_err(lm_error)?;
    Ok(NativeModel {
        engine,
        info: (loaded.model_type, loaded.num_layers, loaded.vocab_size, loaded.dtype, loaded.quantization),
        cache_fit: loaded.cache_fit,
        context_length: loaded.context_length,
        precision: loaded.precision,
        distributed: loaded.shard.zip(names).map(|((rank, size), (backend, strategy, leader))| DistributedInfo {
            rank,
            size,
            backend,
            strategy,
            leader,
        }),
        tokenizer: loaded.tokenizer,
        life: Lifecycle::new("the model"),
    })
}

fn to_ids(v: &Value, vocab: u32) -> Result<Vec<u32>> {
    let items = v.as_array().ok_or_else(|| js_error(Code::InvalidArgument, format!("token ids must be an array, got {v}")))?;
    items
        .iter()
        .enumerate()
        .map(|(i, x)| match x.as_f64() {
            Some(f) if f.fract() == 0.0 && f >= 0.0 && f < vocab as f64 => Ok(f as u32),
            _ => Err(js_error(Code::InvalidArgument, format!("token id at index {i} ({x}) is not an integer in [0, {vocab})"))),
        })
        .collect()
}

impl NativeModel {
    /// A non-empty list of ids in the vocabulary.
    fn prompt_ids(&self, ids: &Value) -> Result<Vec<u32>> {
        let prompt = to_ids(ids, self.vocab())?;
        if prompt.is_empty() {
            return Err(js_error(Code::InvalidArgument, "the prompt is empty: at least one token is needed"));
        }
        Ok(prompt)
    }

    /// `cache`'s slot, if it is live and this model's.
    fn own_cache(&self, cache: &NativePromptCache) -> Result<Arc<CacheSlot>> {
        if cache.slot.is_disposed() {
            return Err(js_error(Code::Disposed, "the prompt cache has been disposed"));
        }
        if cache.slot.owner != self.engine.id {
            return Err(js_error(Code::CacheMismatch, "the prompt cache belongs to another model (make one with this model's createPromptCache)"));
        }
        Ok(cache.slot.clone())
    }

    fn check_live(&self) -> Result<()> {
        self.life.live()
    }

    /// This process follows rank 0 (it takes no calls of its own).
    fn follows(&self) -> bool {
        self.distributed.as_ref().is_some_and(|d| d.leader && d.rank != 0)
    }

    fn led(&self) -> bool {
        self.distributed.as_ref().is_some_and(|d| d.leader)
    }

    fn vocab(&self) -> u32 {
        self.info.2 as u32
    }

    /// MLX-LM's CLI excludes "\n" and the EOS ids from XTC.
    fn xtc_special_tokens(&self) -> Result<Vec<u32>> {
        let mut ids = self.tokenizer.encode("\n", false).map_err(lm_error)?;
        ids.extend_from_slice(self.tokenizer.eos_token_ids());
        Ok(ids)
    }
}

#[napi]
impl NativeModel {
    #[napi(getter)]
    pub fn info(&self) -> ModelInfo {
        let (t, l, v, d, q) = &self.info;
        ModelInfo {
            model_type: t.clone(),
            context_length: self.context_length,
            num_layers: *l,
            vocab_size: *v,
            dtype: d.name().to_string(),
            quantization: q.map(|q| Quantization { bits: q.bits, group_size: q.group_size, mode: q.mode.name().to_string() }),
            distributed: self.distributed.clone(),
        }
    }

    /// "exact" or "fast": `loadModel`'s `precision`, or the model's default.
    #[napi(getter)]
    pub fn precision(&self) -> String {
        match self.precision {
            Precision::Exact => "exact",
            Precision::Fast => "fast",
        }
        .into()
    }

    #[napi(getter)]
    pub fn disposed(&self) -> bool {
        self.life.is_disposed()
    }

    #[napi]
    pub fn encode(&self, text: String, add_special_tokens: bool) -> Result<Vec<u32>> {
        self.check_live()?;
        self.tokenizer.encode(&text, add_special_tokens).map_err(lm_error)
    }

    /// A raw prompt, with MLX-LM's BOS rule.
    #[napi]
    pub fn encode_prompt(&self, text: String) -> Result<Vec<u32>> {
        self.check_live()?;
        self.tokenizer.encode_prompt(&text).map_err(lm_error)
    }

    #[napi]
    pub fn decode(&self, ids: Value) -> Result<String> {
        self.check_live()?;
        let ids = to_ids(&ids, self.vocab())?;
        self.tokenizer.decode(&ids).map_err(lm_error)
    }

    #[napi]
    pub fn apply_chat_template(
        &self,
        messages: Value,
        add_generation_prompt: bool,
        enable_thinking: Option<bool>,
        tools: Option<Value>,
        variables: Option<Value>,
    ) -> Result<String> {
        self.check_live()?;
        let msgs = messages.as_array().ok_or_else(|| js_error(Code::InvalidArgument, "messages must be an array"))?;
        for (i, m) in msgs.iter().enumerate() {
            let ok = m.get("role").is_some_and(Value::is_string);
            if !ok {
                return Err(js_error(Code::InvalidArgument, format!("messages[{i}] needs a string role")));
            }
        }
        let tools = match tools {
            None | Some(Value::Null) => None,
            Some(Value::Array(t)) => Some(t),
            Some(_) => return Err(js_error(Code::InvalidArgument, "tools must be an array")),
        };
        let extra = match variables {
            None | Some(Value::Null) => Default::default(),
            Some(Value::Object(v)) => v,
            Some(_) => return Err(js_error(Code::InvalidArgument, "variables must be an object")),
        };
        let options = ChatTemplateOptions { add_generation_prompt, enable_thinking, tools, extra };
        self.tokenizer.apply_chat_template_with(msgs, &options).map_err(lm_error)
    }

    /// Validates and queues a generation (on `cache` when given); events are read with `nextEvents`.
    #[napi]
    pub fn start(&self, ids: Value, options: Value, cache: Option<&NativePromptCache>) -> Result<u32> {
        self.check_live()?;
        if self.follows() {
            return Err(not_here("generation", FOLLOWER));
        }
        let prompt = self.prompt_ids(&ids)?;
        let parsed = options::parse(&options, self.vocab(), self.xtc_special_tokens()?)?;
        let slot = cache.map(|c| self.own_cache(c)).transpose()?;
        let abort = Arc::new(AtomicBool::new(false));
        let rx = self.engine.generate(prompt, parsed, slot, abort.clone());
        self.life.jobs.add(rx, abort)
    }

    /// An empty prompt cache for this model (made on the worker at first use).
    #[napi]
    pub fn create_prompt_cache(&self, options: Value) -> Result<NativePromptCache> {
        self.check_live()?;
        if self.follows() {
            return Err(not_here("createPromptCache()", FOLLOWER));
        }
        let opts = options::cache_options(&options)?;
        // Checked here too (lm checks it when it makes the cache) so the call itself fails.
        self.cache_fit.check(&opts).map_err(lm_error)?;
        Ok(NativePromptCache { slot: CacheSlot::new(self.engine.id, opts, self.engine.handle()) })
    }

    /// Reads an MLX-LM prompt-cache file for this model.
    #[napi]
    pub async fn load_prompt_cache(&self, path: String) -> napi::Result<NativePromptCache> {
        self.check_live().map_err(plain)?;
        if self.led() {
            return Err(plain(not_here("loadPromptCache()", MIRRORED)));
        }
        let slot = self.engine.load_cache(PathBuf::from(path)).await;
        let slot = slot.map_err(|_| plain(js_error(Code::Disposed, "the model has been disposed")))?.map_err(|e| plain(lm_error(e)))?;
        Ok(NativePromptCache { slot })
    }

    /// Queues a prefill of `cache` (a job: its result counts the tokens fed).
    #[napi]
    pub fn prefill(&self, cache: &NativePromptCache, ids: Value, prefill_step_size: Option<u32>) -> Result<u32> {
        self.check_live()?;
        if self.led() {
            return Err(not_here("prefill()", MIRRORED));
        }
        let prompt = self.prompt_ids(&ids)?;
        let slot = self.own_cache(cache)?;
        let step = prefill_step_size.map_or(lm::generate::GenerateParams::default().prefill_step_size, |n| n as usize);
        lm::generate::check_prefill_step_size(step).map_err(crate::options::option_error)?;
        let abort = Arc::new(AtomicBool::new(false));
        let rx = self.engine.prefill(prompt, step, slot, abort.clone());
        self.life.jobs.add(rx, abort)
    }

    /// Queues writing `cache` to `path` (a job with an empty result).
    #[napi]
    pub fn save_prompt_cache(&self, cache: &NativePromptCache, path: String, metadata: HashMap<String, String>) -> Result<u32> {
        self.check_live()?;
        let slot = self.own_cache(cache)?;
        let mut meta: Vec<(String, String)> = metadata.into_iter().collect();
        meta.sort();
        let rx = self.engine.save_cache(slot, PathBuf::from(path), meta);
        self.life.jobs.add(rx, Arc::new(AtomicBool::new(false)))
    }

    /// Starts following rank 0 (a job whose result comes when rank 0's model is
    /// disposed); only on the other processes of a model split with `leader`.
    #[napi]
    pub fn follow(&self) -> Result<u32> {
        self.check_live()?;
        if !self.follows() {
            let why = if self.led() { "rank 0 leads: it takes the calls itself" } else { "the model is not split with distributed.leader" };
            return Err(js_error(
                Code::InvalidArgument,
                format!("follow() is for the processes other than rank 0 of a model split with distributed.leader: {why}"),
            ));
        }
        let abort = Arc::new(AtomicBool::new(false));
        let rx = self.engine.follow();
        self.life.jobs.add(rx, abort)
    }

    /// Waits for at least one event of job `id` and returns all that are ready.
    #[napi]
    pub async fn next_events(&self, id: u32) -> napi::Result<Vec<NativeEvent>> {
        self.events_of(id).await.map_err(plain)
    }

    async fn events_of(&self, id: u32) -> Result<Vec<NativeEvent>> {
        let events = self.life.jobs.next(id, |e| !matches!(e, Event::Chunk { .. })).await?;
        events
            .into_iter()
            .map(|e| match e {
                Event::Chunk { text, token, logprobs } => Ok(NativeEvent {
                    text: Some(text),
                    token: Some(token),
                    logprob: logprobs.as_ref().map(|l| l.logprob as f64),
                    top_logprobs: logprobs.as_ref().map(top_of),
                    result: None,
                }),
                Event::Done(s) => Ok(NativeEvent {
                    text: None,
                    token: None,
                    logprob: None,
                    top_logprobs: None,
                    result: Some(NativeResult {
                        logprobs: s.logprobs.map(|l| {
                            l.iter().zip(&s.tokens).map(|(lp, &token)| NativeLogprob { token, logprob: lp.logprob as f64, top: top_of(lp) }).collect()
                        }),
                        text: s.text,
                        tokens: s.tokens,
                        finish_reason: s.finish_reason.into(),
                        prompt_tokens: s.prompt_tokens as u32,
                        cached_tokens: s.cached_tokens as u32,
                        generation_tokens: s.generation_tokens as u32,
                        prompt_tps: s.prompt_tps,
                        generation_tps: s.generation_tps,
                        peak_memory: s.peak_memory as f64,
                    }),
                }),
                Event::Failed(e) => Err(lm_error(e)),
            })
            .collect()
    }

    /// Stops job `id` at the next token (its result then says 'abort').
    #[napi]
    pub fn abort(&self, id: u32) {
        self.life.jobs.abort(id);
    }

    /// Stops listening to job `id` and aborts it; its events are dropped.
    #[napi]
    pub fn cancel(&self, id: u32) {
        self.life.jobs.cancel(id);
    }

    /// Stops running and queued generations at their next token (they finish with
    /// 'abort'), then frees the model. Later calls fail with DISPOSED.
    #[napi]
    pub async fn dispose(&self) -> napi::Result<()> {
        if self.life.dispose() {
            let _ = self.engine.shutdown().await;
        }
        Ok(())
    }
}
