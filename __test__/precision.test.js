'use strict';
// loadModel(dir, { precision: 'fast' }): quantized layers on 8-bit integer dot products (prompt
// chunks of 64 positions or more on 8-bit weights, or 4-bit ones in groups of 32, run the exact
// kernel on CPUs without AVX-512 VNNI: docs/kernels.md#fast-precision; these fixtures' chat
// prompts are shorter)
// (crates/mlx/src/cpu/qmm_int8.rs), the default for affine-quantized models on the CPU
// (LanguageModel.precision says which applies; 'exact' elsewhere and on request). Its results are not MLX-LM's bits, so it is checked
// against our exact mode (itself checked against MLX-LM in parity.test.js): the same greedy
// tokens, log-probabilities within 6e-2 (up to 2.9e-2 on these random-weight fixtures since 4-bit
// weights take 12-bit activations, lo_shift in qmm_int8.rs; 6.3e-3 with 15-bit ones; on the
// trained model of bench:llama's quality gate the mean KL stays near 1e-5). For
// bfloat16 models exact mode repeats MLX's bfloat16 arithmetic, which rounds every partial sum
// to bfloat16, while fast mode sums in float32: there it must land closer than exact mode to
// the same model computed in float32. The kernel gives the same bits on every CPU path
// (AMX, AVX-512 VNNI, AVX-VNNI, AVX2, portable), so these outcomes do not depend on the machine;
// a child process on the portable path (MLX_NODE_CPU_FEATURES=baseline) must match this one
// bit for bit, and with the kernel switched off fast mode is exact mode. Fast mode's decode
// steps also run attention as one kernel (crates/mlx/src/cpu/decode_attention.rs, its own sums,
// the same bits on every CPU path too; a bfloat16 cache read as it is, summed in float32), over
// keys and values kept in float16 where they would be float32 (MLX_NODE_HALF_KV=0 keeps float32);
// with both kernels off it is exact mode. Fast layers hold
// their weights laid out once at load for the kernel (crates/mlx/src/cpu/qmm_repack.rs), which
// must not change a bit: MLX_NODE_REPACK=0 (MLX's layout, laid out per call) gives the same output.
// Exact layers hold the same layout, for MLX's arithmetic (crates/mlx/src/cpu/qmm_exact_repack.rs):
// there too MLX_NODE_REPACK=0 gives the same bits (and parity.test.js checks them against MLX-LM).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { fixtures, expectReject } = require('./helpers');
const { maxAbsDiff } = require('./safetensors');

const CHAT = [{ role: 'user', content: 'What is the capital of France?' }];
const OPTIONS = { maxTokens: 24, logprobs: true, topLogprobs: 3, logitBias: { 151645: -1e9, 151643: -1e9 } };
// Float32 activations with 4- and 8-bit weights (and mixed), and bfloat16 ones (MLX-community's format).
const FLOAT32 = ['qwen3-q4', 'qwen3-q8', 'qwen3-q4-mixed'];
const MODELS = [...FLOAT32, 'qwen3-bf16-q4'];

// Greedy tokens and log-probabilities of each model loaded with `load` options, in a child
// process with `env` added (mlxInfo().kernels too), as JSON.
function child(load, env = {}, chat = CHAT) {
  const paths = Object.fromEntries(MODELS.map((m) => [m, fixtures().fixtures[m].path]));
  const script = `
    const { loadModel, mlxInfo } = require('.');
    (async () => {
      const out = { kernels: mlxInfo().kernels };
      for (const [name, dir] of Object.entries(${JSON.stringify(paths)})) {
        const m = await loadModel(dir, ${JSON.stringify(load)});
        const r = await m.generate(${JSON.stringify(chat)}, ${JSON.stringify(OPTIONS)});
        out[name] = { tokens: r.tokens, logprobs: r.logprobs.map((l) => l.logprob), top: r.logprobs.map((l) => l.top) };
        await m.dispose();
      }
      process.stdout.write(JSON.stringify(out));
    })().catch((e) => { console.error(e); process.exit(1); });`;
  const r = spawnSync(process.execPath, ['-e', script], {
    cwd: path.join(__dirname, '..'),
    env: { ...process.env, MLX_NODE_CPU_KERNELS: '', MLX_NODE_QMM_INT8_KERNEL: '', MLX_NODE_DECODE_ATTENTION_KERNEL: '', MLX_NODE_CPU_FEATURES: '', MLX_NODE_REPACK: '', MLX_NODE_HALF_KV: '', ...env },
    encoding: 'utf8',
    timeout: 600_000,
  });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}

