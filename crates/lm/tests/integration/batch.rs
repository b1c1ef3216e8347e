//! `lm::batch::Scheduler` on the float32 Qwen3 fixture: one request alone is
//! `generate_text` bit for bit; several decoded together, joining at different
//! times, each give their solo answer; an abort ends only its own sequence.
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use lm::batch::{Request, Scheduler};
use lm::generate::GenerateParams;
use lm::models::LanguageModel;
use lm::prompt_cache::PromptCache;
use lm::sampling::SamplingOptions;
use lm::text::{generate_text, FinishReason, TextOptions, TextOutcome};
use lm::tokenizer::Tokenizer;

fn fixture() -> (Box<dyn LanguageModel>, Arc<Tokenizer>) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/fixtures");
    let index: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(root.join("index.json")).expect("run npm test first")).unwrap();
    let dir = root.join(index["fixtures"]["qwen3-f32"]["path"].as_str().unwrap());
    (lm::models::load(&dir, None).unwrap(), Arc::new(Tokenizer::from_model_dir(&dir).unwrap()))
}

fn options(max_tokens: usize, temperature: f32, seed: Option<u64>, stop: &[&str]) -> TextOptions {
    let sampling = SamplingOptions { temperature, top_k: if temperature > 0.0 { 50 } else { 0 }, ..Default::default() };
    TextOptions {
        params: GenerateParams { max_tokens, sampling, seed, logprobs: Some(2), ..Default::default() },
        stop: stop.iter().map(|s| s.to_string()).collect(),
    }
}

type Slot = Arc<Mutex<Option<(TextOutcome, String)>>>;

fn request(model: &dyn LanguageModel, prompt: Vec<u32>, options: TextOptions, abort: Arc<AtomicBool>) -> (Request, Slot) {
    let slot: Slot = Arc::new(Mutex::new(None));
    let chunks = Arc::new(Mutex::new(String::new()));
    let (s, c) = (slot.clone(), chunks.clone());
    let req = Request {
        prompt,
        options,
        cache: PromptCache::scratch(model),
        should_abort: Box::new(move || abort.load(Ordering::Relaxed)),
        on_chunk: Box::new(move |ch| c.lock().unwrap().push_str(ch.text)),
        on_done: Box::new(move |r, _cache| *s.lock().unwrap() = Some((r.unwrap(), chunks.lock().unwrap().clone()))),
    };
    (req, slot)
}

fn solo(model: &dyn LanguageModel, tok: &Tokenizer, prompt: &[u32], o: &TextOptions) -> TextOutcome {
    generate_text(model, tok, prompt, o, &mut PromptCache::scratch(model), &|| false, &mut |_| {}).unwrap()
}

fn same(got: &TextOutcome, want: &TextOutcome, label: &str) {
    assert_eq!(got.tokens, want.tokens, "{label}: tokens");
    assert_eq!(got.text, want.text, "{label}: text");
    assert_eq!(got.finish_reason, want.finish_reason, "{label}: finish");
    let lp = |o: &TextOutcome| o.logprobs.clone().unwrap().iter().map(|l| l.top.iter().map(|t| t.0).collect::<Vec<_>>()).collect::<Vec<_>>();
    assert_eq!(lp(got), lp(want), "{label}: top logprob ids");
}

#[test]
fn one_request_alone_is_generate_text_bit_for_bit() {
    let (model, tok) = fixture();
    let prompt = tok.encode_prompt("Hello, my name is").unwrap();
    for o in [options(20, 0.0, None, &[]), options(20, 0.9, Some(3), &[])] {
        let want = solo(model.as_ref(), &tok, &prompt, &o);
        let mut s = Scheduler::new(tok.clone(), 8);
        let (req, slot) = request(model.as_ref(), prompt.clone(), o, Arc::new(AtomicBool::new(false)));
        s.admit(model.as_ref(), req);
        while !s.is_idle() {
            s.tick(model.as_ref());
        }
        let (got, chunks) = slot.lock().unwrap().take().unwrap();
        same(&got, &want, "alone");
        assert_eq!(
            got.logprobs.as_ref().unwrap().iter().map(|l| l.logprob).collect::<Vec<_>>(),
            want.logprobs.as_ref().unwrap().iter().map(|l| l.logprob).collect::<Vec<_>>()
        );
        assert_eq!(chunks, got.text);
    }
}

