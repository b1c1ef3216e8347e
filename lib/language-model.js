'use strict';
const { invalid, fromNative, callNative, checkFinite } = require('./errors');
const { eventStream, runJob } = require('./event-stream');
const { NativeOwner, LIVE } = require('./native-owner');
const { PromptCache, nativeOf } = require('./prompt-cache');
const { Chat, chatFromFile } = require('./chat');

function splitOptions(options) {
  if (options === undefined || options === null) return { nativeOptions: {}, signal: undefined };
  if (typeof options !== 'object' || Array.isArray(options)) throw invalid('options must be an object');
  const { signal, stopOnAbortSignal, onTextChunk, promptCache, ...nativeOptions } = options;
  const cache = promptCache === undefined || promptCache === null ? undefined : nativeOf(promptCache);
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw invalid('option signal must be an AbortSignal');
  if (stopOnAbortSignal !== undefined && typeof stopOnAbortSignal !== 'boolean') {
    throw invalid('option stopOnAbortSignal must be a boolean');
  }
  if (onTextChunk !== undefined && typeof onTextChunk !== 'function') throw invalid('option onTextChunk must be a function');
  return { nativeOptions, signal, stopOnAbortSignal: !!stopOnAbortSignal, onTextChunk, cache };
}

// A native chunk as the public GenerationChunk: logprob fields only when asked for.
function toChunk(ev) {
  const chunk = { text: ev.text, token: ev.token };
  if (ev.logprob !== undefined && ev.logprob !== null) {
    chunk.logprob = ev.logprob;
    chunk.topLogprobs = ev.topLogprobs;
  }
  return chunk;
}

function toResult(r) {
  if (r.logprobs === undefined || r.logprobs === null) delete r.logprobs;
  return r;
}

function isMessageArray(input) {
  return Array.isArray(input) && input.length > 0 && input.every((m) => m !== null && typeof m === 'object');
}

class LanguageModel extends NativeOwner {
  #native;

  constructor(handle) {
    super(handle, 'the model');
    this.#native = handle;
  }

  get info() {
    const i = this.#native.info;
    return { ...i, quantization: i.quantization ?? null, distributed: i.distributed ?? null };
  }

  // 'exact' or 'fast': loadModel's option, or the model's default (node/src/model.rs).
  get precision() {
    return this.#native.precision;
  }


  encode(text, options = {}) {
    this[LIVE]();
    if (typeof text !== 'string') throw invalid('text must be a string');
    const add = options?.addSpecialTokens ?? true;
    if (typeof add !== 'boolean') throw invalid('option addSpecialTokens must be a boolean');
    return callNative(() => this.#native.encode(text, add));
  }

  decode(tokens) {
    this[LIVE]();
    if (!Array.isArray(tokens)) throw invalid('tokens must be an array of token ids');
    return callNative(() => this.#native.decode(tokens));
  }

  applyChatTemplate(messages, options = {}) {
    this[LIVE]();
    if (!Array.isArray(messages)) throw invalid('messages must be an array');
    const { addGenerationPrompt = false, enableThinking, tools, variables } = options ?? {};
    if (typeof addGenerationPrompt !== 'boolean') throw invalid('option addGenerationPrompt must be a boolean');
    if (enableThinking !== undefined && typeof enableThinking !== 'boolean') {
      throw invalid('option enableThinking must be a boolean');
    }
    if (tools !== undefined && !Array.isArray(tools)) throw invalid('option tools must be an array');
    if (variables !== undefined && (variables === null || typeof variables !== 'object' || Array.isArray(variables))) {
      throw invalid('option variables must be an object');
    }
    return callNative(() => this.#native.applyChatTemplate(messages, addGenerationPrompt, enableThinking, tools, variables));
  }

  // string: raw text with MLX-LM's BOS rule; messages: chat template with the
  // generation prompt, encoded without special tokens (as transformers does);
  // number[]: ids as they are (checked natively).
  #toIds(input) {
    if (typeof input === 'string') return callNative(() => this.#native.encodePrompt(input));
    if (isMessageArray(input)) {
      const text = this.applyChatTemplate(input, { addGenerationPrompt: true });
      return callNative(() => this.#native.encode(text, false));
    }
    if (Array.isArray(input)) return input;
    throw invalid(`input must be a string, an array of chat messages or an array of token ids, got ${input === null ? 'null' : typeof input}`);
  }

  // Starts a generation and pumps its native events; onChunk sees each chunk.
  #run(input, options, onChunk) {
    this[LIVE]();
    const { nativeOptions, signal, stopOnAbortSignal, onTextChunk, cache } = splitOptions(options);
    signal?.throwIfAborted();
    checkFinite(nativeOptions, 'options');
    const ids = this.#toIds(input);
    checkFinite(ids, 'token ids');
    const native = this.#native;
    const id = callNative(() => native.start(ids, nativeOptions, cache));
    return runJob(
      native,
      id,
      signal,
      (ev) => {
        const chunk = toChunk(ev);
        if (onTextChunk && chunk.text) onTextChunk(chunk.text);
        onChunk?.(chunk);
      },
      (r) => {
        if (r.finishReason === 'abort' && signal?.aborted && !stopOnAbortSignal) throw signal.reason;
        return toResult(r);
      }
    );
  }

  // What PromptCache and Chat need of this model.
  #owner() {
    return { native: this.#native, toIds: (input) => this.#toIds(input), model: this };
  }

  createPromptCache(options = {}) {
    this[LIVE]();
    if (options === null || typeof options !== 'object' || Array.isArray(options)) throw invalid('options must be an object');
    checkFinite(options, 'options');
    return new PromptCache(this.#owner(), callNative(() => this.#native.createPromptCache(options)));
  }

  async loadPromptCache(path) {
    this[LIVE]();
    if (typeof path !== 'string' || path.length === 0) throw invalid('path must be a non-empty string');
    let handle;
    try {
      handle = await this.#native.loadPromptCache(path);
    } catch (e) {
      throw fromNative(e);
    }
    return new PromptCache(this.#owner(), handle);
  }

  createChat(options = {}) {
    this[LIVE]();
    return new Chat(this, this.createPromptCache(), options);
  }

  async loadChat(path) {
    return chatFromFile(this, await this.loadPromptCache(path));
  }

  async generate(input, options) {
    return this.#run(input, options).result;
  }

  // On a process other than rank 0 of a model split with `distributed.leader`: runs rank 0's
  // generations with it; resolves once rank 0's model is disposed (crate follow.rs).
  async follow() {
    this[LIVE]();
    const id = callNative(() => this.#native.follow());
    await runJob(this.#native, id, undefined, () => {}, () => undefined).result;
  }

  stream(input, options) {
    return eventStream((onChunk) => this.#run(input, options, onChunk));
  }
}

module.exports = { LanguageModel };
