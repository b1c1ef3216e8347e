//! T3: text tokens to speech tokens (filled in by the T3 work).
