'use strict';
// Errors with a stable `code`, as README.md ("Errors") lists them.
const CODES = new Set([
  'MODEL_NOT_FOUND',
  'UNSUPPORTED_MODEL',
  'INVALID_WEIGHTS',
  'INVALID_ARGUMENT',
  'DISPOSED',
  'ABORTED',
  'CACHE_MISMATCH',
  'INVALID_CACHE_FILE',
  'CACHE_BUSY',
  'AUTH_REQUIRED',
  'DOWNLOAD_FAILED',
  'DISTRIBUTED_ERROR',
  'INVALID_AUDIO',
  'MLX_ERROR',
]);

class MlxNodeError extends Error {
  constructor(code, message, options) {
    super(message, options);
    this.name = 'MlxNodeError';
    this.code = code;
  }
}

function invalid(message) {
  return new MlxNodeError('INVALID_ARGUMENT', message);
}

// Native sync calls already carry `code`; async ones prefix the message with it.
function fromNative(e) {
  if (!(e instanceof Error)) return new MlxNodeError('MLX_ERROR', String(e));
  if (CODES.has(e.code)) return new MlxNodeError(e.code, e.message);
  const m = /^([A-Z_]+): ([\s\S]*)$/.exec(e.message);
  if (m && CODES.has(m[1])) return new MlxNodeError(m[1], m[2]);
  return new MlxNodeError('MLX_ERROR', e.message);
}

function callNative(fn) {
  try {
    return fn();
  } catch (e) {
    throw fromNative(e);
  }
}

// Non-finite numbers cannot cross to the native side as JSON; name them here.
function checkFinite(value, where) {
  if (typeof value === 'number' && !Number.isFinite(value)) throw invalid(`${where} must be a finite number, got ${value}`);
  if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) checkFinite(v, Array.isArray(value) ? `${where}[${k}]` : `${where === 'options' ? 'option' : where} ${k}`);
  }
}

// INVALID_ARGUMENT for the first key of `options` not in `known` (a Set); `prefix` names
// nested options ("distributed.").
function checkKnown(options, known, prefix = '') {
  for (const k of Object.keys(options)) {
    if (!known.has(k)) throw invalid(`unknown option "${prefix}${k}"; known options: ${[...known].join(', ')}`);
  }
}

module.exports = { MlxNodeError, invalid, fromNative, callNative, checkFinite, checkKnown };
