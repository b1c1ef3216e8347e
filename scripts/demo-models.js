'use strict';
// The demo's embedded speech model, .cache/demo/chatterbox, written here in plain JavaScript
// so that `npm run demo` needs neither the Python venv nor the test fixtures (building those
// takes minutes). Its weights are seeded random values drawn per tensor from the distributions
// recorded in scripts/demo-models.json, which scripts/make-demo-manifest.js measured once on
// the "chatterbox" fixture of fixtures_tts.py: the model behaves like the fixture (varied noise,
// T3 ending by itself) without its exact values. (The demo's text model is a real one:
// scripts/smollm2.js.)

const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { ROOT, log } = require('./mlx');

const MANIFEST_PATH = path.join(__dirname, 'demo-models.json');
const DEMO_DIR = path.join(ROOT, '.cache', 'demo');
const SEED = 20240611;
const STAMP_NAME = '.stamp';

// xoshiro128** seeded through splitmix32 from (SEED, name): each tensor's values depend on
// nothing but its name, so the order tensors are written in does not matter.
function rngFor(name, seed = SEED) {
  let h = seed >>> 0;
  const next = () => {
    h = (h + 0x9e3779b9) >>> 0;
    let z = h;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return (z ^ (z >>> 16)) >>> 0;
  };
  for (const c of Buffer.from(name)) h = Math.imul(h ^ c, 0x01000193) >>> 0;
  let a = next();
  let b = next();
  let c = next();
  let d = next();
  return function u32() {
    const t = Math.imul(b, 5);
    const r = Math.imul((t << 7) | (t >>> 25), 9) >>> 0;
    const s = b << 9;
    c ^= a;
    d ^= b;
    b ^= c;
    a ^= d;
    c ^= s;
    d = (d << 11) | (d >>> 21);
    return r;
  };
}

const U32 = 2 ** -32;

// Fills out[start, end) by one manifest spec: ["normal", mean, std], ["uniform", lo, hi]
// or ["const", value]. Normals by Marsaglia's polar method (no trigonometry: about 15 ns a value).
function fill(out, start, end, spec, u32) {
  const [kind, p, q] = spec;
  if (kind === 'const') {
    out.fill(p, start, end);
  } else if (kind === 'uniform') {
    for (let i = start; i < end; i++) out[i] = p + (q - p) * (u32() * U32);
  } else if (kind === 'normal') {
    for (let i = start; i < end; i += 2) {
      let u, v, s;
      do {
        u = u32() * (2 * U32) - 1;
        v = u32() * (2 * U32) - 1;
        s = u * u + v * v;
      } while (s >= 1 || s === 0);
      const m = Math.sqrt((-2 * Math.log(s)) / s);
      out[i] = p + q * u * m;
      if (i + 1 < end) out[i + 1] = p + q * v * m;
    }
  } else {
    throw new Error(`demo-models.json: unknown distribution '${kind}'`);
  }
}

// One tensor's values. A ["split", [spec, ...]] entry gives equal consecutive parts their own
// distribution (HiFT's conv_post bias: log-magnitude channels, then phase channels).
function values(entry) {
  const [name, shape, ...spec] = entry;
  const n = shape.reduce((a, b) => a * b, 1);
  const out = new Float32Array(n);
  const u32 = rngFor(name);
  if (spec[0] === 'split') {
    const parts = spec[1];
    const len = n / parts.length;
    parts.forEach((part, i) => fill(out, i * len, (i + 1) * len, part, u32));
  } else {
    fill(out, 0, n, spec, u32);
  }
  return out;
}

