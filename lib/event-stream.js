'use strict';
const { fromNative } = require('./errors');

// Drains native job `id` (a generation or a synthesis): `onEvent` sees each
// event before the result, `finish` maps the result (or throws); an abort of
// `signal` aborts the job. Returns `{ result, abort }`.
function runJob(native, id, signal, onEvent, finish) {
  const abort = () => native.abort(id);
  signal?.addEventListener('abort', abort, { once: true });
  const result = (async () => {
    try {
      for (;;) {
        let events;
        try {
          events = await native.nextEvents(id);
        } catch (e) {
          throw fromNative(e);
        }
        for (const ev of events) {
          // A job ends with its result (a generation's, a synthesis's) or the voice it made.
          const end = ev.result ?? ev.voice;
          if (end) return finish(end);
          onEvent(ev);
        }
      }
    } finally {
      signal?.removeEventListener('abort', abort);
    }
  })();
  return { result, abort };
}

// Turns a native job into an AsyncIterable: `start(onItem)` must return
// `{ result, abort }`; items pushed through onItem are yielded in order, the
// iterator throws the job's failure, and leaving a for-await early calls abort.

function eventStream(start) {
  const queue = [];
  let wake = null;
  let finished = false;
  let failure = null;
  let run;
  let result;
  const notify = () => {
    if (wake) {
      const w = wake;
      wake = null;
      w();
    }
  };
  try {
    run = start((item) => {
      if (!finished) queue.push(item);
      notify();
    });
    result = run.result;
  } catch (e) {
    result = Promise.reject(e);
  }
  // The iterator reports failures; keep an unawaited .result from crashing the process.
  result.catch(() => {});
  result.then(
    () => {
      finished = true;
      notify();
    },
    (e) => {
      failure = e;
      finished = true;
      notify();
    }
  );
  let closed = false;
  const iterator = {
    async next() {
      for (;;) {
        if (queue.length > 0 && !closed) return { value: queue.shift(), done: false };
        if (finished || closed) {
          if (failure && !closed) {
            closed = true;
            throw failure;
          }
          closed = true;
          return { value: undefined, done: true };
        }
        await new Promise((resolve) => {
          wake = resolve;
        });
      }
    },
    async return() {
      closed = true;
      queue.length = 0;
      run?.abort();
      return { value: undefined, done: true };
    },
    [Symbol.asyncIterator]() {
      return this;
    },
  };
  return { [Symbol.asyncIterator]: () => iterator, result };
}

module.exports = { eventStream, runJob };
