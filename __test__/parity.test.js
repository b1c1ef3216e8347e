'use strict';
// Token-for-token parity with MLX-LM 0.32.2, run live (__test__/ref/mlx_lm_ref.py) on
// the fixture models: every sampler and logits processor, alone and combined, each
// seeded, over string, chat-message and raw-id inputs.
//
// XTC: mlx_lm_ref.py builds the sampler as MLX-LM's generate CLI and server do,
// xtc_special_tokens = tokenizer.encode("\n") + tokenizer.eos_token_ids, so those
// tokens are never removed by XTC. mlx-node must use the same list.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { runReference } = require('./ref/ref');
const { fixtures, model, disposeModels, assertSameGeneration, copyFixture, NO_EOS } = require('./helpers');

const STR = 'Hello, my name is';
const STR2 = 'The quick brown fox jumps over the lazy dog. Once upon a time, in a land far away,';
const CHAT = [{ role: 'user', content: 'What is the capital of France?' }];
const CHAT2 = [
  { role: 'system', content: 'You are a terse assistant.' },
  { role: 'user', content: 'Write a haiku about the sea. 海と空 🌊' },
];
// <|im_start|>user\n ... <|im_end|>\n<|im_start|>assistant\n with arbitrary ids in between.
const IDS = [151644, 872, 198, 9707, 11, 847, 829, 374, 1207, 17847, 13, 151645, 198, 151644, 77091, 198];
const IDS2 = [785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13, 220, 16, 17, 18];
// Longer than MLX-LM's prefill step (2048): the prompt is processed in chunks.
const LONG = 'The history of the city begins with a small village by the river. '.repeat(180);

// Options that change the distribution; a case using some of them on qwen3-f32 also
// runs in the reference without them (its "control"), and the test checks that they
// changed the output, so that each case really exercises its option. Cases on
// llama-dynamic have a control too: the same options on a copy of the model without
// rope_scaling (dynamic NTK RoPE only acts past max_position_embeddings, 16 there).
const FILTERS = ['topP', 'minP', 'minTokensToKeep', 'topK', 'xtcProbability', 'xtcThreshold', 'repetitionPenalty',
  'repetitionContextSize', 'presencePenalty', 'presenceContextSize', 'frequencyPenalty', 'frequencyContextSize', 'logitBias'];

const cases = [];
function add(name, model, input, options, control) {
  if (control === undefined && model === 'qwen3-f32' && FILTERS.some((k) => k in options)) {
    control = Object.fromEntries(Object.entries(options).filter(([k]) => !FILTERS.includes(k)));
  }
  const unscaled = control === undefined && model === 'llama-dynamic';
  cases.push({ name, model, input, options, control: (unscaled ? options : control) || null, unscaled });
}

// qwen3-f32: every option, alone and combined.
add('greedy, string', 'qwen3-f32', STR, { maxTokens: 32 });
add('greedy, chat', 'qwen3-f32', CHAT, { maxTokens: 32 });
add('greedy, ids', 'qwen3-f32', IDS, { maxTokens: 32 });
add('greedy, prompt longer than one prefill step', 'qwen3-f32', LONG, { maxTokens: 32 });
add('temperature', 'qwen3-f32', STR, { temperature: 0.8, seed: 1, maxTokens: 40 });
add('temperature 1, chat', 'qwen3-f32', CHAT2, { temperature: 1, seed: 7, maxTokens: 40 });
add('temperature 1.5, ids', 'qwen3-f32', IDS2, { temperature: 1.5, seed: 21, maxTokens: 40 });
add('top-p 0.9', 'qwen3-f32', STR, { temperature: 0.9, topP: 0.9, seed: 2, maxTokens: 32 });
add('top-p 0.5, ids', 'qwen3-f32', IDS, { temperature: 1.2, topP: 0.5, seed: 3, maxTokens: 32 });
add('min-p 0.1', 'qwen3-f32', CHAT, { temperature: 1, minP: 0.1, seed: 4, maxTokens: 40 });
add('min-p 0.3 with minTokensToKeep 3', 'qwen3-f32', STR2, { temperature: 1.5, minP: 0.3, minTokensToKeep: 3, seed: 5, maxTokens: 40 },
  { temperature: 1.5, minP: 0.3, seed: 5, maxTokens: 40 });
