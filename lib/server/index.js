'use strict';
// An OpenAI-compatible HTTP server over loaded models (Node's http): chat
// completions and completions (streamed or not), models, health, and speech.
// `createServer` returns a plain http.Server; `serve` loads the models, listens and
// shuts down cleanly. docs/server.md has the endpoints and what differs from OpenAI.
const http = require('node:http');
const path = require('node:path');
const { timingSafeEqual } = require('node:crypto');
const { HttpError, readJson, sendJson, sendError } = require('./http');
const { chatCompletions, completions, httpError } = require('./text');
const { speech, voices: voiceList } = require('./speech');
const { VoiceFolder } = require('./voices');
const { CachePool } = require('./cache-pool');

const MiB = 2 ** 20;

function keyMatches(header, key) {
  const m = /^Bearer\s+(.+)$/i.exec(header ?? '');
  if (!m) return false;
  const a = Buffer.from(m[1]);
  const b = Buffer.from(key);
  return a.length === b.length && timingSafeEqual(a, b);
}

// Which tool-call format the model's chat template uses: Qwen/Hermes tags, or JSON.
function toolFormatOf(model) {
  let format = null;
  return () => {
    if (format) return format;
    const probe = [{ type: 'function', function: { name: 'probe', description: 'x', parameters: { type: 'object', properties: {} } } }];
    try {
      const text = model.applyChatTemplate([{ role: 'user', content: 'x' }], { addGenerationPrompt: true, tools: probe });
      format = text.includes('<tool_call>') ? 'tagged' : 'json';
    } catch {
      format = 'json';
    }
    return format;
  };
}

/**
 * options: { model (LanguageModel), modelId?, tts? (TextToSpeech), ttsId?, voices? (a folder of
 * NAME.wav clips and NAME.safetensors saved voices), apiKey?, maxBodyBytes? (4 MiB), cacheBytes?
 * (1 GiB of idle prompt caches), cacheEntries? (16) }
 */
function createServer(options = {}) {
  const { model, tts, apiKey, maxBodyBytes = 4 * MiB, cacheBytes = 2 ** 30, cacheEntries = 16 } = options;
  if (!model || typeof model.stream !== 'function') throw new TypeError('createServer needs { model: LanguageModel }');
  if (options.voices !== undefined && !tts) throw new TypeError('createServer: voices needs tts (the speech model that speaks them)');
  const modelId = options.modelId ?? 'default_model';
  const ctx = {
    model,
    tts,
    ttsId: options.ttsId ?? 'tts',
    voices: options.voices === undefined ? null : new VoiceFolder(options.voices, tts),
    modelId,
    pool: new CachePool(model, { maxBytes: cacheBytes, maxEntries: cacheEntries }),
    running: new Set(),
    toolFormat: toolFormatOf(model),
  };
  const known = new Set([modelId, 'default_model', ...(options.aliases ?? [])]);
  const checkModel = (body) => {
    if (body.model !== undefined && body.model !== null && !known.has(body.model)) {
      throw new HttpError(404, `The model '${body.model}' does not exist; this server has '${modelId}'`, { param: 'model', code: 'model_not_found' });
    }
  };
  const routes = {
    'POST /v1/chat/completions': (body, req, res) => (checkModel(body), chatCompletions(ctx, body, req, res)),
    'POST /v1/completions': (body, req, res) => (checkModel(body), completions(ctx, body, req, res)),
    'POST /v1/audio/speech': (body, req, res) => speech(ctx, body, req, res),
  };

  const server = http.createServer(async (req, res) => {
    try {
      const url = new URL(req.url, 'http://x');
      const route = `${req.method} ${url.pathname.replace(/\/+$/, '') || '/'}`;
      if (route === 'GET /health') return sendJson(res, 200, { status: 'ok' });
      if (apiKey && !keyMatches(req.headers.authorization, apiKey)) {
        throw new HttpError(401, 'Incorrect or missing API key (Authorization: Bearer ...)', { code: 'invalid_api_key' });
      }
      if (route === 'GET /v1/models') {
        const data = [{ id: modelId, object: 'model', created: ctx.created, owned_by: 'mlx-node' }];
        return sendJson(res, 200, { object: 'list', data });
      }
      if (route === 'GET /v1/audio/voices') return sendJson(res, 200, voiceList(ctx, url));
      const handler = routes[route];
      if (!handler) {
        const known = Object.keys(routes).some((r) => r.endsWith(` ${url.pathname}`));
        throw new HttpError(known ? 405 : 404, `${known ? 'method not allowed' : 'no such endpoint'}: ${req.method} ${url.pathname}`);
      }
      const body = await readJson(req, maxBodyBytes);
      await handler(body, req, res);
    } catch (e) {
      const err = httpError(e);
      if (res.headersSent) res.destroy();
      else sendError(res, err);
      if (err.status >= 500) options.log?.(`error: ${err.message}`);
    }
  });
  ctx.created = Math.floor(Date.now() / 1000);
  // Garbage on the socket (not HTTP at all): a 400 and close, never a crash.
  server.on('clientError', (err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n');
    else socket.destroy();
  });
  // What runs and what is kept, for monitoring (and the tests).
  server.stats = () => ({ running: ctx.running.size, cachedConversations: ctx.pool.size, cacheBytes: ctx.pool.nbytes, longestCache: ctx.pool.longest });
  // Stops accepting, aborts what runs (each ends at its next token), frees the idle caches.
  server.shutdown = async (timeoutMs = 10_000) => {
    const closed = new Promise((resolve) => server.close(() => resolve()));
    for (const a of ctx.running) a.abort();
    server.closeIdleConnections?.();
    const deadline = new Promise((resolve) => setTimeout(resolve, timeoutMs).unref());
    await Promise.race([closed, deadline]);
    server.closeAllConnections?.();
    ctx.pool.clear();
  };
  return server;
}

