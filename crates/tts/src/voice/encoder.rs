//! Chatterbox's voice encoder (mlx-audio's `VoiceEncoder`, Resemble's speaker encoder): a
//! 3-layer LSTM over 1.6 s windows of a 40-bin mel, the last hidden state projected to 256,
//! ReLU, L2-normalised; the windows' embeddings averaged and normalised again. T3 takes the
//! result as its speaker embedding.
//!
//! Turbo's copy (`chatterbox_turbo/models/voice_encoder`) divides by the norm plus 1e-8 at both
//! normalisations (`Flavor::Turbo`), and names its layers `lstm1`..`lstm3` (renamed onto
//! these by `s3gen::turbo_names`).
use lm::weights::Weights;
use mlx::nn::Linear;
use mlx::Array;

use super::mel::voice_encoder_mel;
use super::Flavor;
use crate::{Result, TtsError};

const N_MELS: i32 = 40;
const HIDDEN: i32 = 256;
const EMBED: i32 = 256;
const LAYERS: usize = 3;
/// Frames per partial window (1.6 s at 100 frames a second).
const PARTIAL_FRAMES: usize = 160;
/// `embeds_from_wavs`' rate 1.3 (Resemble's default): int(round((16000 / 1.3) / 160)).
const FRAME_STEP: usize = 77;
const MIN_COVERAGE: f64 = 0.8;
/// mlx-audio runs the partial windows through the LSTM 32 at a time.
const BATCH: usize = 32;
/// What Turbo's voice encoder adds to a norm before dividing by it.
const TURBO_NORM_EPS: f64 = 1e-8;

/// MLX's `nn.LSTM` (gates i, f, g, o; one bias, PyTorch's two summed).
struct Lstm {
    wx_t: Array,
    wh_t: Array,
    bias: Array,
}

impl Lstm {
    /// `x` `[B, T, in]` to every step's hidden state `[B, T, H]` (or only the last, `[B, H]`).
    fn forward(&self, x: &Array, all_steps: bool) -> Result<Array> {
        let xw = self.bias.addmm(x, &self.wx_t, 1.0, 1.0)?;
        let steps = xw.dim(1);
        let (mut hidden, mut cell): (Option<Array>, Option<Array>) = (None, None);
        let mut outputs = Vec::with_capacity(if all_steps { steps as usize } else { 0 });
        for t in 0..steps {
            let mut ifgo = xw.slice_axis(1, t, t + 1)?.squeeze(&[1])?;
            if let Some(h) = &hidden {
                ifgo = ifgo.addmm(h, &self.wh_t, 1.0, 1.0)?;
            }
            let gates = ifgo.split_equal(4, -1)?;
            let (i, f, g, o) = (gates[0].sigmoid()?, gates[1].sigmoid()?, gates[2].tanh()?, gates[3].sigmoid()?);
            let c = match &cell {
                Some(c) => f.multiply(c)?.add(&i.multiply(&g)?)?,
                None => i.multiply(&g)?,
            };
            let h = o.multiply(&c.tanh()?)?;
            if all_steps {
                outputs.push(h.clone());
            }
            hidden = Some(h);
            cell = Some(c);
        }
        match (all_steps, hidden) {
            (true, _) => Ok(Array::stack(&outputs.iter().collect::<Vec<_>>(), 1)?),
            (false, Some(h)) => Ok(h),
            (false, None) => Err(TtsError::InvalidArgument("the voice encoder got no frames".into())),
        }
    }
}

pub struct VoiceEncoder {
    layers: Vec<Lstm>,
    proj: Linear,
    /// Added to the norm before an L2 normalisation divides by it (Turbo's 1e-8, else 0).
    norm_eps: f64,
}

impl VoiceEncoder {
    /// From the `{prefix}*` tensors (`ve.` in a Chatterbox checkpoint), in MLX's names
    /// (`lstm.layers.N.Wx/Wh/bias`) or PyTorch's (`lstm.weight_ih_lN`, `weight_hh_lN`,
    /// `bias_ih_lN` + `bias_hh_lN`), which are renamed and summed as mlx-audio's `sanitize` does.
    /// The unused `similarity_weight`/`similarity_bias` are dropped. `flavor` picks the
    /// normalisation.
    pub fn load(w: &mut Weights, prefix: &str, flavor: Flavor) -> Result<VoiceEncoder> {
        let mut layers = Vec::with_capacity(LAYERS);
        for l in 0..LAYERS {
            let torch = format!("{prefix}lstm.weight_ih_l{l}");
            let mlx_name = |p: &str| format!("{prefix}lstm.layers.{l}.{p}");
            let input = if l == 0 { N_MELS } else { HIDDEN };
            let (wx, wh, bias) = if w.contains(&torch) {
                let wx = w.take(&torch, &[4 * HIDDEN, input])?;
                let wh = w.take(&format!("{prefix}lstm.weight_hh_l{l}"), &[4 * HIDDEN, HIDDEN])?;
                let b_ih = w.take(&format!("{prefix}lstm.bias_ih_l{l}"), &[4 * HIDDEN])?;
                let b_hh = w.take(&format!("{prefix}lstm.bias_hh_l{l}"), &[4 * HIDDEN])?;
                (wx, wh, b_ih.add(&b_hh)?)
            } else {
                (
                    w.take(&mlx_name("Wx"), &[4 * HIDDEN, input])?,
                    w.take(&mlx_name("Wh"), &[4 * HIDDEN, HIDDEN])?,
                    w.take(&mlx_name("bias"), &[4 * HIDDEN])?,
                )
            };
            layers.push(Lstm { wx_t: wx.transpose(&[1, 0])?, wh_t: wh.transpose(&[1, 0])?, bias });
        }
        let proj = Linear::Dense {
            weight: w.take(&format!("{prefix}proj.weight"), &[EMBED, HIDDEN])?,
            bias: Some(w.take(&format!("{prefix}proj.bias"), &[EMBED])?),
        };
        let p = prefix.to_string();
        w.discard(|k| k == format!("{p}similarity_weight") || k == format!("{p}similarity_bias"));
        let norm_eps = if flavor == Flavor::Turbo { TURBO_NORM_EPS } else { 0.0 };
        Ok(VoiceEncoder { layers, proj, norm_eps })
    }

