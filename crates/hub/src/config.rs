//! Where the hub is and where its cache lives, from the environment variables that
//! huggingface_hub reads (its `constants.py`), so both share one cache.
use std::path::PathBuf;

pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `HF_ENDPOINT`, without a trailing `/`.
    pub endpoint: String,
    /// `HF_HUB_CACHE` (or the older `HUGGINGFACE_HUB_CACHE`), else `$HF_HOME/hub`; `HF_HOME`
    /// defaults to `$XDG_CACHE_HOME/huggingface`, then `~/.cache/huggingface`. None without a home.
    pub cache_dir: Option<PathBuf>,
    /// `HF_TOKEN`, else the token file that `hf auth login` writes (`HF_TOKEN_PATH` or `$HF_HOME/token`).
    pub token: Option<String>,
    /// `HF_HUB_OFFLINE` set to 1/ON/YES/TRUE: only the cache is read.
    pub offline: bool,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Config {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// `get` returns a variable's value; empty values count as unset, as in huggingface_hub.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Config {
        let var = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let home = var("HOME").map(PathBuf::from);
        let expand = |v: String| match (v.strip_prefix("~/"), &home) {
            (Some(rest), Some(h)) => h.join(rest),
            _ => PathBuf::from(v),
        };
        let hf_home = var("HF_HOME")
            .map(expand)
            .or_else(|| var("XDG_CACHE_HOME").map(|x| expand(x).join("huggingface")))
            .or_else(|| home.as_ref().map(|h| h.join(".cache").join("huggingface")));
        let cache_dir = var("HF_HUB_CACHE").or_else(|| var("HUGGINGFACE_HUB_CACHE")).map(expand).or_else(|| hf_home.as_ref().map(|h| h.join("hub")));
        let token = var("HF_TOKEN").map(|t| t.trim().to_string()).or_else(|| match var("HF_TOKEN_PATH") {
            Some(file) => std::fs::read_to_string(expand(file)).ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty()),
            // hf-hub reads `token` beside the `hub` folder: `$HF_HOME/token`.
            None => hf_home.as_ref().and_then(|h| hf_hub::Cache::new(h.join("hub")).token()),
        });
        let offline = var("HF_HUB_OFFLINE").is_some_and(|v| matches!(v.trim().to_ascii_uppercase().as_str(), "1" | "ON" | "YES" | "TRUE"));
        let endpoint = var("HF_ENDPOINT").map(|e| e.trim().trim_end_matches('/').to_string()).unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        Config { endpoint, cache_dir, token, offline }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Config {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_vars(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_follow_huggingface_hub() {
        let c = config(&[("HOME", "/home/u")]);
        assert_eq!(c.endpoint, DEFAULT_ENDPOINT);
        assert_eq!(c.cache_dir, Some(PathBuf::from("/home/u/.cache/huggingface/hub")));
        assert!(!c.offline);
        let c = config(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/x")]);
        assert_eq!(c.cache_dir, Some(PathBuf::from("/x/huggingface/hub")));
        let c = config(&[("HOME", "/home/u"), ("HF_HOME", "~/hf"), ("XDG_CACHE_HOME", "/x")]);
        assert_eq!(c.cache_dir, Some(PathBuf::from("/home/u/hf/hub")));
        let c = config(&[("HF_HOME", "/hf"), ("HF_HUB_CACHE", "/c"), ("HUGGINGFACE_HUB_CACHE", "/old")]);
        assert_eq!(c.cache_dir, Some(PathBuf::from("/c")));
        let c = config(&[("HF_HOME", "/hf"), ("HUGGINGFACE_HUB_CACHE", "/old")]);
        assert_eq!(c.cache_dir, Some(PathBuf::from("/old")));
        assert_eq!(config(&[]).cache_dir, None);
    }

    #[test]
    fn endpoint_offline_and_token() {
        let c = config(&[("HF_ENDPOINT", "http://127.0.0.1:8/ "), ("HF_HUB_OFFLINE", "yes"), ("HF_TOKEN", " hf_x ")]);
        assert_eq!(c.endpoint, "http://127.0.0.1:8");
        assert!(c.offline);
        assert_eq!(c.token.as_deref(), Some("hf_x"));
        for off in ["0", "no", "", "false"] {
            assert!(!config(&[("HF_HUB_OFFLINE", off)]).offline, "{off}");
        }
        assert_eq!(config(&[("HF_ENDPOINT", "")]).endpoint, DEFAULT_ENDPOINT);
    }

    #[test]
    fn token_file() {
        let dir = std::env::temp_dir().join(format!("hub-token-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "hf_file\n").unwrap();
        std::fs::write(dir.join("other"), "hf_other\n").unwrap();
        let home = dir.to_str().unwrap();
        assert_eq!(config(&[("HF_HOME", home)]).token.as_deref(), Some("hf_file"));
        assert_eq!(config(&[("HF_HOME", home), ("HF_TOKEN", "hf_env")]).token.as_deref(), Some("hf_env"));
        let other = dir.join("other");
        assert_eq!(config(&[("HF_HOME", home), ("HF_TOKEN_PATH", other.to_str().unwrap())]).token.as_deref(), Some("hf_other"));
        assert_eq!(config(&[("HF_HOME", "/nonexistent-hf-home")]).token, None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
