//! Models from the Hugging Face Hub: `org/name[@revision]` to a local snapshot folder, in
//! the cache that huggingface_hub (MLX-LM, mlx-audio) uses, so a model either of them
//! downloaded loads with no download, and the reverse.
//!
//! Online, one API request (`/api/models/<repo>/revision/<rev>?blobs=true`) gives the
//! commit and the file list with sizes and hashes; only files missing from that commit's
//! snapshot are fetched (HEAD, then GET into `blobs/`, see `download.rs`), and only once all
//! of them are there do the snapshot links and `refs/<branch>` change. Offline
//! (`HF_HUB_OFFLINE=1`), or when the hub cannot be reached, the cache alone answers.
//!
//! `cached_file` finds the one file a model takes from a repo of its own (the S3 speech
//! tokenizer's weights) in the same cache.
mod cache;
mod cached_file;
mod config;
mod download;
mod error;
mod id;

use std::path::PathBuf;

use hf_hub::api::sync::ApiBuilder;
use hf_hub::{Repo, RepoType};
use serde::Deserialize;

pub use cache::RepoCache;
pub use cached_file::{find_s3_tokenizer, CachedFile, S3_TOKENIZER};
pub use config::Config;
pub use error::{HubError, Kind, Result};
pub use id::{choose_gguf, is_commit, HubId, ModelKind};

use download::{Expected, Http, Remote};

#[derive(Deserialize)]
struct RepoInfo {
    sha: Option<String>,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Deserialize)]
struct Sibling {
    rfilename: String,
    size: Option<u64>,
    #[serde(rename = "blobId")]
    blob_id: Option<String>,
    lfs: Option<Lfs>,
}

#[derive(Deserialize)]
struct Lfs {
    sha256: Option<String>,
    size: Option<u64>,
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.chars().all(|c| c.is_ascii_hexdigit())
}

impl Sibling {
    fn size(&self) -> Option<u64> {
        self.lfs.as_ref().and_then(|l| l.size).or(self.size)
    }

    /// The hash the hub gives for the file: LFS files by sha256 (the API's, else the
    /// `X-Linked-Etag`, which is it), other files by their git blob id.
    fn expected(&self, remote: &Remote) -> Expected {
        if let Some(sha) = self.lfs.as_ref().and_then(|l| l.sha256.clone()).filter(|s| is_hex(s, 64)) {
            return Expected::Sha256(sha);
        }
        if remote.lfs && is_hex(&remote.etag, 64) {
            return Expected::Sha256(remote.etag.clone());
        }
        match &self.blob_id {
            Some(b) if self.lfs.is_none() && !remote.lfs && is_hex(b, 40) => Expected::GitSha1(b.clone()),
            _ => Expected::None,
        }
    }
}

