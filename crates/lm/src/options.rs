//! The one range check of the generation options (`TextOptions`,
//! `GenerateParams`, `SamplingOptions` each have `validate`): bindings only
//! convert their values into those structs, then ask these.
use std::fmt;

use crate::LmError;

/// An option out of range: its name as MLX-LM spells it (`top_p`,
/// `logit_bias`) and what is wrong with it, the range and the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionError {
    pub option: &'static str,
    pub message: String,
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "option {} {}", self.option, self.message)
    }
}

impl std::error::Error for OptionError {}

impl From<OptionError> for LmError {
    fn from(e: OptionError) -> Self {
        LmError::InvalidArgument(e.to_string())
    }
}

pub type Checked = Result<(), OptionError>;

pub(crate) fn bad(option: &'static str, message: String) -> Checked {
    Err(OptionError { option, message })
}

/// A finite `v` in `[lo, hi]`.
pub(crate) fn number(option: &'static str, v: f32, lo: f64, hi: f64) -> Checked {
    let x = v as f64;
    if x.is_finite() && lo <= x && x <= hi {
        Ok(())
    } else {
        bad(option, format!("must be a number in [{lo}, {hi}], got {v}"))
    }
}

/// An integer `v` in `[lo, hi]` (i128 holds every integer field's type).
pub(crate) fn integer(option: &'static str, v: i128, lo: i128, hi: i128) -> Checked {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        bad(option, format!("must be an integer in [{lo}, {hi}], got {v}"))
    }
}

#[cfg(test)]
mod tests {
    use crate::generate::{GenerateParams, MAX_TOP_LOGPROBS};
    use crate::sampling::SamplingOptions;
    use crate::text::TextOptions;

    const VOCAB: u32 = 100;

    fn check(edit: impl Fn(&mut TextOptions)) -> Result<(), String> {
        let mut o = TextOptions::default();
        edit(&mut o);
        o.validate(VOCAB).map_err(|e| {
            assert_eq!(e.to_string(), format!("option {} {}", e.option, e.message));
            e.option.to_string()
        })
    }

    fn refused(option: &str, edit: impl Fn(&mut TextOptions)) {
        assert_eq!(check(edit), Err(option.to_string()));
    }

    #[test]
    fn the_defaults_are_valid() {
        assert_eq!(check(|_| {}), Ok(()));
        assert!(SamplingOptions::default().validate(1).is_ok());
        assert!(GenerateParams::default().validate(1).is_ok());
    }

    #[test]
    fn every_float_boundary_is_accepted_and_beyond_it_refused() {
        type Field = fn(&mut SamplingOptions, f32);
        let floats: [(&str, Field, f32, f32); 9] = [
            ("temperature", |s, v| s.temperature = v, 0.0, 1e6),
            ("top_p", |s, v| s.top_p = v, 0.0, 1.0),
            ("min_p", |s, v| s.min_p = v, 0.0, 1.0),
            ("xtc_probability", |s, v| s.xtc_probability = v, 0.0, 1.0),
            ("xtc_threshold", |s, v| s.xtc_threshold = v, 0.0, 0.5),
            ("repetition_penalty", |s, v| s.repetition_penalty = Some(v), 0.0, 1e6),
            ("presence_penalty", |s, v| s.presence_penalty = Some(v), -1e6, 1e6),
            ("frequency_penalty", |s, v| s.frequency_penalty = Some(v), -1e6, 1e6),
            ("logit_bias", |s, v| s.logit_bias = vec![(3, v)], f32::MIN, f32::MAX),
        ];
        for (name, set, lo, hi) in floats {
            for ok in [lo, hi] {
                assert_eq!(check(|o| set(&mut o.params.sampling, ok)), Ok(()), "{name} {ok}");
            }
            let (below, above) = if lo == f32::MIN { (f32::NEG_INFINITY, f32::INFINITY) } else { (lo - 0.01 * (1.0 + lo.abs()), hi * 1.01) };
            for v in [below, above, f32::NAN, f32::INFINITY] {
                refused(name, |o| set(&mut o.params.sampling, v));
            }
        }
    }

    #[test]
    fn every_integer_boundary_is_accepted_and_beyond_it_refused() {
        type Field = fn(&mut TextOptions, i64);
        let ints: [(&str, Field, i64, i64); 9] = [
            ("min_tokens_to_keep", |o, v| o.params.sampling.min_tokens_to_keep = v as i32, 1, VOCAB as i64),
            ("top_k", |o, v| o.params.sampling.top_k = v as i32, 0, VOCAB as i64 - 1),
            ("repetition_context_size", |o, v| o.params.sampling.repetition_context_size = v as i32, 1, i32::MAX as i64),
            ("presence_context_size", |o, v| o.params.sampling.presence_context_size = v as i32, 1, i32::MAX as i64),
            ("frequency_context_size", |o, v| o.params.sampling.frequency_context_size = v as i32, 1, i32::MAX as i64),
            ("max_tokens", |o, v| o.params.max_tokens = v as usize, 1, i32::MAX as i64),
            ("prefill_step_size", |o, v| o.params.prefill_step_size = v as usize, 1, i32::MAX as i64),
            ("seed", |o, v| o.params.seed = Some(v as u64), 0, u32::MAX as i64),
            ("top_logprobs", |o, v| o.params.logprobs = Some(v as usize), 0, MAX_TOP_LOGPROBS as i64),
        ];
        for (name, set, lo, hi) in ints {
            for ok in [lo, hi] {
                assert_eq!(check(|o| set(o, ok)), Ok(()), "{name} {ok}");
            }
            // Below 0 does not fit the unsigned fields: their lowest is 0 or 1.
            if lo > 0 || name == "top_k" {
                refused(name, |o| set(o, lo - 1));
            }
            // The i32 fields' MAX + 1 wraps below the range: refused all the same.
            refused(name, |o| set(o, hi + 1));
        }
        refused("max_tokens", |o| o.params.max_tokens = usize::MAX);
    }

    #[test]
    fn logit_bias_ids_must_be_in_the_vocabulary() {
        assert_eq!(check(|o| o.params.sampling.logit_bias = vec![(0, 1.0), (VOCAB - 1, -1.0)]), Ok(()));
        refused("logit_bias", |o| o.params.sampling.logit_bias = vec![(0, 1.0), (VOCAB, 1.0)]);
        let e = SamplingOptions { logit_bias: vec![(VOCAB, 1.0)], ..Default::default() }.validate(VOCAB).unwrap_err();
        assert_eq!(e.to_string(), "option logit_bias key 100 is not a token id in [0, 100)");
    }

    #[test]
    fn messages_state_the_range_and_the_value() {
        let e = SamplingOptions { top_p: 1.5, ..Default::default() }.validate(VOCAB).unwrap_err();
        assert_eq!(e.to_string(), "option top_p must be a number in [0, 1], got 1.5");
        let e = GenerateParams { max_tokens: 0, ..Default::default() }.validate(VOCAB).unwrap_err();
        assert_eq!(e.to_string(), "option max_tokens must be an integer in [1, 2147483647], got 0");
        let e: crate::LmError = e.into();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
    }

    #[test]
    fn stop_strings_must_not_be_empty() {
        assert_eq!(check(|o| o.stop = vec!["a".into(), "\n\n".into()]), Ok(()));
        refused("stop", |o| o.stop = vec!["a".into(), String::new()]);
    }
}
