'use strict';
// Speech error paths: every bad input rejects with its code and a message naming
// the file, key or option; aborts and dispose; the process and the model stay usable.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { loadTTS } = require('..');
const { ensureTtsFixtures, TTS_FIXTURES_DIR } = require('../scripts/fixtures-tts');
const { fixturePath, expectReject, expectThrow } = require('./helpers');

const FIXTURE = path.join(TTS_FIXTURES_DIR, 'chatterbox');
const FAST = { temperature: 0, maxTokens: 8, seed: 0 };
const tmpDirs = [];
let shared;

function tmpDir() {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'mlx-node-tts-err-'));
  tmpDirs.push(d);
  return d;
}

// A folder with the fixture's files linked in, minus `omit`, plus `extra` files.
function variant({ omit = [], extra = {} } = {}) {
  const d = tmpDir();
  for (const f of fs.readdirSync(FIXTURE)) {
    if (f === 'ref' || omit.includes(f) || f in extra) continue;
    fs.symlinkSync(path.join(FIXTURE, f), path.join(d, f));
  }
  for (const [f, content] of Object.entries(extra)) fs.writeFileSync(path.join(d, f), content);
  return d;
}

// A safetensors file holding the given f32 tensors.
function safetensors(tensors) {
  const header = {};
  const parts = [];
  let offset = 0;
  for (const [name, { shape, data }] of Object.entries(tensors)) {
    const bytes = Buffer.from(Float32Array.from(data).buffer);
    header[name] = { dtype: 'F32', shape, data_offsets: [offset, offset + bytes.length] };
    parts.push(bytes);
    offset += bytes.length;
  }
  const json = Buffer.from(JSON.stringify(header));
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  return Buffer.concat([len, json, ...parts]);
}

test.before(() => {
  ensureTtsFixtures();
  shared = loadTTS(FIXTURE);
});
test.after(async () => {
  await (await shared).dispose();
  for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true });
});

test('loading: missing folder, text model, missing files, truncated weights, bad config', async () => {
  await expectReject(() => loadTTS('/nonexistent/chatterbox'), 'MODEL_NOT_FOUND', /\/nonexistent\/chatterbox/);
  await expectReject(() => loadTTS(fixturePath('qwen3-f32')), 'UNSUPPORTED_MODEL', /"qwen3".*supported: chatterbox/);
  await expectReject(() => loadTTS(variant({ omit: ['tokenizer.json'] })), 'MODEL_NOT_FOUND', /tokenizer\.json/);
  await expectReject(() => loadTTS(variant({ omit: ['model.safetensors'] })), 'MODEL_NOT_FOUND', /model\*?\.safetensors/);
  await expectReject(() => loadTTS(variant({ extra: { 'config.json': '{ not json' } })), 'INVALID_WEIGHTS', /config\.json/);
  const head = Buffer.alloc(1 << 20);
  const fd = fs.openSync(path.join(FIXTURE, 'model.safetensors'), 'r');
  fs.readSync(fd, head, 0, head.length, 0);
  fs.closeSync(fd);
  await expectReject(() => loadTTS(variant({ extra: { 'model.safetensors': head } })), 'INVALID_WEIGHTS', /model\.safetensors/);
  const noStart = JSON.parse(fs.readFileSync(path.join(FIXTURE, 'tokenizer.json'), 'utf8'));
  delete noStart.model.vocab['[START]'];
  noStart.added_tokens = noStart.added_tokens.filter((t) => t.content !== '[START]');
  await expectReject(() => loadTTS(variant({ extra: { 'tokenizer.json': JSON.stringify(noStart) } })), 'INVALID_WEIGHTS', /\[START\]/);
  await expectReject(() => loadTTS(''), 'INVALID_ARGUMENT');
  await expectReject(() => loadTTS(FIXTURE, { dtype: 'float16' }), 'INVALID_ARGUMENT', /unknown option "dtype"/);
  await expectReject(() => loadTTS(FIXTURE, { promptCache: 'yes' }), 'INVALID_ARGUMENT', /promptCache must be a boolean, got "yes"/);
});

