'use strict';
// POST /v1/chat/completions and /v1/completions on one model: OpenAI's request and
// response shapes over LanguageModel.stream(), with prompt caches from the pool.
const { randomUUID } = require('node:crypto');
const { MlxNodeError } = require('../errors');
const { HttpError, badRequest, sendJson, eventStream } = require('./http');
const { generateOptions, includeUsage, number } = require('./params');
const { ReplyParser } = require('./reply');

const now = () => Math.floor(Date.now() / 1000);

// A library error as an HTTP one: what the caller got wrong is a 400.
function httpError(e) {
  if (e instanceof HttpError) return e;
  if (e instanceof MlxNodeError && (e.code === 'INVALID_ARGUMENT' || e.code === 'UNSUPPORTED_MODEL')) return badRequest(e.message, null, e.code.toLowerCase());
  return new HttpError(500, e && e.message ? e.message : String(e), { code: e && e.code ? String(e.code).toLowerCase() : null });
}

function contentText(content, where) {
  if (content === null || content === undefined) return '';
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((p, i) => {
        if (p && p.type === 'text' && typeof p.text === 'string') return p.text;
        throw badRequest(`${where}.content[${i}]: only text parts are supported`, 'messages');
      })
      .join('');
  }
  throw badRequest(`${where}.content must be a string or an array of text parts`, 'messages');
}

// OpenAI messages as chat templates take them: text content, tool-call arguments as objects.
function chatMessages(messages) {
  if (!Array.isArray(messages) || messages.length === 0) throw badRequest("'messages' must be a non-empty array", 'messages');
  return messages.map((m, i) => {
    if (m === null || typeof m !== 'object' || typeof m.role !== 'string') throw badRequest(`messages[${i}] needs a string 'role'`, 'messages');
    const out = { ...m, content: contentText(m.content, `messages[${i}]`) };
    if (Array.isArray(m.tool_calls)) {
      out.tool_calls = m.tool_calls.map((c) => {
        const fn = c && c.function ? { ...c.function } : {};
        if (typeof fn.arguments === 'string') {
          try {
            fn.arguments = JSON.parse(fn.arguments);
          } catch {
            // Left as text: the template shows it as it is.
          }
        }
        return { ...c, function: fn };
      });
    }
    return out;
  });
}

function logprobOptions(body, chat) {
  if (chat) {
    if (body.logprobs !== undefined && body.logprobs !== null && typeof body.logprobs !== 'boolean') throw badRequest("'logprobs' must be a boolean", 'logprobs');
    const top = number(body, 'top_logprobs', 0, 20, { integer: true });
    if (top !== undefined && !body.logprobs) throw badRequest("'top_logprobs' needs 'logprobs': true", 'top_logprobs');
    return body.logprobs ? { logprobs: true, topLogprobs: top ?? 0 } : {};
  }
  // Completions: logprobs is the number of top entries, 0..5.
  const k = number(body, 'logprobs', 0, 5, { integer: true });
  return k === undefined ? {} : { logprobs: true, topLogprobs: k };
}

function tokenText(ctx, id) {
  return ctx.model.decode([id]);
}

function chatLogprob(ctx, token, logprob, top) {
  const text = tokenText(ctx, token);
  return {
    token: text,
    logprob,
    bytes: [...Buffer.from(text, 'utf8')],
    top_logprobs: (top ?? []).map((t) => {
      const s = tokenText(ctx, t.token);
      return { token: s, logprob: t.logprob, bytes: [...Buffer.from(s, 'utf8')] };
    }),
  };
}

function usage(r) {
  return {
    prompt_tokens: r.promptTokens,
    completion_tokens: r.generationTokens,
    total_tokens: r.promptTokens + r.generationTokens,
    prompt_tokens_details: { cached_tokens: r.cachedTokens },
  };
}

function checkContext(ctx, ids, maxTokens, param) {
  const limit = ctx.model.info.contextLength;
  if (ids.length >= limit) {
    throw badRequest(`the prompt is ${ids.length} tokens; this model's context is ${limit} tokens`, param, 'context_length_exceeded');
  }
  return Math.min(maxTokens, limit - ids.length);
}

