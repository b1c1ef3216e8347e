'use strict';
// Continuous batching (lm::batch::Scheduler behind every generate()/stream()):
// concurrent calls on one model are decoded together, each with its own options,
// seed, stop strings, cache and abort, and each gives the answer it gives alone
// (itself MLX-LM's, parity.test.js). Solo answers are bit-identical to MLX-LM's;
// in a batch only the reduction order of the shared matrix products may differ,
// which on these prompts changes no token.
const test = require('node:test');
const assert = require('node:assert/strict');
const { loadModel } = require('..');
const { fixturePath, expectReject } = require('./helpers');

const PROMPTS = [
  ['Hello, my name is', { maxTokens: 16 }],
  ['The quick brown fox', { maxTokens: 24, temperature: 0.8, topK: 50, seed: 11 }],
  [[{ role: 'user', content: 'What is the capital of France?' }], { maxTokens: 12 }],
  ['1, 2, 3,', { maxTokens: 20, temperature: 1, seed: 5, logprobs: true, topLogprobs: 2 }],
  ['def main():', { maxTokens: 8, repetitionPenalty: 1.3 }],
  ['Paris is', { maxTokens: 16, temperature: 0.7, topP: 0.9, seed: 2 }],
  ['Once upon a time, in a land far away,', { maxTokens: 10, stop: ['zz'] }],
  ['In 1492,', { maxTokens: 18, temperature: 0.9, minP: 0.05, seed: 9 }],
];

let model;
let solo;

// Streams `prompts` concurrently on `m`; resolves to their results and the order in
// which each got its first chunk and finished.
async function streamOrder(m, prompts) {
  const order = [];
  const results = await Promise.all(
    prompts.map(async ([input, options], i) => {
      const s = m.stream(input, options);
      let first = true;
      for await (const c of s) {
        void c;
        if (first) order.push(`first ${i}`);
        first = false;
      }
      order.push(`done ${i}`);
      return s.result;
    })
  );
  return { order, results };
}
test.before(async () => {
  model = await loadModel(fixturePath('qwen3-f32'), { maxBatch: 8 });
  solo = [];
  for (const [input, options] of PROMPTS) solo.push(await model.generate(input, options));
});
test.after(async () => {
  await model?.dispose();
});

test('8 concurrent generate() calls each give their solo answer', async () => {
  const got = await Promise.all(PROMPTS.map(([input, options]) => model.generate(input, options)));
  got.forEach((r, i) => {
    assert.deepEqual(r.tokens, solo[i].tokens, `request ${i}`);
    assert.equal(r.text, solo[i].text, `request ${i}`);
    assert.equal(r.finishReason, solo[i].finishReason);
  });
  assert.deepEqual(got[3].logprobs.map((l) => l.top.map((t) => t.token)), solo[3].logprobs.map((l) => l.top.map((t) => t.token)));
});

test('they are decoded together: every stream has its first chunk before any has finished', async () => {
  const { order } = await streamOrder(model, PROMPTS.slice(0, 4).map(([input, options]) => [input, { ...options, maxTokens: 32 }]));
  const lastFirst = Math.max(...order.map((e, k) => (e.startsWith('first') ? k : -1)));
  const firstDone = order.findIndex((e) => e.startsWith('done'));
  assert.ok(lastFirst < firstDone, `events: ${order.join(', ')}`);
});

// The strict order (no chunk of a later request before an earlier one is done) is
// asserted in crates/lm/tests/integration/batch.rs: here each job's events come
// through its own poll, so one job's end and the next one's first chunk may reach
// JavaScript in either order.
test('maxBatch 1 runs them one after another, with the same answers; a queued request aborted while it waits never starts', async () => {
  const one = await loadModel(fixturePath('qwen3-f32'), { maxBatch: 1 });
  try {
    const { results: got } = await streamOrder(one, PROMPTS.slice(0, 3));
    got.forEach((r, i) => assert.deepEqual(r.tokens, solo[i].tokens));
    // The second waits behind the first; both are aborted at the first's eighth chunk,
    // long before its 400 tokens are done, so the second is aborted before it starts
    // (batched, it would have tokens by then: 5-6 measured with maxBatch 8).
    const [acA, acB] = [new AbortController(), new AbortController()];
    let n = 0;
    const onTextChunk = () => {
      if (++n < 8) return;
      acB.abort();
      acA.abort();
    };
    const pa = one.generate(PROMPTS[0][0], { maxTokens: 400, signal: acA.signal, stopOnAbortSignal: true, onTextChunk });
    const pb = one.generate(PROMPTS[2][0], { maxTokens: 8, signal: acB.signal, stopOnAbortSignal: true });
    const [a, rb] = await Promise.all([pa, pb]);
    assert.equal(a.finishReason, 'abort');
    assert.ok(a.tokens.length < 400);
    assert.equal(rb.finishReason, 'abort');
    assert.deepEqual(rb.tokens, []);
  } finally {
    await one.dispose();
  }
  await expectReject(() => loadModel(fixturePath('qwen3-f32'), { maxBatch: 0 }), 'INVALID_ARGUMENT', /maxBatch/);
  await expectReject(() => loadModel(fixturePath('qwen3-f32'), { maxBatch: 1.5 }), 'INVALID_ARGUMENT', /maxBatch/);
});