test('text and options are checked before any work', async () => {
  const tts = await shared;
  await expectReject(() => tts.synthesize(''), 'INVALID_ARGUMENT', /empty/);
  await expectReject(() => tts.synthesize(' \n\t '), 'INVALID_ARGUMENT', /empty/);
  await expectReject(() => tts.synthesize(42), 'INVALID_ARGUMENT', /string/);
  const bad = [
    [{ temperature: -1 }, /temperature/],
    [{ temperature: NaN }, /temperature/],
    [{ cfgWeight: 'high' }, /cfgWeight/],
    [{ topP: 2 }, /topP/],
    [{ minP: -0.1 }, /minP/],
    [{ repetitionPenalty: 0 }, /repetitionPenalty/],
    [{ maxTokens: 0 }, /maxTokens/],
    [{ maxTokens: 1e6 }, /maxTokens/],
    [{ maxTokens: 2.5 }, /maxTokens/],
    [{ seed: -1 }, /seed/],
    [{ voice: 5 }, /voice/],
    [{ speed: 1.2 }, /unknown option "speed"/],
    [{ firstChunkTokens: 4 }, /firstChunkTokens must be .*5/],
    [{ firstChunkTokens: 7.5 }, /firstChunkTokens must be an integer/],
    [{ chunkTokens: 0 }, /chunkTokens/],
    [{ chunkTokens: 'many' }, /chunkTokens/],
    [{ signal: 'stop' }, /signal/],
  ];
  for (const [opts, re] of bad) await expectReject(() => tts.synthesize('Hi.', opts), 'INVALID_ARGUMENT', re, JSON.stringify(opts));
  await expectReject(() => tts.synthesize('Hi.', 'fast'), 'INVALID_ARGUMENT', /options/);
  expectThrow(() => tts.stream(42), 'INVALID_ARGUMENT', /string or an AsyncIterable/);
  const drain = async (opts) => {
    for await (const _ of tts.stream('Hi.', opts));
  };
  await expectReject(() => drain({ firstChunkTokens: 2 }), 'INVALID_ARGUMENT', /firstChunkTokens/);
  await expectReject(() => drain({ chunkTokens: -1 }), 'INVALID_ARGUMENT', /chunkTokens/);
  // Still fine afterwards.
  const a = await tts.synthesize('Hi.', FAST);
  assert.ok(a.audio.length > 0);
  expectThrow(() => a.toWav({ format: 'mp3' }), 'INVALID_ARGUMENT', /format/);
});

test('voice files: missing, not safetensors, missing key', async () => {
  const tts = await shared;
  await expectReject(() => tts.synthesize('Hi.', { ...FAST, voice: '/nonexistent/conds.safetensors' }), 'MODEL_NOT_FOUND', /conds\.safetensors/);
  const d = tmpDir();
  await expectReject(() => tts.synthesize('Hi.', { ...FAST, voice: d }), 'MODEL_NOT_FOUND', /is not a file/);
  const junk = path.join(d, 'junk.safetensors');
  fs.writeFileSync(junk, 'not a safetensors file');
  await expectReject(() => tts.synthesize('Hi.', { ...FAST, voice: junk }), 'INVALID_WEIGHTS', /junk\.safetensors/);
  const partial = path.join(d, 'partial.safetensors');
  fs.writeFileSync(partial, safetensors({ 't3.speaker_emb': { shape: [1, 256], data: new Array(256).fill(0.1) } }));
  await expectReject(() => tts.synthesize('Hi.', { ...FAST, voice: partial }), 'INVALID_WEIGHTS', /partial\.safetensors: "(gen|t3)\.[a-z_]+" is missing/);
  // A valid voice file (the built-in one, by path) gives the built-in voice's audio.
  const viaPath = await tts.synthesize('Hi.', { ...FAST, voice: path.join(FIXTURE, 'conds.safetensors') });
  const builtin = await tts.synthesize('Hi.', FAST);
  assert.deepEqual(Array.from(viaPath.audio), Array.from(builtin.audio));
  // The last voice file is kept while it is unchanged; a changed file is read again.
  const copy = path.join(d, 'voice.safetensors');
  fs.copyFileSync(path.join(FIXTURE, 'conds.safetensors'), copy);
  const viaCopy = await tts.synthesize('Hi.', { ...FAST, voice: copy });
  assert.deepEqual(Array.from(viaCopy.audio), Array.from(builtin.audio));
  fs.writeFileSync(copy, 'not a safetensors file');
  await expectReject(() => tts.synthesize('Hi.', { ...FAST, voice: copy }), 'INVALID_WEIGHTS', /voice\.safetensors/);
});