let exact;
let fast;
// Fast precision with float32 caches (MLX_NODE_HALF_KV=0): the matmul and attention kernels'
// own arithmetic, without the float16 cache's rounding.
let fastF32Cache;
test.before(() => {
  exact = child({ precision: 'exact' });
  fast = child({ precision: 'fast' });
  fastF32Cache = child({ precision: 'fast' }, { MLX_NODE_HALF_KV: '0' });
});

// Greedy tokens of `name` loaded with `load`, and the precision it reports, in this process.
async function run(name, load) {
  const { loadModel } = require('..');
  const m = await loadModel(fixtures().fixtures[name].path, load);
  try {
    const r = await m.generate(CHAT, { maxTokens: 8, logprobs: true });
    return { precision: m.precision, tokens: r.tokens, logprobs: r.logprobs.map((l) => l.logprob) };
  } finally {
    await m.dispose();
  }
}

test('the default: fast for an affine-quantized model on the CPU, exact for a float one; explicit values obeyed', async () => {
  // A 4-bit model without the option runs as { precision: 'fast' } does, bit for bit.
  const byDefault = await run('qwen3-q4', {});
  assert.equal(byDefault.precision, 'fast');
  const q4 = { fast: await run('qwen3-q4', { precision: 'fast' }), exact: await run('qwen3-q4', { precision: 'exact' }) };
  assert.deepEqual(byDefault, q4.fast);
  assert.equal(q4.exact.precision, 'exact');
  assert.notDeepEqual(q4.exact.logprobs, q4.fast.logprobs, 'exact and fast gave the same bits');
  // A float32 model without the option runs as { precision: 'exact' } does; asked, it says fast.
  const f32 = await run('qwen3-f32', {});
  assert.equal(f32.precision, 'exact');
  assert.deepEqual(f32, await run('qwen3-f32', { precision: 'exact' }));
  assert.equal((await run('qwen3-f32', { precision: 'fast' })).precision, 'fast');
  // Floating-point modes have no fast kernel: exact by default.
  assert.equal((await run('qwen3-mxfp8', {})).precision, 'exact');
});

test('precision must be "exact" or "fast"', async () => {
  const { loadModel } = require('..');
  const dir = fixtures().fixtures['qwen3-q4'].path;
  for (const bad of ['Fast', 'int8', 1, null]) {
    await expectReject(() => loadModel(dir, { precision: bad }), 'INVALID_ARGUMENT', /precision must be 'exact' or 'fast'/, `precision ${bad}`);
  }
});

test('fast precision: the exact mode greedy tokens, log-probabilities within 6e-2 (float32 caches)', () => {
  assert.equal(fast.kernels.qmmInt8, true);
  assert.equal(fast.kernels.decodeAttention, true);
  for (const name of FLOAT32) {
    assert.deepEqual(fast[name].tokens, exact[name].tokens, name);
    assert.deepEqual(fastF32Cache[name].tokens, exact[name].tokens, name);
    const worst = maxAbsDiff(fastF32Cache[name].logprobs, exact[name].logprobs);
    assert.ok(worst < 6e-2, `${name}: log-probabilities differ by up to ${worst}`);
    // Not the exact bits: the kernel really ran.
    assert.notDeepEqual(fastF32Cache[name].logprobs, exact[name].logprobs, `${name}: fast mode gave exact mode's bits`);
  }
});

