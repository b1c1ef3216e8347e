'use strict';
// Voice cloning (createVoice, Voice, `voice: 'clip.wav'`) against mlx-audio 0.6.2's
// prepare_conditionals and generate(ref_audio=...), dumped at setup by scripts/fixtures_voice.py
// (scripts/voice_clone_ref.py) on the Chatterbox fixture, the fixture clips and a seeded S3
// tokenizer saved as the Hugging Face cache holds mlx-community/S3TokenizerV2; one French synthesis
// with a cloned voice on the Multilingual fixture.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { loadTTS, Voice } = require('..');
const { ensureVoiceFixtures, voiceTokenizerDir: tokenizerDir } = require('../scripts/fixtures-voice');
const { TTS_FIXTURES_DIR } = require('../scripts/fixtures-tts');
const { readSafetensors, maxAbsDiff } = require('./safetensors');
const { expectReject } = require('./helpers');
const { synthesizeOptions } = require('./tts-options');

const TOLERANCE = 1e-3;
const AUDIO_TOLERANCE = 1e-3;
const CHATTERBOX = path.join(TTS_FIXTURES_DIR, 'chatterbox');
const INT_KEYS = ['t3.cond_prompt_speech_tokens', 'gen.prompt_token', 'gen.prompt_token_len', 'gen.prompt_feat_len'];

let VOICE;
let models = [];
let tmp;

test.before(() => {
  VOICE = ensureVoiceFixtures();
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'mlx-node-voice-'));
});
test.after(async () => {
  for (const m of models) await m.dispose();
  fs.rmSync(tmp, { recursive: true, force: true });
});

let shared;
async function model() {
  shared ??= loadTTS(CHATTERBOX, { s3Tokenizer: tokenizerDir() }).then((m) => (models.push(m), m));
  return shared;
}

function clips() {
  return Object.entries(JSON.parse(fs.readFileSync(path.join(VOICE, 'meta.json'), 'utf8')));
}

function samplesOf(name) {
  return readSafetensors(path.join(VOICE, `${name}.safetensors`)).mono.data;
}

// Every tensor of a saved voice against mlx-audio's: ids and lengths equal, floats within TOLERANCE.
function assertSameConds(file, refFile, label) {
  const ours = readSafetensors(file);
  const ref = readSafetensors(refFile);
  assert.deepEqual(Object.keys(ours).sort(), Object.keys(ref).sort(), `${label}: tensor names`);
  for (const [key, r] of Object.entries(ref)) {
    const o = ours[key];
    assert.deepEqual(o.shape, r.shape, `${label}: ${key} shape`);
    if (INT_KEYS.includes(key)) assert.deepEqual(Array.from(o.data), Array.from(r.data), `${label}: ${key}`);
    else {
      const d = maxAbsDiff(o.data, r.data);
      assert.ok(d <= TOLERANCE, `${label}: ${key} differs by ${d}`);
    }
  }
}

test('createVoice from samples: every conditioning tensor as mlx-audio prepare_conditionals gives it, at 16, 24, 44.1 and 48 kHz', async () => {
  const tts = await model();
  for (const [name, meta] of clips()) {
    const samples = samplesOf(name);
    const voice = await tts.createVoice({ samples, sampleRate: meta.rate });
    assert.ok(voice instanceof Voice);
    assert.equal(voice.duration, samples.length / meta.rate);
    assert.equal(voice.truncated, false);
    const file = path.join(tmp, `${name}.conds.safetensors`);
    await voice.save(file);
    assertSameConds(file, path.join(VOICE, `clone_${name}.safetensors`), name);
    voice.dispose();
  }
});

test('createVoice from a WAV path takes mlx-audio\'s file route (read at 24 kHz first)', async () => {
  const tts = await model();
  const voice = await tts.createVoice(path.join(VOICE, 'pcm16_16k_mono.wav'));
  const file = path.join(tmp, 'file-route.safetensors');
  await voice.save(file);
  assertSameConds(file, path.join(VOICE, 'clone_pcm16_16k_mono_file.safetensors'), 'file route');
  voice.dispose();
});

