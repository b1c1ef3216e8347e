//! MLX-LM 0.32.2 `_infer_thinking`: which reasoning markers a vocabulary
//! has. MLX-LM's `TokenizerWrapper.apply_chat_template` passes
//! `enable_thinking=has_thinking` when the caller does not set it, so the
//! generation layer needs this to build prompts exactly as MLX-LM does.

/// `(start, end)` marker text, checked in MLX-LM's order.
pub fn infer_thinking(has_token: impl Fn(&str) -> bool) -> Option<(&'static str, &'static str)> {
    const SINGLE_TOKEN: [(&str, &str); 3] = [("<think>", "</think>"), ("<longcat_think>", "</longcat_think>"), ("<|think:start|>", "<|think:end|>")];
    for (start, end) in SINGLE_TOKEN {
        if has_token(start) && has_token(end) {
            return Some((start, end));
        }
    }
    if has_token("<|channel>") && has_token("<channel|>") {
        return Some(("<|channel>thought", "<channel|>"));
    }
    let xtml = ["<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"];
    if xtml.iter().all(|t| has_token(t)) {
        return Some(("<|open|>think<|sep|>", "<|close|>think<|sep|>"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_follows_mlx_lm() {
        let vocab = ["<think>", "</think>", "<|channel>", "<channel|>"];
        assert_eq!(infer_thinking(|t| vocab.contains(&t)), Some(("<think>", "</think>")));
        let vocab = ["<|channel>", "<channel|>"];
        assert_eq!(infer_thinking(|t| vocab.contains(&t)), Some(("<|channel>thought", "<channel|>")));
        assert_eq!(infer_thinking(|_| false), None);
    }
}
