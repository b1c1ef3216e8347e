//! Continuous batching: many text generations on one model, their decode steps
//! run as one forward pass (`LanguageModel::forward_batch`), so each step reads
//! the weights once for all of them. Sequences join and leave between steps;
//! a new one's prompt is fed one chunk per tick, between decode steps, so a long
//! prompt does not freeze the others. Each keeps its own sampler, logits
//! processors, seed (its own key sequence: the draws of a solo run), stop
//! strings, prompt cache and abort flag. One sequence alone runs the same
//! operations as `generate`, with the same bits; in a batch, only the
//! reduction order of the shared matrix products can differ.
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use mlx::{memory, random, Array};

use crate::error::{LmError, Result};
use crate::generate::{queue_all, read, settle_cache, GenerationStats, LazyLogprobs, Next, Picker};
use crate::models::LanguageModel;
use crate::prompt_cache::PromptCache;
use crate::sampling::{LogitsProcessors, Sampler};
use crate::text::{Chunk, TextOptions, TextOutcome, TextState};
use crate::tokenizer::Tokenizer;

/// What a finished request hands back: its result and its cache.
pub type Done = Box<dyn FnOnce(Result<TextOutcome>, PromptCache) + Send>;

/// One generation asked of the scheduler.
pub struct Request {
    /// The whole input (the cache's common prefix with it is reused).
    pub prompt: Vec<u32>,
    pub options: TextOptions,
    pub cache: PromptCache,
    pub should_abort: Box<dyn Fn() -> bool + Send>,
    pub on_chunk: Box<dyn FnMut(Chunk) + Send>,
    pub on_done: Done,
}

/// The token a sequence feeds next: its prompt's last (no pick yet), or the one it
/// picked last, not read yet or read and taken.
enum Last {
    /// The prompt's last token, fed by the next decode step as one more row.
    Prompt(Array),
    Pending(Array, Option<LazyLogprobs>),
    Taken(Array),
}

struct Seq {
    req: Request,
    text: TextState,
    processors: LogitsProcessors,
    sampler: Sampler,
    keys: random::KeySequence,
    history: Option<Array>,
    /// The prompt's uncached rest, and how much of it is in the cache.
    rest: Vec<u32>,
    fed: usize,
    cached: usize,
    before: usize,
    sampled: Vec<u32>,
    last: Option<Last>,
    stats: GenerationStats,
    t0: Instant,
    t_gen: Instant,
}

impl Seq {
    fn new(req: Request, tokenizer: &Tokenizer, vocab: u32) -> Result<Seq> {
        let Request { prompt, options, mut cache, should_abort, on_chunk, on_done } = req;
        let fail = |e: LmError, cache: PromptCache, on_done: Done| -> Result<Seq> {
            on_done(Err(e.clone()), cache);
            Err(e)
        };
        if prompt.is_empty() {
            return fail(LmError::InvalidArgument("the prompt is empty: at least one token is needed".into()), cache, on_done);
        }
        if let Err(e) = options.params.validate(vocab) {
            return fail(e.into(), cache, on_done);
        }
        let built = (|| -> Result<_> {
            let processors = LogitsProcessors::new(&options.params.sampling)?;
            let sampler = Sampler::new(&options.params.sampling)?;
            let keys = match options.params.seed {
                Some(seed) => random::KeySequence::new(seed)?,
                None => random::KeySequence::from_time()?,
            };
            Ok((processors, sampler, keys))
        })();
        let (processors, sampler, keys) = match built {
            Ok(b) => b,
            Err(e) => return fail(e, cache, on_done),
        };
        let cached = cache.reuse(&prompt);
        let history = if processors.is_empty() {
            None
        } else {
            let known: Vec<i32> = cache.tokens().iter().chain(&prompt[cached..]).map(|&t| t as i32).collect();
            Some(Array::from_slice(&known, &[known.len() as i32])?)
        };
        let before = cache.len();
        let rest = prompt[cached..].to_vec();
        let req = Request { prompt, options, cache, should_abort, on_chunk, on_done };
        Ok(Seq {
            text: TextState::new(tokenizer, &req.options),
            req,
            processors,
            sampler,
            keys,
            history,
            rest,
            fed: 0,
            cached,
            before,
            sampled: Vec::new(),
            last: None,
            stats: GenerationStats::default(),
            t0: Instant::now(),
            t_gen: Instant::now(),
        })
    }

