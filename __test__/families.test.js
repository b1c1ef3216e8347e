'use strict';
// Model families beyond the shared decoder, each against MLX-LM 0.32.2 run live on fixtures
// written through MLX-LM's own model class (scripts/fixtures.py) with the family's real
// tokenizer: greedy and seeded tokens for prompts shorter and longer than every sliding window,
// in the dtypes and quantizations people use; the chat template rendered as transformers does
// (each family's own, from scripts/chat-templates.js, in folders beside their fixtures); a
// conversation kept in a prompt cache.
//
// Qwen3-MoE (qwen3_moe): experts by gather_mm / gather_qmm.
// Phi-3 (phi3): fused qkv and gate_up, partial rotary, LongRoPE.
// Ministral 3 (ministral3, mistral3): sliding layers, YaRN, position-scaled queries.
// GPT-OSS (gpt_oss): attention sinks, biased top-k-softmax experts, MXFP4 experts (MLX's mxfp4 mode)
// as MLX-community and OpenAI ship them.
// SmolLM3 (smollm3): layers without RoPE.
// Gemma 3 (gemma3_text): sliding window 8 (every other layer), so the rotating caches wrap both
// during a long prompt and while decoding.
// LFM2 (lfm2): gated short convolutions between attention layers; the convolution state carried
// across prefill chunks, decode steps and turns.
// Qwen3.5 (qwen3_5, qwen3_5_moe): Gated DeltaNet layers (convolution and recurrent state carried
// the same way) between gated attention layers; dense and with experts plus a shared expert.
// Gemma 4 (gemma4_text, gemma4): sliding window 8 and full layers with wider heads and proportional
// RoPE, the last two layers attending over earlier layers' keys and values (no caches of their own),
// per-layer inputs, soft-capped logits; and a mixture of experts beside the MLP with values from the
// keys on full layers.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { loadModel } = require('..');
const { runReference } = require('./ref/ref');
const { fixtures, model, disposeModels, assertSameGeneration, copyFixture, fixturePath, expectReject, expectThrow, venvPython, useFamilyFixtures } = require('./helpers');

// Every family beyond the shared decoder: their fixtures are a set of their own (scripts/fixtures.js).
useFamilyFixtures();
const { ensureChatTemplates } = require('../scripts/chat-templates');
const tc = require('./template-cases');

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

const QUANTIZED = ['qwen3-moe-bf16-q8', 'phi3-bf16-q8', 'gpt-oss-bf16-q8', 'smollm3-bf16-q8', 'smollm3-bf16-q4', 'ministral3-bf16-q8',
  'ministral3-bf16-q4', 'lfm2-bf16-q8', 'qwen3_5-bf16-q8', 'qwen3_5-moe-bf16-q8', 'gemma4-q8', 'gemma4-moe-bf16-q8'];
const BF16 = ['gemma3-bf16', 'phi3-bf16', 'smollm3-bf16', 'ministral3-bf16', 'lfm2-bf16', 'qwen3_5-bf16'];

// The prompt-cache kinds (createPromptCache's options, MLX-LM's generate_step(max_kv_size=,
// kv_bits=, kv_group_size=, quantized_kv_start=)), per family: a two-turn conversation on one
// cache, the second turn continuing the first's tokens (EXT after them).
// - maxKvSize 16: past it during the first turn. Qwen3-MoE, Phi-3 and SmolLM3 get MLX-LM's
//   RotatingKVCache(16, keep 4) on every layer; the families whose MLX-LM model makes its own
//   caches (make_cache: sliding-window, convolution and recurrent layers) keep them, as
//   make_prompt_cache ignores max_kv_size for them.
// - kvBits 4 from position 8, groups of 32: on the fixtures with 32-wide heads (MLX quantizes in
//   groups of 32 at least along the head), each KVCache layer becomes a QuantizedKVCache; LFM2's
//   and Qwen3.5's convolution and recurrent layers stay as they are (no to_quantized).
// - kvBits on a model with sliding-window layers: MLX-LM raises (RotatingKVCache has no quantized
//   form), so createPromptCache refuses it.
const EXT = [11, 847, 2000, 3000, 4000];
const ROTATING = { maxKvSize: 16 };
const QUANTIZED_KV = { kvBits: 4, kvGroupSize: 32, quantizedKvStart: 8 };
const CACHE_KINDS = [
  ...['gemma3-f32', 'qwen3-moe-f32', 'phi3-f32', 'gpt-oss-f32', 'smollm3-f32', 'ministral3-f32', 'lfm2-f32', 'qwen3_5-f32', 'qwen3_5-moe-f32',
    'gemma4-f32', 'gemma4-moe-f32'].map((m) => ({ m, cache: ROTATING })),
  ...['qwen3-moe-h32', 'phi3-h32', 'smollm3-h32', 'lfm2-h32', 'qwen3_5-h32'].map((m) => ({ m, cache: QUANTIZED_KV })),
];
const NO_QUANTIZED_KV = ['gemma3-f32', 'gpt-oss-f32', 'ministral3-f32', 'gemma4-f32'];
const cacheTurns = [{ input: STR, options: { maxTokens: 16 } }, { extend: EXT, options: { maxTokens: 12 } }];

