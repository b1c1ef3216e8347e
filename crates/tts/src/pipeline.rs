//! Chatterbox end to end: text -> normalised pieces -> T3 speech tokens ->
//! S3Gen mel -> HiFT audio, on the caller's (worker) thread.
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use lm::generate::{GenerationStats, Next};
use lm::weights::Weights;
use mlx::random::KeySequence;

use crate::config::ChatterboxConfig;
use crate::hift::{self, Hift, HiftConfig};
use crate::s3gen::{PromptCache, S3GenConfig, S3GenFlow};
use crate::streaming::{ChunkVocoder, StreamSchedule};
use crate::t3::{T3Config, T3Options, T3};
use crate::text::{split_pieces, MAX_PIECE_CHARS};
use crate::tokenizer::TextTokenizer;
use crate::voice::clone::ClipSource;
use crate::voice::Clip;
use crate::voices::{CloneSource, VoiceKey, Voices};
pub use crate::voices::{Voice, VoiceRef};
use crate::{Result, TtsError};

pub const SAMPLE_RATE: u32 = 24_000;
/// Speech token ids at or above this are special (start/stop speech and padding).
const SPEECH_VOCAB: u32 = 6561;

/// `SynthesizeOptions` of the public API: T3's sampling options (Resemble
/// AI's defaults), the seed of the whole call, another voice and the
/// language (ISO code; `None`: English).
#[derive(Debug, Clone, Default)]
pub struct SynthesisOptions {
    pub t3: T3Options,
    pub seed: Option<u64>,
    pub voice: Option<VoiceRef>,
    pub language: Option<String>,
}

/// What a call did about the voice's prompt cache (`Chatterbox::prompt_cache`),
/// in order: over several pieces the greatest counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum CacheUse {
    /// None used: `synthesize`, caching off, or a voice whose prompt cannot be cached.
    #[default]
    None,
    /// The cache was there already (the last streamed or prepared voice).
    Kept,
    /// This call made it.
    Made,
}

impl CacheUse {
    pub fn name(self) -> &'static str {
        match self {
            CacheUse::None => "none",
            CacheUse::Kept => "kept",
            CacheUse::Made => "made",
        }
    }
}

/// What one synthesis produced besides the audio chunks.
#[derive(Debug, Clone, Default)]
pub struct SynthesisSummary {
    /// Speech tokens of every piece, special tokens removed.
    pub speech_tokens: Vec<u32>,
    pub samples: usize,
    pub aborted: bool,
    /// T3 over every piece: prompt positions, sampled ids and seconds summed.
    /// Streamed, the decode seconds include the chunks vocoded between tokens.
    pub t3: GenerationStats,
    /// Seconds of the whole call: T3, S3Gen and the vocoder, and when
    /// streaming a voice for the first time, its prompt cache.
    pub seconds: f64,
    /// Peak MLX memory during the call, bytes.
    pub peak_memory: usize,
    /// The prompt cache: made if any piece made it, else kept if any used it.
    pub prompt_cache: CacheUse,
}

impl SynthesisSummary {
    fn add_t3(&mut self, s: &GenerationStats) {
        let t = &mut self.t3;
        t.prompt_tokens += s.prompt_tokens;
        t.generated += s.generated;
        t.prompt_seconds += s.prompt_seconds;
        t.generation_seconds += s.generation_seconds;
    }

    /// Takes in MLX's peak since its last reset (T3 resets it for every piece).
    fn note_peak(&mut self) -> Result<()> {
        self.peak_memory = self.peak_memory.max(mlx::memory::stats()?.peak);
        Ok(())
    }

    /// The summary of a call that began at `t0`, with its time and peak.
    fn finish(mut self, t0: Instant) -> Result<SynthesisSummary> {
        self.note_peak()?;
        self.seconds = t0.elapsed().as_secs_f64();
        Ok(self)
    }
}

