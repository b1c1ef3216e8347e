'use strict';
// PromptCache: the KV state of one token sequence for one model, kept between
// generations (docs/prompt-caches.md). Its arrays live on the model's engine
// thread; this object reads a snapshot taken after each operation.
const { MlxNodeError, invalid, callNative } = require('./errors');
const { runJob } = require('./event-stream');

// PromptCache -> its native handle, for LanguageModel (kept out of the public object).
const handles = new WeakMap();

function nativeOf(cache) {
  if (!handles.has(cache)) throw invalid('option promptCache must be a PromptCache made by createPromptCache() or loadPromptCache()');
  return handles.get(cache);
}

// How many leading ids `a` and `b` share (what a cache can serve of a prompt).
function commonPrefix(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

function checkSignal(signal) {
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw invalid('option signal must be an AbortSignal');
}

class PromptCache {
  #owner;
  #native;

  // owner: { native, toIds(input) } of the LanguageModel that made it.
  constructor(owner, native) {
    this.#owner = owner;
    this.#native = native;
    handles.set(this, native);
  }

  get tokens() {
    return this.#native.tokens;
  }

  get length() {
    return this.#native.length;
  }

  get nbytes() {
    return this.#native.nbytes;
  }

  get disposed() {
    return this.#native.disposed;
  }

  #live() {
    if (this.#native.disposed) throw new MlxNodeError('DISPOSED', 'the prompt cache has been disposed');
  }

  async prefill(input, options = {}) {
    this.#live();
    if (options === null || typeof options !== 'object') throw invalid('options must be an object');
    const { signal, prefillStepSize } = options;
    checkSignal(signal);
    // Only what the native u32 can hold is passed on; lm checks the range.
    if (prefillStepSize !== undefined && !(Number.isInteger(prefillStepSize) && prefillStepSize >= 0 && prefillStepSize < 2 ** 32)) {
      throw invalid(`option prefillStepSize must be a non-negative integer, got ${prefillStepSize}`);
    }
    signal?.throwIfAborted();
    const ids = this.#owner.toIds(input);
    const native = this.#owner.native;
    const id = callNative(() => native.prefill(this.#native, ids, prefillStepSize));
    await runJob(native, id, signal, () => {}, (r) => {
      if (r.finishReason === 'abort' && signal?.aborted) throw signal.reason;
    }).result;
  }

  trim(n) {
    this.#live();
    if (!Number.isInteger(n) || n < 0 || n >= 2 ** 32) throw invalid(`n must be a non-negative integer, got ${n}`);
    return callNative(() => this.#native.trim(n));
  }

  async save(path, metadata = {}) {
    this.#live();
    if (typeof path !== 'string' || path.length === 0) throw invalid('path must be a non-empty string');
    if (metadata === null || typeof metadata !== 'object' || Array.isArray(metadata)) throw invalid('metadata must be an object of strings');
    for (const [k, v] of Object.entries(metadata)) {
      if (typeof v !== 'string') throw invalid(`metadata ${k} must be a string, got ${typeof v}`);
    }
    const native = this.#owner.native;
    const id = callNative(() => native.savePromptCache(this.#native, path, metadata));
    await runJob(native, id, undefined, () => {}, () => undefined).result;
  }

  // The metadata of the file it was loaded from ({} otherwise).
  get metadata() {
    return { ...this.#native.metadata };
  }

  dispose() {
    this.#native.dispose();
  }

  [Symbol.dispose]() {
    this.dispose();
  }
}

module.exports = { PromptCache, nativeOf, commonPrefix };
