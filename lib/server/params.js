'use strict';
// OpenAI request fields -> mlx-node GenerateOptions. What OpenAI's API rejects is a
// 400 naming the field; fields we do not use (user, metadata, ...) are ignored, as
// mlx_lm.server ignores them.
const { badRequest } = require('./http');

// mlx_lm.server's default completion length.
const DEFAULT_MAX_TOKENS = 512;

function number(body, key, lo, hi, { integer = false } = {}) {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < lo || v > hi || (integer && !Number.isInteger(v))) {
    throw badRequest(`'${key}' must be ${integer ? 'an integer' : 'a number'} between ${lo} and ${hi}, got ${JSON.stringify(v)}`, key);
  }
  return v;
}

function stopStrings(v) {
  if (v === undefined || v === null) return undefined;
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list) || list.some((s) => typeof s !== 'string' || s.length === 0)) {
    throw badRequest("'stop' must be a non-empty string or an array of them", 'stop');
  }
  return list;
}

function logitBias(v) {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'object' || Array.isArray(v)) throw badRequest("'logit_bias' must be an object of token id -> bias", 'logit_bias');
  const out = {};
  for (const [k, b] of Object.entries(v)) {
    if (!/^\d+$/.test(k) || typeof b !== 'number' || !Number.isFinite(b) || b < -100 || b > 100) {
      throw badRequest(`'logit_bias' entry ${JSON.stringify(k)}: ${JSON.stringify(b)} is not a token id with a bias in [-100, 100]`, 'logit_bias');
    }
    out[k] = b;
  }
  return out;
}

// The sampling and length fields both endpoints share.
function generateOptions(body) {
  const n = number(body, 'n', 1, 1e9, { integer: true });
  if (n !== undefined && n !== 1) throw badRequest("only 'n': 1 is supported", 'n');
  const maxTokens = number(body, 'max_completion_tokens', 1, 2 ** 31 - 1, { integer: true }) ?? number(body, 'max_tokens', 1, 2 ** 31 - 1, { integer: true });
  const options = {
    maxTokens: maxTokens ?? DEFAULT_MAX_TOKENS,
    temperature: number(body, 'temperature', 0, 1e6),
    topP: number(body, 'top_p', 0, 1),
    topK: number(body, 'top_k', 0, 2 ** 31 - 1, { integer: true }),
    minP: number(body, 'min_p', 0, 1),
    repetitionPenalty: number(body, 'repetition_penalty', 0, 1e6),
    presencePenalty: number(body, 'presence_penalty', -2, 2),
    frequencyPenalty: number(body, 'frequency_penalty', -2, 2),
    seed: number(body, 'seed', 0, 2 ** 32 - 1, { integer: true }),
    stop: stopStrings(body.stop),
    logitBias: logitBias(body.logit_bias),
  };
  if (body.stream !== undefined && typeof body.stream !== 'boolean') throw badRequest("'stream' must be a boolean", 'stream');
  for (const k of Object.keys(options)) if (options[k] === undefined) delete options[k];
  return options;
}

function includeUsage(body) {
  const so = body.stream_options;
  if (so === undefined || so === null) return false;
  if (typeof so !== 'object' || (so.include_usage !== undefined && typeof so.include_usage !== 'boolean')) {
    throw badRequest("'stream_options' must be an object with a boolean 'include_usage'", 'stream_options');
  }
  return !!so.include_usage;
}

module.exports = { generateOptions, includeUsage, number, DEFAULT_MAX_TOKENS };
