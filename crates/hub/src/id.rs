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

/// The GGUF file to load from a repo's `files`, as the repo paths to download: the file, or
/// every part of a file split in parts (`NAME-00001-of-00003.gguf` and on, first part first;
/// the loader reads the first and finds the others beside it). The file is the one whose name
/// (a split file's less its part numbers) holds `quant` (case-insensitive; where several do,
/// the one whose name the tag ends, so `Q4_K` is not `Q4_K_M`), or with no tag llama.cpp's
/// default `Q4_K_M`, else the only one. Vision projectors (`mmproj`) are never it.
pub fn choose_gguf<'a>(id: &HubId, files: &[&'a str], place: &str) -> Result<Vec<&'a str>> {
    let base = |f: &str| f.rsplit('/').next().unwrap_or(f).to_ascii_uppercase();
    let ggufs: Vec<&str> = files.iter().copied().filter(|f| base(f).ends_with(".GGUF") && !base(f).contains("MMPROJ")).collect();
    let list = || {
        let mut names: Vec<&str> = ggufs.iter().map(|f| f.rsplit('/').next().unwrap_or(f)).collect();
        names.sort();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    };
    // Each file under its whole name: a split file's parts under one.
    let mut wholes: Vec<(String, Vec<&str>)> = Vec::new();
    for &f in &ggufs {
        let whole = split_part(f).map_or_else(|| f.to_string(), |(stem, _, _)| format!("{stem}.gguf"));
        match wholes.iter_mut().find(|(w, _)| *w == whole) {
            Some((_, parts)) => parts.push(f),
            None => wholes.push((whole, vec![f])),
        }
    }
    let tag = id.quant.as_deref().unwrap_or("Q4_K_M").to_ascii_uppercase();
    let mut holding: Vec<&(String, Vec<&str>)> = wholes.iter().filter(|(w, _)| base(w).contains(&tag)).collect();
    holding.sort();
    let ending: Vec<_> = holding.iter().copied().filter(|(w, _)| base(w).ends_with(&format!("{tag}.GGUF"))).collect();
    let (whole, parts) = match (holding.as_slice(), ending.as_slice()) {
        ([one], _) | (_, [one]) => *one,
        ([], _) if id.quant.is_none() && wholes.len() == 1 => &wholes[0],
        ([], _) if id.quant.is_none() => {
            return Err(HubError::invalid(format!("{id}: there are several GGUF files; name one as {}:QUANT (files: {})", id.repo, list())))
        }
        ([], _) => return Err(HubError::not_found(format!("{id}: no GGUF file {place} has \"{tag}\" in its name (GGUF files: {})", list()))),
        _ => return Err(HubError::invalid(format!("{id}: several GGUF files have \"{tag}\" in their names; name one exactly (files: {})", list()))),
    };
    let mut parts = parts.clone();
    parts.sort_by_key(|f| split_part(f).map(|(_, n, _)| n));
    // A split file's parts: 1 to its count, each once, all with the same count.
    if let Some((_, _, count)) = split_part(parts[0]) {
        let whole_set = parts.iter().enumerate().all(|(i, f)| split_part(f).is_some_and(|(_, n, c)| n == i as u64 + 1 && c == count));
        if !whole_set || parts.len() as u64 != count {
            return Err(HubError::not_found(format!(
                "{id}: {whole} is split in {count} parts, but {place} there are {} of them ({})",
                parts.len(),
                parts.iter().map(|f| f.rsplit('/').next().unwrap_or(f)).collect::<Vec<_>>().join(", ")
            )));
        }
    }
    Ok(parts)
}

