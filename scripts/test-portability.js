'use strict';
// `npm run test:portability` (CI runs it after `npm test`, which sets everything up):
// 1. the LLM and speech parity subsets with every custom CPU kernel off
//    (MLX_NODE_CPU_KERNELS=0): MLX's own ops everywhere, the path Metal and CUDA take;
// 2. the same with MLX_NODE_CPU_FEATURES=baseline: the kernels' portable fallbacks, as on a
//    CPU without AVX2 (the arm64 build is type-checked by `npm run check:targets`);
// 3. the LLM parity subset on each other OpenBLAS core type this CPU can run, one per
//    gemv blocking x86-64 machines get (`npm run test:cpus` runs every core type in full).
// A separate command so that each stays well inside CI's time on 2 cores.
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ROOT, log, TEST_LIMITS } = require('./mlx');

// One core type per gemv blocking (Zen has Haswell's kernels and GEMM_Q; this OpenBLAS
// runs SapphireRapids as Cooperlake); Sandybridge and Prescott (no fused multiply-adds,
// the kernel off) are in `npm run test:cpus`.
const CI_CORE_TYPES = ['Haswell', 'SkylakeX', 'Cooperlake'];

// The LLM and speech parity subsets with `env` added; exits on a failure.
function parityPass(what, env) {
  log(`parity subsets with ${what}`);
  const files = ['parity.test.js', 'tts.test.js'].map((f) => path.join('__test__', f));
  const r = spawnSync(process.execPath, ['--test', '--test-concurrency=1', ...TEST_LIMITS, ...files], {
    cwd: ROOT,
    stdio: 'inherit',
    env: { ...process.env, ...env, PARITY_SUBSET: '1', TTS_PARITY_SUBSET: '1' },
  });
  if (r.status !== 0) {
    console.error(`[mlx-node] parity with ${what} failed`);
    process.exit(1);
  }
}

function main() {
  const t0 = Date.now();
  require('./build').build({ quiet: true });
  require('./fixtures').ensureFixtures();
  require('./fixtures-tts').ensureTtsFixtures();
  parityPass('every custom CPU kernel off (MLX_NODE_CPU_KERNELS=0)', { MLX_NODE_CPU_KERNELS: '0' });
  // The portable code each kernel falls back to, as on a CPU without AVX2 (or off x86).
  parityPass('as on a CPU without AVX, AVX2 and FMA (MLX_NODE_CPU_FEATURES=baseline)', { MLX_NODE_CPU_FEATURES: 'baseline' });
  const own = require('./cpus').infoFor(process.env.OPENBLAS_CORETYPE).openblasCore;
  const results = require('./test-cpus').runCoreTypes({ subset: true, cores: CI_CORE_TYPES, skipCores: [own] });
  if (!results.every((r) => r.passed)) {
    console.error('[mlx-node] LLM parity failed on an OpenBLAS core type (see the table above)');
    process.exit(1);
  }
  log(`portability tests passed in ${((Date.now() - t0) / 1000).toFixed(0)} s (${results.length} other core type(s): ${results.map((r) => r.core).join(', ') || 'none this CPU runs'})`);
}

main();
