//! HiFT vocoder (mlx-audio's `HiFTGenerator` with `ConvRNNF0Predictor` and the
//! `SourceModuleHnNSF` sine source): mel spectrogram to 24 kHz waveform.
mod config;
mod conv;
mod f0;
mod fade;
mod generator;
mod resblock;
mod source;
mod stft;

pub use config::HiftConfig;
pub use fade::fade_in;
pub use generator::Hift;
