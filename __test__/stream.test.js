'use strict';
// stream(): chunks against generate() and MLX-LM's own stream segments, stop strings,
// leaving a for-await early, and AbortSignal (reject with signal.reason, or
// stopOnAbortSignal: resolve with finishReason 'abort' and the partial text).
const test = require('node:test');
const assert = require('node:assert/strict');
const { runReference } = require('./ref/ref');
const { fixtures, model, disposeModels, assertSameGeneration, hasReplacementChar, EOS_IDS, NO_EOS, unrefDelay } = require('./helpers');

const M = 'qwen3-f32';
const STR = 'Hello, my name is';
const CHAT = [{ role: 'user', content: '写一首关于大海的诗 🌊' }];

const unhandled = [];
process.on('unhandledRejection', (reason) => unhandled.push(reason));

// Reference cases (one MLX-LM run for the file).
const REF = {
  greedy: { model: M, input: STR, options: { maxTokens: 48 } },
  greedy16: { model: M, input: STR, options: { maxTokens: 16 } },
  sampled: { model: M, input: CHAT, options: { maxTokens: 48, temperature: 1, topK: 50, seed: 1 } },
  // Seed 2 samples byte-level tokens that do not form valid UTF-8: MLX-LM's text has U+FFFD.
  brokenBytes: { model: M, input: STR, options: { maxTokens: 48, temperature: 1, topK: 50, seed: 2 } },
  // 龘 is two tokens [82912, 246]: the bias and a presence penalty over the last token
  // make greedy decoding alternate them, so every other step ends inside a character.
  split2: { model: M, input: 'Hello', options: { maxTokens: 12, logitBias: { 82912: 100, 246: 80 }, presencePenalty: 50, presenceContextSize: 1 } },
  // 🫠 is three tokens [9284, 104, 254]: the same trick over the last two tokens.
  split3: { model: M, input: 'Hello', options: { maxTokens: 12, logitBias: { 9284: 100, 104: 80, 254: 60 }, presencePenalty: 50, presenceContextSize: 2 } },
};
const NAMES = Object.keys(REF);
let ref;

test.before(async () => {
  fixtures();
  const results = await runReference(NAMES.map((k) => REF[k]));
  ref = Object.fromEntries(NAMES.map((k, i) => [k, results[i]]));
  for (const k of NAMES) assert.ok(!ref[k].error, `reference ${k}: ${ref[k].error}`);
  // The cases are what their comments say.
  assert.equal(ref.split2.text, '龘'.repeat(6));
  assert.equal(ref.split3.text, '🫠'.repeat(4));
  assert.ok(hasReplacementChar(ref.brokenBytes.text));
  assert.ok(!hasReplacementChar(ref.greedy.text) && !hasReplacementChar(ref.sampled.text));
});
test.after(disposeModels);

async function collect(s) {
  const chunks = [];
  for await (const c of s) chunks.push(c);
  return chunks;
}

function nonEmpty(texts) {
  return texts.filter((t) => t !== '');
}

