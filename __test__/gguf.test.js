'use strict';
// loadModel('model.gguf'): the GGUF loaded directly gives MLX-LM's tokens on the same weights
// converted to an MLX folder (scripts/gguf_to_mlx.py with MLX's own mx.load), greedy and seeded,
// quantized (Q4_0, Q4_1, Q8_0; K-quants Q2_K to Q6_K in Q4_K_M- and Q3_K_M-shaped files, IQ4_XS
// and IQ4_NL in an IQ4_XS-shaped one, whose
// folders gguf_to_mlx.py converts from the blocks itself) and float (F32, F16, BF16), for the qwen3,
// qwen2 and llama architectures (Mistral as llama.cpp writes it; Llama 3.1 rotary scaling as
// rope_freqs.weight); files split in parts (against the whole files' folders); the real
// SmolLM2-135M-Instruct Q4_1 file with a
// tokenizer built by transformers' GGUF converter; and malformed files refused with stable codes.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { loadModel } = require('..');
const { runReference } = require('./ref/ref');
const { ggufIndex } = require('../scripts/fixtures-gguf');
const { assertSameGeneration, expectReject, fixturePath } = require('./helpers');

const STR = 'Hello, my name is';
const CHAT = [{ role: 'user', content: 'What is the capital of France?' }];
const TEXTS = [
  'Hello world 12345, what is 2+2?',
  ' leading space  and   spaces\t\ttabs\n\nnew lines',
  'naïve café — 海と空 🌊 émoji',
  "don't I'm we'll 3.14159 1,000,000",
  '<|im_start|>user\nhi<|im_end|>',
  '<|user|> hi </s> <unk> <s>',
  'def forward(self, x):\n    return mx.softmax(x, axis=-1)',
  '<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n',
  '      indented     \n\n\n\tand\t\ttabbed',
  "camelCase HTTPServer getX2Y path/to//file.\n--flag=12345 DON'T",
];
// Whose encodings are compared: the trained SmolLM2, the SentencePiece fixtures and Qwen3's
// vocabulary under the tekken and gpt-4o pre-tokenizers (reference tokenizers by transformers'
// GGUF converter), and Qwen3's (the original tokenizer files).
const ENCODED = ['smollm2', 'llama-spm', 'gemma3-q4_0', 'phi3-q8_0', 'pre-tekken', 'pre-gpt-4o', 'qwen3-f32'];

let index;
const models = new Map();
async function gguf(name) {
  const f = index.fixtures[name];
  // Exact precision: compared with MLX-LM (quantized files default to fast).
  if (!models.has(name)) models.set(name, await loadModel(f.gguf, { precision: 'exact', ...(f.dtype ? { dtype: f.dtype } : {}) }));
  return models.get(name);
}

const cases = [];
const variants = ['qwen3-f32', 'qwen3-q4_0', 'qwen3-bf16', 'llama-q4_1', 'llama-f16', 'mistral-q8_0', 'qwen2-q4_0', 'llama-spm', 'qwen3-q4_k_m', 'qwen3-q3_k_m', 'qwen3-iq4_xs', 'qwen3moe-q4_k_m', 'llama3-f32', 'gemma3-q4_0', 'phi3-q8_0', 'qwen3-q4_0-split', 'qwen3-q4_k_m-split', 'smollm3-q8_0', 'gpt-oss-mxfp4', 'ministral3-q8_0'];
for (const v of variants) {
  cases.push({ name: v, label: 'greedy, string', input: STR, options: { maxTokens: 24 } });
  cases.push({ name: v, label: 'seeded, chat', input: CHAT, options: { maxTokens: 24, temperature: 0.8, topP: 0.9, seed: 7 } });
}
cases.push({ name: 'smollm2', label: 'greedy, chat', input: CHAT, options: { maxTokens: 40 } });
cases.push({ name: 'smollm2', label: 'seeded, string', input: 'The quick brown fox', options: { maxTokens: 24, temperature: 0.8, seed: 3 } });
// loadModel(file, { dtype: 'float32' }) against the folder converted with float32 scales.
cases.push({ name: 'smollm2-f32', label: 'greedy, chat, dtype float32', input: CHAT, options: { maxTokens: 40 } });
cases.push({ name: 'smollm2-f32', label: 'seeded, string, dtype float32', input: 'The quick brown fox', options: { maxTokens: 24, temperature: 0.8, seed: 3 } });

