'use strict';
// Public entry point: the typed API (index.d.ts, docs/architecture.md) over the native addon.
// The native side validates generation options and does all model work on its
// own engine thread; this file handles inputs, AbortSignal and async iteration.
const { loadNative } = require('./lib/native-loader');
const { MlxNodeError, invalid, fromNative, callNative, checkKnown } = require('./lib/errors');
const { LanguageModel } = require('./lib/language-model');
const { TextToSpeech } = require('./lib/text-to-speech');
const { Audio } = require('./lib/audio');
const { loadProgress } = require('./lib/load-progress');
const { resolveModelPath } = require('./lib/hub');

const native = loadNative();
// Free every model before MLX's static destructors run at exit (node/src/worker.rs).
process.once('exit', () => native.shutdownForExit());

function mlxInfo() {
  return callNative(() => native.mlxInfo());
}

const LOAD_OPTIONS = new Set(['dtype', 'signal', 'onLoadProgress', 'maxBatch', 'precision', 'distributed']);
const DISTRIBUTED_OPTIONS = new Set(['backend', 'strategy', 'timeout', 'leader']);

// `distributed` as the native side takes it: every field set, or undefined.
function distributedOption(d) {
  if (d === undefined) return undefined;
  if (d === null || typeof d !== 'object') throw invalid('option distributed must be an object');
  checkKnown(d, DISTRIBUTED_OPTIONS, 'distributed.');
  const { backend = 'any', strategy = 'tensor', timeout = 60000, leader = false } = d;
  if (typeof leader !== 'boolean') throw invalid(`option distributed.leader must be a boolean, got ${JSON.stringify(leader)}`);
  if (!['ring', 'mpi', 'any'].includes(backend)) {
    throw invalid(`option distributed.backend must be 'ring', 'mpi' or 'any', got ${JSON.stringify(backend)}`);
  }
  if (!['tensor', 'pipeline'].includes(strategy)) {
    throw invalid(`option distributed.strategy must be 'tensor' or 'pipeline', got ${JSON.stringify(strategy)}`);
  }
  if (!(Number.isInteger(timeout) && timeout >= 1 && timeout <= 2 ** 31 - 1)) {
    throw invalid(`option distributed.timeout must be an integer number of milliseconds >= 1, got ${timeout}`);
  }
  return { backend, strategy, timeoutMs: timeout, leader };
}

async function loadModel(path, options = {}) {
  if (typeof path !== 'string' || path.length === 0) throw invalid(`path must be a non-empty string, got ${typeof path}`);
  if (options === null || typeof options !== 'object') throw invalid('options must be an object');
  checkKnown(options, LOAD_OPTIONS);
  const { dtype, signal, onLoadProgress, maxBatch, precision } = options;
  if (maxBatch !== undefined && !(Number.isInteger(maxBatch) && maxBatch >= 1 && maxBatch <= 256)) {
    throw invalid(`option maxBatch must be an integer in [1, 256], got ${maxBatch}`);
  }
  const distributed = distributedOption(options.distributed);
  if (distributed && !distributed.leader && maxBatch !== undefined && maxBatch !== 1) {
    throw invalid(`option maxBatch must be 1 for a distributed model that is not led by rank 0, got ${maxBatch}`);
  }
  if (dtype !== undefined && !['float32', 'float16', 'bfloat16'].includes(dtype)) {
    throw invalid(`option dtype must be 'float32', 'float16' or 'bfloat16', got ${JSON.stringify(dtype)}`);
  }
  if (precision !== undefined && !['exact', 'fast'].includes(precision)) {
    throw invalid(`option precision must be 'exact' or 'fast', got ${JSON.stringify(precision)}`);
  }
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw invalid('option signal must be an AbortSignal');
  if (onLoadProgress !== undefined && typeof onLoadProgress !== 'function') {
    throw invalid('option onLoadProgress must be a function');
  }
  signal?.throwIfAborted();
  const progress = loadProgress(onLoadProgress);
  const dir = await resolveModelPath(native, path, 'lm', signal, progress);
  let handle;
  try {
    handle = await native.loadModelNative(dir, dtype, progress.onNative, maxBatch, precision, distributed);
  } catch (e) {
    throw fromNative(e);
  } finally {
    progress.stop();
  }
  if (signal?.aborted) {
    await handle.dispose();
    throw signal.reason;
  }
  const failure = progress.complete();
  if (failure) {
    await handle.dispose();
    throw failure;
  }
  return new LanguageModel(handle);
}

const LOAD_TTS_OPTIONS = new Set(['signal', 'promptCache', 'onLoadProgress', 's3Tokenizer']);

async function loadTTS(path, options = {}) {
  if (typeof path !== 'string' || path.length === 0) throw invalid(`path must be a non-empty string, got ${typeof path}`);
  if (options === null || typeof options !== 'object') throw invalid('options must be an object');
  checkKnown(options, LOAD_TTS_OPTIONS);
  const { signal, promptCache, onLoadProgress, s3Tokenizer } = options;
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw invalid('option signal must be an AbortSignal');
  if (promptCache !== undefined && typeof promptCache !== 'boolean') {
    throw invalid(`option promptCache must be a boolean, got ${JSON.stringify(promptCache)}`);
  }
  if (onLoadProgress !== undefined && typeof onLoadProgress !== 'function') {
    throw invalid('option onLoadProgress must be a function');
  }
  if (s3Tokenizer !== undefined && (typeof s3Tokenizer !== 'string' || s3Tokenizer.length === 0)) {
    throw invalid(`option s3Tokenizer must be a path (a folder or its model.safetensors), got ${JSON.stringify(s3Tokenizer)}`);
  }
  signal?.throwIfAborted();
  const progress = loadProgress(onLoadProgress);
  const dir = await resolveModelPath(native, path, 'tts', signal, progress);
  let handle;
  try {
    handle = await native.loadTtsNative(dir, promptCache ?? true, s3Tokenizer ?? null);
  } catch (e) {
    throw fromNative(e);
  }
  if (signal?.aborted) {
    await handle.dispose();
    throw signal.reason;
  }
  const failure = progress.complete();
  if (failure) {
    await handle.dispose();
    throw failure;
  }
  return new TextToSpeech(handle, (text) => native.splitSentences(text));
}

const { PromptCache } = require('./lib/prompt-cache');
const { Chat } = require('./lib/chat');
const { Voice } = require('./lib/voice');

module.exports = { mlxInfo, loadModel, loadTTS, LanguageModel, PromptCache, Chat, TextToSpeech, Voice, Audio, MlxNodeError };
