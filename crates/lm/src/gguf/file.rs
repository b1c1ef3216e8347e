//! The header of a GGUF file (llama.cpp's format, versions 2 and 3): metadata
//! and the tensor table, read and checked against the file's size before MLX
//! is asked to load anything. MLX's own loader (`mlx::io::load_gguf`) then
//! reads the tensors (or, in files it cannot load, `read_tensor` here); it
//! trusts the header, so every count, length and offset is bounded here first.
use std::collections::HashMap;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::error::{LmError, Result};

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Meta {
    Uint(u64),
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Array(Vec<Meta>),
}

impl Meta {
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Meta::Uint(v) => Some(v),
            Meta::Int(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Meta::Uint(v) => Some(v as f64),
            Meta::Int(v) => Some(v as f64),
            Meta::Float(v) => Some(v),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Meta::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Meta::Bool(b) => Some(b),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[Meta]> {
        match self {
            Meta::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// ggml tensor types: (name, elements per block, bytes per block), by type id.
/// Only the first columns matter for loading; the rest name a refused type.
const TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
];

/// A ggml tensor type by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgmlType(pub u32);

impl GgmlType {
    pub const F32: GgmlType = GgmlType(0);
    pub const F16: GgmlType = GgmlType(1);
    pub const Q4_0: GgmlType = GgmlType(2);
    pub const Q4_1: GgmlType = GgmlType(3);
    pub const Q5_0: GgmlType = GgmlType(6);
    pub const Q5_1: GgmlType = GgmlType(7);
    pub const Q8_0: GgmlType = GgmlType(8);
    pub const Q2_K: GgmlType = GgmlType(10);
    pub const Q3_K: GgmlType = GgmlType(11);
    pub const Q4_K: GgmlType = GgmlType(12);
    pub const Q5_K: GgmlType = GgmlType(13);
    pub const Q6_K: GgmlType = GgmlType(14);
    pub const IQ4_NL: GgmlType = GgmlType(20);
    pub const IQ4_XS: GgmlType = GgmlType(23);
    pub const BF16: GgmlType = GgmlType(30);
    pub const MXFP4: GgmlType = GgmlType(39);

    fn entry(self) -> Option<&'static (u32, &'static str, u64, u64)> {
        TYPES.iter().find(|t| t.0 == self.0)
    }
    pub fn name(self) -> String {
        self.entry().map(|t| t.1.to_string()).unwrap_or_else(|| format!("type {}", self.0))
    }
    /// Bytes per block of a known type (0 for an unknown one).
    pub fn block_bytes(self) -> usize {
        self.entry().map_or(0, |t| t.3 as usize)
    }
    /// Values per block of a known type (0 for an unknown one).
    pub fn block_values(self) -> usize {
        self.entry().map_or(0, |t| t.2 as usize)
    }
}

#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions in MLX's order (the file stores them innermost first).
    pub shape: Vec<i64>,
    pub ggml_type: GgmlType,
    /// Which of the file's parts holds it (0 unless the file is split: `split`).
    pub part: usize,
    /// Absolute offset of the data in its part.
    pub offset: u64,
    pub nbytes: u64,
}

#[derive(Debug)]
pub struct GgufFile {
    /// The path loaded (a split file's first part).
    pub path: PathBuf,
    /// Every part's path, in order (just `path` unless the file is split).
    pub parts: Vec<PathBuf>,
    pub version: u32,
    pub metadata: HashMap<String, Meta>,
    pub tensors: Vec<TensorInfo>,
}

const MAGIC: &[u8; 4] = b"GGUF";
const MAX_DIMS: u32 = 4;
/// Nesting of metadata arrays: llama.cpp writes none deeper than one.
const MAX_NESTING: u32 = 2;

struct Reader<'a> {
    inner: BufReader<std::fs::File>,
    pos: u64,
    len: u64,
    path: &'a Path,
}

