'use strict';
const { MlxNodeError, invalid, fromNative, callNative, checkFinite } = require('./errors');
const { eventStream, runJob } = require('./event-stream');
const { Audio, concatAudio } = require('./audio');

function splitOptions(options) {
  if (options === undefined || options === null) return { nativeOptions: {}, signal: undefined };
  if (typeof options !== 'object' || Array.isArray(options)) throw invalid('options must be an object');
  const { signal, ...nativeOptions } = options;
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw invalid('option signal must be an AbortSignal');
  checkFinite(nativeOptions, 'options');
  return { nativeOptions, signal };
}

function checkText(text) {
  if (typeof text !== 'string') throw invalid(`text must be a string, got ${text === null ? 'null' : typeof text}`);
  if (text.trim().length === 0) throw invalid('text is empty: there is nothing to say');
}

function isAsyncIterable(x) {
  return x !== null && typeof x === 'object' && typeof x[Symbol.asyncIterator] === 'function';
}

class TextToSpeech {
  #native;
  #splitSentences;

  constructor(handle, splitSentences) {
    this.#native = handle;
    this.#splitSentences = splitSentences;
  }

  get disposed() {
    return this.#native.disposed;
  }

  get sampleRate() {
    return this.#native.sampleRate;
  }

  #live() {
    if (this.#native.disposed) throw new MlxNodeError('DISPOSED', 'the speech model has been disposed');
  }

  // Starts one synthesis and pumps its native events; onAudio sees each chunk.
  #run(text, options, onAudio, stream = false) {
    this.#live();
    checkText(text);
    const { nativeOptions, signal } = splitOptions(options);
    signal?.throwIfAborted();
    const native = this.#native;
    const id = callNative(() => native.start(text, nativeOptions, stream));
    return runJob(
      native,
      id,
      signal,
      (ev) => onAudio?.(ev.audio),
      (r) => {
        if (r.aborted && signal?.aborted) throw signal.reason;
        return r;
      }
    );
  }

  async synthesize(text, options) {
    const chunks = [];
    const r = await this.#run(text, options, (a) => chunks.push(a)).result;
    return new Audio(concatAudio(chunks), this.sampleRate, r.speechTokens, r);
  }

  stream(text, options) {
    if (typeof text === 'string') {
      let index = 0;
      return eventStream((push) =>
        this.#run(text, options, (audio) => push({ audio, sampleRate: this.sampleRate, index: index++ }), true)
      );
    }
    if (isAsyncIterable(text)) return this.#streamText(text, options);
    throw invalid('text must be a string or an AsyncIterable of strings');
  }

  // Speaks an incoming text stream (e.g. an LLM's) sentence by sentence: each
  // complete sentence is synthesised as soon as the text after it arrives.
  async *#streamText(source, options) {
    this.#live();
    splitOptions(options);
    let pending = '';
    let index = 0;
    const self = this;
    async function* speak(sentence) {
      if (sentence.trim().length === 0) return;
      for await (const chunk of self.stream(sentence, options)) yield { ...chunk, index: index++ };
    }
    for await (const piece of source) {
      if (typeof piece !== 'string') throw invalid(`the text stream must yield strings, got ${typeof piece}`);
      pending += piece;
      const sentences = this.#splitSentences(pending);
      // The last sentence may still be growing; speak only the ones before it.
      const ready = sentences.slice(0, -1);
      if (ready.length > 0) {
        const last = sentences[sentences.length - 1];
        pending = pending.slice(pending.lastIndexOf(last));
        for (const s of ready) yield* speak(s);
      }
    }
    yield* speak(pending);
  }

  async dispose() {
    try {
      await this.#native.dispose();
    } catch (e) {
      throw fromNative(e);
    }
  }

  async [Symbol.asyncDispose]() {
    await this.dispose();
  }
}

module.exports = { TextToSpeech };
