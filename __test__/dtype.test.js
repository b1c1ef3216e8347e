'use strict';
// The `dtype` load option casts the weights to another compute dtype: qwen3-f32
// loaded as bfloat16 must generate exactly what MLX-LM generates from qwen3-bf16,
// which the test setup writes as the same weights cast to bfloat16.
const test = require('node:test');
const assert = require('node:assert/strict');
const { loadModel } = require('..');
const { runReference } = require('./ref/ref');
const { fixturePath, assertSameGeneration } = require('./helpers');

test('loadModel(dtype: bfloat16) on f32 weights matches MLX-LM on the bf16 copy', async () => {
  const cases = [
    { input: 'Hello, my name is', options: { maxTokens: 32 } },
    { input: [{ role: 'user', content: 'What is the capital of France?' }], options: { maxTokens: 32, temperature: 0.8, topP: 0.9, seed: 3 } },
  ];
  const ref = await runReference(cases.map((c) => ({ model: fixturePath('qwen3-bf16'), ...c })));
  const m = await loadModel(fixturePath('qwen3-f32'), { dtype: 'bfloat16' });
  try {
    assert.equal(m.info.dtype, 'bfloat16');
    for (let i = 0; i < cases.length; i++) {
      assert.ok(!ref[i].error, ref[i].error);
      const got = await m.generate(cases[i].input, cases[i].options);
      assertSameGeneration(got, ref[i], `case ${i}`);
    }
  } finally {
    await m.dispose();
  }
  const native = await loadModel(fixturePath('qwen3-bf16'));
  assert.equal(native.info.dtype, 'bfloat16', 'without dtype the weights keep their own');
  await native.dispose();
});
