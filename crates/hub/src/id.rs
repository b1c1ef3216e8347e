//! `org/name[:quant][@revision]` and which of a repo's files a model kind needs.
use crate::error::{HubError, Result};

/// A model on the hub: `org/name`, at a branch, tag or commit (default `main`); with
/// `:quant` (as llama.cpp's `-hf org/name:Q4_K_M`), the one GGUF file of a GGUF repo whose
/// name holds that tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubId {
    pub repo: String,
    pub revision: String,
    pub quant: Option<String>,
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
                "'{id}' is not a Hugging Face model id: expected org/name, org/name:quant or either @revision (letters, digits, '-', '_', '.')"
            ))
        };
        let (repo, quant) = match repo.split_once(':') {
            Some((r, q)) => (r, Some(q)),
            None => (repo, None),
        };
        let (org, name) = repo.split_once('/').ok_or_else(bad)?;
        if !name_ok(org) || !name_ok(name) || !revision_ok(revision) || quant.is_some_and(|q| !name_ok(q)) {
            return Err(bad());
        }
        Ok(HubId { repo: repo.to_string(), revision: revision.to_string(), quant: quant.map(str::to_string) })
    }
}

impl std::fmt::Display for HubId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.quant {
            Some(q) => write!(f, "{}:{q}@{}", self.repo, self.revision),
            None => write!(f, "{}@{}", self.repo, self.revision),
        }
    }
}

/// The GGUF file to load from a repo's `files`: the one whose name holds `quant`
/// (case-insensitive; where several do, the one where the tag ends the name, so `Q4_K` is not
/// `Q4_K_M`), or with no tag llama.cpp's default `Q4_K_M`, else the only one. Vision
/// projectors (`mmproj`) are never it; a file split in parts is refused (the loader reads
/// one file).
pub fn choose_gguf<'a>(id: &HubId, files: &[&'a str], place: &str) -> Result<&'a str> {
    let upper = |f: &str| f.rsplit('/').next().unwrap_or(f).to_ascii_uppercase();
    let ggufs: Vec<&str> = files.iter().copied().filter(|f| upper(f).ends_with(".GGUF") && !upper(f).contains("MMPROJ")).collect();
    let list = || {
        let mut names: Vec<&str> = ggufs.iter().map(|f| f.rsplit('/').next().unwrap_or(f)).collect();
        names.sort();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    };
    let tag = id.quant.as_deref().unwrap_or("Q4_K_M").to_ascii_uppercase();
    let mut holding: Vec<&str> = ggufs.iter().copied().filter(|f| upper(f).contains(&tag)).collect();
    holding.sort();
    if let Some(part) = holding.first().filter(|_| holding.iter().all(|f| is_split_part(&upper(f)))) {
        return Err(HubError::invalid(format!(
            "{id}: {part} is one part of a split GGUF file, which mlx-node cannot load (merge the parts with llama-gguf-split --merge)"
        )));
    }
    let ending: Vec<&str> = holding.iter().copied().filter(|f| upper(f).contains(&format!("{tag}.GGUF"))).collect();
    match (holding.as_slice(), ending.as_slice()) {
        ([one], _) | (_, [one]) => Ok(one),
        ([], _) if id.quant.is_none() && ggufs.len() == 1 => Ok(ggufs[0]),
        ([], _) if id.quant.is_none() => {
            Err(HubError::invalid(format!("{id}: there are several GGUF files; name one as {}:QUANT (files: {})", id.repo, list())))
        }
        ([], _) => Err(HubError::not_found(format!("{id}: no GGUF file {place} has \"{tag}\" in its name (GGUF files: {})", list()))),
        _ => Err(HubError::invalid(format!("{id}: several GGUF files have \"{tag}\" in their names; name one exactly (files: {})", list()))),
    }
}

/// `NAME-00001-OF-00003.GGUF`: one part of a file llama-gguf-split wrote.
fn is_split_part(upper: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    upper
        .strip_suffix(".GGUF")
        .and_then(|s| s.rsplit_once("-OF-"))
        .is_some_and(|(head, total)| digits(total) && head.rsplit_once('-').is_some_and(|(_, n)| digits(n)))
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
            HubId { repo: "mlx-community/Qwen3-0.6B-4bit".into(), revision: "main".into(), quant: None }
        );
        assert_eq!(
            HubId::parse("org/x-GGUF:Q4_K_M@v1").unwrap(),
            HubId { repo: "org/x-GGUF".into(), revision: "v1".into(), quant: Some("Q4_K_M".into()) }
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
            "a/b:",
            "a/b:Q4 K",
            "a/b:.q",
            "a:q/b",
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
    fn gguf_choice() {
        let id = |s: &str| HubId::parse(s).unwrap();
        let files = [
            "README.md",
            "m-Q4_K_M.gguf",
            "m-Q4_K_S.gguf",
            "m-Q8_0.gguf",
            "m-IQ4_XS.gguf",
            "mmproj-m-Q8_0.gguf",
            "big/m-Q6_K-00001-of-00002.gguf",
            "big/m-Q6_K-00002-of-00002.gguf",
        ];
        let pick = |s: &str| choose_gguf(&id(s), &files, "in the repo");
        assert_eq!(pick("o/m:Q8_0").unwrap(), "m-Q8_0.gguf");
        assert_eq!(pick("o/m:q4_k_m").unwrap(), "m-Q4_K_M.gguf");
        assert_eq!(pick("o/m:IQ4_XS").unwrap(), "m-IQ4_XS.gguf");
        assert_eq!(pick("o/m:m-Q4_K_S.gguf").unwrap(), "m-Q4_K_S.gguf");
        assert_eq!(pick("o/m").unwrap(), "m-Q4_K_M.gguf");
        assert_eq!(choose_gguf(&id("o/m"), &["only-Q8_0.gguf"], "").unwrap(), "only-Q8_0.gguf");
        // A tag inside another (K in Q4_K_M) gives way to a name the tag ends.
        assert_eq!(choose_gguf(&id("o/m:K"), &["a-K.gguf", "a-Q4_K_M.gguf"], "").unwrap(), "a-K.gguf");
        let e = pick("o/m:Q4_K").unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(e.message().contains("several GGUF files have \"Q4_K\""), "{}", e.message());
        let e = pick("o/m:Q2_K").unwrap_err();
        assert_eq!(e.code(), "MODEL_NOT_FOUND");
        let all = "m-IQ4_XS.gguf, m-Q4_K_M.gguf, m-Q4_K_S.gguf, m-Q6_K-00001-of-00002.gguf, m-Q6_K-00002-of-00002.gguf, m-Q8_0.gguf";
        assert!(e.message().contains("no GGUF file in the repo has \"Q2_K\"") && e.message().contains(all), "{}", e.message());
        assert_eq!(choose_gguf(&id("o/m"), &["a-Q8_0.gguf", "a-F16.gguf"], "").unwrap_err().code(), "INVALID_ARGUMENT");
        assert!(pick("o/m:Q6_K").unwrap_err().message().contains("big/m-Q6_K-00001-of-00002.gguf is one part of a split GGUF"));
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
