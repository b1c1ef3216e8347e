'use strict';
// What a generation or a synthesis cost, for stderr, in mlx_lm.generate's words
// ("Prompt: N tokens, X tokens-per-sec", "Generation: ...", "Peak memory: X GB").

const gb = (bytes) => `${(bytes / 1e9).toFixed(3)} GB`;

// A GenerationResult as lines; `cached` adds the prompt tokens served from the cache.
function generationFigures(r, { cached = false } = {}) {
  const fromCache = cached ? ` (${r.cachedTokens} cached)` : '';
  return [
    `Prompt: ${r.promptTokens} tokens${fromCache}, ${r.promptTps.toFixed(3)} tokens-per-sec`,
    `Generation: ${r.generationTokens} tokens, ${r.generationTps.toFixed(3)} tokens-per-sec`,
    `Peak memory: ${gb(r.peakMemory)}`,
  ];
}

// An Audio as lines, as mlx-audio reports a synthesis.
function speechFigures(a) {
  return [
    `Audio: ${a.duration.toFixed(3)} s at ${a.sampleRate} Hz, ${a.speechTokens.length} speech tokens`,
    `Prompt: ${a.promptTokens} tokens, ${a.promptTps.toFixed(3)} tokens-per-sec`,
    `Generation: ${a.generationTokens} tokens, ${a.generationTps.toFixed(3)} tokens-per-sec`,
    `Processing time: ${a.processingTime.toFixed(3)} s, real-time factor ${a.realTimeFactor.toFixed(3)}`,
    `Peak memory: ${gb(a.peakMemory)}`,
  ];
}

module.exports = { generationFigures, speechFigures };
