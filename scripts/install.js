'use strict';
// npm "install" hook. In a user's project: use the prebuilt platform package when
// it is there, otherwise build from source (MLX wheel, OpenBLAS check, cargo), saying
// what is happening and naming the missing prerequisite when it cannot.
const fs = require('node:fs');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..');

function main() {
  // In a git checkout the npm scripts build on demand (npm test, npm run demo, npm run build).
  if (fs.existsSync(path.join(ROOT, '.git'))) return;
  if (process.env.MLX_NODE_SKIP_BUILD === '1') return;
  const { addonPath, loadNative } = require('../lib/native-loader');
  if (addonPath()) {
    // A prebuilt addon is there; if it cannot load, a source build would hit the same
    // missing system library (OpenBLAS), so say what is missing instead of building.
    try {
      loadNative();
      return;
    } catch (e) {
      process.stderr.write(`[mlx-node] install failed: ${e.message}\n`);
      process.exit(1);
    }
  }
  process.stderr.write('[mlx-node] no prebuilt addon for this platform: building from source (a few minutes)\n');
  try {
    require('./build').build();
  } catch (e) {
    process.stderr.write(`[mlx-node] install failed: ${e.message}\n`);
    process.exit(1);
  }
  process.stderr.write('[mlx-node] built\n');
}

main();
