'use strict';
// Finds the addon: a locally built one at the package root, else a prebuilt
// platform package (napi-rs convention: mlx-node-<platform>-<arch>[-gnu]).
const fs = require('node:fs');
const path = require('node:path');
const { platformTriple, ADDON_FILE } = require('../scripts/native');

function loadNative() {
  const local = path.join(__dirname, '..', ADDON_FILE);
  if (fs.existsSync(local)) return require(local);
  const pkg = `mlx-node-${platformTriple()}`;
  try {
    return require(pkg);
  } catch (e) {
    const err = new Error(
      `mlx-node: no native addon for ${platformTriple()}. Build it with \`npm run build\` ` +
        `(needs Rust and Python 3 with pip), or install the prebuilt package ${pkg}. (${e.message})`
    );
    err.code = 'MODULE_NOT_FOUND';
    throw err;
  }
}

module.exports = { loadNative };
