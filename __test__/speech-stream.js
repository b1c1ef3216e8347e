'use strict';
// What the speech tests check a stream() against (Chatterbox's and Turbo's): the chunk
// count its schedule gives and how close its audio's loudness contour is to synthesize()'s.

// Streaming renders each chunk with its own vocoder excitation (random phases
// drawn per chunk), so it cannot equal synthesize() sample for sample: it must
// give the same length and the same loudness contour, within what two seeds'
// excitations differ by (the mean 20 ms level difference measured here: 1.1 to
// 1.6 dB between seeds, 1.1 to 1.6 dB between stream and synthesize). Turbo's
// chunks also draw the flow's noise afresh: 1.1 to 1.3 dB on its fixture, and 1.05
// for a stream of one chunk without the prompt cache, where only those draws differ.
const ENVELOPE_DB = 2.5;

// Mean absolute difference of 20 ms RMS levels, in dB.
function envelopeDb(a, b, win = 480) {
  let sum = 0;
  let windows = 0;
  for (let i = 0; i + win <= Math.min(a.length, b.length); i += win) {
    let ea = 0;
    let eb = 0;
    for (let j = i; j < i + win; j++) {
      ea += a[j] * a[j];
      eb += b[j] * b[j];
    }
    sum += Math.abs(10 * Math.log10((ea + 1e-9) / (eb + 1e-9)));
    windows++;
  }
  return sum / windows;
}

// The chunks stream() should hand out for n speech tokens: the first once
// firstChunk tokens plus the 3 look-ahead tokens exist, then every chunk
// tokens, and the rest (or the held-back overlap) at the end.
// Chunk sizes double from the first up to `chunk`; each waits for 3 look-ahead tokens.
function expectedChunks(n, firstChunk, chunk) {
  let done = 0;
  let count = 0;
  let want = firstChunk;
  for (let t = 1; t <= n; t++) {
    if (t >= done + want + 3) {
      count++;
      done = t - 3;
      want = Math.min(2 * want, chunk);
    }
  }
  return count + (n > done || count > 0 ? 1 : 0);
}

module.exports = { ENVELOPE_DB, envelopeDb, expectedChunks };
