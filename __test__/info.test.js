'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { mlxInfo } = require('..');

test('mlxInfo reports the pinned MLX, the backend and the BLAS actually in use', () => {
  const info = mlxInfo();
  assert.equal(info.mlxVersion, '0.32.4');
  if (process.platform === 'linux' && process.env.MLX_NODE_BACKEND !== 'cuda') {
    assert.equal(info.backend, 'cpu');
    assert.match(info.device, /^cpu/);
    if (process.env.MLX_NODE_OPENBLAS !== 'none') {
      assert.equal(info.blas, 'openblas');
      assert.match(info.blasPath, /openblas/);
    }
  }
  assert.ok(['cpu', 'metal', 'cuda'].includes(info.backend));
});

test('loading the addon sets OPENBLAS_THREAD_TIMEOUT unless the user has set it', () => {
  const { spawnSync } = require('node:child_process');
  const { OPENBLAS_THREAD_TIMEOUT } = require('../lib/native-loader');
  const read = (value) => {
    const env = { ...process.env };
    delete env.OPENBLAS_THREAD_TIMEOUT;
    if (value !== undefined) env.OPENBLAS_THREAD_TIMEOUT = value;
    const r = spawnSync(process.execPath, ['-e', "require('.'); process.stdout.write(process.env.OPENBLAS_THREAD_TIMEOUT)"], {
      cwd: require('node:path').join(__dirname, '..'),
      env,
      encoding: 'utf8',
    });
    assert.equal(r.status, 0, r.stderr);
    return r.stdout;
  };
  assert.equal(OPENBLAS_THREAD_TIMEOUT, '16');
  assert.equal(read(undefined), '16');
  assert.equal(read('24'), '24');
});

// mlxInfo() of a child process with `env` added to this one's.
function childInfo(env) {
  const { spawnSync } = require('node:child_process');
  const r = spawnSync(process.execPath, ['-e', "process.stdout.write(JSON.stringify(require('.').mlxInfo()))"], {
    cwd: require('node:path').join(__dirname, '..'),
    env: { ...process.env, ...env },
    encoding: 'utf8',
  });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}

const KERNELS = ['attention', 'decodeAttention', 'gemv', 'math', 'qmm', 'qmmInt8', 'rows', 'sampling', 'speech'];
// Each kernel's off switch (docs/kernels.md): the name in upper snake case.
const SWITCH = (k) => `MLX_NODE_${k.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase()}_KERNEL${['math', 'sampling', 'speech'].includes(k) ? 'S' : ''}`;

test('mlxInfo lists every custom CPU kernel; MLX_NODE_CPU_KERNELS=0 and each switch turn them off', { skip: process.platform !== 'linux' }, () => {
  const clean = { MLX_NODE_CPU_KERNELS: '', OPENBLAS_CORETYPE: process.env.OPENBLAS_CORETYPE || '' };
  for (const k of KERNELS) clean[SWITCH(k)] = '';
  const on = childInfo(clean);
  assert.deepEqual(Object.keys(on.kernels).sort(), KERNELS);
  // The kernels without CPU-feature or calibration conditions run wherever the backend is the CPU.
  for (const k of ['decodeAttention', 'math', 'qmm', 'qmmInt8', 'sampling', 'speech']) assert.equal(on.kernels[k], true, k);
  const off = childInfo({ ...clean, MLX_NODE_CPU_KERNELS: '0' });
  assert.deepEqual(Object.values(off.kernels), KERNELS.map(() => false));
  const noGemv = childInfo({ ...clean, MLX_NODE_GEMV_KERNEL: '0' });
  assert.deepEqual(noGemv.kernels, { ...on.kernels, gemv: false });
  const noSampling = childInfo({ ...clean, MLX_NODE_SAMPLING_KERNELS: '0' });
  assert.deepEqual(noSampling.kernels, { ...on.kernels, sampling: false });
  const noInt8 = childInfo({ ...clean, [SWITCH('qmmInt8')]: '0' });
  assert.deepEqual(noInt8.kernels, { ...on.kernels, qmmInt8: false });
  const noDecode = childInfo({ ...clean, [SWITCH('decodeAttention')]: '0' });
  assert.deepEqual(noDecode.kernels, { ...on.kernels, decodeAttention: false });
  // The exact decode attention needs both switches and the gemv kernel's calibration, and
  // calibrates on every core type Debian's OpenBLAS picks on x86-64 CPUs with AVX2.
  assert.equal(off.exactDecodeAttention, false);
  assert.equal(noGemv.exactDecodeAttention, false);
  assert.equal(childInfo({ ...clean, [SWITCH('attention')]: '0' }).exactDecodeAttention, false);
  if (on.kernels.gemv && ['Haswell', 'Zen', 'SkylakeX', 'Cooperlake', 'SapphireRapids'].includes(on.openblasCore)) {
    assert.equal(on.exactDecodeAttention, true, `OpenBLAS core ${on.openblasCore}`);
  }
});