#[test]
fn a_batch_with_late_joiners_gives_each_its_solo_answer_and_an_abort_ends_only_its_own() {
    let (model, tok) = fixture();
    let texts = ["Hello, my name is", "The quick brown fox", "Once upon a time, in a land far away,", "1, 2, 3,", "def main():", "Paris is"];
    let opts = [
        options(16, 0.0, None, &[]),
        options(24, 0.8, Some(11), &[]),
        options(12, 0.0, None, &[]),
        options(20, 1.0, Some(5), &[]),
        options(8, 0.0, None, &[]),
        options(16, 0.7, Some(2), &[]),
    ];
    let prompts: Vec<Vec<u32>> = texts.iter().map(|t| tok.encode_prompt(t).unwrap()).collect();
    let wants: Vec<TextOutcome> = prompts.iter().zip(&opts).map(|(p, o)| solo(model.as_ref(), &tok, p, o)).collect();
    let mut s = Scheduler::new(tok.clone(), 4);
    let mut slots = Vec::new();
    let aborted = Arc::new(AtomicBool::new(false));
    let mut ticks = 0;
    for (i, (p, o)) in prompts.iter().zip(&opts).enumerate() {
        // Two join at the start, the others a few steps apart; one (index 5) is aborted mid-way.
        let abort = if i == 5 { aborted.clone() } else { Arc::new(AtomicBool::new(false)) };
        let (req, slot) = request(model.as_ref(), p.clone(), o.clone(), abort);
        s.admit(model.as_ref(), req);
        slots.push(slot);
        if i >= 1 {
            for _ in 0..3 {
                s.tick(model.as_ref());
                ticks += 1;
            }
        }
    }
    while !s.is_idle() {
        s.tick(model.as_ref());
        ticks += 1;
        if ticks == 22 {
            aborted.store(true, Ordering::Relaxed);
        }
    }
    for (i, (slot, want)) in slots.iter().zip(&wants).enumerate() {
        let (got, chunks) = slot.lock().unwrap().take().unwrap_or_else(|| panic!("request {i} never finished"));
        assert_eq!(chunks, got.text, "request {i}: chunks");
        if i == 5 {
            assert_eq!(got.finish_reason, FinishReason::Abort);
            assert!(want.tokens.starts_with(&got.tokens) && got.tokens.len() < want.tokens.len(), "aborted request: {:?}", got.tokens);
        } else {
            same(&got, want, &format!("request {i}"));
        }
    }
}

/// In `precision: 'fast'` a batch's decode steps run attention as one kernel
/// for all rows (`cpu::decode_attention`, each row against its own cache and
/// length): each sequence still gets its solo answer bit for bit.
#[test]
fn fast_precision_batches_give_each_its_solo_answer() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/fixtures");
    let index: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(root.join("index.json")).expect("run npm test first")).unwrap();
    let dir = root.join(index["fixtures"]["qwen3-q4"]["path"].as_str().unwrap());
    let load = lm::models::LoadOptions { precision: Some(lm::models::Precision::Fast), ..Default::default() };
    let model = lm::models::load_with_progress(&dir, &load, &mut |_| {}).unwrap();
    let tok = Arc::new(Tokenizer::from_model_dir(&dir).unwrap());
    let texts = ["Hello, my name is", "Once upon a time, in a land far away,", "1, 2, 3,"];
    let opts = [options(12, 0.0, None, &[]), options(10, 0.8, Some(11), &[]), options(8, 0.0, None, &[])];
    let prompts: Vec<Vec<u32>> = texts.iter().map(|t| tok.encode_prompt(t).unwrap()).collect();
    let wants: Vec<TextOutcome> = prompts.iter().zip(&opts).map(|(p, o)| solo(model.as_ref(), &tok, p, o)).collect();
    let mut s = Scheduler::new(tok.clone(), 4);
    let mut slots = Vec::new();
    for (p, o) in prompts.iter().zip(&opts) {
        let (req, slot) = request(model.as_ref(), p.clone(), o.clone(), Arc::new(AtomicBool::new(false)));
        s.admit(model.as_ref(), req);
        slots.push(slot);
        // Joining two steps apart: every row at its own length.
        for _ in 0..2 {
            s.tick(model.as_ref());
        }
    }
    while !s.is_idle() {
        s.tick(model.as_ref());
    }
    for (i, (slot, want)) in slots.iter().zip(&wants).enumerate() {
        let (got, _) = slot.lock().unwrap().take().unwrap_or_else(|| panic!("request {i} never finished"));
        same(&got, want, &format!("request {i}"));
        let lp = |o: &TextOutcome| o.logprobs.as_ref().unwrap().iter().map(|l| l.logprob.to_bits()).collect::<Vec<_>>();
        assert_eq!(lp(&got), lp(want), "request {i}: log-probabilities");
    }
}

