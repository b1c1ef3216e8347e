'use strict';
// `npm run bench:tts -- --only voices`: time to the first chunk of tts.stream() with the
// built-in voice and with cloned voices, on two models:
// - the tests' Chatterbox fixture (whose seeded S3 tokenizer, from .cache/fixtures-voice,
//   clones). About half of all clips leave a prompt mel one frame longer than two per prompt
//   token (mlx-audio's embed_ref); such a voice once got no S3Gen prompt cache, so every chunk
//   ran the flow over the whole prompt. The two cloned voices are cuts of one recording 20 ms
//   apart, one of each kind, so that they differ in nothing else (the same 200-token prompt).
// - the full-size random-weight Chatterbox Turbo (its test fixture stops after about 9 speech
//   tokens, too few for a first chunk to mean anything), with voices cloned from a 16 s clip
//   (T3's whole 375-token prompt, as long as the built-in voice's) and an 11.2 s one (a
//   shorter T3 prompt), through the same seeded S3 tokenizer.
// Both go through one path (timeVoices): per voice, its first stream (which makes the
// voice's prompt cache), then `rounds` rounds over the voices, each stream from its cache.
const path = require('node:path');
const { median, loadavg } = require('./machine');

const CUT_START_MS = 8000;
const CUT_STEP_MS = 20;
const CLIP = 'float32_44k_mono';
// The Turbo clips: the Turbo test fixture's 16 s recording and the voice fixtures' 11.2 s
// one, both float32 at 44.1 kHz (Turbo clones from more than 5 s and reads up to 15 s).
const TURBO_CLIPS = [
  { name: 'cloned, 16 s clip', where: 'fixtures-tts-turbo', file: `clip_${CLIP}` },
  { name: 'cloned, 11.2 s clip', where: 'fixtures-voice', file: CLIP },
];

const WARM_UP_TOKENS = 5;

const { readSafetensors } = require('../__test__/safetensors');

// A voice's prompt lengths, from its conds.safetensors: "T3 375, S3Gen 250 tokens / 500 frames".
function promptOf(file) {
  const c = readSafetensors(file);
  const t3 = c['t3.cond_prompt_speech_tokens']?.shape[1] ?? 0;
  return { t3, tokens: c['gen.prompt_token'].shape[1], frames: c['gen.prompt_feat'].shape[1] };
}
const promptText = (p) => `T3 ${p.t3}, S3Gen ${p.tokens} tokens / ${p.frames} frames`;

// A cloned voice with its prompt lengths (saved to `tmp` to read them).
async function clone(tts, samples, sampleRate, tmp, label) {
  const fs = require('node:fs');
  const t0 = performance.now();
  const voice = await tts.createVoice({ samples, sampleRate });
  const seconds = (performance.now() - t0) / 1000;
  const file = path.join(tmp, `${label}.safetensors`);
  await voice.save(file);
  const prompt = promptOf(file);
  fs.rmSync(file);
  return { voice, prompt, seconds };
}

// Cuts of the fixture recording from CUT_START_MS on until there is one of each kind:
// { even, odd }, each { voice, prompt, ms }.
async function cutVoices(tts, samples, rate, tmp) {
  const found = {};
  for (let ms = CUT_START_MS; !(found.even && found.odd); ms += CUT_STEP_MS) {
    if (ms > CUT_START_MS + 50 * CUT_STEP_MS) throw new Error('no cut of the clip gave both an even and an odd prompt mel');
    const c = await clone(tts, samples.subarray(0, Math.round((rate * ms) / 1000)), rate, tmp, `cut-${ms}`);
    const kind = c.prompt.frames % 2 === 1 ? 'odd' : 'even';
    if (found[kind]) c.voice.dispose();
    else found[kind] = { ...c, ms };
  }
  return found;
}