    fn picker(&mut self) -> Picker<'_> {
        Picker::from_parts(&self.processors, &self.sampler, self.history.take(), self.req.options.params.logprobs)
    }

    /// The prompt tokens one prefill step feeds at most (MLX-LM's `prefill_step_size`).
    fn prefill_step(&self) -> usize {
        self.req.options.params.prefill_step_size.max(1)
    }

    /// The prompt tokens the next prefill chunk feeds: all but the last left, up to a step (0 when only
    /// the last is left: the next decode step feeds it).
    fn next_chunk(&self) -> usize {
        (self.rest.len() - self.fed).saturating_sub(1).min(self.prefill_step())
    }

    /// Tokens handed out once the pending one is read.
    fn count(&self) -> usize {
        self.stats.generated + usize::from(matches!(self.last, Some(Last::Pending(..))))
    }

    /// Reads the pending token and takes it; `Stop` when the sequence ended.
    fn take_pending(&mut self) -> Result<Next> {
        let (y, lp) = match self.last.take() {
            Some(Last::Pending(y, lp)) => (y, lp),
            other => {
                self.last = other;
                return Ok(Next::Continue);
            }
        };
        let s = read(&y, &lp)?;
        self.last = Some(Last::Taken(y));
        if self.stats.generated == 0 {
            self.stats.prompt_seconds = self.t0.elapsed().as_secs_f64();
            self.t_gen = Instant::now();
        }
        self.stats.generated += 1;
        self.sampled.push(s.token);
        if (self.req.should_abort)() {
            self.text.abort();
            return Ok(Next::Stop);
        }
        Ok(self.text.take(s, &mut *self.req.on_chunk))
    }

    /// Settles the cache and reports the result.
    fn finish(mut self, model: &dyn LanguageModel, error: Option<LmError>) {
        let result = match error {
            Some(e) => Err(e),
            None => (|| -> Result<TextOutcome> {
                self.text.end(&mut *self.req.on_chunk);
                self.stats.generation_seconds = self.t_gen.elapsed().as_secs_f64();
                self.stats.peak_memory = memory::stats()?.peak;
                self.stats.prompt_tokens = self.rest.len();
                settle_cache(model, &mut self.req.cache, self.before, &self.rest, &self.sampled)?;
                Ok(self.text.outcome(self.req.prompt.len(), self.cached, &self.stats))
            })(),
        };
        // A failed step leaves the cache's arrays in an unknown state: start it over.
        if result.is_err() {
            self.req.cache.clear();
        }
        (self.req.on_done)(result, self.req.cache);
    }
}

pub struct Scheduler {
    tokenizer: Arc<Tokenizer>,
    waiting: VecDeque<Seq>,
    decoding: Vec<Seq>,
    max_batch: usize,
    steps: usize,
}

impl Scheduler {
    /// At most `max_batch` sequences decode together; more wait their turn.
    pub fn new(tokenizer: Arc<Tokenizer>, max_batch: usize) -> Scheduler {
        Scheduler { tokenizer, waiting: VecDeque::new(), decoding: Vec::new(), max_batch: max_batch.max(1), steps: 0 }
    }

