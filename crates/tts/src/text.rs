//! Text clean-up before tokenising (Chatterbox's `punc_norm`) and the split of
//! long text into sentence-sized pieces.

/// Resemble AI's `punc_norm`. mlx-audio 0.6.2 copies it, but its curly-quote
/// entries lost their curly characters (they replace `"` with `"`), so curly
/// quotes reach the tokenizer there; here they become straight quotes, as in
/// the original. Sentence enders include mlx-audio's CJK additions, which the
/// original's multilingual model uses too. `capitalize`: upper-case a lowercase
/// first character (all but the case-preserving multilingual v3 do).
pub fn punc_norm(text: &str, capitalize: bool) -> String {
    const REPLACE: [(&str, &str); 12] = [
        ("...", ", "),
        ("\u{2026}", ", "),
        (":", ","),
        (" - ", ", "),
        (";", ", "),
        ("\u{2014}", "-"),
        ("\u{2013}", "-"),
        (" ,", ","),
        ("\u{201C}", "\""),
        ("\u{201D}", "\""),
        ("\u{2018}", "'"),
        ("\u{2019}", "'"),
    ];
    const ENDERS: [char; 10] = ['.', '!', '?', '-', ',', '\u{3001}', '\u{FF0C}', '\u{3002}', '\u{FF1F}', '\u{FF01}'];
    normalize(text, capitalize, &REPLACE, &ENDERS)
}

/// Chatterbox Turbo's `punc_norm` (mlx-audio's `chatterbox_turbo.punc_norm`): fewer
/// replacements (no `...`, ` - ` or `;`) and no CJK sentence enders; curly quotes become
/// straight ones, as in [`punc_norm`].
pub fn punc_norm_turbo(text: &str) -> String {
    const REPLACE: [(&str, &str); 9] = [
        ("\u{2026}", ", "),
        (":", ","),
        ("\u{2014}", "-"),
        ("\u{2013}", "-"),
        (" ,", ","),
        ("\u{201C}", "\""),
        ("\u{201D}", "\""),
        ("\u{2018}", "'"),
        ("\u{2019}", "'"),
    ];
    normalize(text, true, &REPLACE, &['.', '!', '?', '-', ','])
}

/// The steps both `punc_norm`s share: capitalise, collapse whitespace, replace, end with a
/// sentence ender.
fn normalize(text: &str, capitalize: bool, replace: &[(&str, &str)], enders: &[char]) -> String {
    if text.is_empty() {
        return "You need to add some text for me to talk.".to_string();
    }
    let mut t = if capitalize { capitalize_first(text) } else { text.to_string() };
    t = t.split(is_py_whitespace).filter(|w| !w.is_empty()).collect::<Vec<_>>().join(" ");
    for (from, to) in replace {
        if t.contains(from) {
            t = t.replace(from, to);
        }
    }
    let t = t.trim_end_matches(' ');
    let mut out = t.to_string();
    if !t.ends_with(enders) {
        out.push('.');
    }
    out
}

/// Python's `str[0].islower()` then `upper()`: only a lowercase first character changes.
fn capitalize_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) if c.is_lowercase() => c.to_uppercase().chain(chars).collect(),
        _ => text.to_string(),
    }
}

/// What Python's argument-less `str.split()` splits on: Unicode White_Space plus
/// the ASCII information separators U+001C..U+001F.
pub(crate) fn is_py_whitespace(c: char) -> bool {
    c.is_whitespace() || ('\u{1C}'..='\u{1F}').contains(&c)
}

/// Longest piece synthesised in one go. Chatterbox degrades on long inputs, so
/// longer text is cut at sentence ends and packed into pieces up to this size.
pub const MAX_PIECE_CHARS: usize = 300;

/// Splits `text` at sentence ends (`.`, `!`, `?` and their CJK forms, followed by
/// whitespace or the end) and packs whole sentences into pieces of at most
/// `max_chars` characters; a single longer sentence is cut at the last space
/// (or hard) before the limit. Text that fits is returned as one piece.
pub fn split_pieces(text: &str, max_chars: usize) -> Vec<String> {
    let text = text.trim();
    if text.chars().count() <= max_chars {
        return if text.is_empty() { Vec::new() } else { vec![text.to_string()] };
    }
    let mut pieces = Vec::new();
    let mut current = String::new();
    for sentence in sentences(text) {
        for part in cut_long(&sentence, max_chars) {
            let joined = current.chars().count() + 1 + part.chars().count();
            if !current.is_empty() && joined > max_chars {
                pieces.push(std::mem::take(&mut current));
            }
            if !current.is_empty() {
                current.push(' ');
            }
            current.push_str(&part);
        }
    }
    if !current.is_empty() {
        pieces.push(current);
    }
    pieces
}

fn is_sentence_end(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '\u{3002}' | '\u{FF01}' | '\u{FF1F}' | '\u{2026}')
}

/// Sentences of `text`, trimmed, each keeping its closing punctuation.
pub fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        current.push(c);
        let ends = is_sentence_end(c) && chars.peek().is_none_or(|n| n.is_whitespace());
        if ends {
            let s = current.trim();
            if !s.is_empty() {
                out.push(s.to_string());
            }
            current.clear();
        }
    }
    let s = current.trim();
    if !s.is_empty() {
        out.push(s.to_string());
    }
    out
}

fn cut_long(sentence: &str, max_chars: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest: Vec<char> = sentence.chars().collect();
    while rest.len() > max_chars {
        let cut = rest[..max_chars].iter().rposition(|c| *c == ' ').filter(|&i| i > 0).unwrap_or(max_chars);
        out.push(rest[..cut].iter().collect::<String>().trim().to_string());
        rest = rest[cut..].to_vec();
        while rest.first() == Some(&' ') {
            rest.remove(0);
        }
    }
    if !rest.is_empty() {
        out.push(rest.into_iter().collect());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected strings from mlx-audio 0.6.2's chatterbox_turbo.punc_norm on the same inputs.
    #[test]
    fn turbo_punc_norm_is_mlx_audio_s() {
        assert_eq!(punc_norm_turbo("hello   world"), "Hello world.");
        assert_eq!(punc_norm_turbo("Wait: what\u{2026} yes \u{2014} no"), "Wait, what,  yes - no.");
        assert_eq!(punc_norm_turbo("a ; b - c..."), "A ; b - c...");
        assert_eq!(punc_norm_turbo(""), "You need to add some text for me to talk.");
        assert_eq!(punc_norm_turbo("done!  "), "Done!");
    }

    #[test]
    fn short_text_is_one_piece() {
        assert_eq!(split_pieces("  Hello there. How are you?  ", 300), vec!["Hello there. How are you?"]);
        assert!(split_pieces("   ", 300).is_empty());
    }

    #[test]
    fn long_text_packs_whole_sentences() {
        let s = "One two three. Four five six! Seven eight nine? Ten.";
        assert_eq!(split_pieces(s, 30), vec!["One two three. Four five six!", "Seven eight nine? Ten."]);
    }

    #[test]
    fn overlong_sentence_is_cut_at_spaces() {
        let pieces = split_pieces("aaaa bbbb cccc dddd", 10);
        assert_eq!(pieces, vec!["aaaa bbbb", "cccc dddd"]);
        assert!(pieces.iter().all(|p| p.chars().count() <= 10));
    }

    #[test]
    fn decimal_points_do_not_end_sentences() {
        assert_eq!(sentences("It costs 3.50 today. Yes."), vec!["It costs 3.50 today.", "Yes."]);
    }
}
