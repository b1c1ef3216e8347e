//! Chatterbox Multilingual's text preparation (mlx-audio 0.6.2's `MTLTokenizer`):
//! the language check, lowercase + NFKD (or v3's case-preserving NFKD), the
//! Korean and Chinese transforms, and the `[xx]` language tag. mlx-audio applies
//! Japanese kana conversion (pykakasi), Hebrew diacritics (dicta_onnx), Russian
//! stress marks and Chinese word segmentation (pkuseg) only when those optional
//! packages are installed, and skips them otherwise; we skip them always.
use std::collections::HashMap;
use std::path::Path;

use unicode_general_category::{get_general_category, GeneralCategory};
use unicode_normalization::UnicodeNormalization;

use crate::text::is_py_whitespace;
use crate::{Result, TtsError};

/// mlx-audio's `SUPPORTED_LANGUAGES` (ISO 639-1 codes), in its order.
pub const LANGUAGES: [&str; 23] =
    ["ar", "da", "de", "el", "en", "es", "fi", "fr", "he", "hi", "it", "ja", "ko", "ms", "nl", "no", "pl", "pt", "ru", "sv", "sw", "tr", "zh"];

/// The language of a synthesis as mlx-audio's `_tokenize_text` takes it:
/// `None` is English; codes are case-insensitive. Returns the lowercase code,
/// or `INVALID_ARGUMENT`: an unknown code on a multilingual model, any other
/// than English on the English one.
pub fn check_language(language: Option<&str>, multilingual: bool) -> Result<String> {
    let code = language.unwrap_or("en").to_lowercase();
    if multilingual && !LANGUAGES.contains(&code.as_str()) {
        return Err(TtsError::InvalidArgument(format!(
            "option language \"{code}\" is not supported by this multilingual model (supported: {})",
            LANGUAGES.join(", ")
        )));
    }
    if !multilingual && code != "en" {
        return Err(TtsError::InvalidArgument(format!(
            "option language \"{code}\": this is the English Chatterbox checkpoint, which speaks English only (use a multilingual checkpoint)"
        )));
    }
    Ok(code)
}

/// `text_preprocessing` of config.json: "NFKD,fullcase" (case-insensitive)
/// is v3's; any other value means the legacy lowercase + NFKD, as in mlx-audio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preprocessing {
    Legacy,
    V3,
}

impl Preprocessing {
    pub fn from_name(name: &str) -> Preprocessing {
        if name.eq_ignore_ascii_case("NFKD,fullcase") {
            Preprocessing::V3
        } else {
            Preprocessing::Legacy
        }
    }
}

/// The multilingual text transforms of one model folder.
pub struct MtlText {
    pub preprocessing: Preprocessing,
    /// Glyph -> its Cangjie code with mlx-audio's index suffix (`Cangjie5_TC.json`).
    cangjie: HashMap<char, String>,
}

impl MtlText {
    /// Reads `Cangjie5_TC.json` from `dir` when there. Without it Chinese
    /// characters reach the tokenizer unchanged (mlx-audio downloads the file
    /// from the Hub instead, and does the same when that fails).
    pub fn load(dir: &Path, preprocessing: Preprocessing) -> Result<MtlText> {
        let path = dir.join("Cangjie5_TC.json");
        let cangjie = if path.is_file() { read_cangjie(&path)? } else { HashMap::new() };
        Ok(MtlText { preprocessing, cangjie })
    }

    /// Text after `punc_norm`, as the tokenizer reads it (spaces still spaces):
    /// mlx-audio's `MTLTokenizer.encode` up to the `[SPACE]` replacement.
    pub fn prepare(&self, text: &str, language: &str) -> String {
        let text = match self.preprocessing {
            // v3's Chinese (and Russian, skipped) transforms come before NFKD.
            Preprocessing::V3 => {
                let t = if language == "zh" { self.cangjie(text) } else { text.to_string() };
                t.nfkd().collect()
            }
            Preprocessing::Legacy => {
                let t: String = text.to_lowercase().nfkd().collect();
                match language {
                    "zh" => self.cangjie(&t),
                    "ko" => korean_jamo(&t),
                    _ => t,
                }
            }
        };
        format!("[{language}]{text}")
    }

