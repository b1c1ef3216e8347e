'use strict';
// Prompt caches (PromptCache: prefill, reuse by common prefix, trim, save/load, the
// rotating and quantized kinds), logprobs and Chat, token for token against MLX-LM
// 0.32.2 run live (__test__/ref/mlx_lm_ref.py, modes "cached", "cache_file" and
// "generate" with logprobs).
//
// Semantics these tests pin down (docs/prompt-caches.md):
//   A1 promptTokens of a cached generation counts the WHOLE input (OpenAI / mlx_lm.server
//      usage: prompt_tokens includes cached_tokens), i.e. MLX-LM's stream_generate
//      prompt size + cachedTokens.
//   A2 cache.tokens lists what the cache holds: the input and every generated token,
//      a final EOS included (MLX-LM feeds the EOS into the cache before stopping).
//   A3 for a file without "tokens" metadata (an unknown prefix) cachedTokens counts
//      only input tokens found in the cache (0 on the first generation), and
//      cache.length counts the unknown positions too.
//   A4 with a cached prefix, MLX-LM's logits processors (penalties) see only the
//      uncached part of the input plus the generated tokens as their history; ours see
//      the whole input (a deliberate difference, tested below).
//   A5 trim() on a RotatingKVCache that has wrapped (MLX-LM: not trimmable) returns 0
//      and changes nothing; a generation whose input would need such a trim starts
//      a fresh cache (cachedTokens 0), as the reference does.
//   A6 chat.reset() with no argument goes back to the messages the chat was created
//      with (the system message); a stream() aborted through its signal rejects and
//      leaves chat.messages unchanged.
//   A7 createPromptCache validates its options synchronously (INVALID_ARGUMENT):
//      kvBits outside what mx.quantize takes (1-6, 8), a kvGroupSize MLX cannot quantize with
//      (not 32/64/128, or not dividing head_dim: qwen3-f32's heads are 16 wide, so
//      any kvBits there), maxKvSize < 1, maxKvSize together with kvBits (MLX-LM has
//      no quantized RotatingKVCache), trim(-1).
//   A8 save() writes the metadata MLX-LM's load_prompt_cache reads, with "tokens" a
//      JSON list of the held ids (so MLX-LM reuses it by prefix) plus the caller's
//      keys; the cache layout (class names, per-layer states and scalars) is
//      save_prompt_cache's.
//   A9 prefill(messages) applies the chat template with the generation prompt, as
//      generate() does; an empty cache has nbytes 0; dispose() twice is fine; trim() on
//      a disposed cache throws DISPOSED synchronously; loadChat() of a chat saved with
//      another model's shapes rejects with CACHE_MISMATCH; the assistant message a
//      turn adds has content === result.text.
// Quantized KV caches run on the "demo" fixture with kvGroupSize 32: mx.quantize needs a
// group of 32/64/128 that divides head_dim, and the small fixtures' heads are 16 wide.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { runReference } = require('./ref/ref');
const {
  fixtures,
  fixturePath,
  model,
  disposeModels,
  expectReject,
  expectThrow,
  firstDiff,
  NO_EOS,
  IM_END,
  EOS_IDS,
} = require('./helpers');

const M = 'qwen3-f32';
const BF16 = 'qwen3-bf16';
const DEMO = 'demo';
const OTHER = 'llama-f32'; // same shapes as qwen3-f32 (2 layers, 2 KV heads of 16), another model
const STR = 'Hello, my name is';
// <|im_start|>user\n ... <|im_end|>\n<|im_start|>assistant\n
const P = [151644, 872, 198, 9707, 11, 847, 829, 374, 1207, 17847, 13, 151645, 198, 151644, 77091, 198];
const S = [785, 3974, 13876, 38835, 34208];
const NEW = [13, 1096, 374, 264, 1273];
const MORE = [11, 323, 1221];
// Longer than the rotating caches' maxKvSize (64).
const LONG = Array.from({ length: 80 }, (_, i) => 1000 + 7 * i);
const CHAT = [{ role: 'user', content: 'What is the capital of France?' }];
const SYSTEM = 'You are a terse assistant.';

const G = { maxTokens: 16 };
const T = { maxTokens: 16, temperature: 0.9, topK: 50, seed: 5 };
// Stops on EOS after 28 tokens in MLX-LM (parity.test.js's "EOS reachable").
const E = { temperature: 0.8, logitBias: { [IM_END]: 16 }, seed: 17, maxTokens: 48 };
const Q8 = { kvBits: 8, kvGroupSize: 32, quantizedKvStart: 0 };
// P + S is 21 tokens: the switch to a quantized cache happens in the middle of the reply.
const Q4 = { kvBits: 4, kvGroupSize: 32, quantizedKvStart: 30 };
const ROT = { maxKvSize: 64 };
// A +10 bias on the first 8 greedy tokens of STR makes the penalties matter (parity.test.js).
const G8 = () => fixtures().fixtures[M].greedy.prompt.tokens.slice(0, 8);

// A1.
const PROMPT_TOKENS_INCLUDE_CACHED = true;
const TOL_F32 = 1e-4;
const TOL_BF16 = 1e-2;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'mlx-node-prompt-cache-'));
const file = (name) => path.join(tmp, name);

