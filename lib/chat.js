'use strict';
// Chat: a conversation that keeps its KV cache between turns. Each turn renders
// the whole conversation with the chat template and generates on the chat's
// PromptCache, which serves the common prefix: only what the template added
// since the last turn is computed. Turns run one after another.
const { commonPrefix } = require('./prompt-cache');
const { MlxNodeError, invalid } = require('./errors');
const { eventStream } = require('./event-stream');

// The metadata key a saved chat keeps its messages and options under.
const CHAT_KEY = 'mlx_node_chat';
const OWN_OPTIONS = ['system', 'messages', 'templateOptions'];
// chatFromFile's way to restore what only a saved chat knows (kept off the public class).
const RESTORE = Symbol('restore');

function checkMessages(messages, where) {
  if (!Array.isArray(messages)) throw invalid(`${where} must be an array of chat messages`);
  messages.forEach((m, i) => {
    if (m === null || typeof m !== 'object' || typeof m.role !== 'string' || typeof m.content !== 'string') {
      throw invalid(`${where}[${i}] must be a message with a string role and content`);
    }
  });
  return structuredClone(messages);
}

const sameIds = (a, b) => a.length === b.length && commonPrefix(a, b) === a.length;

function toMessage(message) {
  if (typeof message === 'string') return { role: 'user', content: message };
  return checkMessages([message], 'message')[0];
}

// Generation options for a turn: the chat owns its cache.
function turnOptions(options, where) {
  if (options === undefined || options === null) return {};
  if (typeof options !== 'object' || Array.isArray(options)) throw invalid(`${where} must be an object`);
  if ('promptCache' in options) throw invalid(`${where}: a chat keeps its own prompt cache; promptCache cannot be given`);
  return options;
}

// Serializable generation defaults (what a saved chat keeps).
function storable(options) {
  const out = {};
  for (const [k, v] of Object.entries(options)) {
    if (typeof v !== 'function' && !(v instanceof AbortSignal)) out[k] = v;
  }
  return out;
}


class Chat {
  #model;
  #cache;
  #messages;
  #initial;
  // What the held ids stand for in a rendering of the conversation, after a turn: its
  // rendered input, then its reply as result.text shows it ({ text, ids }); null if unknown.
  #held = null;
  #templateOptions;
  #defaults;
  #tail = Promise.resolve();
  #disposed = false;

  constructor(model, cache, options = {}) {
    if (options === null || typeof options !== 'object' || Array.isArray(options)) throw invalid('options must be an object');
    const { system, messages, templateOptions, ...defaults } = options;
    if (system !== undefined && typeof system !== 'string') throw invalid('option system must be a string');
    const initial = messages === undefined ? [] : checkMessages(messages, 'option messages');
    if (system !== undefined) initial.unshift({ role: 'system', content: system });
    if (templateOptions !== undefined && (templateOptions === null || typeof templateOptions !== 'object')) {
      throw invalid('option templateOptions must be an object');
    }
    this.#model = model;
    this.#cache = cache;
    this.#initial = initial;
    this.#messages = structuredClone(initial);
    this.#templateOptions = { ...(templateOptions ?? {}) };
    delete this.#templateOptions.addGenerationPrompt;
    this.#defaults = turnOptions(defaults, 'options');
  }

  get messages() {
    return structuredClone(this.#messages);
  }

  get disposed() {
    return this.#disposed || this.#cache.disposed;
  }

  // The cache itself, e.g. to read its length or tokens.
  get promptCache() {
    return this.#cache;
  }

  #live() {
    if (this.disposed) throw new MlxNodeError('DISPOSED', 'the chat has been disposed');
  }