const cases = [];
for (const m of ['gemma3-f32', 'gemma3-bf16-q4', 'gemma3-q8']) {
  cases.push({ m, label: 'greedy, prompt shorter than the window', input: SHORT, options: { maxTokens: 24 } });
  cases.push({ m, label: 'greedy, prompt longer than the window', input: STR, options: { maxTokens: 24 } });
  cases.push({ m, label: 'seeded, chat', input: CHAT2, options: { maxTokens: 24, temperature: 0.9, topP: 0.9, seed: 11 } });
}
cases.push({ m: 'gemma3-f32', label: 'greedy, chat', input: CHAT, options: { maxTokens: 32 } });
// Qwen3-MoE: prompts whose (token, expert) pairs are fewer and more than 64 (MLX-LM sorts them
// by expert from 64 on), f32, bf16 with 4-bit experts and 8-bit router gates, and Hugging
// Face's per-expert layout.
for (const m of ['qwen3-moe-f32', 'qwen3-moe-q4']) {
  cases.push({ m, label: 'greedy, short prompt', input: SHORT, options: { maxTokens: 24 } });
  cases.push({ m, label: 'greedy, prompt of more than 32 tokens', input: LONG.slice(0, 400), options: { maxTokens: 24 } });
  cases.push({ m, label: 'seeded, chat', input: CHAT2, options: { maxTokens: 24, temperature: 0.9, topP: 0.9, seed: 4 } });
}
cases.push({ m: 'qwen3-moe-hf', label: 'greedy, per-expert weights stacked at load', input: STR, options: { maxTokens: 24 } });
// Phi-3: fused projections, partial rotary, LongRoPE.
for (const m of ['phi3-f32', 'phi3-bf16-q4']) {
  cases.push({ m, label: 'greedy, string', input: STR, options: { maxTokens: 24 } });
  cases.push({ m, label: 'seeded, chat', input: CHAT2, options: { maxTokens: 24, temperature: 0.9, topP: 0.9, seed: 6 } });
}
// Ministral 3: sliding and full layers, YaRN, Llama 4 position scaling (prompts past its original
// context of 16 and past the window of 8); and as the text model of a mistral3 checkpoint.
cases.push({ m: 'ministral3-f32', label: 'greedy, prompt past the window', input: STR, options: { maxTokens: 24 } });
cases.push({ m: 'ministral3-f32', label: 'seeded, chat', input: CHAT2, options: { maxTokens: 24, temperature: 0.9, topP: 0.9, seed: 9 } });
cases.push({ m: 'mistral3-vlm', label: 'greedy, text model of a mistral3 checkpoint', input: STR, options: { maxTokens: 24 } });
// GPT-OSS: sinks, sliding and full layers, biased experts with swiglu_oai, YaRN; and MXFP4 weights:
// `convert --q-mode mxfp4` (all MXFP4 but the 8-bit router), MLX-community's MXFP4-Q8 (MXFP4 experts,
// 8-bit affine elsewhere) and OpenAI's own layout (MXFP4 `_blocks` and `_scales`, bfloat16 elsewhere).
for (const m of ['gpt-oss-f32', 'gpt-oss-bf16-q4', 'gpt-oss-mxfp4', 'gpt-oss-mxfp4-q8', 'gpt-oss-hf-mxfp4']) {
  cases.push({ m, label: 'greedy, prompt past the window', input: STR, options: { maxTokens: 24 } });
  cases.push({ m, label: 'seeded, chat', input: CHAT2, options: { maxTokens: 24, temperature: 0.9, topP: 0.9, seed: 10 } });
}
// YaRN RoPE (shared by every family that uses the common RoPE builder), on Qwen3.
cases.push({ m: 'qwen3-yarn', label: 'greedy, YaRN RoPE', input: STR, options: { maxTokens: 24 } });
cases.push({ m: 'qwen3-yarn', label: 'seeded, YaRN RoPE', input: CHAT2, options: { maxTokens: 24, temperature: 0.8, seed: 8 } });
// SmolLM3: RoPE off in every 2nd layer.
cases.push({ m: 'smollm3-f32', label: 'greedy, string', input: STR, options: { maxTokens: 24 } });
cases.push({ m: 'smollm3-f32', label: 'seeded, chat', input: CHAT2, options: { maxTokens: 24, temperature: 0.9, topP: 0.9, seed: 2 } });
// A `gemma3` (vision-language) checkpoint: the same text weights under language_model., vision
// weights beside them, the text config nested with MLX-LM's defaults left out.
cases.push({ m: 'gemma3-vlm', label: 'greedy, chat (text model of a gemma3 checkpoint)', input: CHAT, options: { maxTokens: 32 } });
cases.push({ m: 'gemma3-vlm', label: 'seeded, prompt longer than the window', input: STR, options: { maxTokens: 24, temperature: 0.8, seed: 5 } });
cases.push({ m: 'gemma3-f32', label: 'greedy, prompt longer than one prefill step', input: LONG, options: { maxTokens: 16 } });
cases.push({ m: 'gemma3-f32', label: 'seeded, top-k and min-p', input: STR, options: { maxTokens: 24, temperature: 1, topK: 20, minP: 0.05, seed: 3 } });
// LFM2: convolution and attention layers, f32 and bf16 with 4-bit layers (the convolutions stay
// float, as convert leaves them); a prompt longer than one prefill step carries the convolution
// state from chunk to chunk.
for (const m of ['lfm2-f32', 'lfm2-bf16-q4']) {
  cases.push({ m, label: 'greedy, string', input: STR, options: { maxTokens: 24 } });
  cases.push({ m, label: 'seeded, chat', input: CHAT2, options: { maxTokens: 24, temperature: 0.9, topP: 0.9, seed: 12 } });
}
cases.push({ m: 'lfm2-f32', label: 'greedy, prompt longer than one prefill step', input: LONG, options: { maxTokens: 16 } });
// Qwen3.5: as published (text_config, f32 and bf16 with 4-bit layers, and Hugging Face's layout:
// prefixes, convolution weights as PyTorch's, norms stored minus one), and the MoE variant as a
// plain text config (f32, 4-bit with the 8-bit gates its quant_predicate keeps, and Hugging
// Face's fused experts.gate_up_proj); a prompt longer than one prefill step carries the
// convolution and recurrent states from chunk to chunk.
for (const m of ['qwen3_5-f32', 'qwen3_5-bf16-q4', 'qwen3_5-moe-f32', 'qwen3_5-moe-q4']) {
  cases.push({ m, label: 'greedy, string', input: STR, options: { maxTokens: 24 } });
  cases.push({ m, label: 'seeded, chat', input: CHAT2, options: { maxTokens: 24, temperature: 0.9, topP: 0.9, seed: 13 } });
}
cases.push({ m: 'qwen3_5-hf', label: 'greedy, Hugging Face layout', input: STR, options: { maxTokens: 24 } });
cases.push({ m: 'qwen3_5-moe-hf', label: "greedy, Hugging Face's fused experts", input: STR, options: { maxTokens: 24 } });
cases.push({ m: 'qwen3_5-f32', label: 'greedy, prompt longer than one prefill step', input: LONG, options: { maxTokens: 16 } });
// Gemma 4: f32 and bf16 with 4-bit layers (the per-layer embedding too; the routers 8-bit, as its
// quant_predicate says); KV-shared layers across prefill chunks; the text model of a gemma4
// checkpoint as Hugging Face writes it.
for (const m of ['gemma4-f32', 'gemma4-bf16-q4']) {
  cases.push({ m, label: 'greedy, prompt shorter than the window', input: SHORT, options: { maxTokens: 24 } });
  cases.push({ m, label: 'greedy, prompt longer than the window', input: STR, options: { maxTokens: 24 } });
  cases.push({ m, label: 'seeded, chat', input: CHAT2, options: { maxTokens: 24, temperature: 0.9, topP: 0.9, seed: 13 } });
}
for (const m of ['gemma4-moe-f32', 'gemma4-moe-bf16-q4']) {
  cases.push({ m, label: 'greedy, prompt longer than the window', input: STR, options: { maxTokens: 24 } });
  cases.push({ m, label: 'seeded, chat', input: CHAT2, options: { maxTokens: 24, temperature: 0.9, topP: 0.9, seed: 14 } });
}
cases.push({ m: 'gemma4-f32', label: 'greedy, prompt longer than one prefill step', input: LONG, options: { maxTokens: 16 } });
// 8 bits for every family (convert -q --q-bits 8, bfloat16 elsewhere; the families' quant
// predicates keep their choices), and 4 bits for the two above without it.
for (const m of QUANTIZED) {
  cases.push({ m, label: 'greedy, prompt past the window', input: STR, options: { maxTokens: 24 } });
  cases.push({ m, label: 'seeded, chat', input: CHAT2, options: { maxTokens: 24, temperature: 0.9, topP: 0.9, seed: 15 } });
}
cases.push({ m: 'gemma4-vlm', label: 'greedy, chat (text model of a gemma4 checkpoint)', input: CHAT, options: { maxTokens: 24 } });
// bfloat16 through and through (convert --dtype bfloat16) for the dense families; Gemma 4 in
// bfloat16 repeats a handful of tokens on these random weights, so it is left to its 4-bit fixture.
for (const m of BF16) {
  cases.push({ m, label: 'greedy, prompt past the window', input: STR, options: { maxTokens: 24 } });
  cases.push({ m, label: 'seeded, chat', input: CHAT2, options: { maxTokens: 24, temperature: 0.9, topP: 0.9, seed: 16 } });
}