/// `max_batch` 1 runs queued requests strictly one after another: no chunk of a
/// later request before an earlier one is done. (The JavaScript side cannot see
/// this order: each job's events come through its own poll.) With room for all
/// three, the second starts before the first is done.
#[test]
fn max_batch_one_runs_requests_in_turn() {
    let (model, tok) = fixture();
    let texts = ["Hello, my name is", "The quick brown fox", "1, 2, 3,"];
    for (max_batch, in_turn) in [(1, true), (3, false)] {
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let mut s = Scheduler::new(tok.clone(), max_batch);
        for (i, t) in texts.iter().enumerate() {
            let (c, d) = (log.clone(), log.clone());
            s.admit(
                model.as_ref(),
                Request {
                    prompt: tok.encode_prompt(t).unwrap(),
                    options: options(6, 0.0, None, &[]),
                    cache: PromptCache::scratch(model.as_ref()),
                    should_abort: Box::new(|| false),
                    on_chunk: Box::new(move |_| c.lock().unwrap().push(format!("chunk {i}"))),
                    on_done: Box::new(move |r, _| {
                        r.unwrap();
                        d.lock().unwrap().push(format!("done {i}"))
                    }),
                },
            );
        }
        while !s.is_idle() {
            s.tick(model.as_ref());
        }
        let log = log.lock().unwrap().clone();
        let owner = |e: &String| e.rsplit(' ').next().unwrap().parse::<usize>().unwrap();
        let sorted = log.windows(2).all(|w| owner(&w[0]) <= owner(&w[1]));
        let dones: Vec<usize> = log.iter().enumerate().filter(|(_, e)| e.starts_with("done")).map(|(k, _)| k).collect();
        assert_eq!(dones.len(), 3, "{log:?}");
        assert_eq!(sorted, in_turn, "max_batch {max_batch}: {log:?}");
    }
}

/// Waiting prompts are fed in turn while a tick's prompt tokens fit in one
/// prefill step: four short prompts queued together all decode after the first
/// tick (one at a time, three would still wait), while prompts longer than the
/// step still go one step's chunk a tick. Each answer is its solo answer.
#[test]
fn waiting_prompts_start_together_within_one_prefill_step() {
    let (model, tok) = fixture();
    let texts = [
        "Hello, my name is Ada and I write programs",
        "The quick brown fox jumps over the lazy dog",
        "1, 2, 3, 4, 5, 6, 7, 8,",
        "Once upon a time there was a small town",
    ];
    for (step, waiting_after_one) in [(2048, 0), (3, texts.len())] {
        let mut o = options(5, 0.0, None, &[]);
        o.params.prefill_step_size = step;
        let prompts: Vec<Vec<u32>> = texts.iter().map(|t| tok.encode_prompt(t).unwrap()).collect();
        assert!(prompts.iter().all(|p| p.len() > 4), "each prompt needs two chunks of 3");
        let mut s = Scheduler::new(tok.clone(), 8);
        let slots: Vec<Slot> = prompts
            .iter()
            .map(|p| {
                let (req, slot) = request(model.as_ref(), p.clone(), o.clone(), Arc::new(AtomicBool::new(false)));
                s.admit(model.as_ref(), req);
                slot
            })
            .collect();
        s.tick(model.as_ref());
        assert_eq!(s.waiting(), waiting_after_one, "prefill_step_size {step}: waiting after one tick");
        while !s.is_idle() {
            s.tick(model.as_ref());
        }
        for (i, (p, slot)) in prompts.iter().zip(&slots).enumerate() {
            let (got, _) = slot.lock().unwrap().clone().expect("answered");
            same(&got, &solo(model.as_ref(), &tok, p, &o), &format!("step {step}, request {i}"));
        }
    }
}

