'use strict';
// Splits generated text into what OpenAI's API returns apart: reasoning (a thinking
// model's <think>...</think>) and tool calls, in the model's own format, from the
// content. Works on streamed pieces: a tag split across pieces is held back until
// it is whole.
const { randomUUID } = require('node:crypto');

const THINK_OPEN = '<think>';
const THINK_CLOSE = '</think>';
const CALL_OPEN = '<tool_call>';
const CALL_CLOSE = '</tool_call>';
const PYTHON_TAG = '<|python_tag|>';

// The longest suffix of `text` that is a proper prefix of one of `tags` (held back).
function pendingTagLength(text, tags) {
  let best = 0;
  for (const tag of tags) {
    for (let n = Math.min(tag.length - 1, text.length); n > best; n--) {
      if (tag.startsWith(text.slice(text.length - n))) {
        best = n;
        break;
      }
    }
  }
  return best;
}

function toolCall(value) {
  if (value === null || typeof value !== 'object' || typeof value.name !== 'string') return null;
  const args = value.arguments ?? value.parameters ?? {};
  return {
    id: `call_${randomUUID().replace(/-/g, '').slice(0, 24)}`,
    type: 'function',
    function: { name: value.name, arguments: typeof args === 'string' ? args : JSON.stringify(args) },
  };
}

function parseCall(text) {
  try {
    return toolCall(JSON.parse(text.trim()));
  } catch {
    return null;
  }
}

// format: 'tagged' (Qwen / Hermes: <tool_call>{json}</tool_call>), 'json' (Llama 3.x: the
// reply is one JSON object {name, parameters}, maybe after <|python_tag|>), or null (no tools).
class ReplyParser {
  constructor({ thinking = false, toolFormat = null } = {}) {
    this.mode = thinking ? 'reasoning' : 'start';
    this.toolFormat = toolFormat;
    this.buffer = '';
    this.call = '';
    this.calls = [];
  }

  // Feeds a piece of text; returns { reasoning, content, toolCalls } to send now.
  push(piece) {
    this.buffer += piece;
    return this.#drain(false);
  }

  // Everything still held, at the end of the reply.
  end() {
    return this.#drain(true);
  }

  #drain(final) {
    const out = { reasoning: '', content: '', toolCalls: [] };
    for (;;) {
      const b = this.buffer;
      if (this.mode === 'start') {
        const t = b.trimStart();
        if (t.startsWith(THINK_OPEN)) {
          this.buffer = t.slice(THINK_OPEN.length);
          this.mode = 'reasoning';
          continue;
        }
        if (this.toolFormat === 'json' && (t.startsWith('{') || t.startsWith(PYTHON_TAG))) {
          this.mode = 'json';
          continue;
        }
        if (!final && (t.length === 0 || THINK_OPEN.startsWith(t) || (this.toolFormat === 'json' && PYTHON_TAG.startsWith(t)))) return out;
        this.mode = 'content';
        continue;
      }
      if (this.mode === 'reasoning') {
        const i = b.indexOf(THINK_CLOSE);
        if (i >= 0) {
          out.reasoning += b.slice(0, i);
          this.buffer = b.slice(i + THINK_CLOSE.length);
          this.mode = 'after-think';
          continue;
        }
        const hold = final ? 0 : pendingTagLength(b, [THINK_CLOSE]);
        out.reasoning += b.slice(0, b.length - hold);
        this.buffer = b.slice(b.length - hold);
        return out;
      }
      if (this.mode === 'after-think') {
        // The blank lines between the reasoning and the answer belong to neither.
        const t = b.replace(/^\s+/, '');
        this.buffer = t;
        if (!t && !final) return out;
        this.mode = 'start';
        continue;
      }
      if (this.mode === 'json') {
        if (!final) return out;
        const text = b.trim().replace(PYTHON_TAG, '');
        const call = parseCall(text);
        if (call) {
          this.calls.push(call);
          out.toolCalls.push(call);
        } else {
          out.content += b;
        }
        this.buffer = '';
        return out;
      }
      if (this.mode === 'call') {
        const i = b.indexOf(CALL_CLOSE);
        if (i < 0 && !final) return out;
        const inner = i >= 0 ? b.slice(0, i) : b;
        const call = parseCall(inner);
        if (call) {
          this.calls.push(call);
          out.toolCalls.push(call);
        } else {
          // Not a call after all: its text is content.
          out.content += CALL_OPEN + inner + (i >= 0 ? CALL_CLOSE : '');
        }
        this.buffer = i >= 0 ? b.slice(i + CALL_CLOSE.length) : '';
        this.mode = 'content';
        if (final && this.buffer === '') return out;
        continue;
      }
      // content
      const open = this.toolFormat === 'tagged' ? b.indexOf(CALL_OPEN) : -1;
      if (open >= 0) {
        out.content += b.slice(0, open);
        this.buffer = b.slice(open + CALL_OPEN.length);
        this.mode = 'call';
        continue;
      }
      const hold = final || this.toolFormat !== 'tagged' ? 0 : pendingTagLength(b, [CALL_OPEN]);
      out.content += b.slice(0, b.length - hold);
      this.buffer = b.slice(b.length - hold);
      return out;
    }
  }
}

module.exports = { ReplyParser, pendingTagLength };
