'use strict';
// The OpenAI-compatible server (lib/server) through the official `openai` client:
// answers equal to the library's own generate() (itself MLX-LM's, parity.test.js),
// streaming, usage and cached tokens, logprobs, tools and reasoning, speech, and
// every fault: bad JSON, unknown model or endpoint, context length, API key, body
// size, client disconnects, a flood of garbage, SIGTERM.
const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const net = require('node:net');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');
const OpenAI = require('openai');
const { createServer } = require('../lib/server');
const { ReplyParser } = require('../lib/server/reply');
const { pcm16 } = require('../lib/audio');
const { model, disposeModels, fixturePath } = require('./helpers');
const { TTS_FIXTURES_DIR } = require('../scripts/fixtures-tts');
const { ensureVoiceFixtures, voiceTokenizerDir } = require('../scripts/fixtures-voice');

const M = 'qwen3-f32';
const CHAT = [{ role: 'user', content: 'What is the capital of France?' }];
const started = [];

async function start(options) {
  const server = createServer(options);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  started.push(server);
  const base = `http://127.0.0.1:${server.address().port}`;
  return { server, base, client: new OpenAI({ baseURL: `${base}/v1`, apiKey: options.apiKey ?? 'unused', maxRetries: 0 }) };
}

// A raw request: { status, headers, body (string), bytes (Buffer) }.
function raw(base, method, pathname, body, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}${pathname}`, { method, headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => {
        const bytes = Buffer.concat(parts);
        resolve({ status: res.statusCode, headers: res.headers, body: bytes.toString('utf8'), bytes });
      });
    });
    req.on('error', reject);
    if (body !== undefined) req.end(typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body));
    else req.end();
  });
}

function assertOpenAIError(r, status, code) {
  assert.equal(r.status, status, r.body);
  const e = JSON.parse(r.body).error;
  assert.ok(e && typeof e.message === 'string' && typeof e.type === 'string' && 'param' in e && 'code' in e, r.body);
  if (code !== undefined) assert.equal(e.code, code);
  return e;
}

let srv;
test.before(async () => {
  srv = await start({ model: await model(M), modelId: M });
});
test.after(async () => {
  for (const s of started) await s.shutdown(1000);
  await disposeModels();
});

test('chat completion: the library\'s answer, usage, and a repeated conversation served from the cache', async () => {
  const m = await model(M);
  const want = await m.generate(CHAT, { maxTokens: 12 });
  const r = await srv.client.chat.completions.create({ model: M, messages: CHAT, max_tokens: 12 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].message.content, want.text);
  assert.equal(r.choices[0].finish_reason, want.finishReason);
  assert.equal(r.usage.prompt_tokens, want.promptTokens);
  assert.equal(r.usage.completion_tokens, want.generationTokens);
  // The next turn of the same conversation reuses the first one's cache.
  const next = [...CHAT, { role: 'assistant', content: want.text }, { role: 'user', content: 'And of Spain?' }];
  const again = await srv.client.chat.completions.create({ model: M, messages: next, max_completion_tokens: 12 });
  assert.ok(again.usage.prompt_tokens_details.cached_tokens >= want.promptTokens - 1, JSON.stringify(again.usage));
  assert.equal(again.choices[0].message.content, (await m.generate(next, { maxTokens: 12 })).text);
});

test('seeded sampling and the sampling fields equal the library\'s', async () => {
  const m = await model(M);
  const opts = { maxTokens: 16, temperature: 0.9, topP: 0.95, topK: 40, minP: 0.02, seed: 7, presencePenalty: 0.5, frequencyPenalty: 0.3, repetitionPenalty: 1.1 };
  const want = await m.generate(CHAT, opts);
  const r = await srv.client.chat.completions.create({
    model: M,
    messages: CHAT,
    max_tokens: 16,
    temperature: 0.9,
    top_p: 0.95,
    top_k: 40,
    min_p: 0.02,
    seed: 7,
    presence_penalty: 0.5,
    frequency_penalty: 0.3,
    repetition_penalty: 1.1,
  });
  assert.equal(r.choices[0].message.content, want.text);
});

test('streamed chat: the same text, usage chunk last, then [DONE]', async () => {
  const m = await model(M);
  const want = await m.generate(CHAT, { maxTokens: 12, stop: ['zzz'] });
  const s = await srv.client.chat.completions.create({ model: M, messages: CHAT, max_tokens: 12, stream: true, stream_options: { include_usage: true }, stop: 'zzz' });
  let text = '';
  let usage = null;
  let finish = null;
  let role = null;
  for await (const c of s) {
    if (c.choices.length === 0) {
      usage = c.usage;
      continue;
    }
    role ??= c.choices[0].delta.role;
    text += c.choices[0].delta.content ?? '';
    finish = c.choices[0].finish_reason ?? finish;
  }
  assert.equal(role, 'assistant');
  assert.equal(text, want.text);
  assert.equal(finish, want.finishReason);
  assert.equal(usage.prompt_tokens, want.promptTokens);
  const r = await raw(srv.base, 'POST', '/v1/chat/completions', { messages: CHAT, max_tokens: 3, stream: true });
  assert.equal(r.status, 200);
  assert.match(r.headers['content-type'], /text\/event-stream/);
  assert.ok(r.body.trimEnd().endsWith('data: [DONE]'), r.body);
});

test('logprobs: chat and completions carry the library\'s values and top entries', async () => {
  const m = await model(M);
  const want = await m.generate(CHAT, { maxTokens: 6, logprobs: true, topLogprobs: 3 });
  const r = await srv.client.chat.completions.create({ model: M, messages: CHAT, max_tokens: 6, logprobs: true, top_logprobs: 3 });
  const got = r.choices[0].logprobs.content;
  assert.equal(got.length, want.logprobs.length);
  got.forEach((g, i) => {
    assert.ok(Math.abs(g.logprob - want.logprobs[i].logprob) < 1e-6);
    assert.equal(g.token, m.decode([want.tokens[i]]));
    assert.deepEqual(g.bytes, [...Buffer.from(g.token)]);
    assert.deepEqual(g.top_logprobs.map((t) => t.token), want.logprobs[i].top.map((t) => m.decode([t.token])));
  });
  const prompt = 'Hello, my name is';
  const wantC = await m.generate(prompt, { maxTokens: 5, logprobs: true, topLogprobs: 2 });
  const c = await srv.client.completions.create({ model: M, prompt, max_tokens: 5, logprobs: 2 });
  assert.equal(c.choices[0].text, wantC.text);
  assert.deepEqual(c.choices[0].logprobs.token_logprobs, wantC.logprobs.map((l) => l.logprob));
  assert.equal(Object.keys(c.choices[0].logprobs.top_logprobs[0]).length, 2);
  const bad = await raw(srv.base, 'POST', '/v1/chat/completions', { messages: CHAT, logprobs: true, top_logprobs: 21 });
  assertOpenAIError(bad, 400);
});

test('completions: string and token-id prompts, streamed and not', async () => {
  const m = await model(M);
  const prompt = 'The quick brown fox';
  const want = await m.generate(prompt, { maxTokens: 10 });
  const r = await srv.client.completions.create({ model: M, prompt, max_tokens: 10 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].text, want.text);
  assert.equal(r.usage.prompt_tokens, want.promptTokens);
  const ids = m.encode(prompt);
  const byIds = await srv.client.completions.create({ model: M, prompt: ids, max_tokens: 10 });
  assert.equal(byIds.choices[0].text, (await m.generate(ids, { maxTokens: 10 })).text);
  const s = await srv.client.completions.create({ model: M, prompt, max_tokens: 10, stream: true });
  let text = '';
  for await (const c of s) text += c.choices[0]?.text ?? '';
  assert.equal(text, want.text);
});

test('tools reach the chat template (the prompt counts them)', async () => {
  const m = await model(M);
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
  const r = await srv.client.chat.completions.create({ model: M, messages: CHAT, tools, max_tokens: 2 });
  const ids = m.encode(m.applyChatTemplate(CHAT, { addGenerationPrompt: true, tools }), { addSpecialTokens: false });
  assert.equal(r.usage.prompt_tokens, ids.length);
  // A tool-call turn and its result, as clients send them back (arguments as a JSON string).
  const history = [
    ...CHAT,
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '18 C' },
  ];
  const r2 = await srv.client.chat.completions.create({ model: M, messages: history, tools, max_tokens: 2 });
  const text = m.applyChatTemplate(
    [CHAT[0], { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris' } } }] }, history[2]],
    { addGenerationPrompt: true, tools }
  );
  assert.match(text, /"city": "Paris"/);
  assert.equal(r2.usage.prompt_tokens, m.encode(text, { addSpecialTokens: false }).length);
});

// mlx_lm.server passes chat_template_kwargs to apply_chat_template as keyword arguments: here
// enable_thinking through its option, every other key as a template variable.
test('chat_template_kwargs reach the chat template (enable_thinking as its option, the rest as variables)', async () => {
  const m = await model(M);
  const count = (o) => m.encode(m.applyChatTemplate(CHAT, { addGenerationPrompt: true, ...o }), { addSpecialTokens: false }).length;
  const r = await srv.client.chat.completions.create({ model: M, messages: CHAT, max_tokens: 2, chat_template_kwargs: { enable_thinking: false } });
  // Qwen3's template adds an empty <think></think> block when thinking is off.
  assert.equal(r.usage.prompt_tokens, count({ enableThinking: false }));
  assert.notEqual(count({ enableThinking: false }), count({}));
  const seen = [];
  const wrapped = scripted(m, ['ok']);
  wrapped.applyChatTemplate = (messages, o) => {
    seen.push(o);
    return m.applyChatTemplate(messages, o);
  };
  const { client, base } = await start({ model: wrapped, modelId: 'k' });
  const kwargs = { enable_thinking: true, reasoning_effort: 'high', custom: { list: [1, 2] } };
  await client.chat.completions.create({ model: 'k', messages: CHAT, chat_template_kwargs: kwargs });
  assert.deepEqual(seen.at(-1), { addGenerationPrompt: true, tools: undefined, enableThinking: true, variables: { reasoning_effort: 'high', custom: { list: [1, 2] } } });
  const bad = (k) => raw(base, 'POST', '/v1/chat/completions', { messages: CHAT, chat_template_kwargs: k });
  for (const k of ['high', [1], { enable_thinking: 'yes' }, { tools: [] }, { add_generation_prompt: false }]) {
    assert.equal(assertOpenAIError(await bad(k), 400).param, 'chat_template_kwargs', JSON.stringify(k));
  }
});

// A model whose replies are scripted (the fixtures' random weights never call a tool):
// the HTTP side of tool calls and reasoning, through the official client.
function scripted(base, replies) {
  let next = 0;
  return {
    info: { ...base.info },
    applyChatTemplate: (...a) => base.applyChatTemplate(...a),
    encode: (...a) => base.encode(...a),
    decode: (...a) => base.decode(...a),
    createPromptCache: () => ({ tokens: [], nbytes: 0, disposed: false, dispose() {} }),
    stream() {
      const text = replies[next++ % replies.length];
      // Pieces of 3 characters: tags arrive split.
      const pieces = text.match(/[\s\S]{1,3}/g) ?? [];
      const result = Promise.resolve({ text, tokens: pieces.map(() => 1), finishReason: 'stop', promptTokens: 5, cachedTokens: 0, generationTokens: pieces.length });
      return {
        async *[Symbol.asyncIterator]() {
          for (const p of pieces) yield { text: p, token: 1 };
        },
        result,
      };
    },
  };
}

test('tool calls in Qwen3\'s and Llama 3\'s formats become tool_calls; <think> becomes reasoning_content', async () => {
  const base = await model(M);
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } }];
  const qwen = '<think>The user wants weather.</think>\n\nLet me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
  const { client } = await start({ model: scripted(base, [qwen, qwen, 'plain <think>no</think> text']), modelId: 'q' });
  const r = await client.chat.completions.create({ model: 'q', messages: CHAT, tools });
  const msg = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(msg.reasoning_content, 'The user wants weather.');
  assert.equal(msg.content, 'Let me check.');
  assert.equal(msg.tool_calls.length, 1);
  assert.equal(msg.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(msg.tool_calls[0].function.arguments), { city: 'Paris' });
  const s = await client.chat.completions.create({ model: 'q', messages: CHAT, tools, stream: true });
  let content = '';
  let reasoning = '';
  const calls = [];
  let finish = null;
  for await (const c of s) {
    const d = c.choices[0].delta;
    content += d.content ?? '';
    reasoning += d.reasoning_content ?? '';
    for (const t of d.tool_calls ?? []) calls.push(t);
    finish = c.choices[0].finish_reason ?? finish;
  }
  assert.equal(reasoning, 'The user wants weather.');
  assert.equal(content, 'Let me check.');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].index, 0);
  assert.deepEqual(JSON.parse(calls[0].function.arguments), { city: 'Paris' });
  assert.equal(finish, 'tool_calls');
  // A <think> later in the text is content.
  const plain = await client.chat.completions.create({ model: 'q', messages: CHAT });
  assert.equal(plain.choices[0].message.content, 'plain <think>no</think> text');

  const llama = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Rome"}}';
  const parser = new ReplyParser({ toolFormat: 'json' });
  const out = [...llama.match(/[\s\S]{1,4}/g)].map((p) => parser.push(p));
  const end = parser.end();
  assert.equal(out.map((o) => o.content).join('') + end.content, '');
  assert.equal(end.toolCalls.length, 1);
  assert.deepEqual(JSON.parse(end.toolCalls[0].function.arguments), { city: 'Rome' });
  // Not a call: the text stays content.
  const p2 = new ReplyParser({ toolFormat: 'tagged' });
  const o2 = p2.push('a <tool_call>not json</tool_call> b');
  const e2 = p2.end();
  assert.equal(o2.content + e2.content, 'a <tool_call>not json</tool_call> b');
  assert.equal(p2.calls.length, 0);
  // A reasoning block opened by the prompt (the template ends with <think>).
  const p3 = new ReplyParser({ thinking: true });
  const o3 = [p3.push('thoughts </thi'), p3.push('nk>answer')];
  const e3 = p3.end();
  assert.equal(o3.map((o) => o.reasoning).join('') + e3.reasoning, 'thoughts ');
  assert.equal(o3.map((o) => o.content).join('') + e3.content, 'answer');
});

test('models and health', async () => {
  const list = await srv.client.models.list();
  assert.deepEqual(list.data.map((d) => d.id), [M]);
  const h = await raw(srv.base, 'GET', '/health');
  assert.equal(h.status, 200);
  assert.deepEqual(JSON.parse(h.body), { status: 'ok' });
});

test('faults: bad JSON, unknown model or endpoint, n > 1, bad fields, context length', async () => {
  assertOpenAIError(await raw(srv.base, 'POST', '/v1/chat/completions', '{"messages": ['), 400);
  assertOpenAIError(await raw(srv.base, 'POST', '/v1/chat/completions', '[1,2]'), 400);
  assertOpenAIError(await raw(srv.base, 'POST', '/v1/chat/completions', { model: 'gpt-4o', messages: CHAT }), 404, 'model_not_found');
  await assert.rejects(srv.client.chat.completions.create({ model: 'gpt-4o', messages: CHAT }), (e) => e.status === 404 && e.code === 'model_not_found');
  assertOpenAIError(await raw(srv.base, 'POST', '/v1/nothing', {}), 404);
  assertOpenAIError(await raw(srv.base, 'GET', '/v1/chat/completions'), 405);
  const n2 = assertOpenAIError(await raw(srv.base, 'POST', '/v1/chat/completions', { messages: CHAT, n: 2 }), 400);
  assert.equal(n2.param, 'n');
  assert.equal(assertOpenAIError(await raw(srv.base, 'POST', '/v1/chat/completions', { messages: [] }), 400).param, 'messages');
  assert.equal(assertOpenAIError(await raw(srv.base, 'POST', '/v1/chat/completions', { messages: CHAT, temperature: 'hot' }), 400).param, 'temperature');
  assert.equal(assertOpenAIError(await raw(srv.base, 'POST', '/v1/chat/completions', { messages: CHAT, logit_bias: { x: 1 } }), 400).param, 'logit_bias');
  assertOpenAIError(await raw(srv.base, 'POST', '/v1/completions', { prompt: [[1], [2]] }), 400);
  // A token id outside the vocabulary: the library's INVALID_ARGUMENT, as a 400.
  assertOpenAIError(await raw(srv.base, 'POST', '/v1/completions', { prompt: [1e9], max_tokens: 2 }), 400);
  // llama-dynamic's context is 16 positions.
  const small = await start({ model: await model('llama-dynamic'), modelId: 'small' });
  const e = assertOpenAIError(await raw(small.base, 'POST', '/v1/completions', { prompt: 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen' }), 400, 'context_length_exceeded');
  assert.equal(e.param, 'prompt');
  await assert.rejects(small.client.chat.completions.create({ model: 'small', messages: [{ role: 'user', content: 'word '.repeat(40) }] }), (err) => err.status === 400 && err.code === 'context_length_exceeded');
});

test('API key: missing or wrong is a 401, right is served; /health needs none', async () => {
  const { base, client } = await start({ model: await model(M), modelId: M, apiKey: 'sekret' });
  assertOpenAIError(await raw(base, 'GET', '/v1/models'), 401, 'invalid_api_key');
  assertOpenAIError(await raw(base, 'GET', '/v1/models', undefined, { authorization: 'Bearer nope' }), 401, 'invalid_api_key');
  assert.equal((await client.models.list()).data[0].id, M);
  const wrong = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'nope', maxRetries: 0 });
  await assert.rejects(wrong.models.list(), (e) => e.status === 401);
  assert.equal((await raw(base, 'GET', '/health')).status, 200);
});

test('a body over the limit is a 413', async () => {
  const { base } = await start({ model: await model(M), modelId: M, maxBodyBytes: 1000 });
  assertOpenAIError(await raw(base, 'POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'x'.repeat(5000) }] }), 413);
});

test('200 malformed requests in a row, and raw garbage on a socket, leave the server answering right', async () => {
  const garbage = ['{', 'null', '"x"', '{"messages": 5}', '{"messages": [{"role": 1}]}', '{"prompt": {}}', '{"messages": [{"role":"user","content":[{"type":"image_url"}]}]}', '\u0000\u0001'];
  for (let i = 0; i < 200; i++) {
    const body = garbage[i % garbage.length];
    const url = i % 2 ? '/v1/completions' : '/v1/chat/completions';
    const r = await raw(srv.base, 'POST', url, body);
    assert.equal(r.status, 400, `${url} ${JSON.stringify(body)}: ${r.body}`);
  }
  await new Promise((resolve) => {
    const sock = net.connect(srv.server.address().port, '127.0.0.1', () => sock.end('NOT HTTP AT ALL\r\n\r\n'));
    sock.on('data', () => {});
    sock.on('close', resolve);
    sock.on('error', resolve);
  });
  assert.equal((await raw(srv.base, 'GET', '/health')).status, 200);
  const m = await model(M);
  const r = await srv.client.chat.completions.create({ model: M, messages: CHAT, max_tokens: 5 });
  assert.equal(r.choices[0].message.content, (await m.generate(CHAT, { maxTokens: 5 })).text);
});

test('a client that disconnects mid-stream stops its sequence at once', async () => {
  const m = await model(M);
  const ac = new AbortController();
  const s = await srv.client.chat.completions.create({ model: M, messages: [{ role: 'user', content: 'Count forever.' }], max_tokens: 5000, stream: true }, { signal: ac.signal });
  let chunks = 0;
  try {
    for await (const c of s) {
      void c;
      if (++chunks === 3) ac.abort();
    }
  } catch (e) {
    assert.equal(e.name, 'APIUserAbortError', String(e));
  }
  assert.equal(chunks, 3);
  // The next request is answered as soon as the stopped one has given its cache back: it
  // holds the prompt and a handful of tokens, not 5000.
  const t0 = Date.now();
  const r = await srv.client.chat.completions.create({ model: M, messages: CHAT, max_tokens: 4 });
  assert.equal(r.choices[0].message.content, (await m.generate(CHAT, { maxTokens: 4 })).text);
  const st = srv.server.stats();
  assert.equal(st.running, 0);
  assert.ok(st.longestCache < 100, `a cache holds ${st.longestCache} positions: the stream went on after the disconnect`);
  assert.ok(Date.now() - t0 < 30_000);
});

test('speech: WAV and PCM equal the library\'s synthesize(); streamed PCM equals its stream()', { timeout: 300_000 }, async () => {
  const { loadTTS } = require('..');
  const tts = await loadTTS(path.join(TTS_FIXTURES_DIR, 'chatterbox'));
  try {
    const { base, client } = await start({ model: await model(M), modelId: M, tts });
    const text = 'Hello there.';
    const opts = { seed: 3, maxTokens: 20 };
    const want = await tts.synthesize(text, opts);
    const wav = Buffer.from(await (await client.audio.speech.create({ model: 'tts', voice: 'alloy', input: text, response_format: 'wav', seed: 3, max_tokens: 20 })).arrayBuffer());
    assert.deepEqual(wav, want.toWav());
    const pcm = await raw(base, 'POST', '/v1/audio/speech', { input: text, voice: 'alloy', response_format: 'pcm', seed: 3, max_tokens: 20 });
    assert.equal(pcm.status, 200);
    assert.equal(pcm.body.length > 0, true);
    const pcmBytes = (await raw(base, 'POST', '/v1/audio/speech', { input: text, response_format: 'pcm', stream: true, seed: 3, max_tokens: 20 })).bytes;
    const streamed = [];
    for await (const c of tts.stream(text, opts)) streamed.push(...c.audio);
    assert.deepEqual(pcmBytes, pcm16(Float32Array.from(streamed)));
    assert.equal(Buffer.from(pcm.body, 'latin1').length, 0 + Buffer.byteLength(pcm.body, 'latin1'));
    assertOpenAIError(await raw(base, 'POST', '/v1/audio/speech', { input: text, voice: 'someone-else' }), 400);
    assertOpenAIError(await raw(base, 'POST', '/v1/audio/speech', { input: '' }), 400);
    // The English model speaks English only (language, or mlx-audio's lang_code).
    assertOpenAIError(await raw(base, 'POST', '/v1/audio/speech', { input: text, language: 'fr' }), 400);
    assertOpenAIError(await raw(base, 'POST', '/v1/audio/speech', { input: text, lang_code: 'de' }), 400);
    assertOpenAIError(await raw(srv.base, 'POST', '/v1/audio/speech', { input: text }), 404);
    // No voices folder: none listed, and no ref_audio.
    assert.deepEqual(JSON.parse((await raw(base, 'GET', '/v1/audio/voices')).body).data, []);
    assert.match(assertOpenAIError(await raw(base, 'POST', '/v1/audio/speech', { input: text, ref_audio: 'a.wav' }), 400).message, /--voices/);
  } finally {
    await tts.dispose();
  }
});

test('speech with the voices folder: a clip and a saved voice by name (WAV, streamed, ref_audio) equal the library\'s; the list; bad names, paths and clips', { timeout: 300_000 }, async () => {
  const { loadTTS } = require('..');
  const VOICE = ensureVoiceFixtures();
  const tts = await loadTTS(path.join(TTS_FIXTURES_DIR, 'chatterbox'), { s3Tokenizer: voiceTokenizerDir() });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mlx-node-voices-'));
  try {
    fs.copyFileSync(path.join(VOICE, 'pcm16_16k_mono.wav'), path.join(dir, 'anna.wav'));
    // mlx-audio's own conds of a clip (what Voice.save writes).
    fs.copyFileSync(path.join(VOICE, 'clone_pcm8_48k_mono.safetensors'), path.join(dir, 'bob.safetensors'));
    fs.writeFileSync(path.join(dir, 'broken.wav'), 'not a WAV file at all');
    fs.writeFileSync(path.join(dir, 'notes.txt'), 'not a voice');
    const { base, client, server } = await start({ model: await model(M), modelId: M, tts, ttsId: 'chatterbox', voices: dir });
    const list = await raw(base, 'GET', '/v1/audio/voices');
    assert.deepEqual(JSON.parse(list.body), { object: 'list', model: 'chatterbox', data: ['anna', 'bob', 'broken'].map((n) => ({ id: n, name: n })) });

    const text = 'Hello there.';
    const opts = { seed: 3, maxTokens: 20 };
    const speak = async (fields) => Buffer.from(await (await client.audio.speech.create({ model: 'tts', input: text, response_format: 'wav', seed: 3, max_tokens: 20, ...fields })).arrayBuffer());
    const anna = (await tts.synthesize(text, { ...opts, voice: path.join(dir, 'anna.wav') })).toWav();
    assert.deepEqual(await speak({ voice: 'anna' }), anna, 'voice: anna');
    assert.deepEqual(await speak({ ref_audio: 'anna.wav' }), anna, 'ref_audio: anna.wav');
    assert.deepEqual(await speak({ voice: 'alloy', ref_audio: path.join(dir, 'anna.wav') }), anna, 'ref_audio: its absolute path');
    const bob = (await tts.synthesize(text, { ...opts, voice: path.join(dir, 'bob.safetensors') })).toWav();
    assert.deepEqual(await speak({ voice: 'bob' }), bob, 'voice: bob');
    assert.notDeepEqual(anna, bob);
    // OpenAI's names still mean the model's own voice.
    assert.deepEqual(await speak({ voice: 'alloy' }), (await tts.synthesize(text, opts)).toWav(), 'voice: alloy');

    const streamed = [];
    for await (const c of tts.stream(text, { ...opts, voice: path.join(dir, 'anna.wav') })) streamed.push(...c.audio);
    const pcm = (await raw(base, 'POST', '/v1/audio/speech', { input: text, voice: 'anna', response_format: 'pcm', stream: true, seed: 3, max_tokens: 20 })).bytes;
    assert.deepEqual(pcm, pcm16(Float32Array.from(streamed)), 'streamed anna');

    const unknown = assertOpenAIError(await raw(base, 'POST', '/v1/audio/speech', { input: text, voice: 'carol' }), 400);
    assert.match(unknown.message, /anna, bob, broken/);
    for (const ref of ['../anna.wav', path.join(VOICE, 'pcm16_16k_mono.wav'), 'notes.txt', 'missing.wav', '/etc/passwd']) {
      assert.match(assertOpenAIError(await raw(base, 'POST', '/v1/audio/speech', { input: text, ref_audio: ref }), 400).message, /voices folder/, ref);
    }
    assert.match(assertOpenAIError(await raw(base, 'POST', '/v1/audio/speech', { input: text, voice: 'bob', ref_audio: 'anna.wav' }), 400).message, /not two different voices/);
    assert.match(assertOpenAIError(await raw(srv.base, 'POST', '/v1/audio/speech', { input: text, ref_audio: 'anna.wav' }), 404).message, /no speech model/);
    assertOpenAIError(await raw(srv.base, 'GET', '/v1/audio/voices'), 404);
    // A bad clip fails the requests that name it, streamed or not, and nothing else.
    for (const stream of [false, true]) {
      const e = assertOpenAIError(await raw(base, 'POST', '/v1/audio/speech', { input: text, voice: 'broken', stream }), 500, 'invalid_audio');
      assert.match(e.message, /voice "broken" \(broken\.wav .*could not be cloned: .*WAV/);
    }
    assert.deepEqual(await speak({ voice: 'anna' }), anna, 'after the bad clip');

    // A client that leaves a stream of a folder voice stops it (said to the end, this text
    // takes seconds: 10 s here, 15 chunks of 300-character pieces).
    await new Promise((resolve, reject) => {
      const req = http.request(`${base}/v1/audio/speech`, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
        res.once('data', () => {
          req.destroy();
          resolve();
        });
      });
      req.on('error', () => {});
      req.end(JSON.stringify({ input: 'One more sentence to say. '.repeat(60), voice: 'anna', stream: true }));
      setTimeout(() => reject(new Error('no audio came')), 60_000).unref();
    });
    const t0 = Date.now();
    while (server.stats().running > 0 && Date.now() - t0 < 20_000) await new Promise((r) => setTimeout(r, 20));
    assert.ok(Date.now() - t0 < 3000, `the stream went on for ${Date.now() - t0} ms after the disconnect`);
  } finally {
    await tts.dispose();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('voices: a missing folder, or one without a speech model, fails at startup', async () => {
  const m = await model(M);
  assert.throws(() => createServer({ model: m, tts: {}, voices: path.join(os.tmpdir(), 'no-such-voices-folder') }), /voices folder .* does not exist/);
  assert.throws(() => createServer({ model: m, tts: {}, voices: __filename }), /is not a folder/);
  assert.throws(() => createServer({ model: m, voices: __dirname }), /voices needs tts/);
});

test('SIGTERM: the server stops accepting, ends what runs and exits 0 within 10 s', { timeout: 120_000 }, async () => {
  const script = `
    const { serve } = require(${JSON.stringify(path.resolve(__dirname, '../lib/server'))});
    serve({ modelPath: ${JSON.stringify(fixturePath(M))}, port: 0 }).then(({ url, close }) => {
      process.on('SIGTERM', () => close().then(() => process.exit(0)));
      console.log(url);
    });`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise((resolve) => child.stdout.once('data', (d) => resolve(d.toString().trim())));
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
  // A long generation in flight when the signal comes.
  const s = await client.chat.completions.create({ model: 'default_model', messages: CHAT, max_tokens: 5000, stream: true });
  const it = s[Symbol.asyncIterator]();
  await it.next();
  const t0 = Date.now();
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  child.kill('SIGTERM');
  const { code } = await exited;
  assert.equal(code, 0);
  assert.ok(Date.now() - t0 < 10_000, `exit took ${Date.now() - t0} ms`);
});
