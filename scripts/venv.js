'use strict';
// Project-local Python venv holding the reference implementations (MLX-LM, mlx-audio)
// that the parity tests and benchmarks compare against. Never touches the user's Python.

const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { backend, wheelName } = require('./mlx');
const { OPENBLAS_THREAD_TIMEOUT } = require('../lib/native-loader');

const ROOT = path.resolve(__dirname, '..');
const VENV_DIR = path.join(ROOT, '.cache', 'venv');
const STAMP = path.join(VENV_DIR, 'mlx-node-stamp.json');
const OPENBLAS = '/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0';

// Installed with dependencies. MLX-LM's wheel only requires mlx on macOS, so on Linux the
// build of MLX for the backend in use (scripts/mlx.js: CPU unless MLX_NODE_BACKEND) is pinned here.
const REQUIREMENTS = [
  'mlx==0.32.4',
  `${wheelName(backend())}==0.32.4`,
  'numpy',
  'transformers>=5.7.0',
  'sentencepiece',
  'protobuf',
  'pyyaml',
  'jinja2',
  'scipy',
  'huggingface_hub',
  'tokenizers',
  // gguf-py (llama.cpp's own GGUF reader and writer): writes the GGUF test fixtures.
  'gguf==0.19.0',
];
// Installed with --no-deps: their declared dependencies pull in far more than the
// reference code paths use (and mlx-lm would pull mlx-metal-only pins).
const NO_DEPS = ['mlx-lm==0.32.2', 'mlx-audio==0.6.2'];

const SPEC = { requirements: REQUIREMENTS, noDeps: NO_DEPS, platform: `${process.platform}-${process.arch}` };

function log(msg) {
  process.stderr.write(`[venv] ${msg}\n`);
}

function venvPython() {
  return process.platform === 'win32'
    ? path.join(VENV_DIR, 'Scripts', 'python.exe')
    : path.join(VENV_DIR, 'bin', 'python');
}

// The environment every reference run uses. OpenBLAS is preloaded so that MLX's CPU
// backend in Python calls the same BLAS as the addon (docs/parity.md: same BLAS on both sides).
function referenceEnv() {
  const env = { ...process.env };
  const openblas = process.env.MLX_NODE_OPENBLAS || OPENBLAS;
  // Only the CPU backend's matmuls go through BLAS; on CUDA the addon links none.
  if (process.platform === 'linux' && backend() === 'cpu' && fs.existsSync(openblas)) {
    const rest = (process.env.LD_PRELOAD || '').split(/[:\s]+/).filter((p) => p && p !== openblas);
    env.LD_PRELOAD = [openblas, ...rest].join(':');
    // The same OpenBLAS thread setting as the addon's loader gives itself.
    env.OPENBLAS_THREAD_TIMEOUT ??= OPENBLAS_THREAD_TIMEOUT;
  }
  env.PYTHONHASHSEED = '0';
  env.PYTHONNOUSERSITE = '1';
  env.PYTHONDONTWRITEBYTECODE = '1';
  env.TOKENIZERS_PARALLELISM = 'false';
  env.HF_HUB_OFFLINE = '1';
  env.TRANSFORMERS_VERBOSITY = 'error';
  env.TRANSFORMERS_NO_ADVISORY_WARNINGS = '1';
  env.PIP_DISABLE_PIP_VERSION_CHECK = '1';
  delete env.PYTHONPATH;
  delete env.PYTHONHOME;
  delete env.VIRTUAL_ENV;
  return env;
}

function readStamp() {
  try {
    return fs.readFileSync(STAMP, 'utf8');
  } catch {
    return null;
  }
}

function run(cmd, args, env, what) {
  const r = spawnSync(cmd, args, { env, stdio: ['ignore', 2, 2], cwd: ROOT });
  if (r.error) throw new Error(`${what} failed to start: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${what} failed (exit ${r.status}${r.signal ? `, ${r.signal}` : ''})`);
}

function findSystemPython() {
  for (const cand of [process.env.MLX_NODE_PYTHON, 'python3', 'python'].filter(Boolean)) {
    const r = spawnSync(cand, ['-c', 'import sys; print("%d.%d" % sys.version_info[:2])'], { encoding: 'utf8' });
    if (!r.error && r.status === 0) {
      const [major, minor] = r.stdout.trim().split('.').map(Number);
      if (major === 3 && minor >= 10) return cand;
    }
  }
  throw new Error(
    'python3 (3.10 or newer) was not found on PATH. Install it (Debian/Ubuntu: ' +
      '`apt-get install python3 python3-venv python3-pip`; macOS: `brew install python`) ' +
      'or point MLX_NODE_PYTHON at one.',
  );
}

