'use strict';
// Recent conversations' prompt caches, reused across requests as mlx_lm.server does:
// a request takes the idle cache sharing the longest token prefix with its prompt
// (the generation trims the rest and feeds only what is new) and gives it back when
// done. Idle caches are kept most-recent first and dropped past a byte budget.
const { commonPrefix } = require('../prompt-cache');

class CachePool {
  #model;
  #idle = [];
  #maxBytes;
  #maxEntries;

  constructor(model, { maxBytes = 2 ** 30, maxEntries = 16 } = {}) {
    this.#model = model;
    this.#maxBytes = maxBytes;
    this.#maxEntries = maxEntries;
  }

  // A cache for `ids`, used by this request only until `checkin`.
  checkout(ids) {
    let best = -1;
    let bestLen = 0;
    this.#idle.forEach((c, i) => {
      const n = commonPrefix(c.tokens, ids);
      if (n > bestLen) {
        best = i;
        bestLen = n;
      }
    });
    if (best >= 0) return this.#idle.splice(best, 1)[0];
    return this.#model.createPromptCache();
  }

  checkin(cache) {
    if (cache.disposed) return;
    this.#idle.unshift(cache);
    let bytes = this.#idle.reduce((s, c) => s + c.nbytes, 0);
    while (this.#idle.length > this.#maxEntries || (bytes > this.#maxBytes && this.#idle.length > 0)) {
      const dropped = this.#idle.pop();
      bytes -= dropped.nbytes;
      dropped.dispose();
    }
  }

  get size() {
    return this.#idle.length;
  }

  // The most positions an idle cache holds.
  get longest() {
    return this.#idle.reduce((m, c) => Math.max(m, c.length ?? c.tokens.length), 0);
  }

  get nbytes() {
    return this.#idle.reduce((s, c) => s + c.nbytes, 0);
  }

  clear() {
    for (const c of this.#idle.splice(0)) c.dispose();
  }
}

module.exports = { CachePool };