test('abort: a pre-aborted signal and one aborted mid-way reject with its reason', async () => {
  const tts = await shared;
  const pre = new AbortController();
  pre.abort(new Error('before'));
  await assert.rejects(tts.synthesize('Hi.', { ...FAST, signal: pre.signal }), /before/);
  const ac = new AbortController();
  const reason = new Error('stop talking');
  const p = tts.synthesize('Hello world, this is a much longer test of aborting.', { temperature: 0, maxTokens: 2000, signal: ac.signal });
  setTimeout(() => ac.abort(reason), 50);
  await assert.rejects(p, (e) => e === reason);
  // Breaking out of a stream stops the work; the model stays usable.
  for await (const c of tts.stream('Hello there. How are you today? Fine, thanks.', FAST)) {
    assert.ok(c.audio.length > 0);
    break;
  }
  const after = await tts.synthesize('Hi.', FAST);
  assert.ok(after.audio.length > 0);
});

test('prepare(): bad options, voice files, aborts; the model stays usable', async () => {
  const tts = await shared;
  await expectReject(() => tts.prepare('voice'), 'INVALID_ARGUMENT', /options must be an object/);
  await expectReject(() => tts.prepare({ temperature: 1 }), 'INVALID_ARGUMENT', /unknown option "temperature"/);
  await expectReject(() => tts.prepare({ voice: 5 }), 'INVALID_ARGUMENT', /option voice/);
  await expectReject(() => tts.prepare({ voice: '/nonexistent/conds.safetensors' }), 'MODEL_NOT_FOUND', /conds\.safetensors/);
  const junk = path.join(tmpDir(), 'junk.safetensors');
  fs.writeFileSync(junk, 'not a safetensors file');
  await expectReject(() => tts.prepare({ voice: junk }), 'INVALID_WEIGHTS', /junk\.safetensors/);
  const pre = new AbortController();
  pre.abort(new Error('before'));
  await assert.rejects(tts.prepare({ signal: pre.signal }), /before/);
  // Aborted while it waits behind a synthesis: it rejects with the reason and makes nothing.
  const busy = tts.synthesize('Hello there.', FAST);
  const ac = new AbortController();
  const reason = new Error('not now');
  const p = tts.prepare({ voice: path.join(FIXTURE, 'conds.safetensors'), signal: ac.signal });
  ac.abort(reason);
  await assert.rejects(p, (e) => e === reason);
  await busy;
  assert.equal(await tts.prepare({ voice: path.join(FIXTURE, 'conds.safetensors') }), 'made');
});

test('dispose: later calls reject with DISPOSED', async () => {
  const tts = await loadTTS(FIXTURE);
  const running = tts.synthesize('Hello there.', { temperature: 0, maxTokens: 2000 }).then(
    (audio) => ({ audio }),
    (error) => ({ error })
  );
  await tts.dispose();
  assert.equal(tts.disposed, true);
  // It finished before the abort landed, or it rejects: never a cut-short Audio.
  const { audio, error } = await running;
  if (error) assert.equal(error.code, 'ABORTED', `running call after dispose: ${error.code} ${error.message}`);
  else assert.ok(audio.audio.length > 0 && audio.generationTokens > 0);
  await expectReject(() => tts.synthesize('Hi.'), 'DISPOSED');
  await expectReject(() => tts.prepare(), 'DISPOSED');
  await tts.dispose();
});
