//! Audio while T3 is still generating: every few speech tokens, the new
//! tokens are turned into mel (with some earlier tokens as context) and
//! vocoded, overlapping the previous chunk by a few mel frames whose audio is
//! cross-faded (the scheme of CosyVoice's streaming token2wav, which
//! Chatterbox's S3Gen comes from, with a bounded token window so a chunk costs
//! the same at any point of a long utterance). Chunks double in size from the
//! first up to `chunk` (CosyVoice's `stream_scale_factor` of 2): a small first
//! chunk is early audio, and each next one is ready before the audio handed
//! out so far has played whenever the work runs at least twice as fast as
//! real time, where fixed large chunks after a small first one would leave a
//! gap after it.
use mlx::random::KeySequence;
use mlx::{Array, Dtype};

use crate::hift::{self, Hift};
use crate::s3gen::{GenConds, PromptCache, S3GenFlow};
use crate::Result;

/// Mel frames per speech token, audio samples per mel frame.
const FRAMES_PER_TOKEN: usize = 2;
const SAMPLES_PER_FRAME: i32 = 480;
/// Tokens S3Gen's encoder looks ahead; their frames wait for the next chunk.
const LOOKAHEAD_TOKENS: usize = 3;
/// Mel frames re-rendered at the start of each chunk and cross-faded.
const OVERLAP_FRAMES: i32 = 8;

/// The fewest tokens a first chunk may have: its frames must outnumber the
/// overlap held back for the cross-fade, or the next chunk would start with a
/// hard seam.
pub const MIN_FIRST_CHUNK: usize = OVERLAP_FRAMES as usize / FRAMES_PER_TOKEN + 1;

#[derive(Debug, Clone, Copy)]
pub struct StreamSchedule {
    /// Tokens before the first chunk (25 tokens = 1 s of audio), at least
    /// `MIN_FIRST_CHUNK`.
    pub first_chunk: usize,
    /// The most tokens of a later chunk, at least 1: each takes twice the
    /// tokens of the one before, up to this.
    pub chunk: usize,
    /// Earlier tokens given to S3Gen as context for a chunk.
    pub context: usize,
}

impl Default for StreamSchedule {
    fn default() -> Self {
        StreamSchedule { first_chunk: 10, chunk: 50, context: 50 }
    }
}

impl StreamSchedule {
    /// The one range check of the chunk sizes: `max_tokens` is the model's
    /// longest speech-token sequence (a larger chunk is that sequence).
    pub fn validate(&self, max_tokens: usize) -> Result<()> {
        let max = max_tokens.max(MIN_FIRST_CHUNK);
        let check = |name: &str, v: usize, lo: usize| {
            if (lo..=max).contains(&v) {
                Ok(())
            } else {
                Err(crate::TtsError::InvalidArgument(format!("option {name} must be an integer in [{lo}, {max}], got {v}")))
            }
        };
        check("firstChunkTokens", self.first_chunk, MIN_FIRST_CHUNK)?;
        check("chunkTokens", self.chunk, 1)
    }
}

/// The tail of the previous chunk: its last mel frames, excitation and audio.
struct Overlap {
    mel: Array,
    source: Array,
    audio: Array,
}

pub struct ChunkVocoder<'a> {
    flow: &'a S3GenFlow,
    hift: &'a Hift,
    conds: &'a GenConds,
    /// The voice prompt's frames, recorded: a chunk then runs the flow over its
    /// own frames only (`S3GenFlow::mel_after_prompt`).
    cache: Option<&'a PromptCache>,
    schedule: StreamSchedule,
    keys: KeySequence,
    /// Tokens whose audio has been handed out (up to the overlap).
    done: usize,
    overlap: Option<Overlap>,
    /// Tokens the next chunk waits for.
    want: usize,
}

impl<'a> ChunkVocoder<'a> {
    pub fn new(
        flow: &'a S3GenFlow,
        hift: &'a Hift,
        conds: &'a GenConds,
        cache: Option<&'a PromptCache>,
        schedule: StreamSchedule,
        keys: KeySequence,
    ) -> Self {
        ChunkVocoder { flow, hift, conds, cache, schedule, keys, done: 0, overlap: None, want: schedule.first_chunk }
    }

    /// Whether `tokens` clean speech tokens are enough for the next chunk.
    pub fn ready(&self, tokens: usize) -> bool {
        tokens >= self.done + self.want + LOOKAHEAD_TOKENS
    }

