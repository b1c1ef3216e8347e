'use strict';
// Voice-cloning front-end references under .cache/fixtures-voice: synthetic reference clips as
// WAV files and what mlx-audio's prepare_conditionals makes of them (resampled signals, the three
// log-mel front ends, the voice encoder's embedding, CAMPPlus's x-vector), written by
// scripts/fixtures_voice.py with mlx-audio's own functions. The voice encoder's and CAMPPlus's
// weights come from the Chatterbox fixture, so
// this runs after scripts/fixtures-tts.js and is regenerated when the script, the reference
// package spec or that fixture changes. It also writes a seeded S3 speech tokenizer as a Hugging
// Face cache (hub/) and mlx-audio's tokens of each clip (s3tokenizer.json).

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ensureVenv, withLock, ROOT, VENV_SPEC } = require('./venv');
const { ensureTtsFixtures } = require('./fixtures-tts');

const VOICE_FIXTURES_DIR = path.join(ROOT, '.cache', 'fixtures-voice');
const SCRIPT = path.join(__dirname, 'fixtures_voice.py');
const STAMP_NAME = '.stamp';

function log(msg) {
  process.stderr.write(`[fixtures-voice] ${msg}\n`);
}

function stampOf(ttsDir) {
  const h = crypto.createHash('sha256');
  h.update(fs.readFileSync(SCRIPT));
  // The end-to-end cloning references, and the fixture loader they share with the TTS references.
  h.update(fs.readFileSync(path.join(__dirname, 'voice_clone_ref.py')));
  h.update(fs.readFileSync(path.join(ROOT, '__test__', 'ref', 'chatterbox_ref.py')));
  h.update(VENV_SPEC);
  h.update(fs.readFileSync(path.join(ttsDir, '.stamp')));
  return h.digest('hex');
}

function isFresh(stamp) {
  try {
    return (
      fs.readFileSync(path.join(VOICE_FIXTURES_DIR, STAMP_NAME), 'utf8') === stamp &&
      fs.existsSync(path.join(VOICE_FIXTURES_DIR, 'meta.json'))
    );
  } catch {
    return false;
  }
}

function generate(python, env, stamp, ttsDir) {
  const tmp = `${VOICE_FIXTURES_DIR}.partial`;
  fs.rmSync(tmp, { recursive: true, force: true });
  log(`writing voice-cloning references to ${path.relative(ROOT, VOICE_FIXTURES_DIR)}`);
  const t0 = Date.now();
  const r = spawnSync(python, [SCRIPT, tmp, path.join(ttsDir, 'chatterbox')], { env, cwd: ROOT, stdio: ['ignore', 2, 2] });
  if (r.error) throw new Error(`could not run ${SCRIPT}: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`scripts/fixtures_voice.py failed (exit ${r.status}${r.signal ? `, ${r.signal}` : ''})`);
  fs.writeFileSync(path.join(tmp, STAMP_NAME), stamp);
  fs.rmSync(VOICE_FIXTURES_DIR, { recursive: true, force: true });
  fs.renameSync(tmp, VOICE_FIXTURES_DIR);
  log(`references ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}

// Returns the absolute path of .cache/fixtures-voice, writing the references first if needed.
function ensureVoiceFixtures() {
  const ttsDir = ensureTtsFixtures({ refs: false });
  const { python, env } = ensureVenv();
  const stamp = stampOf(ttsDir);
  if (isFresh(stamp)) return VOICE_FIXTURES_DIR;
  withLock(path.join(ROOT, '.cache', 'fixtures-voice.lock'), 'voice fixture generation', () => {
    if (!isFresh(stamp)) generate(python, env, stamp, ttsDir);
  });
  return VOICE_FIXTURES_DIR;
}

// The seeded S3 tokenizer's folder in the fixtures' Hugging Face cache (loadTTS's s3Tokenizer).
function voiceTokenizerDir() {
  const { commit } = JSON.parse(fs.readFileSync(path.join(VOICE_FIXTURES_DIR, 's3tokenizer.json'), 'utf8'));
  return path.join(VOICE_FIXTURES_DIR, 'hub', 'models--mlx-community--S3TokenizerV2', 'snapshots', commit);
}

module.exports = { ensureVoiceFixtures, voiceTokenizerDir, VOICE_FIXTURES_DIR };

if (require.main === module) {
  try {
    process.stdout.write(`${ensureVoiceFixtures()}\n`);
  } catch (err) {
    process.stderr.write(`[fixtures-voice] error: ${err.message}\n`);
    process.exit(1);
  }
}