// Runs one generation for `res`: aborted when the client goes away, on a pooled cache.
async function generate(ctx, req, res, input, ids, options, onChunk) {
  const abort = new AbortController();
  const gone = () => {
    if (!res.writableFinished) abort.abort();
  };
  res.on('close', gone);
  ctx.running.add(abort);
  const cache = ctx.pool.checkout(ids);
  try {
    const s = ctx.model.stream(input, { ...options, promptCache: cache, signal: abort.signal, stopOnAbortSignal: true });
    for await (const chunk of s) onChunk?.(chunk);
    return await s.result;
  } finally {
    ctx.running.delete(abort);
    res.off('close', gone);
    ctx.pool.checkin(cache);
  }
}

// chat_template_kwargs reach the template as mlx_lm.server passes them to apply_chat_template:
// every key as a template variable, enable_thinking through its own option (also accepted at the
// top level, as vLLM and others send it).
function templateKwargs(body) {
  const kwargs = body.chat_template_kwargs ?? {};
  if (typeof kwargs !== 'object' || Array.isArray(kwargs)) throw badRequest("'chat_template_kwargs' must be an object", 'chat_template_kwargs');
  const { enable_thinking: thinking, ...variables } = kwargs;
  // apply_chat_template's own parameters (passing one again is a TypeError in transformers).
  const reserved = Object.keys(variables).find((k) => ['messages', 'tools', 'documents', 'add_generation_prompt'].includes(k));
  if (reserved) throw badRequest(`'chat_template_kwargs' cannot set '${reserved}'`, 'chat_template_kwargs');
  const enableThinking = thinking ?? body.enable_thinking;
  if (enableThinking !== undefined && typeof enableThinking !== 'boolean') throw badRequest("'enable_thinking' must be a boolean", 'chat_template_kwargs');
  return { enableThinking, variables: Object.keys(variables).length ? variables : undefined };
}

async function chatCompletions(ctx, body, req, res) {
  const messages = chatMessages(body.messages);
  if (body.tools !== undefined && body.tools !== null && !Array.isArray(body.tools)) throw badRequest("'tools' must be an array", 'tools');
  const tools = body.tool_choice === 'none' || !body.tools || body.tools.length === 0 ? undefined : body.tools;
  const { enableThinking, variables } = templateKwargs(body);
  const options = { ...generateOptions(body), ...logprobOptions(body, true) };
  const stream = body.stream === true;
  const usageChunk = stream && includeUsage(body);
  let prompt;
  try {
    prompt = ctx.model.applyChatTemplate(messages, { addGenerationPrompt: true, tools, enableThinking, variables });
  } catch (e) {
    throw badRequest(`the chat template could not render these messages: ${e.message}`, 'messages');
  }
  const ids = ctx.model.encode(prompt, { addSpecialTokens: false });
  options.maxTokens = checkContext(ctx, ids, options.maxTokens, 'messages');
  const parser = new ReplyParser({ thinking: /<think>\s*$/.test(prompt), toolFormat: tools ? ctx.toolFormat() : null });
  const id = `chatcmpl-${randomUUID()}`;
  const created = now();
  const head = { id, object: 'chat.completion.chunk', created, model: ctx.modelId };

  if (!stream) {
    const lps = [];
    const r = await generate(ctx, req, res, ids, ids, options, (c) => {
      if (c.logprob !== undefined) lps.push(chatLogprob(ctx, c.token, c.logprob, c.topLogprobs));
    });
    const a = parser.push(r.text);
    const b = parser.end();
    const content = a.content + b.content;
    const reasoning = a.reasoning + b.reasoning;
    const calls = parser.calls;
    const message = { role: 'assistant', content: calls.length && !content.trim() ? null : content };
    if (reasoning) message.reasoning_content = reasoning;
    if (calls.length) message.tool_calls = calls;
    sendJson(res, 200, {
      id,
      object: 'chat.completion',
      created,
      model: ctx.modelId,
      choices: [{ index: 0, message, logprobs: options.logprobs ? { content: lps } : null, finish_reason: calls.length ? 'tool_calls' : r.finishReason }],
      usage: usage(r),
    });
    return;
  }

  const sse = eventStream(res);
  let callIndex = 0;
  const send = (delta, logprobs = null) => {
    if (delta.tool_calls) delta.tool_calls = delta.tool_calls.map((c) => ({ index: callIndex++, ...c }));
    sse.send({ ...head, choices: [{ index: 0, delta, logprobs, finish_reason: null }] });
  };
  const deltaOf = (o) => {
    const d = {};
    if (o.reasoning) d.reasoning_content = o.reasoning;
    if (o.content) d.content = o.content;
    if (o.toolCalls.length) d.tool_calls = o.toolCalls;
    return d;
  };
  send({ role: 'assistant', content: '' });
  let r;
  try {
    r = await generate(ctx, req, res, ids, ids, options, (c) => {
      const d = deltaOf(parser.push(c.text));
      const lp = c.logprob !== undefined ? { content: [chatLogprob(ctx, c.token, c.logprob, c.topLogprobs)] } : null;
      if (Object.keys(d).length || lp) send(d, lp);
    });
  } catch (e) {
    // Headers are out: the error goes as an event, then the stream ends.
    sse.error(httpError(e));
    sse.done();
    return;
  }
  const rest = deltaOf(parser.end());
  if (Object.keys(rest).length) send(rest);
  if (r.finishReason === 'abort') {
    res.end();
    return;
  }
  sse.send({ ...head, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: parser.calls.length ? 'tool_calls' : r.finishReason }] });
  if (usageChunk) sse.send({ ...head, choices: [], usage: usage(r) });
  sse.done();
}

