//! The `NativeTts` class behind index.js's TextToSpeech: speech jobs on the
//! model's worker thread, audio reported through a channel per job.
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lm::generate::per_second;
use lm::LmError;
use napi::bindgen_prelude::Float32Array;
use napi_derive::napi;
use serde_json::Value;
use tokio::sync::mpsc as tmpsc;
use tts::pipeline::{Chatterbox, SynthesisOptions, SynthesisSummary, Voice, VoiceRef, SAMPLE_RATE};
use tts::streaming::StreamSchedule;
use tts::t3::T3Options;
use tts::voice::clone::ClipSource;
use tts::voice::{read_wav, Clip};

use crate::errors::{js_error, lm_error, plain, Code};
use crate::jobs::Lifecycle;
use crate::tts_options;
use crate::worker::Tick;
use crate::worker::{guarded, Worker};

type Result<T> = napi::Result<T, String>;

enum Event {
    Audio(Vec<f32>),
    Done(SynthesisSummary),
    /// A voice made (or saved) by `createVoice` / `Voice.save`.
    Voice(NativeVoice),
    Failed(LmError),
}

/// A cloned voice: its id for `voice` options, the seconds of clip it was made from, and
/// whether a long clip was cut while reading.
#[napi(object)]
#[derive(Clone)]
pub struct NativeVoice {
    pub id: u32,
    pub duration: f64,
    pub truncated: bool,
}

#[napi(object)]
pub struct NativeSpeechResult {
    pub speech_tokens: Vec<u32>,
    pub samples: f64,
    pub aborted: bool,
    /// T3's prompt positions and sampled ids, all pieces, with their rates
    /// (as the text side's `GenerationResult`).
    pub prompt_tokens: u32,
    pub prompt_tps: f64,
    pub generation_tokens: u32,
    pub generation_tps: f64,
    /// Seconds of native work for the whole call.
    pub processing_time: f64,
    /// Bytes.
    pub peak_memory: f64,
    /// The voice's prompt cache: "made", "kept" or "none".
    pub prompt_cache: String,
}

impl From<SynthesisSummary> for NativeSpeechResult {
    fn from(s: SynthesisSummary) -> Self {
        NativeSpeechResult {
            prompt_tokens: s.t3.prompt_tokens as u32,
            prompt_tps: per_second(s.t3.prompt_tokens, s.t3.prompt_seconds),
            generation_tokens: s.t3.generated as u32,
            generation_tps: per_second(s.t3.generated, s.t3.generation_seconds),
            processing_time: s.seconds,
            peak_memory: s.peak_memory as f64,
            prompt_cache: s.prompt_cache.name().to_string(),
            speech_tokens: s.speech_tokens,
            samples: s.samples as f64,
            aborted: s.aborted,
        }
    }
}

/// One streamed item: a chunk of audio or, last, the result.
#[napi(object)]
pub struct NativeSpeechEvent {
    pub audio: Option<Float32Array>,
    pub result: Option<NativeSpeechResult>,
    pub voice: Option<NativeVoice>,
}

#[napi]
pub struct NativeTts {
    /// First: dropped before `worker` (see `Lifecycle`).
    life: Lifecycle<Event>,
    worker: Worker<Chatterbox>,
    max_tokens: usize,
    multilingual: bool,
    /// The model's sampling defaults (Turbo's differ).
    defaults: T3Options,
}

#[napi]
pub async fn load_tts_native(path: String, prompt_cache: bool, s3_tokenizer: Option<String>) -> napi::Result<NativeTts> {
    // Found now, as mlx-audio's loader does; only a clone needs it, so a miss fails the clone.
    let config = hub::Config::from_env();
    let tokenizer = hub::find_s3_tokenizer(s3_tokenizer.as_deref().map(std::path::Path::new), &config).map_err(|e| e.message);
    let (worker, reply) = Worker::start(move || {
        let mut model = Chatterbox::load(&PathBuf::from(&path), tokenizer)?;
        model.keep_prompt_cache(prompt_cache);
        let about = (model.max_tokens(), model.multilingual(), model.default_options());
        Ok((model, about))
    });
    let (max_tokens, multilingual, defaults) =
        reply.await.map_err(|_| plain(js_error(Code::MlxError, "the engine thread stopped while loading")))?.map_err(|e| plain(lm_error(e)))?;
    Ok(NativeTts { life: Lifecycle::new("the speech model"), worker, max_tokens, multilingual, defaults })
}

