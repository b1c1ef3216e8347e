'use strict';
// `npm test`: sets everything up from a fresh clone (npm dependencies, MLX, OpenBLAS,
// the addon, the reference venv and fixture models), then runs the Rust tests and
// the JS tests, each printing its own summary.
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ROOT, log, cargoEnv } = require('./mlx');

function run(cmd, args, opts = {}) {
  log(`$ ${cmd} ${args.join(' ')}`);
  const r = spawnSync(cmd, args, { cwd: ROOT, stdio: 'inherit', ...opts });
  if (r.status !== 0) {
    console.error(`[mlx-node] ${cmd} ${args.join(' ')} failed (exit ${r.status})`);
    process.exit(r.status || 1);
  }
}

const PARITY_FILES = [path.join('__test__', 'parity.test.js'), path.join('__test__', 'tts.test.js')];
// The core types x86-64 machines get with fused multiply-adds (the gemv kernel's
// blockings); `npm run test:cpus` adds Sandybridge and Prescott (no FMA: the kernel is off).
const CI_CORE_TYPES = ['Haswell', 'Zen', 'SkylakeX', 'Cooperlake'];

function main() {
  const t0 = Date.now();
  require('./deps').ensureNpmDeps();
  require('./deps').ensureSox();
  require('./build').build();
  const { env } = require('./venv').ensureVenv();
  require('./fixtures').ensureFixtures();
  require('./fixtures-tts').ensureTtsFixtures();
  log(`setup done in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  // Release profile: shares the dependency builds with the addon.
  run('cargo', ['test', '--release', '--workspace'], { env: { ...cargoEnv(), MLX_NODE_VENV_PYTHON: env.MLX_NODE_VENV_PYTHON || '' } });
  const files = fs
    .readdirSync(path.join(ROOT, '__test__'))
    .filter((f) => f.endsWith('.test.js'))
    .map((f) => path.join('__test__', f));
  run(process.execPath, ['--test', '--test-concurrency=1', ...files]);
  // The path Metal and CUDA builds take: MLX's own ops everywhere, still the references' tokens and audio.
  log('parity again with every custom CPU kernel off (MLX_NODE_CPU_KERNELS=0)');
  run(process.execPath, ['--test', '--test-concurrency=1', ...PARITY_FILES], { env: { ...process.env, MLX_NODE_CPU_KERNELS: '0' } });
  // The OpenBLAS paths other machines take (their kernels, their blockings), as far as
  // this CPU can run them; the machine's own core type was tested above in full.
  const own = require('./cpus').infoFor(process.env.OPENBLAS_CORETYPE || '').openblasCore;
  const others = require('./test-cpus').runCoreTypes({ subset: true, cores: CI_CORE_TYPES, skipCores: [own] });
  if (!others.every((r) => r.passed)) {
    console.error('[mlx-node] LLM parity failed on an OpenBLAS core type (see the table above)');
    process.exit(1);
  }
  log(`all tests passed in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
}

main();
