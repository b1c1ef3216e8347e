//! Generation options from JS, validated before any work: every wrong type,
//! range or unknown name is an INVALID_ARGUMENT naming the option.
use lm::generate::{GenerateParams, MAX_TOP_LOGPROBS};
use lm::sampling::SamplingOptions;
use serde_json::{Map, Value};

use crate::errors::{js_error, Code};

type R<T> = napi::Result<T, String>;

const KNOWN: &[&str] = &[
    "maxTokens",
    "temperature",
    "topP",
    "topK",
    "minP",
    "minTokensToKeep",
    "repetitionPenalty",
    "repetitionContextSize",
    "presencePenalty",
    "presenceContextSize",
    "frequencyPenalty",
    "frequencyContextSize",
    "logitBias",
    "xtcProbability",
    "xtcThreshold",
    "seed",
    "stop",
    "prefillStepSize",
    "logprobs",
    "topLogprobs",
];

pub(crate) fn invalid(msg: String) -> napi::Error<String> {
    js_error(Code::InvalidArgument, msg)
}

pub(crate) struct Opts<'a>(pub(crate) &'a Map<String, Value>);

impl Opts<'_> {
    pub(crate) fn num(&self, key: &str, lo: f64, hi: f64, lo_open: bool) -> R<Option<f64>> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => {
                let v = n.as_f64().unwrap_or(f64::NAN);
                let below = if lo_open { v <= lo } else { v < lo };
                if !v.is_finite() || below || v > hi {
                    let l = if lo_open { "(" } else { "[" };
                    Err(invalid(format!("option {key} must be a number in {l}{lo}, {hi}], got {v}")))
                } else {
                    Ok(Some(v))
                }
            }
            Some(other) => Err(invalid(format!("option {key} must be a number, got {other}"))),
        }
    }

    /// Any finite number (the range is checked by whoever owns the option).
    pub(crate) fn number(&self, key: &str) -> R<Option<f64>> {
        self.num(key, f64::MIN, f64::MAX, false).map_err(|_| {
            invalid(format!("option {key} must be a finite number, got {}", self.0.get(key).map_or("nothing".into(), |v| v.to_string())))
        })
    }

    pub(crate) fn int(&self, key: &str, lo: i64, hi: i64) -> R<Option<i64>> {
        match self.num(key, lo as f64, hi as f64, false)? {
            None => Ok(None),
            Some(v) if v.fract() != 0.0 => Err(invalid(format!("option {key} must be an integer, got {v}"))),
            Some(v) => Ok(Some(v as i64)),
        }
    }
}

/// The options object (null: none), every key one of `known`.
pub(crate) fn options_object(value: &Value, known: &[&str]) -> R<Map<String, Value>> {
    let map = match value {
        Value::Null => Map::new(),
        Value::Object(m) => m.clone(),
        other => return Err(invalid(format!("options must be an object, got {other}"))),
    };
    if let Some(k) = map.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(invalid(format!("unknown option \"{k}\"; known options: {}", known.join(", "))));
    }
    Ok(map)
}

/// The generation options, as `lm`'s text loop takes them.
pub type ParsedOptions = lm::text::TextOptions;