// All MLX-LM cases of the file, run once in test.before (one Python process).
const cached = (m, cache, turns, extra = {}) => ({ mode: 'cached', model: m, cache, turns, ...extra });
const turn = (input, options) => ({ input, options });
const extend = (ids, options) => ({ extend: ids, options });
const plain = (m, input, options) => ({ mode: 'generate', model: m, input, options });
const REF = {
  // Prefill P, then P + S.
  prefillGreedy: cached(M, {}, [turn([...P, ...S], G)], { prefill: P }),
  prefillSeeded: cached(M, {}, [turn([...P, ...S], T)], { prefill: P }),
  plainGreedy: plain(M, [...P, ...S], G),
  plainSeeded: plain(M, [...P, ...S], T),
  // The same input as the prefill: one token is run again (cachedTokens = length - 1).
  prefillSame: cached(M, {}, [turn(CHAT, G)], { prefill: CHAT }),
  plainChat: plain(M, CHAT, G),
  // A conversation: each turn = what the cache holds (input + reply) + new tokens.
  convGreedy: cached(M, {}, [turn(P, G), extend(S, G), extend(NEW, G)]),
  convMixed: cached(M, {}, [turn(P, T), extend(S, { ...T, seed: 6 }), extend(NEW, { ...G, repetitionPenalty: 1.3 })]),
  // Trim back to P + S (turn 2 reuses exactly that), and the uncached answer.
  trimmed: cached(M, {}, [turn([...P, ...S], G), turn([...P, ...S, ...NEW], G)]),
  plainTrimmed: plain(M, [...P, ...S, ...NEW], G),
  // Stops on EOS: the cache holds the EOS too.
  eos: cached(M, {}, [turn(CHAT, { ...E, logprobs: true })]),
  // Penalties see only the uncached part (A4): a 2-token suffix.
  penaltyCached: cached(M, {}, [turn(STR, { ...G, logitBias: null }), extend([11, 847], { maxTokens: 24, repetitionPenalty: 1.5, repetitionContextSize: 20 })]),
  // Saved by MLX-LM with "tokens" metadata, then continued from the file.
  refSave: cached(M, {}, [turn(P, G)], { save: file('ref-saved.safetensors') }),
  refSaveFile: { mode: 'cache_file', file: file('ref-saved.safetensors') },
  refLoadExtend: cached(M, { file: file('ref-saved.safetensors') }, [extend(NEW, G)]),
  refLoadDiverge: cached(M, { file: file('ref-saved.safetensors') }, [turn([...P.slice(0, 3), ...NEW], G)]),
  // Saved without "tokens" (as mlx_lm.cache_prompt writes it): a prefix of unknown tokens.
  refUnknown: cached(M, {}, [], { prefill: [...P, ...S], save: file('ref-unknown.safetensors'), saveMetadata: { model: 'x', tokenizer_config: '{}' } }),
  refUnknownLoad: cached(M, { file: file('ref-unknown.safetensors') }, [turn(NEW, G), extend(MORE, G)]),
  plainUnknown: plain(M, [...P, ...S, ...NEW], G),
  // RotatingKVCache (maxKvSize 64): a prompt that fits, then a trim; a prompt longer than
  // 64, a continuation of the wrapped cache, and an input that needs a fresh cache.
  rotShort: cached(M, ROT, [turn(P, G), turn([...P, ...MORE], G)]),
  rotLong: cached(M, ROT, [turn(LONG, G), extend(MORE, G), turn(P, G)]),
  rotSaved: cached(M, ROT, [turn(LONG, G)], { save: file('ref-rot.safetensors') }),
  rotSavedLoad: cached(M, { file: file('ref-rot.safetensors') }, [extend(MORE, G)]),
  // QuantizedKVCache on the demo model (head_dim 32).
  q8: cached(DEMO, Q8, [turn([...P, ...S], G), extend(NEW, G)], { prefill: P }),
  q4: cached(DEMO, Q4, [turn([...P, ...S], G), turn([...P, ...NEW], G)]),
  demoPlain: plain(DEMO, [...P, ...S], G),
  // Logprobs.
  lpGreedy: plain(M, [...P, ...S], { ...G, logprobs: true, topLogprobs: 5 }),
  lpSeeded: plain(M, [...P, ...S], { ...T, logprobs: true }),
  lpTopP: plain(M, STR, { maxTokens: 16, temperature: 1, topP: 0.9, seed: 9, logprobs: true, topLogprobs: 20 }),
  lpPenalty: null, // filled in test.before (needs the fixture index)
  lpPenaltyControl: null,
  lpBf16: plain(BF16, [...P, ...S], { ...G, logprobs: true, topLogprobs: 5 }),
  lpBf16Seeded: plain(BF16, STR, { ...T, logprobs: true, topLogprobs: 3 }),
  lpCached: cached(M, {}, [turn([...P, ...S], { ...G, logprobs: true, topLogprobs: 3 })], { prefill: P }),
};
const NAMES = Object.keys(REF);
let ref;

