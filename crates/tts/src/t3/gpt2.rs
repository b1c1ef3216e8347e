//! Chatterbox Turbo's T3 backbone: GPT-2 (mlx-audio's `chatterbox_turbo/models/t3/gpt2.py`),
//! fed embeddings. Learned absolute positions added at the input (at the caches' offset),
//! pre-norm blocks of LayerNorm, fused-QKV attention with biases and a `gelu_new` MLP, and a
//! final LayerNorm. The attention is `lm`'s (fused projections, no RoPE).
use lm::cache::{kv_caches, Cache, LayerCaches};
use lm::models::attention::{Projections, SelfAttention};
use lm::weights::Weights;
use mlx::nn::{gelu_approx, Embedding, LayerNorm, Linear, Rope};
use mlx::{Array, Dtype};
use serde_json::Value;

use crate::layers::layer_norm;
use crate::{Result, TtsError};

/// `GPT2Config` as mlx-audio's `create_gpt2_config` builds it (GPT-2 medium), with the
/// fixtures' overrides (`t3_config.gpt2_config`, which mlx-audio itself does not read).
#[derive(Debug, Clone, PartialEq)]
pub struct Gpt2Config {
    pub n_layer: i32,
    pub n_embd: i32,
    pub n_head: i32,
    pub n_positions: i32,
    pub layer_norm_epsilon: f32,
}

impl Default for Gpt2Config {
    fn default() -> Self {
        Gpt2Config { n_layer: 24, n_embd: 1024, n_head: 16, n_positions: 8196, layer_norm_epsilon: 1e-5 }
    }
}

impl Gpt2Config {
    /// `t3_config.gpt2_config` (null or absent: GPT-2 medium). `vocab_size` and the other
    /// `GPT2Config` fields are accepted and unused (the token table is never read).
    pub fn from_json(v: Option<&Value>) -> Result<Gpt2Config> {
        let mut cfg = Gpt2Config::default();
        let obj = match v {
            None | Some(Value::Null) => return Ok(cfg),
            Some(Value::Object(o)) => o,
            Some(other) => return Err(TtsError::InvalidWeights(format!("config.json: t3_config.gpt2_config must be an object, got {other}"))),
        };
        for (key, slot) in
            [("n_layer", &mut cfg.n_layer), ("n_embd", &mut cfg.n_embd), ("n_head", &mut cfg.n_head), ("n_positions", &mut cfg.n_positions)]
        {
            if let Some(v) = obj.get(key).filter(|v| !v.is_null()) {
                *slot = v.as_i64().filter(|&n| n >= 1 && n <= i32::MAX as i64).ok_or_else(|| {
                    TtsError::InvalidWeights(format!("config.json: t3_config.gpt2_config.{key} must be a positive integer, got {v}"))
                })? as i32;
            }
        }
        if let Some(v) = obj.get("layer_norm_epsilon").filter(|v| !v.is_null()) {
            cfg.layer_norm_epsilon = v.as_f64().filter(|e| *e > 0.0).ok_or_else(|| {
                TtsError::InvalidWeights(format!("config.json: t3_config.gpt2_config.layer_norm_epsilon must be a positive number, got {v}"))
            })? as f32;
        }
        if cfg.n_embd % cfg.n_head != 0 {
            return Err(TtsError::InvalidWeights(format!(
                "config.json: t3_config.gpt2_config.n_embd ({}) must be a multiple of n_head ({})",
                cfg.n_embd, cfg.n_head
            )));
        }
        Ok(cfg)
    }
}

struct Block {
    ln_1: LayerNorm,
    attn: SelfAttention,
    ln_2: LayerNorm,
    c_fc: Linear,
    c_proj: Linear,
}

/// `{prefix}.wpe`, `{prefix}.h.N.*` and `{prefix}.ln_f` (`t3.tfmr`).
pub struct Gpt2Stack {
    cfg: Gpt2Config,
    wpe: Embedding,
    blocks: Vec<Block>,
    ln_f: LayerNorm,
}

