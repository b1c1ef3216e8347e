'use strict';
// `npm run bench:tts -- --only voices`: time to the first chunk of tts.stream() with the
// built-in voice and with cloned voices, on the tests' Chatterbox fixture (whose seeded S3
// tokenizer, from .cache/fixtures-voice, clones). About half of all clips leave a prompt mel
// one frame longer than two per prompt token (mlx-audio's embed_ref); such a voice once got
// no S3Gen prompt cache, so every chunk ran the flow over the whole prompt. The two cloned
// voices are cuts of one recording 20 ms apart, one of each kind, so that they differ in
// nothing else (the same 200-token prompt).
const path = require('node:path');
const { median, loadavg } = require('./machine');

const CUT_START_MS = 8000;
const CUT_STEP_MS = 20;
const CLIP = 'float32_44k_mono';

// Cuts of the fixture recording from CUT_START_MS on until there is one of each kind:
// { even, odd }, each { voice, frames, tokens, ms }.
async function cutVoices(tts, samples, rate, tmp) {
  const { readSafetensors } = require('../__test__/safetensors');
  const found = {};
  for (let ms = CUT_START_MS; !(found.even && found.odd); ms += CUT_STEP_MS) {
    if (ms > CUT_START_MS + 50 * CUT_STEP_MS) throw new Error('no cut of the clip gave both an even and an odd prompt mel');
    const voice = await tts.createVoice({ samples: samples.subarray(0, Math.round((rate * ms) / 1000)), sampleRate: rate });
    const file = path.join(tmp, `cut-${ms}.safetensors`);
    await voice.save(file);
    const conds = readSafetensors(file);
    const frames = conds['gen.prompt_feat'].shape[1];
    const kind = frames % 2 === 1 ? 'odd' : 'even';
    if (found[kind]) voice.dispose();
    else found[kind] = { voice, frames, tokens: conds['gen.prompt_token'].shape[1], ms };
  }
  return found;
}

// Seconds to the first chunk and to the end, and the prompt cache the stream used.
async function firstChunk(tts, text, options) {
  const t0 = performance.now();
  let first = null;
  const s = tts.stream(text, options);
  for await (const c of s) {
    void c;
    if (first === null) first = (performance.now() - t0) / 1000;
  }
  return { first, seconds: (performance.now() - t0) / 1000, cache: (await s.result).promptCache };
}

// Per voice: its first stream (which makes its prompt cache, where it can have one), then
// `rounds` streams after it. Resolves to the rows of voiceTable().
async function benchVoices({ text, options, rounds, log }) {
  const fs = require('node:fs');
  const os = require('node:os');
  const { loadTTS } = require('..');
  const { ensureVoiceFixtures, voiceTokenizerDir } = require('../scripts/fixtures-voice');
  const { TTS_FIXTURES_DIR } = require('../scripts/fixtures-tts');
  const { readSafetensors } = require('../__test__/safetensors');
  const voiceDir = ensureVoiceFixtures();
  const tts = await loadTTS(path.join(TTS_FIXTURES_DIR, 'chatterbox'), { s3Tokenizer: voiceTokenizerDir() });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'mlx-node-bench-voices-'));
  try {
    const rate = 44100;
    const samples = readSafetensors(path.join(voiceDir, `${CLIP}.safetensors`)).mono.data;
    const cuts = await cutVoices(tts, samples, rate, tmp);
    const voices = [
      { name: 'built-in (conds.safetensors)', voice: undefined, prompt: 'fixture voice' },
      ...['even', 'odd'].map((k) => ({ name: `cloned, ${k} prompt mel`, voice: cuts[k].voice, prompt: `${cuts[k].ms} ms cut: ${cuts[k].tokens} tokens, ${cuts[k].frames} frames` })),
    ];
    const rows = [];
    for (const v of voices) {
      const o = { ...options, voice: v.voice };
      const cold = await firstChunk(tts, text, o);
      const warm = [];
      for (let r = 0; r < rounds; r++) warm.push(await firstChunk(tts, text, o));
      const row = { name: v.name, prompt: v.prompt, cold, warm, load: loadavg() };
      log(`voices | ${v.name}: first stream ${cold.first.toFixed(2)} s (${cold.cache}), then ${warm.map((w) => `${w.first.toFixed(2)} s (${w.cache})`).join(', ')} (load ${row.load})`);
      rows.push(row);
    }
    return rows;
  } finally {
    await tts.dispose();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

function voiceTable(rows) {
  const f = (x) => x.toFixed(2);
  const spread = (xs) => (xs.length > 1 ? `${f(median(xs))} (${f(Math.min(...xs))}-${f(Math.max(...xs))})` : f(xs[0]));
  const lines = [
    '| voice | its prompt | first stream: first chunk s of total s (prompt cache) | later streams: first chunk s, median (min-max) | their total s | prompt cache | load average after |',
    '|---|---|--:|--:|--:|:-:|---|',
  ];
  for (const r of rows) {
    const caches = [...new Set(r.warm.map((w) => w.cache))].join(', ');
    lines.push(`| ${r.name} | ${r.prompt} | ${f(r.cold.first)} of ${f(r.cold.seconds)} (${r.cold.cache}) | ${spread(r.warm.map((w) => w.first))} | ${spread(r.warm.map((w) => w.seconds))} | ${caches} | ${r.load} |`);
  }
  return lines.join('\n');
}

module.exports = { benchVoices, voiceTable, CLIP, CUT_START_MS, CUT_STEP_MS };