// The fixtures carry other families' tokenizers (Gemma 3's, Qwen3's) and so their templates:
// these are fixture folders with the family's own template (llama.cpp's copies, from
// scripts/chat-templates.js) as chat_template.jinja, which transformers 5 and our loader both
// prefer to tokenizer_config.json's; the other files link to the fixture's. Each renders its
// conversations as transformers does, and a greedy chat equals MLX-LM's on that prompt.
// `variantOf`: another template of the same fixture (index here). transformers takes 9 s to load
// Gemma's tokenizer, so its references render through that one's folder with this template passed
// as chat_template=; it renders TEMPLATED_CHAT as that one does, so it has no greedy run of its own.
// `via`: a fixture with the same tokenizer files (index here; the fixtures of phi3, smollm3,
// ministral3, qwen3_5, lfm2 and llama all carry Qwen3's): the references render through that one's
// folder with this template as chat_template=, so transformers loads the tokenizer once; the render
// is the check (no greedy run). `rejected`: messages the template refuses, and its message.
const TEMPLATED = [
  { key: 'gemma4', fixture: 'gemma4-f32', file: 'google-gemma-4-31B-it.jinja', conversations: tc.GEMMA4 },
  { key: 'gemma4 (interleaved)', fixture: 'gemma4-f32', file: 'google-gemma-4-31B-it-interleaved.jinja', conversations: tc.GEMMA4, variantOf: 0 },
  {
    key: 'gpt-oss (harmony)',
    fixture: 'gpt-oss-f32',
    file: 'openai-gpt-oss-120b.jinja',
    conversations: tc.HARMONY,
    rejected: [tc.HARMONY_REJECTED, /<\|channel\|> tags in the content field/],
  },
  { key: 'phi3 (Phi-3.5)', fixture: 'phi3-f32', file: 'microsoft-Phi-3.5-mini-instruct.jinja', conversations: tc.PHI3, via: 3 },
  { key: 'smollm3', fixture: 'smollm3-f32', file: 'HuggingFaceTB-SmolLM3-3B.jinja', conversations: tc.SMOLLM3, via: 3 },
  {
    key: 'ministral3',
    fixture: 'ministral3-f32',
    file: 'mistralai-Ministral-3-14B-Reasoning-2512.jinja',
    conversations: tc.MINISTRAL3,
    via: 3,
    rejected: [tc.MINISTRAL3_REJECTED, /roles must alternate user and assistant/],
  },
  {
    key: 'qwen3_5',
    fixture: 'qwen3_5-f32',
    file: 'Qwen3.5-4B.jinja',
    conversations: tc.QWEN3_5,
    via: 3,
    rejected: [tc.QWEN3_5_REJECTED, /No user query found in messages/],
  },
  { key: 'lfm2 (LFM2.5)', fixture: 'lfm2-f32', file: 'LFM2.5-Instruct.jinja', conversations: tc.LFM2, via: 3 },
  { key: 'llama (3.1)', fixture: 'llama-f32', file: 'meta-llama-Llama-3.1-8B-Instruct.jinja', conversations: tc.LLAMA3_1, via: 3 },
  { key: 'llama (3.2)', fixture: 'llama-f32', file: 'meta-llama-Llama-3.2-3B-Instruct.jinja', conversations: tc.LLAMA3_2, via: 3 },
];
const TEMPLATED_CHAT = [
  { role: 'system', content: 'You are a terse assistant.' },
  { role: 'user', content: 'What is the capital of France?' },
];

const tmpDirs = [];
function withTemplate(name, file) {
  const src = fixtures().fixtures[name].path;
  const d = fs.mkdtempSync(path.join(require('node:os').tmpdir(), `mlx-node-test-${name}-template-`));
  tmpDirs.push(d);
  for (const f of fs.readdirSync(src)) fs.symlinkSync(path.join(src, f), path.join(d, f));
  fs.copyFileSync(path.join(ensureChatTemplates(), file), path.join(d, 'chat_template.jinja'));
  return d;
}