test('a cloned voice speaks as mlx-audio\'s generate(ref_audio=...): a Voice, a WAV path, its saved file, and streamed', async () => {
  const tts = await model();
  const { speech } = JSON.parse(fs.readFileSync(path.join(VOICE, 'clone.json'), 'utf8'));
  const ref = readSafetensors(path.join(VOICE, 'clone_speech.safetensors'));
  const wav = path.join(VOICE, speech.ref_audio);
  const opts = synthesizeOptions(speech, speech.seed);
  const check = (audio, label) => {
    assert.deepEqual(audio.speechTokens, Array.from(ref.speech_tokens.data), `${label}: speech tokens`);
    assert.equal(audio.audio.length, ref.wav.data.length, `${label}: sample count`);
    const d = maxAbsDiff(audio.audio, ref.wav.data);
    assert.ok(d <= AUDIO_TOLERANCE, `${label}: audio differs by ${d}`);
  };
  const byPath = await tts.synthesize(speech.text, { ...opts, voice: wav });
  check(byPath, 'voice: clip.wav');

  const voice = await tts.createVoice(wav);
  check(await tts.synthesize(speech.text, { ...opts, voice }), 'createVoice');
  const saved = path.join(tmp, 'saved.safetensors');
  await voice.save(saved);
  check(await tts.synthesize(speech.text, { ...opts, voice: saved }), 'voice: saved file');

  // Streamed with the cloned voice: the same tokens, the first chunk before the end.
  const chunks = [];
  const s = tts.stream(speech.text, { ...opts, voice });
  for await (const c of s) chunks.push(c.audio);
  const r = await s.result;
  assert.deepEqual(r.speechTokens, byPath.speechTokens);
  assert.ok(chunks.length >= 2, `expected audio in several chunks, got ${chunks.length}`);
  assert.equal(chunks.reduce((n, c) => n + c.length, 0), byPath.audio.length, 'streamed sample count');
  // This clip's prompt mel has one frame more than two per prompt token (225 for 112, as
  // mlx-audio's embed_ref leaves it); its prompt cache holds the tokens' 224 frames, and the
  // stream from it hands out the frames a whole render does (the count above).
  assert.equal(r.promptCache, 'made');
  assert.equal(await tts.prepare({ voice }), 'kept');
  const again = [];
  const s2 = tts.stream(speech.text, { ...opts, voice });
  for await (const c of s2) again.push(...c.audio);
  assert.equal((await s2.result).promptCache, 'kept');
  assert.deepEqual(again, chunks.flatMap((c) => Array.from(c)), 'the stream from the kept cache');
  voice.dispose();
});

// Chatterbox Multilingual clones with its own encoders (the same front end): a WAV path and a
// Voice speak French as mlx-audio's generate(ref_audio=..., lang_code="fr"), streamed too.
test('a cloned voice speaks French on Chatterbox Multilingual as mlx-audio\'s generate(ref_audio=..., lang_code="fr"), synthesized and streamed', async () => {
  const { speech_mtl: speech } = JSON.parse(fs.readFileSync(path.join(VOICE, 'clone.json'), 'utf8'));
  const ref = readSafetensors(path.join(VOICE, 'clone_speech_mtl.safetensors'));
  const tts = await loadTTS(path.join(TTS_FIXTURES_DIR, speech.fixture), { s3Tokenizer: tokenizerDir() });
  models.push(tts);
  const opts = synthesizeOptions(speech, speech.seed);
  assert.equal(opts.language, 'fr');
  const wav = path.join(VOICE, speech.ref_audio);
  const byPath = await tts.synthesize(speech.text, { ...opts, voice: wav });
  assert.deepEqual(byPath.speechTokens, Array.from(ref.speech_tokens.data), 'speech tokens');
  assert.equal(byPath.audio.length, ref.wav.data.length, 'sample count');
  const d = maxAbsDiff(byPath.audio, ref.wav.data);
  assert.ok(d <= AUDIO_TOLERANCE, `audio differs by ${d}`);

  const voice = await tts.createVoice(wav);
  const s = tts.stream(speech.text, { ...opts, voice });
  const chunks = [];
  for await (const c of s) chunks.push(c.audio);
  const r = await s.result;
  assert.deepEqual(r.speechTokens, byPath.speechTokens, 'streamed speech tokens');
  assert.ok(chunks.length >= 2, `expected audio in several chunks, got ${chunks.length}`);
  assert.equal(chunks.reduce((n, c) => n + c.length, 0), byPath.audio.length, 'streamed sample count');
  voice.dispose();
});