add('top-k 5', 'qwen3-f32', STR, { temperature: 1, topK: 5, seed: 6, maxTokens: 40 });
add('top-k 1 (greedy)', 'qwen3-f32', CHAT, { temperature: 1, topK: 1, seed: 6, maxTokens: 32 });
add('XTC 0.5 / 0.1', 'qwen3-f32', STR, { temperature: 1, xtcProbability: 0.5, xtcThreshold: 0.1, seed: 8, maxTokens: 40 });
add('XTC 1.0 / 0.05, chat', 'qwen3-f32', CHAT2, { temperature: 0.8, xtcProbability: 1, xtcThreshold: 0.05, seed: 9, maxTokens: 40 });
// Random-weight output rarely repeats a token, which would leave the penalties nothing
// to do: a +10 bias on the first 8 greedy tokens of STR (MLX-LM's, from the fixture
// index) makes the model come back to them, and the penalties push them away.
const G8 = fixtures().fixtures['qwen3-f32'].greedy.prompt.tokens.slice(0, 8);
const REPEAT = Object.fromEntries(G8.map((t) => [t, 10]));
add('repetition penalty, greedy', 'qwen3-f32', STR, { repetitionPenalty: 1.5, logitBias: REPEAT, maxTokens: 40 },
  { logitBias: REPEAT, maxTokens: 40 });
add('repetition penalty, context 3, greedy', 'qwen3-f32', STR, { repetitionPenalty: 1.5, repetitionContextSize: 3, logitBias: REPEAT, maxTokens: 40 },
  { repetitionPenalty: 1.5, logitBias: REPEAT, maxTokens: 40 });
add('repetition penalty, context 5, sampled', 'qwen3-f32', STR, { temperature: 0.8, repetitionPenalty: 1.3, repetitionContextSize: 5, logitBias: REPEAT, seed: 10, maxTokens: 48 },
  { temperature: 0.8, logitBias: REPEAT, seed: 10, maxTokens: 48 });
add('repetition penalty < 1', 'qwen3-f32', STR2, { repetitionPenalty: 0.5, maxTokens: 40 });
add('presence penalty, sampled', 'qwen3-f32', STR, { temperature: 0.8, presencePenalty: 1.5, logitBias: REPEAT, seed: 11, maxTokens: 48 },
  { temperature: 0.8, logitBias: REPEAT, seed: 11, maxTokens: 48 });
add('presence penalty, greedy, context 4', 'qwen3-f32', STR, { presencePenalty: 3, presenceContextSize: 4, logitBias: REPEAT, maxTokens: 40 },
  { presencePenalty: 3, logitBias: REPEAT, maxTokens: 40 });
add('frequency penalty, sampled', 'qwen3-f32', STR, { temperature: 0.8, frequencyPenalty: 1, logitBias: REPEAT, seed: 12, maxTokens: 48 },
  { temperature: 0.8, logitBias: REPEAT, seed: 12, maxTokens: 48 });
add('frequency penalty, greedy, context 3', 'qwen3-f32', STR, { frequencyPenalty: 2, frequencyContextSize: 3, logitBias: REPEAT, maxTokens: 40 },
  { frequencyPenalty: 2, logitBias: REPEAT, maxTokens: 40 });
add('penalties on chat input', 'qwen3-f32', CHAT, { temperature: 0.7, repetitionPenalty: 1.2, presencePenalty: 0.5, frequencyPenalty: 0.5, logitBias: REPEAT, seed: 19, maxTokens: 40 },
  { temperature: 0.7, logitBias: REPEAT, seed: 19, maxTokens: 40 });
add('logitBias, greedy', 'qwen3-f32', STR, { logitBias: { [G8[2]]: -100, [G8[6]]: 9, 13: -2.5 }, maxTokens: 32 });
add('logitBias, sampled', 'qwen3-f32', STR2, { temperature: 1, logitBias: { [G8[1]]: 9, [G8[4]]: 9.5, [G8[7]]: -50 }, seed: 14, maxTokens: 40 });
const ALL = {
  temperature: 0.9,
  topP: 0.95,
  minP: 0.05,
  minTokensToKeep: 2,
  topK: 40,
  repetitionPenalty: 1.1,
  repetitionContextSize: 10,
  presencePenalty: 0.5,
  frequencyPenalty: 0.3,
  logitBias: { ...REPEAT, 11: 1.5, 13: -1 },
  xtcProbability: 0.3,
  xtcThreshold: 0.15,
  seed: 13,
  maxTokens: 48,
};
add('all combined, string', 'qwen3-f32', STR, ALL);
add('all combined, chat', 'qwen3-f32', CHAT2, { ...ALL, seed: 15, maxTokens: 32 });
add('all combined, ids', 'qwen3-f32', IDS, { ...ALL, seed: 16, maxTokens: 32 });
// Stops on EOS after 28 tokens (in MLX-LM): finishReason 'stop', EOS not in tokens.
add('EOS reachable (bias towards <|im_end|>)', 'qwen3-f32', CHAT, { temperature: 0.8, logitBias: { 151645: 16 }, seed: 17, maxTokens: 48 });
add('EOS blocked by logitBias', 'qwen3-f32', STR2, { temperature: 1, topK: 50, seed: 18, maxTokens: 48, logitBias: NO_EOS }, false);

