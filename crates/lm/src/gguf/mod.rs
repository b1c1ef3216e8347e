//! `loadModel('model.gguf')`: a llama.cpp GGUF file loaded through MLX's own
//! GGUF reader, or, where it holds K-quants (which that reader does not keep
//! quantized) or Q5_0/Q5_1/IQ4_NL/IQ4_XS/MXFP4 (which it does not load), tensor
//! by tensor here (`kquants`, `iquants`, `blocks32`, `mxfp4`). The header is read and
//! checked here first (`file`), the config and tokenizer are rebuilt from its
//! metadata (`config`, `tokenizer`), and the tensors, renamed to MLX-LM's
//! names, go to the same family constructors as a model folder's. A file split in
//! parts (`split`) loads by its first part's path.
mod blocks32;
mod config;
mod file;
mod iquants;
mod kquants;
mod mxfp4;
mod rope_freqs;
mod split;
mod tokenizer;

use std::collections::HashMap;
use std::path::Path;

use mlx::{Array, Dtype};

pub use file::{is_gguf, GgufFile, Meta};

use crate::config::ModelConfig;
use crate::error::{LmError, Result};
use crate::models::{registry, LanguageModel, LoadOptions};
use crate::tokenizer::Tokenizer;
use crate::weights::Weights;
use file::GgmlType;

/// The model and tokenizer of a GGUF file.
pub fn load(path: &Path, options: &LoadOptions, progress: &mut dyn FnMut(f64)) -> Result<(Box<dyn LanguageModel>, Tokenizer)> {
    let file = GgufFile::open(path)?;
    let arch = config::arch(&file)?;
    if let Some(t) = config::refused_type(&file) {
        return Err(LmError::UnsupportedModel(format!(
            "{}: tensor \"{}\" is stored as {}, which mlx-node cannot load (supported: {})",
            path.display(),
            t.name,
            t.ggml_type.name(),
            config::LOADED.map(GgmlType::name).join(", ")
        )));
    }
    // The tokenizer is built beside the tensors (a large vocab takes about half a second); its
    // errors still come first, then the config's, then the tensors'.
    let what = format!("{}: building the tokenizer", path.display());
    // The end-of-generation ids go to both (the config's eos_token_id, as MLX-LM reads it).
    let eos = tokenizer::eos_ids(&file)?;
    let (tokenizer, model) =
        crate::models::beside(&what, || tokenizer::tokenizer(&file, arch, eos.clone()), || load_model(path, &file, arch, &eos, options, progress));
    let tokenizer = tokenizer?;
    Ok((model?, tokenizer))
}

/// The model of a GGUF file: its config from the metadata, then its tensors.
fn load_model(
    path: &Path,
    file: &GgufFile,
    arch: &config::Arch,
    eos: &[u32],
    options: &LoadOptions,
    progress: &mut dyn FnMut(f64),
) -> Result<Box<dyn LanguageModel>> {
    let raw = config::config(file, arch, eos)?;
    let config = ModelConfig::from_value(raw, path)?;
    let family = registry::family(&config.model_type).ok_or_else(|| LmError::UnsupportedModel(config.model_type.clone()))?;

    // Stacked experts are read here whatever their type (in the form MLX's reader gives matrices).
    let here = file.tensors.iter().any(|t| read_here(t.ggml_type) || (t.shape.len() == 3 && blocks32::is_block32(t.ggml_type)));
    let mut tensors = if here { read_each(file, arch)? } else { read_with_mlx(file, arch)? };
    if arch.permuted {
        unpermute_qk(&mut tensors, &config).map_err(|e| LmError::Mlx(e.message))?;
    }
    if arch.norm_shift {
        unshift_norms(&mut tensors).map_err(|e| LmError::Mlx(e.message))?;
    }
    let dtype = options.dtype.or(arch.default_dtype);
    let mut weights = Weights::from_tensors(tensors, path, dtype, None)
        .with_precision(options.precision_for(&config))
        .with_shard(registry::shard_for(family, options)?);
    (family.sanitize)(&config, &mut weights)?;
    (family.build)(config, weights, dtype, progress)
}

/// Gemma's norm weights less the 1 llama.cpp's converter added (in float32,
/// where they are stored: exact for any weight that came from bfloat16).
fn unshift_norms(tensors: &mut HashMap<String, Array>) -> mlx::Result<()> {
    for (_, a) in tensors.iter_mut().filter(|(n, _)| n.ends_with("norm.weight")) {
        *a = a.astype(Dtype::Float32)?.subtract_scalar(1.0)?;
    }
    Ok(())
}

/// Every tensor through MLX's GGUF reader (Q4_0, Q4_1 and Q8_0 as MLX maps
/// them), part by part, under MLX-LM's names.
fn read_with_mlx(file: &GgufFile, arch: &config::Arch) -> Result<HashMap<String, Array>> {
    let mut tensors = HashMap::with_capacity(file.tensors.len());
    for path in &file.parts {
        let loaded = mlx::io::load_gguf(path).map_err(|e| LmError::InvalidWeights(format!("{}: {}", path.display(), e.message)))?;
        for (name, a) in loaded.into_iter().filter(|(name, _)| !config::is_config_tensor(name)) {
            let mlx = config::mlx_name(&name, arch).ok_or_else(|| {
                LmError::UnsupportedModel(format!("{}: tensor \"{name}\" is not part of the models this loader knows", path.display()))
            })?;
            tensors.insert(mlx, a);
        }
    }
    // MLX's reader turns BF16 into float16; keep it as stored.
    for t in file.tensors.iter().filter(|t| t.ggml_type == GgmlType::BF16) {
        tensors.insert(config::mlx_name(&t.name, arch).unwrap_or_default(), plain(file, t)?);
    }
    Ok(tensors)
}

