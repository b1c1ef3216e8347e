//! One file from the hub into `blobs/`, the way huggingface_hub's `http_get` does it, plus
//! a check of every byte before the blob lands.
//!
//! hf-hub's sync `download_with_progress` cannot be used for this step: it renames its
//! `.part` file into `blobs/` before a caller could check the bytes (no size or hash check of
//! its own), it can only be stopped between files (no abort mid-file), and its `.part` name is
//! not huggingface_hub's `.incomplete`, so neither tool would resume the other's partial file.
//! So the transfer is here, on ureq, the HTTP client hf-hub itself uses:
//!
//! - HEAD `resolve/<commit>/<path>` (following only relative redirects, as both clients do)
//!   gives the etag (`X-Linked-Etag`, else `ETag`) that names the blob and the size
//!   (`X-Linked-Size`, else `Content-Length`).
//! - GET appends to `blobs/<etag>.incomplete`, with `Range: bytes=N-` when N bytes are there
//!   from an earlier try; a cut connection is resumed the same way up to `RETRIES` times.
//! - The bytes are hashed as they arrive: sha256 for LFS files (the API's `lfs.sha256`,
//!   which is also the etag), the git blob sha1 for the others (the API's `blobId`).
//! - Only a file of the right size and hash is renamed to `blobs/<etag>`; a wrong one is
//!   deleted. An abort or a failure leaves the `.incomplete` file for the next try.
use std::fs;
use std::io::{Read, Seek, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::error::{HubError, Kind, Result};
use crate::OnProgress;

/// Resumes of a cut transfer within one call; then DOWNLOAD_FAILED, the partial file kept.
const RETRIES: u32 = 3;
/// huggingface_hub's `HF_HUB_DOWNLOAD_TIMEOUT` and `HF_HUB_ETAG_TIMEOUT` defaults.
const TIMEOUT: Duration = Duration::from_secs(10);
const CHUNK: usize = 1 << 16;
/// Progress reports at most this often (plus the first and the last of each file).
const REPORT_EVERY: Duration = Duration::from_millis(100);

/// What a file's bytes must hash to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    Sha256(String),
    /// git's blob id: sha1 of `blob <size>\0` and the bytes.
    GitSha1(String),
    None,
}

/// A file as the HEAD request describes it.
#[derive(Debug, Clone)]
pub struct Remote {
    pub etag: String,
    pub size: Option<u64>,
    /// `X-Linked-Etag` was given: the file is in LFS and the etag is its sha256.
    pub lfs: bool,
}

/// The HTTP side: two ureq agents (HEAD without redirects, GET following them with the
/// token kept only on the same host) and the headers of every request.
pub struct Http {
    head: ureq::Agent,
    get: ureq::Agent,
    auth: Option<String>,
    user_agent: String,
    pub endpoint: String,
    token_set: bool,
}

impl Http {
    pub fn new(endpoint: &str, token: Option<&str>) -> Http {
        let base = || ureq::AgentBuilder::new().try_proxy_from_env(true).timeout_connect(TIMEOUT).timeout_read(TIMEOUT);
        Http {
            head: base().redirects(0).build(),
            get: base().redirects(10).redirect_auth_headers(ureq::RedirectAuthHeaders::SameHost).build(),
            auth: token.map(|t| format!("Bearer {t}")),
            user_agent: format!("mlx-node/{}; hf-hub/0.4", env!("CARGO_PKG_VERSION")),
            endpoint: endpoint.to_string(),
            token_set: token.is_some(),
        }
    }

    fn request(&self, agent: &ureq::Agent, method: &str, url: &str) -> ureq::Request {
        // identity: sizes and ranges are of the file's own bytes (ureq would ask for gzip).
        let r = agent.request(method, url).set("User-Agent", &self.user_agent).set("Accept-Encoding", "identity");
        match &self.auth {
            Some(a) => r.set("Authorization", a),
            None => r,
        }
    }

