//! The one weight loader: every `model*.safetensors` of a folder (sharded or
//! not, as MLX-LM globs them), taken out by name with shape checks.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use mlx::quant::Precision;
use mlx::{nn, Array, Dtype};
use serde_json::Value;

use crate::error::{LmError, Result};

pub struct Weights {
    tensors: HashMap<String, Array>,
    /// Which file each tensor came from, for error messages.
    origin: HashMap<String, PathBuf>,
    /// Compute dtype requested by the caller; float tensors are cast to it.
    dtype: Option<Dtype>,
    /// config.json `quantization`, for defaults and per-layer overrides.
    quantization: Option<Value>,
    /// Everything handed out, so `finish` can read it all at load time.
    taken: Vec<Array>,
    /// How the quantized layers handed out compute their matmuls.
    precision: Precision,
}

fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    let mut files: Vec<PathBuf> = if index.exists() {
        let v = crate::config::read_json(&index)?;
        let map = v
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| LmError::InvalidWeights(format!("{}: missing \"weight_map\"", index.display())))?;
        let mut names: Vec<String> = map.values().filter_map(|f| f.as_str().map(String::from)).collect();
        names.sort();
        names.dedup();
        names.into_iter().map(|n| dir.join(n)).collect()
    } else {
        let rd = std::fs::read_dir(dir).map_err(|e| LmError::ModelNotFound(format!("cannot read model folder {}: {e}", dir.display())))?;
        rd.filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                name.starts_with("model") && name.ends_with(".safetensors")
            })
            .collect()
    };
    files.sort();
    if files.is_empty() {
        return Err(LmError::ModelNotFound(format!("no model*.safetensors files in {}", dir.display())));
    }
    for f in &files {
        if !f.exists() {
            return Err(LmError::InvalidWeights(format!("{} is listed in model.safetensors.index.json but does not exist", f.display())));
        }
    }
    Ok(files)
}

impl Weights {
    pub fn load(dir: &Path, dtype: Option<Dtype>, quantization: Option<Value>) -> Result<Weights> {
        let mut tensors = HashMap::new();
        let mut origin = HashMap::new();
        for file in weight_files(dir)? {
            let (t, _meta) = mlx::io::load_safetensors(&file).map_err(|e| LmError::InvalidWeights(format!("{}: {}", file.display(), e.message)))?;
            for (k, v) in t {
                origin.insert(k.clone(), file.clone());
                tensors.insert(k, v);
            }
        }
        Ok(Weights { tensors, origin, dtype, quantization, taken: Vec::new(), precision: Precision::Exact })
    }

    /// Tensors already loaded from `file` (a GGUF file's, renamed).
    pub fn from_tensors(tensors: HashMap<String, Array>, file: &Path, dtype: Option<Dtype>, quantization: Option<Value>) -> Weights {
        let origin = tensors.keys().map(|k| (k.clone(), file.to_path_buf())).collect();
        Weights { tensors, origin, dtype, quantization, taken: Vec::new(), precision: Precision::Exact }
    }