let refs;
let encodings;
let gemmaOwn;
test.before(async () => {
  index = ggufIndex();
  const all = await runReference([
    ...cases.map((c) => ({ model: index.fixtures[c.name].ref, input: c.input, options: c.options })),
    ...ENCODED.flatMap((n) =>
      TEXTS.map((text) => ({ mode: 'encode', model: index.fixtures[n].ref, text, addSpecialTokens: true })),
    ),
    ...TEXTS.map((text) => ({ mode: 'encode', model: index.fixtures['gemma3-q4_0'].own, text, addSpecialTokens: true })),
  ]);
  refs = all.slice(0, cases.length);
  encodings = all.slice(cases.length, cases.length + ENCODED.length * TEXTS.length);
  gemmaOwn = all.slice(cases.length + ENCODED.length * TEXTS.length);
});
test.after(async () => {
  for (const m of models.values()) await m.dispose();
});

for (let i = 0; i < cases.length; i++) {
  const c = cases[i];
  test(`${c.name}.gguf: ${c.label} equals MLX-LM on the converted folder`, async () => {
    const m = await gguf(c.name);
    const got = await m.generate(c.input, c.options);
    assertSameGeneration(got, refs[i], `${c.name} ${c.label}`);
    // Random weights: greedy output runs to maxTokens (the trained model ends its answer itself).
    if (!c.options.temperature && !c.name.startsWith('smollm2')) assert.equal(got.finishReason, 'length', 'greedy output stopped at once');
  });
}

test('the trained SmolLM2 GGUF answers the question', async () => {
  const got = await (await gguf('smollm2')).generate(CHAT, { maxTokens: 40 });
  assert.match(got.text, /Paris/);
});

test('GGUF tokenizers encode as the reference tokenizers (BPE under five pre-tokenizers, and SentencePiece)', async () => {
  let k = 0;
  for (const n of ENCODED) {
    const m = await gguf(n);
    for (const text of TEXTS) {
      const ref = encodings[k++];
      assert.ok(!ref.error, ref.error);
      assert.deepEqual(m.encode(text), ref.tokens, `${n}: ${JSON.stringify(text)}`);
    }
  }
});

// The file holds no tokenizer.json: the loader rebuilds Gemma's from the pieces llama.cpp's
// converter wrote (whitespace pieces respelled, merges in vocabulary order), and it must encode as
// Gemma 3's own tokenizer does.
test('a Gemma 3 GGUF encodes as Gemma 3\'s own tokenizer.json', async () => {
  const m = await gguf('gemma3-q4_0');
  TEXTS.forEach((text, i) => {
    assert.ok(!gemmaOwn[i].error, gemmaOwn[i].error);
    assert.deepEqual(m.encode(text), gemmaOwn[i].tokens, JSON.stringify(text));
  });
  assert.equal(m.decode(m.encode(TEXTS[1])), `<bos>${TEXTS[1]}`);
});

// The file names <eos> as its EOS; a chat turn ends at <end_of_turn> (106) because llama.cpp ends
// generation on that text wherever a vocabulary has it, and so does the loader.
test('a Gemma 3 GGUF stops at <end_of_turn> and at <eos>', async () => {
  const m = await gguf('gemma3-q4_0');
  for (const id of [106, 1]) {
    const r = await m.generate(CHAT, { maxTokens: 8, logitBias: { [id]: 100 } });
    assert.deepEqual([r.finishReason, r.text], ['stop', ''], `token ${id}`);
  }
});