let refs;
let templates;
let cached;
let cachedLfm2;
let cachedQwen35;
let cachedGemma4;
let kindRefs;
test.before(async () => {
  const f = fixtures();
  const dir = (name) => f.fixtures[name].path;
  const templated = [];
  for (const t of TEMPLATED) {
    t.dir = withTemplate(t.fixture, t.file);
    const other = t.variantOf ?? t.via;
    const on = other === undefined ? { model: t.dir } : { model: TEMPLATED[other].dir, chatTemplate: path.join(t.dir, 'chat_template.jinja') };
    for (const [, messages, o] of t.conversations) templated.push({ mode: 'chat_template', ...on, messages, ...o });
    if (t.rejected) templated.push({ mode: 'chat_template', ...on, messages: t.rejected[0], addGenerationPrompt: true });
    if (other === undefined) templated.push({ model: t.dir, input: TEMPLATED_CHAT, options: { maxTokens: 16 } });
  }
  const all = await runReference([
    ...templated,
    ...cases.map((c) => ({ model: dir(c.m), input: c.input, options: c.options })),
    { mode: 'chat_template', model: dir('gemma3-f32'), messages: CHAT2, addGenerationPrompt: true },
    { mode: 'chat_template', model: dir('gemma3-f32'), messages: CHAT, addGenerationPrompt: false },
    {
      mode: 'cached',
      model: dir('gemma3-f32'),
      cache: {},
      turns: [{ input: CHAT, options: { maxTokens: 12 } }, { extend: STR, options: { maxTokens: 12 } }],
    },
    {
      mode: 'cached',
      model: dir('lfm2-f32'),
      cache: {},
      turns: [{ input: CHAT, options: { maxTokens: 12 } }, { extend: STR, options: { maxTokens: 12 } }],
    },
    {
      mode: 'cached',
      model: dir('qwen3_5-f32'),
      cache: {},
      turns: [{ input: CHAT, options: { maxTokens: 12 } }, { extend: STR, options: { maxTokens: 12 } }],
    },
    {
      mode: 'cached',
      model: dir('gemma4-f32'),
      cache: {},
      turns: [{ input: CHAT, options: { maxTokens: 12 } }, { extend: STR, options: { maxTokens: 12 } }],
    },
    ...CACHE_KINDS.map((k) => ({ mode: 'cached', model: dir(k.m), cache: k.cache, turns: cacheTurns })),
    ...NO_QUANTIZED_KV.map((m) => ({ mode: 'cached', model: dir(m), cache: { kvBits: 8, kvGroupSize: 32, quantizedKvStart: 0 }, turns: cacheTurns })),
  ]);
  for (const t of TEMPLATED) {
    t.refs = all.splice(0, t.conversations.length);
    if (t.rejected) t.rejectedRef = all.shift();
    if (t.variantOf === undefined && t.via === undefined) t.chatRef = all.shift();
  }
  kindRefs = all.splice(all.length - CACHE_KINDS.length - NO_QUANTIZED_KV.length);
  refs = all.slice(0, cases.length);
  templates = all.slice(cases.length, cases.length + 2);
  cached = all[cases.length + 2];
  cachedLfm2 = all[cases.length + 3];
  cachedQwen35 = all[cases.length + 4];
  cachedGemma4 = all[cases.length + 5];
});
test.after(async () => {
  await disposeModels();
  for (const t of TEMPLATED) await (await t.model)?.dispose();
  for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true });
});

// A copy of fixture `name` whose config.json is `edit(config)` (removed after the tests).
function withConfig(name, edit) {
  const d = copyFixture(name);
  tmpDirs.push(d);
  const file = path.join(d, 'config.json');
  fs.writeFileSync(file, JSON.stringify(edit(JSON.parse(fs.readFileSync(file, 'utf8')))));
  return d;
}

// A copy of fixture `name` without the tensor `drop` (removed after the tests).
function withoutTensor(name, drop) {
  const d = copyFixture(name);
  tmpDirs.push(d);
  venvPython(
    'import sys, mlx.core as mx\nw = mx.load(sys.argv[1])\ndel w[sys.argv[2]]\nmx.save_safetensors(sys.argv[1], w, metadata={"format": "mlx"})',
    [path.join(d, 'model.safetensors'), drop],
  );
  return d;
}

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

CACHE_KINDS.forEach(({ m, cache: options }, i) => {
  const kind = options.maxKvSize ? `maxKvSize ${options.maxKvSize}` : `kvBits ${options.kvBits} from position ${options.quantizedKvStart}`;
  test(`${m}: a conversation on a cache with ${kind} equals MLX-LM's generate_step with the same arguments`, async () => {
    const ref = kindRefs[i];
    assert.ok(!ref.error, ref.error);
    const lm = await model(m);
    const cache = lm.createPromptCache(options);
    const first = await lm.generate(STR, { ...cacheTurns[0].options, promptCache: cache });
    assert.deepEqual(first.tokens, ref.turns[0].tokens, `${m} ${kind}: first turn`);
    assert.deepEqual(cache.tokens, ref.turns[1].input.slice(0, -EXT.length));
    const second = await lm.generate([...cache.tokens, ...EXT], { ...cacheTurns[1].options, promptCache: cache });
    assert.deepEqual(second.tokens, ref.turns[1].tokens, `${m} ${kind}: second turn`);
    assert.equal(second.cachedTokens, ref.turns[1].cachedTokens);
    assert.ok(new Set([...first.tokens, ...second.tokens]).size >= 6, `${m} ${kind}: degenerate reference`);
    if (options.kvBits) assert.ok(ref.classes.includes('QuantizedKVCache'), ref.classes.join());
    cache.dispose();
  });
});

test('kvBits on a model with sliding-window layers is INVALID_ARGUMENT, where MLX-LM raises', async () => {
  NO_QUANTIZED_KV.forEach((m, i) => {
    const ref = kindRefs[CACHE_KINDS.length + i];
    assert.equal(ref.errorType, 'NotImplementedError', `${m}: ${ref.error}`);
    assert.match(ref.error, /RotatingKVCache Quantization NYI/);
  });
  for (const m of NO_QUANTIZED_KV) {
    const x = await model(m);
    expectThrow(() => x.createPromptCache({ kvBits: 8, kvGroupSize: 32, quantizedKvStart: 0 }), 'INVALID_ARGUMENT', /sliding-window layers/, m);
    // MLX-LM's default start (5000) too: it would raise there.
    expectThrow(() => x.createPromptCache({ kvBits: 4 }), 'INVALID_ARGUMENT', /sliding-window layers/, m);
  }
});