/// The fixture model, recording each `prefill_batch` call's chunk lengths, and
/// failing those calls while `fail` is set.
struct Recording {
    inner: Box<dyn LanguageModel>,
    calls: Mutex<Vec<Vec<usize>>>,
    fail: AtomicBool,
}

impl LanguageModel for Recording {
    fn forward(&self, ids: &mlx::Array, caches: &mut [Box<dyn lm::cache::Cache>], last_only: bool) -> mlx::Result<mlx::Array> {
        self.inner.forward(ids, caches, last_only)
    }
    fn forward_batch(&self, ids: &mlx::Array, caches: &mut [&mut [Box<dyn lm::cache::Cache>]]) -> mlx::Result<mlx::Array> {
        self.inner.forward_batch(ids, caches)
    }
    fn prefill_batch(&self, chunks: &[&[u32]], caches: &mut [&mut [Box<dyn lm::cache::Cache>]]) -> mlx::Result<()> {
        self.calls.lock().unwrap().push(chunks.iter().map(|c| c.len()).collect());
        if self.fail.load(Ordering::Relaxed) {
            return Err(mlx::Error::new("a pass that fails"));
        }
        self.inner.prefill_batch(chunks, caches)
    }
    fn new_caches(&self) -> lm::cache::LayerCaches {
        self.inner.new_caches()
    }
    fn config(&self) -> &lm::config::ModelConfig {
        self.inner.config()
    }
    fn dtype(&self) -> mlx::Dtype {
        self.inner.dtype()
    }
}

/// Prompts that start in one tick are fed in one model call: chunks shorter
/// than 64 positions as rows of one pass, longer ones as one prompt of another
/// (`Decoder::prefill_batch`), and every sequence still gets its solo answer,
/// in exact precision on the float32 fixture and bit for bit (log-probabilities
/// included) in fast precision on the 4-bit one, whose chunks of 64 or more
/// positions may take another kernel than shorter ones.
#[test]
fn prompts_that_start_together_are_fed_in_one_call_with_their_solo_answers() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/fixtures");
    let index: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(root.join("index.json")).expect("run npm test first")).unwrap();
    let long = "The history of the small town by the river goes back many centuries. ".repeat(6);
    let texts = ["Hello, my name is", long.as_str(), "1, 2, 3,", &format!("{long} And then"), "Paris is"];
    for (fixture, precision) in [("qwen3-f32", lm::models::Precision::Exact), ("qwen3-q4", lm::models::Precision::Fast)] {
        let dir = root.join(index["fixtures"][fixture]["path"].as_str().unwrap());
        let load = lm::models::LoadOptions { precision: Some(precision), ..Default::default() };
        let model = Recording {
            inner: lm::models::load_with_progress(&dir, &load, &mut |_| {}).unwrap(),
            calls: Mutex::new(Vec::new()),
            fail: AtomicBool::new(false),
        };
        let tok = Arc::new(Tokenizer::from_model_dir(&dir).unwrap());
        let opts = [
            options(8, 0.0, None, &[]),
            options(8, 0.8, Some(4), &[]),
            options(6, 0.0, None, &[]),
            options(8, 0.0, None, &[]),
            options(5, 0.0, None, &[]),
        ];
        let prompts: Vec<Vec<u32>> = texts.iter().map(|t| tok.encode_prompt(t).unwrap()).collect();
        assert!(prompts[1].len() > 65 && prompts[3].len() > 65 && prompts[0].len() < 64, "two long prompts and short ones");
        let wants: Vec<TextOutcome> = prompts.iter().zip(&opts).map(|(p, o)| solo(&model, &tok, p, o)).collect();
        model.calls.lock().unwrap().clear();
        let mut s = Scheduler::new(tok.clone(), 8);
        let slots: Vec<Slot> = prompts
            .iter()
            .zip(&opts)
            .map(|(p, o)| {
                let (req, slot) = request(&model, p.clone(), o.clone(), Arc::new(AtomicBool::new(false)));
                s.admit(&model, req);
                slot
            })
            .collect();
        s.tick(&model);
        assert_eq!(s.waiting(), 0, "{fixture}: all started in one tick");
        let all_but_last: Vec<usize> = prompts.iter().map(|p| p.len() - 1).collect();
        assert_eq!(*model.calls.lock().unwrap(), vec![all_but_last], "{fixture}: one call for every prompt");
        while !s.is_idle() {
            s.tick(&model);
        }
        for (i, (slot, want)) in slots.iter().zip(&wants).enumerate() {
            let (got, _) = slot.lock().unwrap().take().unwrap_or_else(|| panic!("{fixture}: request {i} never finished"));
            same(&got, want, &format!("{fixture}: request {i}"));
            if precision == lm::models::Precision::Fast {
                let lp = |o: &TextOutcome| o.logprobs.as_ref().unwrap().iter().map(|l| l.logprob.to_bits()).collect::<Vec<_>>();
                assert_eq!(lp(&got), lp(want), "{fixture}: request {i}: log-probabilities");
            }
        }
    }
}

