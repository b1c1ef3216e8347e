'use strict';
const { MlxNodeError, invalid, fromNative, callNative, checkFinite, checkKnown } = require('./errors');
const { eventStream, runJob } = require('./event-stream');
const { NativeOwner, LIVE } = require('./native-owner');
const { Audio, concatAudio } = require('./audio');
const { Voice } = require('./voice');

const CREATE_VOICE_OPTIONS = new Set(['exaggeration', 'signal']);

// `owner`: the TextToSpeech whose Voice objects a `voice` option may hold.
function splitOptions(options, owner) {
  if (options === undefined || options === null) return { nativeOptions: {}, signal: undefined };
  if (typeof options !== 'object' || Array.isArray(options)) throw invalid('options must be an object');
  const { signal, ...nativeOptions } = options;
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw invalid('option signal must be an AbortSignal');
  // A Voice crosses as its id (the native side keeps the voice itself); the native side
  // reads a number as such an id, so a number given here is refused like any other non-path.
  const { voice } = nativeOptions;
  if (voice instanceof Voice) nativeOptions.voice = Voice.idFor(voice, owner);
  else if (voice !== undefined && voice !== null && typeof voice !== 'string') {
    throw invalid(`option voice must be a Voice or a path to a WAV clip or a conds.safetensors file, got ${JSON.stringify(voice)}`);
  }
  checkFinite(nativeOptions, 'options');
  return { nativeOptions, signal };
}

// createVoice's audio: a WAV path, or mono samples at a rate.
function clipArgs(audio) {
  if (typeof audio === 'string' && audio.length > 0) return [audio, null, null];
  if (audio !== null && typeof audio === 'object' && audio.samples instanceof Float32Array) {
    const rate = audio.sampleRate;
    if (!Number.isInteger(rate) || rate <= 0 || rate > 0xffffffff) {
      throw invalid(`audio.sampleRate must be a positive integer, got ${JSON.stringify(rate)}`);
    }
    return [null, audio.samples, rate];
  }
  throw invalid('audio must be a WAV file path or { samples: Float32Array, sampleRate: number }');
}

function checkText(text) {
  if (typeof text !== 'string') throw invalid(`text must be a string, got ${text === null ? 'null' : typeof text}`);
  if (text.trim().length === 0) throw invalid('text is empty: there is nothing to say');
}

// Seconds of work per second of audio, as mlx-audio reports it (below 1: faster than real time).
function realTimeFactor(processingTime, duration) {
  return duration > 0 ? processingTime / duration : 0;
}

// The public form of a native speech result: what a synthesis produced and cost.
function speechResult(r, sampleRate) {
  const duration = r.samples / sampleRate;
  return {
    speechTokens: r.speechTokens,
    duration,
    promptTokens: r.promptTokens,
    promptTps: r.promptTps,
    generationTokens: r.generationTokens,
    generationTps: r.generationTps,
    processingTime: r.processingTime,
    realTimeFactor: realTimeFactor(r.processingTime, duration),
    peakMemory: r.peakMemory,
    promptCache: r.promptCache,
    aborted: r.aborted,
  };
}

// Several results (the sentences of a text stream) as one: counts and seconds summed,
// rates over the sums, the highest peak.
function sumResults(results) {
  const sum = (k) => results.reduce((n, r) => n + r[k], 0);
  const seconds = (tokens, tps) => results.reduce((n, r) => n + (r[tps] > 0 ? r[tokens] / r[tps] : 0), 0);
  const rate = (tokens, tps) => {
    const secs = seconds(tokens, tps);
    return secs > 0 ? sum(tokens) / secs : 0;
  };
  const duration = sum('duration');
  const processingTime = sum('processingTime');
  return {
    speechTokens: results.flatMap((r) => r.speechTokens),
    duration,
    promptTokens: sum('promptTokens'),
    promptTps: rate('promptTokens', 'promptTps'),
    generationTokens: sum('generationTokens'),
    generationTps: rate('generationTokens', 'generationTps'),
    processingTime,
    realTimeFactor: realTimeFactor(processingTime, duration),
    peakMemory: Math.max(0, ...results.map((r) => r.peakMemory)),
    promptCache: ['made', 'kept'].find((c) => results.some((r) => r.promptCache === c)) ?? 'none',
    aborted: results.some((r) => r.aborted),
  };
}

function isAsyncIterable(x) {
  return x !== null && typeof x === 'object' && typeof x[Symbol.asyncIterator] === 'function';
}

class TextToSpeech extends NativeOwner {
  #native;
  #splitSentences;

  constructor(handle, splitSentences) {
    super(handle, 'the speech model');
    this.#native = handle;
    this.#splitSentences = splitSentences;
  }

  get sampleRate() {
    return this.#native.sampleRate;
  }

