'use strict';
// A voice cloned by TextToSpeech.createVoice(): the conditioning lives on the native side,
// under an id that `voice` options carry; this object names it, saves it and frees it.
const { MlxNodeError, invalid, fromNative } = require('./errors');
const { runJob } = require('./event-stream');

// Frees a collected Voice's native conditioning (unless its model is gone already).
const collected = new FinalizationRegistry(({ native, id }) => {
  if (!native.disposed) native.dropVoice(id);
});

class Voice {
  #owner;
  #native;
  #id;
  #duration;
  #truncated;
  #disposed = false;

  constructor(owner, native, { id, duration, truncated }) {
    this.#owner = owner;
    this.#native = native;
    this.#id = id;
    this.#duration = duration;
    this.#truncated = truncated;
    collected.register(this, { native, id }, this);
  }

  // Seconds of reference audio it was made from (at most the first minute is read).
  get duration() {
    return this.#duration;
  }

  // Whether the clip was longer than a minute and was cut there.
  get truncated() {
    return this.#truncated;
  }

  get disposed() {
    return this.#disposed || this.#native.disposed;
  }

  #live() {
    if (this.#disposed) throw new MlxNodeError('DISPOSED', 'the voice has been disposed');
    if (this.#native.disposed) throw new MlxNodeError('DISPOSED', 'the speech model of this voice has been disposed');
  }

  // Writes it as a conds.safetensors (what mlx-audio loads, and `voice: path` here).
  async save(path) {
    this.#live();
    if (typeof path !== 'string' || path.length === 0) throw invalid(`path must be a non-empty string, got ${typeof path}`);
    let id;
    try {
      id = this.#native.saveVoice(this.#id, path);
    } catch (e) {
      throw fromNative(e);
    }
    await runJob(this.#native, id, undefined, () => {}, (r) => {
      // Stopped before it began (the model disposed while it was queued): nothing was written.
      if (r.aborted) throw new MlxNodeError('ABORTED', 'save() was stopped before the voice was written: the speech model was disposed');
    }).result;
  }

  dispose() {
    if (this.#disposed) return;
    this.#disposed = true;
    collected.unregister(this);
    if (!this.#native.disposed) this.#native.dropVoice(this.#id);
  }

  [Symbol.dispose]() {
    this.dispose();
  }

  // The id a `voice` option carries for `voice` on `owner`'s model (DISPOSED, or
  // INVALID_ARGUMENT for another model's voice).
  static idFor(voice, owner) {
    if (voice.#owner !== owner) throw invalid('option voice is a Voice of another speech model');
    voice.#live();
    return voice.#id;
  }
}

module.exports = { Voice };