test('an abort or a break ends only its own sequence', async () => {
  const ac = new AbortController();
  const aborted = model.generate(PROMPTS[1][0], { ...PROMPTS[1][1], maxTokens: 200, signal: ac.signal, stopOnAbortSignal: true, onTextChunk: () => ac.abort() });
  const broken = (async () => {
    let n = 0;
    for await (const c of model.stream(PROMPTS[3][0], { ...PROMPTS[3][1], maxTokens: 200 })) {
      void c;
      if (++n === 2) break;
    }
    return n;
  })();
  const others = [0, 2, 4, 6].map((i) => model.generate(...PROMPTS[i]));
  const a = await aborted;
  assert.equal(a.finishReason, 'abort');
  assert.ok(a.tokens.length < 200);
  assert.deepEqual(a.tokens, solo[1].tokens.slice(0, a.tokens.length));
  assert.equal(await broken, 2);
  const rs = await Promise.all(others);
  [0, 2, 4, 6].forEach((i, k) => assert.deepEqual(rs[k].tokens, solo[i].tokens, `request ${i}`));
});

test('sequences on their own prompt caches join the batch; one cache serves its calls in order', async () => {
  const a = model.createPromptCache();
  const b = model.createPromptCache();
  const [ra, rb, ra2] = await Promise.all([
    model.generate(PROMPTS[0][0], { ...PROMPTS[0][1], promptCache: a }),
    model.generate(PROMPTS[2][0], { ...PROMPTS[2][1], promptCache: b }),
    model.generate(PROMPTS[0][0], { ...PROMPTS[0][1], promptCache: a }),
  ]);
  assert.deepEqual(ra.tokens, solo[0].tokens);
  assert.deepEqual(rb.tokens, solo[2].tokens);
  assert.deepEqual(ra2.tokens, solo[0].tokens);
  // The second call on `a` ran after the first, on what it left: all of the prompt but its last token was cached.
  assert.equal(ra2.cachedTokens, ra.promptTokens - 1);
  a.dispose();
  b.dispose();
});

// The check on a trained model (random weights rarely have close calls; a trained model's
// greedy answers are the real thing): SmolLM2-135M-Instruct as its GGUF ships (Q4_1, in fast
// precision, the default: the int8 quantized-matmul and decode-attention kernels) and in float32
// (on the gemv kernel), 8 chats at once equal to alone.
test('a trained model: 8 greedy chats at once give their solo answers (SmolLM2, Q4_1 and float32)', async () => {
  const { ensureSmolLM2 } = require('../scripts/smollm2');
  const file = ensureSmolLM2();
  const questions = [
    'What is the capital of France?',
    'Name three colors of the rainbow.',
    'How many legs does a spider have?',
    'Write a haiku about the sea.',
    'What is 12 times 12?',
    'Who wrote Romeo and Juliet?',
    'Give me a synonym for happy.',
    'Why is the sky blue?',
  ];
  const options = { maxTokens: 32 };
  for (const dtype of [undefined, 'float32']) {
    const m = await loadModel(file, { maxBatch: 8, ...(dtype ? { dtype } : {}) });
    try {
      const chats = questions.map((q) => [{ role: 'user', content: q }]);
      const alone = [];
      for (const c of chats) alone.push(await m.generate(c, options));
      const together = await Promise.all(chats.map((c) => m.generate(c, options)));
      together.forEach((r, i) => assert.deepEqual(r.tokens, alone[i].tokens, `${dtype ?? 'Q4_1'}: ${questions[i]}`));
      assert.match(alone[0].text, /Paris/);
    } finally {
      await m.dispose();
    }
  }
});
