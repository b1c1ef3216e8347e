//! Chatterbox config.json (filled in by the pipeline work).
