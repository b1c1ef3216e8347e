'use strict';
// Models split across processes (loadModel's `distributed` option, tensor parallel): two
// processes over MLX's ring backend on 127.0.0.1 give the tokens of one process, and MLX-LM's
// own sharded generation (sharded_load under `mlx.launch --backend ring -n 2`) gives the same
// tokens on the same fixtures. Then the faults: a peer that never comes, a peer that dies,
// processes holding different models, models MLX-LM cannot split, and bad options.
// `npm run test:distributed` (outside `npm test` for time; .ci/run runs both).
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');
const { fixturePath, disposeModels, expectReject, useFamilyFixtures } = require('./helpers');

// Some cases run other families' fixtures (phi3-f32), a set of their own (scripts/fixtures.js).
useFamilyFixtures();
const { launchLocal, writeHostfile } = require('../lib/launch');
const { ensureVenv } = require('../scripts/venv');
const { loadModel } = require('..');

after(disposeModels);

const RANK = path.join(__dirname, 'distributed-rank.js');
const REF = path.join(__dirname, 'ref', 'mlx_lm_ref.py');

// Families MLX-LM shards (dense, mixture of experts, sinks and sliding windows), float and
// quantized (affine in groups of 32, MXFP4).
const MODELS = [
  'qwen3-f32',
  'llama-f32',
  'mistral-f32',
  'qwen2-f32',
  'ministral3-f32',
  'qwen3-bf16',
  'qwen3-q4-g32',
  'qwen3-moe-f32',
  'gpt-oss-f32',
  'gpt-oss-mxfp4',
];
// Shorter and longer than the 8-position sliding windows of gpt-oss and ministral3.
const INPUTS = [
  [1, 2, 3, 4, 5],
  [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'Name three rivers of Europe and say which is longest.' },
  ],
];
const OPTIONS = [{ maxTokens: 16 }, { maxTokens: 12, temperature: 0.8, topP: 0.9, seed: 3 }];

// Qwen3.5 (Gated DeltaNet and gated attention layers, dense and with experts; the dense
// model's LM head split by vocabulary): one case per model and strategy, greedy on one and
// seeded on the other, for the suite's time.
const QWEN3_5 = {
  tensor: [
    ['qwen3_5-f32', 1, 0],
    ['qwen3_5-moe-f32', 1, 1],
  ],
  pipeline: [
    ['qwen3_5-f32', 1, 1],
    ['qwen3_5-moe-f32', 0, 0],
  ],
};

function cases(models = MODELS, extra = []) {
  const out = [];
  for (const model of models) {
    for (const input of INPUTS) for (const options of OPTIONS) out.push({ model: fixturePath(model), name: model, input, options });
  }
  for (const [model, input, options] of extra) out.push({ model: fixturePath(model), name: model, input: INPUTS[input], options: OPTIONS[options] });
  return out;
}

// Our side: the rank script as `n` ranks (or one plain process when n is 0).
async function ours(request, n) {
  const arg = JSON.stringify(request);
  if (n === 0) {
    const r = spawnSync(process.execPath, [RANK, arg], { encoding: 'utf8', timeout: 300000 });
    assert.equal(r.status, 0, r.stderr);
    return [JSON.parse(r.stdout)];
  }
  const piped = () => ['ignore', 'pipe', 'pipe'];
  const { codes, outputs } = await launchLocal({ n, command: process.execPath, args: [RANK, arg], stdio: piped, graceMs: 20000 });
  return outputs.map((o, rank) => {
    assert.equal(codes[rank], 0, `rank ${rank} failed:\n${o.stderr}`);
    return JSON.parse(o.stdout);
  });
}

