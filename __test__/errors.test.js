'use strict';
// Every error code of DESIGN.md ("Errors"), with messages naming the file, tensor or
// option at fault; bad options reject before any work; dispose(); the process stays up.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { loadModel } = require('..');
const {
  fixtures,
  fixturePath,
  model,
  disposeModels,
  expectReject,
  expectThrow,
  expectStreamError,
  copyFixture,
  venvPython,
  NO_EOS,
  unrefDelay,
} = require('./helpers');

const M = 'qwen3-f32';
const STR = 'Hello, my name is';
const VOCAB = 151936;
const tmpDirs = [];

function tmpDir(prefix = 'mlx-node-err-') {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  tmpDirs.push(d);
  return d;
}
function fixtureCopy(name) {
  const d = copyFixture(name);
  tmpDirs.push(d);
  return d;
}

test.before(() => fixtures());
test.after(async () => {
  await disposeModels();
  for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true });
});

// Rewrites one tensor of DIR/model.safetensors: ACTION is 'reshape' or 'drop'.
function editWeights(dir, action, key) {
  venvPython(
    `
import sys, mlx.core as mx
path, action, key = sys.argv[1], sys.argv[2], sys.argv[3]
w = mx.load(path)
assert key in w, key
if action == "drop":
    del w[key]
else:
    w[key] = mx.zeros((w[key].shape[0] // 2, w[key].shape[1] + 3), dtype=w[key].dtype)
mx.save_safetensors(path, w, metadata={"format": "mlx"})
`,
    [path.join(dir, 'model.safetensors'), action, key]
  );
}

test('loadModel: a missing folder is MODEL_NOT_FOUND naming the path', async () => {
  const missing = path.join(os.tmpdir(), 'mlx-node-no-such-model-dir');
  await expectReject(() => loadModel(missing), 'MODEL_NOT_FOUND', /mlx-node-no-such-model-dir/, 'missing folder');
});

test('loadModel: a folder without config.json is MODEL_NOT_FOUND naming config.json', async () => {
  await expectReject(() => loadModel(tmpDir()), 'MODEL_NOT_FOUND', /config\.json/, 'empty folder');
});

test('loadModel: model_type gpt2 is UNSUPPORTED_MODEL naming it and the supported types', async () => {
  const dir = fixtureCopy(M);
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ ...config, model_type: 'gpt2', architectures: ['GPT2LMHeadModel'] }));
  const e = await expectReject(() => loadModel(dir), 'UNSUPPORTED_MODEL', /gpt2/, 'gpt2');
  for (const t of ['qwen3', 'llama', 'mistral', 'qwen2']) assert.match(e.message, new RegExp(`\\b${t}\\b`), `message names supported type ${t}: ${e.message}`);
});

test('loadModel: a truncated safetensors file is INVALID_WEIGHTS naming the file', async () => {
  const dir = fixtureCopy(M);
  const f = path.join(dir, 'model.safetensors');
  fs.truncateSync(f, Math.floor(fs.statSync(f).size / 2));
  await expectReject(() => loadModel(dir), 'INVALID_WEIGHTS', /model\.safetensors/, 'truncated file');
});

test('loadModel: a safetensors file with a garbage header is INVALID_WEIGHTS naming the file', async () => {
  const dir = fixtureCopy(M);
  const f = path.join(dir, 'model.safetensors');
  const fd = fs.openSync(f, 'r+');
  fs.writeSync(fd, Buffer.from('\x10\x00\x00\x00\x00\x00\x00\x00{not json at all'), 0, 24, 0);
  fs.closeSync(fd);
  await expectReject(() => loadModel(dir), 'INVALID_WEIGHTS', /model\.safetensors/, 'garbage header');
});

test('loadModel: a tensor with the wrong shape is INVALID_WEIGHTS naming the tensor', async () => {
  const dir = fixtureCopy(M);
  const key = 'model.layers.0.self_attn.q_proj.weight';
  editWeights(dir, 'reshape', key);
  const e = await expectReject(() => loadModel(dir), 'INVALID_WEIGHTS', /model\.layers\.0\.self_attn\.q_proj\.weight/, 'wrong shape');
  assert.match(e.message, /32\D+67|\[32, 67\]|\(32, 67\)/, `message gives the bad shape (32, 67): ${e.message}`);
});

test('loadModel: a missing tensor is INVALID_WEIGHTS naming the tensor', async () => {
  const dir = fixtureCopy(M);
  editWeights(dir, 'drop', 'model.layers.1.mlp.up_proj.weight');
  await expectReject(() => loadModel(dir), 'INVALID_WEIGHTS', /model\.layers\.1\.mlp\.up_proj\.weight/, 'missing tensor');
});