function completionPrompt(prompt) {
  if (typeof prompt === 'string') return prompt;
  if (Array.isArray(prompt) && prompt.length === 1 && typeof prompt[0] === 'string') return prompt[0];
  if (Array.isArray(prompt) && prompt.length > 0 && prompt.every((t) => Number.isInteger(t) && t >= 0)) return prompt;
  if (Array.isArray(prompt) && prompt.length === 1 && Array.isArray(prompt[0])) return completionPrompt(prompt[0]);
  throw badRequest("'prompt' must be a string or an array of token ids (one prompt per request)", 'prompt');
}

async function completions(ctx, body, req, res) {
  const input = completionPrompt(body.prompt);
  if (body.echo) throw badRequest("'echo' is not supported", 'echo');
  if (body.suffix !== undefined && body.suffix !== null) throw badRequest("'suffix' is not supported", 'suffix');
  const options = { ...generateOptions(body), ...logprobOptions(body, false) };
  const stream = body.stream === true;
  const usageChunk = stream && includeUsage(body);
  const ids = typeof input === 'string' ? ctx.model.encode(input) : input;
  options.maxTokens = checkContext(ctx, ids, options.maxTokens, 'prompt');
  const id = `cmpl-${randomUUID()}`;
  const created = now();
  const head = { id, object: 'text_completion', created, model: ctx.modelId };
  const lpOf = (items) => {
    let offset = 0;
    const out = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
    for (const { token, logprob, top } of items) {
      const text = tokenText(ctx, token);
      out.tokens.push(text);
      out.token_logprobs.push(logprob);
      out.top_logprobs.push(Object.fromEntries((top ?? []).map((t) => [tokenText(ctx, t.token), t.logprob])));
      out.text_offset.push(offset);
      offset += text.length;
    }
    return out;
  };
  if (!stream) {
    const items = [];
    const r = await generate(ctx, req, res, input, ids, options, (c) => {
      if (c.logprob !== undefined) items.push({ token: c.token, logprob: c.logprob, top: c.topLogprobs });
    });
    sendJson(res, 200, {
      ...head,
      choices: [{ index: 0, text: r.text, logprobs: options.logprobs ? lpOf(items) : null, finish_reason: r.finishReason }],
      usage: usage(r),
    });
    return;
  }
  const sse = eventStream(res);
  let r;
  try {
    r = await generate(ctx, req, res, input, ids, options, (c) => {
      const lp = c.logprob !== undefined ? lpOf([{ token: c.token, logprob: c.logprob, top: c.topLogprobs }]) : null;
      sse.send({ ...head, choices: [{ index: 0, text: c.text, logprobs: lp, finish_reason: null }] });
    });
  } catch (e) {
    sse.error(httpError(e));
    sse.done();
    return;
  }
  if (r.finishReason === 'abort') {
    res.end();
    return;
  }
  sse.send({ ...head, choices: [{ index: 0, text: '', logprobs: null, finish_reason: r.finishReason }] });
  if (usageChunk) sse.send({ ...head, choices: [], usage: usage(r) });
  sse.done();
}

module.exports = { chatCompletions, completions, httpError, chatMessages };
