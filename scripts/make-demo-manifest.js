'use strict';
// Writes scripts/demo-models.json, from which scripts/demo-models.js makes the demo's models.
// Run by hand (`node scripts/make-demo-manifest.js`) after the fixtures it reads change:
// .cache/fixtures-tts/chatterbox (fixtures_tts.py), which `npm test` writes. Never run by the demo.
//
// Per tensor it records the distribution its values were drawn from, measured: a constant
// (norm gains), a uniform (MLX Linear init, Snake alphas, BatchNorm variances: told apart
// from normals by their kurtosis of -1.2) or a normal, with the measured parameters. The rows
// fixtures_tts.py rigs so that T3 stops by itself are left out of the statistics and
// recorded as the `rig` that demo-models.js applies again.

const fs = require('node:fs');
const path = require('node:path');
const { ROOT } = require('./mlx');
const { MANIFEST_PATH } = require('./demo-models');

const SPEECH_DIR = path.join(ROOT, '.cache', 'fixtures-tts', 'chatterbox');
// Tensors made of equal parts with different distributions: HiFT's conv_post bias has
// fixtures_tts.py's HIFT_LOG_MAG_BIAS on its first half (the log-magnitude channels) only.
const SPLIT = { 's3gen.mel2wav.conv_post.bias': 2 };
// Excess kurtosis below which values count as uniform (uniform: -1.2, normal: 0). Tensors
// with fewer than BIG values are judged together with the others of their leaf name.
const UNIFORM_KURTOSIS = -0.6;
const BIG = 1024;

function readSafetensors(file) {
  const buf = fs.readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString());
  const out = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const [s, e] = t.data_offsets;
    const bytes = buf.subarray(8 + n + s, 8 + n + e);
    const Type = { F32: Float32Array, I32: Int32Array }[t.dtype];
    if (!Type) throw new Error(`${file}: ${name} is ${t.dtype}, expected F32 or I32`);
    out[name] = { shape: t.shape, data: new Type(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length)) };
  }
  return out;
}

const round = (x) => Number(x.toPrecision(5));

function moments(a) {
  let mean = 0;
  for (const x of a) mean += x;
  mean /= a.length;
  let m2 = 0;
  let m4 = 0;
  let min = Infinity;
  let max = -Infinity;
  for (const x of a) {
    const d = (x - mean) ** 2;
    m2 += d;
    m4 += d * d;
    if (x < min) min = x;
    if (x > max) max = x;
  }
  m2 /= a.length;
  m4 /= a.length;
  return { n: a.length, mean, std: Math.sqrt(m2), kurtosis: m2 > 0 ? m4 / (m2 * m2) - 3 : 0, min, max };
}

function spec(m, uniform) {
  if (m.std === 0) return ['const', round(m.mean)];
  if (uniform) {
    // min and max of n uniform values fall short of the bounds by range / (n + 1) on average.
    const pad = (m.max - m.min) / (m.n - 1);
    return ['uniform', round(m.min - pad), round(m.max + pad)];
  }
  return ['normal', round(m.mean), round(m.std)];
}

// Array of [name, shape, ...spec] in name order; `skipRows`: name -> rows left out of the statistics.
function tensorSpecs(weights, skipRows = {}) {
  const parts = [];
  for (const name of Object.keys(weights).sort()) {
    const { shape, data } = weights[name];
    if (!(data instanceof Float32Array)) throw new Error(`${name}: expected float32 weights`);
    let values = data;
    if (skipRows[name] !== undefined) {
      const dim = data.length / shape[0];
      const r = skipRows[name];
      values = new Float32Array(data.length - dim);
      values.set(data.subarray(0, r * dim));
      values.set(data.subarray((r + 1) * dim), r * dim);
    }
    const k = SPLIT[name] || 1;
    const len = values.length / k;
    for (let i = 0; i < k; i++) {
      const v = values.subarray(i * len, (i + 1) * len);
      parts.push({ name, shape, part: i, parts: k, leaf: name.split('.').pop(), values: v, m: moments(v) });
    }
  }
  // Pooled kurtosis of the standardized values of the small tensors of each leaf name.
  const pooled = {};
  for (const p of parts) {
    if (p.m.n >= BIG || p.m.std === 0) continue;
    const g = (pooled[p.leaf] ??= { n: 0, m4: 0 });
    for (const x of p.values) {
      g.m4 += ((x - p.m.mean) / p.m.std) ** 4;
      g.n++;
    }
  }
  const uniform = (p) => (p.m.n >= BIG ? p.m.kurtosis : pooled[p.leaf].m4 / pooled[p.leaf].n - 3) < UNIFORM_KURTOSIS;
  const out = [];
  for (const p of parts) {
    const s = spec(p.m, p.m.std > 0 && uniform(p));
    if (p.parts === 1) out.push([p.name, p.shape, ...s]);
    else if (p.part === 0) out.push([p.name, p.shape, 'split', [s]]);
    else out.at(-1)[3].push(s);
  }
  return out;
}

