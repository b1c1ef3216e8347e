'use strict';
// Seeded random-weight text-model fixtures under .cache/fixtures, written by
// scripts/fixtures.py with MLX-LM's own model classes. Regenerated only when
// fixtures.py, the reference package spec or the tokenizer files change.

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ensureVenv, withLock, ROOT, VENV_SPEC } = require('./venv');
const { QWEN3_TOKENIZER_FILES, qwen3TokenizerDir, gemma3TokenizerDir } = require('./npm-tokenizers');

const FIXTURES_DIR = path.join(ROOT, '.cache', 'fixtures');
const SCRIPT = path.join(__dirname, 'fixtures.py');
const STAMP_NAME = '.stamp';

function log(msg) {
  process.stderr.write(`[fixtures] ${msg}\n`);
}

function fixturesStamp(tokDirs) {
  const h = crypto.createHash('sha256');
  h.update(fs.readFileSync(SCRIPT));
  h.update(VENV_SPEC);
  for (const dir of tokDirs) {
    for (const f of QWEN3_TOKENIZER_FILES) h.update(`${f}:${fs.statSync(path.join(dir, f)).size}`);
  }
  return h.digest('hex');
}

function isFresh(stamp) {
  try {
    return (
      fs.readFileSync(path.join(FIXTURES_DIR, STAMP_NAME), 'utf8') === stamp &&
      fs.existsSync(path.join(FIXTURES_DIR, 'index.json'))
    );
  } catch {
    return false;
  }
}

function generate(python, env, tokDirs, stamp) {
  const tmp = `${FIXTURES_DIR}.partial`;
  fs.rmSync(tmp, { recursive: true, force: true });
  log(`writing fixtures to ${path.relative(ROOT, FIXTURES_DIR)}`);
  const t0 = Date.now();
  const r = spawnSync(python, [SCRIPT, tmp, ...tokDirs], { env, cwd: ROOT, stdio: ['ignore', 2, 2] });
  if (r.error) throw new Error(`could not run ${SCRIPT}: ${r.error.message}`);
  if (r.status !== 0) {
    throw new Error(`${path.relative(ROOT, SCRIPT)} failed (exit ${r.status}${r.signal ? `, ${r.signal}` : ''})`);
  }
  fs.writeFileSync(path.join(tmp, STAMP_NAME), stamp);
  const old = `${FIXTURES_DIR}.old`;
  fs.rmSync(old, { recursive: true, force: true });
  if (fs.existsSync(FIXTURES_DIR)) fs.renameSync(FIXTURES_DIR, old);
  fs.renameSync(tmp, FIXTURES_DIR);
  fs.rmSync(old, { recursive: true, force: true });
  log(`fixtures ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}

// Returns the absolute path of the fixtures folder, writing the fixtures first if needed.
function ensureFixtures() {
  const { python, env } = ensureVenv();
  const tokDirs = [qwen3TokenizerDir(), gemma3TokenizerDir()];
  const stamp = fixturesStamp(tokDirs);
  if (isFresh(stamp)) return FIXTURES_DIR;
  withLock(path.join(ROOT, '.cache', 'fixtures.lock'), 'fixture generation', () => {
    if (!isFresh(stamp)) generate(python, env, tokDirs, stamp);
  });
  return FIXTURES_DIR;
}

// Reads .cache/fixtures/index.json (name -> { path, config, ... }), paths made absolute.
function fixtureIndex() {
  const dir = ensureFixtures();
  const index = JSON.parse(fs.readFileSync(path.join(dir, 'index.json'), 'utf8'));
  for (const entry of Object.values(index.fixtures)) entry.path = path.join(dir, entry.path);
  return index;
}

module.exports = { ensureFixtures, fixtureIndex, FIXTURES_DIR };

if (require.main === module) {
  try {
    process.stdout.write(`${ensureFixtures()}\n`);
  } catch (err) {
    process.stderr.write(`[fixtures] error: ${err.message}\n`);
    process.exit(1);
  }
}
