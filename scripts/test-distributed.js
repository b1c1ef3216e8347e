'use strict';
// `npm run test:distributed` (CI runs it after `npm test`, which sets everything up): models
// split across processes over MLX's ring backend on 127.0.0.1, against one process and
// against MLX-LM's sharded generation under mlx.launch (__test__/distributed.test.js). A
// separate command so that `npm test` stays well inside CI's time on 2 cores.
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ROOT, log } = require('./mlx');

function main() {
  const t0 = Date.now();
  require('./build').build({ quiet: true });
  require('./venv').ensureVenv();
  require('./fixtures').ensureFixtures();
  const r = spawnSync(process.execPath, ['--test', '--test-concurrency=1', path.join('__test__', 'distributed.test.js')], {
    cwd: ROOT,
    stdio: 'inherit',
  });
  if (r.status !== 0) {
    console.error('[mlx-node] distributed tests failed');
    process.exit(1);
  }
  log(`distributed tests passed in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
}

main();
