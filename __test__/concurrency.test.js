'use strict';
// Concurrent calls are queued, never mixed: each gets exactly the tokens it gets
// alone; the event loop keeps running during generation; several models coexist.
const test = require('node:test');
const assert = require('node:assert/strict');
const { loadModel } = require('..');
const { fixtures, fixturePath, model, disposeModels, NO_EOS } = require('./helpers');

const M = 'qwen3-f32';
const CALLS = [
  ['greedy, string', 'Hello, my name is', { maxTokens: 32 }],
  ['top-k sampled, chat', [{ role: 'user', content: 'Tell me a story.' }], { temperature: 0.8, topK: 50, seed: 1, maxTokens: 32 }],
  ['top-p sampled, ids', [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198], { temperature: 1, topP: 0.9, seed: 2, maxTokens: 32 }],
  ['penalties + min-p', 'The quick brown fox', { temperature: 0.9, minP: 0.1, repetitionPenalty: 1.3, presencePenalty: 0.5, seed: 3, maxTokens: 40 }],
];

test.before(() => fixtures());
test.after(disposeModels);

function summary(r) {
  return { tokens: r.tokens, text: r.text, finishReason: r.finishReason, promptTokens: r.promptTokens };
}

test('4 concurrent generate() calls with different options each get their solo tokens', async () => {
  const m = await model(M);
  const alone = [];
  for (const [, input, options] of CALLS) alone.push(summary(await m.generate(input, options)));
  // Sanity: the calls differ from each other.
  assert.equal(new Set(alone.map((a) => JSON.stringify(a.tokens))).size, CALLS.length);
  const together = await Promise.all(CALLS.map(([, input, options]) => m.generate(input, options)));
  together.forEach((r, i) => assert.deepEqual(summary(r), alone[i], CALLS[i][0]));
  // And again, as interleaved streams consumed at once.
  const streams = CALLS.map(([, input, options]) => m.stream(input, options));
  const texts = await Promise.all(
    streams.map(async (s) => {
      let t = '';
      for await (const c of s) t += c.text;
      return t;
    })
  );
  for (let i = 0; i < CALLS.length; i++) {
    assert.equal(texts[i], alone[i].text, `stream ${CALLS[i][0]}`);
    assert.deepEqual(summary(await streams[i].result), alone[i], `stream ${CALLS[i][0]} .result`);
  }
});

test('aborting one of several concurrent calls leaves the others intact', async () => {
  const m = await model(M);
  const alone = [];
  for (const [, input, options] of CALLS.slice(0, 2)) alone.push(summary(await m.generate(input, options)));
  const ac = new AbortController();
  const reason = new Error('only this one');
  let n = 0;
  const victim = m.generate('Abort me', {
    maxTokens: 1000,
    logitBias: NO_EOS,
    signal: ac.signal,
    onTextChunk: () => {
      if (++n === 2) ac.abort(reason);
    },
  });
  const others = CALLS.slice(0, 2).map(([, input, options]) => m.generate(input, options));
  await assert.rejects(victim, (e) => e === reason);
  const results = await Promise.all(others);
  results.forEach((r, i) => assert.deepEqual(summary(r), alone[i], CALLS[i][0]));
});

test('the event loop keeps ticking during a 64-token generation (demo model)', async (t) => {
  const m = await model('demo');
  await m.generate('warm up', { maxTokens: 2 });
  let ticks = 0;
  let last = performance.now();
  let maxGap = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    maxGap = Math.max(maxGap, now - last);
    last = now;
    ticks++;
  }, 5);
  const t0 = performance.now();
  let r;
  try {
    r = await m.generate('Once upon a time', { maxTokens: 64, logitBias: NO_EOS });
  } finally {
    clearInterval(timer);
  }
  const ms = performance.now() - t0;
  t.diagnostic(`${ticks} ticks of a 5 ms interval in ${ms.toFixed(0)} ms; longest gap ${maxGap.toFixed(1)} ms`);
  assert.equal(r.tokens.length, 64);
  // A 5 ms interval over the generation; allow for a busy 2-core machine.
  assert.ok(ticks >= Math.max(3, (ms / 5) * 0.2), `${ticks} ticks in ${ms.toFixed(0)} ms`);
  assert.ok(maxGap < 250, `the event loop stalled for ${maxGap.toFixed(0)} ms (generation took ${ms.toFixed(0)} ms)`);
});

test('two (three) models loaded at once generate correctly, concurrently', async () => {
  const names = ['qwen3-f32', 'llama-f32', 'mistral-f32'];
  const models = await Promise.all(names.map((n) => loadModel(fixturePath(n))));
  try {
    assert.deepEqual(models.map((m) => m.info.modelType), ['qwen3', 'llama', 'mistral']);
    const idx = fixtures().fixtures;
    const results = await Promise.all(
      models.map((m, i) => {
        const g = idx[names[i]].greedy;
        return Promise.all([m.generate(g.promptText, { maxTokens: g.maxTokens }), m.generate(g.messages, { maxTokens: g.maxTokens })]);
      })
    );
    results.forEach(([p, c], i) => {
      const g = idx[names[i]].greedy;
      assert.deepEqual(p.tokens, g.prompt.tokens, `${names[i]} prompt (MLX-LM tokens recorded with the fixture)`);
      assert.deepEqual(c.tokens, g.chat.tokens, `${names[i]} chat`);
    });
  } finally {
    await Promise.all(models.map((m) => m.dispose()));
  }
});