for (const name of NAMES) {
  test(`stream chunks (${name}) equal generate(), .result and MLX-LM's stream segments`, async () => {
    const m = await model(M);
    const { input, options } = REF[name];
    const pieces = [];
    const s = m.stream(input, { ...options, onTextChunk: (t) => pieces.push(t) });
    assert.ok(s.result instanceof Promise, 'stream().result is a Promise');
    const chunks = await collect(s);
    const result = await s.result;
    const full = await m.generate(input, options);
    const joined = chunks.map((c) => c.text).join('');

    assertSameGeneration(result, ref[name], `stream ${name} .result`);
    assertSameGeneration(full, ref[name], `generate ${name}`);
    assert.equal(joined, full.text, 'concatenated chunks equal generate().text');
    assert.equal(joined, result.text, 'concatenated chunks equal (await stream.result).text');

    for (const c of chunks) {
      assert.equal(typeof c.text, 'string');
      assert.ok(Number.isInteger(c.token) && c.token >= 0, `chunk.token ${c.token}`);
      if (!hasReplacementChar(full.text)) {
        assert.ok(!hasReplacementChar(c.text), `chunk ${JSON.stringify(c.text)} has U+FFFD but the full text has none`);
      }
      // No lone surrogate halves (a character cut in two).
      assert.ok(!/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(c.text), `chunk ${JSON.stringify(c.text)} splits a surrogate pair`);
    }
    // Chunk tokens are the generated tokens in order (a final EOS chunk may follow).
    const chunkTokens = chunks.map((c) => c.token).filter((t, i) => !(i === chunks.length - 1 && EOS_IDS.includes(t)));
    assert.deepEqual(chunkTokens, result.tokens, 'chunk tokens equal result.tokens');
    // onTextChunk receives the same (non-empty) pieces as the iterator.
    assert.deepEqual(nonEmpty(pieces), nonEmpty(chunks.map((c) => c.text)), 'onTextChunk pieces equal the streamed texts');
    // Same segmentation as MLX-LM's streaming detokenizer.
    assert.deepEqual(nonEmpty(chunks.map((c) => c.text)), nonEmpty(ref[name].chunks), "non-empty chunks equal MLX-LM's response segments");
  });
}

test('a character split over tokens is held back until complete (no U+FFFD in any chunk)', async () => {
  const m = await model(M);
  for (const [name, ch, parts] of [['split2', '龘', 2], ['split3', '🫠', 3]]) {
    const chunks = await collect(m.stream(REF[name].input, REF[name].options));
    assert.deepEqual(chunks.map((c) => c.token), ref[name].tokens, `${name} tokens`);
    assert.deepEqual(nonEmpty(chunks.map((c) => c.text)), Array(12 / parts).fill(ch), `${name}: each non-empty chunk is one whole ${ch}`);
  }
});

// A stop string made of the last two characters of one MLX-LM segment and the first
// character of the next (so it spans tokens), whose first occurrence is there.
function pickStop(r) {
  let pos = 0;
  const mid = Math.floor(r.chunks.length / 2);
  for (let k = 0; k < r.chunks.length - 1; k++) {
    const a = Array.from(r.chunks[k]);
    const b = Array.from(r.chunks[k + 1]);
    const boundary = pos + r.chunks[k].length;
    pos = boundary;
    if (k < mid - 6 || a.length < 2 || b.length < 1) continue;
    const stop = a.slice(-2).join('') + b[0];
    if (hasReplacementChar(stop)) continue;
    const at = r.text.indexOf(stop);
    if (at === boundary - a.slice(-2).join('').length) return { stop, at, token: k + 1 };
  }
  throw new Error('no usable stop string in the reference text');
}

test('stop strings: generation stops, the stop string and anything after it are never emitted', async () => {
  const m = await model(M);
  for (const name of ['greedy', 'sampled']) {
    const r = ref[name];
    const { stop, at, token } = pickStop(r);
    const expected = r.text.slice(0, at);
    const label = `${name}, stop ${JSON.stringify(stop)}`;
    const opts = { ...REF[name].options, stop: ['never-there-zz', stop] };

    const pieces = [];
    const s = m.stream(REF[name].input, { ...opts, onTextChunk: (t) => pieces.push(t) });
    const chunks = await collect(s);
    const streamed = chunks.map((c) => c.text).join('');
    const result = await s.result;
    assert.equal(streamed, expected, `${label}: streamed text`);
    assert.equal(pieces.join(''), expected, `${label}: onTextChunk text`);
    assert.equal(result.text, expected, `${label}: result.text`);
    assert.equal(result.finishReason, 'stop', `${label}: finishReason`);
    assert.ok(!streamed.includes(stop));
    for (const c of chunks) {
      assert.ok(!c.text.includes(stop), `${label}: chunk ${JSON.stringify(c.text)} contains the stop string`);
    }
    // The tokens are MLX-LM's, up to (at most) the one that completed the stop string.
    assert.deepEqual(result.tokens, r.tokens.slice(0, result.tokens.length), `${label}: tokens are a prefix of MLX-LM's`);
    assert.ok(result.tokens.length >= token && result.tokens.length <= token + 1, `${label}: ${result.tokens.length} tokens, the stop string ends in token ${token}`);

    const g = await m.generate(REF[name].input, opts);
    assert.equal(g.text, expected, `${label}: generate().text`);
    assert.equal(g.finishReason, 'stop');
    assert.deepEqual(g.tokens, result.tokens);
  }
});

