//! Text generation jobs on a model's worker thread, reporting chunks and the
//! result through a channel.
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lm::models::LanguageModel;
use lm::text::generate_text;
use lm::tokenizer::Tokenizer;
use lm::LmError;
use mlx::Dtype;
use tokio::sync::{mpsc as tmpsc, oneshot};

use crate::options::ParsedOptions;
use crate::worker::{guarded, Worker};

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

pub struct Engine {
    worker: Worker<Box<dyn LanguageModel>>,
    tokenizer: Option<Arc<Tokenizer>>,
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
        (Engine { worker, tokenizer: None }, reply)
    }

    /// Called once loading succeeded: generation jobs need the tokenizer.
    pub fn with_tokenizer(self, tokenizer: Arc<Tokenizer>) -> Engine {
        Engine { tokenizer: Some(tokenizer), ..self }
    }

    pub fn generate(&self, prompt: Vec<u32>, opts: ParsedOptions, abort: Arc<AtomicBool>) -> tmpsc::UnboundedReceiver<Event> {
        let (etx, erx) = tmpsc::unbounded_channel();
        let Some(tok) = self.tokenizer.clone() else {
            let _ = etx.send(Event::Failed(LmError::Mlx("the model is not loaded".into())));
            return erx;
        };
        let events = etx.clone();
        let queued = self.worker.run(move |model: &mut Box<dyn LanguageModel>| {
            let result = guarded("generation", || run_generation(model.as_ref(), &tok, &prompt, opts, &abort, &events));
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

    pub fn shutdown(&self) -> oneshot::Receiver<()> {
        self.worker.shutdown()
    }
}

fn load_model(dir: &std::path::Path, dtype: Option<Dtype>, progress: &mut dyn FnMut(f64)) -> Result<(Box<dyn LanguageModel>, Loaded), LmError> {
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
    };
    Ok((model, loaded))
}

/// One `generate()` call: `lm`'s text loop on fresh caches, its chunks and
/// result turned into events. It stops early when JS aborts, stops listening
/// (a closed receiver: it broke out of for-await) or the process exits.
fn run_generation(
    model: &dyn LanguageModel,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: ParsedOptions,
    abort: &AtomicBool,
    events: &tmpsc::UnboundedSender<Event>,
) -> Result<Summary, LmError> {
    let mut caches = model.new_caches();
    let should_abort = || abort.load(Ordering::Relaxed) || events.is_closed() || crate::worker::exiting();
    let mut on_chunk = |text: &str, token: u32| {
        let _ = events.send(Event::Chunk { text: text.to_string(), token });
    };
    let o = generate_text(model, tok, prompt, &opts, &mut caches, &should_abort, &mut on_chunk)?;
    Ok(Summary {
        text: o.text,
        tokens: o.tokens,
        finish_reason: o.finish_reason.as_str(),
        prompt_tokens: o.prompt_tokens,
        generation_tokens: o.generation_tokens,
        prompt_tps: o.prompt_tps,
        generation_tps: o.generation_tps,
        peak_memory: o.peak_memory,
    })
}
