//! Chatterbox Turbo's loudness normalisation of a reference clip (`norm_loudness` in mlx-audio's
//! `chatterbox_turbo.py`): the clip's integrated loudness (ITU-R BS.1770 / EBU R 128: K-weighting,
//! 400 ms blocks every 100 ms, gated at -70 LUFS and then 10 LU under the mean) measured as
//! `mlx_audio.dsp.integrated_loudness` measures it, and a gain that brings it to the target.
//!
//! The measure is the `ebur128` crate's (a port of libebur128, whose filter design and gating
//! mlx-audio's follows: the same filter prototypes, blocks and gates): on the fixture clips it
//! is within 5e-13 LU of mlx-audio's (`crates/tts/tests/integration/turbo_voice.rs`), so the gains agree to
//! about 1e-13 and the normalised clips to f32 rounding.
use ebur128::{EbuR128, Mode};

/// Integrated loudness of a mono signal in LUFS; `-inf`, as mlx-audio measures it, when no
/// 400 ms block passes the gates (silence, or a signal quieter than -70 LUFS throughout).
pub fn integrated(wav: &[f32], rate: u32) -> f64 {
    let measured = EbuR128::new(1, rate, Mode::I).and_then(|mut m| {
        m.add_frames_f32(wav)?;
        m.loudness_global()
    });
    // The crate fails only for rates or channel counts it does not take: none here.
    measured.unwrap_or(f64::NEG_INFINITY)
}

/// Scales `wav` so that its integrated loudness is `target_lufs`, as `norm_loudness` does: the
/// gain `10^((target - loudness) / 20)` in f64, applied in f32. A gain that is not finite and
/// positive (a loudness of `-inf`) leaves the clip as it is, as mlx-audio skips it.
pub fn normalize(wav: &mut [f32], rate: u32, target_lufs: f64) {
    let gain = 10f64.powf((target_lufs - integrated(wav, rate)) / 20.0);
    if gain.is_finite() && gain > 0.0 {
        let gain = gain as f32;
        wav.iter_mut().for_each(|v| *v *= gain);
    }
}
