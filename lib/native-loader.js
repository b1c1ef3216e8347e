'use strict';
// Finds the addon: a locally built one at the package root, else a prebuilt
// platform package (napi-rs convention: mlx-node-<platform>-<arch>[-gnu]).
// Every failure to load it is an Error with code MODULE_NOT_FOUND naming what is missing.
const fs = require('node:fs');
const path = require('node:path');
const { platformTriple, ADDON_FILE } = require('./native');

const PREBUILT = `mlx-node-${platformTriple()}`;
// In a user's project `npm rebuild` reruns scripts/install.js, which builds when no addon loads.
const FROM_SOURCE =
  'from source with `npm rebuild mlx-node` (`npm run build` in a clone of the repository; ' +
  'needs Rust and Python 3 with pip)';

// Shared libraries the addon needs from the system, with how to get them.
const SYSTEM_LIBS = {
  'libopenblas.so.0': 'Install OpenBLAS: `sudo apt-get install libopenblas0-pthread` (Debian, Ubuntu)',
};

function fail(message, cause) {
  const err = new Error(`mlx-node: ${message}`, { cause });
  err.code = 'MODULE_NOT_FOUND';
  return err;
}

const LOCAL = path.join(__dirname, '..', ADDON_FILE);

// The addon file to load, or null when neither a local build nor the prebuilt package is there.
function addonPath() {
  if (fs.existsSync(LOCAL)) return LOCAL;
  try {
    return require.resolve(PREBUILT);
  } catch {
    return null;
  }
}

// OpenBLAS's idle threads spin (calling sched_yield) for 2^28 cycles, about 0.1 s,
// after every BLAS call before they sleep. MLX calls BLAS between its own work and
// ours (the quantized-matmul, softmax and GELU kernels run on every core), so on a
// small machine the spinning takes the cores those need: on 2 cores a 4-bit
// prompt ran at 46 tok/s against 61 with 2^16 cycles (about 25 us, still enough to
// keep back-to-back BLAS calls warm). OpenBLAS reads the variable once, when the
// addon loads it; a value already set wins.
const OPENBLAS_THREAD_TIMEOUT = '16';

function loadNative() {
  if (process.env.OPENBLAS_THREAD_TIMEOUT === undefined) process.env.OPENBLAS_THREAD_TIMEOUT = OPENBLAS_THREAD_TIMEOUT;
  const file = addonPath();
  if (!file) {
    throw fail(`no native addon for ${platformTriple()}: install the prebuilt package ${PREBUILT}, or build it ${FROM_SOURCE}.`);
  }
  try {
    return require(file);
  } catch (e) {
    // Node reports a missing dependency of the addon as ERR_DLOPEN_FAILED with the
    // loader's text "<lib>: cannot open shared object file", which names no remedy.
    const lib = /([^\s:]+): cannot open shared object file/.exec(e.message)?.[1];
    if (!lib) throw e;
    const how = SYSTEM_LIBS[lib] || (file === LOCAL ? `Rebuild it ${FROM_SOURCE}` : `Reinstall ${PREBUILT}`);
    throw fail(`the native addon ${file} needs ${lib}, which the system loader cannot find. ${how}.`, e);
  }
}

module.exports = { loadNative, addonPath, OPENBLAS_THREAD_TIMEOUT };
