//! Chatterbox text-to-speech. Not implemented yet: see the speech issue.