function createVenv(systemPython, env) {
  log(`creating ${path.relative(ROOT, VENV_DIR)} with ${systemPython}`);
  const r = spawnSync(systemPython, ['-m', 'venv', '--clear', VENV_DIR], { env, encoding: 'utf8' });
  if (r.error || r.status !== 0 || !fs.existsSync(venvPython())) {
    const detail = ((r.stderr || '') + (r.stdout || '')).trim() || (r.error && r.error.message) || '';
    throw new Error(
      `could not create a Python venv with \`${systemPython} -m venv\`: ${detail}\n` +
        'Install the venv and pip modules (Debian/Ubuntu: `apt-get install python3-venv python3-pip`).',
    );
  }
  const pip = spawnSync(venvPython(), ['-m', 'pip', '--version'], { env, encoding: 'utf8' });
  if (pip.error || pip.status !== 0) {
    throw new Error(
      'the new venv has no pip (ensurepip missing). Install it ' +
        '(Debian/Ubuntu: `apt-get install python3-venv python3-pip`).',
    );
  }
}

const VERIFY = `
import mlx.core as mx
import mlx_lm, mlx_lm.generate, mlx_lm.sample_utils
from importlib.metadata import version
a = mx.ones((8, 16)); b = mx.ones((16, 4))
c = mx.matmul(a, b)
assert c.shape == (8, 4) and c.sum().item() == 8 * 4 * 16, "matmul gave a wrong result"
blas = "openblas" if any("openblas" in l for l in open("/proc/self/maps")) else "default" if __import__("sys").platform == "linux" else "n/a"
print("mlx %s, mlx-lm %s, mlx-audio %s, blas %s" % (mx.__version__, version("mlx-lm"), version("mlx-audio"), blas))
`;

function verify(python, env) {
  const r = spawnSync(python, ['-c', VERIFY], { env, encoding: 'utf8' });
  if (r.error || r.status !== 0) {
    throw new Error(`venv check failed (mlx_lm import or mx.matmul): ${(r.stderr || '').trim() || r.error}`);
  }
  log(r.stdout.trim());
}

function sleep(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

function processAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === 'EPERM';
  }
}

// Cross-process lock (node --test runs test files in parallel processes, and each may
// call ensureVenv/ensureFixtures). A lock left by a dead process is taken over.
function withLock(lockDir, what, fn) {
  const pidFile = path.join(lockDir, 'pid');
  const deadline = Date.now() + 30 * 60 * 1000;
  let told = false;
  fs.mkdirSync(path.dirname(lockDir), { recursive: true });
  for (;;) {
    try {
      fs.mkdirSync(lockDir);
      fs.writeFileSync(pidFile, String(process.pid));
      break;
    } catch (err) {
      if (err.code !== 'EEXIST') throw err;
    }
    let owner = 0;
    try {
      owner = Number(fs.readFileSync(pidFile, 'utf8'));
    } catch {}
    let age = 0;
    try {
      age = Date.now() - fs.statSync(lockDir).mtimeMs;
    } catch {
      continue;
    }
    if ((owner && !processAlive(owner)) || (!owner && age > 60_000)) {
      const stale = `${lockDir}.stale-${process.pid}`;
      try {
        fs.renameSync(lockDir, stale);
        fs.rmSync(stale, { recursive: true, force: true });
      } catch {}
      continue;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${lockDir} (${what}, held by pid ${owner})`);
    if (!told) {
      log(`waiting for process ${owner || '?'} (${what})`);
      told = true;
    }
    sleep(250);
  }
  try {
    return fn();
  } finally {
    fs.rmSync(lockDir, { recursive: true, force: true });
  }
}

function ensureVenv() {
  const env = referenceEnv();
  const python = venvPython();
  const spec = JSON.stringify(SPEC);
  const ready = () => readStamp() === spec && fs.existsSync(python);
  if (ready()) return { python, env };
  return withLock(path.join(ROOT, '.cache', 'venv.lock'), 'Python venv setup', () => {
    if (!ready()) install(python, env, spec);
    return { python, env };
  });
}

function install(python, env, spec) {
  const t0 = Date.now();
  if (!fs.existsSync(python)) {
    createVenv(findSystemPython(), env);
  } else {
    log('package spec changed; reinstalling');
  }
  fs.rmSync(STAMP, { force: true });
  const pip = [python, '-m', 'pip'];
  log('upgrading pip');
  run(pip[0], [...pip.slice(1), 'install', '--quiet', '--upgrade', 'pip'], env, 'pip upgrade');
  log(`installing ${REQUIREMENTS.join(' ')}`);
  run(pip[0], [...pip.slice(1), 'install', '--quiet', ...REQUIREMENTS], env, 'pip install');
  log(`installing (no deps) ${NO_DEPS.join(' ')}`);
  run(pip[0], [...pip.slice(1), 'install', '--quiet', '--no-deps', ...NO_DEPS], env, 'pip install --no-deps');
  verify(python, env);
  fs.writeFileSync(STAMP, spec);
  log(`ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}

module.exports = { ensureVenv, referenceEnv, withLock, findSystemPython, VENV_DIR, ROOT, VENV_SPEC: JSON.stringify(SPEC) };

if (require.main === module) {
  try {
    const { python } = ensureVenv();
    process.stdout.write(`${python}\n`);
  } catch (err) {
    process.stderr.write(`[venv] error: ${err.message}\n`);
    process.exit(1);
  }
}