test('stop strings: the earliest match wins; one that never occurs changes nothing', async () => {
  const m = await model(M);
  const r = ref.greedy;
  const chars = Array.from(r.text);
  // Two substrings of the text, the later one listed first.
  const early = chars.slice(5, 8).join('');
  const late = chars.slice(chars.length - 6, chars.length - 3).join('');
  const at = Math.min(r.text.indexOf(early), r.text.indexOf(late));
  const g = await m.generate(STR, { maxTokens: 48, stop: [late, early] });
  assert.equal(g.text, r.text.slice(0, at));
  assert.equal(g.finishReason, 'stop');
  const none = await m.generate(STR, { maxTokens: 48, stop: ['\u0000never\u0000'] });
  assertSameGeneration(none, r, 'unmatched stop string');
});

test('breaking out of for-await stops native work; the model is free at once and still right', async () => {
  const m = await model(M);
  // Time per token, to know how long the abandoned generation would still take.
  const t0 = performance.now();
  const probe = await m.generate(STR, { maxTokens: 64, logitBias: NO_EOS });
  const perToken = (performance.now() - t0) / 64;
  assert.equal(probe.tokens.length, 64);

  const LONG = 3000;
  const s = m.stream(STR, { maxTokens: LONG, logitBias: NO_EOS });
  let n = 0;
  for await (const c of s) {
    assert.equal(typeof c.text, 'string');
    if (++n === 3) break;
  }
  const t1 = performance.now();
  const after = await m.generate(STR, { maxTokens: 16 });
  const elapsed = performance.now() - t1;
  assertSameGeneration(after, ref.greedy16, 'generate after break');
  const remaining = (LONG - 3) * perToken;
  assert.ok(elapsed < remaining / 4, `the next generate took ${elapsed.toFixed(0)} ms; the abandoned stream had ~${remaining.toFixed(0)} ms of work left`);
  // The abandoned stream's result settles, having stopped early.
  const settled = await Promise.race([
    s.result.then((r) => ({ r }), (e) => ({ e })),
    unrefDelay(5000),
  ]);
  assert.ok(settled, 'stream.result never settled after break');
  if (settled.r) {
    assert.ok(settled.r.tokens.length < 100, `the abandoned stream ran on for ${settled.r.tokens.length} tokens`);
    assert.equal(settled.r.finishReason, 'abort');
  }
});

test('abort mid-generation rejects with signal.reason (AbortController in onTextChunk)', async () => {
  const m = await model(M);
  const ac = new AbortController();
  const reason = new Error('enough');
  let n = 0;
  const p = m.generate(STR, {
    maxTokens: 2000,
    logitBias: NO_EOS,
    signal: ac.signal,
    onTextChunk: () => {
      if (++n === 3) ac.abort(reason);
    },
  });
  await assert.rejects(p, (e) => {
    assert.equal(e, reason, 'rejects with signal.reason itself');
    return true;
  });
  assert.ok(n >= 3 && n < 100, `${n} chunks before the abort took effect`);
  // The model is usable afterwards.
  const again = await m.generate(STR, { maxTokens: 8 });
  assert.deepEqual(again.tokens, ref.greedy.tokens.slice(0, 8));
});

test('AbortSignal.timeout rejects with its TimeoutError', async () => {
  const m = await model(M);
  const t0 = performance.now();
  await assert.rejects(m.generate(STR, { maxTokens: 3000, logitBias: NO_EOS, signal: AbortSignal.timeout(300) }), (e) => {
    assert.equal(e.name, 'TimeoutError', `got ${e && e.name}: ${e && e.message}`);
    return true;
  });
  const elapsed = performance.now() - t0;
  assert.ok(elapsed < 5000, `took ${elapsed.toFixed(0)} ms to react to a 300 ms timeout`);
});