/// A `voice` option names a file that is there, checked before the job is
/// queued (its contents are checked when the worker reads it).
fn check_voice(voice: Option<&VoiceRef>) -> Result<()> {
    match voice {
        Some(VoiceRef::File(path)) => Voice::check_path(path).map_err(lm_error),
        _ => Ok(()),
    }
}

/// Sentences of `text`, as the speech pipeline cuts long text.
#[napi]
pub fn split_sentences(text: String) -> Vec<String> {
    tts::text::sentences(&text)
}

/// What a job does on the worker.
enum Work {
    Speak { text: String, opts: SynthesisOptions, stream: Option<StreamSchedule> },
    Prepare { voice: Option<VoiceRef> },
    CreateVoice { clip: ClipInput, exaggeration: f32 },
    SaveVoice { voice: NativeVoice, path: PathBuf },
}

/// `createVoice`'s audio: a WAV file, or samples at a rate.
enum ClipInput {
    File(PathBuf),
    Samples(Vec<f32>, u32),
}

fn run(model: &Chatterbox, work: &Work, abort: &AtomicBool, events: &tmpsc::UnboundedSender<Event>) -> Event {
    if abort.load(Ordering::Relaxed) {
        return Event::Done(SynthesisSummary { aborted: true, ..SynthesisSummary::default() });
    }
    // A closed receiver means JS stopped listening (it broke out of for-await).
    let keep_going = || !abort.load(Ordering::Relaxed) && !events.is_closed() && !crate::worker::exiting();
    let result = match work {
        Work::Speak { text, opts, stream } => guarded("speech synthesis", || {
            model.synthesize(text, opts, *stream, &keep_going, &mut |samples| events.send(Event::Audio(samples)).is_ok())
        }),
        Work::Prepare { voice } => guarded("preparing a voice", || model.prepare(voice.as_ref(), &keep_going)),
        Work::CreateVoice { clip, exaggeration } => {
            return voice_event(guarded("making a voice", || {
                let (clip, source) = match clip {
                    ClipInput::File(path) => (read_wav(path)?, ClipSource::File),
                    ClipInput::Samples(samples, rate) => (Clip::from_samples(samples.clone(), *rate)?, ClipSource::Samples),
                };
                let id = model.create_voice(&clip, source, *exaggeration, &keep_going)?;
                Ok(NativeVoice { id, duration: clip.duration(), truncated: clip.truncated })
            }))
        }
        Work::SaveVoice { voice, path } => {
            return voice_event(guarded("saving a voice", || model.voices().save(voice.id, path).map(|()| voice.clone())));
        }
    };
    match result {
        Ok(s) => Event::Done(s),
        Err(e) => Event::Failed(e),
    }
}

fn voice_event(r: std::result::Result<NativeVoice, LmError>) -> Event {
    match r {
        Ok(v) => Event::Voice(v),
        Err(e) => Event::Failed(e),
    }
}

#[napi]
impl NativeTts {
    #[napi(getter)]
    pub fn disposed(&self) -> bool {
        self.life.is_disposed()
    }

    #[napi(getter)]
    pub fn sample_rate(&self) -> u32 {
        SAMPLE_RATE
    }

    /// Validates and queues a synthesis; events are read with `nextEvents`.
    /// `stream`: audio in chunks while speech tokens are still generated.
    #[napi]
    pub fn start(&self, text: String, options: Value, stream: bool) -> Result<u32> {
        self.live()?;
        if text.trim().is_empty() {
            return Err(js_error(Code::InvalidArgument, "text is empty: there is nothing to say"));
        }
        let (opts, schedule) = tts_options::parse(&options, self.max_tokens, self.multilingual, &self.defaults)?;
        check_voice(opts.voice.as_ref())?;
        self.queue(Work::Speak { text, opts, stream: stream.then_some(schedule) })
    }

    /// Validates and queues making a voice's prompt cache (`{ voice }`); its
    /// result comes as a synthesis's, with no audio.
    #[napi]
    pub fn prepare(&self, options: Value) -> Result<u32> {
        self.live()?;
        let voice = tts_options::parse_voice(&options)?;
        check_voice(voice.as_ref())?;
        self.queue(Work::Prepare { voice })
    }