pub struct Chatterbox {
    tokenizer: TextTokenizer,
    t3: T3,
    flow: S3GenFlow,
    hift: Hift,
    voices: Voices,
    start_text: u32,
    stop_text: u32,
    text_vocab: u32,
    max_speech_tokens: usize,
    /// The last streamed voice's prompt cache (`None` inside: that voice cannot
    /// have one), so that its chunks skip the prompt's frames. One voice only:
    /// a cache is large (2.3 GB for the real model's 10 s prompt).
    prompt_cache: Mutex<Option<(VoiceKey, Option<Arc<PromptCache>>)>>,
    /// Whether streaming makes and keeps that cache.
    use_prompt_cache: bool,
    /// Chatterbox Turbo: GPT-2 T3, meanflow S3Gen (see `piece_whole`).
    turbo: bool,
}

/// S3Gen's silence token, which Turbo appends to a piece's speech tokens (mlx-audio:
/// three `S3GEN_SIL` in `generate`).
const TURBO_SILENCE: [u32; 3] = [4299; 3];

impl Chatterbox {
    /// `s3_tokenizer`: the S3 tokenizer's weights for voice cloning, or why there are none
    /// (`CloneSource::tokenizer`).
    pub fn load(dir: &Path, s3_tokenizer: std::result::Result<PathBuf, String>) -> Result<Chatterbox> {
        let config = ChatterboxConfig::from_dir(dir)?;
        let turbo = config.turbo();
        let source = dir.join("config.json").display().to_string();
        let (t3_cfg, flow_cfg) = match turbo {
            true => (T3Config::turbo_from_json(config.section("t3_config"))?, S3GenConfig::turbo_from_config(&config.raw, &source)?),
            false => (T3Config::from_json(&config.t3_section())?, S3GenConfig::from_config(&config.raw, &source)?),
        };
        let hift_cfg = HiftConfig { turbo, ..HiftConfig::from_config_json(&config.raw)? };
        let tokenizer = TextTokenizer::for_model(dir, &config)?;
        let mut w = Weights::load(dir, None, config.quantization())?;
        if turbo {
            crate::s3gen::turbo_names::rename(&mut w)?;
        }
        let t3 = T3::load(&mut w, &t3_cfg)?;
        let flow = S3GenFlow::load(&mut w, &flow_cfg)?;
        let hift = Hift::load(&mut w, &hift_cfg)?;
        // The speaker encoders (voice encoder, CAMPPlus) only make voices from reference
        // audio: `voice::SpeakerEncoders::load` reads them from the folder then. Dropped here
        // unread (MLX reads a tensor when it is first evaluated).
        w.discard(|k| k.starts_with("ve.") || k.starts_with("s3gen.speaker_encoder."));
        w.finish()?;
        let source = CloneSource { dir: dir.to_path_buf(), tokenizer: s3_tokenizer, prompt_len: t3_cfg.speech_cond_prompt_len, turbo };
        let voices = Voices::new(dir, source)?;
        Ok(Chatterbox {
            tokenizer,
            t3,
            flow,
            hift,
            voices,
            start_text: t3_cfg.start_text_token,
            stop_text: t3_cfg.stop_text_token,
            text_vocab: t3_cfg.text_tokens_dict_size,
            max_speech_tokens: t3_cfg.max_speech_tokens,
            prompt_cache: Mutex::new(None),
            use_prompt_cache: true,
            turbo,
        })
    }

    /// Whether this is Chatterbox Turbo.
    pub fn turbo(&self) -> bool {
        self.turbo
    }

    /// The sampling options a call starts from: mlx-audio's `generate` defaults for this model.
    pub fn default_options(&self) -> T3Options {
        if self.turbo {
            T3Options::turbo()
        } else {
            T3Options::default()
        }
    }

    /// The most speech tokens T3 can produce for one piece (its position table's size).
    pub fn max_tokens(&self) -> usize {
        self.max_speech_tokens
    }

