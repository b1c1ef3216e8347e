//! MLX-LM's prompt-cache files (`save_prompt_cache` / `load_prompt_cache`):
//! one safetensors file holding every layer's `state` flattened as
//! `"{layer}.{item}"` (`"{layer}.{item}.{k}"` inside a tuple), scalars as 0-d
//! int32 arrays listed in the metadata, and in the metadata the caller's
//! entries under `0.`, each layer's class name under `1.{layer}`, and the list
//! of scalar entries under `2.` (`2.0` is an empty marker, then
//! `2.{k}.0` = the entry's name and `2.{k}.1` = `"scalar"`).
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use mlx::{Array, Dtype};

use super::{ArraysCache, Cache, KvCache, LayerCaches, QuantizedArrays, QuantizedKvCache, RotatingKvCache, StateItem};
use crate::error::{LmError, Result};

/// A file's caches and the caller's metadata.
pub struct CacheFile {
    pub caches: LayerCaches,
    pub metadata: HashMap<String, String>,
}

/// Writes `caches` with `metadata` as MLX-LM's `save_prompt_cache` does.
pub fn save_file(path: &Path, caches: &[Box<dyn Cache>], metadata: &[(String, String)]) -> Result<()> {
    let mut tensors: Vec<(String, Array)> = Vec::new();
    let mut meta: Vec<(String, String)> = metadata.iter().map(|(k, v)| (format!("0.{k}"), v.clone())).collect();
    let mut scalars = 0;
    meta.push(("2.0".into(), String::new()));
    for (l, cache) in caches.iter().enumerate() {
        meta.push((format!("1.{l}"), cache.class_name().to_string()));
        for (i, item) in cache.file_state().map_err(|e| LmError::InvalidArgument(e.message))?.into_iter().enumerate() {
            let name = format!("{l}.{i}");
            match item {
                StateItem::Array(a) => tensors.push((name, a)),
                StateItem::Group(arrays) => tensors.extend(arrays.into_iter().enumerate().map(|(k, a)| (format!("{name}.{k}"), a))),
                StateItem::Int(v) => {
                    scalars += 1;
                    meta.push((format!("2.{scalars}.0"), name.clone()));
                    meta.push((format!("2.{scalars}.1"), "scalar".into()));
                    tensors.push((name, Array::from_slice(&[v as i32], &[])?));
                }
                // As MLX-LM marks a None: an empty float32 array.
                StateItem::None => {
                    scalars += 1;
                    meta.push((format!("2.{scalars}.0"), name.clone()));
                    meta.push((format!("2.{scalars}.1"), "none".into()));
                    tensors.push((name, Array::zeros(&[0], Dtype::Float32)?));
                }
            }
        }
    }
    write_safetensors(path, &tensors, &meta)
}

/// Writes `tensors` and `metadata` as one safetensors file at `path`, whole or not at all
/// (a prompt cache here, a voice's `conds.safetensors` in `tts`).
pub fn write_safetensors(path: &Path, tensors: &[(String, Array)], metadata: &[(String, String)]) -> Result<()> {
    // The arrays hold lazy work (and a shared buffer per update): materialise
    // and make them contiguous before the writer reads their bytes.
    let contiguous = tensors.iter().map(|(n, a)| Ok((n.clone(), a.contiguous()?))).collect::<Result<Vec<_>>>()?;
    let refs: Vec<&Array> = contiguous.iter().map(|(_, a)| a).collect();
    mlx::eval(&refs)?;
    let named: Vec<(&str, &Array)> = contiguous.iter().map(|(n, a)| (n.as_str(), a)).collect();
    let meta_refs: Vec<(&str, &str)> = metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    // Written next to the target and renamed, so no half file ever has its name
    // (MLX adds ".safetensors" to a name without it: the temporary name has it).
    let tmp = path.with_file_name(format!(".{}.{}.tmp.safetensors", path.file_name().and_then(|n| n.to_str()).unwrap_or("file"), std::process::id()));
    let written = mlx::io::save_safetensors(&tmp, &named, &meta_refs)
        .map_err(|e| LmError::InvalidArgument(format!("cannot write {}: {}", path.display(), e.message)));
    let renamed =
        written.and_then(|()| std::fs::rename(&tmp, path).map_err(|e| LmError::InvalidArgument(format!("cannot write {}: {e}", path.display()))));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed
}

fn bad(path: &Path, why: impl std::fmt::Display) -> LmError {
    LmError::InvalidCacheFile(format!("{} is not a readable MLX-LM prompt-cache file: {why}", path.display()))
}

