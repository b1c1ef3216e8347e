//! Generation options from JS, checked before any work: every wrong type,
//! range or unknown name is an INVALID_ARGUMENT naming the option. This only
//! converts; the ranges are `lm`'s (`TextOptions::validate`).
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
    fn num(&self, key: &str, lo: f64, hi: f64) -> R<Option<f64>> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => {
                let v = n.as_f64().unwrap_or(f64::NAN);
                if !v.is_finite() || v < lo || v > hi {
                    Err(invalid(format!("option {key} must be a number in [{lo}, {hi}], got {v}")))
                } else {
                    Ok(Some(v))
                }
            }
            Some(other) => Err(invalid(format!("option {key} must be a number, got {other}"))),
        }
    }

    /// Any finite number (the range is checked by whoever owns the option).
    pub(crate) fn number(&self, key: &str) -> R<Option<f64>> {
        self.num(key, f64::MIN, f64::MAX).map_err(|_| {
            invalid(format!("option {key} must be a finite number, got {}", self.0.get(key).map_or("nothing".into(), |v| v.to_string())))
        })
    }

    pub(crate) fn int(&self, key: &str, lo: i64, hi: i64) -> R<Option<i64>> {
        match self.num(key, lo as f64, hi as f64)? {
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

/// JS's `Number.MAX_SAFE_INTEGER`: the largest integer a JS number holds exactly.
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// `vocab`: the model's vocabulary size (`lm` checks top-k and logit-bias ids against it).
/// Converts what JS gave onto `lm`'s defaults; `TextOptions::validate` checks the ranges.
pub fn parse(value: &Value, vocab: u32, xtc_special_tokens: Vec<u32>) -> R<ParsedOptions> {
    let map = &options_object(value, KNOWN)?;
    let o = Opts(map);
    let f32_ = |key| o.number(key).map(|v| v.map(|x| x as f32));
    // Integers only as their Rust types bound them; `lm` checks the ranges.
    let i32_ = |key| o.int(key, i32::MIN.into(), i32::MAX.into()).map(|v| v.map(|x| x as i32));
    let uint = |key| match o.int(key, -MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)? {
        Some(v) if v < 0 => Err(invalid(format!("option {key} must be a non-negative integer, got {v}"))),
        v => Ok(v.map(|x| x as u64)),
    };
    let mut t = ParsedOptions::default();
    let s = &mut t.params.sampling;
    set(&mut s.temperature, f32_("temperature")?);
    set(&mut s.top_p, f32_("topP")?);
    set(&mut s.min_p, f32_("minP")?);
    set(&mut s.min_tokens_to_keep, i32_("minTokensToKeep")?);
    set(&mut s.top_k, i32_("topK")?);
    set(&mut s.xtc_probability, f32_("xtcProbability")?);
    set(&mut s.xtc_threshold, f32_("xtcThreshold")?);
    s.xtc_special_tokens = xtc_special_tokens;
    set(&mut s.repetition_penalty, f32_("repetitionPenalty")?.map(Some));
    set(&mut s.repetition_context_size, i32_("repetitionContextSize")?);
    set(&mut s.presence_penalty, f32_("presencePenalty")?.map(Some));
    set(&mut s.presence_context_size, i32_("presenceContextSize")?);
    set(&mut s.frequency_penalty, f32_("frequencyPenalty")?.map(Some));
    set(&mut s.frequency_context_size, i32_("frequencyContextSize")?);
    match map.get("logitBias") {
        None | Some(Value::Null) => {}
        Some(Value::Object(b)) => {
            for (k, v) in b {
                let id: u32 = k.parse().map_err(|_| invalid(format!("option logitBias key \"{k}\" is not a token id")))?;
                let bias = v.as_f64().ok_or_else(|| invalid(format!("option logitBias[{k}] must be a number, got {v}")))?;
                s.logit_bias.push((id, bias as f32));
            }
        }
        Some(other) => return Err(invalid(format!("option logitBias must be an object of id -> bias, got {other}"))),
    }
    let p = &mut t.params;
    set(&mut p.max_tokens, uint("maxTokens")?.map(|v| v as usize));
    set(&mut p.prefill_step_size, uint("prefillStepSize")?.map(|v| v as usize));
    p.seed = uint("seed")?;
    // topLogprobs alone asks for logprobs too; logprobs: false with topLogprobs > 0 is a contradiction.
    let top = uint("topLogprobs")?.map(|k| k as usize);
    p.logprobs = match map.get("logprobs") {
        None | Some(Value::Null) => top,
        Some(Value::Bool(true)) => Some(top.unwrap_or(0)),
        Some(Value::Bool(false)) if top.unwrap_or(0) > 0 => return Err(invalid("option topLogprobs needs logprobs: true".into())),
        Some(Value::Bool(false)) => None,
        Some(other) => return Err(invalid(format!("option logprobs must be a boolean, got {other}"))),
    };
    t.stop = match map.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(String::from).ok_or_else(|| invalid(format!("option stop must be an array of strings, got {v}"))))
            .collect::<R<Vec<_>>>()?,
        Some(other) => return Err(invalid(format!("option stop must be an array of strings, got {other}"))),
    };
    t.validate(vocab).map_err(option_error)?;
    Ok(t)
}

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

/// An `lm` option name as JS spells it: `top_p` -> `topP`.
/// `lm`'s range error as INVALID_ARGUMENT, naming the option as JS spells it.
pub(crate) fn option_error(e: lm::options::OptionError) -> napi::Error<String> {
    invalid(format!("option {} {}", camel_case(e.option), e.message))
}

fn camel_case(snake: &str) -> String {
    let mut parts = snake.split('_');
    let first = parts.next().unwrap_or_default().to_string();
    parts.fold(first, |mut out, part| {
        let mut chars = part.chars();
        if let Some(c) = chars.next() {
            out.extend(c.to_uppercase());
            out.push_str(chars.as_str());
        }
        out
    })
}

/// `createPromptCache` options, as `lm`'s `CacheOptions` (its defaults, its checks).
pub fn cache_options(value: &Value) -> R<lm::cache::CacheOptions> {
    let map = &options_object(value, &["maxKvSize", "kvBits", "kvGroupSize", "quantizedKvStart"])?;
    let o = Opts(map);
    let d = lm::cache::CacheOptions::default();
    // Integers as the Rust fields hold them; `CacheOptions::validate` checks the ranges.
    let i32_ = |key| o.int(key, i32::MIN.into(), i32::MAX.into()).map(|v| v.map(|x| x as i32));
    let opts = lm::cache::CacheOptions {
        max_kv_size: i32_("maxKvSize")?,
        kv_bits: i32_("kvBits")?,
        kv_group_size: i32_("kvGroupSize")?.unwrap_or(d.kv_group_size),
        quantized_kv_start: i32_("quantizedKvStart")?.unwrap_or(d.quantized_kv_start),
    };
    opts.validate().map_err(invalid)?;
    Ok(opts)
}