// Float16 keys and values where they would be float32 (llama.cpp's default cache): half the
// bytes a decode step reads. On these random-weight models the keys are large enough that float16's
// rounding moves log-probabilities by up to 4.8e-2 (greedy tokens unchanged); on the trained model
// (bench:llama's quality gate) the mean KL against exact mode stays under 1e-6.
test('fast precision keeps float32 keys and values as float16 (MLX_NODE_HALF_KV=0 keeps float32)', async () => {
  for (const name of FLOAT32) {
    assert.deepEqual(fast[name].tokens, fastF32Cache[name].tokens, name);
    assert.notDeepEqual(fast[name].logprobs, fastF32Cache[name].logprobs, `${name}: the cache was not float16`);
    const worst = maxAbsDiff(fast[name].logprobs, fastF32Cache[name].logprobs);
    assert.ok(worst < 0.1, `${name}: log-probabilities differ by up to ${worst}`);
  }
  // A bfloat16 model's cache is bfloat16 already: untouched.
  assert.deepEqual(fast['qwen3-bf16-q4'], fastF32Cache['qwen3-bf16-q4']);
  // Half the bytes held, against exact mode's float32 cache.
  const { loadModel } = require('..');
  const held = async (precision) => {
    const m = await loadModel(fixtures().fixtures['qwen3-q4'].path, { precision });
    try {
      const cache = m.createPromptCache();
      await cache.prefill(CHAT);
      return cache.nbytes;
    } finally {
      await m.dispose();
    }
  };
  const [f, e] = [await held('fast'), await held('exact')];
  assert.ok(f > 0 && f * 2 === e, `fast holds ${f} bytes, exact ${e}`);
});

// The bfloat16 model computed in float32 (exact mode), and a run's distance from it at the first
// position (the same prompt on every side, before the texts can part): the top log-probabilities'.
let f32Run;
function fromFloat32(run) {
  f32Run ??= child({ precision: 'exact', dtype: 'float32' })['qwen3-bf16-q4'];
  return run.top[0].reduce((a, t) => {
    const ref = f32Run.top[0].find((r) => r.token === t.token);
    return a + (ref ? Math.abs(ref.logprob - t.logprob) : Infinity);
  }, 0);
}

test('fast precision on a bfloat16 model: closer than exact mode to the float32 computation', () => {
  const name = 'qwen3-bf16-q4';
  const [dFast, dExact] = [fromFloat32(fast[name]), fromFloat32(exact[name])];
  assert.ok(dFast < dExact, `fast is ${dFast} from float32, exact bfloat16 ${dExact}`);
});

test('fast precision gives the same bits on the portable path (a CPU without AVX2)', () => {
  const portable = child({ precision: 'fast' }, { MLX_NODE_CPU_FEATURES: 'baseline' });
  for (const name of MODELS) assert.deepEqual(portable[name], fast[name], name);
});

// On an AVX-512 or AVX-VNNI CPU this compares its VNNI paths with the AVX2 ones (8-bit weights
// there sum as signed bytes); on an AVX2-only CPU both runs take the same paths.
test('fast precision gives the same bits with AVX2 alone (MLX_NODE_CPU_FEATURES=avx2)', () => {
  const avx2 = child({ precision: 'fast' }, { MLX_NODE_CPU_FEATURES: 'avx2' });
  for (const name of MODELS) assert.deepEqual(avx2[name], fast[name], name);
});

// On an AMX CPU this compares the tiles with the AVX-512 path: the prompt (a longer chat, 16
// positions or more and under 64) runs on them. Elsewhere both runs take the same paths.
test('fast precision gives the same bits without AMX (MLX_NODE_CPU_FEATURES=avx512)', () => {
  const chat = [{ role: 'user', content: 'What is the capital of France? Please answer in one short sentence.' }];
  const [amx, noAmx] = [child({ precision: 'fast' }, {}, chat), child({ precision: 'fast' }, { MLX_NODE_CPU_FEATURES: 'avx512' }, chat)];
  for (const name of MODELS) assert.deepEqual(noAmx[name], amx[name], name);
});

test('weights repacked at load give fast precision\'s bits laid out per call (MLX_NODE_REPACK=0)', () => {
  const perCall = child({ precision: 'fast' }, { MLX_NODE_REPACK: '0' });
  for (const name of MODELS) assert.deepEqual(perCall[name], fast[name], name);
});

test('exact precision on weights repacked at load gives the bits of MLX\'s layout (MLX_NODE_REPACK=0)', () => {
  const perCall = child({ precision: 'exact' }, { MLX_NODE_REPACK: '0' });
  for (const name of MODELS) assert.deepEqual(perCall[name], exact[name], name);
});