/// Reads a file written by MLX-LM's `save_prompt_cache` (or `save_file`).
/// Every array is read here, so a truncated file fails now, not mid-generation.
pub fn load_file(path: &Path) -> Result<CacheFile> {
    if !path.is_file() {
        return Err(LmError::InvalidArgument(format!("prompt-cache file {} does not exist", path.display())));
    }
    let (mut arrays, meta) = mlx::io::load_safetensors(path).map_err(|e| bad(path, e.message))?;
    let mut metadata = HashMap::new();
    let mut classes: BTreeMap<usize, String> = BTreeMap::new();
    let mut scalar_names: BTreeMap<usize, (Option<String>, Option<String>)> = BTreeMap::new();
    for (k, v) in meta {
        if let Some(key) = k.strip_prefix("0.") {
            metadata.insert(key.to_string(), v);
        } else if let Some(l) = k.strip_prefix("1.") {
            let l = l.parse::<usize>().map_err(|_| bad(path, format!("metadata key {k}")))?;
            classes.insert(l, v);
        } else if let Some(rest) = k.strip_prefix("2.") {
            if rest == "0" {
                continue;
            }
            let (n, part) = rest.split_once('.').ok_or_else(|| bad(path, format!("metadata key {k}")))?;
            let n = n.parse::<usize>().map_err(|_| bad(path, format!("metadata key {k}")))?;
            let e = scalar_names.entry(n).or_default();
            match part {
                "0" => e.0 = Some(v),
                "1" => e.1 = Some(v),
                _ => return Err(bad(path, format!("metadata key {k}"))),
            }
        }
    }
    if classes.is_empty() || classes.keys().copied().ne(0..classes.len()) {
        return Err(bad(path, "no cache classes in its metadata"));
    }
    let mut scalars: HashMap<String, i64> = HashMap::new();
    let mut nones: std::collections::HashSet<String> = std::collections::HashSet::new();
    for (_, (name, kind)) in scalar_names {
        let (Some(name), Some(kind)) = (name, kind) else { return Err(bad(path, "an incomplete scalar entry")) };
        if kind == "none" {
            arrays.remove(&name).ok_or_else(|| bad(path, format!("entry {name} is missing")))?;
            nones.insert(name);
            continue;
        }
        if kind != "scalar" {
            return Err(bad(path, format!("entry {name} is a {kind}; only numbers and None are used by the caches read here")));
        }
        let a = arrays.remove(&name).ok_or_else(|| bad(path, format!("scalar {name} is missing")))?;
        let v = a.astype(Dtype::Int32).and_then(|a| a.item::<i32>()).map_err(|e| bad(path, e.message))?;
        scalars.insert(name, v as i64);
    }
    let everything: Vec<&Array> = arrays.values().collect();
    mlx::eval(&everything).map_err(|e| bad(path, e.message))?;
    let mut caches = LayerCaches::new();
    for (l, class) in classes {
        let mut take = |i: usize| arrays.remove(&format!("{l}.{i}")).ok_or_else(|| bad(path, format!("array {l}.{i} is missing")));
        let int = |i: usize| scalars.get(&format!("{l}.{i}")).map(|&v| v as i32).ok_or_else(|| bad(path, format!("number {l}.{i} is missing")));
        let cache: Box<dyn Cache> = match class.as_str() {
            "KVCache" => {
                let (k, v, offset) = (take(0)?, take(1)?, int(2)?);
                check_len(path, &k, &v, offset)?;
                Box::new(KvCache::from_state(k, v, offset))
            }
            "RotatingKVCache" => {
                let (k, v) = (take(0)?, take(1)?);
                let (offset, keep, max_size, idx) = (int(2)?, int(3)?, int(4)?, int(5)?);
                if max_size < 1 || keep < 0 || idx < 0 || k.ndim() != 4 || v.ndim() != 4 || k.shape()[..3] != v.shape()[..3] || idx > k.dim(2) {
                    return Err(bad(path, format!("layer {l}: inconsistent rotating cache state")));
                }
                Box::new(RotatingKvCache::from_state(k, v, offset, keep, max_size, idx))
            }
            "QuantizedKVCache" => {
                let mut group = |i: usize| -> Result<QuantizedArrays> {
                    let mut part =
                        |j: usize| arrays.remove(&format!("{l}.{i}.{j}")).ok_or_else(|| bad(path, format!("array {l}.{i}.{j} is missing")));
                    Ok(QuantizedArrays { w: part(0)?, scales: part(1)?, biases: part(2)? })
                };
                let (k, v) = (group(0)?, group(1)?);
                let (offset, group_size, bits) = (int(2)?, int(3)?, int(4)?);
                check_len(path, &k.w, &v.w, offset)?;
                Box::new(QuantizedKvCache::from_state(k, v, offset, group_size, bits))
            }
            "ArraysCache" => {
                // Its list of arrays (every one set), no batch padding or lengths.
                let mut state = Vec::new();
                while let Some(a) = arrays.remove(&format!("{l}.0.{}", state.len())) {
                    state.push(a);
                }
                let unset = nones.contains(&format!("{l}.0.{}", state.len()));
                if state.is_empty() || unset || !nones.contains(&format!("{l}.1")) || !nones.contains(&format!("{l}.2")) {
                    return Err(bad(path, format!("layer {l}: only an ArraysCache whose arrays are all set, outside a batch, is read")));
                }
                if state.iter().any(|a| a.ndim() < 2 || a.dim(0) != state[0].dim(0)) {
                    let shapes: Vec<Vec<i32>> = state.iter().map(|a| a.shape()).collect();
                    return Err(bad(path, format!("layer {l}: an ArraysCache of shapes {shapes:?}")));
                }
                Box::new(ArraysCache::from_state(state, 0))
            }
            other => {
                let known = "KVCache, RotatingKVCache, QuantizedKVCache, ArraysCache";
                return Err(LmError::CacheMismatch(format!(
                    "{}: layer {l} holds a {other}, a kind of cache this model does not use ({known})",
                    path.display()
                )));
            }
        };
        caches.push(cache);
    }
    // MLX-LM's ArraysCache counts no positions: the attention layers' count is theirs.
    let held = caches.iter_mut().filter_map(|c| if c.as_arrays().is_some() { None } else { Some(c.offset()) }).max().unwrap_or(0);
    for c in caches.iter_mut() {
        if let Some(arrays) = c.as_arrays() {
            arrays.set_offset(held);
        }
    }
    Ok(CacheFile { caches, metadata })
}

/// Keys and values `[B, heads, >= offset, d]` with the same leading dims.
fn check_len(path: &Path, k: &Array, v: &Array, offset: i32) -> Result<()> {
    if k.ndim() != 4 || v.ndim() != 4 || k.shape()[..3] != v.shape()[..3] || offset < 0 || offset > k.dim(2) {
        return Err(bad(path, format!("keys {:?} and values {:?} do not hold {offset} positions", k.shape(), v.shape())));
    }
    Ok(())
}
