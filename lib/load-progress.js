'use strict';
const { MlxNodeError } = require('./errors');

// loadModel's and loadTTS's onLoadProgress(fraction, detail). While a Hugging Face model
// downloads, each report is (0, { stage: 'download', file, bytesDone, bytesTotal }), bytes
// of that file. While the weights are read, the engine thread reports the fraction read
// (through a queue, so some reports may land after the load resolved); the user's callback
// sees strictly increasing fractions below 1 with { stage: 'load' }, then exactly 1 once
// the model is ready. A throwing callback must not reach the native caller (that would end
// the process): it is caught, later reports are skipped, a download stops (onThrow), and
// failure()/complete() return an ABORTED error to reject with, the thrown value as its `cause`.
function loadProgress(callback) {
  let last = 0;
  let open = true;
  let downloading = false;
  let onThrow = null;
  let thrown = null;
  const call = (fraction, detail) => {
    try {
      callback(fraction, detail);
    } catch (e) {
      thrown = { error: e };
      onThrow?.();
    }
  };
  const failure = () => {
    if (!thrown) return null;
    const e = thrown.error;
    const what = e instanceof Error ? e.message : String(e);
    return new MlxNodeError('ABORTED', `option onLoadProgress threw: ${what}`, { cause: e });
  };
  return {
    // For the native side: undefined when there is no callback.
    onNative:
      callback &&
      ((fraction) => {
        if (!open || thrown || !(fraction > last && fraction < 1)) return;
        last = fraction;
        call(fraction, { stage: 'load' });
      }),
    // For the hub download: { file, bytesDone, bytesTotal }; reports queued past the
    // download's end are dropped.
    onDownload:
      callback &&
      ((p) => {
        if (!downloading || thrown) return;
        call(0, { stage: 'download', file: p.file, bytesDone: p.bytesDone, bytesTotal: p.bytesTotal });
      }),
    startDownload(stop) {
      downloading = true;
      onThrow = stop;
    },
    endDownload() {
      downloading = false;
      onThrow = null;
    },
    failure,
    stop() {
      open = false;
    },
    // Reports 1; returns the error to reject with if the callback ever threw.
    complete() {
      open = false;
      if (callback && !thrown) call(1, { stage: 'load' });
      return failure();
    },
  };
}

module.exports = { loadProgress };
