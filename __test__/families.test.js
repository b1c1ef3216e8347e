'use strict';
// Model families beyond the shared decoder, each against MLX-LM 0.32.2 run live on fixtures
// written through MLX-LM's own model class (scripts/fixtures.py) with the family's real
// tokenizer: greedy and seeded tokens for prompts shorter and longer than every sliding window,
// in the dtypes and quantizations people use; the chat template rendered as transformers does;
// a conversation kept in a prompt cache.
//
// Gemma 3 (gemma3_text): sliding window 8 (every other layer), so the rotating caches wrap both
// during a long prompt and while decoding.
const test = require('node:test');
const assert = require('node:assert/strict');
const { runReference } = require('./ref/ref');
const { fixtures, model, disposeModels, assertSameGeneration } = require('./helpers');

const SHORT = 'Hello';
const STR = 'The quick brown fox jumps over the lazy dog. Once upon a time, in a land far away,';
// Longer than MLX-LM's prefill step (2048 tokens): prefilled in chunks, each past the window.
const LONG = 'The history of the city begins with a small village by the river. '.repeat(170);
const CHAT = [{ role: 'user', content: 'What is the capital of France?' }];
const CHAT2 = [
  { role: 'system', content: 'You are a terse assistant.' },
  { role: 'user', content: 'Write a haiku about the sea. 海と空 🌊' },
  { role: 'assistant', content: 'Waves fold into foam.' },
  { role: 'user', content: 'Another, please.' },
];

const cases = [];
for (const m of ['gemma3-f32', 'gemma3-bf16-q4', 'gemma3-q8']) {
  cases.push({ m, label: 'greedy, prompt shorter than the window', input: SHORT, options: { maxTokens: 24 } });
  cases.push({ m, label: 'greedy, prompt longer than the window', input: STR, options: { maxTokens: 24 } });
  cases.push({ m, label: 'seeded, chat', input: CHAT2, options: { maxTokens: 24, temperature: 0.9, topP: 0.9, seed: 11 } });
}
cases.push({ m: 'gemma3-f32', label: 'greedy, chat', input: CHAT, options: { maxTokens: 32 } });
cases.push({ m: 'gemma3-f32', label: 'greedy, prompt longer than one prefill step', input: LONG, options: { maxTokens: 16 } });
cases.push({ m: 'gemma3-f32', label: 'seeded, top-k and min-p', input: STR, options: { maxTokens: 24, temperature: 1, topK: 20, minP: 0.05, seed: 3 } });

let refs;
let templates;
let cached;
test.before(async () => {
  const f = fixtures();
  const path = (name) => f.fixtures[name].path;
  const all = await runReference([
    ...cases.map((c) => ({ model: path(c.m), input: c.input, options: c.options })),
    { mode: 'chat_template', model: path('gemma3-f32'), messages: CHAT2, addGenerationPrompt: true },
    { mode: 'chat_template', model: path('gemma3-f32'), messages: CHAT, addGenerationPrompt: false },
    {
      mode: 'cached',
      model: path('gemma3-f32'),
      cache: {},
      turns: [{ input: CHAT, options: { maxTokens: 12 } }, { extend: STR, options: { maxTokens: 12 } }],
    },
  ]);
  refs = all.slice(0, cases.length);
  templates = all.slice(cases.length, cases.length + 2);
  cached = all[cases.length + 2];
});
test.after(disposeModels);

test('the references are meaningful (no early EOS, varied output)', () => {
  for (let i = 0; i < cases.length; i++) {
    const r = refs[i];
    assert.ok(!r.error, `${cases[i].m} ${cases[i].label}: ${r.error}`);
    if (!cases[i].options.temperature) assert.equal(r.finishReason, 'length', `${cases[i].m} ${cases[i].label}`);
    assert.ok(new Set(r.tokens).size >= 6, `${cases[i].m} ${cases[i].label}: degenerate reference`);
  }
});

for (let i = 0; i < cases.length; i++) {
  const c = cases[i];
  test(`${c.m}: ${c.label} equals MLX-LM`, async () => {
    const got = await (await model(c.m)).generate(c.input, c.options);
    assertSameGeneration(got, refs[i], `${c.m} ${c.label}`);
  });
}

test('gemma3: the model reports its family', async () => {
  const info = (await model('gemma3-f32')).info;
  assert.equal(info.modelType, 'gemma3_text');
  assert.equal(info.numLayers, 4);
  assert.equal(info.vocabSize, 262144);
  assert.deepEqual((await model('gemma3-bf16-q4')).info.quantization, { bits: 4, groupSize: 64 });
});

test("gemma3: Gemma's chat template renders as in transformers", async () => {
  const m = await model('gemma3-f32');
  assert.equal(m.applyChatTemplate(CHAT2, { addGenerationPrompt: true }), templates[0].text);
  assert.equal(m.applyChatTemplate(CHAT, { addGenerationPrompt: false }), templates[1].text);
  assert.match(templates[0].text, /<start_of_turn>model\n$/);
});

test('gemma3: a conversation kept in a prompt cache equals MLX-LM with its prompt cache', async () => {
  assert.ok(!cached.error, cached.error);
  const m = await model('gemma3-f32');
  const cache = m.createPromptCache();
  const first = await m.generate(CHAT, { maxTokens: 12, promptCache: cache });
  assert.deepEqual(first.tokens, cached.turns[0].tokens);
  // The second turn continues the held tokens; the sliding layers have wrapped, so what the
  // cache serves is what MLX-LM's rotating caches serve.
  const second = await m.generate(cached.turns[1].input, { maxTokens: 12, promptCache: cache });
  assert.deepEqual(second.tokens, cached.turns[1].tokens);
  assert.equal(second.cachedTokens, cached.turns[1].cachedTokens);
  cache.dispose();
});