/// Percent-encodes a repo path for a URL, as huggingface_hub's `quote(filename)`.
fn encode_path(p: &str) -> String {
    p.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Progress of one file: `(path in the repo, bytes done, bytes in all)`.
pub type OnProgress<'a> = &'a mut dyn FnMut(&str, u64, u64);

/// The local snapshot folder of `id`, downloading what is missing; for a GGUF repo (an id
/// with `:quant`, or a repo with GGUF files and no safetensors), the path of the one GGUF file
/// `choose_gguf` picks (a split file's first part), and only it (every part) is downloaded.
/// `abort` is polled between chunks; an aborted or failed download changes no snapshot or ref
/// (a partial `blobs/<etag>.incomplete` stays for the next try to resume).
pub fn resolve(id: &HubId, kind: ModelKind, config: &Config, on_progress: OnProgress, abort: &dyn Fn() -> bool) -> Result<PathBuf> {
    let cache_dir = config
        .cache_dir
        .clone()
        .ok_or_else(|| HubError::invalid("there is no Hugging Face cache folder: set HF_HOME or HF_HUB_CACHE (HOME is not set either)"))?;
    if id.quant.is_some() && kind != ModelKind::Lm {
        return Err(HubError::invalid(format!("{id}: a :quant tag names a GGUF file, which only text models load")));
    }
    let cache = RepoCache::new(&cache_dir, &id.repo);
    if config.offline {
        return cached_model(id, &cache).unwrap_or_else(|| {
            Err(HubError::not_found(format!("{id} is not in the Hugging Face cache at {}, and HF_HUB_OFFLINE is set", cache_dir.display())))
        });
    }
    let http = Http::new(&config.endpoint, config.token.as_deref());
    let api = ApiBuilder::from_cache(hf_hub::Cache::new(cache_dir.clone()))
        .with_endpoint(config.endpoint.clone())
        .with_token(config.token.clone())
        .with_progress(false)
        .build()
        .map_err(|e| HubError::failed(format!("{id}: could not set up the hub client: {e}")))?;
    let at = |rev: &str| api.repo(Repo::with_revision(id.repo.clone(), RepoType::Model, rev.to_string()));
    let info: RepoInfo = match http.json(at(&id.revision).info_request().query("blobs", "true"), &id.to_string()) {
        Ok(info) => info,
        // The hub cannot be reached: the cache stands in, as in huggingface_hub.
        Err(e) if e.retryable => return cached_model(id, &cache).unwrap_or(Err(e)),
        Err(e) => return Err(e),
    };
    let commit = info.sha.filter(|s| is_commit(s)).ok_or_else(|| HubError::failed(format!("{id}: {} sent no commit sha", config.endpoint)))?;
    let has_config = info.siblings.iter().any(|s| s.rfilename == "config.json");
    let names: Vec<&str> = info.siblings.iter().map(|s| s.rfilename.as_str()).collect();
    let gguf = if kind == ModelKind::Lm && gguf_repo(id, &names) { Some(choose_gguf(id, &names, "in the repo")?) } else { None };
    let files: Vec<&Sibling> = match &gguf {
        Some(parts) => info.siblings.iter().filter(|s| parts.contains(&s.rfilename.as_str())).collect(),
        None => info.siblings.iter().filter(|s| kind.wants(&s.rfilename)).collect(),
    };
    if let Some(bad) = files.iter().find(|f| !id::safe_repo_path(&f.rfilename)) {
        return Err(HubError::failed(format!("{id}: {} listed a file name that is not a safe relative path: {:?}", config.endpoint, bad.rfilename)));
    }
    if gguf.is_none() && !has_config {
        return Err(HubError::not_found(format!("{id} (commit {commit}) has no config.json and no GGUF file: it is not a model mlx-node can load")));
    }
    let snapshot = cache.snapshot_dir(&commit);
    let mut links = Vec::new();
    for f in files.iter().filter(|f| !snapshot.join(&f.rfilename).is_file()) {
        if abort() {
            return Err(HubError::aborted());
        }
        let what = format!("{id}, file {}", f.rfilename);
        let url = at(&commit).url(&encode_path(&f.rfilename));
        let remote = http.head(&url, &what)?;
        let size = match (remote.size, f.size()) {
            (Some(a), Some(b)) if a != b => return Err(HubError::failed(format!("{what}: the hub reports two sizes, {a} and {b} bytes"))),
            (a, b) => a.or(b).ok_or_else(|| HubError::failed(format!("{what}: {} reported no size", config.endpoint)))?,
        };
        let blob = cache.blob(&remote.etag);
        if !blob.is_file() {
            let blobs = cache.dir().join("blobs");
            std::fs::create_dir_all(&blobs).map_err(|e| HubError::failed(format!("{what}: could not create {}: {e}", blobs.display())))?;
            let _lock = cache.lock(&remote.etag, abort)?;
            // Another process may have finished it while this one waited for the lock.
            if !blob.is_file() {
                http.fetch(&url, &cache.incomplete(&remote.etag), &blob, size, &f.expected(&remote), &what, &f.rfilename, on_progress, abort)?;
            }
        } else {
            on_progress(&f.rfilename, size, size);
        }
        links.push((f.rfilename.as_str(), remote.etag));
    }
    for (path, etag) in links {
        cache.link(&commit, path, &etag)?;
    }
    cache.write_ref(&id.revision, &commit)?;
    Ok(match gguf {
        Some(parts) => snapshot.join(parts[0]),
        None => snapshot,
    })
}

/// Whether `id` names one GGUF file of a repo with files `names`: it has a `:quant`, or the
/// repo has GGUF files and no safetensors weights (some GGUF repos carry a `config.json` too).
fn gguf_repo(id: &HubId, names: &[&str]) -> bool {
    let has = |ext: &str| names.iter().any(|n| n.to_ascii_lowercase().ends_with(ext));
    id.quant.is_some() || (has(".gguf") && !has(".safetensors"))
}

/// What the cache holds for `id`, if anything: the snapshot folder of its revision (with a
/// `config.json`), or for a GGUF id (`gguf_repo`) the GGUF file `choose_gguf` picks among those
/// cached (a split file's first part, when all its parts are).
fn cached_model(id: &HubId, cache: &RepoCache) -> Option<Result<PathBuf>> {
    let snapshot = cache.snapshot_dir(&cache.cached_commit(&id.revision)?);
    let mut names = Vec::new();
    let mut pending = vec![snapshot.clone()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if let Ok(rel) = path.strip_prefix(&snapshot) {
                names.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    if gguf_repo(id, &refs) {
        Some(choose_gguf(id, &refs, "in the cache").map(|parts| snapshot.join(parts[0])))
    } else {
        cache.cached_snapshot(&id.revision).map(Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_paths() {
        assert_eq!(encode_path("sub/model-00001.safetensors"), "sub/model-00001.safetensors");
        assert_eq!(encode_path("a b#?.json"), "a%20b%23%3F.json");
    }

    #[test]
    fn offline_without_cache_is_not_found() {
        let dir = std::env::temp_dir().join(format!("hub-offline-test-{}", std::process::id()));
        let config = Config { endpoint: "http://127.0.0.1:9".into(), cache_dir: Some(dir.clone()), token: None, offline: true };
        let id = HubId::parse("org/name").unwrap();
        let e = resolve(&id, ModelKind::Lm, &config, &mut |_, _, _| {}, &|| false).unwrap_err();
        assert_eq!(e.code(), "MODEL_NOT_FOUND");
        assert!(e.message().contains("org/name@main") && e.message().contains("HF_HUB_OFFLINE"), "{}", e.message());
        // No hub at that port: the cache cannot stand in either.
        let online = Config { offline: false, ..config };
        let e = resolve(&id, ModelKind::Lm, &online, &mut |_, _, _| {}, &|| false).unwrap_err();
        assert_eq!(e.code(), "DOWNLOAD_FAILED");
        assert!(e.message().contains("could not reach"), "{}", e.message());
        assert!(!dir.exists(), "a failed resolve wrote into the cache");
    }
}