// Seconds to the first chunk and to the end, the chunks, the prompt cache the stream used,
// and T3's prompt seconds (its prompt positions and first speech token: SpeechResult's
// promptTokens / promptTps), which the first chunk waits for whatever the voice.
async function firstChunk(tts, text, options) {
  const t0 = performance.now();
  let first = null;
  let chunks = 0;
  const s = tts.stream(text, options);
  for await (const c of s) {
    void c;
    chunks += 1;
    if (first === null) first = (performance.now() - t0) / 1000;
  }
  const seconds = (performance.now() - t0) / 1000;
  const r = await s.result;
  return { first, seconds, chunks, cache: r.promptCache, t3Prompt: r.promptTokens / r.promptTps, promptTokens: r.promptTokens, speechTokens: r.speechTokens.length };
}

// Per voice ({ name, voice, prompt }): its first stream, which makes its prompt cache; then
// `rounds` rounds of one stream per voice, each after `prepare()` of that voice (untimed),
// so that the stream starts from the voice's cache as a later stream of it does. The rounds
// interleave the voices (each round starting one voice further on), so that the load of
// other work on the machine, which moves T3's prompt pass by more than a second on the
// full-size Turbo, falls on every voice alike.
// First a short synthesize() with the built-in voice, which reads every weight (T3, flow,
// vocoder) once without making a prompt cache, so that the first voice's first stream
// does not also pay for the model's first run.
async function timeVoices(tts, voices, { model, text, options, rounds, log }) {
  const f = (x) => x.toFixed(2);
  const t0 = performance.now();
  await tts.synthesize(text, { ...options, maxTokens: WARM_UP_TOKENS });
  log(`voices | ${model} | warm-up (synthesize, maxTokens ${WARM_UP_TOKENS}): ${f((performance.now() - t0) / 1000)} s`);
  const t3 = (w) => `T3 prompt ${f(w.t3Prompt)} s`;
  const rows = voices.map((v) => ({ model, name: v.name, prompt: v.prompt, cloneSeconds: v.cloneSeconds, cold: null, warm: [], load: null }));
  for (const [i, v] of voices.entries()) {
    const cold = await firstChunk(tts, text, { ...options, voice: v.voice });
    rows[i].cold = cold;
    log(`voices | ${model} | ${v.name}: first stream ${f(cold.first)} of ${f(cold.seconds)} s (${cold.cache}, ${cold.chunks} chunks, ${t3(cold)}) (load ${loadavg()})`);
  }
  for (let r = 0; r < rounds; r++) {
    for (let k = 0; k < voices.length; k++) {
      const i = (r + k) % voices.length;
      const o = { ...options, voice: voices[i].voice };
      await tts.prepare({ voice: voices[i].voice });
      const w = await firstChunk(tts, text, o);
      rows[i].warm.push(w);
      rows[i].load = loadavg();
      log(`voices | ${model} | round ${r + 1}/${rounds} | ${voices[i].name}: ${f(w.first)} of ${f(w.seconds)} s (${w.cache}, ${t3(w)}) (load ${rows[i].load})`);
    }
  }
  return rows;
}

// The Chatterbox case: the tests' fixture, its own voice and two cuts of one recording.
async function chatterboxVoices({ text, options, rounds, log }, tmp) {
  const { loadTTS } = require('..');
  const { ensureVoiceFixtures, voiceTokenizerDir } = require('../scripts/fixtures-voice');
  const { TTS_FIXTURES_DIR } = require('../scripts/fixtures-tts');
  const dir = path.join(TTS_FIXTURES_DIR, 'chatterbox');
  const voiceDir = ensureVoiceFixtures();
  const tts = await loadTTS(dir, { s3Tokenizer: voiceTokenizerDir() });
  try {
    const rate = 44100;
    const samples = readSafetensors(path.join(voiceDir, `${CLIP}.safetensors`)).mono.data;
    const cuts = await cutVoices(tts, samples, rate, tmp);
    const voices = [
      { name: 'built-in (conds.safetensors)', voice: undefined, prompt: promptText(promptOf(path.join(dir, 'conds.safetensors'))) },
      ...['even', 'odd'].map((k) => ({ name: `cloned, ${k} prompt mel`, voice: cuts[k].voice, prompt: `${cuts[k].ms} ms cut: ${promptText(cuts[k].prompt)}`, cloneSeconds: cuts[k].seconds })),
    ];
    return await timeVoices(tts, voices, { model: 'chatterbox (fixture)', text, options, rounds, log });
  } finally {
    await tts.dispose();
  }
}