    /// The precision of the quantized layers handed out from now on.
    pub fn with_precision(mut self, precision: Precision) -> Weights {
        self.precision = precision;
        self
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    fn missing(&self, name: &str) -> LmError {
        LmError::InvalidWeights(format!("tensor \"{name}\" is missing from the model weights"))
    }

    fn raw(&mut self, name: &str) -> Result<Array> {
        let a = self.tensors.remove(name).ok_or_else(|| self.missing(name))?;
        self.taken.push(a.clone());
        Ok(a)
    }

    /// A float tensor of exactly `shape`, cast to the compute dtype.
    pub fn take(&mut self, name: &str, shape: &[i32]) -> Result<Array> {
        let a = self.raw(name)?;
        let got = a.shape();
        if got != shape {
            let file = self.origin.get(name).map(|p| p.display().to_string()).unwrap_or_default();
            return Err(LmError::InvalidWeights(format!("tensor \"{name}\" in {file} has shape {got:?}, expected {shape:?}")));
        }
        self.cast(a)
    }

    fn cast(&mut self, a: Array) -> Result<Array> {
        match self.dtype {
            Some(dt) if a.dtype().is_float() && a.dtype() != dt => {
                let c = a.astype(dt)?;
                self.taken.push(c.clone());
                Ok(c)
            }
            _ => Ok(a),
        }
    }

    pub fn take_optional(&mut self, name: &str, shape: &[i32], present: bool) -> Result<Option<Array>> {
        if present {
            self.take(name, shape).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Quantization of `prefix` as MLX-LM decides it: per-layer override in the
    /// config if any, otherwise inferred from the packed shapes when `.scales` exists.
    pub(crate) fn quant_params(&self, prefix: &str, in_dims: i32) -> Result<Option<nn::QuantParams>> {
        let Some(scales) = self.tensors.get(&format!("{prefix}.scales")) else {
            return Ok(None);
        };
        let weight = self.tensors.get(&format!("{prefix}.weight")).ok_or_else(|| self.missing(&format!("{prefix}.weight")))?;
        if let Some(v) = self.quantization.as_ref().and_then(|q| q.get(prefix)) {
            if let (Some(g), Some(b)) = (v.get("group_size").and_then(Value::as_i64), v.get("bits").and_then(Value::as_i64)) {
                return Ok(Some(nn::QuantParams { group_size: g as i32, bits: b as i32, precision: self.precision }));
            }
        }
        if scales.dtype() == Dtype::Uint8 {
            return Err(LmError::UnsupportedModel(format!("{prefix}: only affine quantization is supported (found uint8 scales: an fp4/fp8 mode)")));
        }
        let n_groups = scales.dim(-1);
        let packed = weight.dim(-1);
        if n_groups <= 0 || in_dims % n_groups != 0 {
            return Err(LmError::InvalidWeights(format!("{prefix}.scales has {n_groups} groups, which does not divide the input size {in_dims}")));
        }
        Ok(Some(nn::QuantParams { group_size: in_dims / n_groups, bits: packed * 32 / in_dims, precision: self.precision }))
    }

    /// The packed weight (as this device runs it best: `quant::for_device`),
    /// scales and biases of `prefix`, and the weight's width.
    fn take_packed(&mut self, prefix: &str, out_dims: i32, in_dims: i32, q: nn::QuantParams) -> Result<(Array, Array, Array, nn::QuantParams)> {
        let groups = in_dims / q.group_size;
        let packed = in_dims * q.bits / 32;
        let w = self.raw(&format!("{prefix}.weight"))?;
        let shape = w.shape();
        if shape != [out_dims, packed] {
            return Err(LmError::InvalidWeights(format!(
                "tensor \"{prefix}.weight\" has shape {shape:?}, expected {:?} ({}-bit packed {out_dims}x{in_dims})",
                [out_dims, packed],
                q.bits
            )));
        }
        let scales = self.take(&format!("{prefix}.scales"), &[out_dims, groups])?;
        let biases = self.take(&format!("{prefix}.biases"), &[out_dims, groups])?;
        let (w, bits) = mlx::quant::for_device(w, q.bits)?;
        Ok((w, scales, biases, nn::QuantParams { bits, ..q }))
    }

    pub fn linear(&mut self, prefix: &str, in_dims: i32, out_dims: i32, bias: bool) -> Result<nn::Linear> {
        let b = self.take_optional(&format!("{prefix}.bias"), &[out_dims], bias)?;
        match self.quant_params(prefix, in_dims)? {
            None => Ok(nn::Linear::Dense { weight: self.take(&format!("{prefix}.weight"), &[out_dims, in_dims])?, bias: b }),
            Some(q) => {
                let (weight, scales, biases, q) = self.take_packed(prefix, out_dims, in_dims, q)?;
                Ok(nn::Linear::Quantized { weight, scales, biases, bias: b, q })
            }
        }
    }

    pub fn embedding(&mut self, prefix: &str, vocab: i32, dims: i32) -> Result<nn::Embedding> {
        match self.quant_params(prefix, dims)? {
            None => Ok(nn::Embedding::Dense { weight: self.take(&format!("{prefix}.weight"), &[vocab, dims])? }),
            Some(q) => {
                let (weight, scales, biases, q) = self.take_packed(prefix, vocab, dims, q)?;
                Ok(nn::Embedding::Quantized { weight, scales, biases, q })
            }
        }
    }

    pub fn rms_norm(&mut self, name: &str, dims: i32, eps: f32) -> Result<nn::RmsNorm> {
        Ok(nn::RmsNorm { weight: self.take(name, &[dims])?, eps })
    }

    /// Replaces the tensors `names` (all present, same shape) by one stacked
    /// along a new first axis under `into` (per-expert weights into one).
    pub fn stack(&mut self, names: &[String], into: &str) -> Result<()> {
        let mut parts = Vec::with_capacity(names.len());
        for n in names {
            parts.push(self.tensors.remove(n).ok_or_else(|| self.missing(n))?);
        }
        let file = names.first().and_then(|n| self.origin.remove(n));
        let refs: Vec<&Array> = parts.iter().collect();
        let stacked =
            Array::stack(&refs, 0).map_err(|e| LmError::InvalidWeights(format!("cannot stack the tensors of \"{into}\": {}", e.message)))?;
        self.tensors.insert(into.to_string(), stacked);
        if let Some(f) = file {
            self.origin.insert(into.to_string(), f);
        }
        Ok(())
    }

    /// Renames `{prefix}name` to `name` (a wrapped model's weights).
    pub fn strip_prefix(&mut self, prefix: &str) {
        self.rename_prefix(prefix, "");
    }

    /// Renames `{from}name` to `{to}name`.
    pub fn rename_prefix(&mut self, from: &str, to: &str) {
        let names: Vec<String> = self.tensors.keys().filter(|k| k.starts_with(from)).cloned().collect();
        for name in names {
            let short = format!("{to}{}", &name[from.len()..]);
            if let Some(a) = self.tensors.remove(&name) {
                self.tensors.insert(short.clone(), a);
            }
            if let Some(o) = self.origin.remove(&name) {
                self.origin.insert(short, o);
            }
        }
    }

    /// Drops tensors the model ignores, as MLX-LM's `sanitize` does.
    pub fn discard(&mut self, pred: impl Fn(&str) -> bool) {
        self.tensors.retain(|k, _| !pred(k));
    }

    /// MLX-LM loads strictly: anything left over is an error. Then every weight
    /// is read now (MLX loads lazily), so a truncated file fails at load time.
    pub fn finish(self) -> Result<()> {
        self.finish_with_progress(&mut |_| {})
    }

    /// As `finish`, reading the weights in groups and reporting the fraction of
    /// bytes read (reading is where loading spends its time) after each group:
    /// increasing, the last exactly 1. A group ends at 1/PROGRESS_STEPS of the
    /// bytes or of the tensors, so a large embedding does not hide the rest.
    pub fn finish_with_progress(self, progress: &mut dyn FnMut(f64)) -> Result<()> {
        const PROGRESS_STEPS: usize = 100;
        if let Some(name) = self.tensors.keys().min() {
            let file = self.origin.get(name).map(|p| p.display().to_string()).unwrap_or_default();
            return Err(LmError::InvalidWeights(format!("unexpected tensor \"{name}\" in {file} ({} unused in all)", self.tensors.len())));
        }
        let bytes = |a: &Array| a.size() * a.dtype().size();
        // Integers, so that the last fraction is exactly 1.
        let total: usize = self.taken.iter().map(bytes).sum();
        let n = self.taken.len();
        let (mut done, mut group_bytes, mut group) = (0usize, 0usize, Vec::new());
        for (i, a) in self.taken.iter().enumerate() {
            group.push(a);
            group_bytes += bytes(a);
            if group_bytes * PROGRESS_STEPS >= total || group.len() * PROGRESS_STEPS >= n || i + 1 == n {
                mlx::eval(&group).map_err(|e| LmError::InvalidWeights(format!("reading weights: {}", e.message)))?;
                done += group_bytes;
                group_bytes = 0;
                group.clear();
                progress(if total == 0 { 1.0 } else { done as f64 / total as f64 });
            }
        }
        Ok(())
    }

    /// The dtype of the first floating tensor (the weights' own dtype).
    pub fn native_dtype(&self) -> Option<Dtype> {
        let mut names: Vec<&String> = self.tensors.keys().collect();
        names.sort();
        names.into_iter().map(|n| self.tensors[n].dtype()).find(|d| d.is_float())
    }
}