    /// Queues cloning a voice from a WAV file (`path`) or from `samples` at `sample_rate`;
    /// its event is the voice.
    #[napi]
    pub fn create_voice(&self, path: Option<String>, samples: Option<Float32Array>, sample_rate: Option<u32>, exaggeration: f64) -> Result<u32> {
        self.live()?;
        // T3's own range for it (`T3Options::validate`).
        if !(exaggeration.is_finite() && exaggeration >= 0.0) {
            return Err(js_error(Code::InvalidArgument, format!("option exaggeration must be at least 0, got {exaggeration}")));
        }
        let clip = match (path, samples, sample_rate) {
            (Some(p), None, None) => ClipInput::File(PathBuf::from(p)),
            (None, Some(s), Some(rate)) => ClipInput::Samples(s.to_vec(), rate),
            _ => return Err(js_error(Code::InvalidArgument, "audio must be a WAV file path or { samples: Float32Array, sampleRate }")),
        };
        self.queue(Work::CreateVoice { clip, exaggeration: exaggeration as f32 })
    }

    /// Queues writing cloned voice `id` to `path` as a `conds.safetensors`.
    #[napi]
    pub fn save_voice(&self, id: u32, path: String) -> Result<u32> {
        self.live()?;
        self.queue(Work::SaveVoice { voice: NativeVoice { id, duration: 0.0, truncated: false }, path: PathBuf::from(path) })
    }

    /// Forgets cloned voice `id` (on the worker, which owns its arrays).
    #[napi]
    pub fn drop_voice(&self, id: u32) {
        self.worker.run(move |model: &mut Chatterbox| model.voices().remove(id));
    }

    fn live(&self) -> Result<()> {
        self.life.live()
    }

    fn queue(&self, work: Work) -> Result<u32> {
        let abort = Arc::new(AtomicBool::new(false));
        let (tx, rx) = tmpsc::unbounded_channel();
        let (a, events) = (abort.clone(), tx.clone());
        let queued = self.worker.run(move |model: &mut Chatterbox| {
            let _ = events.send(run(model, &work, &a, &events));
        });
        if !queued {
            let _ = tx.send(Event::Failed(LmError::Disposed("the speech model has been disposed".into())));
        }
        self.life.jobs.add(rx, abort)
    }

    /// Waits for at least one event of job `id` and returns all that are ready.
    #[napi]
    pub async fn next_events(&self, id: u32) -> napi::Result<Vec<NativeSpeechEvent>> {
        self.events_of(id).await.map_err(plain)
    }

    async fn events_of(&self, id: u32) -> Result<Vec<NativeSpeechEvent>> {
        let events = self.life.jobs.next(id, |e| !matches!(e, Event::Audio(_))).await?;
        events
            .into_iter()
            .map(|e| match e {
                Event::Audio(samples) => Ok(NativeSpeechEvent { audio: Some(Float32Array::new(samples)), result: None, voice: None }),
                Event::Done(summary) => Ok(NativeSpeechEvent { audio: None, result: Some(summary.into()), voice: None }),
                Event::Voice(v) => Ok(NativeSpeechEvent { audio: None, result: None, voice: Some(v) }),
                Event::Failed(e) => Err(lm_error(e)),
            })
            .collect()
    }

    /// Stops job `id` at the next speech token (its result then says aborted).
    #[napi]
    pub fn abort(&self, id: u32) {
        self.life.jobs.abort(id);
    }

    /// Stops listening to job `id` and aborts it.
    #[napi]
    pub fn cancel(&self, id: u32) {
        self.life.jobs.cancel(id);
    }

    /// Aborts running and queued work, then frees the model. Later calls fail with DISPOSED.
    #[napi]
    pub async fn dispose(&self) -> napi::Result<()> {
        if self.life.dispose() {
            let _ = self.worker.shutdown().await;
        }
        Ok(())
    }
}

/// Chatterbox's text clean-up, as applied before tokenising (exposed for tests and tools).
#[napi]
pub fn punc_norm(text: String) -> String {
    tts::text::punc_norm(&text, true)
}

/// The text token ids (no start/stop) that the speech model in folder `dir`
/// reads for `text` in `language`, from its config.json and tokenizer alone
/// (exposed for tests and tools).
#[napi]
pub fn tts_text_ids(dir: String, text: String, language: Option<String>) -> Result<Vec<u32>> {
    let dir = PathBuf::from(dir);
    let config = tts::config::ChatterboxConfig::from_dir(&dir).map_err(lm_error)?;
    let tokenizer = tts::tokenizer::TextTokenizer::for_model(&dir, &config).map_err(lm_error)?;
    tokenizer.text_ids(&text, language.as_deref()).map_err(lm_error)
}

/// Speech jobs run whole; nothing happens between them.
impl Tick for Chatterbox {}
