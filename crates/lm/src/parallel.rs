//! A model split across the processes of an MLX group, as MLX-LM splits it.
//!
//! Tensor parallelism, as MLX-LM's `shard()` methods (on MLX's `shard_linear` /
//! `shard_inplace`): each process holds an equal slice of every attention and
//! feed-forward projection. Queries, keys, values, gate and up keep their
//! rank's block of outputs (whole heads, "all-to-sharded"); the output and down
//! projections keep the matching block of inputs and sum their partial
//! products over the group ("sharded-to-all"). Embeddings, norms, routers and
//! the LM head stay whole on every process.
//!
//! Pipeline parallelism, as MLX-LM's `pipeline()` (`PipelineMixin`): each
//! process holds a run of whole layers, the last rank the first layers; the
//! hidden states go from rank to rank down to rank 0, which then shares them
//! with every rank (`DecoderStack`'s forward).
use std::sync::Arc;

use mlx::distributed::Group;
use mlx::Array;

use crate::error::{LmError, Result};

/// Which slice of a layer this process keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Its block of output rows (weight axis 0, bias too): "all-to-sharded".
    Outputs,
    /// Its block of input columns (weight axis -1; the bias stays whole and is
    /// added once, after the sum over the group): "sharded-to-all".
    Inputs,
}

/// How a tensor's axis is cut into the processes' slices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut {
    /// In N equal blocks, one per process in rank order.
    Even,
    /// Each part of the axis on its own (the parts beginning at these offsets
    /// after the first: q, k and v of one layer), this process's blocks of
    /// them concatenated, as MLX's `shard_inplace(segments=...)`.
    Segments(Vec<i32>),
    /// In heads of equal size: as `Even` when there are at least as many
    /// heads as processes, else each head repeated `size / heads` times first
    /// so that every process holds one (MLX-LM's Qwen3.5 `repeat_kv_layer_inplace`).
    Heads(i32),
}

/// How the model is split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// A slice of every layer on every process.
    Tensor,
    /// A run of whole layers on each process.
    Pipeline,
}

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Tensor => "tensor",
            Strategy::Pipeline => "pipeline",
        }
    }
}

/// This process's place in the group that splits the model, and how it is split.
#[derive(Clone)]
pub struct Shard {
    pub group: Arc<Group>,
    pub rank: i32,
    pub size: i32,
    pub strategy: Strategy,
}

impl Shard {
    pub fn new(group: Group, strategy: Strategy) -> Result<Shard> {
        let (rank, size) = (group.rank()?, group.size()?);
        Ok(Shard { group: Arc::new(group), rank, size, strategy })
    }

    /// The layers `start..end` of `n` this rank runs in a pipeline, as MLX-LM's
    /// `pipeline()` splits them: as evenly as can be, the low ranks taking the
    /// extra layers, and the last rank the first layers (rank 0 the last ones).
    pub fn pipeline_layers(&self, n: i32) -> Result<std::ops::Range<i32>> {
        if n < self.size {
            return Err(LmError::UnsupportedModel(format!("cannot split {n} layers across {} processes", self.size)));
        }
        let (base, extra) = (n / self.size, n % self.size);
        let count = |r: i32| base + i32::from(r < extra);
        let start: i32 = (self.rank + 1..self.size).map(count).sum();
        Ok(start..start + count(self.rank))
    }

    /// `n` (heads, hidden units) split evenly over the group, or an error
    /// naming `what`, as MLX's sharded layers refuse an uneven split.
    pub fn divide(&self, n: i32, what: &str) -> Result<i32> {
        if n % self.size != 0 {
            return Err(LmError::UnsupportedModel(format!("cannot split {what} ({n}) evenly across {} processes", self.size)));
        }
        Ok(n / self.size)
    }