test.before(async () => {
  fixtures();
  const bias = Object.fromEntries(G8().map((t) => [t, 10]));
  REF.lpPenalty = plain(M, STR, { maxTokens: 24, repetitionPenalty: 1.5, logitBias: bias, logprobs: true, topLogprobs: 4 });
  REF.lpPenaltyControl = plain(M, STR, { maxTokens: 24, logitBias: bias, logprobs: true, topLogprobs: 4 });
  REF.penaltyCached.turns[0].options.logitBias = bias;
  REF.penaltyCached.turns[1].options.logitBias = bias;
  const results = await runReference(NAMES.map((k) => REF[k]));
  ref = Object.fromEntries(NAMES.map((k, i) => [k, results[i]]));
});
test.after(async () => {
  await disposeModels();
  fs.rmSync(tmp, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------------
// Helpers

// A cached generation (ours) against one turn of the reference's "cached" mode.
function assertSameTurn(got, r, label, { input } = {}) {
  assert.ok(r && !r.error, `${label}: the reference failed: ${r && r.error}`);
  assert.deepEqual(got.tokens, r.tokens, `${label}: tokens differ (first difference at ${firstDiff(got.tokens, r.tokens)})`);
  assert.equal(got.text, r.text, `${label}: text`);
  assert.equal(got.finishReason, r.finishReason, `${label}: finishReason`);
  assert.equal(got.cachedTokens, r.cachedTokens, `${label}: cachedTokens`);
  const expectedPrompt = PROMPT_TOKENS_INCLUDE_CACHED ? r.promptTokens + r.cachedTokens : r.promptTokens;
  assert.equal(got.promptTokens, expectedPrompt, `${label}: promptTokens`);
  if (input) assert.deepEqual(input, r.input, `${label}: we built another input than the reference`);
}

// Tokens/text/finishReason only (an uncached result against a cached one, or ours).
function assertSameTokens(got, want, label) {
  assert.deepEqual(got.tokens, want.tokens, `${label}: tokens differ (first difference at ${firstDiff(got.tokens, want.tokens)})`);
  assert.equal(got.text, want.text, `${label}: text`);
  assert.equal(got.finishReason, want.finishReason, `${label}: finishReason`);
}

// Our result.logprobs (one per result.tokens) against the reference's (one per response,
// a final EOS included): tokens exact, values within tol, top lists equal up to ties.
function assertSameLogprobs(got, r, tol, label, { top } = {}) {
  assert.ok(Array.isArray(got.logprobs), `${label}: result.logprobs missing`);
  const want = r.logprobs.slice(0, r.tokens.length);
  assert.equal(got.logprobs.length, got.tokens.length, `${label}: one logprobs entry per token`);
  assert.equal(got.logprobs.length, want.length, `${label}: logprobs length`);
  for (let i = 0; i < want.length; i++) {
    const g = got.logprobs[i];
    const w = want[i];
    const at = `${label}: logprobs[${i}]`;
    assert.equal(g.token, w.token, `${at}.token`);
    assert.equal(g.token, got.tokens[i], `${at}.token is result.tokens[${i}]`);
    assert.ok(Math.abs(g.logprob - w.logprob) <= tol, `${at}.logprob ${g.logprob} vs MLX-LM ${w.logprob}`);
    assert.ok(g.logprob <= 0, `${at}.logprob ${g.logprob} > 0`);
    assert.ok(Array.isArray(g.top), `${at}.top missing`);
    if (top !== undefined) assert.equal(g.top.length, top, `${at}.top length`);
    assert.equal(g.top.length, w.top.length, `${at}.top length`);
    for (let j = 0; j < w.top.length; j++) {
      const gj = g.top[j];
      const wj = w.top[j];
      assert.ok(Math.abs(gj.logprob - wj.logprob) <= tol, `${at}.top[${j}] ${gj.logprob} vs MLX-LM ${wj.logprob}`);
      if (gj.token !== wj.token) {
        // Only a near-tie may swap places (or cross the k-th boundary).
        const k = w.top.findIndex((x) => x.token === gj.token);
        const near = k >= 0 ? Math.abs(w.top[k].logprob - gj.logprob) <= tol : Math.abs(w.top[w.top.length - 1].logprob - gj.logprob) <= tol;
        assert.ok(near, `${at}.top[${j}]: token ${gj.token} where MLX-LM has ${wj.token}, not a tie`);
      }
    }
    // Our own order: by value descending, ties by lower token id.
    for (let j = 1; j < g.top.length; j++) {
      const a = g.top[j - 1];
      const b = g.top[j];
      assert.ok(a.logprob > b.logprob || (a.logprob === b.logprob && a.token < b.token), `${at}.top not sorted at ${j}`);
    }
  }
}

function chatPrompt(m, messages, templateOptions = {}) {
  return m.applyChatTemplate(messages, { ...templateOptions, addGenerationPrompt: true });
}

// One chat turn against the conversation it answered. The turn's input (the first
// promptTokens ids its cache holds afterwards) equals the uncached generation of that input.
// Where the rendered text starts with `heldText`, what the held ids stood for (the previous
// turn's rendered input, then its result.text, the EOS's text where one ended it), or with
// the held ids' own text,
// those ids start the input, all served from the cache, and the rest of the text follows
// encoded; otherwise the input is the plain encoding of the text, as generate(messages) runs
// it. Returns how the held ids were kept ('held', 'own' or false) and what the ids held after
// the turn stand for.
async function assertChatTurn(m, chat, r, held, heldText, options, label, templateOptions = {}) {
  const text = chatPrompt(m, chat.messages.slice(0, -1), templateOptions);
  const now = chat.promptCache.tokens;
  const input = now.slice(0, r.promptTokens);
  assert.equal(input.length, r.promptTokens, `${label}: the cache holds the turn's input`);
  assertSameTokens(r, await m.generate(input, options), `${label}: against the uncached run of its input`);
  const enc = (t) => m.encode(t, { addSpecialTokens: false });
  let how = false;
  let prefix = '';
  if (held.length > 0 && heldText !== null && text.startsWith(heldText)) {
    how = 'held';
    prefix = heldText;
  } else if (held.length > 0 && text.startsWith(m.decode(held))) {
    how = 'own';
    prefix = m.decode(held);
  }
  if (how) {
    assert.deepEqual(input.slice(0, held.length), held, `${label}: the held ids start the input`);
    assert.deepEqual(input.slice(held.length), enc(text.slice(prefix.length)), `${label}: then the rest, encoded`);
    assert.equal(r.cachedTokens, held.length, `${label}: every held id served from the cache`);
  } else {
    assert.deepEqual(input, enc(text), `${label}: the plain encoding`);
    assert.equal(m.decode(input), text, `${label}: the input is the rendered conversation`);
  }
  const reply = now.slice(r.promptTokens);
  let shown = null;
  if (r.finishReason === 'length') {
    assert.deepEqual(reply, r.tokens, `${label}: the cache holds the reply's ids`);
    shown = r.text;
  } else if (r.finishReason === 'stop' && reply.length === r.tokens.length + 1 && EOS_IDS.includes(reply.at(-1))) {
    assert.deepEqual(reply.slice(0, -1), r.tokens, `${label}: the cache holds the reply's ids and the EOS`);
    shown = r.text + m.decode(reply.slice(-1));
  }
  return { how, heldText: shown === null ? null : text + shown };
}

async function collect(s) {
  const chunks = [];
  for await (const c of s) chunks.push(c);
  return chunks;
}

// ---------------------------------------------------------------------------------
// The reference

test('the reference run is itself meaningful', () => {
  for (const k of NAMES) assert.ok(!ref[k].error, `reference ${k}: ${ref[k].error}`);
  // A cache changes nothing in MLX-LM either (greedy and seeded).
  assert.deepEqual(ref.prefillGreedy.turns[0].tokens, ref.plainGreedy.tokens);
  assert.deepEqual(ref.prefillSeeded.turns[0].tokens, ref.plainSeeded.tokens);
  assert.equal(ref.prefillGreedy.turns[0].cachedTokens, P.length);
  assert.deepEqual(ref.prefillSame.turns[0].tokens, ref.plainChat.tokens);
  assert.deepEqual(ref.trimmed.turns[1].tokens, ref.plainTrimmed.tokens);
  assert.equal(ref.trimmed.turns[1].cachedTokens, P.length + S.length);
  assert.deepEqual(ref.refUnknownLoad.turns[0].tokens, ref.plainUnknown.tokens);
  assert.equal(ref.refUnknownLoad.unknownPrefix, P.length + S.length);
  assert.deepEqual(ref.q8.classes, Array(4).fill('QuantizedKVCache'));
  assert.deepEqual(ref.rotLong.classes, ['RotatingKVCache', 'RotatingKVCache']);
  // Cached turns 2+ reuse something; the wrapped rotating cache needed a fresh one on turn 3.
  for (const k of ['convGreedy', 'convMixed']) ref[k].turns.slice(1).forEach((t, i) => assert.ok(t.cachedTokens > 0, `${k} turn ${i + 2}`));
  assert.equal(ref.rotLong.turns[1].cachedTokens, LONG.length + G.maxTokens);
  assert.equal(ref.rotLong.turns[2].fresh, true);
  // The EOS case stops on EOS; its logprobs list has the EOS as one more entry.
  assert.equal(ref.eos.turns[0].finishReason, 'stop');
  assert.equal(ref.eos.turns[0].logprobs.length, ref.eos.turns[0].tokens.length + 1);
  assert.ok(EOS_IDS.includes(ref.eos.cacheTokens[ref.eos.cacheTokens.length - 1]), 'the cache holds the EOS');
  // The penalty matters in the logprobs case.
  assert.notDeepEqual(ref.lpPenalty.tokens, ref.lpPenaltyControl.tokens);
});

// ---------------------------------------------------------------------------------
// PromptCache: prefill, reuse, tokens, trim

test('createPromptCache: an empty cache', async () => {
  const m = await model(M);
  const c = m.createPromptCache();
  assert.deepEqual(c.tokens, []);
  assert.equal(c.length, 0);
  assert.equal(c.nbytes, 0);
  c.dispose();
});

for (const [name, refName, plainName, options] of [
  ['greedy', 'prefillGreedy', 'plainGreedy', G],
  ['seeded', 'prefillSeeded', 'plainSeeded', T],
]) {
  test(`prefill(P) then generate(P + S) equals MLX-LM's cached run and the uncached run (${name})`, async () => {
    const m = await model(M);
    const c = m.createPromptCache();
    await c.prefill(P);
    assert.deepEqual(c.tokens, P, 'tokens after prefill');
    assert.equal(c.length, P.length);
    assert.ok(c.nbytes > 0);
    const got = await m.generate([...P, ...S], { ...options, promptCache: c });
    assertSameTurn(got, ref[refName].turns[0], `cached ${name}`);
    assert.equal(got.cachedTokens, P.length);
    assertSameTokens(got, await m.generate([...P, ...S], options), `cached vs uncached ${name}`);
    assertSameTokens(got, ref[plainName], `cached vs MLX-LM uncached ${name}`);
    // A2: the cache holds the input and the reply.
    assert.deepEqual(c.tokens, ref[refName].cacheTokens, 'tokens after the generation');
    assert.equal(c.length, ref[refName].cacheOffset);
    c.dispose();
  });
}

test('prefill() with a string and with messages holds what generate() would run', async () => {
  const m = await model(M);
  const c = m.createPromptCache();
  await c.prefill(STR);
  assert.deepEqual(c.tokens, m.encode(STR));
  c.dispose();
  const d = m.createPromptCache();
  await d.prefill(CHAT);
  assert.deepEqual(d.tokens, m.encode(chatPrompt(m, CHAT), { addSpecialTokens: false }));
  // The same input again: everything but its last token is reused.
  const got = await m.generate(CHAT, { ...G, promptCache: d });
  assertSameTurn(got, ref.prefillSame.turns[0], 'prefill(CHAT) then generate(CHAT)');
  assert.equal(got.cachedTokens, d.tokens.length - G.maxTokens - 1);
  assertSameTokens(got, ref.plainChat, 'against uncached MLX-LM');
  d.dispose();
});

test('prefill() with an aborted signal rejects; the cache is still usable', async () => {
  const m = await model(M);
  const c = m.createPromptCache();
  const ac = new AbortController();
  const reason = new Error('no prefill');
  ac.abort(reason);
  await assert.rejects(c.prefill(P, { signal: ac.signal }), (e) => e === reason || e.code === 'ABORTED');
  const got = await m.generate([...P, ...S], { ...G, promptCache: c });
  assertSameTokens(got, ref.plainGreedy, 'after an aborted prefill');
  c.dispose();
});

for (const name of ['convGreedy', 'convMixed']) {
  test(`a three-turn conversation on one cache equals MLX-LM's cached run turn by turn (${name})`, async () => {
    const m = await model(M);
    const c = m.createPromptCache();
    const r = ref[name];
    const adds = [null, S, NEW];
    let input = P;
    let prev = null;
    for (let i = 0; i < r.turns.length; i++) {
      if (i > 0) {
        // No EOS, so previous input + reply is what the cache holds (the reference's "extend").
        assert.equal(prev.finishReason, 'length');
        input = [...input, ...prev.tokens, ...adds[i]];
      }
      prev = await m.generate(input, { ...REF[name].turns[i].options, promptCache: c });
      assertSameTurn(prev, r.turns[i], `${name} turn ${i + 1}`, { input });
      if (i > 0) assert.ok(prev.cachedTokens > 0, `turn ${i + 1}: cachedTokens ${prev.cachedTokens}`);
      assert.deepEqual(c.tokens, [...input, ...prev.tokens], `turn ${i + 1}: cache.tokens`);
      assert.equal(c.length, r.turns[i].cacheOffset, `turn ${i + 1}: cache.length`);
    }
    assert.deepEqual(c.tokens, r.cacheTokens);
    c.dispose();
  });
}

test('tokens, length and trim(n): trim then generate equals the uncached run', async () => {
  const m = await model(M);
  const c = m.createPromptCache();
  const first = await m.generate([...P, ...S], { ...G, promptCache: c });
  assertSameTurn(first, ref.trimmed.turns[0], 'turn 1');
  assert.equal(c.length, P.length + S.length + G.maxTokens);
  assert.deepEqual(c.tokens, [...P, ...S, ...first.tokens]);
  assert.equal(c.trim(G.maxTokens), G.maxTokens, 'trim returns how many were dropped');
  assert.equal(c.length, P.length + S.length);
  assert.deepEqual(c.tokens, [...P, ...S]);
  const before = c.nbytes;
  const got = await m.generate([...P, ...S, ...NEW], { ...G, promptCache: c });
  assertSameTurn(got, ref.trimmed.turns[1], 'after trim');
  assert.equal(got.cachedTokens, P.length + S.length);
  assertSameTokens(got, ref.plainTrimmed, 'after trim, against uncached MLX-LM');
  assertSameTokens(got, await m.generate([...P, ...S, ...NEW], G), 'after trim, against uncached');
  assert.ok(c.nbytes >= before);
  // Trimming more than it holds empties it.
  const n = c.length;
  assert.equal(c.trim(n + 100), n);
  assert.equal(c.length, 0);
  assert.deepEqual(c.tokens, []);
  assert.equal(c.trim(5), 0);
  assert.equal(c.trim(0), 0);
  // And an emptied cache works like a new one.
  assertSameTokens(await m.generate([...P, ...S], { ...G, promptCache: c }), ref.plainGreedy, 'emptied cache');
  c.dispose();
});

test('a generation that stops on EOS: the cache holds the EOS; the next input reuses the prefix', async () => {
  const m = await model(M);
  const c = m.createPromptCache();
  const got = await m.generate(CHAT, { ...E, logprobs: true, promptCache: c });
  assertSameTurn(got, ref.eos.turns[0], 'EOS turn');
  assert.equal(got.finishReason, 'stop');
  assert.ok(!got.tokens.some((t) => EOS_IDS.includes(t)), 'EOS not in result.tokens');
  assert.equal(got.logprobs.length, got.tokens.length, 'no logprobs entry for the EOS');
  assertSameLogprobs(got, ref.eos.turns[0], TOL_F32, 'EOS turn');
  // A2.
  assert.deepEqual(c.tokens, ref.eos.cacheTokens);
  c.dispose();
});

// A deliberate difference from MLX-LM: its logits processors see only what its call was
// given, so with a cache its penalties ignore the cached prefix and a request's answer
// depends on whether its prefix was cached. Ours see the whole input, cached or not:
// the same answer either way (docs/prompt-caches.md). The reference shows that this
// case tells the two histories apart.
test('penalties with a cache see the whole input, as without a cache (not MLX-LM\'s cached history)', async () => {
  const m = await model(M);
  const c = m.createPromptCache();
  const r = ref.penaltyCached;
  const t1 = await m.generate(STR, { ...REF.penaltyCached.turns[0].options, promptCache: c });
  assertSameTurn(t1, r.turns[0], 'turn 1');
  const input = [...c.tokens, 11, 847];
  const options = REF.penaltyCached.turns[1].options;
  const t2 = await m.generate(input, { ...options, promptCache: c });
  assert.ok(t2.cachedTokens > 0);
  assert.deepEqual(t2.tokens, (await m.generate(input, options)).tokens, 'cached = uncached');
  assert.notDeepEqual(t2.tokens, r.turns[1].tokens, "MLX-LM's cached history gives other tokens here");
  c.dispose();
});

test('two generations on one cache at the same time each equal their uncached answer', async () => {
  const m = await model(M);
  const c = m.createPromptCache();
  const A = [...P, ...S];
  const B = [...P, ...NEW];
  const [a, b] = await Promise.all([m.generate(A, { ...G, promptCache: c }), m.generate(B, { ...T, promptCache: c })]);
  assertSameTokens(a, ref.plainGreedy, 'A');
  assertSameTokens(b, await m.generate(B, T), 'B');
  // And as streams.
  const [sa, sb] = [m.stream(A, { ...T, promptCache: c }), m.stream(B, { ...G, promptCache: c })];
  const [ca, cb] = await Promise.all([collect(sa), collect(sb)]);
  assertSameTokens(await sa.result, ref.plainSeeded, 'stream A');
  assert.deepEqual(ca.map((x) => x.token).slice(0, ref.plainSeeded.tokens.length), ref.plainSeeded.tokens);
  assertSameTokens(await sb.result, await m.generate(B, G), 'stream B');
  assert.ok(cb.length > 0);
  c.dispose();
});

// ---------------------------------------------------------------------------------
// Files

test("MLX-LM's saved cache (with tokens): loadPromptCache reuses it by prefix and continues as MLX-LM", async () => {
  const m = await model(M);
  const f = REF.refSave.save;
  const c = await m.loadPromptCache(f);
  assert.deepEqual(c.tokens, ref.refSave.cacheTokens);
  assert.equal(c.length, ref.refSave.cacheOffset);
  assert.deepEqual(ref.refSaveFile.offsets, [c.length, c.length]);
  const input = [...c.tokens, ...NEW];
  assertSameTurn(await m.generate(input, { ...G, promptCache: c }), ref.refLoadExtend.turns[0], 'extend the loaded cache', { input });
  c.dispose();
  // Another load, an input that shares only 3 tokens: trimmed back to them.
  const d = await m.loadPromptCache(f);
  const got = await m.generate([...P.slice(0, 3), ...NEW], { ...G, promptCache: d });
  assertSameTurn(got, ref.refLoadDiverge.turns[0], 'diverging input on the loaded cache');
  assert.equal(got.cachedTokens, 3);
  d.dispose();
});

test('a cache file without "tokens" (mlx_lm.cache_prompt) is a prefix of unknown tokens that the next input continues', async () => {
  const m = await model(M);
  const c = await m.loadPromptCache(REF.refUnknown.save);
  // A3.
  assert.deepEqual(c.tokens, []);
  assert.equal(c.length, P.length + S.length);
  const r = ref.refUnknownLoad;
  const t1 = await m.generate(NEW, { ...G, promptCache: c });
  assertSameTurn(t1, r.turns[0], 'turn 1 on the unknown prefix');
  assertSameTokens(t1, ref.plainUnknown, 'as if the unknown prefix were in the input');
  assert.deepEqual(c.tokens, [...NEW, ...t1.tokens]);
  assert.equal(c.length, P.length + S.length + NEW.length + t1.tokens.length);
  const input = [...c.tokens, ...MORE];
  assertSameTurn(await m.generate(input, { ...G, promptCache: c }), r.turns[1], 'turn 2 on the unknown prefix', { input });
  assert.deepEqual(c.tokens, r.cacheTokens);
  assert.equal(c.length, r.cacheOffset);
  c.dispose();
});

test('save(): MLX-LM reads our files (KVCache, RotatingKVCache, QuantizedKVCache) and continues as we do', async () => {
  const m = await model(M);
  const demo = await model(DEMO);
  const fa = file('ours-kv.safetensors');
  const fr = file('ours-rot.safetensors');
  const fq = file('ours-q8.safetensors');

  const a = m.createPromptCache();
  await m.generate([...P, ...S], { ...G, promptCache: a });
  await a.save(fa, { note: 'hello' });
  const r = m.createPromptCache(ROT);
  await m.generate(LONG, { ...G, promptCache: r });
  await r.save(fr);
  const q = demo.createPromptCache(Q8);
  await demo.generate([...P, ...S], { ...G, promptCache: q });
  await q.save(fq);

  const results = await runReference([
    { mode: 'cache_file', file: fa },
    cached(M, { file: fa }, [extend(NEW, G)]),
    { mode: 'cache_file', file: fr },
    cached(M, { file: fr }, [extend(MORE, G)]),
    { mode: 'cache_file', file: fq },
    cached(DEMO, { file: fq, ...Q8 }, [extend(NEW, G)]),
  ]);
  results.forEach((x, i) => assert.ok(!x.error, `reference case ${i}: ${x.error}`));
  const [ia, ca, ir, cr, iq, cq] = results;

  // A8: MLX-LM sees our layout, offsets and tokens.
  assert.deepEqual(ia.classes, ['KVCache', 'KVCache']);
  assert.deepEqual(ia.offsets, [a.length, a.length]);
  assert.deepEqual(JSON.parse(ia.metadata.tokens), a.tokens);
  assert.equal(ia.metadata.note, 'hello');
  assert.deepEqual(ir.classes, ['RotatingKVCache', 'RotatingKVCache']);
  assert.deepEqual(ir.offsets, [r.length, r.length]);
  assert.deepEqual(iq.classes, Array(4).fill('QuantizedKVCache'));
  assert.deepEqual(iq.offsets, Array(4).fill(q.length));
  // MLX-LM reused all of it (tokens metadata understood) ...
  assert.equal(ca.turns[0].cachedTokens, a.length);
  assert.equal(cr.turns[0].cachedTokens, r.length);
  assert.equal(cq.turns[0].cachedTokens, q.length);
  // ... and continues with the tokens our cache continues with, in memory and reloaded.
  for (const [cache, load, reply, mm, add] of [
    [a, fa, ca, m, NEW],
    [r, fr, cr, m, MORE],
    [q, fq, cq, demo, NEW],
  ]) {
    const input = [...cache.tokens, ...add];
    const loaded = await mm.loadPromptCache(load);
    assert.deepEqual(loaded.tokens, cache.tokens, `${load}: loaded tokens`);
    assertSameTurn(await mm.generate(input, { ...G, promptCache: loaded }), reply.turns[0], `${path.basename(load)} reloaded`, { input });
    assertSameTurn(await mm.generate(input, { ...G, promptCache: cache }), reply.turns[0], `${path.basename(load)} in memory`, { input });
    loaded.dispose();
    cache.dispose();
  }
});

// ---------------------------------------------------------------------------------
// Rotating and quantized caches

test("maxKvSize (RotatingKVCache): equals MLX-LM's cached run, also past maxKvSize", async () => {
  const m = await model(M);
  const c = m.createPromptCache(ROT);
  const s1 = await m.generate(P, { ...G, promptCache: c });
  assertSameTurn(s1, ref.rotShort.turns[0], 'short turn 1');
  assertSameTurn(await m.generate([...P, ...MORE], { ...G, promptCache: c }), ref.rotShort.turns[1], 'short turn 2 (trimmed)');
  c.dispose();

  const d = m.createPromptCache(ROT);
  const r = ref.rotLong;
  const l1 = await m.generate(LONG, { ...G, promptCache: d });
  assertSameTurn(l1, r.turns[0], 'prompt longer than maxKvSize');
  assert.equal(d.length, LONG.length + G.maxTokens);
  // A5: a wrapped rotating cache cannot be trimmed.
  assert.equal(d.trim(3), 0);
  assert.equal(d.length, LONG.length + G.maxTokens);
  const input = [...d.tokens, ...MORE];
  const l2 = await m.generate(input, { ...G, promptCache: d });
  assertSameTurn(l2, r.turns[1], 'continuing the wrapped cache', { input });
  const l3 = await m.generate(P, { ...G, promptCache: d });
  assertSameTurn(l3, r.turns[2], 'an input that needs a fresh cache');
  assert.equal(l3.cachedTokens, 0);
  assert.deepEqual(d.tokens, r.cacheTokens);
  d.dispose();
});

test("maxKvSize: MLX-LM's saved rotating cache continues the same here", async () => {
  const m = await model(M);
  const c = await m.loadPromptCache(REF.rotSaved.save);
  assert.deepEqual(c.tokens, ref.rotSaved.cacheTokens);
  const input = [...c.tokens, ...MORE];
  assertSameTurn(await m.generate(input, { ...G, promptCache: c }), ref.rotSavedLoad.turns[0], 'loaded rotating cache', { input });
  c.dispose();
});

for (const [name, opts, withPrefill] of [
  ['kvBits 8, quantizedKvStart 0', Q8, true],
  ['kvBits 4, quantizedKvStart 30', Q4, false],
]) {
  test(`${name} (QuantizedKVCache, demo model): equals MLX-LM's cached run`, async () => {
    const m = await model(DEMO);
    const r = withPrefill ? ref.q8 : ref.q4;
    const c = m.createPromptCache(opts);
    if (withPrefill) await c.prefill(P);
    const t1 = await m.generate([...P, ...S], { ...G, promptCache: c });
    assertSameTurn(t1, r.turns[0], `${name} turn 1`);
    const input = withPrefill ? [...c.tokens, ...NEW] : [...P, ...NEW];
    assertSameTurn(await m.generate(input, { ...G, promptCache: c }), r.turns[1], `${name} turn 2`, { input });
    assert.deepEqual(c.tokens, r.cacheTokens);
    // Smaller than the same tokens unquantized.
    const f = m.createPromptCache();
    await m.generate(c.tokens, { maxTokens: 1, promptCache: f });
    f.trim(f.length - c.length);
    assert.equal(f.length, c.length);
    assert.ok(c.nbytes < f.nbytes, `quantized ${c.nbytes} bytes, float ${f.nbytes}`);
    f.dispose();
    c.dispose();
  });
}

test('the demo model without a cache is still MLX-LM\'s', async () => {
  const m = await model(DEMO);
  assertSameTokens(await m.generate([...P, ...S], G), ref.demoPlain, 'demo');
});

// ---------------------------------------------------------------------------------
// Logprobs

for (const [name, m, input, tol, top] of [
  ['lpGreedy', M, [...P, ...S], TOL_F32, 5],
  ['lpSeeded', M, [...P, ...S], TOL_F32, 0],
  ['lpTopP', M, STR, TOL_F32, 20],
  ['lpPenalty', M, STR, TOL_F32, 4],
  ['lpBf16', BF16, [...P, ...S], TOL_BF16, 5],
  ['lpBf16Seeded', BF16, STR, TOL_BF16, 3],
]) {
  test(`logprobs ${name} (${m}, topLogprobs ${top}) equal MLX-LM's`, async () => {
    const mm = await model(m);
    const options = REF[name].options;
    const got = await mm.generate(input, options);
    assertSameTokens(got, ref[name], name);
    assertSameLogprobs(got, ref[name], tol, name, { top });
    if (options.temperature === undefined) {
      // Greedy: the chosen token is the most likely one.
      got.logprobs.forEach((e, i) => {
        if (e.top.length) {
          assert.equal(e.top[0].token, e.token, `${name}[${i}]: greedy token is top[0]`);
          assert.equal(e.top[0].logprob, e.logprob);
        }
      });
    }
    // stream(): chunk.logprob / chunk.topLogprobs are result.logprobs entry by entry.
    const s = mm.stream(input, options);
    const chunks = await collect(s);
    const result = await s.result;
    assert.deepEqual(result.logprobs, got.logprobs, `${name}: stream().result.logprobs`);
    for (let i = 0; i < result.tokens.length; i++) {
      assert.equal(chunks[i].token, result.tokens[i]);
      assert.equal(chunks[i].logprob, result.logprobs[i].logprob, `${name}: chunk ${i} logprob`);
      if (top > 0) assert.deepEqual(chunks[i].topLogprobs, result.logprobs[i].top, `${name}: chunk ${i} topLogprobs`);
    }
  });
}

test('logprobs with a prompt cache equal MLX-LM\'s cached run', async () => {
  const m = await model(M);
  const c = m.createPromptCache();
  await c.prefill(P);
  const options = REF.lpCached.turns[0].options;
  const got = await m.generate([...P, ...S], { ...options, promptCache: c });
  assertSameTurn(got, ref.lpCached.turns[0], 'cached logprobs');
  assertSameLogprobs(got, ref.lpCached.turns[0], TOL_F32, 'cached logprobs', { top: 3 });
  c.dispose();
});

test('no logprobs unless asked; topLogprobs 0 gives empty top lists', async () => {
  const m = await model(M);
  const r = await m.generate(STR, { maxTokens: 4 });
  assert.equal(r.logprobs, undefined);
  const chunks = await collect(m.stream(STR, { maxTokens: 4 }));
  assert.equal(chunks[0].logprob, undefined);
  const z = await m.generate(STR, { maxTokens: 4, logprobs: true, topLogprobs: 0 });
  assert.equal(z.logprobs.length, 4);
  z.logprobs.forEach((e) => assert.deepEqual(e.top, []));
});

// ---------------------------------------------------------------------------------
// Chat

test('Chat: three send() turns each equal the uncached generate() of their input, which keeps the reply ids', async () => {
  const m = await model(M);
  const chat = m.createChat({ system: SYSTEM, maxTokens: 16 });
  assert.deepEqual(chat.messages, [{ role: 'system', content: SYSTEM }]);
  const questions = ['What is the capital of France?', 'And of Italy? 🇮🇹', { role: 'user', content: 'Thanks! Anything else?' }];
  const kept = [];
  let heldText = null;
  for (let i = 0; i < questions.length; i++) {
    const q = questions[i];
    const held = chat.promptCache.tokens;
    const r = await chat.send(q);
    const msgs = chat.messages;
    assert.equal(msgs.length, 1 + 2 * (i + 1), `turn ${i + 1}: messages grow by 2`);
    assert.equal(msgs[msgs.length - 2].role, 'user');
    assert.equal(msgs[msgs.length - 2].content, typeof q === 'string' ? q : q.content);
    assert.equal(msgs[msgs.length - 1].role, 'assistant');
    assert.equal(msgs[msgs.length - 1].content, r.text);
    const t = await assertChatTurn(m, chat, r, held, heldText, { maxTokens: 16 }, `chat turn ${i + 1}`);
    kept.push(t.how);
    heldText = t.heldText;
    if (i > 0) assert.ok(r.cachedTokens > 0, `turn ${i + 1}: cachedTokens ${r.cachedTokens}`);
  }
  // Turn 2 keeps turn 1's ids by their text; turn 2's reply starts with a space that its text
  // (as MLX-LM's detokenizer gives it) drops, and turn 3 keeps its ids all the same.
  assert.deepEqual(kept, [false, 'held', 'held'], 'how each turn kept the held ids');
  chat.dispose();
});

test('Chat: a reply that does not encode back to its own ids is served from the cache, not computed again', async () => {
  const m = await model(M);
  const [a] = m.encode('a', { addSpecialTokens: false });
  // Three forced "a" ids: their text "aaa" encodes to fewer, merged ids.
  assert.notDeepEqual(m.encode('aaa', { addSpecialTokens: false }), [a, a, a], 'the case needs a reply that BPE merges');
  const chat = m.createChat({ system: SYSTEM });
  const r1 = await chat.send('Say aaa.', { maxTokens: 3, logitBias: { [a]: 1e9 } });
  const { heldText } = await assertChatTurn(m, chat, r1, [], null, { maxTokens: 3, logitBias: { [a]: 1e9 } }, 'the forced reply');
  assert.deepEqual(r1.tokens, [a, a, a]);
  assert.equal(r1.text, 'aaa');
  const held = chat.promptCache.tokens;
  assert.deepEqual(held.slice(-3), [a, a, a], 'the cache holds the reply as generated');
  const r2 = await chat.send('And now?', { maxTokens: 8 });
  assert.equal((await assertChatTurn(m, chat, r2, held, heldText, { maxTokens: 8 }, 'after a merged reply')).how, 'held', 'the held ids are kept');
  // Encoding the conversation again (generate(messages), a server) would compute the reply again.
  const plain = m.encode(chatPrompt(m, chat.messages.slice(0, -1)), { addSpecialTokens: false });
  const parts = plain.findIndex((x, i) => x !== held[i]);
  assert.ok(parts >= 0 && parts < held.length - 2, `the plain encoding parts from the held ids inside the reply (at ${parts} of ${held.length})`);
  assert.equal(r2.promptTokens - r2.cachedTokens, r2.promptTokens - held.length, 'only what the template added is processed');
  chat.dispose();
});

test('Chat: after a reply ended by EOS the held ids are kept; after a stop string the conversation is encoded again', async () => {
  const m = await model(M);
  // CHAT's message and E's sampling: the turn the EOS test above ends on an EOS.
  const chat = m.createChat();
  const r1 = await chat.send(CHAT[0].content, E);
  assert.equal(r1.finishReason, 'stop');
  assert.ok(EOS_IDS.includes(chat.promptCache.tokens.at(-1)), 'the cache holds the EOS');
  const t1 = await assertChatTurn(m, chat, r1, [], null, E, 'EOS turn');
  assert.notEqual(t1.heldText, null);
  const held = chat.promptCache.tokens;
  const r2 = await chat.send('Go on.', G);
  assert.equal((await assertChatTurn(m, chat, r2, held, t1.heldText, G, 'after the EOS')).how, 'held');

  // The same first turn without a stop string, then with one cut out of its reply.
  const plain = m.createChat({ system: SYSTEM });
  const full = await plain.send('Tell me a story.', G);
  plain.dispose();
  const stop = full.text.slice(8, 14);
  const cut = m.createChat({ system: SYSTEM });
  const c1 = await cut.send('Tell me a story.', { ...G, stop: [stop] });
  assert.equal(c1.finishReason, 'stop');
  assert.equal(c1.text, full.text.slice(0, full.text.indexOf(stop)), 'the reply cut at the stop string');
  const c = await assertChatTurn(m, cut, c1, [], null, { ...G, stop: [stop] }, 'stop string turn');
  assert.equal(c.heldText, null, 'ids past the reply text: nothing known');
  const h = cut.promptCache.tokens;
  const c2 = await cut.send('Go on.', G);
  assert.equal((await assertChatTurn(m, cut, c2, h, null, G, 'after the stop string')).how, false, 'encoded again');
  assert.ok(c2.cachedTokens > 0 && c2.cachedTokens < h.length, 'the cache serves the common prefix only');
  cut.dispose();
  chat.dispose();
});

test('Chat: options per send(), templateOptions, initial messages', async () => {
  const m = await model(M);
  const chat = m.createChat({
    messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello!' }],
    templateOptions: { enableThinking: false },
    maxTokens: 8,
  });
  assert.equal(chat.messages.length, 3);
  const r = await chat.send('Tell me a story.', { maxTokens: 12, temperature: 0.8, seed: 3 });
  await assertChatTurn(m, chat, r, [], null, { maxTokens: 12, temperature: 0.8, seed: 3 }, 'send with its own options', { enableThinking: false });
  const want = await m.generate(chatPrompt(m, chat.messages.slice(0, -1), { enableThinking: false }), { maxTokens: 12, temperature: 0.8, seed: 3 });
  assertSameTokens(r, want, 'send with its own options, against generate(messages)');
  assert.equal(r.tokens.length, 12);
  chat.dispose();
});

test('Chat: stream() gives the same reply as send(); an aborted stream() leaves messages unchanged', async () => {
  const m = await model(M);
  const chat = m.createChat({ system: SYSTEM, maxTokens: 16 });
  const s = chat.stream('What is the capital of France?');
  const h0 = chat.promptCache.tokens;
  const chunks = await collect(s);
  const r = await s.result;
  assert.deepEqual(chunks.map((c) => c.token).slice(0, r.tokens.length), r.tokens);
  assert.equal(chunks.map((c) => c.text).join(''), r.text);
  assert.equal(chat.messages.length, 3);
  assert.equal(chat.messages[2].content, r.text);
  assertSameTokens(r, await m.generate(chatPrompt(m, chat.messages.slice(0, -1)), { maxTokens: 16 }), 'chat stream');
  const turn1 = chat.promptCache.tokens;
  const { heldText } = await assertChatTurn(m, chat, r, h0, null, { maxTokens: 16 }, 'chat stream turn');

  // A6: aborting rejects and changes no message.
  const before = JSON.parse(JSON.stringify(chat.messages));
  const ac = new AbortController();
  const reason = new Error('stop it');
  const a = chat.stream('Tell me more.', { maxTokens: 500, logitBias: NO_EOS, signal: ac.signal });
  let n = 0;
  await assert.rejects(
    (async () => {
      for await (const _ of a) if (++n === 3) ac.abort(reason); // eslint-disable-line no-unused-vars
    })(),
    (e) => e === reason
  );
  await assert.rejects(a.result, (e) => e === reason);
  assert.deepEqual(chat.messages, before, 'messages unchanged by the aborted turn');
  // The cache is back at the first turn's ids; the next send() is still right.
  assert.deepEqual(chat.promptCache.tokens, turn1, 'the aborted turn left the cache as it was');
  const next = await chat.send('And of Spain?');
  assert.equal((await assertChatTurn(m, chat, next, turn1, heldText, { maxTokens: 16 }, 'send after abort')).how, 'held');
  assert.equal(chat.messages.length, 5);
  chat.dispose();
});

test('Chat: save() / loadChat() round trip continues identically', async () => {
  const m = await model(M);
  const chat = m.createChat({ system: SYSTEM, maxTokens: 16 });
  const r1 = await chat.send('What is the capital of France?');
  const t1 = await assertChatTurn(m, chat, r1, [], null, { maxTokens: 16 }, 'turn 1');
  const h1 = chat.promptCache.tokens;
  const r2 = await chat.send('And of Italy?');
  const t2 = await assertChatTurn(m, chat, r2, h1, t1.heldText, { maxTokens: 16 }, 'turn 2');
  const f = file('chat.safetensors');
  await chat.save(f);
  const loaded = await m.loadChat(f);
  assert.deepEqual(loaded.messages, chat.messages);
  const held = loaded.promptCache.tokens;
  assert.deepEqual(held, chat.promptCache.tokens);
  const a = await chat.send('Thanks!');
  const b = await loaded.send('Thanks!');
  assertSameTokens(b, a, 'loaded chat vs original');
  assert.ok(b.cachedTokens > 0, 'the loaded chat reuses its saved cache');
  assert.equal(b.cachedTokens, a.cachedTokens);
  assert.equal((await assertChatTurn(m, loaded, b, held, t2.heldText, { maxTokens: 16 }, 'loaded chat vs uncached')).how, 'held');
  assert.deepEqual(loaded.messages, chat.messages);
  loaded.dispose();
  chat.dispose();
});

test('Chat: reset()', async () => {
  const m = await model(M);
  const chat = m.createChat({ system: SYSTEM, maxTokens: 16 });
  await chat.send('What is the capital of France?');
  // A6: back to the messages it was created with.
  chat.reset();
  assert.deepEqual(chat.messages, [{ role: 'system', content: SYSTEM }]);
  let held = chat.promptCache.tokens;
  const r = await chat.send('Hello there');
  assert.equal((await assertChatTurn(m, chat, r, held, null, { maxTokens: 16 }, 'after reset()')).how, false, 'after reset() the plain encoding');
  assertSameTokens(r, await m.generate(chatPrompt(m, chat.messages.slice(0, -1)), { maxTokens: 16 }), 'after reset(), against generate(messages)');
  assert.ok(r.cachedTokens > 0, 'the system prompt is still served from the cache');
  const msgs = [{ role: 'user', content: 'Count to three.' }, { role: 'assistant', content: 'One, two, three.' }];
  chat.reset(msgs);
  assert.deepEqual(chat.messages, msgs);
  held = chat.promptCache.tokens;
  const r2 = await chat.send('Now to five.');
  assert.equal(chat.messages.length, 4);
  assert.equal((await assertChatTurn(m, chat, r2, held, null, { maxTokens: 16 }, 'after reset(messages)')).how, false);
  assertSameTokens(r2, await m.generate(chatPrompt(m, chat.messages.slice(0, -1)), { maxTokens: 16 }), 'after reset(messages), against generate(messages)');
  chat.dispose();
});

// ---------------------------------------------------------------------------------
// Errors

test('CACHE_MISMATCH: a cache of another model, a file of another model shape', async () => {
  const m = await model(M);
  const other = await model(OTHER);
  const demo = await model(DEMO);
  const c = m.createPromptCache();
  await expectReject(() => other.generate(STR, { maxTokens: 2, promptCache: c }), 'CACHE_MISMATCH', null, 'empty cache of qwen3-f32 on llama-f32');
  await expectReject(() => demo.generate(STR, { maxTokens: 2, promptCache: c }), 'CACHE_MISMATCH', null, 'empty cache of qwen3-f32 on demo');
  await m.generate(STR, { maxTokens: 4, promptCache: c });
  await expectReject(() => other.generate(STR, { maxTokens: 2, promptCache: c }), 'CACHE_MISMATCH', null, 'filled cache on another model');
  assert.equal(c.length, m.encode(STR).length + 4, 'the failed call changed nothing');
  const f = file('mismatch.safetensors');
  await c.save(f);
  await expectReject(() => demo.loadPromptCache(f), 'CACHE_MISMATCH', null, 'a 2-layer file on the 4-layer demo');
  c.dispose();
  const chat = m.createChat({ maxTokens: 4 });
  await chat.send('hi');
  const fc = file('mismatch-chat.safetensors');
  await chat.save(fc);
  chat.dispose();
  await expectReject(() => demo.loadChat(fc), 'CACHE_MISMATCH', null, 'loadChat of a qwen3-f32 chat on demo');
});

test('INVALID_CACHE_FILE: truncated, foreign and missing files', async () => {
  const m = await model(M);
  const c = m.createPromptCache();
  await m.generate(STR, { maxTokens: 4, promptCache: c });
  const good = file('good.safetensors');
  await c.save(good);
  c.dispose();
  const bytes = fs.readFileSync(good);
  const truncated = file('truncated.safetensors');
  fs.writeFileSync(truncated, bytes.subarray(0, Math.floor(bytes.length / 2)));
  const text = file('text.safetensors');
  fs.writeFileSync(text, 'not a safetensors file');
  const headerOnly = file('header-only.safetensors');
  fs.writeFileSync(headerOnly, bytes.subarray(0, 4));
  for (const [f, label] of [
    [truncated, 'truncated'],
    [text, 'text'],
    [headerOnly, '4 bytes'],
    [path.join(fixturePath(M), 'model.safetensors'), 'model weights (safetensors, not a cache)'],
  ]) {
    await expectReject(() => m.loadPromptCache(f), 'INVALID_CACHE_FILE', null, `loadPromptCache ${label}`);
    await expectReject(() => m.loadChat(f), 'INVALID_CACHE_FILE', null, `loadChat ${label}`);
  }
  await assert.rejects(m.loadPromptCache(file('does-not-exist.safetensors')), (e) => typeof e.code === 'string', 'a missing file rejects with a code');
  // The model is fine afterwards.
  const again = m.createPromptCache();
  await m.generate([...P, ...S], { ...G, promptCache: again });
  again.dispose();
});

test('DISPOSED: a disposed cache or chat', async () => {
  const m = await model(M);
  const c = m.createPromptCache();
  await c.prefill(P);
  c.dispose();
  c.dispose(); // twice is fine (dispose is idempotent)
  await expectReject(() => m.generate(STR, { maxTokens: 2, promptCache: c }), 'DISPOSED', null, 'generate with a disposed cache');
  await expectReject(() => c.prefill(P), 'DISPOSED', null, 'prefill');
  await expectReject(() => c.save(file('disposed.safetensors')), 'DISPOSED', null, 'save');
  expectThrow(() => c.trim(1), 'DISPOSED', null, 'trim');
  assert.ok(!fs.existsSync(file('disposed.safetensors')));
  const chat = m.createChat({ maxTokens: 4 });
  chat.dispose();
  await expectReject(() => chat.send('hi'), 'DISPOSED', null, 'send on a disposed chat');
  await expectReject(() => chat.save(file('disposed-chat.safetensors')), 'DISPOSED', null, 'save on a disposed chat');
  await assert.rejects(
    (async () => {
      for await (const _ of chat.stream('hi')) break; // eslint-disable-line no-unused-vars
    })(),
    (e) => e.code === 'DISPOSED'
  );
});

test('INVALID_ARGUMENT: topLogprobs out of range, bad cache options, bad trim, not a cache', async () => {
  const m = await model(M);
  for (const k of [-1, 21, 1.5, '3']) {
    await expectReject(() => m.generate(STR, { maxTokens: 2, logprobs: true, topLogprobs: k }), 'INVALID_ARGUMENT', /topLogprobs/, `topLogprobs ${k}`);
  }
  // A7. Each on the demo model (head_dim 32, where kvGroupSize 32 is valid)
  // unless it is about qwen3-f32's 16-wide heads.
  const demo = await model(DEMO);
  for (const [mm, opts] of [
    [m, { maxKvSize: 0 }],
    [m, { maxKvSize: -4 }],
    [m, { maxKvSize: 2.5 }],
    [m, { kvBits: 8 }], // the default group 64 does not divide 16
    [m, { kvBits: 8, kvGroupSize: 32 }], // nor does 32
    [demo, { kvBits: 8 }], // 64 does not divide 32
    [demo, { kvBits: 7, kvGroupSize: 32 }],
    [demo, { kvBits: 4, kvGroupSize: 16 }],
    [demo, { kvBits: 4, kvGroupSize: 48 }],
    [demo, { maxKvSize: 64, kvBits: 8, kvGroupSize: 32 }],
    [demo, { kvBits: 8, kvGroupSize: 32, quantizedKvStart: -1 }],
  ]) {
    expectThrow(() => mm.createPromptCache(opts), 'INVALID_ARGUMENT', null, `${mm === m ? M : DEMO}.createPromptCache(${JSON.stringify(opts)})`);
  }
  demo.createPromptCache(Q8).dispose(); // valid
  demo.createPromptCache(Q4).dispose();
  const c = m.createPromptCache();
  expectThrow(() => c.trim(-1), 'INVALID_ARGUMENT', null, 'trim(-1)');
  expectThrow(() => c.trim(1.5), 'INVALID_ARGUMENT', null, 'trim(1.5)');
  // prefill's chunk size: the binding passes integers on, lm checks the range.
  for (const n of [0, -1, 1.5, 2 ** 32]) {
    await expectReject(() => c.prefill(STR, { prefillStepSize: n }), 'INVALID_ARGUMENT', /prefillStepSize/, `prefill prefillStepSize ${n}`);
  }
  assert.equal(c.length, 0, 'a refused prefill feeds nothing');
  c.dispose();
  await expectReject(() => m.generate(STR, { maxTokens: 2, promptCache: {} }), 'INVALID_ARGUMENT', null, 'promptCache: {}');
  await expectReject(() => m.generate(STR, { maxTokens: 2, promptCache: 'cache' }), 'INVALID_ARGUMENT', null, 'promptCache: string');
});