// As fixtures_tts.py does: one speech position embedding row is made longer and the
// stop-speech row of the speech head points along it, so T3 ends by itself near that position
// (per-tensor statistics cannot carry this).
function rigChatterbox(rig, tensors) {
  const byName = new Map(tensors.map((t) => [t[0], t]));
  const pos = byName.get('t3.speech_pos_emb.emb.weight');
  const head = byName.get('t3.speech_head.weight');
  const dim = pos[1][1];
  const rowOf = (a, r) => a.subarray(r * dim, (r + 1) * dim);
  return {
    [pos[0]]: (a) => {
      const row = rowOf(a, rig.stopPosition);
      for (let i = 0; i < dim; i++) row[i] *= rig.positionBoost;
      return a;
    },
    [head[0]]: (a) => {
      const dir = rowOf(values(pos), rig.stopPosition);
      const norm = Math.hypot(...dir);
      const row = rowOf(a, rig.stopToken);
      for (let i = 0; i < dim; i++) row[i] = (dir[i] / norm) * rig.stopGain;
      return a;
    },
  };
}

// safetensors: u64 little-endian header length, the JSON header (padded with spaces to 8
// bytes), then each tensor's little-endian bytes at its data_offsets.
function writeSafetensors(file, tensors, metadata) {
  const header = metadata ? { __metadata__: metadata } : {};
  let offset = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.bytes] };
    offset += t.bytes;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - ((8 + Buffer.byteLength(json)) % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
  const fd = fs.openSync(file, 'w');
  try {
    fs.writeSync(fd, len);
    fs.writeSync(fd, json);
    for (const t of tensors) {
      const a = t.data();
      fs.writeSync(fd, new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
    }
  } finally {
    fs.closeSync(fd);
  }
  return 8 + Buffer.byteLength(json) + offset;
}

function weightTensors(entries, rigs = {}) {
  return entries.map((entry) => {
    const [name, shape] = entry;
    const bytes = 4 * shape.reduce((a, b) => a * b, 1);
    const data = () => (rigs[name] ? rigs[name](values(entry)) : values(entry));
    return { name, shape, dtype: 'F32', bytes, data };
  });
}

// Chatterbox's built-in voice, made as fixtures_tts.py's random_conds makes it: a unit speaker
// embedding, random prompt speech tokens, and a mel-like prompt (log-mel around -6..0, smooth in time).
function chatterboxConds(voice) {
  const u32 = rngFor('conds');
  const normals = (n) => {
    const a = new Float32Array(n);
    fill(a, 0, n, ['normal', 0, 1], u32);
    return a;
  };
  const tokens = (n) => Int32Array.from({ length: n }, () => Math.floor(u32() * U32 * voice.speechVocab));
  const speaker = normals(voice.speakerDim).map(Math.abs);
  const norm = Math.hypot(...speaker);
  speaker.forEach((x, i) => (speaker[i] = x / norm));
  const frames = 2 * voice.promptTokens;
  const mels = voice.mels;
  const feat = new Float32Array(frames * mels);
  const steps = normals(frames * mels);
  for (let m = 0; m < mels; m++) {
    let level = -5.5 + 4 * u32() * U32;
    for (let f = 0; f < frames; f++) {
      level += 0.25 * steps[f * mels + m];
      feat[f * mels + m] = Math.min(0.5, Math.max(-7, level));
    }
  }
  const t = (name, dtype, shape, a) => ({ name, dtype, shape, bytes: a.byteLength, data: () => a });
  return [
    t('gen.embedding', 'F32', [1, voice.xvectorDim], normals(voice.xvectorDim)),
    t('gen.prompt_feat', 'F32', [1, frames, mels], feat),
    t('gen.prompt_token', 'I32', [1, voice.promptTokens], tokens(voice.promptTokens)),
    t('gen.prompt_token_len', 'I32', [1], Int32Array.of(voice.promptTokens)),
    t('t3.cond_prompt_speech_tokens', 'I32', [1, voice.condPromptTokens], tokens(voice.condPromptTokens)),
    t('t3.emotion_adv', 'F32', [1, 1, 1], Float32Array.of(voice.emotionAdv)),
    t('t3.speaker_emb', 'F32', [1, voice.speakerDim], speaker),
  ];
}

function writeJson(file, obj) {
  fs.writeFileSync(file, `${JSON.stringify(obj, null, 2)}\n`);
}

// Writes one model's files into `dir` (a fresh folder); returns the bytes written.
function writeModel(name, model, dir) {
  for (const [file, obj] of Object.entries(model.json)) writeJson(path.join(dir, file), obj);
  let bytes = 0;
  const rigs = rigChatterbox(model.rig, model.tensors);
  bytes += writeSafetensors(path.join(dir, 'model.safetensors'), weightTensors(model.tensors, rigs), { format: 'mlx' });
  bytes += writeSafetensors(path.join(dir, 'conds.safetensors'), chatterboxConds(model.voice));
  return bytes;
}

function stampOf() {
  const h = crypto.createHash('sha256');
  h.update(fs.readFileSync(__filename));
  h.update(fs.readFileSync(MANIFEST_PATH));
  return h.digest('hex');
}

function isFresh(dir, stamp) {
  try {
    return fs.readFileSync(path.join(dir, STAMP_NAME), 'utf8') === stamp;
  } catch {
    return false;
  }
}

// Leftovers of runs that were killed while writing (their process is gone).
function removeStale(name) {
  for (const f of fs.readdirSync(DEMO_DIR)) {
    const m = f.match(/^(.+)\.(partial|old)-(\d+)$/);
    if (!m || m[1] !== name) continue;
    let alive = true;
    try {
      process.kill(Number(m[3]), 0);
    } catch (e) {
      alive = e.code === 'EPERM';
    }
    if (!alive) fs.rmSync(path.join(DEMO_DIR, f), { recursive: true, force: true });
  }
}

// Returns the folder of the demo model `name` ('chatterbox'), writing it first
// unless it is there with a stamp of this script and manifest. Written into a temporary
// folder and renamed into place, so an interrupted run never leaves half a model behind.
function ensureDemoModel(name) {
  const dir = path.join(DEMO_DIR, name);
  if (fs.existsSync(DEMO_DIR)) removeStale(name);
  const stamp = stampOf();
  if (isFresh(dir, stamp)) return dir;
  if (os.endianness() !== 'LE') throw new Error('the demo models are written on little-endian machines only');
  const manifest = JSON.parse(fs.readFileSync(MANIFEST_PATH, 'utf8'));
  const model = manifest.models[name];
  if (!model) throw new Error(`no demo model '${name}' in ${path.relative(ROOT, MANIFEST_PATH)}`);
  fs.mkdirSync(DEMO_DIR, { recursive: true });
  const t0 = performance.now();
  log(`writing the demo ${model.description} to ${path.relative(ROOT, dir)}`);
  const tmp = `${dir}.partial-${process.pid}`;
  fs.rmSync(tmp, { recursive: true, force: true });
  fs.mkdirSync(tmp);
  try {
    const bytes = writeModel(name, model, tmp);
    // Another demo may have written it meanwhile (and be using it): keep theirs.
    if (isFresh(dir, stamp)) return dir;
    fs.writeFileSync(path.join(tmp, STAMP_NAME), stamp);
    const old = `${dir}.old-${process.pid}`;
    try {
      fs.renameSync(dir, old);
    } catch (e) {
      if (e.code !== 'ENOENT') throw e;
    }
    try {
      fs.renameSync(tmp, dir);
    } catch (e) {
      if (!isFresh(dir, stamp)) throw e;
    }
    fs.rmSync(old, { recursive: true, force: true });
    log(`demo ${name} model written in ${((performance.now() - t0) / 1000).toFixed(1)} s (${(bytes / 1e6).toFixed(0)} MB)`);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  return dir;
}

module.exports = { ensureDemoModel, DEMO_DIR, MANIFEST_PATH };

if (require.main === module) {
  try {
    for (const name of process.argv.length > 2 ? process.argv.slice(2) : ['chatterbox']) {
      process.stdout.write(`${ensureDemoModel(name)}\n`);
    }
  } catch (err) {
    process.stderr.write(`[mlx-node] error: ${err.message}\n`);
    process.exit(1);
  }
}
