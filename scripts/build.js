'use strict';
// Builds the native addon (release) after making sure Rust, OpenBLAS and MLX are present.
// Cargo decides what is stale, so calling this when nothing changed costs about a second.
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { cargoEnv, ensureOpenBlas, ROOT, log } = require('./mlx');
const { ADDON_PATH } = require('../lib/native');

function cargoLibName() {
  if (process.platform === 'darwin') return 'libmlx_node.dylib';
  if (process.platform === 'win32') return 'mlx_node.dll';
  return 'libmlx_node.so';
}

function ensureCargo() {
  const r = spawnSync('cargo', ['--version'], { stdio: 'ignore' });
  if (r.status !== 0) {
    throw new Error('mlx-node builds from source and needs Rust: install it from https://rustup.rs');
  }
}

function build({ quiet = false } = {}) {
  // Cheap prerequisite checks first, so a missing one fails before the MLX wheel download
  // (ensureMlx looks for Python with pip before it fetches anything).
  ensureCargo();
  ensureOpenBlas();
  const env = cargoEnv();
  if (!quiet) log('building the native addon (cargo build --release)');
  const r = spawnSync('cargo', ['build', '--release', '-p', 'mlx-node'], { cwd: ROOT, stdio: 'inherit', env });
  if (r.status !== 0) throw new Error('cargo build failed');
  const targetDir = process.env.CARGO_TARGET_DIR ? path.resolve(ROOT, process.env.CARGO_TARGET_DIR) : path.join(ROOT, 'target');
  const built = path.join(targetDir, 'release', cargoLibName());
  const srcStat = fs.statSync(built);
  const dst = fs.existsSync(ADDON_PATH) ? fs.statSync(ADDON_PATH) : null;
  if (!dst || dst.mtimeMs < srcStat.mtimeMs || dst.size !== srcStat.size) {
    // Copy to a temporary name first so a running process never sees half a file; the name
    // is this process's own, so two builds at once never rename each other's file.
    const tmp = `${ADDON_PATH}.${process.pid}.tmp`;
    try {
      fs.copyFileSync(built, tmp);
      fs.renameSync(tmp, ADDON_PATH);
    } catch (e) {
      fs.rmSync(tmp, { force: true });
      throw e;
    }
  }
  return ADDON_PATH;
}

module.exports = { build };

if (require.main === module) {
  try {
    build();
  } catch (e) {
    console.error(`[mlx-node] ${e.message}`);
    process.exit(1);
  }
}
