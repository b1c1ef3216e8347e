//! `org/name[@revision]` and which of a repo's files a model kind needs.
use crate::error::{HubError, Result};

/// A model on the hub: `org/name`, at a branch, tag or commit (default `main`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubId {
    pub repo: String,
    pub revision: String,
}

/// What the files are for: the download patterns differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// A text model, as MLX-LM downloads it.
    Lm,
    /// A Chatterbox folder, as loadTTS reads it.
    Tts,
}

impl ModelKind {
    pub fn parse(s: &str) -> Result<ModelKind> {
        match s {
            "lm" => Ok(ModelKind::Lm),
            "tts" => Ok(ModelKind::Tts),
            other => Err(HubError::invalid(format!("model kind must be 'lm' or 'tts', got '{other}'"))),
        }
    }

    /// MLX-LM's `DEFAULT_ALLOW_PATTERNS` less `*.py` (no remote code runs here); for speech,
    /// what mlx-audio's Chatterbox folder holds. Matched as fnmatch does (`*` spans `/`).
    pub fn patterns(self) -> &'static [&'static str] {
        match self {
            ModelKind::Lm => &["*.json", "model*.safetensors", "tokenizer.model", "*.tiktoken", "tiktoken.model", "*.txt", "*.jsonl", "*.jinja"],
            ModelKind::Tts => &["*.json", "*.safetensors", "*.txt", "*.model"],
        }
    }

    pub fn wants(self, path: &str) -> bool {
        self.patterns().iter().any(|p| glob(p, path))
    }
}

/// fnmatch with `*` only (all the patterns above need).
fn glob(pattern: &str, s: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = s.strip_prefix(first) else { return false };
    let tail: Vec<&str> = parts.collect();
    let Some((last, middle)) = tail.split_last() else { return rest.is_empty() };
    for m in middle {
        match rest.find(m) {
            Some(i) => rest = &rest[i + m.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

fn name_ok(s: &str) -> bool {
    !s.is_empty() && !s.starts_with(['.', '-']) && !s.contains("..") && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A revision may hold `/` (`refs/pr/1`); each segment reads as a repo name does.
fn revision_ok(s: &str) -> bool {
    s.split('/').all(name_ok)
}

impl HubId {
    pub fn parse(id: &str) -> Result<HubId> {
        let (repo, revision) = match id.split_once('@') {
            Some((r, rev)) => (r, rev),
            None => (id, "main"),
        };
        let bad = || {
            HubError::invalid(format!(
                "'{id}' is not a Hugging Face model id: expected org/name or org/name@revision (letters, digits, '-', '_', '.')"
            ))
        };
        let (org, name) = repo.split_once('/').ok_or_else(bad)?;
        if !name_ok(org) || !name_ok(name) || !revision_ok(revision) {
            return Err(bad());
        }
        Ok(HubId { repo: repo.to_string(), revision: revision.to_string() })
    }
}

impl std::fmt::Display for HubId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.repo, self.revision)
    }
}

/// A 40-hex commit sha, as huggingface_hub tells a commit from a branch or tag.
pub fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// A repo file's path is relative, with no empty, `.` or `..` segment: it becomes a path
/// inside the snapshot folder.
pub fn safe_repo_path(p: &str) -> bool {
    !p.is_empty() && !p.contains(['\\', '\0']) && p.split('/').all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert_eq!(
            HubId::parse("mlx-community/Qwen3-0.6B-4bit").unwrap(),
            HubId { repo: "mlx-community/Qwen3-0.6B-4bit".into(), revision: "main".into() }
        );
        let sha = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(HubId::parse(&format!("a/b@{sha}")).unwrap().revision, sha);
        assert_eq!(HubId::parse("a/b@refs/pr/1").unwrap().revision, "refs/pr/1");
        for bad in [
            "a",
            "a/b/c",
            "/a/b",
            "./a",
            "a/.b",
            "a/b@",
            "a/b@x/../y",
            "a/b@/x",
            "a/b@.x",
            "a/b@x/",
            "a/b@x//y",
            "../a",
            "a/b c",
            "a/b@v 1",
            "",
            "a/",
            "-a/b",
            "a/b..c",
        ] {
            let e = HubId::parse(bad).unwrap_err();
            assert_eq!(e.code(), "INVALID_ARGUMENT", "{bad}");
        }
    }

    #[test]
    fn patterns() {
        let lm = ModelKind::Lm;
        for yes in [
            "config.json",
            "model.safetensors",
            "model-00001-of-00002.safetensors",
            "tokenizer.model",
            "chat_template.jinja",
            "sub/x.json",
            "vocab.txt",
        ] {
            assert!(lm.wants(yes), "{yes}");
        }
        for no in ["modeling.py", "pytorch_model.bin", "consolidated.safetensors", "README.md", "x.json.bak", "spm.model"] {
            assert!(!lm.wants(no), "{no}");
        }
        assert!(ModelKind::Tts.wants("conds.safetensors"));
        assert!(ModelKind::Tts.wants("spm.model"));
        assert_eq!(ModelKind::parse("gguf").unwrap_err().code(), "INVALID_ARGUMENT");
        assert!(glob("a*b*c", "aXbYc") && !glob("a*b*c", "aXc") && glob("*", "") && !glob("ab", "abc") && glob("a*a", "aa") && !glob("a*a", "a"));
    }

    #[test]
    fn paths() {
        assert!(safe_repo_path("a/b.json") && safe_repo_path("model.safetensors"));
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a\\b"] {
            assert!(!safe_repo_path(bad), "{bad}");
        }
        assert!(is_commit("0123456789abcdef0123456789abcdef01234567") && !is_commit("main"));
    }
}