    /// Each Chinese glyph (category Lo) with a code becomes `[cj_c]` per code
    /// character and `[cj_.]`; everything else is kept.
    fn cangjie(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        for c in text.chars() {
            match self.cangjie.get(&c) {
                Some(code) if get_general_category(c) == GeneralCategory::OtherLetter => {
                    for k in code.chars() {
                        out.push_str(&format!("[cj_{k}]"));
                    }
                    out.push_str("[cj_.]");
                }
                _ => out.push(c),
            }
        }
        out
    }
}

/// `Cangjie5_TC.json`: a list of "glyph\tcode[\t...]" strings. A glyph sharing
/// its code with earlier entries gets its position among them appended ("a1").
fn read_cangjie(path: &Path) -> Result<HashMap<char, String>> {
    let bad = |msg: String| TtsError::InvalidWeights(format!("{}: {msg}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read: {e}")))?;
    let entries: Vec<String> = serde_json::from_str(&text).map_err(|e| bad(format!("expected a JSON list of strings: {e}")))?;
    let mut code_of: HashMap<&str, &str> = HashMap::new();
    let mut words_of: HashMap<&str, Vec<&str>> = HashMap::new();
    for entry in &entries {
        let mut fields = entry.split('\t');
        let (Some(word), Some(code)) = (fields.next(), fields.next()) else {
            return Err(bad(format!("entry {entry:?} is not \"glyph<TAB>code\"")));
        };
        code_of.insert(word, code);
        words_of.entry(code).or_default().push(word);
    }
    let mut out = HashMap::new();
    for (word, code) in code_of {
        // Only single characters are looked up (text is converted glyph by glyph).
        let mut chars = word.chars();
        let (Some(c), None) = (chars.next(), chars.next()) else { continue };
        let index = words_of[code].iter().position(|w| *w == word).unwrap_or(0);
        out.insert(c, if index > 0 { format!("{code}{index}") } else { code.to_string() });
    }
    Ok(out)
}

/// Hangul syllables (U+AC00..U+D7AF, as mlx-audio tests) split into conjoining
/// jamo, then surrounding whitespace trimmed (Python's `strip`).
fn korean_jamo(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for c in text.chars() {
        if !('\u{AC00}'..='\u{D7AF}').contains(&c) {
            out.push(c);
            continue;
        }
        let base = c as u32 - 0xAC00;
        let (lead, vowel, tail) = (base / (21 * 28), base % (21 * 28) / 28, base % 28);
        out.extend(char::from_u32(0x1100 + lead));
        out.extend(char::from_u32(0x1161 + vowel));
        if tail > 0 {
            out.extend(char::from_u32(0x11A7 + tail));
        }
    }
    out.trim_matches(is_py_whitespace).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hangul_syllables_become_jamo() {
        // 한 = ᄒ + ᅡ + ᆫ; 가 has no final consonant.
        assert_eq!(korean_jamo(" \u{D55C}\u{AC00}! "), "\u{1112}\u{1161}\u{11AB}\u{1100}\u{1161}!");
    }

    #[test]
    fn language_codes_are_checked_per_model() {
        assert_eq!(check_language(None, true).unwrap(), "en");
        assert_eq!(check_language(Some("FR"), true).unwrap(), "fr");
        assert_eq!(check_language(Some("En"), false).unwrap(), "en");
        let unknown = check_language(Some("xx"), true).unwrap_err().to_string();
        assert!(unknown.contains("\"xx\"") && unknown.contains("ar, da, de"), "{unknown}");
        let english = check_language(Some("fr"), false).unwrap_err().to_string();
        assert!(english.contains("English only"), "{english}");
    }
}