/// Types MLX's reader does not keep as stored: a file with any is read here.
fn read_here(t: GgmlType) -> bool {
    kquants::is_kquant(t) || iquants::is_iquant(t) || matches!(t, GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::MXFP4)
}

/// Every tensor read here: floats as stored, quantized ones as affine
/// (weight, scales, biases) triples (`kquants`; `blocks32`, in the form MLX's
/// reader gives Q4_0, Q4_1 and Q8_0), MXFP4 as MLX's mxfp4 pairs (`mxfp4`).
fn read_each(file: &GgufFile, arch: &config::Arch) -> Result<HashMap<String, Array>> {
    let mut tensors = HashMap::with_capacity(file.tensors.len() * 3);
    // rope_freqs.weight and Phi-3's LongRoPE factors are read by the config, not loaded.
    for t in file.tensors.iter().filter(|t| !config::is_config_tensor(&t.name)) {
        let name = config::mlx_name(&t.name, arch).ok_or_else(|| {
            LmError::UnsupportedModel(format!("{}: tensor \"{}\" is not part of the models this loader knows", file.path.display(), t.name))
        })?;
        let (quantized, matrix) = (read_here(t.ggml_type) || blocks32::is_block32(t.ggml_type), matches!(t.shape.len(), 2 | 3));
        if !quantized {
            tensors.insert(name, plain(file, t)?);
            continue;
        }
        if !matrix {
            return Err(LmError::InvalidWeights(format!(
                "tensor \"{}\" ({}): quantized tensors must be 2-D (or 3-D: stacked experts)",
                t.name,
                t.ggml_type.name()
            )));
        }
        // Stacked experts ([experts, out, in]) convert as one matrix of all their rows.
        let (lead, cols) = (&t.shape[..t.shape.len() - 1], *t.shape.last().unwrap_or(&0) as usize);
        let (rows, raw) = (lead.iter().product::<i64>() as usize, file.read_tensor(t)?);
        let base = name.strip_suffix(".weight").unwrap_or(&name).to_string();
        let stacked = |a: Array| -> Result<Array> {
            let mut shape: Vec<i32> = lead.iter().map(|&d| d as i32).collect();
            shape.push(a.shape()[1]);
            a.reshape(&shape).map_err(|e| LmError::Mlx(e.message))
        };
        if t.ggml_type == GgmlType::MXFP4 {
            // MLX's mxfp4 layers: weight and uint8 scales, no biases (the loader tells the mode by them).
            let (w, s) = mxfp4::convert(rows, cols, &raw)?;
            tensors.insert(format!("{base}.weight"), stacked(w)?);
            tensors.insert(format!("{base}.scales"), stacked(s)?);
            continue;
        }
        let (w, s, b) = if kquants::is_kquant(t.ggml_type) {
            kquants::convert(t.ggml_type, rows, cols, &raw)?
        } else if iquants::is_iquant(t.ggml_type) {
            iquants::convert(t.ggml_type, rows, cols, &raw)?
        } else {
            blocks32::convert(t.ggml_type, rows, cols, &raw)?
        };
        tensors.insert(format!("{base}.weight"), stacked(w)?);
        tensors.insert(format!("{base}.scales"), stacked(s)?);
        tensors.insert(format!("{base}.biases"), stacked(b)?);
    }
    Ok(tensors)
}

/// An F32, F16 or BF16 tensor as stored.
fn plain(file: &GgufFile, t: &file::TensorInfo) -> Result<Array> {
    let dtype = match t.ggml_type {
        GgmlType::F32 => Dtype::Float32,
        GgmlType::F16 => Dtype::Float16,
        GgmlType::BF16 => Dtype::Bfloat16,
        // `refused_type` has let only these and the quantized types through.
        other => return Err(LmError::InvalidWeights(format!("tensor \"{}\": {} is not a float type", t.name, other.name()))),
    };
    let shape: Vec<i32> = t.shape.iter().map(|&d| d as i32).collect();
    Array::from_bytes(&file.read_tensor(t)?, &shape, dtype).map_err(|e| LmError::Mlx(e.message))
}

/// llama.cpp's converter stores the q and k projection rows of Llama-type
/// models interleaved per head for its rotary layout (row `(h, i, j)` holds
/// HF row `(h, j, i)`, `j` in 0..2); put them back. Rows are independent, so
/// packed weights, scales and biases all take the same permutation.
fn unpermute_qk(tensors: &mut HashMap<String, Array>, c: &ModelConfig) -> mlx::Result<()> {
    for layer in 0..c.num_hidden_layers {
        for (proj, heads) in [("q_proj", c.num_attention_heads), ("k_proj", c.num_key_value_heads)] {
            for suffix in ["weight", "scales", "biases", "bias"] {
                let name = format!("model.layers.{layer}.self_attn.{proj}.{suffix}");
                let Some(a) = tensors.get(&name) else { continue };
                let shape = a.shape();
                let rows = shape[0];
                let half = rows / heads / 2;
                let rest: Vec<i32> = shape[1..].to_vec();
                let mut split = vec![heads, half, 2];
                split.extend(&rest);
                let b = a.reshape(&split)?.swapaxes(1, 2)?.reshape(&shape)?.contiguous()?;
                tensors.insert(name, b);
            }
        }
    }
    Ok(())
}
