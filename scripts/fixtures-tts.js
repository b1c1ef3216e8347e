'use strict';
// Seeded random-weight Chatterbox fixtures under .cache/fixtures-tts (float32, float16, bfloat16; T3 in 4, 6, 8 bits),
// written by scripts/fixtures_tts.py with mlx-audio's own model classes, plus the live
// mlx-audio reference dumps (<fixture>/ref/) written by __test__/ref/chatterbox_ref.py; and the
// Chatterbox Multilingual ones (chatterbox-mtl, -mtl-v3) with theirs from __test__/ref/chatterbox_mtl_ref.py.
// The models are regenerated when their script or the reference package spec changes, the
// references when either reference script or the models change. `npm test` needs only the models
// (the CLI, the server and the hub speak with them; about 10 s to write); the references (about
// 80 s of mlx-audio on 2 cores, dealt over two processes) are for `npm run test:speech` and the portability pass.
// Chatterbox Turbo's fixture (chatterbox-turbo, with its reference) lives apart, under
// .cache/fixtures-tts-turbo, written by scripts/fixtures_tts_turbo.py (ensureTurboFixture).

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ensureVenv, withLock, ROOT, VENV_SPEC } = require('./venv');

const TTS_FIXTURES_DIR = path.join(ROOT, '.cache', 'fixtures-tts');
const MODEL_SCRIPT = path.join(__dirname, 'fixtures_tts.py');
const REF_SCRIPT = path.join(ROOT, '__test__', 'ref', 'chatterbox_ref.py');
const MTL_REF_SCRIPT = path.join(ROOT, '__test__', 'ref', 'chatterbox_mtl_ref.py');
const FIXTURES = ['chatterbox', 'chatterbox-f16', 'chatterbox-bf16', 'chatterbox-q4', 'chatterbox-q6', 'chatterbox-q8'];
const MTL_FIXTURES = ['chatterbox-mtl', 'chatterbox-mtl-v3'];
const STAMP_NAME = '.stamp';
const TURBO_DIR = path.join(ROOT, '.cache', 'fixtures-tts-turbo');
const TURBO_SCRIPT = path.join(__dirname, 'fixtures_tts_turbo.py');
// The Turbo fixture's voice-cloning references take their clips and S3 tokenizer from it.
const VOICE_SCRIPT = path.join(__dirname, 'fixtures_voice.py');

function log(msg) {
  process.stderr.write(`[fixtures-tts] ${msg}\n`);
}

const REFS_STAMP_NAME = '.stamp-refs';

function modelsStamp() {
  const h = crypto.createHash('sha256');
  h.update(fs.readFileSync(MODEL_SCRIPT));
  h.update(VENV_SPEC);
  return h.digest('hex');
}

function refsStamp(models) {
  const h = crypto.createHash('sha256');
  h.update(models);
  h.update(fs.readFileSync(REF_SCRIPT));
  h.update(fs.readFileSync(MTL_REF_SCRIPT));
  return h.digest('hex');
}

// Whether the folder's stamp file `name` holds `stamp` and every fixture has `file`.
function isFresh(name, stamp, file) {
  try {
    return (
      fs.readFileSync(path.join(TTS_FIXTURES_DIR, name), 'utf8') === stamp &&
      [...FIXTURES, ...MTL_FIXTURES].every((f) => fs.existsSync(path.join(TTS_FIXTURES_DIR, f, file)))
    );
  } catch {
    return false;
  }
}

function runPython(python, env, script, args) {
  const r = spawnSync(python, [script, ...args], { env, cwd: ROOT, stdio: ['ignore', 2, 2] });
  if (r.error) throw new Error(`could not run ${script}: ${r.error.message}`);
  if (r.status !== 0) {
    throw new Error(`${path.relative(ROOT, script)} failed (exit ${r.status}${r.signal ? `, ${r.signal}` : ''})`);
  }
}

function folderSize(dir) {
  let total = 0;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    // lstat: chatterbox-mtl-v3 links to chatterbox-mtl's files rather than copying them.
    total += entry.isDirectory() ? folderSize(p) : fs.lstatSync(p).size;
  }
  return total;
}

