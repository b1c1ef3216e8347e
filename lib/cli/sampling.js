'use strict';
// The generation flags that `generate` and `chat` share, and the GenerateOptions
// and chat-template options they stand for. Only flags that were given become
// options, so the library's defaults (and a loaded chat's saved ones) apply otherwise.
const { UsageError } = require('./args');

const GENERATION_FLAGS = {
  'max-tokens': { kind: 'int', min: 0, help: 'the most tokens to generate (default 256)' },
  temp: { kind: 'number', min: 0, help: 'sampling temperature (default 0: greedy)' },
  'top-p': { kind: 'number', help: 'nucleus sampling: keep the most likely tokens up to this probability' },
  'top-k': { kind: 'int', help: 'keep only the k most likely tokens' },
  'min-p': { kind: 'number', help: "drop tokens below this fraction of the top token's probability" },
  'repetition-penalty': { kind: 'number', help: 'penalty for tokens seen in the last 20' },
  seed: { kind: 'int', help: 'random seed: the same seed and flags give the same text' },
  stop: { multiple: true, help: 'stop at this text (left out of the output)' },
};

const OPTION_OF = {
  'max-tokens': 'maxTokens',
  temp: 'temperature',
  'top-p': 'topP',
  'top-k': 'topK',
  'min-p': 'minP',
  'repetition-penalty': 'repetitionPenalty',
  seed: 'seed',
  stop: 'stop',
};

const TEMPLATE_FLAGS = {
  system: { value: 'TEXT', help: 'a system message before the conversation' },
  'no-think': { type: 'boolean', help: 'ask the chat template for no thinking (enableThinking: false)' },
  'enable-thinking': { type: 'boolean', help: 'ask the chat template for thinking (enableThinking: true)' },
};

// loadModel's options: the compute dtype and, for quantized models, the precision.
const LOAD_FLAGS = {
  dtype: { value: 'TYPE', help: 'compute dtype: float32, float16 or bfloat16 (default: the weights\')' },
  precision: {
    value: 'MODE',
    help: 'quantized matmuls: exact (MLX-LM\'s tokens) or fast (integer dot products); default: the library\'s (fast for quantized models on the CPU)',
  },
};

function generationOptions(values) {
  const out = {};
  for (const [flag, option] of Object.entries(OPTION_OF)) {
    if (values[flag] !== undefined) out[option] = values[flag];
  }
  return out;
}

// { enableThinking } when one of the two flags was given.
function templateOptions(values) {
  if (values['no-think'] && values['enable-thinking']) throw new UsageError('--no-think and --enable-thinking contradict each other');
  if (values['no-think']) return { enableThinking: false };
  if (values['enable-thinking']) return { enableThinking: true };
  return {};
}

// { dtype, precision } from LOAD_FLAGS' values.
function loadOptions(values) {
  const { dtype, precision } = values;
  if (dtype !== undefined && !['float32', 'float16', 'bfloat16'].includes(dtype)) {
    throw new UsageError(`--dtype must be float32, float16 or bfloat16, got ${JSON.stringify(dtype)}`);
  }
  if (precision !== undefined && !['exact', 'fast'].includes(precision)) {
    throw new UsageError(`--precision must be exact or fast, got ${JSON.stringify(precision)}`);
  }
  return { dtype, precision };
}

module.exports = { GENERATION_FLAGS, TEMPLATE_FLAGS, LOAD_FLAGS, generationOptions, templateOptions, loadOptions };
