'use strict';
// What LanguageModel and TextToSpeech share: `disposed`, the DISPOSED check (as
// `this[LIVE]()`, kept off the public API) and dispose()/`await using`.
const { MlxNodeError, fromNative } = require('./errors');

const LIVE = Symbol('live');

class NativeOwner {
  #native;
  #what;

  // what: how errors name it ('the model', 'the speech model').
  constructor(handle, what) {
    this.#native = handle;
    this.#what = what;
  }

  get disposed() {
    return this.#native.disposed;
  }

  // Throws DISPOSED once disposed.
  [LIVE]() {
    if (this.#native.disposed) throw new MlxNodeError('DISPOSED', `${this.#what} has been disposed`);
  }

  // Stops running and queued work at its next step, then frees the model.
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

module.exports = { NativeOwner, LIVE };