test("float experts in bfloat16 on the CPU are UNSUPPORTED_MODEL at load, where MLX-LM fails at the first token", async () => {
  // MLX's own CPU gather_mm, as MLX-LM's SwitchGLU calls it.
  const theirs = venvPython(
    [
      'import mlx.core as mx',
      'a, b = mx.zeros((2, 1, 8), mx.bfloat16), mx.zeros((3, 8, 8), mx.bfloat16)',
      'try:',
      '    mx.eval(mx.gather_mm(a, b, rhs_indices=mx.array([0, 2])))',
      '    print("ran")',
      'except Exception as e:',
      '    print(e)',
    ].join('\n'),
  );
  assert.match(theirs, /only supports float32/);
  await expectReject(() => loadModel(fixturePath('qwen3-moe-f32'), { dtype: 'bfloat16' }), 'UNSUPPORTED_MODEL', /switch_mlp\.gate_proj: Bfloat16 experts do not run on MLX's CPU backend .*dtype 'float32'/);
  // Quantized experts (gather_qmm) in a bfloat16 model run.
  const q = await model('qwen3-moe-q4');
  assert.equal((await q.generate(STR, { maxTokens: 2 })).tokens.length, 2);
});

test('gemma3: the model reports its family', async () => {
  const info = (await model('gemma3-f32')).info;
  assert.equal(info.modelType, 'gemma3_text');
  assert.equal(info.numLayers, 4);
  assert.equal(info.vocabSize, 262144);
  assert.deepEqual((await model('gemma3-bf16-q4')).info.quantization, { bits: 4, groupSize: 64, mode: 'affine' });
});

test('gemma3: the text model of a gemma3 checkpoint is gemma3-f32 itself', async () => {
  const vlm = await model('gemma3-vlm');
  assert.equal(vlm.info.modelType, 'gemma3');
  const a = await vlm.generate(CHAT, { maxTokens: 16 });
  const b = await (await model('gemma3-f32')).generate(CHAT, { maxTokens: 16 });
  assert.deepEqual(a.tokens, b.tokens);
});

test("gemma3: Gemma's chat template renders as in transformers", async () => {
  const m = await model('gemma3-f32');
  assert.equal(m.applyChatTemplate(CHAT2, { addGenerationPrompt: true }), templates[0].text);
  assert.equal(m.applyChatTemplate(CHAT, { addGenerationPrompt: false }), templates[1].text);
  assert.match(templates[0].text, /<start_of_turn>model\n$/);
});

for (const t of TEMPLATED) {
  const templated = () => (t.model ??= loadModel(t.dir));
  t.conversations.forEach(([label, messages, options], i) => {
    test(`${t.key}: the model's chat template renders as in transformers: ${label}`, async () => {
      assert.ok(!t.refs[i].error, t.refs[i].error);
      assert.equal((await templated()).applyChatTemplate(messages, options), t.refs[i].text);
    });
  });
  if (t.rejected) {
    const [messages, why] = t.rejected;
    test(`${t.key}: messages the template rejects are INVALID_ARGUMENT, as transformers raises`, async () => {
      assert.match(t.rejectedRef.error ?? '', why);
      const m = await templated();
      expectThrow(() => m.applyChatTemplate(messages, { addGenerationPrompt: true }), 'INVALID_ARGUMENT', why);
    });
  }
  if (t.variantOf === undefined && t.via === undefined) {
    test(`${t.key}: greedy chat through the model's template equals MLX-LM`, async () => {
      assertSameGeneration(await (await templated()).generate(TEMPLATED_CHAT, { maxTokens: 16 }), t.chatRef, t.key);
    });
  } else if (t.variantOf !== undefined) {
    test(`${t.key}: renders the greedy run's chat as ${TEMPLATED[t.variantOf].key}'s template does`, async () => {
      const other = TEMPLATED[t.variantOf];
      other.model ??= loadModel(other.dir);
      const opts = { addGenerationPrompt: true };
      assert.equal((await templated()).applyChatTemplate(TEMPLATED_CHAT, opts), (await other.model).applyChatTemplate(TEMPLATED_CHAT, opts));
    });
  }
}

// A two-turn conversation kept in one prompt cache equals MLX-LM's run with its prompt cache
// (`ref`). `startsOver`: the family's state cannot be cut back, so an input that leaves the held
// tokens starts the cache over and answers as without a cache.
async function cachedConversation(name, ref, { startsOver = false } = {}) {
  assert.ok(!ref.error, ref.error);
  const m = await model(name);
  const cache = m.createPromptCache();
  const first = await m.generate(CHAT, { maxTokens: 12, promptCache: cache });
  assert.deepEqual(first.tokens, ref.turns[0].tokens);
  const second = await m.generate(ref.turns[1].input, { maxTokens: 12, promptCache: cache });
  assert.deepEqual(second.tokens, ref.turns[1].tokens);
  assert.equal(second.cachedTokens, ref.turns[1].cachedTokens);
  assert.ok(second.cachedTokens > 0);
  if (startsOver) {
    const other = [{ role: 'user', content: 'What is the capital of Italy?' }];
    const third = await m.generate(other, { maxTokens: 12, promptCache: cache });
    assert.equal(third.cachedTokens, 0);
    assert.deepEqual(third.tokens, (await m.generate(other, { maxTokens: 12 })).tokens);
  }
  cache.dispose();
}

// Prompt-cache files both ways with MLX-LM for fixture `name`: ours continued by MLX-LM, MLX-LM's
// (written by its save_prompt_cache) continued by us, each as the other continues it. Resolves
// to what the caller checks further (`loaded`: the positions we read from MLX-LM's file), and
// `dispose()` for its caches.
async function cacheFilesBothWays(name) {
  const m = await model(name);
  const dir = fs.mkdtempSync(path.join(require('node:os').tmpdir(), `mlx-node-${name}-`));
  tmpDirs.push(dir);
  const [ours, theirs] = [path.join(dir, 'ours.safetensors'), path.join(dir, 'theirs.safetensors')];
  const fixture = fixtures().fixtures[name].path;
  const EXT = [11, 847, 2000, 3000, 4000];
  const c = m.createPromptCache();
  await m.generate(CHAT, { maxTokens: 8, promptCache: c });
  await c.save(ours);
  // One reference run: its cases go in order, so the third reads the file the first wrote.
  const [saved, fromOurs, fromTheirs] = await runReference([
    { mode: 'cached', model: fixture, cache: {}, turns: [{ input: CHAT, options: { maxTokens: 8 } }], save: theirs },
    { mode: 'cached', model: fixture, cache: { file: ours }, turns: [{ extend: EXT, options: { maxTokens: 12 } }] },
    { mode: 'cached', model: fixture, cache: { file: theirs }, turns: [{ extend: EXT, options: { maxTokens: 12 } }] },
  ]);
  for (const r of [saved, fromOurs, fromTheirs]) assert.ok(!r.error, r.error);
  // MLX-LM read our file whole (its tokens reused) and continues as we do from it.
  assert.equal(fromOurs.turns[0].cachedTokens, c.length);
  const a = await m.loadPromptCache(ours);
  assert.deepEqual(a.tokens, c.tokens);
  const ra = await m.generate([...a.tokens, ...EXT], { maxTokens: 12, promptCache: a });
  assert.deepEqual(ra.tokens, fromOurs.turns[0].tokens);
  assert.equal(ra.cachedTokens, fromOurs.turns[0].cachedTokens);
  // We read MLX-LM's file and continue as it does.
  const b = await m.loadPromptCache(theirs);
  assert.deepEqual(b.tokens, saved.cacheTokens);
  const loaded = b.length;
  const rb = await m.generate([...b.tokens, ...EXT], { maxTokens: 12, promptCache: b });
  assert.deepEqual(rb.tokens, fromTheirs.turns[0].tokens);
  return { m, dir, saved, theirs, loaded, dispose: () => [c, a, b].forEach((x) => x.dispose()) };
}

// Concurrent requests on each of `names` (one batch) give each its solo tokens.
async function batchEqualsSolo(names) {
  for (const name of names) {
    const m = await model(name);
    const inputs = [STR, CHAT, CHAT2];
    const solo = [];
    for (const input of inputs) solo.push((await m.generate(input, { maxTokens: 16 })).tokens);
    const together = await Promise.all(inputs.map((input) => m.generate(input, { maxTokens: 16 })));
    assert.deepEqual(together.map((r) => r.tokens), solo, name);
  }
}

// The second turn continues the held tokens; the sliding layers have wrapped, so what the cache
// serves is what MLX-LM's rotating caches serve.
test('gemma3: a conversation kept in a prompt cache equals MLX-LM with its prompt cache', () => cachedConversation('gemma3-f32', cached));

// The second turn continues from the convolution state and the attention caches; an input that
// leaves the held tokens needs a cut, which a convolution state cannot take: the cache starts over.
test('lfm2: a conversation kept in a prompt cache equals MLX-LM with its prompt cache', () =>
  cachedConversation('lfm2-f32', cachedLfm2, { startsOver: true }));

test('lfm2: prompt-cache files go both ways with MLX-LM (ArraysCache and KVCache layers)', async () => {
  const { saved, theirs, loaded, dispose } = await cacheFilesBothWays('lfm2-f32');
  // Its convolution layers count no positions: the attention layers do.
  assert.equal(loaded, saved.cacheOffset);
  // A file of another model's kinds at those layers is CACHE_MISMATCH.
  await expectReject(() => model('smollm3-f32').then((q) => q.loadPromptCache(theirs)), 'CACHE_MISMATCH', /layer 0 holds a convolution or recurrent layer's state in the file/);
  dispose();
});

test('lfm2: concurrent requests (one batch) give each its solo tokens', () => batchEqualsSolo(['lfm2-f32']));

test('lfm2: a convolution weight of the wrong size is INVALID_WEIGHTS naming it', async () => {
  const d = withConfig('lfm2-f32', (config) => ({ ...config, conv_L_cache: 4 }));
  await expectReject(() => loadModel(d), 'INVALID_WEIGHTS', /model\.layers\.0\.conv\.conv\.weight.*expected \[64, 4, 1\]/);
});

test('qwen3_5: model info, and the MoE router and shared-expert gates stay 8-bit in the 4-bit model', async () => {
  const m = await model('qwen3_5-f32');
  assert.equal(m.info.modelType, 'qwen3_5');
  assert.equal(m.info.numLayers, 4);
  assert.equal(m.info.vocabSize, 151936);
  const q = await model('qwen3_5-moe-q4');
  assert.equal(q.info.modelType, 'qwen3_5_moe');
  assert.deepEqual(q.info.quantization, { bits: 4, groupSize: 64, mode: 'affine' });
  const config = JSON.parse(fs.readFileSync(path.join(fixtures().fixtures['qwen3_5-moe-q4'].path, 'config.json'), 'utf8'));
  assert.deepEqual(config.quantization['language_model.model.layers.1.mlp.shared_expert_gate'], { group_size: 64, bits: 8 });
});

// The second turn continues from the convolution and recurrent states and the attention caches;
// a recurrent state cannot be cut back, so an input that leaves the held tokens starts over.
test('qwen3_5: a conversation kept in a prompt cache equals MLX-LM with its prompt cache', () =>
  cachedConversation('qwen3_5-f32', cachedQwen35, { startsOver: true }));

test('qwen3_5: prompt-cache files go both ways with MLX-LM (ArraysCache of two and KVCache layers)', async () => {
  const { m, dir, saved, dispose } = await cacheFilesBothWays('qwen3_5-f32');
  assert.deepEqual(saved.classes, ['ArraysCache', 'KVCache', 'ArraysCache', 'KVCache']);
  // An LFM2 file has one array where these layers keep two.
  const lfm2 = await model('lfm2-f32');
  const l = lfm2.createPromptCache();
  await lfm2.generate(CHAT, { maxTokens: 2, promptCache: l });
  const lfile = path.join(dir, 'lfm2.safetensors');
  await l.save(lfile);
  await expectReject(() => m.loadPromptCache(lfile), 'CACHE_MISMATCH', /layer 0 holds 1 arrays in the file, the model's layer 0 keeps 2/);
  l.dispose();
  dispose();
});

test('qwen3_5: concurrent requests (one batch) give each its solo tokens', () => batchEqualsSolo(['qwen3_5-f32', 'qwen3_5-moe-f32']));

test('qwen3_5: a checkpoint without A_log or a convolution weight is INVALID_WEIGHTS naming it', async () => {
  const noA = withoutTensor('qwen3_5-f32', 'language_model.model.layers.2.linear_attn.A_log');
  await expectReject(() => loadModel(noA), 'INVALID_WEIGHTS', /model\.layers\.2\.linear_attn\.A_log/);
  const noConv = withoutTensor('qwen3_5-f32', 'language_model.model.layers.0.linear_attn.conv1d.weight');
  await expectReject(() => loadModel(noConv), 'INVALID_WEIGHTS', /model\.layers\.0\.linear_attn\.conv1d\.weight/);
  // A kernel the weights were not made for.
  const k3 = withConfig('qwen3_5-f32', (c) => ({ ...c, text_config: { ...c.text_config, linear_conv_kernel_dim: 3 } }));
  await expectReject(() => loadModel(k3), 'INVALID_WEIGHTS', /linear_attn\.conv1d\.weight.*expected \[128, 3, 1\]/);
});

test('qwen3_5: configs whose layer kinds or head counts do not fit are INVALID_WEIGHTS', async () => {
  const text = (edit) => withConfig('qwen3_5-f32', (c) => ({ ...c, text_config: { ...c.text_config, ...edit } }));
  await expectReject(() => loadModel(text({ full_attention_interval: 0 })), 'INVALID_WEIGHTS', /full_attention_interval/);
  await expectReject(
    () => loadModel(text({ full_attention_interval: 4 })),
    'INVALID_WEIGHTS',
    /layer_types makes layer 1 "full_attention", full_attention_interval 4 makes it the other kind/,
  );
  await expectReject(() => loadModel(text({ layer_types: ['linear_attention'] })), 'INVALID_WEIGHTS', /layer_types lists 1 layers, the model has 4/);
  await expectReject(() => loadModel(text({ linear_num_key_heads: 3 })), 'INVALID_WEIGHTS', /linear_num_value_heads \(4\) must be a multiple of linear_num_key_heads \(3\)/);
  await expectReject(() => loadModel(text({ linear_conv_kernel_dim: 1 })), 'INVALID_WEIGHTS', /linear_conv_kernel_dim/);
});

test('gemma3: a checkpoint without a norm the config implies is INVALID_WEIGHTS naming it', async () => {
  const d = withoutTensor('gemma3-f32', 'model.layers.1.pre_feedforward_layernorm.weight');
  await expectReject(() => loadModel(d), 'INVALID_WEIGHTS', /model\.layers\.1\.pre_feedforward_layernorm\.weight/);
});

test('gemma3: a gemma3 config without text_config is INVALID_WEIGHTS', async () => {
  const d = withConfig('gemma3-vlm', ({ text_config, ...config }) => config);
  await expectReject(() => loadModel(d), 'INVALID_WEIGHTS', /text_config/);
});

test('gemma3: a sliding window that is not a positive number is INVALID_WEIGHTS naming it', async () => {
  const d = withConfig('gemma3-f32', (config) => ({ ...config, sliding_window: -4 }));
  await expectReject(() => loadModel(d), 'INVALID_WEIGHTS', /sliding_window/);
});

test('gemma4: the models report their family', async () => {
  const info = (await model('gemma4-f32')).info;
  assert.equal(info.modelType, 'gemma4_text');
  assert.equal(info.numLayers, 4);
  assert.equal(info.vocabSize, 262144);
  assert.equal((await model('gemma4-vlm')).info.modelType, 'gemma4');
  assert.deepEqual((await model('gemma4-bf16-q4')).info.quantization, { bits: 4, groupSize: 64, mode: 'affine' });
  const config = JSON.parse(fs.readFileSync(path.join(fixtures().fixtures['gemma4-moe-bf16-q4'].path, 'config.json'), 'utf8'));
  assert.deepEqual(config.quantization['model.layers.1.router.proj'], { group_size: 64, bits: 8 });
});

// The KV-shared layers read the wrapped rotating caches of earlier layers.
test('gemma4: a conversation kept in a prompt cache equals MLX-LM with its prompt cache', () => cachedConversation('gemma4-f32', cachedGemma4));

test('gemma4: prompt-cache files go both ways with MLX-LM (caches for the layers with keys only)', async () => {
  // Past the window: the sliding layer's rotating cache has wrapped when it is written.
  const { saved, theirs, dispose } = await cacheFilesBothWays('gemma4-f32');
  // Two caches (a sliding and a full layer's, 16- and 32-wide heads) for four layers, as MLX-LM's make_cache.
  assert.deepEqual(saved.classes, ['RotatingKVCache', 'KVCache']);
  // A file with a cache per layer (another model's) is CACHE_MISMATCH.
  await expectReject(() => model('gemma3-f32').then((q) => q.loadPromptCache(theirs)), 'CACHE_MISMATCH', /the file has 2 layers, the model 4/);
  dispose();
});

test("gemma4: Hugging Face's fused experts (experts.gate_up_proj, experts.down_proj) load split as MLX-LM's sanitize splits them", async () => {
  const d = copyFixture('gemma4-moe-f32');
  tmpDirs.push(d);
  venvPython(
    [
      'import sys, mlx.core as mx',
      'w = mx.load(sys.argv[1])',
      'out = {}',
      'for k, v in w.items():',
      '    base = k.split(".switch_glu.")[0]',
      '    if k.endswith(".switch_glu.gate_proj.weight"):',
      '        out[base + ".gate_up_proj"] = mx.concatenate([v, w[base + ".switch_glu.up_proj.weight"]], axis=-2)',
      '    elif k.endswith(".switch_glu.down_proj.weight"):',
      '        out[base + ".down_proj"] = v',
      '    elif not k.endswith(".switch_glu.up_proj.weight"):',
      '        out[k] = v',
      'mx.save_safetensors(sys.argv[1], out, metadata={"format": "mlx"})',
    ].join('\n'),
    [path.join(d, 'model.safetensors')],
  );
  const hf = await loadModel(d);
  const a = await hf.generate(STR, { maxTokens: 16 });
  await hf.dispose();
  const b = await (await model('gemma4-moe-f32')).generate(STR, { maxTokens: 16 });
  assert.deepEqual(a.tokens, b.tokens);
});

test('gemma4: a checkpoint without the per-layer input embedding is INVALID_WEIGHTS naming it', async () => {
  const d = withoutTensor('gemma4-f32', 'model.embed_tokens_per_layer.weight');
  await expectReject(() => loadModel(d), 'INVALID_WEIGHTS', /model\.embed_tokens_per_layer\.weight/);
});

test('gemma4: config errors are INVALID_WEIGHTS naming the field', async () => {
  const cases = [
    [(c) => ({ ...c, layer_types: c.layer_types.slice(1) }), /layer_types lists 3 layers, the model has 4/],
    [(c) => ({ ...c, num_kv_shared_layers: 4 }), /num_kv_shared_layers \(4\) leaves none of the 4 layers/],
    // The shared full layer 3 finds no full layer before layer 2 to read.
    [(c) => ({ ...c, layer_types: ['sliding_attention', 'sliding_attention', 'sliding_attention', 'full_attention'] }), /layer 3 shares the keys of an earlier full layer/],
    [(c) => ({ ...c, enable_moe_block: true }), /enable_moe_block needs "num_experts"/],
  ];
  for (const [edit, pattern] of cases) {
    const d = withConfig('gemma4-f32', edit);
    await expectReject(() => loadModel(d), 'INVALID_WEIGHTS', pattern);
  }
});

test('gemma4: a RoPE type other than default, linear and proportional is UNSUPPORTED_MODEL naming it', async () => {
  const d = withConfig('gemma4-f32', (c) => ({
    ...c,
    rope_parameters: { ...c.rope_parameters, full_attention: { rope_type: 'yarn', factor: 2.0, rope_theta: 1000000.0 } },
  }));
  await expectReject(() => loadModel(d), 'UNSUPPORTED_MODEL', /RoPE type "yarn"/);
});

test('smollm3: the NoPE layers matter (the same weights read as Llama give other tokens)', async () => {
  const d = withConfig('smollm3-f32', (config) => ({ ...config, model_type: 'llama' }));
  const asLlama = await loadModel(d);
  const a = await asLlama.generate(STR, { maxTokens: 24 });
  await asLlama.dispose();
  const b = await (await model('smollm3-f32')).generate(STR, { maxTokens: 24 });
  assert.notDeepEqual(a.tokens, b.tokens);
});

test('smollm3: a no_rope_layers list of the wrong length is INVALID_WEIGHTS', async () => {
  const d = withConfig('smollm3-f32', (config) => ({ ...config, no_rope_layers: [1, 0] }));
  await expectReject(() => loadModel(d), 'INVALID_WEIGHTS', /no_rope_layers lists 2 layers, the model has 4/);
});

test('qwen3_moe: model info, and the router gates stay 8-bit in the 4-bit model', async () => {
  const m = await model('qwen3-moe-q4');
  assert.equal(m.info.modelType, 'qwen3_moe');
  assert.deepEqual(m.info.quantization, { bits: 4, groupSize: 64, mode: 'affine' });
  const config = JSON.parse(fs.readFileSync(path.join(fixtures().fixtures['qwen3-moe-q4'].path, 'config.json'), 'utf8'));
  assert.deepEqual(config.quantization['model.layers.1.mlp.gate'], { group_size: 64, bits: 8 });
});

test('qwen3_moe: a checkpoint missing one expert is INVALID_WEIGHTS naming the stacked tensor', async () => {
  const d = withoutTensor('qwen3-moe-hf', 'model.layers.2.mlp.experts.5.down_proj.weight');
  await expectReject(() => loadModel(d), 'INVALID_WEIGHTS', /model\.layers\.2\.mlp\.(experts\.5\.down_proj|switch_mlp\.down_proj)\.weight/);
});

test('qwen3_moe: a config without num_experts_per_tok is INVALID_WEIGHTS naming it', async () => {
  const d = withConfig('qwen3-moe-f32', ({ num_experts_per_tok, ...config }) => config);
  await expectReject(() => loadModel(d), 'INVALID_WEIGHTS', /num_experts_per_tok/);
});

test('gpt_oss: MXFP4 checkpoints load with the quantization MLX-LM reads from their config', async () => {
  const config = (name) => JSON.parse(fs.readFileSync(path.join(fixtures().fixtures[name].path, 'config.json'), 'utf8'));
  // convert --q-mode mxfp4: MXFP4 by default, the router 8-bit affine (no mode: to_quantized's default).
  const all = config('gpt-oss-mxfp4').quantization;
  assert.deepEqual([all.mode, all.group_size, all.bits], ['mxfp4', 32, 4]);
  assert.deepEqual(all['model.layers.0.mlp.router'], { group_size: 64, bits: 8 });
  // MXFP4-Q8: 8-bit affine layers listed under a top-level mxfp4; the experts unlisted (their uint8
  // scales name the mode).
  const q8 = config('gpt-oss-mxfp4-q8').quantization;
  assert.equal(q8.mode, 'mxfp4');
  assert.deepEqual(q8['model.layers.0.self_attn.q_proj'], { group_size: 64, bits: 8, mode: 'affine' });
  assert.ok(!Object.keys(q8).some((k) => k.includes('experts')));
  // OpenAI's layout has only quantization_config, which MLX-LM reads as mxfp4.
  assert.equal(config('gpt-oss-hf-mxfp4').quantization_config.quant_method, 'mxfp4');
  for (const name of ['gpt-oss-mxfp4', 'gpt-oss-mxfp4-q8', 'gpt-oss-hf-mxfp4']) {
    const m = await model(name);
    assert.equal(m.info.modelType, 'gpt_oss');
    // The bulk of the weights is MXFP4 (the mode MLX-LM reads from each config).
    assert.deepEqual(m.info.quantization, { bits: 4, groupSize: 32, mode: 'mxfp4' }, name);
  }
});

test('gpt_oss: a quantization mode MLX does not have is UNSUPPORTED_MODEL naming the layer and the mode', async () => {
  const d = withConfig('gpt-oss-mxfp4', (config) => {
    config.quantization['model.layers.0.self_attn.q_proj'] = { group_size: 32, bits: 4, mode: 'nvfp8' };
    return config;
  });
  await expectReject(() => loadModel(d), 'UNSUPPORTED_MODEL', /model\.layers\.0\.self_attn\.q_proj.*"nvfp8"/);
});

test('gpt_oss: MXFP4 (uint8) scales under a config that says affine are INVALID_WEIGHTS naming the tensor', async () => {
  const d = withConfig('gpt-oss-mxfp4', (config) => {
    config.quantization['model.layers.1.mlp.experts.down_proj'] = { group_size: 32, bits: 4 };
    return config;
  });
  await expectReject(() => loadModel(d), 'INVALID_WEIGHTS', /"model\.layers\.1\.mlp\.experts\.down_proj\.scales".* is uint8, .*mode affine/);
});

test('gpt_oss: per-expert nvfp4 global scales are UNSUPPORTED_MODEL', async () => {
  const d = withConfig('gpt-oss-mxfp4', (config) => {
    config.quantization['model.layers.2.mlp.experts.up_proj'] = { group_size: 32, bits: 4, mode: 'mxfp4', global_scale: true };
    return config;
  });
  await expectReject(() => loadModel(d), 'UNSUPPORTED_MODEL', /model\.layers\.2\.mlp\.experts\.up_proj.*global_scale/);
});

test('gpt_oss: OpenAI-layout MXFP4 blocks of the wrong width are INVALID_WEIGHTS naming the tensor', async () => {
  const d = copyFixture('gpt-oss-hf-mxfp4');
  tmpDirs.push(d);
  venvPython(
    'import sys, mlx.core as mx\nw = mx.load(sys.argv[1])\nk = "model.layers.3.mlp.experts.down_proj_blocks"\nw[k] = w[k][..., :15]\nmx.save_safetensors(sys.argv[1], w, metadata={"format": "mlx"})',
    [path.join(d, 'model.safetensors')],
  );
  await expectReject(() => loadModel(d), 'INVALID_WEIGHTS', /model\.layers\.3\.mlp\.experts\.down_proj_blocks/);
});

test('yarn: the scaling changes the output (same weights without it give other tokens)', async () => {
  const a = await (await model('qwen3-yarn')).generate(STR, { maxTokens: 24 });
  const b = await (await model('qwen3-f32')).generate(STR, { maxTokens: 24 });
  assert.notDeepEqual(a.tokens, b.tokens);
});
