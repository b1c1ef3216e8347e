//! `rope_freqs.weight`: the per-dimension frequency factors llama.cpp's
//! converter writes for Llama 3.1-style rotary scaling (Llama 3.1, 3.2, 3.3),
//! in place of the `rope_scaling` parameters it came from. MLX-LM computes
//! its rotary frequencies from those parameters (`Llama3RoPE`), so they are
//! recovered here: the candidate whose factors, computed as the converter
//! computes them, equal the file's is the `rope_scaling` the model is built
//! with, and the model then rotates exactly as MLX-LM does on the original.
//! Only `factor`, `context / low` and `context / high` shape the factors, so
//! uncommon parameters may come back as others that give the same ones (and
//! the same rotation up to rounding); the common ones come back as they are.
use serde_json::{json, Value};

/// The tensor's name; its data is read here, never loaded as a weight.
pub const NAME: &str = "rope_freqs.weight";

/// Relative difference allowed between a computed factor and the file's
/// (the converter computes in float32 and stores float32; candidates differ
/// by far more).
const TOLERANCE: f64 = 1e-5;

/// `rope_scaling` for `factors` (`head_dim / 2` of them: the shape check has
/// seen to it) at rotary base `base`: None when every factor is 1 (no
/// scaling); an error naming what was found when no Llama 3 scaling gives
/// them.
pub fn rope_scaling(factors: &[f32], base: f64, head_dim: i64) -> std::result::Result<Option<Value>, String> {
    if factors.iter().all(|&f| f == 1.0) {
        return Ok(None);
    }
    let largest = factors.iter().fold(0f64, |m, &f| m.max(f as f64));
    // The common parameters first (Llama 3.1-3.3: 1, 4, 8192), so they win any tie.
    let mut factor_options = vec![largest];
    factor_options.extend([2.0, 4.0, 8.0, 16.0, 32.0, 64.0].iter().filter(|&&f| f != largest));
    for &(low, high) in &[(1.0, 4.0), (1.0, 2.0), (1.0, 8.0), (2.0, 4.0), (2.0, 8.0)] {
        for context in std::iter::once(8192.0).chain((10..=17).map(|k| (1u64 << k) as f64).filter(|&c| c != 8192.0)) {
            for &factor in &factor_options {
                let fits = factors.iter().enumerate().all(|(i, &got)| {
                    let want = converter_factor(i, head_dim, base, factor, low, high, context);
                    (want - got as f64).abs() <= TOLERANCE * want.abs().max(1.0)
                });
                if fits {
                    return Ok(Some(json!({
                        "rope_type": "llama3",
                        "factor": factor,
                        "low_freq_factor": low,
                        "high_freq_factor": high,
                        "original_max_position_embeddings": context as i64,
                    })));
                }
            }
        }
    }
    Err(format!("{NAME} holds rotary frequency factors that no Llama 3 scaling gives (largest {largest}); only Llama 3.1-style scaling is supported"))
}

/// Factor `i` as llama.cpp's converter computes it from Llama 3 parameters:
/// 1 for wavelengths under `context / high`, `factor` over `context / low`,
/// and between them `1 / ((1 - s) / factor + s)` with
/// `s = (context / wavelength - low) / (high - low)`.
fn converter_factor(i: usize, head_dim: i64, base: f64, factor: f64, low: f64, high: f64, context: f64) -> f64 {
    let freq = 1.0 / base.powf(2.0 * i as f64 / head_dim as f64);
    let wavelength = 2.0 * std::f64::consts::PI / freq;
    if wavelength < context / high {
        1.0
    } else if wavelength > context / low {
        factor
    } else {
        let s = (context / wavelength - low) / (high - low);
        1.0 / ((1.0 - s) / factor + s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn factors(head_dim: i64, base: f64, p: (f64, f64, f64, f64)) -> Vec<f32> {
        (0..head_dim as usize / 2).map(|i| converter_factor(i, head_dim, base, p.0, p.1, p.2, p.3) as f32).collect()
    }

    /// Llama 3.1 8B's and 3.2 1B's parameters (head 128, base 500000) come
    /// back as they are; uncommon ones as parameters that give the same
    /// factors: only `factor`, `context / low` and `context / high` matter
    /// (2, 8, 4096 is 1, 4, 2048).
    #[test]
    fn llama3_parameters_are_recovered() {
        let f64_of = |v: &Value| v.as_f64().unwrap();
        for p in [(8.0, 1.0, 4.0, 8192.0), (32.0, 1.0, 4.0, 8192.0), (16.0, 2.0, 8.0, 4096.0), (4.0, 1.0, 2.0, 32768.0)] {
            let got = rope_scaling(&factors(128, 500000.0, p), 500000.0, 128).unwrap().unwrap();
            let context = f64_of(&got["original_max_position_embeddings"]);
            assert_eq!(f64_of(&got["factor"]), p.0);
            assert_eq!(context / f64_of(&got["low_freq_factor"]), p.3 / p.1, "{p:?}");
            assert_eq!(context / f64_of(&got["high_freq_factor"]), p.3 / p.2, "{p:?}");
        }
        let standard = rope_scaling(&factors(128, 500000.0, (8.0, 1.0, 4.0, 8192.0)), 500000.0, 128).unwrap().unwrap();
        assert_eq!(
            standard,
            json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
        );
    }

    #[test]
    fn all_ones_is_no_scaling_and_other_factors_are_refused() {
        assert_eq!(rope_scaling(&[1.0; 64], 500000.0, 128).unwrap(), None);
        let mut odd = factors(128, 500000.0, (8.0, 1.0, 4.0, 8192.0));
        odd[40] *= 1.01;
        assert!(rope_scaling(&odd, 500000.0, 128).unwrap_err().contains("no Llama 3 scaling"));
    }
}