    /// This rank's slice of `a` along `axis` (`a`'s `name` for the error), cut
    /// as `cut` says, as a contiguous copy: once read, nothing keeps the rest
    /// of the tensor alive.
    pub(crate) fn part(&self, a: &Array, axis: i32, cut: &Cut, name: &str) -> Result<Array> {
        let segments = match cut {
            Cut::Even => &[][..],
            Cut::Segments(s) => &s[..],
            Cut::Heads(heads) if *heads < self.size => {
                self.divide_repeated(*heads, &format!("the heads of tensor \"{name}\""))?;
                // Each head repeated `size / heads` times, then one block per process.
                let (rows, head) = (a.dim(axis) / heads, self.rank / (self.size / heads));
                return Ok(a.slice_axis(axis, head * rows, (head + 1) * rows)?.contiguous()?);
            }
            Cut::Heads(_) => &[][..],
        };
        let bounds: Vec<i32> = std::iter::once(0).chain(segments.iter().copied()).chain(std::iter::once(a.dim(axis))).collect();
        let mut slices = Vec::with_capacity(bounds.len() - 1);
        for pair in bounds.windows(2) {
            let rows = if segments.is_empty() { String::new() } else { format!("rows {}..{} of ", pair[0], pair[1]) };
            let what = format!("{rows}axis {axis} of tensor \"{name}\"");
            let n = self.divide(pair[1] - pair[0], &what)?;
            slices.push(a.slice_axis(axis, pair[0] + n * self.rank, pair[0] + n * (self.rank + 1))?);
        }
        let part = match slices.len() {
            1 => slices.remove(0),
            _ => Array::concatenate(&slices.iter().collect::<Vec<_>>(), axis)?,
        };
        Ok(part.contiguous()?)
    }

    /// This process's share of `n` heads where fewer heads than processes are
    /// repeated first (MLX-LM's Qwen3.5 key/value heads): `n / size`, or one
    /// head shared by `size / n` processes when `size` is a multiple of `n`.
    pub fn divide_repeated(&self, n: i32, what: &str) -> Result<i32> {
        match n < self.size {
            true if self.size % n == 0 => Ok(1),
            true => Err(LmError::UnsupportedModel(format!("cannot repeat {what} ({n}) evenly across {} processes", self.size))),
            false => self.divide(n, what),
        }
    }

    /// A pipeline stage's input (MLX-LM's `PipelineMixin` models): the hidden
    /// states from the next rank; the last rank starts from `h`, the embeddings.
    pub(crate) fn stage_input(&self, h: Array) -> mlx::Result<Array> {
        match self.rank < self.size - 1 {
            true => self.group.recv_like(&h, self.rank + 1),
            false => Ok(h),
        }
    }

    /// A pipeline stage's output `h` `[B, L, hidden]`: sent on to the previous
    /// rank (but from rank 0), the send kept in the graph of `last`, the cache
    /// of this rank's last layer (a prefill chunk evaluates only the caches; as
    /// MLX-LM's `mx.depends`); then rank 0's states, gathered by every rank.
    pub(crate) fn stage_output(&self, h: Array, last: &mut dyn crate::cache::Cache) -> mlx::Result<Array> {
        let b = h.dim(0);
        let mut h = h;
        if self.rank != 0 {
            h = self.group.send(&h, (self.rank - 1 + self.size) % self.size)?;
            last.depend_on(&h)?;
        }
        if self.size > 1 {
            h = self.group.all_gather(&h)?.slice_axis(0, 0, b)?;
        }
        Ok(h)
    }
}

/// `n` split over `shard` (unchanged without one).
pub fn divide(shard: Option<&Shard>, n: i32, what: &str) -> Result<i32> {
    match shard {
        Some(s) => s.divide(n, what),
        None => Ok(n),
    }
}

