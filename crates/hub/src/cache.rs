//! huggingface_hub's cache layout for one model repo:
//!
//! ```text
//! <cache>/models--org--name/refs/<branch or tag>         the commit sha it pointed at
//! <cache>/models--org--name/blobs/<etag>                 each file's bytes, named by its etag
//! <cache>/models--org--name/blobs/<etag>.incomplete      a download in progress (resumed)
//! <cache>/models--org--name/snapshots/<commit>/<path>    relative symlink to ../../blobs/<etag>
//! <cache>/.locks/models--org--name/<etag>.lock           held while a blob is downloaded
//! ```
//!
//! hf-hub names the repo folder and writes refs; the rest is done here the way
//! huggingface_hub's `file_download.py` does it, so either tool reads what the other wrote.
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hf_hub::{Repo, RepoType};

use crate::error::{HubError, Result};
use crate::id::is_commit;

pub struct RepoCache {
    root: PathBuf,
    folder: String,
    dir: PathBuf,
    repo_id: String,
}

fn io_failed(what: &str, path: &Path, e: std::io::Error) -> HubError {
    HubError::failed(format!("could not {what} {}: {e}", path.display()))
}

impl RepoCache {
    pub fn new(cache_dir: &Path, repo_id: &str) -> RepoCache {
        let folder = Repo::new(repo_id.to_string(), RepoType::Model).folder_name();
        RepoCache { root: cache_dir.to_path_buf(), dir: cache_dir.join(&folder), folder, repo_id: repo_id.to_string() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn snapshot_dir(&self, commit: &str) -> PathBuf {
        self.dir.join("snapshots").join(commit)
    }

    pub fn blob(&self, etag: &str) -> PathBuf {
        self.dir.join("blobs").join(etag)
    }

    pub fn incomplete(&self, etag: &str) -> PathBuf {
        self.dir.join("blobs").join(format!("{etag}.incomplete"))
    }

    /// The commit a revision points at in the cache: the revision itself when it is a
    /// commit sha, else what `refs/<revision>` holds.
    pub fn cached_commit(&self, revision: &str) -> Option<String> {
        if is_commit(revision) {
            return Some(revision.to_string());
        }
        let commit = fs::read_to_string(self.dir.join("refs").join(revision)).ok()?.trim().to_string();
        is_commit(&commit).then_some(commit)
    }

    /// The snapshot folder of `revision` if the cache has one with a `config.json`
    /// (what every model folder needs; the loader names any other missing file).
    pub fn cached_snapshot(&self, revision: &str) -> Option<PathBuf> {
        let dir = self.snapshot_dir(&self.cached_commit(revision)?);
        dir.join("config.json").is_file().then_some(dir)
    }

    /// `path` in the snapshot of `revision`, if the cache has that file: for a repo that is
    /// not a model folder (no `config.json`), read for one file as huggingface_hub's
    /// `hf_hub_download` finds it offline.
    pub fn cached_file(&self, revision: &str, path: &str) -> Option<PathBuf> {
        let file = self.snapshot_dir(&self.cached_commit(revision)?).join(path);
        file.is_file().then_some(file)
    }

    /// Points `refs/<revision>` at `commit` (hf-hub's `create_ref`), unless it already does.
    pub fn write_ref(&self, revision: &str, commit: &str) -> Result<()> {
        if is_commit(revision) || self.cached_commit(revision).as_deref() == Some(commit) {
            return Ok(());
        }
        let repo = Repo::with_revision(self.repo_id.clone(), RepoType::Model, revision.to_string());
        hf_hub::Cache::new(self.root.clone())
            .repo(repo)
            .create_ref(commit)
            .map_err(|e| io_failed("write the ref", &self.dir.join("refs").join(revision), e))
    }

    /// Makes `snapshots/<commit>/<path>` a relative symlink to `blobs/<etag>`, replacing
    /// whatever was there in one rename.
    pub fn link(&self, commit: &str, path: &str, etag: &str) -> Result<()> {
        let pointer = self.snapshot_dir(commit).join(path);
        let parent = pointer.parent().unwrap_or(&self.dir);
        fs::create_dir_all(parent).map_err(|e| io_failed("create", parent, e))?;
        // From snapshots/<commit>/<path's folders> back up to the repo folder.
        let ups = path.split('/').count() + 1;
        let target: PathBuf = std::iter::repeat_n("..", ups).collect::<PathBuf>().join("blobs").join(etag);
        let tmp = parent.join(format!(".{}.{}.tmp", pointer.file_name().and_then(|n| n.to_str()).unwrap_or("link"), std::process::id()));
        let _ = fs::remove_file(&tmp);
        #[cfg(unix)]
        std::os::unix::fs::symlink(&target, &tmp).map_err(|e| io_failed("link", &tmp, e))?;
        #[cfg(not(unix))]
        fs::copy(self.blob(etag), &tmp).map_err(|e| io_failed("copy to", &tmp, e))?;
        fs::rename(&tmp, &pointer).map_err(|e| {
            let _ = fs::remove_file(&tmp);
            io_failed("write", &pointer, e)
        })
    }

    /// Holds huggingface_hub's lock for one blob (`.locks/<repo folder>/<etag>.lock`, an
    /// flock as Python's filelock takes it) until dropped; waits while another process holds it.
    pub fn lock(&self, etag: &str, abort: &dyn Fn() -> bool) -> Result<fs::File> {
        let dir = self.root.join(".locks").join(&self.folder);
        fs::create_dir_all(&dir).map_err(|e| io_failed("create", &dir, e))?;
        let path = dir.join(format!("{etag}.lock"));
        let file = fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(|e| io_failed("open", &path, e))?;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(file),
                Err(fs::TryLockError::WouldBlock) => {
                    if abort() {
                        return Err(HubError::aborted());
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(fs::TryLockError::Error(e)) => return Err(io_failed("lock", &path, e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_huggingface_hub() {
        let root = std::env::temp_dir().join(format!("hub-cache-test-{}", std::process::id()));
        let c = RepoCache::new(&root, "org/name");
        assert_eq!(c.dir(), root.join("models--org--name"));
        assert_eq!(c.blob("abc"), root.join("models--org--name/blobs/abc"));
        assert_eq!(c.incomplete("abc"), root.join("models--org--name/blobs/abc.incomplete"));
        let commit = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(c.cached_commit("main"), None);
        c.write_ref("main", commit).unwrap();
        assert_eq!(fs::read_to_string(root.join("models--org--name/refs/main")).unwrap(), commit);
        assert_eq!(c.cached_commit("main").as_deref(), Some(commit));
        assert_eq!(c.cached_snapshot("main"), None);
        fs::create_dir_all(root.join("models--org--name/blobs")).unwrap();
        fs::write(c.blob("e1"), "{}").unwrap();
        fs::write(c.blob("e2"), "x").unwrap();
        c.link(commit, "config.json", "e1").unwrap();
        c.link(commit, "sub/dir/x.txt", "e2").unwrap();
        let snap = c.snapshot_dir(commit);
        assert_eq!(fs::read_link(snap.join("config.json")).unwrap(), PathBuf::from("../../blobs/e1"));
        assert_eq!(fs::read_link(snap.join("sub/dir/x.txt")).unwrap(), PathBuf::from("../../../../blobs/e2"));
        assert_eq!(fs::read_to_string(snap.join("sub/dir/x.txt")).unwrap(), "x");
        c.link(commit, "config.json", "e2").unwrap();
        assert_eq!(fs::read_to_string(snap.join("config.json")).unwrap(), "x");
        assert_eq!(c.cached_snapshot("main"), Some(snap.clone()));
        assert_eq!(c.cached_snapshot(commit), Some(snap.clone()));
        // One file of the snapshot, through a link into a folder or not at all.
        assert_eq!(c.cached_file("main", "sub/dir/x.txt"), Some(snap.join("sub/dir/x.txt")));
        assert_eq!(c.cached_file("main", "sub/dir"), None);
        assert_eq!(c.cached_file("main", "model.safetensors"), None);
        assert_eq!(c.cached_file("other", "config.json"), None);
        let lock = c.lock("e1", &|| false).unwrap();
        assert!(root.join(".locks/models--org--name/e1.lock").exists());
        // A second holder waits; its abort flag gets it out.
        let err = c.lock("e1", &|| true).unwrap_err();
        assert_eq!(err.code(), "ABORTED");
        drop(lock);
        c.lock("e1", &|| true).unwrap();
        fs::remove_dir_all(&root).unwrap();
    }
}
