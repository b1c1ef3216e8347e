//! The one weight loader: every `model*.safetensors` of a folder (sharded or
//! not, as MLX-LM globs them), taken out by name with shape checks.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use mlx::quant::{Mode, Precision};
use mlx::{nn, Array, Dtype};
use serde_json::Value;

use crate::error::{LmError, Result};
use crate::parallel::{Cut, Shard, Split, Strategy};

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
    /// This process's place in a tensor-parallel group: the split layers
    /// handed out hold only its slice.
    shard: Option<Shard>,
    /// This process's place in a pipeline: the decoder keeps only its layers.
    pipeline: Option<Shard>,
    /// Tensors cut otherwise than in N equal blocks (`cut_layer`).
    cuts: HashMap<String, Cut>,
}

/// `Weights::linear_fused` holds layers as one unless `MLX_NODE_FUSE_PROJECTIONS=0`
/// (read once per process; a switch for measuring what fusing saves).
fn fusion_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| !std::env::var("MLX_NODE_FUSE_PROJECTIONS").is_ok_and(|v| v.trim() == "0"))
}

/// `Weights::repacked` lays quantized layers out for their precision's kernel unless
/// `MLX_NODE_REPACK=0` (read once per process; a switch for measuring what
/// repacking saves, and for checking that it keeps the tokens).
fn repack_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| !std::env::var("MLX_NODE_REPACK").is_ok_and(|v| v.trim() == "0"))
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
        Ok(Weights::new(tensors, origin, dtype, quantization))
    }

    /// Tensors already loaded from `file` (a GGUF file's, renamed).
    pub fn from_tensors(tensors: HashMap<String, Array>, file: &Path, dtype: Option<Dtype>, quantization: Option<Value>) -> Weights {
        let origin = tensors.keys().map(|k| (k.clone(), file.to_path_buf())).collect();
        Weights::new(tensors, origin, dtype, quantization)
    }

    /// Tensors (and the file each came from) not yet taken, exact, unsplit.
    fn new(tensors: HashMap<String, Array>, origin: HashMap<String, PathBuf>, dtype: Option<Dtype>, quantization: Option<Value>) -> Weights {
        Weights {
            tensors,
            origin,
            dtype,
            quantization,
            taken: Vec::new(),
            precision: Precision::Exact,
            shard: None,
            pipeline: None,
            cuts: HashMap::new(),
        }
    }

    /// The precision of the quantized layers handed out from now on.
    pub fn with_precision(mut self, precision: Precision) -> Weights {
        self.precision = precision;
        self
    }

    /// From now on, with a tensor-parallel `shard`, the layers handed out by
    /// `linear_split` and `take_split` are split over its group; with a
    /// pipeline one, the decoder builds only this process's layers.
    pub fn with_shard(mut self, shard: Option<Shard>) -> Weights {
        let (tensor, pipeline) = match shard {
            Some(s) if s.strategy == Strategy::Pipeline => (None, Some(s)),
            other => (other, None),
        };
        self.shard = tensor;
        self.pipeline = pipeline;
        self
    }

    /// The tensor-parallel group the split layers are cut for, if any.
    pub fn tensor_shard(&self) -> Option<&Shard> {
        self.shard.as_ref()
    }

    /// The pipeline this process runs a part of, if any.
    pub fn pipeline(&self) -> Option<&Shard> {
        self.pipeline.as_ref()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// The shape of tensor `name` as stored, if there is one.
    pub fn shape(&self, name: &str) -> Option<Vec<i32>> {
        self.tensors.get(name).map(Array::shape)
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
        self.take_split(name, shape, None)
    }

    /// As `take`; then, in a tensor-parallel group, only this process's slice
    /// along `axis` (see `Shard::part`).
    pub fn take_split(&mut self, name: &str, shape: &[i32], axis: Option<i32>) -> Result<Array> {
        let got = self.tensors.get(name).ok_or_else(|| self.missing(name))?.shape();
        if got != shape {
            return Err(LmError::InvalidWeights(format!("tensor \"{name}\" in {} has shape {got:?}, expected {shape:?}", self.file_of(name))));
        }
        let a = self.raw_split(name, axis)?;
        self.cast(a)
    }

    /// `raw`, cut to this process's slice along `axis` when there is a group;
    /// only the slice is kept for `finish` to read.
    fn raw_split(&mut self, name: &str, axis: Option<i32>) -> Result<Array> {
        let (Some(axis), Some(shard)) = (axis, self.shard.as_ref()) else { return self.raw(name) };
        let whole = self.tensors.remove(name).ok_or_else(|| self.missing(name))?;
        let cut = self.cuts.remove(name).unwrap_or(Cut::Even);
        let a = shard.part(&whole, axis, &cut, name)?;
        self.taken.push(a.clone());
        Ok(a)
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

    fn file_of(&self, name: &str) -> String {
        self.origin.get(name).map(|p| p.display().to_string()).unwrap_or_default()
    }

    /// Quantization of `prefix` as MLX-LM's loader decides it: the layer's own
    /// entry in config.json's `quantization` (`true`: the top-level settings;
    /// mode "affine" where an entry names none, as `to_quantized`'s default),
    /// otherwise inferred from the packed shapes when `.scales` exists: float
    /// scales are affine, uint8 ones the floating-point mode with that group
    /// size and width (MLX-LM's `infer_quant_config`; so the top-level "mode",
    /// which MLX-community's GPT-OSS conversions set to "mxfp4" beside 8-bit
    /// affine layers, is read only through `true` entries, as in MLX-LM).
    pub(crate) fn quant_params(&self, prefix: &str, in_dims: i32) -> Result<Option<nn::QuantParams>> {
        let scales_name = format!("{prefix}.scales");
        let Some(scales) = self.tensors.get(&scales_name) else {
            return Ok(None);
        };
        let weight = self.tensors.get(&format!("{prefix}.weight")).ok_or_else(|| self.missing(&format!("{prefix}.weight")))?;
        if self.tensors.contains_key(&format!("{prefix}.global_scale")) {
            return Err(LmError::UnsupportedModel(format!("{prefix}: per-tensor global scales (nvfp4 \"global_scale\") are not supported")));
        }
        let config = self.quantization.as_ref();
        let entry = match config.and_then(|q| q.get(prefix)) {
            Some(Value::Bool(true)) => config,
            // MLX-LM leaves the layer in float (its packed tensors then do not fit).
            Some(Value::Bool(false)) => return Ok(None),
            Some(v @ Value::Object(_)) => Some(v),
            _ => None,
        };
        let (group_size, bits, mode) = match entry {
            Some(v) => {
                if v.get("global_scale").and_then(Value::as_bool) == Some(true) {
                    return Err(LmError::UnsupportedModel(format!(
                        "{prefix}: per-tensor global scales (nvfp4 \"global_scale\" in config.json) are not supported"
                    )));
                }
                let mode = match v.get("mode") {
                    None | Some(Value::Null) => Mode::Affine,
                    Some(Value::String(m)) => Mode::from_name(m).ok_or_else(|| {
                        let known: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
                        LmError::UnsupportedModel(format!(
                            "{prefix}: quantization mode \"{m}\" in config.json is not supported; supported: {}",
                            known.join(", ")
                        ))
                    })?,
                    Some(other) => {
                        return Err(LmError::InvalidWeights(format!("config.json: quantization mode of {prefix} must be a string, got {other}")))
                    }
                };
                // `to_quantized`'s defaults where the entry leaves them out.
                let (g0, b0) = mode.fixed_format().unwrap_or((64, 4));
                let int = |key: &str, default: i32| -> Result<i32> {
                    match v.get(key) {
                        None | Some(Value::Null) => Ok(default),
                        Some(n) => n.as_i64().filter(|&n| n > 0 && n <= 1 << 16).map(|n| n as i32).ok_or_else(|| {
                            LmError::InvalidWeights(format!("config.json: quantization {key} of {prefix} must be a positive integer, got {n}"))
                        }),
                    }
                };
                (int("group_size", g0)?, int("bits", b0)?, mode)
            }
            None => {
                let n_groups = scales.dim(-1);
                let packed = weight.dim(-1);
                if n_groups <= 0 || in_dims % n_groups != 0 {
                    return Err(LmError::InvalidWeights(format!(
                        "{scales_name} has {n_groups} groups, which does not divide the input size {in_dims}"
                    )));
                }
                let (group_size, bits) = (in_dims / n_groups, packed * 32 / in_dims);
                let mode = if scales.dtype() == Dtype::Uint8 {
                    Mode::of_uint8_scales(group_size, bits).ok_or_else(|| {
                        LmError::InvalidWeights(format!(
                            "tensor \"{scales_name}\" in {} is uint8 (a floating-point quantization mode), but no mode packs {bits} bits in groups of {group_size}",
                            self.file_of(&scales_name)
                        ))
                    })?
                } else {
                    Mode::Affine
                };
                (group_size, bits, mode)
            }
        };
        if let Some((g, b)) = mode.fixed_format() {
            if (group_size, bits) != (g, b) {
                return Err(LmError::InvalidWeights(format!(
                    "config.json: {prefix} is quantized in mode {} at {bits} bits in groups of {group_size}; the mode packs {b} bits in groups of {g}",
                    mode.name()
                )));
            }
        }
        if !matches!(bits, 1..=8) || in_dims % group_size != 0 || (in_dims * bits) % 32 != 0 {
            return Err(LmError::InvalidWeights(format!("{prefix}: {in_dims} inputs do not fit groups of {group_size} at {bits} bits")));
        }
        // MLX keeps affine scales in the weights' float type and packs the others' as uint8 (and would
        // read uint8 scales as affine ones).
        let uint8 = scales.dtype() == Dtype::Uint8;
        if uint8 == mode.has_biases() || (!uint8 && !scales.dtype().is_float()) {
            return Err(LmError::InvalidWeights(format!(
                "tensor \"{scales_name}\" in {} is {}, but {prefix} is quantized in mode {}, whose scales are {}",
                self.file_of(&scales_name),
                scales.dtype().name(),
                mode.name(),
                if mode.has_biases() { "floats" } else { "uint8" }
            )));
        }
        Ok(Some(nn::QuantParams { group_size, bits, mode, precision: self.precision }))
    }

    /// The packed weight, scales and biases (affine mode only) of `prefix`,
    /// `lead` (the experts of a stacked layer, or nothing) by `out_dims` by
    /// `in_dims` unpacked; only this process's slice along `axis` in a
    /// tensor-parallel group.
    pub(crate) fn take_packed(
        &mut self,
        prefix: &str,
        lead: &[i32],
        out_dims: i32,
        in_dims: i32,
        q: &nn::QuantParams,
        axis: Option<i32>,
    ) -> Result<(Array, Array, Option<Array>)> {
        let shape_of = |last: i32| -> Vec<i32> { lead.iter().copied().chain([out_dims, last]).collect() };
        let (groups, packed) = (shape_of(in_dims / q.group_size), shape_of(in_dims * q.bits / 32));
        let name = format!("{prefix}.weight");
        let w = self.tensors.get(&name).ok_or_else(|| self.missing(&name))?;
        let shape = w.shape();
        if shape != packed || w.dtype() != Dtype::Uint32 {
            return Err(LmError::InvalidWeights(format!(
                "tensor \"{name}\" in {} is {} {shape:?}, expected uint32 {packed:?} ({}-bit packed {out_dims}x{in_dims})",
                self.file_of(&name),
                w.dtype().name(),
                q.bits
            )));
        }
        let w = self.raw_split(&name, axis)?;
        let scales = self.take_split(&format!("{prefix}.scales"), &groups, axis)?;
        let biases = match q.mode.has_biases() {
            true => Some(self.take_split(&format!("{prefix}.biases"), &groups, axis)?),
            false => None,
        };
        Ok((w, scales, biases))
    }

    /// `take_packed` of a 2-D layer, packed as this device runs it best (`quant::for_device`).
    fn take_packed_for_device(
        &mut self,
        prefix: &str,
        out_dims: i32,
        in_dims: i32,
        q: nn::QuantParams,
        axis: Option<i32>,
    ) -> Result<(Array, Array, Option<Array>, nn::QuantParams)> {
        let (w, scales, biases) = self.take_packed(prefix, &[], out_dims, in_dims, &q, axis)?;
        let (w, bits) = mlx::quant::for_device(w, q.bits, q.mode)?;
        Ok((w, scales, biases, nn::QuantParams { bits, ..q }))
    }

    pub fn linear(&mut self, prefix: &str, in_dims: i32, out_dims: i32, bias: bool) -> Result<nn::Linear> {
        self.linear_parts(prefix, in_dims, out_dims, bias, None)
    }

    /// The layers `prefixes` (q/k/v, or gate/up), each `in_dims` wide in and
    /// `out_dims` out, as ONE layer whose outputs are theirs side by side, or
    /// `None`, nothing taken, where that is not known to keep their bits or
    /// their split. Fused only when all are affine-quantized alike (one matmul
    /// node instead of several, and in fast precision `x` quantized once), on
    /// the CPU, where each output column is computed on its own
    /// (`nn::Linear::concat_outputs`); never in a tensor-parallel group, which
    /// splits each by heads; not with `MLX_NODE_FUSE_PROJECTIONS=0` (for
    /// measuring). Only the concatenation is kept for `finish` to read, so
    /// the parts are not held beside it.
    pub fn linear_fused(&mut self, prefixes: &[String], in_dims: i32, out_dims: &[i32], bias: bool) -> Result<Option<nn::Linear>> {
        if prefixes.len() < 2 || prefixes.len() != out_dims.len() || self.shard.is_some() || !fusion_on() || !mlx::cpu::kernel::cpu_default() {
            return Ok(None);
        }
        let mut first = None;
        for p in prefixes {
            match self.quant_params(p, in_dims)? {
                Some(q) if q.mode == Mode::Affine && first.is_none_or(|f| f == q) => first = Some(q),
                _ => return Ok(None),
            }
        }
        // Scales, biases and bias each of one dtype (they are cast alike), so they concatenate as they are.
        let dtypes = |p: &String| ["scales", "biases", "bias"].map(|t| self.tensors.get(&format!("{p}.{t}")).map(Array::dtype));
        if prefixes.iter().any(|p| dtypes(p) != dtypes(&prefixes[0])) {
            return Ok(None);
        }
        let before = self.taken.len();
        let mut parts = Vec::with_capacity(prefixes.len());
        for (p, &out) in prefixes.iter().zip(out_dims) {
            parts.push(self.linear_in_mlx_layout(p, in_dims, out, bias, None)?);
        }
        // Checked above: the parts are quantized alike, so they concatenate.
        let unfused = |why: String| LmError::InvalidWeights(format!("the layers {} could not be held as one: {why}", prefixes.join(", ")));
        let fused = nn::Linear::concat_outputs(&parts).map_err(|e| unfused(e.message))?.ok_or_else(|| unfused("unlike".into()))?;
        self.keep_only(before, &fused);
        self.repacked(fused, before).map(Some)
    }

    /// `linear` of a layer that tensor parallelism splits (`split`): in a group,
    /// this process's slice of it, as MLX's `shard_linear` cuts it (`Inputs`:
    /// the partial outputs summed over the group, then the whole bias added).
    pub fn linear_split(&mut self, prefix: &str, in_dims: i32, out_dims: i32, bias: bool, split: Split) -> Result<nn::Linear> {
        let Some(group) = self.shard.as_ref().map(|s| s.group.clone()) else { return self.linear(prefix, in_dims, out_dims, bias) };
        match split {
            Split::Outputs => self.linear_parts(prefix, in_dims, out_dims, bias, Some(0)),
            Split::Inputs => {
                let b = self.take_optional(&format!("{prefix}.bias"), &[out_dims], bias)?;
                let part = self.linear_parts(prefix, in_dims, out_dims, false, Some(-1))?;
                Ok(nn::Linear::ShardedToAll { part: Box::new(part), bias: b, group })
            }
        }
    }

    /// `linear` of a layer whose `Split::Inputs` slice is summed over the group
    /// by its caller, with other layers' outputs (MLX's `shard_inplace`: a block
    /// that sums once); in a group, this process's slice of the weight alone.
    pub fn linear_unsummed(&mut self, prefix: &str, in_dims: i32, out_dims: i32, split: Split) -> Result<nn::Linear> {
        let axis = match split {
            Split::Outputs => 0,
            Split::Inputs => -1,
        };
        self.linear_parts(prefix, in_dims, out_dims, false, self.shard.as_ref().map(|_| axis))
    }

    /// `linear` of an LM head that tensor parallelism splits by vocabulary (MLX-LM's
    /// Qwen3.5 `shard()`): in a group, this process's rows, every process's logits
    /// gathered along the last axis.
    pub fn linear_gathered(&mut self, prefix: &str, in_dims: i32, out_dims: i32) -> Result<nn::Linear> {
        let Some(group) = self.shard.as_ref().map(|s| s.group.clone()) else { return self.linear(prefix, in_dims, out_dims, false) };
        let part = self.linear_parts(prefix, in_dims, out_dims, false, Some(0))?;
        Ok(nn::Linear::Gathered { part: Box::new(part), group })
    }

    /// From now on, in a tensor-parallel group, the tensors of layer `prefix`
    /// (`prefix` itself, or its weight, scales, biases and bias) are cut as
    /// `cut` says (see `Shard::part`).
    pub fn cut_layer(&mut self, prefix: &str, cut: Cut) {
        for suffix in ["", ".weight", ".scales", ".biases", ".bias"] {
            self.cuts.insert(format!("{prefix}{suffix}"), cut.clone());
        }
    }

    /// The weight (and bias) of `prefix`, its slice along `axis` in a group,
    /// repacked for its precision's kernel where that applies (`repacked`).
    fn linear_parts(&mut self, prefix: &str, in_dims: i32, out_dims: i32, bias: bool, axis: Option<i32>) -> Result<nn::Linear> {
        let before = self.taken.len();
        let linear = self.linear_in_mlx_layout(prefix, in_dims, out_dims, bias, axis)?;
        self.repacked(linear, before)
    }

    /// `linear` (whose arrays were taken since `taken[before]`) with a quantized weight
    /// laid out once, now, for its precision's kernel (`cpu::qmm_int8` fast, `cpu::qmm`'s
    /// arithmetic exact) where that applies (`nn::Linear::repacked`); then only the new
    /// layout is kept for `finish` to read, so that MLX's is not held beside it (a 4-bit
    /// layer stays 4 bits a weight). A tied embedding table has its own (`tied_embedding`).
    fn repacked(&mut self, linear: nn::Linear, before: usize) -> Result<nn::Linear> {
        if !repack_on() {
            return Ok(linear);
        }
        let linear = linear.repacked()?;
        if let nn::Linear::Repacked { .. } = &linear {
            self.keep_only(before, &linear);
        }
        Ok(linear)
    }

    /// Of what was taken since `taken[before]`, only `linear`'s arrays are kept for `finish`.
    fn keep_only(&mut self, before: usize, linear: &nn::Linear) {
        self.taken.truncate(before);
        self.taken.extend(linear.arrays().into_iter().cloned());
    }

    /// `linear_parts` in MLX's layout.
    fn linear_in_mlx_layout(&mut self, prefix: &str, in_dims: i32, out_dims: i32, bias: bool, axis: Option<i32>) -> Result<nn::Linear> {
        let b = match bias {
            true => Some(self.take_split(&format!("{prefix}.bias"), &[out_dims], axis.filter(|&a| a == 0))?),
            false => None,
        };
        match self.quant_params(prefix, in_dims)? {
            None => Ok(nn::Linear::Dense { weight: self.take_split(&format!("{prefix}.weight"), &[out_dims, in_dims], axis)?, bias: b }),
            Some(q) => {
                let (weight, scales, biases, q) = self.take_packed_for_device(prefix, out_dims, in_dims, q, axis)?;
                Ok(nn::Linear::Quantized { weight, scales, biases, bias: b, q })
            }
        }
    }

    /// `embedding` of a table that is also the LM head: held only in the repacked layout
    /// where its precision's kernel applies (`nn::Embedding::repacked`: the head then runs
    /// as a repacked layer, lookups read the same table), so that MLX's layout is not kept
    /// for `finish` to read beside it; not with `MLX_NODE_REPACK=0`.
    pub fn tied_embedding(&mut self, prefix: &str, vocab: i32, dims: i32) -> Result<nn::Embedding> {
        let before = self.taken.len();
        let table = self.embedding(prefix, vocab, dims)?;
        if !repack_on() {
            return Ok(table);
        }
        let table = table.repacked()?;
        if let nn::Embedding::Repacked { .. } = &table {
            self.taken.truncate(before);
            self.taken.extend(table.arrays().into_iter().cloned());
        }
        Ok(table)
    }

    pub fn embedding(&mut self, prefix: &str, vocab: i32, dims: i32) -> Result<nn::Embedding> {
        match self.quant_params(prefix, dims)? {
            None => Ok(nn::Embedding::Dense { weight: self.take(&format!("{prefix}.weight"), &[vocab, dims])? }),
            Some(q) => {
                let (weight, scales, biases, q) = self.take_packed_for_device(prefix, vocab, dims, q, None)?;
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

    /// The names of the tensors not taken yet, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.tensors.keys().cloned().collect();
        names.sort();
        names
    }

    /// Replaces tensor `name` by the tensors `f` makes of it (a family's sanitize
    /// rewriting a checkpoint's layout), each from the same file; an MLX failure
    /// is INVALID_WEIGHTS naming the tensor.
    pub fn rewrite(&mut self, name: &str, f: impl FnOnce(&Array) -> mlx::Result<Vec<(String, Array)>>) -> Result<()> {
        let a = self.tensors.remove(name).ok_or_else(|| self.missing(name))?;
        let file = self.origin.remove(name);
        let parts = f(&a).map_err(|e| {
            let shown = file.as_ref().map(|p| format!(" in {}", p.display())).unwrap_or_default();
            LmError::InvalidWeights(format!("tensor \"{name}\"{shown} ({} {:?}): {}", a.dtype().name(), a.shape(), e.message))
        })?;
        for (n, part) in parts {
            if let Some(f) = &file {
                self.origin.insert(n.clone(), f.clone());
            }
            self.tensors.insert(n, part);
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

#[cfg(test)]
mod tests {
    use super::*;
    use mlx::quant::quantize;
    use mlx::random;
    use serde_json::json;

    fn normal(shape: &[i32], seed: u64) -> Array {
        random::normal(shape, Dtype::Float32, 0.0, 0.1, Some(&random::key(seed).unwrap())).unwrap()
    }

    /// `name`'s weight `[out, in]` packed in `mode` (`.weight`, `.scales`, and `.biases` in affine mode).
    fn packed(tensors: &mut HashMap<String, Array>, name: &str, out: i32, inp: i32, group_size: i32, bits: i32, mode: Mode) {
        let (q, s, b) = quantize(&normal(&[out, inp], 3), group_size, bits, mode).unwrap();
        tensors.insert(format!("{name}.weight"), q);
        tensors.insert(format!("{name}.scales"), s);
        if let Some(b) = b {
            tensors.insert(format!("{name}.biases"), b);
        }
    }

    fn weights(tensors: HashMap<String, Array>, quantization: Option<Value>) -> Weights {
        Weights::from_tensors(tensors, Path::new("model.safetensors"), None, quantization)
    }

    fn params(w: &Weights, name: &str) -> Result<Option<(i32, i32, Mode)>> {
        w.quant_params(name, 64).map(|q| q.map(|q| (q.group_size, q.bits, q.mode)))
    }

    /// As MLX-LM's loader: a layer's own entry first (mode "affine" where it names none), otherwise
    /// the scales' dtype and the shapes decide; the top-level mode counts only through `true`.
    #[test]
    fn modes_as_mlx_lm_reads_them() {
        let mut t = HashMap::new();
        packed(&mut t, "experts", 16, 64, 32, 4, Mode::Mxfp4);
        packed(&mut t, "fp8", 16, 64, 32, 8, Mode::Mxfp8);
        packed(&mut t, "nv", 16, 64, 16, 4, Mode::Nvfp4);
        packed(&mut t, "router", 8, 64, 64, 8, Mode::Affine);
        packed(&mut t, "listed", 8, 64, 32, 4, Mode::Mxfp4);
        packed(&mut t, "inherits", 8, 64, 32, 4, Mode::Mxfp4);
        t.insert("dense.weight".into(), normal(&[8, 64], 4));
        let config = json!({
            "group_size": 32, "bits": 4, "mode": "mxfp4",
            "router": {"group_size": 64, "bits": 8},
            "listed": {"group_size": 32, "bits": 4, "mode": "mxfp4"},
            "inherits": true,
        });
        let w = weights(t, Some(config));
        assert_eq!(params(&w, "experts").unwrap(), Some((32, 4, Mode::Mxfp4)));
        assert_eq!(params(&w, "fp8").unwrap(), Some((32, 8, Mode::Mxfp8)));
        assert_eq!(params(&w, "nv").unwrap(), Some((16, 4, Mode::Nvfp4)));
        assert_eq!(params(&w, "router").unwrap(), Some((64, 8, Mode::Affine)));
        assert_eq!(params(&w, "listed").unwrap(), Some((32, 4, Mode::Mxfp4)));
        assert_eq!(params(&w, "inherits").unwrap(), Some((32, 4, Mode::Mxfp4)));
        assert_eq!(params(&w, "dense").unwrap(), None);
    }

    /// An MXFP4 linear layer has no biases, runs as MLX's op in mxfp4 mode, and a stray `.biases`
    /// beside it is left over (MLX-LM loads strictly).
    #[test]
    fn mxfp4_linear_loads_without_biases() {
        let mut t = HashMap::new();
        packed(&mut t, "proj", 16, 64, 32, 4, Mode::Mxfp4);
        let (wq, s) = (t["proj.weight"].clone(), t["proj.scales"].clone());
        let mut w = weights(t, None);
        let lin = w.linear("proj", 64, 16, false).unwrap();
        assert!(matches!(&lin, nn::Linear::Quantized { biases: None, q, .. } if q.mode == Mode::Mxfp4 && (q.group_size, q.bits) == (32, 4)));
        w.finish().unwrap();
        let x = normal(&[3, 64], 5);
        let want = mlx::quant::quantized_matmul_mlx(&x, &wq, &s, None, true, 32, 4, Mode::Mxfp4).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(lin.forward(&x).unwrap().to_vec::<f32>().unwrap(), want);

        let mut t = HashMap::new();
        packed(&mut t, "proj", 16, 64, 32, 4, Mode::Mxfp4);
        t.insert("proj.biases".into(), Array::zeros(&[16, 2], Dtype::Float32).unwrap());
        let mut w = weights(t, None);
        w.linear("proj", 64, 16, false).unwrap();
        let err = w.finish().unwrap_err();
        assert!(matches!(&err, LmError::InvalidWeights(m) if m.contains("proj.biases")), "{err:?}");
    }

    /// Layers held as one leave only their concatenation for `finish` to read, so the
    /// parts are never held beside it (peak memory at load stays one group's worth): in
    /// MLX's layout (float16 scales, which the exact kernel leaves to MLX's op), and
    /// repacked (float32 scales: the repacked arrays alone).
    #[test]
    fn fused_layers_keep_only_the_concatenation() {
        for half in [true, false] {
            let mut t = HashMap::new();
            packed(&mut t, "q", 16, 64, 32, 4, Mode::Affine);
            packed(&mut t, "k", 8, 64, 32, 4, Mode::Affine);
            if half {
                for name in ["q.scales", "q.biases", "k.scales", "k.biases"] {
                    let a = t[name].astype(Dtype::Float16).unwrap();
                    t.insert(name.into(), a);
                }
            }
            t.insert("q.bias".into(), normal(&[16], 6));
            t.insert("k.bias".into(), normal(&[8], 7));
            let mut w = weights(t, None);
            let fused = w.linear_fused(&["q".into(), "k".into()], 64, &[16, 8], true).unwrap();
            if half {
                assert!(matches!(&fused, Some(nn::Linear::Quantized { q, .. }) if (q.bits, q.group_size) == (4, 32)));
                // Packed weights, scales, biases and the bias: 24 rows each.
                assert_eq!(w.taken.iter().map(|a| a.dim(0)).collect::<Vec<_>>(), [24, 24, 24, 24]);
            } else {
                assert!(matches!(&fused, Some(nn::Linear::Repacked { .. })));
                // The repacked weights (three tiles of 8 columns, 8 words per tile and 64 inputs),
                // their scales (per tile, two groups of 16 float32 values), and the bias.
                assert_eq!(w.taken.iter().map(|a| a.size()).collect::<Vec<_>>(), [3 * 8 * 8, 3 * 2 * 16, 24]);
            }
            w.finish().unwrap();
        }
    }

    #[test]
    fn malformed_quantization_is_refused() {
        let mut t = HashMap::new();
        packed(&mut t, "affine_as_fp4", 8, 64, 32, 4, Mode::Affine);
        packed(&mut t, "fp4_as_affine", 8, 64, 32, 4, Mode::Mxfp4);
        packed(&mut t, "unknown", 8, 64, 32, 4, Mode::Mxfp4);
        packed(&mut t, "wrong_group", 8, 64, 32, 4, Mode::Mxfp4);
        packed(&mut t, "global", 8, 64, 32, 4, Mode::Mxfp4);
        packed(&mut t, "scaled", 8, 64, 16, 4, Mode::Nvfp4);
        t.insert("scaled.global_scale".into(), Array::ones(&[], Dtype::Float32).unwrap());
        // uint8 scales, 4 bits in groups of 64: no floating-point mode packs that.
        packed(&mut t, "uint8_affine", 8, 64, 64, 4, Mode::Affine);
        let s = t["uint8_affine.scales"].astype(Dtype::Uint8).unwrap();
        t.insert("uint8_affine.scales".into(), s);
        let config = json!({
            "group_size": 64, "bits": 4,
            "affine_as_fp4": {"group_size": 32, "bits": 4, "mode": "mxfp4"},
            "fp4_as_affine": {"group_size": 32, "bits": 4},
            "unknown": {"group_size": 32, "bits": 4, "mode": "fp4e3"},
            "wrong_group": {"group_size": 64, "bits": 4, "mode": "mxfp4"},
            "global": {"group_size": 32, "bits": 4, "mode": "mxfp4", "global_scale": true},
        });
        let w = weights(t, Some(config));
        let err = |name: &str| params(&w, name).unwrap_err();
        assert!(
            matches!(err("affine_as_fp4"), LmError::InvalidWeights(m) if m.contains("\"affine_as_fp4.scales\"") && m.contains("float32") && m.contains("mxfp4"))
        );
        assert!(
            matches!(err("fp4_as_affine"), LmError::InvalidWeights(m) if m.contains("\"fp4_as_affine.scales\"") && m.contains("uint8") && m.contains("affine"))
        );
        assert!(matches!(err("unknown"), LmError::UnsupportedModel(m) if m.contains("\"fp4e3\"") && m.contains("mxfp4")));
        assert!(matches!(err("wrong_group"), LmError::InvalidWeights(m) if m.contains("wrong_group") && m.contains("groups of 32")));
        assert!(matches!(err("global"), LmError::UnsupportedModel(m) if m.contains("global_scale")));
        assert!(matches!(err("scaled"), LmError::UnsupportedModel(m) if m.contains("global_scale")));
        assert!(matches!(err("uint8_affine"), LmError::InvalidWeights(m) if m.contains("uint8_affine.scales") && m.contains("groups of 64")));
    }

    /// A tied table loads only in the repacked layout, in either precision (all `finish` reads:
    /// the packed weight and the scales' copy, not MLX's three arrays), and gives the lookups
    /// and head bits of the table as `embedding` loads it in that precision.
    #[test]
    fn a_tied_table_loads_repacked_in_either_precision() {
        let mut t = HashMap::new();
        packed(&mut t, "embed", 40, 64, 32, 4, Mode::Affine);
        let config = Some(json!({"group_size": 32, "bits": 4}));
        let (ids, x) = (Array::from_slice(&[0i32, 39, 7], &[1, 3]).unwrap(), normal(&[1, 2, 64], 5));
        for precision in [Precision::Fast, Precision::Exact] {
            let plain = weights(t.clone(), config.clone()).with_precision(precision).embedding("embed", 40, 64).unwrap();
            let mut w = weights(t.clone(), config.clone()).with_precision(precision);
            let table = w.tied_embedding("embed", 40, 64).unwrap();
            assert!(matches!(table, nn::Embedding::Repacked { .. }), "{precision:?}");
            assert_eq!(w.taken.len(), 2, "{precision:?}: arrays kept for finish");
            w.finish().unwrap();
            let bits = |a: Array| a.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(table.forward(&ids).unwrap()), bits(plain.forward(&ids).unwrap()), "{precision:?}: lookups");
            assert_eq!(bits(table.as_linear(&x).unwrap()), bits(plain.as_linear(&x).unwrap()), "{precision:?}: head");
        }
    }
}
