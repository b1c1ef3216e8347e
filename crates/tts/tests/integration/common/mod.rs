//! What the speech tests that read the fixture setup's reference dumps share.
#![allow(dead_code)] // each test module uses its own part of it
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use mlx::Array;

/// The project's `.cache`, where the fixture scripts write.
pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache")
}

/// Fails naming the setup script to run when `path` is missing (the fixtures
/// are written by `npm test`'s setup, or by hand with the scripts).
pub fn require(path: &Path) {
    assert!(
        path.exists(),
        "{} is missing: run `node scripts/fixtures-tts.js` and `node scripts/fixtures-voice.js` (npm test does) first",
        path.display()
    );
}

/// A reference dump (safetensors) by name.
pub fn load_ref(path: &Path) -> HashMap<String, Array> {
    require(path);
    mlx::io::load_safetensors(path).unwrap_or_else(|e| panic!("{}: {}", path.display(), e.message)).0
}

pub fn get<'a>(r: &'a HashMap<String, Array>, name: &str) -> &'a Array {
    r.get(name).unwrap_or_else(|| panic!("reference dump has no \"{name}\""))
}

pub fn max_abs_diff(a: &Array, b: &Array) -> f32 {
    assert_eq!(a.shape(), b.shape(), "shapes differ");
    a.subtract(b).unwrap().abs().unwrap().max(&[], false).unwrap().item::<f32>().unwrap()
}
