'use strict';
// Chatterbox Multilingual against mlx-audio 0.6.2 run live by the test setup
// (__test__/ref/chatterbox_mtl_ref.py): text tokens identical for every (text,
// language) pair of the v2 and v3 fixtures, one greedy French synthesis (speech
// tokens identical, audio within 1e-3, streamed tokens the same), and the
// `language` errors of both the multilingual and the English checkpoint.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { loadTTS } = require('..');
const { loadNative } = require('../lib/native-loader');
const { callNative } = require('../lib/errors');
const { ensureTtsFixtures, TTS_FIXTURES_DIR } = require('../scripts/fixtures-tts');
const { synthesizeOptions } = require('./tts-options');
const { readSafetensors, maxAbsDiff } = require('./safetensors');
const { expectReject, expectThrow, expectStreamError } = require('./helpers');

const AUDIO_TOLERANCE = 1e-3;
const MTL = path.join(TTS_FIXTURES_DIR, 'chatterbox-mtl');
const ENGLISH = path.join(TTS_FIXTURES_DIR, 'chatterbox');
const native = loadNative();
// The text token ids the model folder's config and tokenizer give (no start/stop), as mlx-audio's _tokenize_text.
const ttsTextIds = (dir, text, language) => callNative(() => native.ttsTextIds(dir, text, language));
const tmpDirs = [];

test.before(() => ensureTtsFixtures());
test.after(() => {
  for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true });
});

function readJson(file) {
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

for (const fixture of ['chatterbox-mtl', 'chatterbox-mtl-v3']) {
  test(`${fixture}: text tokens identical to mlx-audio's for every (text, language) pair`, () => {
    const dir = path.join(TTS_FIXTURES_DIR, fixture);
    const pairs = readJson(path.join(dir, 'ref', 'text_tokens.json'));
    assert.ok(pairs.length >= 6, `${pairs.length} pairs`);
    for (const { text, language, tokens } of pairs) {
      assert.deepEqual(ttsTextIds(dir, text, language), tokens, `${language}: ${JSON.stringify(text)}`);
    }
  });
}

test('chatterbox-mtl greedy French: speech tokens identical to mlx-audio, audio within 1e-3; stream() speaks the same tokens', async () => {
  const ref = path.join(MTL, 'ref');
  const meta = readJson(path.join(ref, 'greedy_fr.json'));
  const wav = readSafetensors(path.join(ref, 'greedy_fr.safetensors')).wav.data;
  const opts = synthesizeOptions(meta.options, meta.seed);
  const model = await loadTTS(MTL);
  try {
    const audio = await model.synthesize(meta.text, opts);
    assert.deepEqual(audio.speechTokens, meta.speech_tokens_clean, 'speech tokens');
    assert.equal(audio.promptTokens, meta.shapes.prefill_embeds[1], 'promptTokens');
    assert.equal(audio.audio.length, wav.length, 'sample count');
    const diff = maxAbsDiff(audio.audio, wav);
    assert.ok(diff < AUDIO_TOLERANCE, `max abs audio difference ${diff}`);

    const s = model.stream(meta.text, opts);
    let samples = 0;
    for await (const c of s) samples += c.audio.length;
    const r = await s.result;
    assert.deepEqual(r.speechTokens, meta.speech_tokens_clean, 'streamed speech tokens');
    assert.equal(samples, wav.length, 'streamed sample count');

    // Unknown and malformed codes are refused before any work, naming the supported ones.
    await expectReject(() => model.synthesize('Salut.', { language: 'xx' }), 'INVALID_ARGUMENT', /"xx".*supported: ar, da, de, .*, zh\)/);
    await expectReject(() => model.synthesize('Salut.', { language: 5 }), 'INVALID_ARGUMENT', /option language must be/);
    await expectStreamError(() => model.stream('Salut.', { language: 'klingon' }), 'INVALID_ARGUMENT', /"klingon"/);
  } finally {
    await model.dispose();
  }
});

test('the English checkpoint speaks English only: another language is INVALID_ARGUMENT', async () => {
  const model = await loadTTS(ENGLISH);
  try {
    await expectReject(() => model.synthesize('Bonjour.', { language: 'fr' }), 'INVALID_ARGUMENT', /"fr".*English only/);
    await expectStreamError(() => model.stream('Bonjour.', { language: 'de' }), 'INVALID_ARGUMENT', /"de".*English only/);
  } finally {
    await model.dispose();
  }
  expectThrow(() => ttsTextIds(ENGLISH, 'Hola.', 'es'), 'INVALID_ARGUMENT', /English only/);
});

test('a malformed Cangjie5_TC.json is INVALID_WEIGHTS naming the file', () => {
  for (const [content, re] of [
    ['{"not": "a list"}', /Cangjie5_TC\.json: expected a JSON list of strings/],
    ['["\u4f60\\tonf", "\u597d"]', /Cangjie5_TC\.json: entry .* is not "glyph<TAB>code"/],
  ]) {
    const d = fs.mkdtempSync(path.join(os.tmpdir(), 'mlx-node-mtl-'));
    tmpDirs.push(d);
    for (const f of ['config.json', 'tokenizer.json']) fs.symlinkSync(path.join(MTL, f), path.join(d, f));
    fs.writeFileSync(path.join(d, 'Cangjie5_TC.json'), content);
    expectThrow(() => ttsTextIds(d, '\u4f60\u597d', 'zh'), 'INVALID_WEIGHTS', re);
  }
});