    /// Another limit from the next tick on (a split model's followers take their leader's).
    pub fn set_max_batch(&mut self, max_batch: usize) {
        self.max_batch = max_batch.max(1);
    }

    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.decoding.is_empty()
    }

    /// Sequences admitted and not finished.
    pub fn len(&self) -> usize {
        self.waiting.len() + self.decoding.len()
    }

    /// Sequences admitted whose prompts are still being fed.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues a request; a bad one is answered (through its `on_done`) at once.
    pub fn admit(&mut self, model: &dyn LanguageModel, req: Request) {
        if let Err(e) = req.cache.check_model(model) {
            (req.on_done)(Err(e), req.cache);
            return;
        }
        if self.is_idle() {
            let _ = memory::reset_peak();
        }
        if let Ok(seq) = Seq::new(req, &self.tokenizer, model.config().vocab_size as u32) {
            self.waiting.push_back(seq);
        }
    }

    /// One unit of work: prefill chunks of waiting sequences (while the batch
    /// has room), then one decode step of the batch.
    pub fn tick(&mut self, model: &dyn LanguageModel) {
        let taken = self.take_waiting();
        self.prefill(model, taken);
        if !self.decoding.is_empty() {
            if let Err(e) = self.step(model) {
                // A failed step fails the whole batch: each request hears it.
                for seq in self.decoding.drain(..) {
                    seq.finish(model, Some(e.clone()));
                }
            }
        }
        if self.is_idle() {
            let _ = memory::clear_cache();
        }
    }

    /// The waiting sequences this tick feeds, from the front, each with the
    /// prompt tokens it feeds now (MLX-LM's prefill: chunks of all but the last
    /// token; 0 when only the last is left), while the batch has room and their
    /// tokens fit in one prefill step (the sequence's `prefill_step_size`,
    /// MLX-LM's 2048 by default). So short prompts that arrive together all
    /// start decoding at the next step, as `mlx_lm.server` prefills its waiting
    /// prompts together, while a long prompt still goes one step's chunk a
    /// tick and the batch keeps decoding.
    fn take_waiting(&mut self) -> Vec<(Seq, usize)> {
        let (mut spent, mut joining) = (0, 0);
        let mut taken = Vec::new();
        while self.decoding.len() + joining < self.max_batch {
            let Some(seq) = self.waiting.pop_front() else { break };
            let n = seq.next_chunk();
            // A sequence left with only its last token joins the next step, whose row for it counts as one.
            let joins = seq.fed + n + 1 == seq.rest.len();
            let cost = n + usize::from(joins);
            if spent > 0 && spent + cost > seq.prefill_step() {
                self.waiting.push_front(seq);
                break;
            }
            spent += cost;
            joining += usize::from(joins);
            taken.push((seq, n));
        }
        taken
    }

    /// Feeds the chunks `take_waiting` chose, all in one model call
    /// (`LanguageModel::prefill_batch`: one pass over the weights for several
    /// short prompts), and evaluates their caches. A sequence left with only
    /// its last token joins the batch (the next decode step feeds it as one
    /// more row, whose logits give the first token: rows are computed apart, so
    /// the same bits as a pass of its own, and sequences admitted together
    /// pick their first tokens together); the others wait for their next chunk.
    fn prefill(&mut self, model: &dyn LanguageModel, taken: Vec<(Seq, usize)>) {
        let mut feeding = Vec::with_capacity(taken.len());
        for (mut seq, n) in taken {
            if (seq.req.should_abort)() {
                seq.text.abort();
                seq.finish(model, None);
            } else {
                feeding.push((seq, n));
            }
        }
        if let Err(e) = Self::feed_chunks(model, &mut feeding) {
            // A failed pass fails every sequence it fed.
            let (failed, rest): (Vec<_>, Vec<_>) = feeding.into_iter().partition(|(_, n)| *n > 0);
            for (seq, _) in failed {
                seq.finish(model, Some(e.clone()));
            }
            feeding = rest;
        }
        let mut later = Vec::new();
        for (mut seq, n) in feeding {
            seq.fed += n;
            let len = seq.rest.len();
            if seq.fed + 1 < len {
                later.push(seq);
                continue;
            }
            // `PromptCache::reuse` leaves at least one token to feed.
            match Array::from_slice(&[seq.rest[len - 1] as i32], &[1]) {
                Ok(last) => {
                    seq.last = Some(Last::Prompt(last));
                    seq.fed = len;
                    self.decoding.push(seq);
                }
                Err(e) => seq.finish(model, Some(e.into())),
            }
        }
        for seq in later.into_iter().rev() {
            self.waiting.push_front(seq);
        }
    }

    /// Runs the chunks of `feeding` with tokens to feed into their caches and
    /// evaluates them (then MLX-LM's quantization check, per cache).
    fn feed_chunks(model: &dyn LanguageModel, feeding: &mut [(Seq, usize)]) -> Result<()> {
        let mut chunks = Vec::new();
        let mut caches = Vec::new();
        for (seq, n) in feeding.iter_mut().filter(|(_, n)| *n > 0) {
            let Seq { rest, fed, req, .. } = seq;
            chunks.push(&rest[*fed..*fed + *n]);
            caches.push(req.cache.parts_mut().0);
        }
        if chunks.is_empty() {
            return Ok(());
        }
        model.prefill_batch(&chunks, &mut caches)?;
        drop(caches);
        let mut state = Vec::new();
        for (seq, _) in feeding.iter_mut().filter(|(_, n)| *n > 0) {
            let (layers, options) = seq.req.cache.parts_mut();
            crate::cache::maybe_quantize(layers, options)?;
            state.extend(layers.iter().flat_map(|c| c.state()).cloned());
        }
        mlx::eval(&state.iter().collect::<Vec<_>>())?;
        memory::clear_cache()?;
        Ok(())
    }

    /// One decode step: every sequence that may take another token feeds its last
    /// one, all in one forward pass; the picks are queued before the pending
    /// tokens are read, so the host reads while the next step computes.
    fn step(&mut self, model: &dyn LanguageModel) -> Result<()> {
        let rows: Vec<usize> =
            (0..self.decoding.len()).filter(|&i| self.decoding[i].count() < self.decoding[i].req.options.params.max_tokens).collect();
        let mut next: Vec<Option<(Array, Option<LazyLogprobs>, random::KeySequence)>> = (0..self.decoding.len()).map(|_| None).collect();
        if !rows.is_empty() {
            let ids: Vec<Array> = rows
                .iter()
                .map(|&i| match &self.decoding[i].last {
                    Some(Last::Pending(y, _)) | Some(Last::Taken(y)) | Some(Last::Prompt(y)) => y.reshape(&[1, 1]),
                    None => Err(mlx::Error::new("a decoding sequence has no token")),
                })
                .collect::<mlx::Result<_>>()?;
            let refs: Vec<&Array> = ids.iter().collect();
            let ids = Array::concatenate(&refs, 0)?;
            let logits = {
                let mut caches: Vec<&mut [Box<dyn crate::cache::Cache>]> = Vec::with_capacity(rows.len());
                // Each row's own cache, in row order (rows are distinct indices).
                let mut rest: &mut [Seq] = &mut self.decoding;
                let mut offset = 0;
                for &i in &rows {
                    let (_, tail) = rest.split_at_mut(i - offset);
                    let (seq, tail) = tail.split_first_mut().expect("row in range");
                    caches.push(seq.req.cache.parts_mut().0);
                    rest = tail;
                    offset = i + 1;
                }
                model.forward_batch(&ids, &mut caches)?
            };
            for (r, &i) in rows.iter().enumerate() {
                let seq = &mut self.decoding[i];
                let (layers, options) = seq.req.cache.parts_mut();
                crate::cache::maybe_quantize(layers, options)?;
                let row = logits.slice_axis(0, r as i32, r as i32 + 1)?;
                let fed = match &seq.last {
                    Some(Last::Pending(y, _)) | Some(Last::Taken(y)) => Some(y.clone()),
                    Some(Last::Prompt(_)) => None,
                    None => unreachable!("checked above"),
                };
                let mut keys = seq.keys.clone();
                let mut picker = seq.picker();
                let (y, lp) = picker.pick(row, fed.as_ref(), &mut keys)?;
                seq.history = picker.into_history();
                next[i] = Some((y, lp, keys));
            }
            let picks: Vec<_> = next.iter().flatten().map(|(y, lp, _)| (y, lp)).collect();
            queue_all(&picks)?;
        }
        let mut finished = Vec::new();
        for (i, seq) in self.decoding.iter_mut().enumerate() {
            let verdict = seq.take_pending()?;
            match (verdict, next[i].take()) {
                // Ended: the step computed for it is dropped, and so are its draws.
                (Next::Stop, _) | (Next::Continue, None) => finished.push(i),
                (Next::Continue, Some((y, lp, keys))) => {
                    seq.keys = keys;
                    seq.last = Some(Last::Pending(y, lp));
                }
            }
        }
        for i in finished.into_iter().rev() {
            let seq = self.decoding.remove(i);
            seq.finish(model, None);
        }
        self.steps += 1;
        if self.steps.is_multiple_of(256) {
            memory::clear_cache()?;
        }
        Ok(())
    }

    /// Ends every sequence now with `error` (their caches start over), e.g. when
    /// the other processes of a split model are gone.
    pub fn fail_all(&mut self, model: &dyn LanguageModel, error: LmError) {
        for seq in self.waiting.drain(..).chain(self.decoding.drain(..)) {
            seq.finish(model, Some(error.clone()));
        }
    }

    /// Ends every sequence now (their results say 'abort'), e.g. at shutdown.
    pub fn abort_all(&mut self, model: &dyn LanguageModel) {
        for mut seq in self.waiting.drain(..).chain(self.decoding.drain(..)) {
            seq.text.abort();
            seq.finish(model, None);
        }
    }
}