/// `vocab`: model vocabulary size (top-k and logit-bias ids are checked against it).
/// Absent options keep `lm`'s defaults (`GenerateParams`, `SamplingOptions`):
/// this only converts and range-checks what JS gave.
pub fn parse(value: &Value, vocab: u32, xtc_special_tokens: Vec<u32>) -> R<ParsedOptions> {
    let map = &options_object(value, KNOWN)?;
    let o = Opts(map);
    let d = GenerateParams::default();
    let ds = SamplingOptions::default();
    let f32_of = |v: Option<f64>, d: f32| v.map(|x| x as f32).unwrap_or(d);
    let i32_of = |v: Option<i64>, d: i32| v.map(|x| x as i32).unwrap_or(d);
    let mut s = SamplingOptions {
        temperature: f32_of(o.num("temperature", 0.0, 1e6, false)?, ds.temperature),
        top_p: f32_of(o.num("topP", 0.0, 1.0, false)?, ds.top_p),
        min_p: f32_of(o.num("minP", 0.0, 1.0, false)?, ds.min_p),
        min_tokens_to_keep: i32_of(o.int("minTokensToKeep", 1, vocab as i64)?, ds.min_tokens_to_keep),
        top_k: i32_of(o.int("topK", 0, vocab as i64 - 1)?, ds.top_k),
        xtc_probability: f32_of(o.num("xtcProbability", 0.0, 1.0, false)?, ds.xtc_probability),
        xtc_threshold: f32_of(o.num("xtcThreshold", 0.0, 0.5, false)?, ds.xtc_threshold),
        xtc_special_tokens,
        repetition_penalty: o.num("repetitionPenalty", 0.0, 1e6, false)?.map(|v| v as f32),
        repetition_context_size: i32_of(o.int("repetitionContextSize", 1, i32::MAX as i64)?, ds.repetition_context_size),
        presence_penalty: o.num("presencePenalty", -1e6, 1e6, false)?.map(|v| v as f32),
        presence_context_size: i32_of(o.int("presenceContextSize", 1, i32::MAX as i64)?, ds.presence_context_size),
        frequency_penalty: o.num("frequencyPenalty", -1e6, 1e6, false)?.map(|v| v as f32),
        frequency_context_size: i32_of(o.int("frequencyContextSize", 1, i32::MAX as i64)?, ds.frequency_context_size),
        logit_bias: Vec::new(),
    };
    match map.get("logitBias") {
        None | Some(Value::Null) => {}
        Some(Value::Object(b)) => {
            for (k, v) in b {
                let id: u32 = k
                    .parse()
                    .ok()
                    .filter(|&id| id < vocab)
                    .ok_or_else(|| invalid(format!("logitBias key \"{k}\" is not a token id in [0, {vocab})")))?;
                let val = v.as_f64().filter(|x| x.is_finite()).ok_or_else(|| invalid(format!("logitBias[{k}] must be a finite number, got {v}")))?;
                s.logit_bias.push((id, val as f32));
            }
        }
        Some(other) => return Err(invalid(format!("option logitBias must be an object of id -> bias, got {other}"))),
    }
    let stop = match map.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) if !s.is_empty() => Ok(s.clone()),
                other => Err(invalid(format!("option stop must be an array of non-empty strings, got {other}"))),
            })
            .collect::<R<Vec<_>>>()?,
        Some(other) => return Err(invalid(format!("option stop must be an array of strings, got {other}"))),
    };
    // topLogprobs alone asks for logprobs too; logprobs: false with topLogprobs > 0 is a contradiction.
    let top = o.int("topLogprobs", 0, MAX_TOP_LOGPROBS as i64)?.map(|k| k as usize);
    let logprobs = match map.get("logprobs") {
        None | Some(Value::Null) => top,
        Some(Value::Bool(true)) => Some(top.unwrap_or(0)),
        Some(Value::Bool(false)) if top.unwrap_or(0) > 0 => return Err(invalid("option topLogprobs needs logprobs: true".into())),
        Some(Value::Bool(false)) => None,
        Some(other) => return Err(invalid(format!("option logprobs must be a boolean, got {other}"))),
    };
    let params = GenerateParams {
        max_tokens: o.int("maxTokens", 1, i32::MAX as i64)?.map_or(d.max_tokens, |v| v as usize),
        sampling: s,
        prefill_step_size: o.int("prefillStepSize", 1, i32::MAX as i64)?.map_or(d.prefill_step_size, |v| v as usize),
        seed: o.int("seed", 0, u32::MAX as i64)?.map(|v| v as u64),
        logprobs,
    };
    Ok(ParsedOptions { params, stop })
}

/// `createPromptCache` options, as `lm`'s `CacheOptions` (its defaults, its checks).
pub fn cache_options(value: &Value) -> R<lm::cache::CacheOptions> {
    let map = &options_object(value, &["maxKvSize", "kvBits", "kvGroupSize", "quantizedKvStart"])?;
    let o = Opts(map);
    let d = lm::cache::CacheOptions::default();
    let opts = lm::cache::CacheOptions {
        max_kv_size: o.int("maxKvSize", 1, i32::MAX as i64)?.map(|v| v as i32),
        kv_bits: o.int("kvBits", 1, 8)?.map(|v| v as i32),
        kv_group_size: o.int("kvGroupSize", 1, i32::MAX as i64)?.map_or(d.kv_group_size, |v| v as i32),
        quantized_kv_start: o.int("quantizedKvStart", 0, i32::MAX as i64)?.map_or(d.quantized_kv_start, |v| v as i32),
    };
    opts.validate().map_err(invalid)?;
    Ok(opts)
}