/// A prefill pass that fails fails every request it fed (each hears the error,
/// none hangs), not the sequences already decoding, and the scheduler serves
/// the next requests.
#[test]
fn a_failed_prefill_pass_fails_the_requests_it_fed_and_no_others() {
    let (inner, tok) = fixture();
    let model = Recording { inner, calls: Mutex::new(Vec::new()), fail: AtomicBool::new(false) };
    let prompt = |t: &str| tok.encode_prompt(t).unwrap();
    let mut s = Scheduler::new(tok.clone(), 8);
    let results: Arc<Mutex<Vec<(usize, Result<Vec<u32>, String>)>>> = Arc::new(Mutex::new(Vec::new()));
    let admit = |s: &mut Scheduler, i: usize, text: &str, max_tokens: usize| {
        let r = results.clone();
        s.admit(
            &model,
            Request {
                prompt: prompt(text),
                options: options(max_tokens, 0.0, None, &[]),
                cache: PromptCache::scratch(&model),
                should_abort: Box::new(|| false),
                on_chunk: Box::new(|_| {}),
                on_done: Box::new(move |out, _| r.lock().unwrap().push((i, out.map(|o| o.tokens).map_err(|e| e.to_string())))),
            },
        );
    };
    // One decoding before the failure.
    admit(&mut s, 0, "Hello, my name is", 12);
    s.tick(&model);
    model.fail.store(true, Ordering::Relaxed);
    admit(&mut s, 1, "The quick brown fox", 4);
    admit(&mut s, 2, "1, 2, 3,", 4);
    s.tick(&model);
    model.fail.store(false, Ordering::Relaxed);
    admit(&mut s, 3, "Paris is", 4);
    while !s.is_idle() {
        s.tick(&model);
    }
    let mut got = results.lock().unwrap().clone();
    got.sort_by_key(|(i, _)| *i);
    assert_eq!(got.len(), 4, "{got:?}");
    for (i, r) in &got[1..3] {
        assert!(r.as_ref().is_err_and(|e| e.contains("a pass that fails")), "request {i}: {r:?}");
    }
    let alone = |t: &str, n| solo(&model, &tok, &prompt(t), &options(n, 0.0, None, &[])).tokens;
    assert_eq!(got[0].1.as_ref().unwrap(), &alone("Hello, my name is", 12));
    assert_eq!(got[3].1.as_ref().unwrap(), &alone("Paris is", 4));
}