// Long seeded generations, 256 tokens with EOS blocked, several seeds, every kind of
// sampler on, in float32, bfloat16 and 4 bits: a difference in one draw's last bit
// anywhere on the way would show.
const LONG_OPTIONS = [
  { temperature: 0.8, topP: 0.95, minP: 0.02, topK: 100 },
  { temperature: 1, topK: 40, xtcProbability: 0.5, xtcThreshold: 0.1, repetitionPenalty: 1.1, presencePenalty: 0.3, frequencyPenalty: 0.2 },
  { temperature: 0.7, minP: 0.05, repetitionPenalty: 1.05, repetitionContextSize: 40 },
];
[['qwen3-f32', 101], ['qwen3-f32', 102], ['qwen3-f32', 103], ['qwen3-bf16', 104], ['qwen3-bf16', 105], ['qwen3-q4', 106], ['qwen3-q4', 107]].forEach(([name, seed], i) => {
  add(`long seeded generation, seed ${seed}`, name, i % 2 ? CHAT2 : STR2, { ...LONG_OPTIONS[i % 3], logitBias: NO_EOS, seed, maxTokens: 256 }, false);
});

// Other families, dtypes, quantizations and layouts: greedy on two inputs and one
// sampled case each (top-p/min-p or top-k/XTC/penalties, alternating; top-p sorts the
// whole vocabulary every step, which is slow on a CPU on both sides).
const OTHERS = ['llama-f32', 'qwen2-f32', 'qwen3-bf16', 'qwen3-q4', 'qwen3-q8', 'qwen3-q4-mixed', 'qwen3-sharded', 'mistral-f32', 'llama-linear',
  'llama-dynamic', 'qwen3-f16', 'qwen3-bf16-q4', 'qwen3-bf16-q6', 'qwen3-nvfp4', 'qwen3-mxfp8'];
OTHERS.forEach((name, i) => {
  const seed = 31 + i;
  add('greedy, string', name, STR, { maxTokens: 32 });
  add('greedy, chat', name, CHAT2, { maxTokens: 32 });
  if (i % 2 === 0) {
    add('top-p + min-p, ids', name, IDS, { temperature: 0.9, topP: 0.9, minP: 0.05, seed, maxTokens: 32 });
  } else {
    add('penalties + top-k + XTC, string', name, STR, {
      temperature: 1,
      logitBias: REPEAT,
      topK: 20,
      xtcProbability: 0.5,
      xtcThreshold: 0.1,
      repetitionPenalty: 1.2,
      repetitionContextSize: 5,
      presencePenalty: 0.4,
      frequencyPenalty: 0.2,
      seed,
      maxTokens: 32,
    });
  }
});
add('greedy, prompt longer than one prefill step', 'llama-linear', LONG, { maxTokens: 32 });
add('greedy, prompt longer than one prefill step', 'qwen3-q4', LONG, { maxTokens: 32 });
// Each prefill chunk has its own dynamic RoPE base (it depends on the chunk's end).
add('greedy, prompt longer than one prefill step', 'llama-dynamic', LONG, { maxTokens: 32 });

// PARITY_SUBSET=1 (the per-core-type runs in `npm test`, `npm run test:cpus -- --subset`):
// greedy and every sampler on float32, the long seeded runs, and one greedy and one
// sampled case of bfloat16, 4-bit and another family.
if (process.env.PARITY_SUBSET === '1') {
  const keep = (c) =>
    c.name.startsWith('long seeded') ||
    (c.model === 'qwen3-f32' && /^(greedy|temperature |top-p 0.9|min-p 0.1|top-k 5|XTC 0.5|all combined, string|EOS reachable)/.test(c.name)) ||
    (['qwen3-bf16', 'qwen3-q4', 'llama-f32'].includes(c.model) && !c.name.startsWith('greedy, chat') && !c.name.includes('longer than'));
  cases.splice(0, cases.length, ...cases.filter(keep));
}