test('stopOnAbortSignal: resolves with finishReason abort and a prefix of the full text', async () => {
  const m = await model(M);
  const ac = new AbortController();
  let n = 0;
  const r = await m.generate(STR, {
    maxTokens: 48,
    signal: ac.signal,
    stopOnAbortSignal: true,
    onTextChunk: () => {
      if (++n === 3) ac.abort();
    },
  });
  assert.equal(r.finishReason, 'abort');
  assert.ok(r.tokens.length >= 3 && r.tokens.length < 48, `${r.tokens.length} tokens`);
  assert.deepEqual(r.tokens, ref.greedy.tokens.slice(0, r.tokens.length), 'tokens are a prefix of the full generation');
  assert.ok(ref.greedy.text.startsWith(r.text), `partial text ${JSON.stringify(r.text)} is a prefix of the full text`);
  assert.ok(r.text.length > 0);

  // The same through stream(): iteration ends normally.
  const ac2 = new AbortController();
  const s = m.stream(STR, { maxTokens: 48, signal: ac2.signal, stopOnAbortSignal: true });
  const texts = [];
  for await (const c of s) {
    texts.push(c.text);
    if (texts.length === 4) ac2.abort();
  }
  const sr = await s.result;
  assert.equal(sr.finishReason, 'abort');
  assert.ok(sr.tokens.length < 48);
  assert.ok(ref.greedy.text.startsWith(sr.text));
  assert.equal(texts.join(''), sr.text);
});

test('abort during stream(): the loop throws signal.reason and .result rejects with it', async () => {
  const m = await model(M);
  const ac = new AbortController();
  const reason = new Error('stop streaming');
  const s = m.stream(STR, { maxTokens: 2000, logitBias: NO_EOS, signal: ac.signal });
  let n = 0;
  await assert.rejects(
    (async () => {
      for await (const _ of s) { // eslint-disable-line no-unused-vars
        if (++n === 3) ac.abort(reason);
      }
    })(),
    (e) => e === reason
  );
  await assert.rejects(s.result, (e) => e === reason);
  assert.ok(n < 100, `${n} chunks`);
});

test('an already-aborted signal rejects before any work', async () => {
  const m = await model(M);
  const reason = new Error('aborted up front');
  let chunks = 0;
  const t0 = performance.now();
  await assert.rejects(
    m.generate(STR, { maxTokens: 3000, logitBias: NO_EOS, signal: AbortSignal.abort(reason), onTextChunk: () => chunks++ }),
    (e) => e === reason
  );
  assert.equal(chunks, 0);
  assert.ok(performance.now() - t0 < 1000);
  const s = m.stream(STR, { maxTokens: 3000, logitBias: NO_EOS, signal: AbortSignal.abort(reason) });
  let got = 0;
  await assert.rejects(
    (async () => {
      for await (const _ of s) got++; // eslint-disable-line no-unused-vars
    })(),
    (e) => e === reason
  );
  assert.equal(got, 0);
  await assert.rejects(s.result, (e) => e === reason);
  // Nothing was left running.
  const after = await m.generate(STR, { maxTokens: 8 });
  assert.deepEqual(after.tokens, ref.greedy.tokens.slice(0, 8));
});

test('no unhandled promise rejections (an unawaited stream.result after break or abort included)', async () => {
  const m = await model(M);
  // Break without ever touching .result.
  for await (const _ of m.stream(STR, { maxTokens: 500, logitBias: NO_EOS })) break; // eslint-disable-line no-unused-vars
  // Abort without touching .result.
  const ac = new AbortController();
  try {
    let n = 0;
    for await (const _ of m.stream(STR, { maxTokens: 500, logitBias: NO_EOS, signal: ac.signal })) { // eslint-disable-line no-unused-vars
      if (++n === 2) ac.abort();
    }
  } catch {}
  await m.generate(STR, { maxTokens: 4 });
  await new Promise((r) => setTimeout(r, 50));
  assert.deepEqual(unhandled.map(String), []);
});
