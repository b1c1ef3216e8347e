//! Speech options from JS, validated before any work (INVALID_ARGUMENT naming
//! the option), mapped onto the pipeline's `SynthesisOptions`.
use std::path::PathBuf;

use serde_json::Value;
use tts::pipeline::{SynthesisOptions, VoiceRef};
use tts::streaming::StreamSchedule;
use tts::t3::T3Options;

use crate::options::{invalid, options_object, Opts};

type R<T> = napi::Result<T, String>;

const KNOWN: &[&str] = &[
    "temperature",
    "cfgWeight",
    "exaggeration",
    "repetitionPenalty",
    "minP",
    "topP",
    "maxTokens",
    "seed",
    "voice",
    "language",
    "firstChunkTokens",
    "chunkTokens",
];

/// Converts the JS values; `tts` checks them. `max_tokens`: the model's longest speech-token sequence;
/// `multilingual`: whether it takes languages other than English; `t`: the model's defaults. The schedule is
/// `stream()`'s chunk sizes (`synthesize()` validates and ignores them, so one
/// options object serves both).
pub fn parse(value: &Value, max_tokens: usize, multilingual: bool, t: &T3Options) -> R<(SynthesisOptions, StreamSchedule)> {
    let map = &options_object(value, KNOWN)?;
    let o = Opts(map);
    let f = |v: Option<f64>, d: f32| v.map(|x| x as f32).unwrap_or(d);
    let voice = voice_of(map)?;
    let synthesis = SynthesisOptions {
        t3: T3Options {
            temperature: f(o.number("temperature")?, t.temperature),
            cfg_weight: f(o.number("cfgWeight")?, t.cfg_weight),
            exaggeration: f(o.number("exaggeration")?, t.exaggeration),
            repetition_penalty: f(o.number("repetitionPenalty")?, t.repetition_penalty),
            min_p: f(o.number("minP")?, t.min_p),
            top_p: f(o.number("topP")?, t.top_p),
            // Integers as the Rust type holds them; `validate` checks the range.
            max_tokens: o.int("maxTokens", 0, i64::MAX)?.map_or(t.max_tokens.min(max_tokens), |v| v as usize),
        },
        seed: o.int("seed", 0, u32::MAX as i64)?.map(|v| v as u64),
        voice,
        language: language_of(map, multilingual)?,
    };
    // The ranges are tts's (`T3Options::validate`), checked here so the call itself fails.
    synthesis.t3.validate(max_tokens).map_err(|e| invalid(e.message().to_string()))?;
    let s = StreamSchedule::default();
    let schedule = StreamSchedule {
        first_chunk: o.int("firstChunkTokens", 0, i64::MAX)?.map_or(s.first_chunk, |v| v as usize),
        chunk: o.int("chunkTokens", 0, i64::MAX)?.map_or(s.chunk, |v| v as usize),
        ..s
    };
    schedule.validate(max_tokens).map_err(|e| invalid(e.message().to_string()))?;
    Ok((synthesis, schedule))
}

/// `prepare()`'s options: `voice` only.
pub fn parse_voice(value: &Value) -> R<Option<VoiceRef>> {
    voice_of(&options_object(value, &["voice"])?)
}

/// `language`: an ISO code the model speaks (tts's check), lowercased.
fn language_of(map: &serde_json::Map<String, Value>, multilingual: bool) -> R<Option<String>> {
    let code = match map.get("language") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => s,
        Some(other) => return Err(invalid(format!("option language must be a language code such as \"fr\", got {other}"))),
    };
    let code = tts::text_mtl::check_language(Some(code), multilingual).map_err(|e| invalid(e.message().to_string()))?;
    Ok(Some(code))
}

/// A path (a `conds.safetensors` or a WAV clip), or the id of a cloned voice (what
/// lib/text-to-speech.js passes for a `Voice`).
fn voice_of(map: &serde_json::Map<String, Value>) -> R<Option<VoiceRef>> {
    match map.get("voice") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(VoiceRef::File(PathBuf::from(s)))),
        Some(Value::Number(n)) if n.as_u64().is_some_and(|id| id <= u32::MAX as u64) => Ok(Some(VoiceRef::Cloned(n.as_u64().unwrap_or(0) as u32))),
        Some(other) => Err(invalid(format!("option voice must be a Voice or a path to a WAV clip or a conds.safetensors file, got {other}"))),
    }
}