impl Gpt2Stack {
    /// Takes the stack's tensors out of `w`; its token table `{prefix}.wte` (the T3 feeds
    /// embeddings) is dropped.
    pub fn load(w: &mut Weights, prefix: &str, cfg: &Gpt2Config) -> Result<Gpt2Stack> {
        let (d, eps) = (cfg.n_embd, cfg.layer_norm_epsilon);
        let wte = format!("{prefix}.wte.weight");
        w.discard(|k| k == wte);
        let mut blocks = Vec::with_capacity(cfg.n_layer as usize);
        for i in 0..cfg.n_layer {
            let p = format!("{prefix}.h.{i}");
            let head_dim = d / cfg.n_head;
            let attn = SelfAttention {
                qkv: Projections::Fused { qkv: w.linear(&format!("{p}.attn.c_attn"), d, 3 * d, true)? },
                o_proj: w.linear(&format!("{p}.attn.c_proj"), d, d, true)?,
                q_norm: None,
                k_norm: None,
                v_norm: None,
                heads: cfg.n_head,
                kv_heads: cfg.n_head,
                head_dim,
                scale: (head_dim as f32).powf(-0.5),
                position_scale: None,
                sinks: None,
                output_gate: false,
            };
            blocks.push(Block {
                ln_1: layer_norm(w, &format!("{p}.ln_1"), d, eps)?,
                attn,
                ln_2: layer_norm(w, &format!("{p}.ln_2"), d, eps)?,
                c_fc: w.linear(&format!("{p}.mlp.c_fc"), d, 4 * d, true)?,
                c_proj: w.linear(&format!("{p}.mlp.c_proj"), 4 * d, d, true)?,
            });
        }
        Ok(Gpt2Stack {
            cfg: cfg.clone(),
            wpe: w.embedding(&format!("{prefix}.wpe"), cfg.n_positions, d)?,
            blocks,
            ln_f: layer_norm(w, &format!("{prefix}.ln_f"), d, eps)?,
        })
    }

    /// Positions the stack can hold, prompt included.
    pub fn positions(&self) -> i32 {
        self.cfg.n_positions
    }

    pub fn new_caches(&self) -> LayerCaches {
        kv_caches(self.blocks.len())
    }

    /// `h` `[B, L, dims]` at positions `offset..` (the caches' offset) through every block
    /// and the final norm; only the last position when `last_only`.
    pub fn forward(&self, h: Array, caches: &mut [Box<dyn Cache>], last_only: bool) -> mlx::Result<Array> {
        let l = h.dim(1);
        let offset = caches.first().map_or(0, |c| c.offset());
        if offset + l > self.cfg.n_positions {
            return Err(mlx::Error::new(format!("GPT-2 holds {} positions, this needs {}", self.cfg.n_positions, offset + l)));
        }
        let pos = Array::arange(offset as f64, (offset + l) as f64, 1.0, Dtype::Int32)?;
        let mut h = h.add(&self.wpe.forward(&pos)?)?;
        const NO_ROPE: &Rope = &Rope::Identity;
        for (block, cache) in self.blocks.iter().zip(caches.iter_mut()) {
            h = h.add(&block.attn.forward(&block.ln_1.forward(&h)?, cache.as_mut(), NO_ROPE)?)?;
            let m = block.c_proj.forward(&gelu_approx(&block.c_fc.forward(&block.ln_2.forward(&h)?)?)?)?;
            h = h.add(&m)?;
        }
        if last_only && l > 1 {
            h = h.slice_axis(1, l - 1, l)?;
        }
        self.ln_f.forward(&h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gpt2_config_defaults_overrides_and_errors() {
        assert_eq!(Gpt2Config::from_json(None).unwrap(), Gpt2Config::default());
        let c = Gpt2Config::from_json(Some(&json!({"n_layer": 2, "n_positions": 1024, "vocab_size": 8}))).unwrap();
        assert_eq!((c.n_layer, c.n_positions, c.n_embd), (2, 1024, 1024));
        for (bad, what) in [
            (json!([1]), "must be an object"),
            (json!({"n_layer": 0}), "n_layer must be a positive integer"),
            (json!({"layer_norm_epsilon": -1}), "layer_norm_epsilon must be a positive number"),
            (json!({"n_head": 3}), "must be a multiple of n_head"),
        ] {
            let e = Gpt2Config::from_json(Some(&bad)).err().unwrap();
            assert_eq!(e.code(), "INVALID_WEIGHTS");
            assert!(e.message().contains(what), "{}", e.message());
        }
    }
}