/**
 * Loads the models and listens. options: { modelPath, ttsPath?, voicesPath? (createServer's voices),
 * host? ('127.0.0.1'), port? (8080),
 * apiKey?, maxBatch? (requests decoded together, default 8), precision? ('exact' | 'fast'; default: loadModel's), distributed? (rank 0
 * of a split model led by rank 0: loadModel's option with leader true), log?, onLoadProgress? }. Resolves to
 * { server, url, close() }.
 */
async function serve(options = {}) {
  const { loadModel, loadTTS } = require('../..');
  const { modelPath, ttsPath, voicesPath, host = '127.0.0.1', port = 8080, apiKey, log = () => {} } = options;
  if (typeof modelPath !== 'string') throw new TypeError('serve needs { modelPath }');
  if (voicesPath !== undefined && ttsPath === undefined) throw new TypeError('serve: voicesPath needs ttsPath (the speech model that speaks them)');
  // A missing voices folder fails now, before minutes of loading.
  if (voicesPath !== undefined) VoiceFolder.check(voicesPath);
  const model = await loadModel(modelPath, {
    onLoadProgress: options.onLoadProgress,
    maxBatch: options.maxBatch,
    precision: options.precision,
    distributed: options.distributed,
  });
  const tts = ttsPath ? await loadTTS(ttsPath) : undefined;
  const modelId = options.modelId ?? path.basename(path.resolve(modelPath));
  const ttsId = ttsPath ? path.basename(path.resolve(ttsPath)) : undefined;
  const server = createServer({ model, tts, ttsId, voices: voicesPath, modelId, apiKey, log, aliases: [modelPath, path.resolve(modelPath)] });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address();
  const url = `http://${addr.family === 'IPv6' ? `[${addr.address}]` : addr.address}:${addr.port}`;
  log(`serving ${modelId}`);
  let closing = null;
  const close = () => {
    closing ??= (async () => {
      await server.shutdown();
      await model.dispose();
      await tts?.dispose();
    })();
    return closing;
  };
  return { server, url, close, model, tts };
}

module.exports = { createServer, serve };
