//! F0 predictor (`ConvRNNF0Predictor`): five k=3 convs with ELU and a linear
//! head; |output| is the pitch in Hz per mel frame.
use lm::weights::Weights;
use mlx::nn::Linear;
use mlx::Array;

use crate::layers::{self, Conv1d};
use crate::Result;

pub struct F0Predictor {
    condnet: Vec<Conv1d>,
    classifier: Linear,
}

fn elu(x: &Array) -> mlx::Result<Array> {
    Array::where_(&x.greater_scalar(0.0)?, x, &x.exp()?.subtract_scalar(1.0)?)
}

impl F0Predictor {
    pub fn load(w: &mut Weights, prefix: &str, in_channels: i32, channels: i32) -> Result<F0Predictor> {
        let mut condnet = Vec::with_capacity(5);
        for i in 0..5 {
            let cin = if i == 0 { in_channels } else { channels };
            condnet.push(Conv1d::load(w, &format!("{prefix}.condnet.{i}"), cin, channels, 3, true, 1, 1, 1, 1)?);
        }
        let classifier = layers::linear(w, &format!("{prefix}.classifier"), channels, 1, true)?;
        Ok(F0Predictor { condnet, classifier })
    }

    /// `mel_t` is `[B, T, 80]` (channels-last); returns F0 `[B, T]`.
    pub fn forward(&self, mel_t: &Array) -> mlx::Result<Array> {
        let mut x = mel_t.clone();
        for conv in &self.condnet {
            x = elu(&conv.forward(&x)?)?;
        }
        self.classifier.forward(&x)?.squeeze(&[-1])?.abs()
    }
}
