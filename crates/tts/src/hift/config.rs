//! HiFT sizes. Only the base width can be shrunk (for test fixtures); the rest
//! are the constants `S3Token2Wav` builds its `HiFTGenerator` with.
use serde_json::Value;

use crate::Result;
use lm::LmError;

#[derive(Debug, Clone, PartialEq)]
pub struct HiftConfig {
    /// Width after `conv_pre`; halved by each upsampling stage.
    pub base_channels: i32,
    /// Hidden width of the F0 predictor (`ConvRNNF0Predictor`'s own default,
    /// independent of `base_channels`).
    pub f0_channels: i32,
    pub in_channels: i32,
    pub sampling_rate: i32,
    /// Harmonics above the fundamental in the sine source.
    pub nb_harmonics: i32,
    pub nsf_alpha: f32,
    pub nsf_sigma: f32,
    pub nsf_voiced_threshold: f32,
    pub upsample_rates: Vec<i32>,
    pub upsample_kernel_sizes: Vec<i32>,
    pub n_fft: i32,
    pub hop_len: i32,
    pub resblock_kernel_sizes: Vec<i32>,
    pub resblock_dilations: Vec<Vec<i32>>,
    pub source_resblock_kernel_sizes: Vec<i32>,
    pub source_resblock_dilations: Vec<Vec<i32>>,
    pub lrelu_slope: f32,
    pub audio_limit: f32,
    /// mlx-audio's Turbo vocoder, a port of its own: an STFT of the source without
    /// centre padding (so fewer frames, each stage cut to the shorter of the upsampled mel
    /// and the source), a zero (not reflected) sample before the last stage, and the
    /// harmonics' random phases drawn for the overtones only.
    pub turbo: bool,
}

impl Default for HiftConfig {
    fn default() -> Self {
        HiftConfig {
            base_channels: 512,
            f0_channels: 512,
            in_channels: 80,
            sampling_rate: 24000,
            nb_harmonics: 8,
            nsf_alpha: 0.1,
            nsf_sigma: 0.003,
            nsf_voiced_threshold: 10.0,
            upsample_rates: vec![8, 5, 3],
            upsample_kernel_sizes: vec![16, 11, 7],
            n_fft: 16,
            hop_len: 4,
            resblock_kernel_sizes: vec![3, 7, 11],
            resblock_dilations: vec![vec![1, 3, 5]; 3],
            source_resblock_kernel_sizes: vec![7, 7, 11],
            source_resblock_dilations: vec![vec![1, 3, 5]; 3],
            lrelu_slope: 0.1,
            audio_limit: 0.99,
            turbo: false,
        }
    }
}

impl HiftConfig {
    /// From the whole config.json: `s3gen_config.hift_base_channels` if present.
    pub fn from_config_json(config: &Value) -> Result<HiftConfig> {
        let mut cfg = HiftConfig::default();
        if let Some(v) = config.get("s3gen_config").and_then(|s| s.get("hift_base_channels")) {
            let n = v.as_i64().filter(|&n| n >= 8 && n % 8 == 0 && n <= i32::MAX as i64).ok_or_else(|| {
                LmError::InvalidWeights(format!("config.json: s3gen_config.hift_base_channels must be a positive multiple of 8, got {v}"))
            })?;
            cfg.base_channels = n as i32;
        }
        Ok(cfg)
    }

    /// Output samples per mel frame (480 at 24 kHz: 8 * 5 * 3 * hop 4).
    pub fn samples_per_frame(&self) -> i32 {
        self.upsample_rates.iter().product::<i32>() * self.hop_len
    }
}