impl Reader<'_> {
    fn bad(&self, what: impl std::fmt::Display) -> LmError {
        LmError::InvalidWeights(format!("{} is not a valid GGUF file: {what}", self.path.display()))
    }

    fn bytes(&mut self, n: u64, what: &str) -> Result<Vec<u8>> {
        if n > self.len - self.pos {
            return Err(self.bad(format!("{what} runs past the end of the file (truncated?)")));
        }
        let mut buf = vec![0u8; n as usize];
        self.inner.read_exact(&mut buf).map_err(|e| self.bad(format!("could not read {what}: {e}")))?;
        self.pos += n;
        Ok(buf)
    }

    fn fixed<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let b = self.bytes(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&b);
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.fixed(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.fixed(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.u64(what)?;
        let b = self.bytes(n, what)?;
        String::from_utf8(b).map_err(|_| self.bad(format!("{what} is not UTF-8")))
    }

    /// A value of type `t`; `depth` bounds array nesting.
    fn value(&mut self, t: u32, key: &str, depth: u32) -> Result<Meta> {
        Ok(match t {
            0 => Meta::Uint(self.fixed::<1>(key)?[0] as u64),
            1 => Meta::Int(self.fixed::<1>(key)?[0] as i8 as i64),
            2 => Meta::Uint(u16::from_le_bytes(self.fixed(key)?) as u64),
            3 => Meta::Int(i16::from_le_bytes(self.fixed(key)?) as i64),
            4 => Meta::Uint(self.u32(key)? as u64),
            5 => Meta::Int(i32::from_le_bytes(self.fixed(key)?) as i64),
            6 => Meta::Float(f32::from_le_bytes(self.fixed(key)?) as f64),
            7 => Meta::Bool(self.fixed::<1>(key)?[0] != 0),
            8 => Meta::Str(self.string(key)?),
            9 => {
                if depth >= MAX_NESTING {
                    return Err(self.bad(format!("metadata \"{key}\" nests arrays too deeply")));
                }
                let et = self.u32(key)?;
                let n = self.u64(key)?;
                // Every element takes at least one byte: a count beyond the
                // bytes left is a lie, refused before allocating for it.
                if n > self.len - self.pos {
                    return Err(self.bad(format!("metadata \"{key}\" claims {n} elements, more than the file holds")));
                }
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(self.value(et, key, depth + 1)?);
                }
                Meta::Array(items)
            }
            10 => Meta::Uint(self.u64(key)?),
            11 => Meta::Int(i64::from_le_bytes(self.fixed(key)?)),
            12 => Meta::Float(f64::from_le_bytes(self.fixed(key)?)),
            other => return Err(self.bad(format!("metadata \"{key}\" has unknown value type {other}"))),
        })
    }
}

/// What one file's header holds: version, metadata and tensor table.
pub(super) type Header = (u32, HashMap<String, Meta>, Vec<TensorInfo>);

impl GgufFile {
    /// Reads and checks the header of `path` (`read_header`), and of each other part when it
    /// is the first part of a split file (`split::join`).
    pub fn open(path: &Path) -> Result<GgufFile> {
        let (version, metadata, tensors) = read_header(path, 0)?;
        let mut file = GgufFile { path: path.to_path_buf(), parts: vec![path.to_path_buf()], version, metadata, tensors };
        super::split::join(&mut file)?;
        Ok(file)
    }
}