    /// Audio for the tokens not yet vocoded (all of them when `last`).
    pub fn chunk(&mut self, tokens: &[u32], last: bool) -> Result<Vec<f32>> {
        let end = if last { tokens.len() } else { tokens.len().saturating_sub(LOOKAHEAD_TOKENS) };
        if end <= self.done || (last && tokens.is_empty()) {
            return self.flush(last);
        }
        let from = self.done.saturating_sub(self.schedule.context);
        let mel = match self.cache {
            // Turbo's flow draws fresh noise per chunk, from the chunks' own keys.
            Some(cache) => self.flow.mel_after_prompt(&tokens[from..], self.conds, last, cache, &mut self.keys)?,
            None if self.flow.meanflow() => self.flow.mel_meanflow(&tokens[from..], self.conds, last, &mut self.keys)?,
            None => self.flow.mel(&tokens[from..], self.conds, last)?,
        };
        // A cloned voice's prompt mel may hold one frame more than two per prompt token
        // (`embed_ref` keeps an odd mel when the tokens fill it): a whole render then reads it
        // over the first new token's first frame and cuts that frame, so no chunk hands out
        // the first `shift` frames. The flow's mel starts `offset` frames into token `from`:
        // the whole prompt mel leads it without a cache; a cache holds the tokens' frames only.
        let shift = self.conds.prompt_feat.dim(1) - (self.conds.prompt_tokens.len() * FRAMES_PER_TOKEN) as i32;
        let offset = if self.cache.is_some() { 0 } else { shift };
        let first = ((self.done * FRAMES_PER_TOKEN) as i32).max(shift) - (from * FRAMES_PER_TOKEN) as i32;
        let start = (first - offset).max(0);
        let stop = ((end - from) * FRAMES_PER_TOKEN) as i32 - offset;
        let mut mel = mel.slice_axis(2, start, stop.min(mel.dim(2)))?;
        let mut cache_source = None;
        if let Some(o) = &self.overlap {
            mel = Array::concatenate(&[&o.mel, &mel], 2)?;
            cache_source = Some(o.source.clone());
        }
        let (audio, source) = self.hift.inference(&mel, cache_source.as_ref(), &mut self.keys)?;
        let mut audio = match &self.overlap {
            Some(o) => crossfade(&audio, &o.audio)?,
            None => audio,
        };
        if self.done == 0 {
            audio = hift::fade_in(&audio)?;
        }
        self.want = (self.want * 2).min(self.schedule.chunk);
        self.done = end;
        let (n, frames) = (audio.dim(1), mel.dim(2));
        let keep = OVERLAP_FRAMES * SAMPLES_PER_FRAME;
        // Turbo's vocoder ends short of its frames' samples (60 fewer per call: each stage
        // is cut to its source's uncentred STFT). The next chunk's audio starts at the
        // overlap frames' first sample all the same, so the audio both chunks hold is the
        // overlap's samples less that shortfall: that much is held back and cross-faded.
        let keep_audio = keep - (frames * SAMPLES_PER_FRAME - n);
        if last || keep_audio <= 0 || n <= keep_audio || frames <= OVERLAP_FRAMES {
            self.overlap = None;
            return Ok(audio.flatten()?.to_vec::<f32>()?);
        }
        self.overlap = Some(Overlap {
            mel: mel.slice_axis(2, frames - OVERLAP_FRAMES, frames)?,
            source: source.slice_axis(2, source.dim(2) - keep, source.dim(2))?,
            audio: audio.slice_axis(1, n - keep_audio, n)?,
        });
        Ok(audio.slice_axis(1, 0, n - keep_audio)?.flatten()?.to_vec::<f32>()?)
    }

    /// At the end with nothing new: the held-back overlap audio, as it is.
    fn flush(&mut self, last: bool) -> Result<Vec<f32>> {
        if !last {
            return Ok(Vec::new());
        }
        match self.overlap.take() {
            Some(o) => Ok(o.audio.flatten()?.to_vec::<f32>()?),
            None => Ok(Vec::new()),
        }
    }
}

/// The first `len(prev)` samples of `audio` faded in over `prev` faded out,
/// with the two halves of a Hamming window (CosyVoice's `fade_in_out`).
fn crossfade(audio: &Array, prev: &Array) -> mlx::Result<Array> {
    let n = prev.dim(1);
    if audio.dim(1) < n {
        return Ok(audio.clone());
    }
    let m = 2 * n;
    let k = Array::arange(0.0, m as f64, 1.0, Dtype::Float32)?;
    let window = k.multiply_scalar(2.0 * std::f64::consts::PI / (m - 1) as f64)?.cos()?.multiply_scalar(-0.46)?.add_scalar(0.54)?;
    let rising = window.slice_axis(0, 0, n)?;
    let falling = window.slice_axis(0, n, m)?;
    let head = audio.slice_axis(1, 0, n)?.multiply(&rising)?.add(&prev.multiply(&falling)?)?;
    Array::concatenate(&[&head, &audio.slice_axis(1, n, audio.dim(1))?], 1)
}