test('the S3 tokenizer is found in the Hugging Face cache as mlx-audio finds it (at load); a missing one names the file', async () => {
  const before = { HF_HUB_CACHE: process.env.HF_HUB_CACHE, HF_HUB_OFFLINE: process.env.HF_HUB_OFFLINE };
  const samples = samplesOf('pcm16_16k_mono');
  let tts;
  try {
    process.env.HF_HUB_CACHE = path.join(VOICE, 'hub');
    process.env.HF_HUB_OFFLINE = '1';
    tts = await loadTTS(CHATTERBOX);
    models.push(tts);
  } finally {
    for (const [k, v] of Object.entries(before)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
  const voice = await tts.createVoice({ samples, sampleRate: 16000 });
  const file = path.join(tmp, 'hub.safetensors');
  await voice.save(file);
  assertSameConds(file, path.join(VOICE, 'clone_pcm16_16k_mono.safetensors'), 'from the hub cache');
  voice.dispose();

  const missing = await loadTTS(CHATTERBOX, { s3Tokenizer: path.join(tmp, 'no-such-folder') });
  models.push(missing);
  await expectReject(() => missing.createVoice({ samples, sampleRate: 16000 }), 'MODEL_NOT_FOUND', /s3Tokenizer.*model\.safetensors/, 'missing tokenizer');
  // The model still speaks with its own voice.
  const a = await missing.synthesize('Still here.', { maxTokens: 8, seed: 1 });
  assert.ok(a.audio.length > 0);
});

test('createVoice: bad audio and options are clear errors; nothing is written to disk', async () => {
  const tts = await model();
  const before = fs.readdirSync(VOICE).sort();
  const text = path.join(tmp, 'not-audio.wav');
  fs.writeFileSync(text, 'this is not a WAV file, whatever its name says');
  const mp3 = path.join(tmp, 'voice.mp3');
  fs.writeFileSync(mp3, Buffer.alloc(64));
  await expectReject(() => tts.createVoice(text), 'INVALID_AUDIO', /WAV/, 'text named .wav');
  await expectReject(() => tts.createVoice(mp3), 'INVALID_AUDIO', /WAV/, '.mp3');
  await expectReject(() => tts.createVoice(path.join(tmp, 'missing.wav')), 'INVALID_ARGUMENT', /no such file/, 'missing file');
  await expectReject(() => tts.createVoice({ samples: new Float32Array(8000), sampleRate: 16000 }), 'INVALID_AUDIO', /1 s|silent/, 'short');
  const nan = new Float32Array(32000).fill(0.1);
  nan[5] = NaN;
  await expectReject(() => tts.createVoice({ samples: nan, sampleRate: 16000 }), 'INVALID_AUDIO', /finite/, 'NaN');
  await expectReject(() => tts.createVoice({ samples: new Float32Array(32000), sampleRate: 16000 }), 'INVALID_AUDIO', /silent/, 'silence');
  await expectReject(() => tts.createVoice({ samples: [0.1, 0.2], sampleRate: 16000 }), 'INVALID_ARGUMENT', /Float32Array/, 'plain array');
  await expectReject(() => tts.createVoice({ samples: nan, sampleRate: 0 }), 'INVALID_ARGUMENT', /sampleRate/, 'rate 0');
  await expectReject(() => tts.createVoice(42), 'INVALID_ARGUMENT', /WAV file path/, 'number');
  const samples = samplesOf('pcm16_16k_mono');
  await expectReject(() => tts.createVoice({ samples, sampleRate: 16000 }, { exaggeration: -1 }), 'INVALID_ARGUMENT', /exaggeration/, 'exaggeration');
  await expectReject(() => tts.createVoice({ samples, sampleRate: 16000 }, { speed: 2 }), 'INVALID_ARGUMENT', /unknown option "speed"/, 'unknown option');
  await assert.rejects(tts.createVoice({ samples, sampleRate: 16000 }, { signal: AbortSignal.abort(new Error('no thanks')) }), /no thanks/);
  const stop = new AbortController();
  const aborted = tts.createVoice({ samples, sampleRate: 16000 }, { signal: stop.signal });
  stop.abort(new Error('stopped mid-way'));
  await assert.rejects(aborted, /stopped mid-way/);
  await expectReject(() => tts.synthesize('Hi.', { voice: 7 }), 'INVALID_ARGUMENT', /option voice must be a Voice/, 'voice: number');
  assert.deepEqual(fs.readdirSync(VOICE).sort(), before, 'the fixture folder changed');
});

// Work queued behind a synthesis and stopped before it begins ends without a voice or a file:
// createVoice() rejects with the signal's reason, save() with ABORTED when the model is disposed.
test('createVoice and save stopped while queued: the reason or ABORTED, no voice, no file', async () => {
  const tts = await loadTTS(CHATTERBOX, { s3Tokenizer: tokenizerDir() });
  const samples = samplesOf('pcm16_16k_mono');
  const voice = await tts.createVoice({ samples, sampleRate: 16000 });
  const busy = tts.synthesize('Busy for a while.', { maxTokens: 16, seed: 1 });
  const stop = new AbortController();
  const queued = tts.createVoice({ samples, sampleRate: 16000 }, { signal: stop.signal });
  stop.abort(new Error('stopped while queued'));
  await assert.rejects(queued, /stopped while queued/);
  await busy;
  const file = path.join(tmp, 'queued.safetensors');
  const busyAgain = tts.synthesize('Busy again.', { maxTokens: 16, seed: 1 }).catch((e) => e);
  const saved = voice.save(file).then(() => 'resolved', (e) => e);
  await tts.dispose();
  const e = await saved;
  assert.equal(e?.code, 'ABORTED', `save queued at dispose: ${e}`);
  assert.match(e.message, /stopped before the voice was written/);
  assert.equal(fs.existsSync(file), false, 'a save stopped before it began wrote a file');
  await busyAgain;
});

test('a disposed Voice, a Voice of another model, and a disposed model: DISPOSED or INVALID_ARGUMENT', async () => {
  const tts = await model();
  const samples = samplesOf('pcm16_16k_mono');
  const voice = await tts.createVoice({ samples, sampleRate: 16000 });
  const other = await loadTTS(CHATTERBOX, { s3Tokenizer: tokenizerDir() });
  await expectReject(() => other.synthesize('Hi.', { voice, maxTokens: 4 }), 'INVALID_ARGUMENT', /another speech model/, 'other model');
  await other.dispose();
  voice.dispose();
  assert.equal(voice.disposed, true);
  await expectReject(() => tts.synthesize('Hi.', { voice, maxTokens: 4 }), 'DISPOSED', /voice has been disposed/, 'disposed voice');
  await expectReject(() => voice.save(path.join(tmp, 'y.safetensors')), 'DISPOSED', /voice has been disposed/, 'save after dispose');
  assert.equal(fs.existsSync(path.join(tmp, 'y.safetensors')), false);
  await expectReject(() => other.createVoice({ samples, sampleRate: 16000 }), 'DISPOSED', /disposed/, 'disposed model');
});