/// Joins the group MLX's `backend` ("ring", "mpi", "any") describes from the
/// environment `mlx.launch` sets, strictly (a backend that cannot start is an
/// error, not a group of one). MLX's ring waits without end for a peer that
/// never connects, so the wait is bounded here by `timeout`: past it, the
/// error names the peers it waited for, and the connecting thread is left to
/// finish or fail on its own.
pub fn join(backend: &str, strategy: Strategy, timeout: std::time::Duration) -> Result<Shard> {
    let (tx, rx) = std::sync::mpsc::channel();
    let name = backend.to_string();
    std::thread::Builder::new()
        .name("mlx-node-join".into())
        .spawn(move || {
            let _ = tx.send(mlx::distributed::init(&name, true));
        })
        .map_err(|e| LmError::Distributed(format!("cannot start a thread to join the group: {e}")))?;
    match rx.recv_timeout(timeout) {
        Ok(Ok(group)) => Shard::new(group, strategy),
        Ok(Err(e)) => Err(LmError::Distributed(format!("the {backend} backend could not start: {}{}", e.message, environment_hint(backend)))),
        Err(_) => Err(LmError::Distributed(format!(
            "the other processes of the {backend} group did not connect within {} s{}",
            timeout.as_secs_f64(),
            environment_hint(backend)
        ))),
    }
}

/// What MLX read to find the peers, for the errors of `join`.
fn environment_hint(backend: &str) -> String {
    let var = |k: &str| std::env::var(k).map(|v| format!("{k}={v}")).unwrap_or_else(|_| format!("{k} unset"));
    match backend {
        "ring" | "any" => format!(" ({}, {})", var("MLX_RANK"), var("MLX_HOSTFILE")),
        _ => String::new(),
    }
}

impl Shard {
    /// Whether every process of the group got `ok` from `what`; this one's own
    /// failure is its caller's to report, a peer's is a `Distributed` error.
    pub fn check_all(&self, ok: bool, what: &str) -> Result<()> {
        let flags = self.gather(&[ok as u32], what)?;
        match flags.iter().position(|&f| f == 0) {
            Some(rank) if ok => Err(LmError::Distributed(format!("process {rank} of the group failed {what}"))),
            _ => Ok(()),
        }
    }

    /// Rank 0's `bytes` on every process (the others pass `None`): its length,
    /// then its bytes four to a word, each summed over the group with zeros from
    /// the others (an integer sum: exact). Blocks until rank 0 sends. One small
    /// collective when there is nothing to say (an empty message).
    pub fn broadcast(&self, bytes: Option<&[u8]>) -> Result<Vec<u8>> {
        let fail = |e: mlx::Error| LmError::Distributed(format!("following rank 0: {}", e.message));
        let bytes = if self.rank == 0 { bytes.unwrap_or_default() } else { &[] };
        let len = i32::try_from(bytes.len()).map_err(|_| LmError::Distributed("a message to the other processes is too long".into()))?;
        let header = Array::from_slice(&[len], &[1]).map_err(fail)?;
        let len = self.group.all_sum(&header).and_then(|a| a.to_vec::<i32>()).map_err(fail)?[0];
        if len <= 0 {
            return Ok(Vec::new());
        }
        let words = (len as usize).div_ceil(4);
        let mut mine = vec![0i32; words];
        for (w, chunk) in mine.iter_mut().zip(bytes.chunks(4)) {
            let mut b = [0u8; 4];
            b[..chunk.len()].copy_from_slice(chunk);
            *w = i32::from_le_bytes(b);
        }
        let summed = self.group.all_sum(&Array::from_slice(&mine, &[words as i32]).map_err(fail)?).and_then(|a| a.to_vec::<i32>()).map_err(fail)?;
        let mut out: Vec<u8> = summed.iter().flat_map(|w| w.to_le_bytes()).collect();
        out.truncate(len as usize);
        Ok(out)
    }

    /// Every process's `words`, in rank order.
    fn gather(&self, words: &[u32], what: &str) -> Result<Vec<u32>> {
        let fail = |e: mlx::Error| LmError::Distributed(format!("{what}: {}", e.message));
        let mine = Array::from_slice(words, &[1, words.len() as i32]).map_err(fail)?;
        self.group.all_gather(&mine).and_then(|a| a.to_vec::<u32>()).map_err(fail)
    }

    /// Checks that every process holds the same `fingerprint` (of the model it
    /// loads): processes that split different models would exchange partial
    /// results that do not belong together.
    pub fn check_same(&self, fingerprint: u64, what: &str) -> Result<()> {
        let words = [(fingerprint >> 32) as u32, fingerprint as u32];
        let all = self.gather(&words, &format!("comparing the {what}s"))?;
        for (rank, pair) in all.chunks(2).enumerate() {
            if pair != words {
                return Err(LmError::Distributed(format!(
                    "process {rank} of the group loaded a different {what} than process {} (config.json or weight files differ)",
                    self.rank
                )));
            }
        }
        Ok(())
    }
}