    /// The error for an HTTP status, naming `what` (repo, revision, file).
    pub fn status_error(&self, status: u16, error_code: Option<&str>, what: &str) -> HubError {
        let hint = if self.token_set {
            "the token in use (HF_TOKEN, else the token file) may not read it"
        } else {
            "set HF_TOKEN to a token that can read it"
        };
        match (status, error_code) {
            (404, _) => HubError::not_found(format!(
                "{what}: not found on {} (HTTP 404{})",
                self.endpoint,
                error_code.map(|c| format!(", {c}")).unwrap_or_default()
            )),
            // The hub answers 401 RepoNotFound for a repo that does not exist or is private.
            (401 | 403, Some("RepoNotFound")) => {
                HubError::not_found(format!("{what}: not found on {} (HTTP {status}); if it is private, {hint}", self.endpoint))
            }
            (401 | 403, _) => HubError::new(
                Kind::AuthRequired,
                format!(
                    "{what}: {} needs authentication (HTTP {status}{}): {hint}",
                    self.endpoint,
                    error_code.map(|c| format!(", {c}")).unwrap_or_default()
                ),
            ),
            (429 | 500..=599, _) => HubError::retryable(format!("{what}: {} answered HTTP {status}", self.endpoint)),
            _ => HubError::failed(format!("{what}: {} answered HTTP {status}", self.endpoint)),
        }
    }

    fn ureq_error(&self, e: ureq::Error, what: &str) -> HubError {
        match e {
            ureq::Error::Status(status, resp) => self.status_error(status, resp.header("X-Error-Code"), what),
            ureq::Error::Transport(t) => HubError::retryable(format!("{what}: could not reach {}: {t}", self.endpoint)),
        }
    }

    /// GET of a JSON document from the hub (`request` comes from hf-hub with its headers).
    pub fn json<T: serde::de::DeserializeOwned>(&self, request: ureq::Request, what: &str) -> Result<T> {
        let resp = request.timeout(TIMEOUT * 3).set("User-Agent", &self.user_agent).call().map_err(|e| self.ureq_error(e, what))?;
        serde_json::from_reader(resp.into_reader().take(256 << 20))
            .map_err(|e| HubError::failed(format!("{what}: {} sent a reply that is not the hub's JSON: {e}", self.endpoint)))
    }