// MLX-LM under mlx.launch: every rank runs mlx_lm_ref.py on the same request, rank 0 answers.
function mlxLmSharded(refCases, strategy = 'tensor') {
  const venv = ensureVenv();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mlx-node-dist-'));
  const request = path.join(dir, 'request.json');
  const answer = path.join(dir, 'answer.json');
  fs.writeFileSync(request, JSON.stringify({ cases: refCases, strategy }));
  const launch = path.join(path.dirname(venv.python), 'mlx.launch');
  return new Promise((resolve, reject) => {
    const child = spawn(launch, ['--backend', 'ring', '-n', '2', '--starting-port', String(40000 + (process.pid % 20000)), venv.python, REF, request, answer], {
      env: venv.env,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const err = [];
    child.stderr.on('data', (d) => err.push(d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 600000);
    child.on('close', (code) => {
      clearTimeout(timer);
      try {
        assert.equal(code, 0, `mlx.launch failed:\n${Buffer.concat(err)}`);
        resolve(JSON.parse(fs.readFileSync(answer, 'utf8')).results);
      } catch (e) {
        reject(e);
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });
  });
}

// Float32 models compute the same tokens split or whole (only the order of the sums differs);
// in bfloat16 each process rounds its partial sums, so split and whole may part ways there
// (as they do in MLX-LM): those compare split against MLX-LM split only.
const FLOAT32 = new Set([
  'qwen3-f32',
  'llama-f32',
  'mistral-f32',
  'qwen2-f32',
  'ministral3-f32',
  'qwen3-q4-g32',
  'qwen3-moe-f32',
  'gpt-oss-f32',
  'qwen3_5-f32',
  'qwen3_5-moe-f32',
]);

test('two processes split each model and give the tokens of one process and of MLX-LM sharded', async () => {
  const all = cases(MODELS, QWEN3_5.tensor);
  const request = { cases: all.map(({ model, input, options }) => ({ model, input, options })) };
  const [[alone], [rank0, rank1], ref] = await Promise.all([ours(request, 0), ours(request, 2), mlxLmSharded(request.cases)]);
  const wrong = [];
  all.forEach((c, i) => {
    const label = `${c.name} ${JSON.stringify(c.input).slice(0, 20)} ${JSON.stringify(c.options)}`;
    assert.ok(!ref[i].error, `${label}: MLX-LM failed: ${ref[i].error}`);
    assert.ok(ref[i].tokens.length > 0, label);
    const sides = [['rank 0', rank0[i]], ['rank 1', rank1[i]]];
    if (FLOAT32.has(c.name)) sides.push(['one process', alone[i]]);
    for (const [who, r] of sides) {
      assert.ok(!r.error, `${label} ${who}: ${r.error} ${r.message}`);
      if (JSON.stringify(r.tokens) !== JSON.stringify(ref[i].tokens)) wrong.push(`${label}: ${who} ${r.tokens} vs MLX-LM sharded ${ref[i].tokens}`);
    }
    assert.equal(rank1[i].text, rank0[i].text, label);
    assert.deepEqual(alone[i].distributed, null);
    assert.deepEqual(rank0[i].distributed, { rank: 0, size: 2, backend: 'ring', strategy: 'tensor', leader: false });
    assert.deepEqual(rank1[i].distributed, { rank: 1, size: 2, backend: 'ring', strategy: 'tensor', leader: false });
  });
  assert.deepEqual(wrong, []);
});

// The families MLX-LM pipelines (PipelineMixin): 2, 3 and 4 layers (an uneven split: rank 0
// takes the extra layer), sliding windows in ministral3, Qwen3.5's linear and attention layers
// on each rank. A pipeline moves whole layers, so the arithmetic is one process's.
const PIPELINE = ['qwen2-f32', 'qwen3-moe-f32', 'ministral3-f32'];

test('a pipeline of two processes gives the tokens of one process and of MLX-LM pipelined', async () => {
  const all = cases(PIPELINE, QWEN3_5.pipeline);
  const request = { cases: all.map(({ model, input, options }) => ({ model, input, options })), strategy: 'pipeline' };
  const [[alone], [rank0, rank1], ref] = await Promise.all([ours(request, 0), ours(request, 2), mlxLmSharded(request.cases, 'pipeline')]);
  const wrong = [];
  all.forEach((c, i) => {
    const label = `${c.name} ${JSON.stringify(c.input).slice(0, 20)} ${JSON.stringify(c.options)}`;
    assert.ok(!ref[i].error, `${label}: MLX-LM failed: ${ref[i].error}`);
    for (const [who, r] of [['rank 0', rank0[i]], ['rank 1', rank1[i]], ['one process', alone[i]]]) {
      assert.ok(!r.error, `${label} ${who}: ${r.error} ${r.message}`);
      if (JSON.stringify(r.tokens) !== JSON.stringify(ref[i].tokens)) wrong.push(`${label}: ${who} ${r.tokens} vs MLX-LM pipelined ${ref[i].tokens}`);
    }
    assert.deepEqual(rank1[i].distributed, { rank: 1, size: 2, backend: 'ring', strategy: 'pipeline', leader: false });
  });
  assert.deepEqual(wrong, []);
});

test('models MLX-LM cannot split are refused on every process, as MLX-LM refuses them', async () => {
  // phi3: no shard() in MLX-LM; qwen3-q4: 64 inputs of o_proj in groups of 64 cannot halve.
  const request = {
    cases: [
      { model: fixturePath('phi3-f32'), input: [1, 2, 3], options: { maxTokens: 2 } },
      { model: fixturePath('qwen3-q4'), input: [1, 2, 3], options: { maxTokens: 2 } },
    ],
  };
  const [[r0, r1], ref] = await Promise.all([ours(request, 2), mlxLmSharded(request.cases)]);
  for (const r of [r0, r1]) {
    assert.equal(r[0].error, 'UNSUPPORTED_MODEL', r[0].message);
    assert.match(r[0].message, /phi3 models cannot be split across processes/);
    assert.equal(r[1].error, 'UNSUPPORTED_MODEL', r[1].message);
    assert.match(r[1].message, /cannot split axis -1 of tensor "model\.layers\.0\.self_attn\.o_proj\.scales" \(1\) evenly across 2 processes/);
  }
  assert.match(ref[0].error, /does not support any sharding/);
  assert.ok(ref[1].error, 'MLX-LM cannot split the 64-group quantized layers either');
  // llama has no pipeline() in MLX-LM.
  const llama = { cases: [{ model: fixturePath('llama-f32'), input: [1, 2, 3], options: { maxTokens: 2 } }], strategy: 'pipeline' };
  const [[l0, l1], lref] = await Promise.all([ours(llama, 2), mlxLmSharded(llama.cases, 'pipeline')]);
  for (const r of [l0, l1]) {
    assert.equal(r[0].error, 'UNSUPPORTED_MODEL', r[0].message);
    assert.match(r[0].message, /llama models cannot be split into a pipeline \(as in MLX-LM, whose model has no pipeline\(\)\); families that can: qwen2, ministral3, qwen3_moe, qwen3_5, qwen3_5_moe$/);
  }
  assert.match(lref[0].error, /pipeline/);
});

test('processes holding different models stop with DISTRIBUTED_ERROR before reading weights', async () => {
  const script = `
    const { loadModel } = require(${JSON.stringify(path.join(__dirname, '..'))});
    const dir = process.env.MLX_RANK === '0' ? ${JSON.stringify(fixturePath('qwen3-f32'))} : ${JSON.stringify(fixturePath('llama-f32'))};
    loadModel(dir, { distributed: { backend: 'ring', timeout: 60000 } }).then(
      () => console.log('loaded'),
      (e) => console.log(JSON.stringify({ code: e.code, message: e.message })));`;
  const { codes, outputs } = await launchLocal({ n: 2, command: process.execPath, args: ['-e', script], stdio: () => ['ignore', 'pipe', 'pipe'] });
  assert.deepEqual(codes, [0, 0]);
  outputs.forEach((o, rank) => {
    const r = JSON.parse(o.stdout);
    assert.equal(r.code, 'DISTRIBUTED_ERROR', o.stdout);
    assert.match(r.message, new RegExp(`process ${1 - rank} of the group loaded a different model than process ${rank}`));
  });
});

test('a peer that never connects fails the load within its timeout', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mlx-node-alone-'));
  const hostfile = await writeHostfile(2, dir);
  const request = { cases: [{ model: fixturePath('qwen3-f32'), input: [1], options: { maxTokens: 1 } }], timeout: 2000 };
  const t0 = Date.now();
  const r = spawnSync(process.execPath, [RANK, JSON.stringify(request)], {
    encoding: 'utf8',
    timeout: 60000,
    env: { ...process.env, MLX_RANK: '0', MLX_HOSTFILE: hostfile },
  });
  fs.rmSync(dir, { recursive: true, force: true });
  const elapsed = Date.now() - t0;
  assert.equal(r.status, 0, r.stderr);
  const [res] = JSON.parse(r.stdout);
  assert.equal(res.error, 'DISTRIBUTED_ERROR', res.message);
  assert.match(res.message, /did not connect within 2 s \(MLX_RANK=0, MLX_HOSTFILE=/);
  // The process exits although MLX's connecting thread still waits.
  assert.ok(elapsed < 30000, `took ${elapsed} ms`);
});

test('a peer that dies makes the generation fail with DISTRIBUTED_ERROR, not hang', async () => {
  const request = { cases: [{ model: fixturePath('qwen3-f32'), input: [1, 2, 3], options: { maxTokens: 64 } }], dieAfterLoad: 1 };
  const { codes, outputs } = await launchLocal({ n: 2, command: process.execPath, args: [RANK, JSON.stringify(request)], stdio: () => ['ignore', 'pipe', 'pipe'] });
  assert.deepEqual(codes, [0, 0], outputs.map((o) => o.stderr).join('\n'));
  const [res] = JSON.parse(outputs[0].stdout);
  assert.equal(res.error, 'DISTRIBUTED_ERROR', res.message);
  assert.match(res.message, /connection to a peer was lost/);
});

test('distributed options are checked before anything starts', async () => {
  const dir = fixturePath('qwen3-f32');
  const bad = [
    [{ distributed: null }, /option distributed must be an object/],
    [{ distributed: { backend: 'tcp' } }, /option distributed\.backend must be 'ring', 'mpi' or 'any', got "tcp"/],
    [{ distributed: { strategy: 'data' } }, /option distributed\.strategy must be 'tensor' or 'pipeline', got "data"/],
    [{ distributed: { timeout: 0 } }, /option distributed\.timeout must be an integer number of milliseconds >= 1, got 0/],
    [{ distributed: { hosts: [] } }, /unknown option "distributed\.hosts"/],
    [{ distributed: {}, maxBatch: 4 }, /option maxBatch must be 1 for a distributed model that is not led by rank 0, got 4/],
    [{ distributed: { leader: 'yes' } }, /option distributed\.leader must be a boolean, got "yes"/],
  ];
  for (const [options, pattern] of bad) {
    await expectReject(() => loadModel(dir, options), 'INVALID_ARGUMENT', pattern, JSON.stringify(options));
  }
});

test('without mlx.launch\'s environment the ring backend refuses to start', async () => {
  const script = `
    const { loadModel } = require(${JSON.stringify(path.join(__dirname, '..'))});
    loadModel(${JSON.stringify(fixturePath('qwen3-f32'))}, { distributed: { backend: 'ring', timeout: 20000 } }).then(
      () => console.log('loaded'),
      (e) => console.log(JSON.stringify({ code: e.code, message: e.message })));`;
  const env = { ...process.env };
  delete env.MLX_RANK;
  delete env.MLX_HOSTFILE;
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', env, timeout: 60000 });
  const res = JSON.parse(r.stdout);
  assert.equal(res.code, 'DISTRIBUTED_ERROR', r.stdout);
  assert.match(res.message, /the ring backend could not start: .*\(MLX_RANK unset, MLX_HOSTFILE unset\)/);
});

test('mlx-node launch -- generate and chat print what one process prints, split or pipelined', () => {
  const bin = path.join(__dirname, '..', 'bin', 'mlx-node.js');
  const args = ['generate', fixturePath('qwen3-f32'), 'Hello there', '--max-tokens', '12', '-q'];
  const alone = spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', timeout: 120000 });
  assert.equal(alone.status, 0, alone.stderr);
  const split = spawnSync(process.execPath, [bin, 'launch', '-n', '2', '--', ...args], { encoding: 'utf8', timeout: 120000 });
  assert.equal(split.status, 0, split.stderr);
  assert.ok(alone.stdout.length > 0);
  assert.equal(split.stdout, alone.stdout);
  const qwen2 = ['generate', fixturePath('qwen2-f32'), 'Hello there', '--max-tokens', '12', '-q'];
  const alone2 = spawnSync(process.execPath, [bin, ...qwen2], { encoding: 'utf8', timeout: 120000 });
  const piped = spawnSync(process.execPath, [bin, 'launch', '--pipeline', '--', ...qwen2], { encoding: 'utf8', timeout: 120000 });
  assert.equal(piped.status, 0, piped.stderr);
  assert.ok(alone2.stdout.length > 0);
  assert.equal(piped.stdout, alone2.stdout);
  // chat: rank 0 reads stdin and leads, rank 1 follows; two turns, the second on the first's
  // cache (pipelined, each rank holds some layers' caches: all agree on the cached length).
  for (const [model, pipeline] of [['qwen3-f32', []], ['qwen2-f32', ['--pipeline']]]) {
    const chat = ['chat', fixturePath(model), '--max-tokens', '8', '-q'];
    const input = 'Hello there\nAnd once more\n';
    const chatAlone = spawnSync(process.execPath, [bin, ...chat], { encoding: 'utf8', input, timeout: 120000 });
    assert.equal(chatAlone.status, 0, chatAlone.stderr);
    const chatSplit = spawnSync(process.execPath, [bin, 'launch', ...pipeline, '--', ...chat], { encoding: 'utf8', input, timeout: 120000 });
    assert.equal(chatSplit.status, 0, chatSplit.stderr);
    assert.equal(chatAlone.stdout.split('\n').length, 3, chatAlone.stdout);
    assert.equal(chatSplit.stdout, chatAlone.stdout, model);
  }
  const refused = spawnSync(process.execPath, [bin, 'launch', '--', 'speak', 'x'], { encoding: 'utf8' });
  assert.equal(refused.status, 2);
  assert.match(refused.stderr, /'speak' cannot run split across processes yet/);
});

// distributed.leader: rank 0 makes the calls, the other processes follow() it.
const LEADER = path.join(__dirname, 'distributed-leader.js');

async function leaderRun(mode, model = fixturePath('qwen3-f32')) {
  const arg = JSON.stringify({ model, mode });
  const { codes, outputs } = await launchLocal({ n: 2, command: process.execPath, args: [LEADER, arg], stdio: () => ['ignore', 'pipe', 'pipe'], graceMs: 20000 });
  return outputs.map((o, rank) => {
    assert.equal(codes[rank], 0, `rank ${rank} failed:\n${o.stderr}`);
    return JSON.parse(o.stdout);
  });
}

test('rank 0 leads and rank 1 follows: batched, cached, trimmed, seeded and aborted generations give one process\'s tokens, and an idle follower costs no CPU', async () => {
  const solo = spawnSync(process.execPath, [LEADER, JSON.stringify({ model: fixturePath('qwen3-f32'), mode: 'solo' })], { encoding: 'utf8', timeout: 300000 });
  assert.equal(solo.status, 0, solo.stderr);
  const alone = JSON.parse(solo.stdout);
  const [r0, r1] = await leaderRun('work');
  assert.deepEqual(r0.info, { rank: 0, size: 2, backend: 'ring', strategy: 'tensor', leader: true });
  assert.deepEqual(r1.info, { rank: 1, size: 2, backend: 'ring', strategy: 'tensor', leader: true });
  // Five requests at once with maxBatch 4: batched on both processes alike.
  assert.deepEqual(r0.concurrent, alone.concurrent);
  assert.ok(alone.concurrent.every((t) => t.length > 0));
  // The prompt cache's copy on rank 1 follows rank 0's reuse and trim.
  assert.deepEqual(r0.cached, alone.cached);
  assert.ok(r0.cached.second[1] > 0 && r0.cached.trimmed === 5 && r0.cached.third[1] > 0, JSON.stringify(r0.cached));
  // An abort on rank 0 stops both at the same step: the next request is still right.
  assert.equal(r0.aborted.finishReason, 'abort');
  assert.ok(r0.aborted.tokens < 200);
  assert.deepEqual(r0.after, alone.concurrent[0]);
  assert.deepEqual(r1.follow, { ok: true });
  // While rank 0 sleeps, rank 1 waits on its doorbell (MLX's ring would poll its socket, a
  // core's worth of CPU): well under a quarter of the time.
  const [from, to] = r0.idle;
  const inside = r1.cpu.filter(([t]) => t >= from + 300 && t <= to - 100);
  assert.ok(inside.length >= 10, `${inside.length} samples in the idle spell`);
  const used = inside.at(-1)[1] - inside[0][1];
  const spell = inside.at(-1)[0] - inside[0][0];
  assert.ok(used < spell / 4, `rank 1 used ${used.toFixed(0)} ms of CPU in ${spell} ms while rank 0 was idle`);
});

test('a split model led by rank 0 refuses what its processes cannot repeat, and a follower stops when rank 0 is gone', async () => {
  const [r0, r1] = await leaderRun('roles');
  assert.equal(r0.follow.code, 'INVALID_ARGUMENT');
  assert.match(r0.follow.message, /follow\(\) is for the processes other than rank 0 of a model split with distributed\.leader: rank 0 leads/);
  for (const [call, r] of [['prefill()', r0.prefill], ['loadPromptCache()', r0.loadPromptCache]]) {
    assert.equal(r.code, 'INVALID_ARGUMENT', call);
    assert.match(r.message, new RegExp(`${call.replace(/[()]/g, '\\$&')} is not available on a split model led by rank 0`));
  }
  assert.equal(r0.generate, 3);
  for (const [call, r] of [['generation', r1.generate], ['createPromptCache()', r1.createPromptCache]]) {
    assert.equal(r.code, 'INVALID_ARGUMENT', call);
    assert.match(r.message, /is not available on this process: it follows rank 0 of a split model/);
  }
  assert.deepEqual(r1.follow, { ok: true });
  const alone = await loadModel(fixturePath('qwen3-f32'));
  await expectReject(() => alone.follow(), 'INVALID_ARGUMENT', /the model is not split with distributed\.leader/);
  await alone.dispose();
  const { codes, signals, outputs } = await launchLocal({
    n: 2,
    command: process.execPath,
    args: [LEADER, JSON.stringify({ model: fixturePath('qwen3-f32'), mode: 'die' })],
    stdio: () => ['ignore', 'pipe', 'pipe'],
    graceMs: 20000,
  });
  assert.equal(signals[0], 'SIGKILL');
  assert.equal(codes[1], 0, outputs[1].stderr);
  const follower = JSON.parse(outputs[1].stdout);
  assert.equal(follower.follow.code, 'DISTRIBUTED_ERROR');
  assert.match(follower.follow.message, /connection to rank 0 was lost/);
});

test('mlx-node launch -- serve: rank 0 serves the official openai client as one process does; SIGTERM ends every rank', async () => {
  const OpenAI = require('openai');
  const { serve } = require('../lib/server');
  const model = fixturePath('qwen3-f32');
  const solo = await serve({ modelPath: model, port: 0, maxBatch: 4 });
  const bin = path.join(__dirname, '..', 'bin', 'mlx-node.js');
  const child = spawn(process.execPath, [bin, 'launch', '-n', '2', '--', 'serve', '--model', model, '--port', '0', '--max-batch', '4', '-q'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  const closed = new Promise((resolve) => child.once('close', (code, signal) => resolve({ code, signal })));
  try {
    const url = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no address within 120 s:\n${stderr}`)), 120000);
      child.stderr.on('data', (d) => {
        stderr += d;
        const m = /listening on (http:\/\/\S+)/.exec(stderr);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
      child.once('close', () => reject(new Error(`launch ended:\n${stderr}`)));
    });
    const split = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
    const whole = new OpenAI({ baseURL: `${solo.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const chats = ['Name a river.', 'Count to five.', 'Say hello.', 'What is two plus two?', 'Why is the sky blue?'].map((q) => [{ role: 'user', content: q }]);
    const ask = (client, messages, extra = {}) => client.chat.completions.create({ model: 'qwen3-f32', messages, max_tokens: 12, ...extra });
    // Five at once on a batch of four, on both servers.
    const [a, b] = await Promise.all([Promise.all(chats.map((m) => ask(split, m))), Promise.all(chats.map((m) => ask(whole, m)))]);
    assert.deepEqual(a.map((r) => r.choices[0].message.content), b.map((r) => r.choices[0].message.content));
    // The conversation goes on: its prefix comes from the server's prompt cache on every rank.
    const turn2 = [...chats[0], { role: 'assistant', content: a[0].choices[0].message.content }, { role: 'user', content: 'And another.' }];
    const [c, d] = [await ask(split, turn2), await ask(whole, turn2)];
    assert.equal(c.choices[0].message.content, d.choices[0].message.content);
    assert.ok(c.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(c.usage));
    // Streamed and seeded.
    const streamed = async (client) => {
      const s = await client.chat.completions.create({ model: 'qwen3-f32', messages: chats[1], max_tokens: 12, temperature: 0.8, seed: 9, stream: true });
      let text = '';
      for await (const ch of s) text += ch.choices[0]?.delta?.content ?? '';
      return text;
    };
    assert.equal(await streamed(split), await streamed(whole));
  } finally {
    child.kill('SIGTERM');
    await solo.close();
  }
  const end = await closed;
  assert.deepEqual(end, { code: 0, signal: null }, stderr);
});