  #render(messages, addGenerationPrompt) {
    return this.#model.applyChatTemplate(messages, { ...this.#templateOptions, addGenerationPrompt });
  }

  #ids(messages, addGenerationPrompt) {
    return this.#model.encode(this.#render(messages, addGenerationPrompt), { addSpecialTokens: false });
  }

  // A turn's input: the conversation rendered with the generation prompt, and its ids.
  // Where that text starts with what the held ids stand for (the last turn's input and the
  // reply as generated), they stay and only the rest is encoded, so the model continues from
  // its own reply ids, as mlx_lm.chat and llama.cpp do. Encoding the whole text again would
  // give other ids wherever a reply does not encode back to the ids it was generated as (BPE
  // merges the pieces, or the detokenizer dropped the space its first id starts with), and
  // everything from there would be computed again. Otherwise (a template that rewrites
  // earlier turns, a stop string cut from the reply, reset()) the whole text is encoded and
  // the cache serves the common prefix.
  #turnInput(messages) {
    const text = this.#render(messages, true);
    const held = this.#cache.tokens;
    const kept = held.length > 0 && held.length === this.#cache.length ? this.#heldPrefix(text, held) : null;
    const rest = kept === null ? text : text.slice(kept);
    const ids = this.#model.encode(rest, { addSpecialTokens: false });
    return { text, ids: kept === null ? ids : [...held, ...ids] };
  }

  // How much of `text` the held ids stand for, or null.
  #heldPrefix(text, held) {
    const known = this.#held;
    if (known !== null && sameIds(known.ids, held) && text.startsWith(known.text)) return known.text.length;
    // A loaded cache, or ids left by an aborted turn: their own text.
    const own = this.#model.decode(held);
    return text.startsWith(own) ? own.length : null;
  }

  // After a turn: its input stands for `text`, and the reply ids held after it for
  // result.text, the reply's message (the detokenizer's text, which drops the space the first
  // id starts with, as MLX-LM's does), then the EOS where one ended it (held, but not in
  // result.tokens). A reply cut by a stop string has ids past its text: nothing is known.
  #afterTurn(text, input, r) {
    const held = this.#cache.tokens;
    const reply = held.slice(input);
    let shown = null;
    if (r.finishReason === 'length' && sameIds(reply, r.tokens)) shown = r.text;
    else if (r.finishReason === 'stop' && reply.length === r.tokens.length + 1 && sameIds(reply.slice(0, -1), r.tokens)) {
      shown = r.text + this.#model.decode(reply.slice(-1));
    }
    this.#held = shown === null ? null : { text: text + shown, ids: held };
  }

  // Runs `turn` after the turns queued before it.
  #enqueue(turn) {
    const run = this.#tail.then(turn);
    this.#tail = run.catch(() => {});
    return run;
  }

  // After a failed or aborted turn: the cache back to what it shared with the
  // previous turn's (its messages were never changed).
  #rollback(before) {
    try {
      const now = this.#cache.tokens;
      this.#cache.trim(now.length - commonPrefix(before, now));
    } catch {
      // A disposed cache or model: nothing left to restore.
    }
  }

  #start(message, options, onItem) {
    this.#live();
    const msg = toMessage(message);
    const opts = { ...this.#defaults, ...turnOptions(options, 'options'), promptCache: this.#cache };
    let inner = null;
    let stopped = false;
    const result = this.#enqueue(async () => {
      this.#live();
      opts.signal?.throwIfAborted();
      const messages = [...this.#messages, msg];
      const { text, ids } = this.#turnInput(messages);
      const before = this.#cache.tokens;
      try {
        const s = this.#model.stream(ids, opts);
        inner = s[Symbol.asyncIterator]();
        if (stopped) await inner.return();
        for (;;) {
          const { value, done } = await inner.next();
          if (done) break;
          onItem?.(value);
        }
        const r = await s.result;
        if (r.finishReason === 'abort') {
          this.#rollback(before);
        } else {
          this.#messages = [...messages, { role: 'assistant', content: r.text }];
          this.#afterTurn(text, ids.length, r);
        }
        return r;
      } catch (e) {
        this.#rollback(before);
        throw e;
      }
    });
    return {
      result,
      abort: () => {
        stopped = true;
        inner?.return();
      },
    };
  }

  // Appends `message` (a string is a user message) and the reply.
  async send(message, options) {
    return this.#start(message, options).result;
  }

  stream(message, options) {
    return eventStream((onItem) => this.#start(message, options, onItem));
  }

  // Back to `messages` (default: the ones the chat was made with). The cache
  // stays: the next turn reuses what it shares with the new conversation.
  reset(messages) {
    this.#live();
    this.#messages = messages === undefined ? structuredClone(this.#initial) : checkMessages(messages, 'messages');
  }

  // Messages, options and cache in one MLX-LM prompt-cache file.
  async save(path) {
    this.#live();
    await this.#enqueue(async () => {
      if (this.#cache.length === 0) {
        if (this.#messages.length === 0) throw invalid('the chat is empty: there is nothing to save');
        await this.#cache.prefill(this.#ids(this.#messages, false));
      }
      const chat = {
        messages: this.#messages,
        initial: this.#initial,
        templateOptions: this.#templateOptions,
        options: storable(this.#defaults),
        // Only while the cache still holds the ids it was known for.
        heldText: this.#held !== null && sameIds(this.#held.ids, this.#cache.tokens) ? this.#held.text : undefined,
      };
      await this.#cache.save(path, { [CHAT_KEY]: JSON.stringify(chat) });
    });
  }

  [RESTORE](saved) {
    this.reset(saved.messages);
    // The file holds the cache's ids (PromptCache.save), which the text was saved for.
    this.#held = typeof saved.heldText === 'string' ? { text: saved.heldText, ids: this.#cache.tokens } : null;
  }

  dispose() {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#cache.dispose();
  }

  [Symbol.dispose]() {
    this.dispose();
  }
}

// A chat saved by Chat.save(), its cache already loaded.
function chatFromFile(model, cache) {
  const raw = cache.metadata[CHAT_KEY];
  let saved;
  try {
    saved = JSON.parse(raw);
    checkMessages(saved.messages, 'messages');
  } catch {
    cache.dispose();
    throw new MlxNodeError('INVALID_CACHE_FILE', `the file is a prompt cache but not a saved chat (no valid "${CHAT_KEY}" metadata)`);
  }
  const chat = new Chat(model, cache, { messages: saved.initial ?? [], templateOptions: saved.templateOptions, ...(saved.options ?? {}) });
  chat[RESTORE](saved);
  return chat;
}

module.exports = { Chat, chatFromFile, OWN_OPTIONS };
