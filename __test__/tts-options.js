'use strict';
// mlx-audio's generate() keyword arguments (as the reference scripts record them) as our
// SynthesizeOptions, shared by the speech tests.
function synthesizeOptions(o, seed) {
  return {
    temperature: o.temperature,
    cfgWeight: o.cfg_weight,
    exaggeration: o.exaggeration,
    repetitionPenalty: o.repetition_penalty,
    minP: o.min_p,
    topP: o.top_p,
    maxTokens: o.max_new_tokens,
    seed,
    ...(o.lang_code === undefined ? {} : { language: o.lang_code }),
  };
}

module.exports = { synthesizeOptions };