let refs;
let unscaled;
test.before(async () => {
  fixtures();
  unscaled = copyFixture('llama-dynamic');
  const configPath = path.join(unscaled, 'config.json');
  const config = JSON.parse(fs.readFileSync(configPath, 'utf8'));
  delete config.rope_scaling;
  fs.writeFileSync(configPath, JSON.stringify(config));
  const withControls = cases.filter((c) => c.control);
  const all = await runReference([
    ...cases.map((c) => ({ model: c.model, input: c.input, options: c.options })),
    ...withControls.map((c) => ({ model: c.unscaled ? unscaled : c.model, input: c.input, options: c.control })),
  ]);
  refs = all.slice(0, cases.length);
  withControls.forEach((c, i) => {
    c.controlRef = all[cases.length + i];
  });
});
test.after(async () => {
  await disposeModels();
  if (unscaled) fs.rmSync(unscaled, { recursive: true, force: true });
});

test('the reference run is itself meaningful (varied output, mostly no early EOS)', () => {
  const failed = refs.filter((r) => r.error);
  assert.deepEqual(failed, [], 'reference cases failed');
  for (let i = 0; i < cases.length; i++) {
    const c = cases[i];
    const r = refs[i];
    if (c.options.temperature === undefined && !c.name.includes('EOS')) {
      assert.equal(r.finishReason, 'length', `${c.model} ${c.name}: greedy reference stopped early`);
    }
    assert.ok(new Set(r.tokens).size >= Math.min(8, r.tokens.length), `${c.model} ${c.name}: degenerate reference output`);
  }
  // Each option (or the rope scaling) changed MLX-LM's output against the same case without it.
  for (let i = 0; i < cases.length; i++) {
    const c = cases[i];
    if (!c.control) continue;
    assert.ok(!c.controlRef.error, `${c.name} control: ${c.controlRef.error}`);
    const without = c.unscaled ? 'rope_scaling' : `${JSON.stringify(c.options)} -> ${JSON.stringify(c.control)}`;
    assert.notDeepEqual(refs[i].tokens, c.controlRef.tokens, `${c.model} ${c.name}: same output as without ${without}`);
  }
  // The biased case really ends on EOS.
  const eosCase = cases.findIndex((c) => c.name.startsWith('EOS reachable'));
  assert.equal(refs[eosCase].finishReason, 'stop');
});

for (let i = 0; i < cases.length; i++) {
  const c = cases[i];
  const inputKind = typeof c.input === 'string' ? 'string' : typeof c.input[0] === 'number' ? 'ids' : 'chat';
  test(`${c.model}: ${c.name} [${inputKind}] ${JSON.stringify(c.options)}`, async () => {
    const m = await model(c.model);
    const got = await m.generate(c.input, c.options);
    assertSameGeneration(got, refs[i], `${c.model} ${c.name}`);
    assert.equal(got.tokens.length <= c.options.maxTokens, true);
    if (got.finishReason === 'length') assert.equal(got.tokens.length, c.options.maxTokens);
  });
}

test('the same seed twice gives the same tokens; another seed other tokens', async () => {
  const m = await model('qwen3-f32');
  const o = { temperature: 1, topK: 50, maxTokens: 32 };
  const a = await m.generate(STR, { ...o, seed: 123 });
  const b = await m.generate(STR, { ...o, seed: 123 });
  const c = await m.generate(STR, { ...o, seed: 124 });
  assert.deepEqual(a.tokens, b.tokens);
  assert.notDeepEqual(a.tokens, c.tokens);
});

test('result statistics are consistent', async () => {
  const m = await model('qwen3-f32');
  const r = await m.generate(CHAT, { maxTokens: 16 });
  assert.equal(r.tokens.length, 16);
  assert.equal(r.generationTokens, 16);
  assert.equal(r.promptTokens, m.encode(m.applyChatTemplate(CHAT, { addGenerationPrompt: true }), { addSpecialTokens: false }).length);
  assert.ok(r.promptTps > 0 && Number.isFinite(r.promptTps), `promptTps ${r.promptTps}`);
  assert.ok(r.generationTps > 0 && Number.isFinite(r.generationTps), `generationTps ${r.generationTps}`);
  assert.ok(Number.isInteger(r.peakMemory) && r.peakMemory > 0, `peakMemory ${r.peakMemory}`);
});