    /// HEAD of a file URL; relative redirects (renamed repos) are followed, others are not
    /// (their headers already carry the LFS etag and size).
    pub fn head(&self, url: &str, what: &str) -> Result<Remote> {
        let mut url = url.to_string();
        for _ in 0..10 {
            let resp = self.request(&self.head, "HEAD", &url).call().map_err(|e| self.ureq_error(e, what))?;
            if (300..400).contains(&resp.status()) {
                if let Some(loc) = resp.header("Location").filter(|l| l.starts_with('/')) {
                    let origin_end = url.find("://").map(|i| i + 3).and_then(|s| url[s..].find('/').map(|j| s + j)).unwrap_or(url.len());
                    url = format!("{}{loc}", &url[..origin_end]);
                    continue;
                }
            }
            let linked = resp.header("X-Linked-Etag");
            let etag = linked.or_else(|| resp.header("ETag")).map(|e| e.trim().trim_start_matches("W/").trim_matches('"').to_string());
            let etag = etag.filter(|e| !e.is_empty()).ok_or_else(|| HubError::failed(format!("{what}: {} sent no ETag", self.endpoint)))?;
            if etag.starts_with('.') || !etag.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
                return Err(HubError::failed(format!("{what}: {} sent an ETag that cannot name a file: {etag:?}", self.endpoint)));
            }
            let size = resp.header("X-Linked-Size").or_else(|| resp.header("Content-Length")).and_then(|s| s.trim().parse().ok());
            return Ok(Remote { etag, size, lfs: linked.is_some() });
        }
        Err(HubError::failed(format!("{what}: too many redirects from {}", self.endpoint)))
    }

    /// Downloads `url` into `incomplete` (resuming what is there), checks it, and renames it
    /// to `blob`. `file` names it in progress reports.
    #[allow(clippy::too_many_arguments)]
    pub fn fetch(
        &self,
        url: &str,
        incomplete: &Path,
        blob: &Path,
        size: u64,
        expected: &Expected,
        what: &str,
        file: &str,
        report: OnProgress,
        abort: &dyn Fn() -> bool,
    ) -> Result<()> {
        let result = self.transfer(url, incomplete, size, expected, what, file, report, abort);
        match result {
            Ok(()) => {}
            // Keep what arrived for a resume; drop bytes known to be wrong.
            Err(Failure::Keep(e)) => return Err(e),
            Err(Failure::Discard(e)) => {
                let _ = fs::remove_file(incomplete);
                return Err(e);
            }
        }
        fs::rename(incomplete, blob).map_err(|e| HubError::failed(format!("{what}: could not move the download to {}: {e}", blob.display())))?;
        report(file, size, size);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn transfer(
        &self,
        url: &str,
        incomplete: &Path,
        size: u64,
        expected: &Expected,
        what: &str,
        file: &str,
        report: OnProgress,
        abort: &dyn Fn() -> bool,
    ) -> std::result::Result<(), Failure> {
        let io = |e: std::io::Error| Failure::Keep(HubError::failed(format!("{what}: could not write {}: {e}", incomplete.display())));
        let mut out = fs::OpenOptions::new().create(true).append(true).read(true).open(incomplete).map_err(io)?;
        let mut have = out.metadata().map_err(io)?.len();
        if have > size {
            out.set_len(0).map_err(io)?;
            have = 0;
        }
        let mut hash = Hasher::new(expected, size);
        if have > 0 {
            hash.update_from(&mut out, have).map_err(io)?;
        }
        let mut last_report = Instant::now();
        report(file, have, size);
        let mut retries = 0;
        let mut buf = vec![0u8; CHUNK];
        while have < size {
            let error = match self.get_from(url, have, what) {
                Err(e) => e,
                Ok((resp, restart)) => {
                    if restart {
                        out.set_len(0).map_err(io)?;
                        have = 0;
                        hash = Hasher::new(expected, size);
                    }
                    let mut body = resp.into_reader();
                    let broke = loop {
                        if abort() {
                            return Err(Failure::Keep(HubError::aborted()));
                        }
                        if have == size {
                            break None;
                        }
                        // One byte more than is left, to notice a server that sends too much.
                        let want = CHUNK.min((size - have) as usize + 1);
                        let n = match body.read(&mut buf[..want]) {
                            Ok(0) => break Some(HubError::retryable(format!("{what}: the connection closed after {have} of {size} bytes"))),
                            Ok(n) => n,
                            Err(e) => break Some(HubError::retryable(format!("{what}: the connection broke after {have} of {size} bytes: {e}"))),
                        };
                        if have + n as u64 > size {
                            return Err(Failure::Discard(HubError::failed(format!(
                                "{what}: the server sent more than the {size} bytes the hub reported"
                            ))));
                        }
                        out.write_all(&buf[..n]).map_err(io)?;
                        hash.update(&buf[..n]);
                        have += n as u64;
                        if last_report.elapsed() >= REPORT_EVERY && have < size {
                            report(file, have, size);
                            last_report = Instant::now();
                        }
                    };
                    match broke {
                        None => break,
                        Some(e) => e,
                    }
                }
            };
            if abort() {
                return Err(Failure::Keep(HubError::aborted()));
            }
            if !error.retryable {
                return Err(Failure::Keep(error));
            }
            if retries == RETRIES {
                let message =
                    format!("{}; gave up after {RETRIES} resumes (the {have} bytes downloaded are kept and the next load resumes)", error.message);
                return Err(Failure::Keep(HubError::failed(message)));
            }
            // Network trouble or a server error: resume after a pause.
            retries += 1;
            let until = Instant::now() + Duration::from_millis(250 << retries);
            while Instant::now() < until {
                if abort() {
                    return Err(Failure::Keep(HubError::aborted()));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if let Some((want, got)) = hash.mismatch() {
            return Err(Failure::Discard(HubError::failed(format!(
                "{what}: the download's {} is {got}, the hub says {want}; nothing was kept",
                hash.name()
            ))));
        }
        out.sync_all().map_err(io)?;
        Ok(())
    }

    /// GET from byte `from`: the response, and whether it starts over at byte 0 (the server
    /// ignored the range). A range past the end (416) gets the whole file again.
    fn get_from(&self, url: &str, from: u64, what: &str) -> Result<(ureq::Response, bool)> {
        let mut req = self.request(&self.get, "GET", url);
        if from > 0 {
            req = req.set("Range", &format!("bytes={from}-"));
        }
        match req.call() {
            Ok(resp) => {
                let restart = from > 0 && resp.status() != 206;
                Ok((resp, restart))
            }
            Err(ureq::Error::Status(416, _)) if from > 0 => {
                let resp = self.request(&self.get, "GET", url).call().map_err(|e| self.ureq_error(e, what))?;
                Ok((resp, true))
            }
            Err(e) => Err(self.ureq_error(e, what)),
        }
    }
}

enum Failure {
    /// The partial file stays for a resume.
    Keep(HubError),
    /// The partial file holds wrong bytes.
    Discard(HubError),
}

enum Hasher {
    Sha256(Sha256, String),
    GitSha1(Sha1, String),
    None,
}

impl Hasher {
    fn new(expected: &Expected, size: u64) -> Hasher {
        match expected {
            Expected::Sha256(h) => Hasher::Sha256(Sha256::new(), h.to_ascii_lowercase()),
            Expected::GitSha1(h) => {
                let mut s = Sha1::new();
                s.update(format!("blob {size}\0").as_bytes());
                Hasher::GitSha1(s, h.to_ascii_lowercase())
            }
            Expected::None => Hasher::None,
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha256(s, _) => s.update(bytes),
            Hasher::GitSha1(s, _) => s.update(bytes),
            Hasher::None => {}
        }
    }

    /// Hashes the first `len` bytes already in `file` (a resumed download).
    fn update_from(&mut self, file: &mut fs::File, len: u64) -> std::io::Result<()> {
        if matches!(self, Hasher::None) {
            return Ok(());
        }
        file.seek(std::io::SeekFrom::Start(0))?;
        let mut reader = file.take(len);
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = reader.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            self.update(&buf[..n]);
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Hasher::Sha256(..) => "sha256",
            Hasher::GitSha1(..) => "git blob sha1",
            Hasher::None => "hash",
        }
    }

    /// (expected, got) when they differ.
    fn mismatch(&self) -> Option<(String, String)> {
        let (got, want) = match self {
            Hasher::Sha256(s, want) => (hex(&s.clone().finalize()), want),
            Hasher::GitSha1(s, want) => (hex(&s.clone().finalize()), want),
            Hasher::None => return None,
        };
        (&got != want).then(|| (want.clone(), got))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_blob_sha1() {
        // `printf 'hello\n' | git hash-object --stdin`
        let mut h = Hasher::new(&Expected::GitSha1("ce013625030ba8dba906f756967f9e9ca394464a".into()), 6);
        h.update(b"hello\n");
        assert_eq!(h.mismatch(), None);
        let mut h = Hasher::new(&Expected::Sha256("5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03".into()), 6);
        h.update(b"hello\n");
        assert_eq!(h.mismatch(), None);
        let mut h = Hasher::new(&Expected::Sha256("00".into()), 6);
        h.update(b"hello\n");
        assert_eq!(h.mismatch(), Some(("00".into(), "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03".into())));
    }
}
