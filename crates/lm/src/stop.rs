//! Stop strings over streamed text: text is released only once no stop string
//! can still start inside it, and a matched stop string is never emitted.
pub struct StopMatcher {
    stops: Vec<String>,
    pending: String,
}

pub enum Feed {
    /// Text safe to emit now.
    Emit(String),
    /// A stop string matched; emit this text (before it) and stop.
    Stopped(String),
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> Self {
        StopMatcher { stops, pending: String::new() }
    }

    pub fn feed(&mut self, text: &str) -> Feed {
        if self.stops.is_empty() {
            return Feed::Emit(text.to_string());
        }
        self.pending.push_str(text);
        let first = self.stops.iter().filter_map(|s| self.pending.find(s.as_str())).min();
        if let Some(at) = first {
            let before = self.pending[..at].to_string();
            self.pending.clear();
            return Feed::Stopped(before);
        }
        // Hold back the longest suffix that is a prefix of some stop string.
        let mut keep = 0;
        for s in &self.stops {
            for (i, _) in self.pending.char_indices() {
                let tail = &self.pending[i..];
                if s.starts_with(tail) {
                    keep = keep.max(tail.len());
                    break;
                }
            }
        }
        let cut = self.pending.len() - keep;
        let out = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        Feed::Emit(out)
    }

    /// Text still held back when generation ends without a match.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emit(f: Feed) -> (String, bool) {
        match f {
            Feed::Emit(s) => (s, false),
            Feed::Stopped(s) => (s, true),
        }
    }

    #[test]
    fn holds_back_partial_matches_and_cuts_at_the_stop() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(emit(m.feed("abcE")), ("abc".into(), false));
        assert_eq!(emit(m.feed("N")), ("".into(), false));
        assert_eq!(emit(m.feed("Dxyz")), ("".into(), true));
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(emit(m.feed("abcEN")), ("abc".into(), false));
        assert_eq!(emit(m.feed("x")), ("ENx".into(), false));
        assert_eq!(m.flush(), "");
        let mut m = StopMatcher::new(vec!["<|x|>".into(), "é!".into()]);
        assert_eq!(emit(m.feed("aé")), ("a".into(), false));
        assert_eq!(emit(m.feed("!b")), ("".into(), true));
    }
}
