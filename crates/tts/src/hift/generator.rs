//! `HiFTGenerator`: mel `[1, 80, T]` to 24 kHz audio. Transposed convs
//! upsample the mel by 8 * 5 * 3; at each stage the STFT of the sine source,
//! strided down to that rate, is added in; the last conv predicts a 16-point
//! log-magnitude / phase spectrogram that an inverse STFT (hop 4) turns into samples.
use lm::weights::Weights;
use lm::LmError;
use mlx::random::KeySequence;
use mlx::Array;

use super::config::HiftConfig;
use super::conv::UpsampleConv1d;
use super::f0::F0Predictor;
use super::resblock::ResBlock;
use super::source::SourceModule;
use super::stft::Stft;
use crate::layers::Conv1d;
use crate::Result;

struct Stage {
    up: UpsampleConv1d,
    source_down: Conv1d,
    source_block: ResBlock,
    blocks: Vec<ResBlock>,
}

pub struct Hift {
    cfg: HiftConfig,
    f0_predictor: F0Predictor,
    source: SourceModule,
    conv_pre: Conv1d,
    stages: Vec<Stage>,
    conv_post: Conv1d,
    stft: Stft,
}

fn leaky_relu(x: &Array, slope: f32) -> mlx::Result<Array> {
    x.multiply_scalar(slope as f64)?.maximum(x)
}

impl Hift {
    /// Takes the `s3gen.mel2wav.*` tensors. The STFT window is computed, so a
    /// stored `stft_window` buffer is dropped.
    pub fn load(w: &mut Weights, cfg: &HiftConfig) -> Result<Hift> {
        let p = "s3gen.mel2wav";
        w.discard(|k| k == "s3gen.mel2wav.stft_window");
        let ch = |i: usize| cfg.base_channels >> i;
        let bins2 = cfg.n_fft + 2;
        let n_stages = cfg.upsample_rates.len();

        let f0_predictor = F0Predictor::load(w, &format!("{p}.f0_predictor"), cfg.in_channels, cfg.f0_channels)?;
        let source = SourceModule::load(w, &format!("{p}.m_source"), cfg)?;
        let conv_pre = Conv1d::load(w, &format!("{p}.conv_pre"), cfg.in_channels, ch(0), 7, true, 1, 3, 1, 1)?;

        // The source enters stage i at the rate after upsample i: its STFT frames
        // are strided down by the product of the later upsample rates.
        let mut stages = Vec::with_capacity(n_stages);
        for i in 0..n_stages {
            let (u, k) = (cfg.upsample_rates[i], cfg.upsample_kernel_sizes[i]);
            let up = UpsampleConv1d::load(w, &format!("{p}.ups.{i}"), ch(i), ch(i + 1), k, true, u, (k - u) / 2)?;
            let down: i32 = cfg.upsample_rates[i + 1..].iter().product();
            let source_down = if down == 1 {
                Conv1d::load(w, &format!("{p}.source_downs.{i}"), bins2, ch(i + 1), 1, true, 1, 0, 1, 1)?
            } else {
                Conv1d::load(w, &format!("{p}.source_downs.{i}"), bins2, ch(i + 1), down * 2, true, down, down / 2, 1, 1)?
            };
            let source_block = ResBlock::load(
                w,
                &format!("{p}.source_resblocks.{i}"),
                ch(i + 1),
                cfg.source_resblock_kernel_sizes[i],
                &cfg.source_resblock_dilations[i],
            )?;
            let n_kernels = cfg.resblock_kernel_sizes.len();
            let mut blocks = Vec::with_capacity(n_kernels);
            for (j, (&rk, rd)) in cfg.resblock_kernel_sizes.iter().zip(&cfg.resblock_dilations).enumerate() {
                blocks.push(ResBlock::load(w, &format!("{p}.resblocks.{}", i * n_kernels + j), ch(i + 1), rk, rd)?);
            }
            stages.push(Stage { up, source_down, source_block, blocks });
        }
        let conv_post = Conv1d::load(w, &format!("{p}.conv_post"), ch(n_stages), bins2, 7, true, 1, 3, 1, 1)?;
        let stft = Stft::new(cfg.n_fft, cfg.hop_len)?;
        Ok(Hift { cfg: cfg.clone(), f0_predictor, source, conv_pre, stages, conv_post, stft })
    }

