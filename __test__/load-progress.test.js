'use strict';
// loadModel's onLoadProgress: real progress from the engine thread while the
// weights are read (the sharded fixture: two shards, one of them nearly all
// embedding), and a throwing callback rejects the load instead of ending the process.
const test = require('node:test');
const assert = require('node:assert/strict');
const { loadModel } = require('..');
const { fixturePath, expectReject } = require('./helpers');

test('onLoadProgress: several increasing fractions in (0, 1], the last exactly 1, event loop free', async () => {
  const seen = [];
  let ticks = 0;
  const timer = setInterval(() => ticks++, 1);
  let m;
  try {
    m = await loadModel(fixturePath('qwen3-sharded'), { onLoadProgress: (f) => seen.push(f) });
  } finally {
    clearInterval(timer);
  }
  await m.dispose();
  assert.ok(seen.length >= 3, `only ${seen.length} reports: ${seen}`);
  for (let i = 0; i < seen.length; i++) {
    assert.ok(seen[i] > 0 && seen[i] <= 1, `fraction ${seen[i]} at ${i} is outside (0, 1]`);
    if (i > 0) assert.ok(seen[i] > seen[i - 1], `not increasing at ${i}: ${seen[i - 1]} then ${seen[i]}`);
  }
  assert.equal(seen.at(-1), 1);
  assert.ok(ticks > 0, 'timers never ran while loading');
});

test('onLoadProgress that throws rejects the load with ABORTED, the thrown error as cause', async () => {
  const boom = new Error('boom');
  // First report, the final 1, and a thrown non-Error.
  for (const [label, throwAt, thrown] of [['first report', () => true, boom], ['final 1', (f) => f === 1, boom], ['non-Error', () => true, 'plain string']]) {
    const calls = [];
    const onLoadProgress = (f) => {
      calls.push(f);
      if (throwAt(f)) throw thrown;
    };
    const e = await expectReject(() => loadModel(fixturePath('qwen3-sharded'), { onLoadProgress }), 'ABORTED', /onLoadProgress threw/, label);
    assert.equal(e.cause, thrown, `${label}: cause`);
    assert.equal(calls.filter(throwAt).length, 1, `${label}: called again after it threw: ${calls}`);
  }
  // Still alive and loading normally.
  const m = await loadModel(fixturePath('qwen3-sharded'));
  assert.equal(m.info.numLayers, 2);
  await m.dispose();
});