function rowNorm(a, dim, r) {
  return Math.hypot(...a.subarray(r * dim, (r + 1) * dim));
}

// The stop rig of fixtures_tts.py (random_weights): the longest speech position embedding row,
// and the speech head's stop row along it.
function findRig(weights, config) {
  const pos = weights['t3.speech_pos_emb.emb.weight'];
  const head = weights['t3.speech_head.weight'];
  const dim = pos.shape[1];
  const norms = Array.from({ length: pos.shape[0] }, (_, r) => rowNorm(pos.data, dim, r));
  const stopPosition = norms.indexOf(Math.max(...norms));
  const others = norms.filter((_, r) => r !== stopPosition);
  const typical = others.reduce((a, b) => a + b, 0) / others.length;
  const stopToken = config.t3_config.stop_speech_token;
  let dot = 0;
  for (let i = 0; i < dim; i++) dot += pos.data[stopPosition * dim + i] * head.data[stopToken * dim + i];
  const stopGain = rowNorm(head.data, dim, stopToken);
  const cosine = dot / (norms[stopPosition] * stopGain);
  if (cosine < 0.999) throw new Error(`speech head stop row is not along a position embedding (cosine ${cosine})`);
  return { stopToken, stopPosition, positionBoost: round(norms[stopPosition] / typical), stopGain: round(stopGain) };
}

function voiceOf(conds, config) {
  return {
    speechVocab: config.t3_config.start_speech_token,
    speakerDim: conds['t3.speaker_emb'].shape[1],
    xvectorDim: conds['gen.embedding'].shape[1],
    promptTokens: conds['gen.prompt_token'].shape[1],
    condPromptTokens: conds['t3.cond_prompt_speech_tokens'].shape[1],
    mels: conds['gen.prompt_feat'].shape[2],
    emotionAdv: round(conds['t3.emotion_adv'].data[0]),
  };
}

const readJson = (file) => JSON.parse(fs.readFileSync(file, 'utf8'));

// JSON with one tensor per line (readable diffs), everything else indented: each tensor is
// first written as a marked string, then the string is replaced by its compact JSON.
function format(manifest) {
  const marked = (key, value) => (key === 'tensors' ? value.map((t) => `\u0000${JSON.stringify(t)}`) : value);
  const text = JSON.stringify(manifest, marked, 2);
  return `${text.replace(/"\\u0000(.*)"(,?)$/gm, (_, t, comma) => JSON.parse(`"${t}"`) + comma)}\n`;
}

function main() {
  const speechConfig = readJson(path.join(SPEECH_DIR, 'config.json'));
  const speechWeights = readSafetensors(path.join(SPEECH_DIR, 'model.safetensors'));
  const rig = findRig(speechWeights, speechConfig);
  const manifest = {
    about: 'Written by scripts/make-demo-manifest.js from the test fixtures; read by scripts/demo-models.js. Tensors: [name, shape, distribution...].',
    models: {
      chatterbox: {
        description: 'speech model (a shrunk Chatterbox, random weights)',
        json: { 'config.json': speechConfig, 'tokenizer.json': readJson(path.join(SPEECH_DIR, 'tokenizer.json')) },
        rig,
        voice: voiceOf(readSafetensors(path.join(SPEECH_DIR, 'conds.safetensors')), speechConfig),
        tensors: tensorSpecs(speechWeights, { 't3.speech_pos_emb.emb.weight': rig.stopPosition, 't3.speech_head.weight': rig.stopToken }),
      },
    },
  };
  const text = format(manifest);
  fs.writeFileSync(MANIFEST_PATH, text);
  for (const [name, m] of Object.entries(manifest.models)) {
    const kinds = {};
    for (const t of m.tensors) kinds[t[2]] = (kinds[t[2]] || 0) + 1;
    console.log(`${name}: ${m.tensors.length} tensors ${JSON.stringify(kinds)}`);
  }
  console.log(`rig ${JSON.stringify(rig)}; wrote ${path.relative(ROOT, MANIFEST_PATH)} (${(text.length / 1024).toFixed(0)} KiB)`);
}

main();