test('model info describes the GGUF model', async () => {
  const expect = {
    'qwen3-q4_0': { modelType: 'qwen3', quantization: { bits: 4, groupSize: 32, mode: 'affine' } },
    'qwen3-bf16': { modelType: 'qwen3', dtype: 'bfloat16', quantization: null },
    'llama-f16': { modelType: 'llama', dtype: 'float16', quantization: null },
    'mistral-q8_0': { modelType: 'llama', quantization: { bits: 8, groupSize: 32, mode: 'affine' } },
    'llama-spm': { modelType: 'llama', vocabSize: 1000, quantization: { bits: 8, groupSize: 32, mode: 'affine' } },
    smollm2: { modelType: 'llama', numLayers: 30, vocabSize: 49152, contextLength: 8192, quantization: { bits: 4, groupSize: 32, mode: 'affine' } },
    // The bits most layers load at: here 8 (Q6_K, Q5_K, Q8_0, Q5_0, Q5_1: eight layers) over 4 (Q4_K,
    // Q4_0, Q4_1: seven); each layer keeps its own.
    'qwen3-q4_k_m': { modelType: 'qwen3', dtype: 'float32', quantization: { bits: 8, groupSize: 32, mode: 'affine' } },
    // Q3_K and Q2_K load at 8 bits (thirteen layers with the embedding), Q4_K at 4 (two).
    'qwen3-q3_k_m': { modelType: 'qwen3', dtype: 'float32', quantization: { bits: 8, groupSize: 32, mode: 'affine' } },
    'qwen3-iq4_xs': { modelType: 'qwen3', dtype: 'float32', quantization: { bits: 8, groupSize: 32, mode: 'affine' } },
    // Stacked experts: Q4_K gate/up and attention (4 bits) outnumber Q6_K down, embedding and output.
    'qwen3moe-q4_k_m': { modelType: 'qwen3_moe', numLayers: 2, quantization: { bits: 4, groupSize: 32, mode: 'affine' } },
    // Gemma 3 runs in float32 unless told otherwise (its activations outgrow float16).
    'gemma3-q4_0': { modelType: 'gemma3_text', numLayers: 6, vocabSize: 262144, dtype: 'float32', quantization: { bits: 4, groupSize: 32, mode: 'affine' } },
    'phi3-q8_0': { modelType: 'phi3', vocabSize: 1001, contextLength: 131072, quantization: { bits: 8, groupSize: 32, mode: 'affine' } },
    // Q8_0 attention, embedding and output (18 tensors) over MXFP4 experts (12).
    'gpt-oss-mxfp4': { modelType: 'gpt_oss', numLayers: 4, contextLength: 131072, quantization: { bits: 8, groupSize: 32, mode: 'affine' } },
  };
  for (const [n, want] of Object.entries(expect)) {
    const info = (await gguf(n)).info;
    for (const [k, v] of Object.entries(want)) assert.deepEqual(info[k], v, `${n}: info.${k}`);
  }
});

test('a quantized GGUF runs in fast precision by default (as asked for), a float one in exact', async () => {
  const byDefault = await loadModel(index.fixtures['qwen3-q4_0'].gguf);
  const fast = await loadModel(index.fixtures['qwen3-q4_0'].gguf, { precision: 'fast' });
  try {
    assert.equal(byDefault.precision, 'fast');
    // Bit for bit: the same tokens and log-probabilities.
    const run = async (m) => (({ tokens, logprobs }) => ({ tokens, logprobs }))(await m.generate(CHAT, { maxTokens: 8, logprobs: true }));
    assert.deepEqual(await run(byDefault), await run(fast));
  } finally {
    await byDefault.dispose();
    await fast.dispose();
  }
  assert.equal((await gguf('qwen3-q4_0')).precision, 'exact');
  const f32 = await loadModel(index.fixtures['qwen3-f32'].gguf);
  assert.equal(f32.precision, 'exact');
  await f32.dispose();
});

// Loads `fileSpec` and `folderSpec` ([path, options]) and checks that `maxTokens` tokens of `input`
// come out of both with the same tokens and log-probabilities, bit for bit.
async function assertSameRun(fileSpec, folderSpec, input, options) {
  const file = await loadModel(...fileSpec);
  const folder = await loadModel(...folderSpec);
  try {
    const run = async (m) => (({ tokens, logprobs }) => ({ tokens, logprobs }))(await m.generate(input, { ...options, logprobs: true }));
    const [a, b] = [await run(file), await run(folder)];
    assert.equal(a.tokens.length, options.maxTokens);
    assert.deepEqual(a, b);
  } finally {
    await file.dispose();
    await folder.dispose();
  }
}

// Fast precision has no reference but exact: a K-quant (or MXFP4) file and the folder converted from it hold
// the same arrays, so fast runs on both give the same tokens and log-probabilities, bit for bit.
for (const name of ['qwen3-q4_k_m', 'qwen3-q3_k_m', 'qwen3-iq4_xs', 'qwen3moe-q4_k_m', 'gpt-oss-mxfp4']) {
  test(`a K-quant GGUF in fast precision equals its converted folder in fast precision (${name})`, async () => {
    const f = index.fixtures[name];
    const fast = { precision: 'fast' };
    await assertSameRun([f.gguf, fast], [f.ref, fast], CHAT, { maxTokens: 12 });
  });
}