    /// Whether this is a multilingual checkpoint (it takes `language`).
    pub fn multilingual(&self) -> bool {
        self.tokenizer.multilingual()
    }

    /// Text token ids for one piece in `language`: normalised, tokenised, wrapped in
    /// start/stop (but for Turbo, whose T3 takes the GPT-2 ids as they are).
    pub fn text_tokens(&self, piece: &str, language: Option<&str>) -> Result<Vec<u32>> {
        let ids = self.tokenizer.text_ids(piece, language)?;
        if let Some(bad) = ids.iter().find(|&&t| t >= self.text_vocab) {
            return Err(TtsError::InvalidWeights(format!("tokenizer.json produced id {bad}, outside T3's text vocabulary ({})", self.text_vocab)));
        }
        if self.turbo {
            return Ok(ids);
        }
        let mut out = Vec::with_capacity(ids.len() + 2);
        out.push(self.start_text);
        out.extend(ids);
        out.push(self.stop_text);
        Ok(out)
    }

    /// Synthesises `text`, handing audio to `on_audio` as soon as it is ready:
    /// per piece of text, or with `stream`, in chunks while T3 still runs.
    /// `on_audio` or `keep_going` returning false stops the work.
    pub fn synthesize(
        &self,
        text: &str,
        opts: &SynthesisOptions,
        stream: Option<StreamSchedule>,
        keep_going: &dyn Fn() -> bool,
        on_audio: &mut dyn FnMut(Vec<f32>) -> bool,
    ) -> Result<SynthesisSummary> {
        if text.trim().is_empty() {
            return Err(TtsError::InvalidArgument("text is empty: there is nothing to say".into()));
        }
        let t0 = Instant::now();
        mlx::memory::reset_peak()?;
        let voice = match self.voices.get(opts.voice.as_ref(), opts.t3.exaggeration, keep_going) {
            // Stopped while a WAV voice was being cloned.
            Err(TtsError::Aborted(_)) => return SynthesisSummary { aborted: true, ..SynthesisSummary::default() }.finish(t0),
            other => other?,
        };
        let voice = &*voice;
        // One random sequence for the whole call: T3's draws, then the vocoder's, as mlx-audio.
        let mut keys = match opts.seed {
            Some(s) => KeySequence::new(s)?,
            None => KeySequence::from_time()?,
        };
        let t3_opts = &opts.t3;
        let mut summary = SynthesisSummary::default();
        for piece in split_pieces(text, MAX_PIECE_CHARS) {
            let tokens = self.text_tokens(&piece, opts.language.as_deref())?;
            let done = match stream {
                Some(schedule) => {
                    let (cache, used) = match self.prompt_cache(voice, VoiceKey::of(opts.voice.as_ref()), keep_going) {
                        Err(TtsError::Aborted(_)) => {
                            summary.aborted = true;
                            return summary.finish(t0);
                        }
                        other => other?,
                    };
                    summary.note_peak()?;
                    summary.prompt_cache = summary.prompt_cache.max(used);
                    let cache = cache.as_deref();
                    self.piece_streamed(voice, cache, &tokens, t3_opts, &mut keys, schedule, opts.seed, keep_going, on_audio, &mut summary)?
                }
                None => self.piece_whole(voice, &tokens, t3_opts, &mut keys, keep_going, on_audio, &mut summary)?,
            };
            summary.note_peak()?;
            if !done {
                summary.aborted = true;
                return summary.finish(t0);
            }
        }
        summary.finish(t0)
    }

    /// Makes the prompt cache of a voice (the model folder's, a file, a cloned one) now, which
    /// the first `stream` of that voice would otherwise make before its first chunk. Stopped
    /// (`keep_going`), it keeps nothing and the summary says aborted.
    pub fn prepare(&self, which: Option<&VoiceRef>, keep_going: &dyn Fn() -> bool) -> Result<SynthesisSummary> {
        let t0 = Instant::now();
        mlx::memory::reset_peak()?;
        let mut summary = SynthesisSummary::default();
        let made = self
            .voices
            .get(which, T3Options::default().exaggeration, keep_going)
            .and_then(|voice| self.prompt_cache(&voice, VoiceKey::of(which), keep_going));
        match made {
            Err(TtsError::Aborted(_)) => summary.aborted = true,
            other => summary.prompt_cache = other?.1,
        }
        summary.finish(t0)
    }

