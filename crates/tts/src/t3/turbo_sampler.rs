//! Turbo's sampler, op for op as mlx-audio's `T3._sample_token` (after its repetition
//! penalty, which is `lm`'s processor): temperature unless 0 or 1, top-k by the k-th largest
//! value, a normalised top-p (softmax over the sorted logits, the first token past `top_p`
//! kept), then one categorical draw, always: even a top-k of one spends its key, so that the
//! draws after T3 (the meanflow noise, HiFT's source) come from the keys mlx-audio uses.
use lm::generate::TokenSampler;
use mlx::random::{categorical, KeySequence};
use mlx::{Array, Dtype, Result};

pub(super) struct TurboSampler {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
}

impl TokenSampler for TurboSampler {
    fn sample(&self, logits: &Array, keys: &mut KeySequence) -> Result<Array> {
        let mut logits = logits.clone();
        let t = self.temperature;
        if t > 0.0 && t != 1.0 {
            logits = logits.divide_scalar(super::inference::typed(t))?;
        }
        if self.top_k > 0 {
            let vocab = logits.dim(-1);
            let k = (self.top_k as i32).min(vocab);
            let kth = logits.argpartition(vocab - k, -1)?.slice_axis(1, vocab - k, vocab - k + 1)?;
            let keep = logits.greater_equal(&logits.take_along_axis(&kth, -1)?)?;
            logits = Array::where_(&keep, &logits, &logits.scalar_like(f64::NEG_INFINITY)?)?;
        }
        if self.top_p < 1.0 {
            let order = logits.negative()?.argsort(-1)?;
            let sorted = logits.take_along_axis(&order, -1)?;
            let mass = sorted.softmax(&[-1], false)?.cumsum(-1, false, true)?;
            let past = mass.greater_scalar(super::inference::typed(self.top_p))?;
            let n = past.dim(-1);
            let first = Array::zeros(&[logits.dim(0), 1], Dtype::Bool)?;
            let remove = Array::concatenate(&[&first, &past.slice_axis(1, 0, n - 1)?], -1)?;
            let sorted = Array::where_(&remove, &sorted.scalar_like(f64::NEG_INFINITY)?, &sorted)?;
            logits = sorted.take_along_axis(&order.argsort(-1)?, -1)?;
        }
        categorical(&logits, -1, Some(&keys.next()?))
    }
}