// The Turbo case: the full-size folder `dir`, its own voice and the TURBO_CLIPS cloned.
async function turboVoices({ dir, text, options, rounds, log }, tmp) {
  const { loadTTS } = require('..');
  const { ensureVoiceFixtures, voiceTokenizerDir } = require('../scripts/fixtures-voice');
  const { ensureTurboFixture } = require('../scripts/fixtures-tts');
  const folders = { 'fixtures-voice': ensureVoiceFixtures(), 'fixtures-tts-turbo': path.join(ensureTurboFixture(), 'ref') };
  log(`voices | loading ${path.basename(dir)}`);
  const tts = await loadTTS(dir, { s3Tokenizer: voiceTokenizerDir() });
  try {
    const voices = [{ name: 'built-in (conds.safetensors)', voice: undefined, prompt: promptText(promptOf(path.join(dir, 'conds.safetensors'))) }];
    for (const c of TURBO_CLIPS) {
      const samples = readSafetensors(path.join(folders[c.where], `${c.file}.safetensors`)).mono.data;
      const made = await clone(tts, samples, 44100, tmp, c.file);
      log(`voices | ${c.name}: cloned in ${made.seconds.toFixed(2)} s (${promptText(made.prompt)})`);
      voices.push({ name: c.name, voice: made.voice, prompt: `${c.where}/${c.file}: ${promptText(made.prompt)}`, cloneSeconds: made.seconds });
    }
    return await timeVoices(tts, voices, { model: 'chatterbox-turbo-full', text, options, rounds, log });
  } finally {
    await tts.dispose();
  }
}

// The rows of voiceTable() for `chatterbox` and, when given, `turbo` (each { text, options,
// rounds }; turbo also { dir }).
async function benchVoices({ chatterbox, turbo, log }) {
  const fs = require('node:fs');
  const os = require('node:os');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'mlx-node-bench-voices-'));
  try {
    const rows = await chatterboxVoices({ ...chatterbox, log }, tmp);
    if (turbo) rows.push(...(await turboVoices({ ...turbo, log }, tmp)));
    return rows;
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

function voiceTable(rows) {
  const f = (x) => x.toFixed(2);
  const spread = (xs) => (xs.length > 1 ? `${f(median(xs))} (${f(Math.min(...xs))}-${f(Math.max(...xs))})` : f(xs[0]));
  const lines = [
    '| model | voice | its prompt | cloned in s | first stream: first chunk s of total s (prompt cache) | later streams: first chunk s, median (min-max) | their T3 prompt s | their total s | chunks, speech tokens | prompt cache | load average after |',
    '|---|---|---|--:|--:|--:|--:|--:|--:|:-:|---|',
  ];
  for (const r of rows) {
    const caches = [...new Set(r.warm.map((w) => w.cache))].join(', ');
    const sizes = [...new Set([r.cold, ...r.warm].map((w) => `${w.chunks}, ${w.speechTokens}`))].join('; ');
    lines.push(
      `| ${r.model} | ${r.name} | ${r.prompt} | ${r.cloneSeconds === undefined ? '-' : f(r.cloneSeconds)} | ${f(r.cold.first)} of ${f(r.cold.seconds)} (${r.cold.cache}) | ` +
        `${spread(r.warm.map((w) => w.first))} | ${spread(r.warm.map((w) => w.t3Prompt))} | ${spread(r.warm.map((w) => w.seconds))} | ${sizes} | ${caches} | ${r.load} |`,
    );
  }
  return lines.join('\n');
}

module.exports = { benchVoices, voiceTable, CLIP, CUT_START_MS, CUT_STEP_MS, TURBO_CLIPS };
