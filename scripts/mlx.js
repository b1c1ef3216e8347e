'use strict';
// Fetches the pinned MLX build from its official PyPI wheel into a project-local cache
// and, on Linux CPU, makes sure OpenBLAS is present (the wheel ships reference BLAS).
const fs = require('node:fs');
const path = require('node:path');
const { execFileSync, spawnSync } = require('node:child_process');

const MLX_VERSION = '0.32.4';
const ROOT = path.resolve(__dirname, '..');
const OPENBLAS_CANDIDATES = [
  '/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0',
  '/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0',
];

function log(msg) {
  process.stderr.write(`[mlx-node] ${msg}\n`);
}

function backend() {
  const requested = process.env.MLX_NODE_BACKEND;
  if (requested) {
    if (!['cpu', 'cuda', 'metal'].includes(requested)) {
      throw new Error(`MLX_NODE_BACKEND must be cpu, cuda or metal, got '${requested}'`);
    }
    return requested;
  }
  return process.platform === 'darwin' ? 'metal' : 'cpu';
}

function wheelName(be) {
  return { cpu: 'mlx-cpu', cuda: 'mlx-cuda-13', metal: 'mlx-metal' }[be];
}

function findPython() {
  for (const exe of ['python3', 'python']) {
    const r = spawnSync(exe, ['-m', 'pip', '--version'], { stdio: 'ignore' });
    if (r.status === 0) return exe;
  }
  throw new Error(
    'mlx-node needs Python 3 with pip to fetch the MLX wheel. Install it (Debian: ' +
      '`apt-get install python3-pip`, macOS: `brew install python`) or set MLX_DIR to an MLX prefix ' +
      'holding include/ and lib/.'
  );
}

// Returns the prefix holding include/mlx and lib/libmlx.*.
function ensureMlx() {
  if (process.env.MLX_DIR) {
    const dir = path.resolve(process.env.MLX_DIR);
    if (!fs.existsSync(path.join(dir, 'include', 'mlx', 'mlx.h'))) {
      throw new Error(`MLX_DIR=${dir} does not hold include/mlx/mlx.h`);
    }
    return dir;
  }
  const be = backend();
  const cacheDir = path.join(ROOT, '.cache', 'mlx', `${MLX_VERSION}-${be}`);
  const prefix = path.join(cacheDir, 'mlx');
  const stamp = path.join(cacheDir, '.complete');
  if (fs.existsSync(stamp)) return prefix;

  const python = findPython();
  const dl = path.join(cacheDir, 'download');
  fs.mkdirSync(dl, { recursive: true });
  const pkg = `${wheelName(be)}==${MLX_VERSION}`;
  log(`fetching ${pkg} from PyPI into ${path.relative(ROOT, cacheDir)}`);
  execFileSync(python, ['-m', 'pip', 'download', '--no-deps', '--disable-pip-version-check', '-q', pkg, '-d', dl], {
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const wheels = fs.readdirSync(dl).filter((f) => f.endsWith('.whl'));
  if (wheels.length !== 1) throw new Error(`expected one wheel in ${dl}, found ${wheels.join(', ') || 'none'}`);
  // A wheel is a zip; Python's zipfile keeps us free of an unzip dependency.
  execFileSync(python, ['-m', 'zipfile', '-e', path.join(dl, wheels[0]), cacheDir], { stdio: 'inherit' });
  // zipfile drops the executable bit; shared libraries do not need it, but keep the tree tidy.
  fs.rmSync(dl, { recursive: true, force: true });
  if (!fs.existsSync(path.join(prefix, 'include', 'mlx', 'mlx.h'))) {
    throw new Error(`the ${pkg} wheel did not contain mlx/include/mlx/mlx.h`);
  }
  fs.writeFileSync(stamp, `${pkg}\n`);
  return prefix;
}

function findOpenBlas() {
  if (process.env.MLX_NODE_OPENBLAS) return process.env.MLX_NODE_OPENBLAS;
  return OPENBLAS_CANDIDATES.find((p) => fs.existsSync(p)) || null;
}

let aptUpdated = false;
// Installs a Debian package when running as root on a system with apt-get;
// false when that is not possible (the caller then names the prerequisite).
function aptInstall(pkg, what) {
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const hasApt = spawnSync('apt-get', ['--version'], { stdio: 'ignore' }).status === 0;
  if (!isRoot || !hasApt) return false;
  log(`installing ${what} (${pkg}) with apt-get`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  if (!aptUpdated) {
    execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
    aptUpdated = true;
  }
  execFileSync('apt-get', ['install', '-y', '-qq', pkg], { stdio: 'inherit', env });
  return true;
}

// Linux CPU only: the addon links OpenBLAS ahead of libmlx so cblas_* resolve to it.
function ensureOpenBlas() {
  if (process.platform !== 'linux' || backend() !== 'cpu') return null;
  if (process.env.MLX_NODE_OPENBLAS === 'none') return null;
  let found = findOpenBlas();
  if (found) return found;
  if (aptInstall('libopenblas0-pthread', 'OpenBLAS')) {
    found = findOpenBlas();
    if (found) return found;
  }
  throw new Error(
    'OpenBLAS is missing: the MLX CPU wheel ships an unoptimised reference BLAS (about 30x slower). ' +
      'Install it with `sudo apt-get install libopenblas0-pthread`, point MLX_NODE_OPENBLAS at a ' +
      'libopenblas.so, or set MLX_NODE_OPENBLAS=none to build without it.'
  );
}

// The environment for every cargo command: MLX_DIR always set to the prefix found, so that
// builds run with MLX_DIR given (the package test, a user's own MLX) and without it see the
// same value, and cargo does not rebuild mlx-sys and all above it for a changed variable.
function cargoEnv() {
  return { ...process.env, MLX_DIR: ensureMlx() };
}

// Every JS test run: a test file that hangs (a promise nothing settles) fails with its
// name after 20 minutes instead of holding CI until its 90-minute limit; the longest file
// takes a few minutes on 2 cores. Force-exit: a timed-out test's pending native call must
// not keep its process alive.
const TEST_LIMITS = ['--test-timeout=1200000', '--test-force-exit'];

module.exports = { TEST_LIMITS, MLX_VERSION, ROOT, backend, wheelName, ensureMlx, cargoEnv, ensureOpenBlas, aptInstall, log };

if (require.main === module) {
  try {
    console.log(ensureMlx());
    const ob = ensureOpenBlas();
    if (ob) console.log(ob);
  } catch (e) {
    console.error(`[mlx-node] ${e.message}`);
    process.exit(1);
  }
}