function mib(bytes) {
  return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

// The models, written aside and renamed into place (which drops any references with their stamp).
function generateModels(python, env, stamp) {
  const tmp = `${TTS_FIXTURES_DIR}.partial`;
  fs.rmSync(tmp, { recursive: true, force: true });
  log(`writing Chatterbox fixtures to ${path.relative(ROOT, TTS_FIXTURES_DIR)}`);
  const t0 = Date.now();
  runPython(python, env, MODEL_SCRIPT, [tmp]);
  fs.writeFileSync(path.join(tmp, STAMP_NAME), stamp);
  const old = `${TTS_FIXTURES_DIR}.old`;
  fs.rmSync(old, { recursive: true, force: true });
  if (fs.existsSync(TTS_FIXTURES_DIR)) fs.renameSync(TTS_FIXTURES_DIR, old);
  fs.renameSync(tmp, TTS_FIXTURES_DIR);
  fs.rmSync(old, { recursive: true, force: true });
  const sizes = [...FIXTURES, ...MTL_FIXTURES].map((f) => `${f} ${mib(folderSize(path.join(TTS_FIXTURES_DIR, f)))}`).join(', ');
  log(`models ready in ${((Date.now() - t0) / 1000).toFixed(1)} s (${sizes})`);
}

// mlx-audio's references into each fixture's ref/; the stamp is written last, so a run cut short
// is redone.
function generateRefs(python, env, stamp) {
  fs.rmSync(path.join(TTS_FIXTURES_DIR, REFS_STAMP_NAME), { force: true });
  for (const f of [...FIXTURES, ...MTL_FIXTURES]) fs.rmSync(path.join(TTS_FIXTURES_DIR, f, 'ref'), { recursive: true, force: true });
  log('writing mlx-audio references');
  const t0 = Date.now();
  runPython(python, env, REF_SCRIPT, FIXTURES.map((f) => path.join(TTS_FIXTURES_DIR, f)));
  runPython(python, env, MTL_REF_SCRIPT, MTL_FIXTURES.map((f) => path.join(TTS_FIXTURES_DIR, f)));
  fs.writeFileSync(path.join(TTS_FIXTURES_DIR, REFS_STAMP_NAME), stamp);
  log(`references ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}

// Returns the absolute path of .cache/fixtures-tts, writing the models first if needed, and with
// `refs` (the default) mlx-audio's references too.
function ensureTtsFixtures({ refs = true } = {}) {
  const { python, env } = ensureVenv();
  const models = modelsStamp();
  const modelsFresh = () => isFresh(STAMP_NAME, models, 'config.json');
  const refsWanted = refs ? refsStamp(models) : null;
  const refsFresh = () => !refs || isFresh(REFS_STAMP_NAME, refsWanted, path.join('ref', 'meta.json'));
  if (modelsFresh() && refsFresh()) return TTS_FIXTURES_DIR;
  withLock(path.join(ROOT, '.cache', 'fixtures-tts.lock'), 'TTS fixture generation', () => {
    if (!modelsFresh()) generateModels(python, env, models);
    if (!refsFresh()) generateRefs(python, env, refsWanted);
  });
  return TTS_FIXTURES_DIR;
}

// The Turbo fixture folder (.cache/fixtures-tts-turbo/chatterbox-turbo), written with its
// reference when missing or stale (its script, the Chatterbox and voice ones it builds on, the
// venv). Its S3 tokenizer (for voice cloning) is a Hugging Face cache beside it (turboTokenizerDir).
function ensureTurboFixture() {
  const { python, env } = ensureVenv();
  const h = crypto.createHash('sha256');
  for (const f of [MODEL_SCRIPT, TURBO_SCRIPT, VOICE_SCRIPT]) h.update(fs.readFileSync(f));
  h.update(VENV_SPEC);
  const stamp = h.digest('hex');
  const folder = path.join(TURBO_DIR, 'chatterbox-turbo');
  const fresh = () => {
    try {
      return fs.readFileSync(path.join(TURBO_DIR, STAMP_NAME), 'utf8') === stamp && fs.existsSync(path.join(folder, 'ref', 'meta.json'));
    } catch {
      return false;
    }
  };
  if (fresh()) return folder;
  withLock(`${TURBO_DIR}.lock`, 'Turbo fixture generation', () => {
    if (fresh()) return;
    const tmp = `${TURBO_DIR}.partial`;
    fs.rmSync(tmp, { recursive: true, force: true });
    log(`writing the Chatterbox Turbo fixture to ${path.relative(ROOT, TURBO_DIR)}`);
    const t0 = Date.now();
    runPython(python, env, TURBO_SCRIPT, [tmp]);
    fs.writeFileSync(path.join(tmp, STAMP_NAME), stamp);
    fs.rmSync(TURBO_DIR, { recursive: true, force: true });
    fs.renameSync(tmp, TURBO_DIR);
    log(`Turbo fixture ready in ${((Date.now() - t0) / 1000).toFixed(1)} s (${mib(folderSize(folder))})`);
  });
  return folder;
}

// The seeded S3 tokenizer's folder in the Turbo fixture's Hugging Face cache (loadTTS's s3Tokenizer).
function turboTokenizerDir() {
  const { tokenizer_commit: commit } = JSON.parse(fs.readFileSync(path.join(TURBO_DIR, 'chatterbox-turbo', 'ref', 'clone.json'), 'utf8'));
  return path.join(TURBO_DIR, 'hub', 'models--mlx-community--S3TokenizerV2', 'snapshots', commit);
}

module.exports = { ensureTtsFixtures, ensureTurboFixture, turboTokenizerDir, TTS_FIXTURES_DIR };

if (require.main === module) {
  try {
    process.stdout.write(`${ensureTtsFixtures()}\n`);
  } catch (err) {
    process.stderr.write(`[fixtures-tts] error: ${err.message}\n`);
    process.exit(1);
  }
}