test('loadModel: a shard listed in the index but absent is INVALID_WEIGHTS naming the shard', async () => {
  const dir = fixtureCopy('qwen3-sharded');
  const index = JSON.parse(fs.readFileSync(path.join(dir, 'model.safetensors.index.json'), 'utf8'));
  const shard = [...new Set(Object.values(index.weight_map))].sort().pop();
  fs.rmSync(path.join(dir, shard));
  await expectReject(() => loadModel(dir), 'INVALID_WEIGHTS', new RegExp(shard.replace(/\./g, '\\.')), 'missing shard');
});

// The tokenizer is read beside the weights (on a thread of its own): its errors still come, and
// come after the model's own.
test('loadModel: a missing or malformed tokenizer.json is MODEL_NOT_FOUND / INVALID_WEIGHTS naming it; the weights\' errors first', async () => {
  const missing = fixtureCopy(M);
  fs.rmSync(path.join(missing, 'tokenizer.json'));
  await expectReject(() => loadModel(missing), 'MODEL_NOT_FOUND', /tokenizer\.json/, 'missing tokenizer.json');
  const garbage = fixtureCopy(M);
  fs.writeFileSync(path.join(garbage, 'tokenizer.json'), '{"version": "1.0", "model": {"type": "BPE", "vocab": 7}}');
  await expectReject(() => loadModel(garbage), 'INVALID_WEIGHTS', /tokenizer\.json/, 'malformed tokenizer.json');
  const notJson = fixtureCopy(M);
  fs.writeFileSync(path.join(notJson, 'tokenizer.json'), '{not json');
  await expectReject(() => loadModel(notJson), 'INVALID_WEIGHTS', /tokenizer\.json/, 'tokenizer.json not JSON');
  const both = fixtureCopy(M);
  fs.rmSync(path.join(both, 'tokenizer.json'));
  editWeights(both, 'drop', 'model.layers.1.mlp.up_proj.weight');
  await expectReject(() => loadModel(both), 'INVALID_WEIGHTS', /model\.layers\.1\.mlp\.up_proj\.weight/, 'both broken');
});

test('loadModel: bad arguments are INVALID_ARGUMENT', async () => {
  const dir = fixturePath(M);
  await expectReject(() => loadModel(dir, { dtype: 'float64' }), 'INVALID_ARGUMENT', /dtype/, 'dtype float64');
  await expectReject(() => loadModel(dir, { dtpye: 'float32' }), 'INVALID_ARGUMENT', /dtpye/, 'unknown load option');
  await expectReject(() => loadModel(42), 'INVALID_ARGUMENT', null, 'path 42');
  await expectReject(() => loadModel(dir, { signal: 'no' }), 'INVALID_ARGUMENT', /signal/, 'signal not an AbortSignal');
});

