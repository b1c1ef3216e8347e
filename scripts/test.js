'use strict';
// `npm test`: sets everything up from a fresh clone (npm dependencies, MLX, OpenBLAS,
// the addon, the reference venv and fixture models), then runs the Rust tests and
// the JS tests, each printing its own summary.
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ROOT, log, cargoEnv, TEST_LIMITS } = require('./mlx');

function run(cmd, args, opts = {}) {
  log(`$ ${cmd} ${args.join(' ')}`);
  const r = spawnSync(cmd, args, { cwd: ROOT, stdio: 'inherit', ...opts });
  if (r.status !== 0) {
    console.error(`[mlx-node] ${cmd} ${args.join(' ')} failed (exit ${r.status})`);
    process.exit(r.status || 1);
  }
}

// Suites with a command of their own (CI runs them after this one), to keep this one well
// inside CI's time on 2 cores: scripts/test-suite.js.
const { separate, SEPARATE_CRATES } = require('./test-suite');

function main() {
  const t0 = Date.now();
  require('./deps').ensureNpmDeps();
  require('./deps').ensureSox();
  require('./build').build();
  const { env } = require('./venv').ensureVenv();
  require('./fixtures').ensureFixtures();
  // The server and CLI tests speak with the Chatterbox fixture and clone its voices.
  require('./fixtures-tts').ensureTtsFixtures({ refs: false });
  require('./fixtures-voice').ensureVoiceFixtures();
  require('./fixtures-gguf').ensureGgufFixtures();
  log(`setup done in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  // Release profile: shares the dependency builds with the addon. The speech crate's tests
  // run in `npm run test:speech` (scripts/test-suite.js). `--tests`: the unit and integration
  // tests, not the examples (each a binary linked with thin LTO for minutes of CI's 2 cores;
  // `npm run lint` checks that they compile).
  const exclude = SEPARATE_CRATES.flatMap((c) => ['--exclude', c]);
  // MLX_NODE_FIXTURE_GREEDY=core: the fixtures of the shared decoder's model types; the other
  // families' greedy check runs in `npm run test:families` (crates/lm/tests/integration/fixture_greedy.rs).
  const cargo = { ...cargoEnv(), MLX_NODE_VENV_PYTHON: env.MLX_NODE_VENV_PYTHON || '', MLX_NODE_FIXTURE_GREEDY: 'core' };
  run('cargo', ['test', '--release', '--workspace', ...exclude, '--tests'], { env: cargo });
  const files = fs
    .readdirSync(path.join(ROOT, '__test__'))
    .filter((f) => f.endsWith('.test.js') && !separate(f))
    .map((f) => path.join('__test__', f));
  run(process.execPath, ['--test', '--test-concurrency=1', ...TEST_LIMITS, ...files]);
  log(`all tests passed in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
}

main();