// llama.cpp's converter turns Llama 3.1's rope_scaling into rope_freqs.weight; the loader recovers
// the parameters, so the file runs as the folder it was written from, bit for bit. Without the
// scaling, the low-frequency dimensions would turn 8 times faster and the log-probabilities differ.
test('a Llama 3.1-scaled GGUF (rope_freqs.weight) equals the folder it was written from', async () => {
  await assertSameRun([index.fixtures['llama3-f32'].gguf], [fixturePath('llama-f32')], [5, 17, 99, 3, 250, 41], { maxTokens: 40, topLogprobs: 3 });
});

test('a Ministral 3 GGUF without its Llama 4 scaling beta is INVALID_WEIGHTS', async () => {
  const rename = (b) => (b.write('mistral3.attention.temperature_scalX', b.indexOf('mistral3.attention.temperature_scale')), b);
  await expectReject(() => loadModel(broken('no-beta', rename, index.fixtures['ministral3-q8_0'].gguf)), 'INVALID_WEIGHTS', /missing mistral3\.attention\.temperature_scale/);
});

test('YaRN with a llama.cpp attention factor MLX-LM has no place for is UNSUPPORTED_MODEL', async () => {
  await expectReject(() => loadModel(path.join(index.dir, 'yarn-attn-factor.gguf')), 'UNSUPPORTED_MODEL', /qwen3\.rope\.scaling\.yarn_attn_factor 2 is not supported/);
});

test('rope_freqs.weight that no Llama 3 scaling gives is UNSUPPORTED_MODEL', async () => {
  await expectReject(() => loadModel(path.join(index.dir, 'rope-freqs.gguf')), 'UNSUPPORTED_MODEL', /rope_freqs\.weight holds rotary frequency factors that no Llama 3 scaling gives \(largest 9\)/);
});

// Malformed files: each a copy of a small valid GGUF (tiny.gguf) with one thing broken.
function broken(label, edit, from = 'tiny.gguf') {
  const src = fs.readFileSync(path.resolve(index.dir, from));
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'mlx-node-gguf-')), `${label}.gguf`);
  fs.writeFileSync(file, edit(Buffer.from(src)));
  return file;
}

test('the small valid GGUF the malformed ones are made from loads and generates', async () => {
  const m = await loadModel(path.join(index.dir, 'tiny.gguf'));
  const r = await m.generate([1, 2, 3], { maxTokens: 4 });
  assert.equal(r.tokens.length, 4);
  await m.dispose();
});

test('malformed GGUF files are refused with INVALID_WEIGHTS before anything is loaded', async () => {
  const size = fs.statSync(path.join(index.dir, 'tiny.gguf')).size;
  const files = {
    'wrong magic': [broken('magic', (b) => (b.write('GGML', 0), b)), /GGUF magic/],
    'version 9': [broken('version', (b) => (b.writeUInt32LE(9, 4), b)), /version 9/],
    'truncated header': [broken('header', (b) => b.subarray(0, 2000)), /past the end of the file/],
    'tensor data past the end': [broken('data', (b) => b.subarray(0, size - 100)), /data of tensor .* runs past the end/],
    'a tensor count larger than the file': [broken('count', (b) => (b.writeBigUInt64LE(1n << 40n, 8), b)), /more than its \d+ bytes/],
    'an array length larger than the file': [
      broken('array', (b) => {
        // tokenizer.ggml.tokens: key, type 9 (array), element type 8 (string), then the count.
        const at = b.indexOf('tokenizer.ggml.tokens') + 'tokenizer.ggml.tokens'.length + 8;
        b.writeBigUInt64LE(1n << 50n, at);
        return b;
      }),
      /claims \d+ elements/,
    ],
    empty: [broken('empty', () => Buffer.alloc(0)), /past the end of the file/],
    'metadata that contradicts the tensor shapes': [path.join(index.dir, 'shapes.gguf'), /shape \[256, 64\], but the metadata implies \[256, 96\]/],
  };
  for (const [what, [file, pattern]] of Object.entries(files)) {
    await expectReject(() => loadModel(file), 'INVALID_WEIGHTS', pattern, what);
  }
});

