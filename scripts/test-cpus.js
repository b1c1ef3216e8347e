'use strict';
// `npm run test:cpus [-- --subset] [--cores Haswell,SkylakeX]`: the LLM parity tests
// (MLX-LM run live on the same core type) once per OpenBLAS core type this CPU can run,
// recording per core type which custom kernels were in use. `--subset` runs the
// parity cases marked for it (PARITY_SUBSET=1), as `npm test` does for the core types
// other than the machine's own. Writes .cache/test-cpus.json.
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ROOT, log, TEST_LIMITS } = require('./mlx');
const { distinctCoreTypes, runnableCoreTypes } = require('./cpus');

const PARITY = path.join('__test__', 'parity.test.js');

function parseArgs(argv) {
  const args = { subset: false, cores: null, skip: [] };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--subset') args.subset = true;
    else if (argv[i] === '--cores' && i + 1 < argv.length) args.cores = argv[++i].split(',').filter(Boolean);
    else throw new Error(`unknown argument ${argv[i]} (use --subset, --cores A,B)`);
  }
  return args;
}

// Runs the parity tests per core type; returns [{ core, openblasCore, kernels, passed, seconds }].
function runCoreTypes({ subset = false, cores = null, skipCores = [] } = {}) {
  const types = distinctCoreTypes(cores || runnableCoreTypes()).filter((t) => !skipCores.includes(t.info.openblasCore));
  const results = [];
  for (const { name, info } of types) {
    const inUse = Object.keys(info.kernels).filter((k) => info.kernels[k]).sort();
    log(`OPENBLAS_CORETYPE=${name} (OpenBLAS: ${info.openblasCore}; kernels in use: ${inUse.join(', ') || 'none'})${subset ? ', parity subset' : ''}`);
    const t0 = Date.now();
    const r = spawnSync(process.execPath, ['--test', '--test-concurrency=1', ...TEST_LIMITS, PARITY], {
      cwd: ROOT,
      stdio: 'inherit',
      env: { ...process.env, OPENBLAS_CORETYPE: name, ...(subset ? { PARITY_SUBSET: '1' } : {}) },
    });
    results.push({ core: name, openblasCore: info.openblasCore, kernels: info.kernels, passed: r.status === 0, seconds: Math.round((Date.now() - t0) / 1000) });
  }
  fs.mkdirSync(path.join(ROOT, '.cache'), { recursive: true });
  fs.writeFileSync(path.join(ROOT, '.cache', 'test-cpus.json'), `${JSON.stringify(results, null, 2)}\n`);
  console.log('\ncore type        OpenBLAS         gemv   parity   time');
  for (const r of results) {
    console.log(`${r.core.padEnd(16)} ${r.openblasCore.padEnd(16)} ${(r.kernels.gemv ? 'on' : 'off').padEnd(6)} ${(r.passed ? 'pass' : 'FAIL').padEnd(8)} ${r.seconds} s`);
  }
  return results;
}

module.exports = { runCoreTypes };

if (require.main === module) {
  const args = parseArgs(process.argv.slice(2));
  require('./deps').ensureNpmDeps();
  require('./build').build();
  require('./fixtures').ensureFixtures();
  const results = runCoreTypes(args);
  process.exit(results.length > 0 && results.every((r) => r.passed) ? 0 : 1);
}