    fn l2_normalize(&self, x: &Array, axis: i32) -> Result<Array> {
        let norm = x.square()?.sum(&[axis], true)?.sqrt()?;
        let norm = if self.norm_eps > 0.0 { norm.add_scalar(self.norm_eps)? } else { norm };
        Ok(x.divide(&norm)?)
    }

    /// Embeddings of partial windows `[B, PARTIAL_FRAMES, 40]`: `[B, 256]`, each L2-normalised.
    pub fn forward(&self, mels: &Array) -> Result<Array> {
        let mut x = mels.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(&x, i + 1 < self.layers.len())?;
        }
        self.l2_normalize(&self.proj.forward(&x)?.maximum_scalar(0.0)?, 1)
    }

    /// `inference` of one utterance's mel `[frames, 40]` (overlap by rate 1.3, min coverage
    /// 0.8, zero padding up to the last window): `[1, 256]`.
    pub fn inference(&self, mel: &Array) -> Result<Array> {
        let frames = mel.dim(0) as usize;
        if frames == 0 {
            return Err(TtsError::InvalidAudio("the clip gives the voice encoder no mel frames".into()));
        }
        let (n_wins, target) = num_windows(frames);
        let mel = if target > frames {
            let pad = Array::zeros(&[(target - frames) as i32, N_MELS], mel.dtype())?;
            Array::concatenate(&[mel, &pad], 0)?
        } else {
            mel.clone()
        };
        let indices: Vec<i32> = (0..n_wins).flat_map(|w| (0..PARTIAL_FRAMES).map(move |f| (w * FRAME_STEP + f) as i32)).collect();
        let partials =
            mel.take(&Array::from_slice(&indices, &[indices.len() as i32])?, Some(0))?.reshape(&[n_wins as i32, PARTIAL_FRAMES as i32, N_MELS])?;
        let mut embeds = Vec::new();
        for start in (0..n_wins).step_by(BATCH) {
            let stop = (start + BATCH).min(n_wins);
            embeds.push(self.forward(&partials.slice_axis(0, start as i32, stop as i32)?)?);
        }
        let embeds = Array::concatenate(&embeds.iter().collect::<Vec<_>>(), 0)?;
        self.l2_normalize(&embeds.mean(&[0], true)?, 1)
    }

    /// The speaker embedding `prepare_conditionals` gives T3 from the whole 16 kHz clip:
    /// `embeds_from_wavs([wav], 16000)` (silence trimmed at 20 dB below the loudest frame, mel,
    /// `inference`), then the mean over its one utterance: `[1, 256]`.
    pub fn embed(&self, wav16: &[f32]) -> Result<Array> {
        self.inference(&voice_encoder_mel(trim_silence(wav16))?)
    }
}

/// `get_num_wins`: how many windows cover `frames`, and the frames they span.
fn num_windows(frames: usize) -> (usize, usize) {
    let covered = (frames + FRAME_STEP).saturating_sub(PARTIAL_FRAMES);
    let (mut n, rem) = (covered / FRAME_STEP, covered % FRAME_STEP);
    if n == 0 || (rem + PARTIAL_FRAMES - FRAME_STEP) as f64 / PARTIAL_FRAMES as f64 >= MIN_COVERAGE {
        n += 1;
    }
    (n, PARTIAL_FRAMES + FRAME_STEP * (n - 1))
}

/// `embeds_from_wavs`' trim (mlx-audio's `trim_silence`): RMS over 2048-sample frames every 512,
/// keeping from the first to the last frame within 20 dB of the loudest.
pub fn trim_silence(wav: &[f32]) -> &[f32] {
    const FRAME: usize = 2048;
    const HOP: usize = 512;
    const TOP_DB: f64 = 20.0;
    if wav.len() < FRAME {
        return wav;
    }
    let n_frames = 1 + (wav.len() - FRAME) / HOP;
    let db: Vec<f64> = (0..n_frames)
        .map(|i| {
            let frame = &wav[i * HOP..i * HOP + FRAME];
            let mean = frame.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / FRAME as f64;
            20.0 * mean.sqrt().max(1e-10).log10()
        })
        .collect();
    let threshold = db.iter().cloned().fold(f64::NEG_INFINITY, f64::max) - TOP_DB;
    let (Some(first), Some(last)) = (db.iter().position(|&d| d >= threshold), db.iter().rposition(|&d| d >= threshold)) else {
        return wav;
    };
    &wav[first * HOP..((last + 1) * HOP + FRAME).min(wav.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_follow_get_num_wins() {
        // 160 frames: one window; 237 = 160 + 77: two; 200: one (40 + 83 < 0.8 * 160).
        assert_eq!(num_windows(160), (1, 160));
        assert_eq!(num_windows(237), (2, 237));
        assert_eq!(num_windows(200), (1, 160));
        assert_eq!(num_windows(10), (1, 160));
        assert_eq!(num_windows(230), (2, 237));
    }
}