test('a qwen3moe GGUF without its expert count is INVALID_WEIGHTS', async () => {
  const file = broken('no-experts', (b) => (b.write('qwen3moe.expert_cXunt', b.indexOf('qwen3moe.expert_count')), b), index.fixtures['qwen3moe-q4_k_m'].gguf);
  await expectReject(() => loadModel(file), 'INVALID_WEIGHTS', /missing qwen3moe\.expert_count/);
});

test('a Phi-3 GGUF stops at <|end|>', async () => {
  const r = await (await gguf('phi3-q8_0')).generate(CHAT, { maxTokens: 8, logitBias: { 1000: 100 } });
  assert.deepEqual([r.finishReason, r.text], ['stop', '']);
});

test('a Phi-3 GGUF with half its LongRoPE factors, or without its original context, is INVALID_WEIGHTS', async () => {
  const phi3 = index.fixtures['phi3-q8_0'].gguf;
  const rename = (from, to) => (b) => (b.write(to, b.indexOf(from)), b);
  await expectReject(
    () => loadModel(broken('half-longrope', rename('rope_factors_short.weight', 'rope_factors_shorx.weight'), phi3)),
    'INVALID_WEIGHTS',
    /rope_factors_long\.weight without its pair/,
  );
  await expectReject(
    () => loadModel(broken('no-original', rename('phi3.rope.scaling.original_context_length', 'phi3.rope.scaling.original_contexX_length'), phi3)),
    'INVALID_WEIGHTS',
    /missing phi3\.rope\.scaling\.original_context_length/,
  );
  // The long factors' one dimension (6, a u64 after the name and the dimension count) set to 5.
  const shorter = (b) => (b.writeBigUInt64LE(5n, b.indexOf('rope_factors_long.weight') + 'rope_factors_long.weight'.length + 4), b);
  await expectReject(() => loadModel(broken('short-longrope', shorter, phi3)), 'INVALID_WEIGHTS', /rope_factors_long\.weight must be F32 of 6 values, got F32 \[5\]/);
});

test('a K-quant that is not a matrix (a norm stored as Q4_K) is INVALID_WEIGHTS', async () => {
  await expectReject(() => loadModel(path.join(index.dir, 'kquants-norm.gguf')), 'INVALID_WEIGHTS', /tensor "output_norm\.weight" \(Q4_K\): quantized tensors must be 2-D/);
});

test('GGUF files this loader does not support are refused with UNSUPPORTED_MODEL naming what', async () => {
  await expectReject(() => loadModel(path.join(index.dir, 'arch-falcon.gguf')), 'UNSUPPORTED_MODEL', /architecture "falcon"/);
  await expectReject(() => loadModel(path.join(index.dir, 'type-iq3_xxs.gguf')), 'UNSUPPORTED_MODEL', /blk\.1\.ffn_up\.weight" is stored as IQ3_XXS, which mlx-node cannot load \(supported: .*Q5_0, Q5_1.*Q2_K, Q3_K.*Q6_K, IQ4_NL, IQ4_XS, MXFP4\)/);
  await expectReject(() => loadModel(path.join(index.dir, 'pre-jais.gguf')), 'UNSUPPORTED_MODEL', /pre-tokenizer "jais"/);
});

// MLX's reader does not load Q5_0: a file with it is read tensor by tensor (its other tensors F16).
test('a GGUF with a Q5_0 tensor loads and generates', async () => {
  const m = await loadModel(path.join(index.dir, 'type-q5_0.gguf'));
  const r = await m.generate([1, 2, 3], { maxTokens: 4 });
  assert.equal(r.tokens.length, 4);
  await m.dispose();
});

// The tokenizer is built on a thread of its own while the tensors are read; its errors still come
// before the tensors'. A tensor renamed to one no model has is refused (UNSUPPORTED_MODEL naming
// it); in a file whose tokenizer is refused too, the tokenizer's error is the one given.
test('a GGUF file with a bad tokenizer and a bad tensor gives the tokenizer\'s error', async () => {
  const rename = (b) => {
    const at = b.indexOf('blk.0.ffn_up.weight');
    assert.ok(at > 0, 'the tensor name is in the header');
    b.write('blk.0.ffn_uq.weight', at);
    return b;
  };
  await expectReject(() => loadModel(broken('renamed', rename)), 'UNSUPPORTED_MODEL', /tensor "blk\.0\.ffn_uq\.weight" is not part of/);
  await expectReject(() => loadModel(broken('renamed-jais', rename, 'pre-jais.gguf')), 'UNSUPPORTED_MODEL', /pre-tokenizer "jais"/);
});

// qwen3-q4_0-split: three parts (the first holding only the metadata) copied into a folder of
// their own, `edit` changing the folder's files first ({ name: bytes }, a name set to null removed).
function splitCopy(label, edit = () => {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `mlx-node-split-${label}-`));
  const files = Object.fromEntries(index.fixtures['qwen3-q4_0-split'].parts.map((p) => [path.basename(p), fs.readFileSync(p)]));
  edit(files);
  for (const [name, bytes] of Object.entries(files)) if (bytes) fs.writeFileSync(path.join(dir, name), bytes);
  return (n) => path.join(dir, `qwen3-q4_0-split-0000${n}-of-00003.gguf`);
}