    /// Clones a voice from `clip` (`createVoice`); returns its id for `VoiceRef::Cloned`.
    pub fn create_voice(&self, clip: &Clip, source: ClipSource, exaggeration: f32, keep_going: &dyn Fn() -> bool) -> Result<u32> {
        self.voices.create(clip, source, exaggeration, keep_going)
    }

    /// The voices: `save` and `remove` of cloned ones.
    pub fn voices(&self) -> &Voices {
        &self.voices
    }

    /// Whether `stream` keeps a prompt cache (the default); without one every
    /// chunk runs the flow over the voice prompt as well, with no extra memory.
    pub fn keep_prompt_cache(&mut self, keep: bool) {
        self.use_prompt_cache = keep;
        if !keep {
            *self.prompt_cache.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// The prompt cache of `voice` (`key`), made now unless it was the last
    /// streamed voice. The first stream of a voice pays for it: one pass of the
    /// flow over the prompt alone, about what a whole render costs. Stopped
    /// (`keep_going`), it keeps nothing and is `ABORTED`.
    fn prompt_cache(&self, voice: &Voice, key: VoiceKey, keep_going: &dyn Fn() -> bool) -> Result<(Option<Arc<PromptCache>>, CacheUse)> {
        if !self.use_prompt_cache {
            return Ok((None, CacheUse::None));
        }
        let used = |cache: &Option<Arc<PromptCache>>, how| (cache.clone(), if cache.is_some() { how } else { CacheUse::None });
        let mut slot = self.prompt_cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((k, cache)) = slot.as_ref() {
            if *k == key {
                return Ok(used(cache, CacheUse::Kept));
            }
        }
        // The old one goes first: two at once could double the memory.
        *slot = None;
        let cache = self.flow.prompt_cache(&voice.gen, keep_going)?.map(Arc::new);
        *slot = Some((key, cache.clone()));
        Ok(used(&cache, CacheUse::Made))
    }

    /// One piece as mlx-audio renders it: all speech tokens, then mel, then audio.
    /// False when stopped.
    #[allow(clippy::too_many_arguments)]
    fn piece_whole(
        &self,
        voice: &Voice,
        tokens: &[u32],
        t3_opts: &T3Options,
        keys: &mut KeySequence,
        keep_going: &dyn Fn() -> bool,
        on_audio: &mut dyn FnMut(Vec<f32>) -> bool,
        summary: &mut SynthesisSummary,
    ) -> Result<bool> {
        let mut stopped = false;
        let (raw, t3) = self.t3.generate(&voice.t3, tokens, t3_opts, keys, |_| {
            if keep_going() {
                Ok(Next::Continue)
            } else {
                stopped = true;
                Ok(Next::Stop)
            }
        })?;
        summary.add_t3(&t3);
        if stopped {
            return Ok(false);
        }
        let speech = clean_speech_tokens(&raw);
        if speech.is_empty() {
            return Ok(true);
        }
        let mel = match self.turbo {
            true => self.flow.mel_meanflow(&[&speech[..], &TURBO_SILENCE].concat(), &voice.gen, true, keys)?,
            false => self.flow.mel(&speech, &voice.gen, true)?,
        };
        let (wav, _source) = self.hift.inference(&mel, None, keys)?;
        let wav = hift::fade_in(&wav)?;
        let samples: Vec<f32> = wav.flatten()?.to_vec::<f32>()?;
        summary.speech_tokens.extend_from_slice(&speech);
        summary.samples += samples.len();
        Ok(on_audio(samples) && keep_going())
    }

    /// One piece with audio handed out while T3 still runs (see `streaming`).
    /// The vocoder's random draws (and Turbo's flow noise) come from a second
    /// sequence (seed + 1), as chunks draw at other sizes than a whole-piece
    /// render anyway.
    #[allow(clippy::too_many_arguments)]
    fn piece_streamed(
        &self,
        voice: &Voice,
        cache: Option<&PromptCache>,
        tokens: &[u32],
        t3_opts: &T3Options,
        keys: &mut KeySequence,
        schedule: StreamSchedule,
        seed: Option<u64>,
        keep_going: &dyn Fn() -> bool,
        on_audio: &mut dyn FnMut(Vec<f32>) -> bool,
        summary: &mut SynthesisSummary,
    ) -> Result<bool> {
        let vocoder_keys = match seed {
            Some(s) => KeySequence::new(s.wrapping_add(1))?,
            None => KeySequence::from_time()?,
        };
        let mut vocoder = ChunkVocoder::new(&self.flow, &self.hift, &voice.gen, cache, schedule, vocoder_keys);
        let mut speech: Vec<u32> = Vec::new();
        let mut ended = false;
        let mut stopped = false;
        let mut failure = None;
        let mut emit = |samples: Vec<f32>, summary: &mut SynthesisSummary| -> bool {
            summary.samples += samples.len();
            samples.is_empty() || on_audio(samples)
        };
        let (_, t3) = self.t3.generate(&voice.t3, tokens, t3_opts, keys, |t| {
            if !keep_going() {
                stopped = true;
                return Ok(Next::Stop);
            }
            if t == SPEECH_VOCAB + 1 {
                ended = true;
                return Ok(Next::Continue);
            }
            if ended || t >= SPEECH_VOCAB {
                return Ok(Next::Continue);
            }
            speech.push(t);
            if vocoder.ready(speech.len()) {
                match vocoder.chunk(&speech, false) {
                    Ok(samples) => {
                        if !emit(samples, summary) {
                            stopped = true;
                            return Ok(Next::Stop);
                        }
                    }
                    Err(e) => {
                        failure = Some(e);
                        return Ok(Next::Stop);
                    }
                }
            }
            Ok(Next::Continue)
        })?;
        summary.add_t3(&t3);
        if let Some(e) = failure {
            return Err(e);
        }
        if stopped {
            return Ok(false);
        }
        // Turbo's last chunk ends in its silence tokens, as its whole render does.
        let samples = match self.turbo && !speech.is_empty() {
            true => vocoder.chunk(&[&speech[..], &TURBO_SILENCE].concat(), true)?,
            false => vocoder.chunk(&speech, true)?,
        };
        summary.speech_tokens.extend_from_slice(&speech);
        Ok(emit(samples, summary) && keep_going())
    }
}

/// mlx-audio's `drop_invalid_tokens` then the `< 6561` filter: the ids between
/// the first start-speech and the first stop-speech token, specials removed.
pub fn clean_speech_tokens(raw: &[u32]) -> Vec<u32> {
    let start = raw.iter().position(|&t| t == SPEECH_VOCAB).map_or(0, |i| i + 1);
    let end = raw.iter().position(|&t| t == SPEECH_VOCAB + 1).unwrap_or(raw.len());
    if start >= end {
        return Vec::new();
    }
    raw[start..end].iter().copied().filter(|&t| t < SPEECH_VOCAB).collect()
}

#[cfg(test)]
mod tests {
    use super::clean_speech_tokens;

    #[test]
    fn clean_keeps_what_lies_between_start_and_stop() {
        assert_eq!(clean_speech_tokens(&[6561, 5, 7, 6563, 9, 6562, 11]), vec![5, 7, 9]);
        assert_eq!(clean_speech_tokens(&[6561, 6562]), Vec::<u32>::new());
        assert_eq!(clean_speech_tokens(&[1, 2]), vec![1, 2]);
    }
}