/// FNV-1a over `path`'s config.json and the names and sizes of its weight files
/// (or a single file's name and size): cheap, and the same on every machine.
pub fn fingerprint(path: &std::path::Path) -> Result<u64> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    let io = |e: std::io::Error| LmError::ModelNotFound(format!("{}: {e}", path.display()));
    if path.is_dir() {
        eat(&std::fs::read(path.join("config.json")).map_err(io)?);
        let mut files: Vec<(String, u64)> = Vec::new();
        for e in std::fs::read_dir(path).map_err(io)? {
            let e = e.map_err(io)?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".safetensors") {
                files.push((name, e.metadata().map_err(io)?.len()));
            }
        }
        files.sort();
        for (name, len) in files {
            eat(name.as_bytes());
            eat(&len.to_le_bytes());
        }
    } else {
        eat(path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default().as_bytes());
        eat(&std::fs::metadata(path).map_err(io)?.len().to_le_bytes());
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rank` of `size` (the group itself is one process's: `part` reads only the rank and size).
    fn rank_of(rank: i32, size: i32) -> Shard {
        let group = mlx::distributed::init("ring", false).expect("a group of one");
        Shard { group: Arc::new(group), rank, size, strategy: Strategy::Tensor }
    }

    #[test]
    fn a_part_in_segments_takes_this_ranks_slice_of_each() {
        let a = Array::arange(0.0, 12.0, 1.0, mlx::Dtype::Int32).unwrap().reshape(&[6, 2]).unwrap();
        let shard = rank_of(1, 2);
        let rows = |cut: Cut| shard.part(&a, 0, &cut, "t").unwrap().to_vec::<i32>().unwrap();
        assert_eq!(rows(Cut::Even), [6, 7, 8, 9, 10, 11]);
        // q, k, v of two rows each: the second row of each.
        assert_eq!(rows(Cut::Segments(vec![2, 4])), [2, 3, 6, 7, 10, 11]);
        let Err(e) = shard.part(&a, 0, &Cut::Segments(vec![1, 4]), "t") else { panic!("an odd segment was split") };
        assert!(e.message().contains("cannot split rows 0..1 of axis 0 of tensor \"t\" (1) evenly across 2 processes"), "{}", e.message());
    }

    /// MLX-LM's Qwen3.5 repeats key/value heads that are fewer than the processes.
    #[test]
    fn fewer_heads_than_processes_are_shared() {
        // Three heads of two rows.
        let a = Array::arange(0.0, 6.0, 1.0, mlx::Dtype::Int32).unwrap().reshape(&[6, 1]).unwrap();
        let rows = |rank: i32, size: i32, heads: i32| rank_of(rank, size).part(&a, 0, &Cut::Heads(heads), "k").map(|p| p.to_vec::<i32>().unwrap());
        // Two heads over four processes: ranks 0, 1 hold the first, ranks 2, 3 the second.
        assert_eq!(rows(1, 4, 2).unwrap(), [0, 1, 2]);
        assert_eq!(rows(2, 4, 2).unwrap(), [3, 4, 5]);
        // As many heads as processes, or more: an even split.
        assert_eq!(rows(1, 2, 2).unwrap(), [3, 4, 5]);
        assert_eq!(rows(1, 3, 3).unwrap(), [2, 3]);
        assert_eq!(rank_of(0, 4).divide_repeated(2, "kv").unwrap(), 1);
        assert_eq!(rank_of(0, 2).divide_repeated(4, "kv").unwrap(), 2);
        let Err(e) = rows(0, 4, 3) else { panic!("3 heads were repeated over 4 processes") };
        assert!(e.message().contains("cannot repeat the heads of tensor \"k\" (3) evenly across 4 processes"), "{}", e.message());
    }
}
