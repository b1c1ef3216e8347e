'use strict';
// Seeded random-weight text-model fixtures, written by scripts/fixtures.py with MLX-LM's own
// model classes, in two sets: the shared decoder's under .cache/fixtures (`npm test`), every other
// family's under .cache/fixtures-families (`npm run test:families`, the distributed suite;
// minutes of 2 cores that `npm test` does not spend). Each set is regenerated only when
// fixtures.py, the reference package spec or the tokenizer files change.

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ensureVenv, withLock, ROOT, VENV_SPEC } = require('./venv');
const { QWEN3_TOKENIZER_FILES, qwen3TokenizerDir, gemma3TokenizerDir } = require('./npm-tokenizers');

const FIXTURES_DIR = path.join(ROOT, '.cache', 'fixtures');
const DIRS = { core: FIXTURES_DIR, families: path.join(ROOT, '.cache', 'fixtures-families') };
const SCRIPT = path.join(__dirname, 'fixtures.py');
const STAMP_NAME = '.stamp';

function log(msg) {
  process.stderr.write(`[fixtures] ${msg}\n`);
}

function fixturesStamp(set, tokDirs) {
  const h = crypto.createHash('sha256');
  h.update(set);
  h.update(fs.readFileSync(SCRIPT));
  h.update(VENV_SPEC);
  for (const dir of tokDirs) {
    for (const f of QWEN3_TOKENIZER_FILES) h.update(`${f}:${fs.statSync(path.join(dir, f)).size}`);
  }
  return h.digest('hex');
}

function isFresh(dir, stamp) {
  try {
    return fs.readFileSync(path.join(dir, STAMP_NAME), 'utf8') === stamp && fs.existsSync(path.join(dir, 'index.json'));
  } catch {
    return false;
  }
}

function generate(python, env, set, tokDirs, stamp) {
  const dir = DIRS[set];
  const tmp = `${dir}.partial`;
  fs.rmSync(tmp, { recursive: true, force: true });
  log(`writing the ${set} fixtures to ${path.relative(ROOT, dir)}`);
  const t0 = Date.now();
  const r = spawnSync(python, [SCRIPT, tmp, ...tokDirs, set], { env, cwd: ROOT, stdio: ['ignore', 2, 2] });
  if (r.error) throw new Error(`could not run ${SCRIPT}: ${r.error.message}`);
  if (r.status !== 0) {
    throw new Error(`${path.relative(ROOT, SCRIPT)} failed (exit ${r.status}${r.signal ? `, ${r.signal}` : ''})`);
  }
  fs.writeFileSync(path.join(tmp, STAMP_NAME), stamp);
  const old = `${dir}.old`;
  fs.rmSync(old, { recursive: true, force: true });
  if (fs.existsSync(dir)) fs.renameSync(dir, old);
  fs.renameSync(tmp, dir);
  fs.rmSync(old, { recursive: true, force: true });
  log(`${set} fixtures ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}

// The sets asked for: the core one always, the families' with `families`.
const setsFor = (families) => (families ? ['core', 'families'] : ['core']);

// Returns the absolute path of the core fixtures folder, writing the fixtures first if needed;
// with `families`, the families' set too (in its own folder: fixtureIndex joins them).
function ensureFixtures({ families = false } = {}) {
  const { python, env } = ensureVenv();
  const tokDirs = [qwen3TokenizerDir(), gemma3TokenizerDir()];
  for (const set of setsFor(families)) {
    const stamp = fixturesStamp(set, tokDirs);
    if (isFresh(DIRS[set], stamp)) continue;
    withLock(path.join(ROOT, '.cache', `fixtures-${set}.lock`), `${set} fixture generation`, () => {
      if (!isFresh(DIRS[set], stamp)) generate(python, env, set, tokDirs, stamp);
    });
  }
  return FIXTURES_DIR;
}

// The fixtures' index.json (name -> { path, config, ... }), paths made absolute: the core set's,
// and with `families` the families' joined to it.
function fixtureIndex({ families = false } = {}) {
  ensureFixtures({ families });
  let joined;
  for (const set of setsFor(families)) {
    const index = JSON.parse(fs.readFileSync(path.join(DIRS[set], 'index.json'), 'utf8'));
    for (const entry of Object.values(index.fixtures)) entry.path = path.join(DIRS[set], entry.path);
    if (joined) Object.assign(joined.fixtures, index.fixtures);
    else joined = index;
  }
  return joined;
}

module.exports = { ensureFixtures, fixtureIndex, FIXTURES_DIR };

// `node scripts/fixtures.js [--families]`
if (require.main === module) {
  try {
    process.stdout.write(`${ensureFixtures({ families: process.argv.includes('--families') })}\n`);
  } catch (err) {
    process.stderr.write(`[fixtures] error: ${err.message}\n`);
    process.exit(1);
  }
}