/// Reads and checks the header of `path`, part `part` of its file: magic, version, every
/// metadata value and tensor entry, and that each tensor's data lies inside the file.
pub(super) fn read_header(path: &Path, part: usize) -> Result<Header> {
    let file = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => LmError::ModelNotFound(format!("{} does not exist", path.display())),
        _ => LmError::ModelNotFound(format!("cannot read {}: {e}", path.display())),
    })?;
    let len = file.metadata().map_err(|e| LmError::InvalidWeights(format!("cannot read {}: {e}", path.display())))?.len();
    let mut r = Reader { inner: BufReader::with_capacity(1 << 20, file), pos: 0, len, path };
    let magic: [u8; 4] = r.fixed("the magic number")?;
    if &magic != MAGIC {
        return Err(r.bad(format!("it starts with {magic:02x?}, not the GGUF magic \"GGUF\"")));
    }
    let version = r.u32("the version")?;
    if !(2..=3).contains(&version) {
        return Err(r.bad(format!("version {version} is not supported (2 and 3 are)")));
    }
    let n_tensors = r.u64("the tensor count")?;
    let n_kv = r.u64("the metadata count")?;
    // Each entry takes more than 8 bytes; larger counts cannot be true.
    if n_tensors > len / 8 || n_kv > len / 8 {
        return Err(r.bad(format!("it claims {n_tensors} tensors and {n_kv} metadata entries, more than its {len} bytes can hold")));
    }
    let mut metadata = HashMap::with_capacity(n_kv as usize);
    for _ in 0..n_kv {
        let key = r.string("a metadata key")?;
        let t = r.u32(&key)?;
        let v = r.value(t, &key, 0)?;
        metadata.insert(key, v);
    }
    let mut entries = Vec::with_capacity(n_tensors as usize);
    for _ in 0..n_tensors {
        let name = r.string("a tensor name")?;
        let n_dims = r.u32(&name)?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(r.bad(format!("tensor \"{name}\" has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(r.u64(&name)?);
        }
        let ggml_type = GgmlType(r.u32(&name)?);
        let offset = r.u64(&name)?;
        entries.push((name, dims, ggml_type, offset));
    }
    let alignment = match metadata.get("general.alignment") {
        None => 32,
        Some(v) => match v.as_u64() {
            Some(a) if a > 0 && a.is_power_of_two() && a <= 1 << 16 => a,
            _ => return Err(r.bad(format!("general.alignment {v:?} is not a power of two"))),
        },
    };
    let data_start = r.pos.div_ceil(alignment) * alignment;
    let mut tensors = Vec::with_capacity(entries.len());
    let mut seen = std::collections::HashSet::new();
    for (name, dims, ggml_type, rel) in entries {
        if !seen.insert(name.clone()) {
            return Err(r.bad(format!("tensor \"{name}\" appears twice")));
        }
        let (_, _, block, block_bytes) =
            *ggml_type.entry().ok_or_else(|| r.bad(format!("tensor \"{name}\" has unknown ggml type {}", ggml_type.0)))?;
        let mut count: u64 = 1;
        for &d in &dims {
            if d == 0 || d > i32::MAX as u64 {
                return Err(r.bad(format!("tensor \"{name}\" has a dimension of {d}")));
            }
            count = count.checked_mul(d).ok_or_else(|| r.bad(format!("tensor \"{name}\" is too large")))?;
        }
        if dims[0] % block != 0 {
            return Err(r.bad(format!(
                "tensor \"{name}\" has rows of {} values, not a multiple of its {} block of {block}",
                dims[0],
                ggml_type.name()
            )));
        }
        let nbytes = count / block * block_bytes;
        let offset = data_start.checked_add(rel).ok_or_else(|| r.bad(format!("tensor \"{name}\" has an invalid offset")))?;
        if rel % alignment != 0 {
            return Err(r.bad(format!("tensor \"{name}\" is not aligned to {alignment} bytes")));
        }
        if offset > len || nbytes > len - offset {
            return Err(r.bad(format!("the data of tensor \"{name}\" runs past the end of the file (truncated?)")));
        }
        let shape = dims.iter().rev().map(|&d| d as i64).collect();
        tensors.push(TensorInfo { name, shape, ggml_type, part, offset, nbytes });
    }
    Ok((version, metadata, tensors))
}

impl GgufFile {
    pub fn get(&self, key: &str) -> Option<&Meta> {
        self.metadata.get(key)
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The raw bytes of one tensor.
    pub fn read_tensor(&self, t: &TensorInfo) -> Result<Vec<u8>> {
        let path = &self.parts[t.part];
        let mut f = std::fs::File::open(path).map_err(|e| LmError::InvalidWeights(format!("cannot read {}: {e}", path.display())))?;
        f.seek(SeekFrom::Start(t.offset)).map_err(|e| LmError::InvalidWeights(format!("cannot read {}: {e}", path.display())))?;
        let mut buf = vec![0u8; t.nbytes as usize];
        f.read_exact(&mut buf).map_err(|e| LmError::InvalidWeights(format!("cannot read tensor \"{}\" of {}: {e}", t.name, path.display())))?;
        Ok(buf)
    }

    /// The values of a tensor the caller has checked is F32 (`rope_freqs.weight`, LongRoPE factors).
    pub fn read_f32(&self, t: &TensorInfo) -> Result<Vec<f32>> {
        Ok(self.read_tensor(t)?.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }
}

/// Whether `path` names a GGUF file (by its extension, or its magic number).
pub fn is_gguf(path: &Path) -> bool {
    if !path.is_file() {
        return false;
    }
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
        return true;
    }
    let mut magic = [0u8; 4];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == MAGIC
}