  // Starts one synthesis and pumps its native events; onAudio sees each chunk.
  #run(text, options, onAudio, stream = false) {
    this[LIVE]();
    checkText(text);
    return this.#job(options, (native, nativeOptions) => native.start(text, nativeOptions, stream), onAudio);
  }

  // Starts a native job with `start(native, nativeOptions)` and pumps its events.
  #job(options, start, onAudio, finish) {
    const { nativeOptions, signal } = splitOptions(options, this);
    signal?.throwIfAborted();
    const native = this.#native;
    const id = callNative(() => start(native, nativeOptions));
    return runJob(
      native,
      id,
      signal,
      (ev) => onAudio?.(ev.audio),
      finish ??
        ((r) => {
          if (r.aborted && signal?.aborted) throw signal.reason;
          return speechResult(r, this.sampleRate);
        })
    );
  }

  // Clones a voice from a reference clip (a WAV path, or { samples, sampleRate }) as
  // mlx-audio's prepare_conditionals does; the Voice is then a `voice` option.
  async createVoice(audio, options = {}) {
    this[LIVE]();
    const args = clipArgs(audio);
    if (options === null || typeof options !== 'object' || Array.isArray(options)) throw invalid('options must be an object');
    checkKnown(options, CREATE_VOICE_OPTIONS);
    const { exaggeration = 0.5 } = options;
    if (typeof exaggeration !== 'number' || !Number.isFinite(exaggeration)) {
      throw invalid(`option exaggeration must be a finite number, got ${JSON.stringify(exaggeration)}`);
    }
    const native = this.#native;
    const { signal } = options;
    let made;
    try {
      made = await this.#job({ signal }, (n) => n.createVoice(...args, exaggeration), undefined, (r) => {
        // Stopped before it began (queued behind other work): the job ends with an aborted
        // summary instead of a voice.
        if (r.aborted) {
          throw signal?.aborted ? signal.reason : new MlxNodeError('ABORTED', 'createVoice() was stopped before it finished: the speech model was disposed');
        }
        return r;
      }).result;
    } catch (e) {
      if (signal?.aborted) throw signal.reason;
      throw e;
    }
    // A signal that fired after the voice was made: the caller asked for nothing.
    if (signal?.aborted) {
      native.dropVoice(made.id);
      throw signal.reason;
    }
    return new Voice(this, native, made);
  }

  async synthesize(text, options) {
    const chunks = [];
    const r = await this.#run(text, options, (a) => chunks.push(a)).result;
    // Stopped without the caller's signal (dispose() during the call): no half an Audio.
    if (r.aborted) throw new MlxNodeError('ABORTED', 'synthesize() was stopped before it finished: the speech model was disposed');
    return new Audio(concatAudio(chunks), this.sampleRate, r.speechTokens, r);
  }

  // Makes a voice's prompt cache now (what its first stream() would do before its first
  // chunk); resolves to "made", "kept" (it was there) or "none" (promptCache off, or a
  // voice whose prompt cannot be cached).
  async prepare(options) {
    this[LIVE]();
    const r = await this.#job(options, (native, nativeOptions) => native.prepare(nativeOptions)).result;
    if (r.aborted) throw new MlxNodeError('ABORTED', 'prepare() was stopped before the voice\'s prompt cache was made');
    return r.promptCache;
  }

  stream(text, options) {
    if (typeof text === 'string') {
      let index = 0;
      return eventStream((push) =>
        this.#run(text, options, (audio) => push({ audio, sampleRate: this.sampleRate, index: index++ }), true)
      );
    }
    if (isAsyncIterable(text)) {
      // `result`: the sentences' results summed, once the iteration has ended.
      const results = [];
      let settle;
      const result = new Promise((resolve, reject) => {
        settle = { resolve, reject };
      });
      result.catch(() => {});
      const chunks = this.#streamText(text, options, results);
      return {
        result,
        async *[Symbol.asyncIterator]() {
          try {
            yield* chunks;
            settle.resolve(sumResults(results));
          } catch (e) {
            settle.reject(e);
            throw e;
          } finally {
            // Left early: what was spoken so far, marked aborted.
            settle.resolve({ ...sumResults(results), aborted: true });
          }
        },
      };
    }
    throw invalid('text must be a string or an AsyncIterable of strings');
  }

  // Speaks an incoming text stream (e.g. an LLM's) sentence by sentence: each
  // complete sentence is synthesised as soon as the text after it arrives.
  // Each sentence's result goes into `results`.
  async *#streamText(source, options, results) {
    this[LIVE]();
    splitOptions(options, this);
    let pending = '';
    let index = 0;
    const self = this;
    async function* speak(sentence) {
      if (sentence.trim().length === 0) return;
      const s = self.stream(sentence, options);
      for await (const chunk of s) yield { ...chunk, index: index++ };
      results.push(await s.result);
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
}

module.exports = { TextToSpeech };