test('mlxInfo names the OpenBLAS core type; one without fused multiply-adds runs with the gemv kernel off', { skip: process.platform !== 'linux' || process.env.MLX_NODE_OPENBLAS === 'none' }, () => {
  const prescott = childInfo({ OPENBLAS_CORETYPE: 'Prescott', MLX_NODE_CPU_KERNELS: '' });
  assert.equal(prescott.openblasCore, 'Prescott');
  assert.equal(prescott.kernels.gemv, false);
  assert.equal(prescott.kernels.qmm, true);
  // An unknown name: OpenBLAS falls back to its own detection, and the process still runs.
  const unknown = childInfo({ OPENBLAS_CORETYPE: 'NoSuchCore' });
  assert.ok(unknown.openblasCore.length > 0);
  assert.equal(typeof unknown.kernels.gemv, 'boolean');
});

test('MLX_NODE_CPU_FEATURES=baseline runs as on a CPU without AVX2: the kernels that need it are reported off', { skip: process.platform !== 'linux' || process.arch !== 'x64' }, () => {
  const info = childInfo({ MLX_NODE_CPU_FEATURES: 'baseline', MLX_NODE_CPU_KERNELS: '' });
  assert.equal(info.kernels.gemv, false);
  assert.equal(info.kernels.rows, false);
  assert.equal(info.exactDecodeAttention, false);
  // Their portable code (same bits) still runs.
  for (const k of ['decodeAttention', 'math', 'qmm', 'qmmInt8', 'sampling', 'speech']) assert.equal(info.kernels[k], true, k);
});

// Fast precision's integer kernel: the best path this CPU has, capped by MLX_NODE_CPU_FEATURES;
// prompt chunks take the fused panel exactly where that path is not AVX-512 VNNI or AMX.
test('mlxInfo names the fast kernel\'s path and whether its prompt chunks run fused, under each feature cap', { skip: process.platform !== 'linux' || process.arch !== 'x64' }, () => {
  const PATHS = ['amx', 'avx512-vnni', 'avx-vnni', 'avx2', 'portable'];
  const fused = (path) => !['amx', 'avx512-vnni'].includes(path);
  const infos = { all: childInfo({ MLX_NODE_CPU_FEATURES: '' }) };
  for (const cap of ['avx512', 'avx2', 'baseline']) infos[cap] = childInfo({ MLX_NODE_CPU_FEATURES: cap });
  for (const [cap, info] of Object.entries(infos)) {
    assert.ok(PATHS.includes(info.fastKernelPath), `${cap}: ${info.fastKernelPath}`);
    assert.equal(info.fastPromptsFused, fused(info.fastKernelPath), cap);
  }
  assert.equal(infos.baseline.fastKernelPath, 'portable');
  assert.ok(['avx2', 'portable'].includes(infos.avx2.fastKernelPath), infos.avx2.fastKernelPath);
  assert.notEqual(infos.avx512.fastKernelPath, 'amx');
  // Each cap takes away only what it names: without AMX the CPU keeps the path below it.
  if (infos.all.fastKernelPath === 'amx') assert.equal(infos.avx512.fastKernelPath, 'avx512-vnni');
  else assert.equal(infos.avx512.fastKernelPath, infos.all.fastKernelPath);
  assert.ok(PATHS.includes(mlxInfo().fastKernelPath));
});
