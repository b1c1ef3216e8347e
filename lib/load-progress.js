'use strict';
const { MlxNodeError } = require('./errors');

// loadModel's onLoadProgress: the engine thread reports the fraction of the
// weights read (through a queue, so some reports may land after the load
// resolved); the user's callback sees strictly increasing fractions below 1,
// then exactly 1 once the model is ready. A throwing callback must not reach
// the native caller (that would end the process): it is caught, later reports
// are skipped, and complete() returns an ABORTED error for loadModel to reject
// with, the thrown value as its `cause`.
function loadProgress(callback) {
  let last = 0;
  let open = true;
  let thrown = null;
  const call = (fraction) => {
    try {
      callback(fraction);
    } catch (e) {
      thrown = { error: e };
    }
  };
  return {
    // For the native side: undefined when there is no callback.
    onNative:
      callback &&
      ((fraction) => {
        if (!open || thrown || !(fraction > last && fraction < 1)) return;
        last = fraction;
        call(fraction);
      }),
    stop() {
      open = false;
    },
    // Reports 1; returns the error to reject with if the callback ever threw.
    complete() {
      open = false;
      if (callback && !thrown) call(1);
      if (!thrown) return null;
      const e = thrown.error;
      const what = e instanceof Error ? e.message : String(e);
      return new MlxNodeError('ABORTED', `option onLoadProgress threw: ${what}`, { cause: e });
    },
  };
}

module.exports = { loadProgress };
