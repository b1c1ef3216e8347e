//! Generation options from JS, validated before any work: every wrong type,
//! range or unknown name is an INVALID_ARGUMENT naming the option.
use lm::generate::GenerateParams;
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
pub fn parse(value: &Value, vocab: u32, xtc_special_tokens: Vec<u32>) -> R<ParsedOptions> {
    let map = &options_object(value, KNOWN)?;
    let o = Opts(map);
    let f32_of = |v: Option<f64>, d: f32| v.map(|x| x as f32).unwrap_or(d);
    let mut s = SamplingOptions {
        temperature: f32_of(o.num("temperature", 0.0, 1e6, false)?, 0.0),
        top_p: f32_of(o.num("topP", 0.0, 1.0, false)?, 0.0),
        min_p: f32_of(o.num("minP", 0.0, 1.0, false)?, 0.0),
        min_tokens_to_keep: o.int("minTokensToKeep", 1, vocab as i64)?.unwrap_or(1) as i32,
        top_k: o.int("topK", 0, vocab as i64 - 1)?.unwrap_or(0) as i32,
        xtc_probability: f32_of(o.num("xtcProbability", 0.0, 1.0, false)?, 0.0),
        xtc_threshold: f32_of(o.num("xtcThreshold", 0.0, 0.5, false)?, 0.1),
        xtc_special_tokens,
        repetition_penalty: o.num("repetitionPenalty", 0.0, 1e6, false)?.map(|v| v as f32),
        repetition_context_size: o.int("repetitionContextSize", 1, i32::MAX as i64)?.unwrap_or(20) as i32,
        presence_penalty: o.num("presencePenalty", -1e6, 1e6, false)?.map(|v| v as f32),
        presence_context_size: o.int("presenceContextSize", 1, i32::MAX as i64)?.unwrap_or(20) as i32,
        frequency_penalty: o.num("frequencyPenalty", -1e6, 1e6, false)?.map(|v| v as f32),
        frequency_context_size: o.int("frequencyContextSize", 1, i32::MAX as i64)?.unwrap_or(20) as i32,
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
    if s.temperature == 0.0 {
        // Greedy: the filters are inert in MLX-LM too; keep them from allocating anything.
        s.xtc_special_tokens.clear();
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
    let params = GenerateParams {
        max_tokens: o.int("maxTokens", 1, i32::MAX as i64)?.unwrap_or(256) as usize,
        sampling: s,
        prefill_step_size: o.int("prefillStepSize", 1, i32::MAX as i64)?.unwrap_or(2048) as usize,
        seed: o.int("seed", 0, u32::MAX as i64)?.map(|v| v as u64),
    };
    Ok(ParsedOptions { params, stop })
}