test('fast precision\'s decode steps run attention as one kernel: not the bits of MLX\'s ops, the same tokens', () => {
  const ops = child({ precision: 'fast' }, { MLX_NODE_DECODE_ATTENTION_KERNEL: '0' });
  assert.equal(ops.kernels.decodeAttention, false);
  // bfloat16 keys and values: read as they are and summed in float32 (MLX's ops sum in float32
  // too, rounding their inputs and outputs to bfloat16), so not the same bits, and still closer to
  // the float32 computation than exact mode's bfloat16 arithmetic (the texts soon part on this
  // random-weight model, so its first position is compared, as above).
  const bf16 = 'qwen3-bf16-q4';
  assert.notDeepEqual(fast[bf16].logprobs, ops[bf16].logprobs, 'bfloat16: the kernel did not run');
  const [dKernel, dExact] = [fromFloat32(fast[bf16]), fromFloat32(exact[bf16])];
  assert.ok(dKernel < dExact, `bfloat16: the kernel is ${dKernel} from float32, exact mode ${dExact}`);
  // With the kernel off the cache stays float32, so the float32-cache run is the one to compare.
  for (const name of FLOAT32) {
    assert.deepEqual(fastF32Cache[name].tokens, ops[name].tokens, name);
    assert.notDeepEqual(fastF32Cache[name].logprobs, ops[name].logprobs, `${name}: the kernel did not run`);
    const worst = maxAbsDiff(fastF32Cache[name].logprobs, ops[name].logprobs);
    // Up to 3.2e-3 (9e-4 with 15-bit activations: an attention output that moves by its rounding
    // can move the next layer's activations by a 12-bit step).
    assert.ok(worst < 1e-2, `${name}: log-probabilities differ by up to ${worst}`);
  }
});

test('with MLX_NODE_QMM_INT8_KERNEL=0 and MLX_NODE_DECODE_ATTENTION_KERNEL=0, fast precision is exact mode', () => {
  const off = child({ precision: 'fast' }, { MLX_NODE_QMM_INT8_KERNEL: '0', MLX_NODE_DECODE_ATTENTION_KERNEL: '0' });
  assert.equal(off.kernels.qmmInt8, false);
  assert.equal(off.kernels.decodeAttention, false);
  for (const name of MODELS) assert.deepEqual(off[name], exact[name], name);
});

test('a fast model\'s saved chat (float16 cache) continues the same when loaded back, and loads in exact mode too', async () => {
  const { loadModel } = require('..');
  const dir = fixtures().fixtures['qwen3-q4'].path;
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'mlx-node-precision-'));
  const [fastModel, exactModel] = [await loadModel(dir, { precision: 'fast' }), await loadModel(dir, { precision: 'exact' })];
  try {
    const chat = fastModel.createChat({ maxTokens: 8, logitBias: OPTIONS.logitBias });
    await chat.send('What is the capital of France?');
    const f = path.join(tmp, 'fast-chat.safetensors');
    await chat.save(f);
    const loaded = await fastModel.loadChat(f);
    const [a, b] = [await chat.send('Thanks!'), await loaded.send('Thanks!')];
    assert.deepEqual(b.tokens, a.tokens);
    assert.ok(b.cachedTokens > 0 && b.cachedTokens === a.cachedTokens, `cached ${b.cachedTokens} against ${a.cachedTokens}`);
    // Exact mode reads it too (appending in float16, as MLX-LM does with such a file), and a fast
    // model reads exact mode's float32 file.
    const inExact = await exactModel.loadChat(f);
    assert.ok((await inExact.send('Thanks!')).cachedTokens > 0);
    const exactChat = exactModel.createChat({ maxTokens: 8, logitBias: OPTIONS.logitBias });
    await exactChat.send('What is the capital of France?');
    const fe = path.join(tmp, 'exact-chat.safetensors');
    await exactChat.save(fe);
    assert.ok((await (await fastModel.loadChat(fe)).send('Bye.')).cachedTokens > 0);
  } finally {
    await fastModel.dispose();
    await exactModel.dispose();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});