// [label, input, options, pattern the message must match]
const BAD_CALLS = [
  ['temperature -1', STR, { temperature: -1 }, /temperature/],
  ["temperature 'hot'", STR, { temperature: 'hot' }, /temperature/],
  ['temperature NaN', STR, { temperature: NaN }, /temperature/],
  ['temperature Infinity', STR, { temperature: Infinity }, /temperature/],
  ['topP 1.5', STR, { topP: 1.5 }, /topP/],
  ['topP -0.1', STR, { topP: -0.1 }, /topP/],
  ['topK -1', STR, { topK: -1 }, /topK/],
  ['topK 1e9 (>= vocab)', STR, { topK: 1e9 }, /topK/],
  ['topK 1.5', STR, { topK: 1.5 }, /topK/],
  ['minP 2', STR, { minP: 2 }, /minP/],
  ['minTokensToKeep 0', STR, { minTokensToKeep: 0 }, /minTokensToKeep/],
  ['maxTokens 0', STR, { maxTokens: 0 }, /maxTokens/],
  ['maxTokens 1.5', STR, { maxTokens: 1.5 }, /maxTokens/],
  ['maxTokens -5', STR, { maxTokens: -5 }, /maxTokens/],
  ["maxTokens '10'", STR, { maxTokens: '10' }, /maxTokens/],
  ['repetitionPenalty -1', STR, { repetitionPenalty: -1 }, /repetitionPenalty/],
  ['repetitionContextSize 0', STR, { repetitionContextSize: 0 }, /repetitionContextSize/],
  ['xtcThreshold 0.9', STR, { xtcThreshold: 0.9 }, /xtcThreshold/],
  ['xtcProbability 1.5', STR, { xtcProbability: 1.5 }, /xtcProbability/],
  ['seed -1', STR, { seed: -1 }, /seed/],
  ['seed 1.5', STR, { seed: 1.5 }, /seed/],
  ['stop not an array', STR, { stop: 'x' }, /stop/],
  ['stop with a number', STR, { stop: ['a', 1] }, /stop/],
  ['stop with an empty string', STR, { stop: [''] }, /stop/],
  ['logitBias non-integer key', STR, { logitBias: { abc: 1 } }, /logitBias/],
  ['logitBias fractional key', STR, { logitBias: { 1.5: 1 } }, /logitBias/],
  ['logitBias key >= vocab', STR, { logitBias: { [VOCAB]: 1 } }, /logitBias/],
  ['logitBias non-number value', STR, { logitBias: { 5: 'x' } }, /logitBias/],
  ['logitBias not an object', STR, { logitBias: 5 }, /logitBias/],
  ['unknown option temprature', STR, { temprature: 0.5 }, /temprature/],
  ['signal not an AbortSignal', STR, { signal: {} }, /signal/],
  ['onTextChunk not a function', STR, { onTextChunk: 5 }, /onTextChunk/],
  ['stopOnAbortSignal not a boolean', STR, { stopOnAbortSignal: 'yes' }, /stopOnAbortSignal/],
  ['options not an object', STR, 5, /options/],
  ['token id >= vocab', [1, 2, VOCAB], {}, /token|vocab|151936/],
  ['negative token id', [1, -1, 3], {}, /token|-1/],
  ['non-integer token id', [1, 2.5, 3], {}, /token|2\.5/],
  ['NaN token id', [1, NaN], {}, /token|NaN/],
  ['string in a token id array', [1, 'a'], {}, null],
  ['empty prompt array', [], {}, /empty|prompt|input/],
  ['empty string prompt (no tokens)', '', {}, /empty|prompt|input/],
  ['messages mixed with ids', [{ role: 'user', content: 'hi' }, 5], {}, null],
  ['input a number', 42, {}, /input/],
  ['input null', null, {}, /input/],
  ['input undefined', undefined, {}, /input/],
  ['input an object', { role: 'user', content: 'hi' }, {}, /input/],
];

test('generate: every bad option or input rejects with INVALID_ARGUMENT before any work', async () => {
  const m = await model(M);
  const failures = [];
  for (const [label, input, options, pattern] of BAD_CALLS) {
    let chunks = 0;
    const opts = options !== null && typeof options === 'object' ? { ...options, onTextChunk: options.onTextChunk ?? (() => chunks++) } : options;
    const t0 = performance.now();
    try {
      await expectReject(() => m.generate(input, opts), 'INVALID_ARGUMENT', pattern, `generate: ${label}`);
      assert.equal(chunks, 0, `generate: ${label}: ${chunks} chunks were generated`);
      assert.ok(performance.now() - t0 < 500, `generate: ${label}: took ${(performance.now() - t0).toFixed(0)} ms`);
    } catch (e) {
      failures.push(e.message);
    }
  }
  assert.deepEqual(failures, [], `${failures.length} of ${BAD_CALLS.length} bad calls misbehaved`);
});

test('stream: bad options and inputs fail with INVALID_ARGUMENT, no chunk emitted', async () => {
  const m = await model(M);
  const failures = [];
  for (const [label, input, options, pattern] of BAD_CALLS.filter((_, i) => i % 3 === 0)) {
    try {
      await expectStreamError(() => m.stream(input, options), 'INVALID_ARGUMENT', pattern, `stream: ${label}`);
    } catch (e) {
      failures.push(e.message);
    }
  }
  assert.deepEqual(failures, []);
});

