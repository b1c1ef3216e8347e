'use strict';
// Many short generations do not leak: RSS grows by less than 50 MB over 500 runs
// after a warm-up of 50.
const test = require('node:test');
const assert = require('node:assert/strict');
const { fixtures, model, disposeModels } = require('./helpers');

test.before(() => fixtures());
test.after(disposeModels);

const MB = 1024 * 1024;

test('500 short generations: RSS growth under 50 MB after warm-up', { timeout: 300_000 }, async (t) => {
  const m = await model('qwen3-f32');
  const inputs = [
    ['Hello, my name is', {}],
    [[{ role: 'user', content: 'Hi' }], { temperature: 0.8, topK: 20 }],
    [[9707, 11, 847, 829, 374], { temperature: 1, minP: 0.1, repetitionPenalty: 1.2 }],
  ];
  const run = async (i) => {
    const [input, options] = inputs[i % inputs.length];
    const r = await m.generate(input, { ...options, maxTokens: 4, seed: i });
    assert.equal(r.tokens.length, 4);
    return r;
  };
  const first = await m.generate('Hello, my name is', { maxTokens: 4 });
  for (let i = 0; i < 50; i++) await run(i);
  global.gc?.();
  const before = process.memoryUsage().rss;
  for (let i = 0; i < 500; i++) {
    await run(i);
    // Streams too, including one left early.
    if (i % 50 === 0) {
      for await (const _ of m.stream('Hello', { maxTokens: 4 })) break; // eslint-disable-line no-unused-vars
    }
  }
  global.gc?.();
  const after = process.memoryUsage().rss;
  const growth = (after - before) / MB;
  t.diagnostic(`RSS ${(before / MB).toFixed(1)} MB -> ${(after / MB).toFixed(1)} MB (${growth.toFixed(1)} MB) over 500 generations`);
  assert.ok(growth < 50, `RSS grew by ${growth.toFixed(1)} MB (from ${(before / MB).toFixed(0)} to ${(after / MB).toFixed(0)} MB)`);
  // Still the same answer.
  assert.deepEqual((await m.generate('Hello, my name is', { maxTokens: 4 })).tokens, first.tokens);
});