    pub fn config(&self) -> &HiftConfig {
        &self.cfg
    }

    fn check_mel(&self, mel: &Array) -> Result<()> {
        let s = mel.shape();
        if s.len() != 3 || s[1] != self.cfg.in_channels || s[2] < 1 {
            return Err(LmError::InvalidArgument(format!("HiFT expects a mel spectrogram [B, {}, T] with T >= 1, got {s:?}", self.cfg.in_channels)));
        }
        Ok(())
    }

    /// Pitch in Hz per mel frame, `[B, T]`.
    pub fn f0(&self, mel: &Array) -> Result<Array> {
        self.check_mel(mel)?;
        Ok(self.f0_predictor.forward(&mel.swapaxes(1, 2)?)?)
    }

    /// Mel `[B, 80, T]` and excitation `[B, 1, T * 480]` to audio `[B, T * 480]`.
    pub fn decode(&self, mel: &Array, source: &Array) -> Result<Array> {
        self.check_mel(mel)?;
        let slope = self.cfg.lrelu_slope;
        let turbo = self.cfg.turbo;
        let s_stft = match turbo {
            true => self.stft.forward_uncentered(&source.squeeze(&[1])?)?,
            false => self.stft.forward(&source.squeeze(&[1])?)?,
        };
        let mut x = self.conv_pre.forward(&mel.swapaxes(1, 2)?)?;
        let last = self.stages.len() - 1;
        for (i, st) in self.stages.iter().enumerate() {
            x = st.up.forward(&leaky_relu(&x, slope)?)?;
            if i == last {
                // Reflection pad of one sample on the left: the STFT has one more
                // frame than samples / hop. Turbo's pads a zero.
                let first = match turbo {
                    true => Array::zeros(&[x.dim(0), 1, x.dim(2)], x.dtype())?,
                    false => x.slice_axis(1, 1, 2)?,
                };
                x = Array::concatenate(&[&first, &x], 1)?;
            }
            let mut si = st.source_block.forward(&st.source_down.forward(&s_stft)?)?;
            if turbo {
                let n = x.dim(1).min(si.dim(1));
                x = x.slice_axis(1, 0, n)?;
                si = si.slice_axis(1, 0, n)?;
            }
            x = x.add(&si)?;
            let outs = st.blocks.iter().map(|b| b.forward(&x)).collect::<mlx::Result<Vec<_>>>()?;
            let refs: Vec<&Array> = outs.iter().collect();
            x = Array::stack(&refs, 0)?.mean(&[0], false)?;
        }
        // Turbo's vocoder uses leaky_relu's default slope (0.01) here.
        let spec = self.conv_post.forward(&leaky_relu(&x, if turbo { 0.01 } else { slope })?)?;
        let wav = self.stft.inverse(&spec)?;
        let limit = self.cfg.audio_limit as f64;
        Ok(wav.clip(Some(&wav.scalar_like(-limit)?), Some(&wav.scalar_like(limit)?))?)
    }

    /// Mel `[B, 80, T]` to `(audio [B, T * 480], excitation [B, 1, T * 480])`.
    ///
    /// `cache_source` (an earlier call's excitation, `[B, 1, n]`) replaces the
    /// first `n` samples of the new excitation, so that a streamed chunk that
    /// re-renders overlapping mel frames keeps the same phase there. The three
    /// random draws of the source take `keys.next()` in mlx-audio's order.
    pub fn inference(&self, mel: &Array, cache_source: Option<&Array>, keys: &mut KeySequence) -> Result<(Array, Array)> {
        let f0 = self.f0(mel)?;
        let mut source = self.source.forward(&f0, keys)?;
        if let Some(cache) = cache_source {
            let n = cache.dim(-1);
            if n > 0 {
                let cs = cache.shape();
                if cs.len() != 3 || cs[0] != source.dim(0) || cs[1] != 1 {
                    return Err(LmError::InvalidArgument(format!("HiFT cache_source must be [{}, 1, n], got {cs:?}", source.dim(0))));
                }
                let t = source.dim(2);
                let rest = source.slice_axis(2, n.min(t), t)?;
                source = Array::concatenate(&[cache, &rest], 2)?;
            }
        }
        let wav = self.decode(mel, &source)?;
        Ok((wav, source))
    }
}