test('split GGUF files: a later part, a missing or foreign part, a renamed first part, a tensor twice, wrong split keys', async () => {
  const name = (n) => `qwen3-q4_0-split-0000${n}-of-00003.gguf`;
  const ok = splitCopy('ok');
  await expectReject(() => loadModel(ok(2)), 'INVALID_ARGUMENT', new RegExp(`${name(2)} is part 2 of 3 of a split GGUF file: load its first part, .*${name(1)}`), 'part 2');
  const gone = splitCopy('gone', (f) => (f[name(2)] = null));
  await expectReject(() => loadModel(gone(1)), 'MODEL_NOT_FOUND', new RegExp(`part 2 of 3 of this split GGUF file, .*${name(2)}, does not exist`), 'part 2 missing');
  // Part 2 of the two-part K-quant file in part 2's place.
  const foreign = splitCopy('foreign', (f) => (f[name(2)] = fs.readFileSync(index.fixtures['qwen3-q4_k_m-split'].parts[1])));
  await expectReject(() => loadModel(foreign(1)), 'INVALID_WEIGHTS', new RegExp(`${name(2)} is not part 2 of 3 of .*${name(1)}: its split\\.no and split\\.count are 1 and 2`), 'foreign part');
  const renamed = path.join(path.dirname(ok(1)), 'model.gguf');
  fs.copyFileSync(ok(1), renamed);
  await expectReject(() => loadModel(renamed), 'INVALID_WEIGHTS', /model\.gguf is part 1 of 3 of a split GGUF file, but its name does not end in "-00001-of-00003\.gguf"/, 'renamed');
  const twice = splitCopy('twice', (f) => f[name(3)].write('blk.0.attn_norm.weight', f[name(3)].indexOf('blk.1.attn_norm.weight')));
  await expectReject(() => loadModel(twice(1)), 'INVALID_WEIGHTS', new RegExp(`tensor "blk\\.0\\.attn_norm\\.weight" is in two parts \\(the second is .*${name(3)}\\)`), 'a tensor twice');
  // split.tensors.count (an int32 after its key and type) set to 25.
  const count = splitCopy('count', (f) => f[name(1)].writeInt32LE(25, f[name(1)].indexOf('split.tensors.count') + 'split.tensors.count'.length + 4));
  await expectReject(() => loadModel(count(1)), 'INVALID_WEIGHTS', /split\.tensors\.count is 25, but its 3 parts hold 24 tensors/, 'tensor count');
  // The first part's split.no key renamed, or its value (a u16 after the key and type) set to 5.
  const noNo = splitCopy('no-no', (f) => f[name(1)].write('split.nX', f[name(1)].indexOf('split.no')));
  await expectReject(() => loadModel(noNo(1)), 'INVALID_WEIGHTS', /not a valid split GGUF file: it has split\.count but no split\.no/, 'no split.no');
  const past = splitCopy('past', (f) => f[name(1)].writeUInt16LE(5, f[name(1)].indexOf('split.no') + 'split.no'.length + 4));
  await expectReject(() => loadModel(past(1)), 'INVALID_WEIGHTS', /not a valid split GGUF file: it says it is part 6 of 3/, 'split.no past the count');
  // Every part intact, from a folder of its own: it loads.
  const m = await loadModel(ok(1));
  assert.equal((await m.generate([1, 2, 3], { maxTokens: 3 })).tokens.length, 3);
  await m.dispose();
});

test('a missing .gguf path is MODEL_NOT_FOUND', async () => {
  await expectReject(() => loadModel(path.join(os.tmpdir(), 'no-such-model.gguf')), 'MODEL_NOT_FOUND', /does not exist/);
});
