//! Split GGUF files, as llama-gguf-split and `convert_hf_to_gguf.py --split-max-*` write
//! models too large for one file: parts named `NAME-00001-of-00003.gguf` and on, the first
//! with all the metadata, each with its own tensors, and every one with `split.no` (from 0),
//! `split.count` and `split.tensors.count`. As in llama.cpp, such a model is loaded by its
//! first part's path and the other parts are found beside it by name.
use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::file::{read_header, GgufFile, Meta};
use crate::error::{LmError, Result};

const SPLIT_NO: &str = "split.no";
const SPLIT_COUNT: &str = "split.count";
const SPLIT_TENSORS: &str = "split.tensors.count";

/// Reads the other parts' headers into `file` when it is the first part of a split file:
/// their tensors join its table (each knowing its part), `file.parts` lists every part. A
/// file with no `split.count` (or a count of 1) is whole and left as it is.
pub(super) fn join(file: &mut GgufFile) -> Result<()> {
    let bad = |what: String| LmError::InvalidWeights(format!("{} is not a valid split GGUF file: {what}", file.path.display()));
    let Some(count) = number(&file.metadata, SPLIT_COUNT).map_err(bad)? else { return Ok(()) };
    let no = number(&file.metadata, SPLIT_NO).map_err(bad)?.ok_or_else(|| bad(format!("it has {SPLIT_COUNT} but no {SPLIT_NO}")))?;
    if count == 0 || no >= count {
        return Err(bad(format!("it says it is part {} of {count}", no + 1)));
    }
    if count == 1 {
        return Ok(());
    }
    let paths = part_paths(&file.path, no, count)?;
    if no != 0 {
        return Err(LmError::InvalidArgument(format!(
            "{} is part {} of {count} of a split GGUF file: load its first part, {}",
            file.path.display(),
            no + 1,
            paths[0].display()
        )));
    }
    let mut seen: HashSet<String> = file.tensors.iter().map(|t| t.name.clone()).collect();
    for (i, path) in paths.iter().enumerate().skip(1) {
        if !path.is_file() {
            return Err(LmError::ModelNotFound(format!(
                "{}: part {} of {count} of this split GGUF file, {}, does not exist (download every part into one folder)",
                file.path.display(),
                i + 1,
                path.display()
            )));
        }
        let (_, metadata, tensors) = read_header(path, i)?;
        let (part_no, part_count) = (number(&metadata, SPLIT_NO), number(&metadata, SPLIT_COUNT));
        if part_no != Ok(Some(i as u64)) || part_count != Ok(Some(count)) {
            return Err(LmError::InvalidWeights(format!(
                "{} is not part {} of {count} of {}: its {SPLIT_NO} and {SPLIT_COUNT} are {} and {}",
                path.display(),
                i + 1,
                file.path.display(),
                shown(part_no),
                shown(part_count)
            )));
        }
        for t in tensors {
            if !seen.insert(t.name.clone()) {
                return Err(bad(format!("tensor \"{}\" is in two parts (the second is {})", t.name, path.display())));
            }
            file.tensors.push(t);
        }
    }
    if let Some(total) = number(&file.metadata, SPLIT_TENSORS).map_err(bad)? {
        if total != file.tensors.len() as u64 {
            return Err(bad(format!("{SPLIT_TENSORS} is {total}, but its {count} parts hold {} tensors", file.tensors.len())));
        }
    }
    file.parts = paths;
    Ok(())
}

/// A non-negative integer under `key`, if there is one.
fn number(metadata: &std::collections::HashMap<String, Meta>, key: &str) -> std::result::Result<Option<u64>, String> {
    match metadata.get(key) {
        None => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| format!("{key} is {v:?}, not a count")),
    }
}

fn shown(v: std::result::Result<Option<u64>, String>) -> String {
    match v {
        Ok(Some(n)) => n.to_string(),
        Ok(None) => "missing".into(),
        Err(e) => e,
    }
}

/// Every part's path of a split file, from the path of part `no` (from 0) of `count`:
/// `PREFIX-00001-of-00003.gguf` and on (llama.cpp's `llama_split_path`), beside it.
fn part_paths(path: &Path, no: u64, count: u64) -> Result<Vec<PathBuf>> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let suffix = |n: u64| format!("-{n:05}-of-{count:05}.gguf");
    let prefix = name.strip_suffix(&suffix(no + 1)).ok_or_else(|| {
        LmError::InvalidWeights(format!(
            "{} is part {} of {count} of a split GGUF file, but its name does not end in \"{}\", so its other parts cannot be found (keep the names the parts were written with)",
            path.display(),
            no + 1,
            suffix(no + 1)
        ))
    })?;
    Ok((1..=count).map(|n| path.with_file_name(format!("{prefix}{}", suffix(n)))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_names() {
        let got = part_paths(Path::new("/m/Llama-Q8_0-00002-of-00003.gguf"), 1, 3).unwrap();
        let want: Vec<PathBuf> = (1..=3).map(|n| PathBuf::from(format!("/m/Llama-Q8_0-0000{n}-of-00003.gguf"))).collect();
        assert_eq!(got, want);
        // Five digits at least, as llama.cpp prints them; a count past 99999 takes six.
        assert_eq!(part_paths(Path::new("x-100000-of-100000.gguf"), 99999, 100000).unwrap()[0], PathBuf::from("x-00001-of-100000.gguf"));
        for (name, no) in
            [("m.gguf", 0), ("m-00001-of-00003.gguf", 1), ("m-00001-of-00002.gguf", 0), ("m-1-of-3.gguf", 0), ("m-00001-of-00003.GGUF", 0)]
        {
            assert_eq!(part_paths(Path::new(name), no, 3).unwrap_err().code(), "INVALID_WEIGHTS", "{name}");
        }
    }
}