/// `STEM-00001-of-00003.gguf` (any case): one part of a file llama-gguf-split wrote, as
/// (the path less `-00001-of-00003.gguf`, its number, the count).
fn split_part(path: &str) -> Option<(&str, u64, u64)> {
    let number = |s: &str| s.bytes().all(|b| b.is_ascii_digit()).then(|| s.parse::<u64>().ok()).flatten();
    let stem = path.get(..path.len().checked_sub(5)?).filter(|_| path[path.len() - 5..].eq_ignore_ascii_case(".gguf"))?;
    let (head, count) = stem.rsplit_once("-of-").or_else(|| stem.rsplit_once("-OF-"))?;
    let (stem, n) = head.rsplit_once('-')?;
    let (n, count) = (number(n)?, number(count)?);
    (n >= 1 && n <= count && !stem.is_empty()).then_some((stem, n, count))
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
        assert_eq!(pick("o/m:Q8_0").unwrap(), ["m-Q8_0.gguf"]);
        assert_eq!(pick("o/m:q4_k_m").unwrap(), ["m-Q4_K_M.gguf"]);
        assert_eq!(pick("o/m:IQ4_XS").unwrap(), ["m-IQ4_XS.gguf"]);
        assert_eq!(pick("o/m:m-Q4_K_S.gguf").unwrap(), ["m-Q4_K_S.gguf"]);
        assert_eq!(pick("o/m").unwrap(), ["m-Q4_K_M.gguf"]);
        assert_eq!(choose_gguf(&id("o/m"), &["only-Q8_0.gguf"], "").unwrap(), ["only-Q8_0.gguf"]);
        // A tag inside another (K in Q4_K_M) gives way to a name the tag ends.
        assert_eq!(choose_gguf(&id("o/m:K"), &["a-K.gguf", "a-Q4_K_M.gguf"], "").unwrap(), ["a-K.gguf"]);
        let e = pick("o/m:Q4_K").unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(e.message().contains("several GGUF files have \"Q4_K\""), "{}", e.message());
        let e = pick("o/m:Q2_K").unwrap_err();
        assert_eq!(e.code(), "MODEL_NOT_FOUND");
        let all = "m-IQ4_XS.gguf, m-Q4_K_M.gguf, m-Q4_K_S.gguf, m-Q6_K-00001-of-00002.gguf, m-Q6_K-00002-of-00002.gguf, m-Q8_0.gguf";
        assert!(e.message().contains("no GGUF file in the repo has \"Q2_K\"") && e.message().contains(all), "{}", e.message());
        assert_eq!(choose_gguf(&id("o/m"), &["a-Q8_0.gguf", "a-F16.gguf"], "").unwrap_err().code(), "INVALID_ARGUMENT");
        // A split file: every part, first first, whatever order the repo lists them in.
        assert_eq!(pick("o/m:Q6_K").unwrap(), ["big/m-Q6_K-00001-of-00002.gguf", "big/m-Q6_K-00002-of-00002.gguf"]);
        let parts = ["Q8_0/x-Q8_0-00003-of-00003.gguf", "Q8_0/x-Q8_0-00001-of-00003.gguf", "Q8_0/x-Q8_0-00002-of-00003.gguf", "x-Q4_K_M.gguf"];
        assert_eq!(choose_gguf(&id("o/x:Q8_0"), &parts, "").unwrap(), [parts[1], parts[2], parts[0]]);
        assert_eq!(choose_gguf(&id("o/x"), &parts, "").unwrap(), ["x-Q4_K_M.gguf"]);
        assert_eq!(choose_gguf(&id("o/x"), &parts[..3], "").unwrap().len(), 3, "the only file, split");
        // Parts missing, or of two counts: not a whole file.
        for broken in
            [&["m-Q8_0-00001-of-00003.gguf", "m-Q8_0-00003-of-00003.gguf"][..], &["m-Q8_0-00001-of-00002.gguf", "m-Q8_0-00002-of-00003.gguf"]]
        {
            let e = choose_gguf(&id("o/m:Q8_0"), broken, "in the cache").unwrap_err();
            assert_eq!(e.code(), "MODEL_NOT_FOUND", "{broken:?}");
            assert!(e.message().contains("m-Q8_0.gguf is split in") && e.message().contains("in the cache there are 2 of them"), "{}", e.message());
        }
        assert_eq!(split_part("a/b-Q8_0-00002-of-00010.GGUF"), Some(("a/b-Q8_0", 2, 10)));
        for no in ["b-00000-of-00002.gguf", "b-00003-of-00002.gguf", "-00001-of-00002.gguf", "b-1x-of-2.gguf", "b-00001-of-00002.bin", "b.gguf"] {
            assert_eq!(split_part(no), None, "{no}");
        }
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