test('encode / decode / applyChatTemplate: bad arguments throw INVALID_ARGUMENT', async () => {
  const m = await model(M);
  expectThrow(() => m.encode(42), 'INVALID_ARGUMENT', null, 'encode(42)');
  expectThrow(() => m.encode('hi', { addSpecialTokens: 'yes' }), 'INVALID_ARGUMENT', /addSpecialTokens/, 'encode addSpecialTokens');
  expectThrow(() => m.decode('hi'), 'INVALID_ARGUMENT', null, "decode('hi')");
  expectThrow(() => m.decode([1, -1]), 'INVALID_ARGUMENT', null, 'decode([1, -1])');
  expectThrow(() => m.decode([1, 2.5]), 'INVALID_ARGUMENT', null, 'decode([1, 2.5])');
  expectThrow(() => m.decode([1e9]), 'INVALID_ARGUMENT', null, 'decode([1e9])');
  expectThrow(() => m.applyChatTemplate('hi'), 'INVALID_ARGUMENT', null, "applyChatTemplate('hi')");
  expectThrow(() => m.applyChatTemplate([{ role: 'user', content: 'hi' }], { addGenerationPrompt: 'yes' }), 'INVALID_ARGUMENT', /addGenerationPrompt/, 'addGenerationPrompt');
  expectThrow(() => m.applyChatTemplate([{ role: 'user', content: 'hi' }], { tools: 'x' }), 'INVALID_ARGUMENT', /tools/, 'tools');
  expectThrow(() => m.applyChatTemplate([5]), 'INVALID_ARGUMENT', null, 'applyChatTemplate([5])');
  for (const variables of [null, 3, ['x']]) {
    expectThrow(() => m.applyChatTemplate([{ role: 'user', content: 'hi' }], { variables }), 'INVALID_ARGUMENT', /variables/, `variables ${variables}`);
  }
  // A variable with an option of its own (transformers: a TypeError for the repeated keyword).
  for (const name of ['messages', 'tools', 'documents', 'add_generation_prompt', 'enable_thinking']) {
    expectThrow(() => m.applyChatTemplate([{ role: 'user', content: 'hi' }], { variables: { [name]: true } }), 'INVALID_ARGUMENT', new RegExp(name), `variables.${name}`);
  }
});

test('dispose(): disposed becomes true, later calls fail with DISPOSED, twice is fine', async () => {
  const m = await loadModel(fixturePath(M));
  assert.equal(m.disposed, false);
  const before = await m.generate(STR, { maxTokens: 4 });
  assert.equal(before.tokens.length, 4);
  await m.dispose();
  assert.equal(m.disposed, true);
  await expectReject(() => m.generate(STR, { maxTokens: 4 }), 'DISPOSED', null, 'generate after dispose');
  await expectStreamError(() => m.stream(STR, { maxTokens: 4 }), 'DISPOSED', null, 'stream after dispose');
  expectThrow(() => m.encode('hi'), 'DISPOSED', null, 'encode after dispose');
  expectThrow(() => m.decode([1, 2]), 'DISPOSED', null, 'decode after dispose');
  expectThrow(() => m.applyChatTemplate([{ role: 'user', content: 'hi' }]), 'DISPOSED', null, 'applyChatTemplate after dispose');
  await m.dispose();
  assert.equal(m.disposed, true);
});

test('Symbol.asyncDispose disposes', async () => {
  const m = await loadModel(fixturePath(M));
  assert.equal(typeof m[Symbol.asyncDispose], 'function');
  await m[Symbol.asyncDispose]();
  assert.equal(m.disposed, true);
  await expectReject(() => m.generate(STR), 'DISPOSED', null, 'generate after asyncDispose');
});

test('dispose() while a generation runs stops it at the next token with finishReason abort', async () => {
  const m = await loadModel(fixturePath(M));
  let n = 0;
  const p = m.generate(STR, { maxTokens: 400, logitBias: NO_EOS, onTextChunk: () => n++ });
  while (n < 3) await new Promise((r) => setTimeout(r, 5));
  const d = m.dispose();
  const outcome = await Promise.race([
    p.then((r) => ({ r }), (e) => ({ e })),
    unrefDelay(60_000),
  ]);
  await d;
  assert.ok(outcome, 'the generation never settled after dispose()');
  assert.ok(!outcome.e, `rejected: ${outcome.e?.message}`);
  assert.equal(outcome.r.finishReason, 'abort');
  assert.ok(outcome.r.tokens.length < 400, `ran to ${outcome.r.tokens.length} tokens`);
  assert.equal(m.disposed, true);
});

test('after all of that the process is alive and generation still matches MLX-LM', async () => {
  const m = await model(M);
  const g = fixtures().fixtures[M].greedy;
  const r = await m.generate(g.promptText, { maxTokens: g.maxTokens });
  assert.deepEqual(r.tokens, g.prompt.tokens);
  const again = await loadModel(fixturePath('llama-f32'));
  const gl = fixtures().fixtures['llama-f32'].greedy;
  assert.deepEqual((await again.generate(gl.promptText, { maxTokens: gl.maxTokens })).tokens, gl.prompt.tokens);
  await again.dispose();
});
