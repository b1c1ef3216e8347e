'use strict';
// GGUF test fixtures under .cache/fixtures-gguf, written by scripts/fixtures_gguf.py from the
// text fixtures (scripts/fixtures.js) and the real SmolLM2 GGUF (scripts/smollm2.js): each GGUF
// with the MLX folder converted back from it, which MLX-LM runs as the reference.
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ensureVenv, withLock, ROOT, VENV_SPEC } = require('./venv');
const { ensureFixtures } = require('./fixtures');
const { ensureSmolLM2 } = require('./smollm2');
const { gemma3TokenizerDir } = require('./npm-tokenizers');

const DIR = path.join(ROOT, '.cache', 'fixtures-gguf');
const SCRIPTS = ['fixtures_gguf.py', 'gguf_to_mlx.py'].map((f) => path.join(__dirname, f));

function stamp(fixturesDir) {
  const h = crypto.createHash('sha256');
  for (const f of SCRIPTS) h.update(fs.readFileSync(f));
  h.update(VENV_SPEC);
  h.update(fs.readFileSync(path.join(fixturesDir, '.stamp')));
  return h.digest('hex');
}

function isFresh(s) {
  try {
    return fs.readFileSync(path.join(DIR, '.stamp'), 'utf8') === s && fs.existsSync(path.join(DIR, 'index.json'));
  } catch {
    return false;
  }
}

function ensureGgufFixtures() {
  const { python, env } = ensureVenv();
  const fixturesDir = ensureFixtures();
  const smollm2 = ensureSmolLM2();
  const s = stamp(fixturesDir);
  if (isFresh(s)) return DIR;
  withLock(path.join(ROOT, '.cache', 'fixtures-gguf.lock'), 'GGUF fixture generation', () => {
    if (isFresh(s)) return;
    const tmp = `${DIR}.partial`;
    fs.rmSync(tmp, { recursive: true, force: true });
    process.stderr.write('[fixtures-gguf] writing GGUF fixtures\n');
    const r = spawnSync(python, [SCRIPTS[0], fixturesDir, tmp, smollm2, gemma3TokenizerDir()], { env, cwd: ROOT, stdio: ['ignore', 2, 2] });
    if (r.error || r.status !== 0) throw new Error(`scripts/fixtures_gguf.py failed (exit ${r.status})`);
    fs.writeFileSync(path.join(tmp, '.stamp'), s);
    fs.rmSync(DIR, { recursive: true, force: true });
    fs.renameSync(tmp, DIR);
  });
  return DIR;
}

// index.json with absolute paths: fixtures[name] = { gguf, ref, parts (of a split file), ... }, small[file] = how it is malformed.
function ggufIndex() {
  const dir = ensureGgufFixtures();
  const index = JSON.parse(fs.readFileSync(path.join(dir, 'index.json'), 'utf8'));
  for (const f of Object.values(index.fixtures)) {
    f.gguf = path.resolve(dir, f.gguf);
    if (f.parts) f.parts = f.parts.map((p) => path.resolve(dir, p));
    f.ref = path.join(dir, f.ref);
    if (f.own) f.own = path.join(dir, f.own);
  }
  index.dir = dir;
  return index;
}

module.exports = { ensureGgufFixtures, ggufIndex, GGUF_FIXTURES_DIR: DIR };

if (require.main === module) {
  try {
    process.stdout.write(`${ensureGgufFixtures()}\n`);
  } catch (err) {
    process.stderr.write(`[fixtures-gguf] error: ${err.message}\n`);
    process.exit(1);
  }
}
