//! HiFT vocoder: mel to waveform (filled in by the HiFT work).
