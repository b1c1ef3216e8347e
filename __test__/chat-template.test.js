'use strict';
// applyChatTemplate byte-identical to transformers' apply_chat_template(tokenize=False)
// on the Qwen3 template, and encode/decode equal to the tokenizer MLX-LM loads.
const test = require('node:test');
const assert = require('node:assert/strict');
const { runReference } = require('./ref/ref');
const { fixtures, model, disposeModels } = require('./helpers');
const { TOOLS } = require('./template-cases');

const M = 'qwen3-f32';

const THINK_ANSWER = '<think>\nThe user wants a greeting.\nKeep it short.\n</think>\n\nHello there!';

// [label, messages, options]
const CONVERSATIONS = [
  ['single user turn', [{ role: 'user', content: 'Hi!' }], { addGenerationPrompt: true }],
  ['system + user', [{ role: 'system', content: 'You are a helpful assistant.' }, { role: 'user', content: 'What is 2+2?' }], { addGenerationPrompt: true }],
  [
    'multi-turn, earlier assistant <think> is dropped',
    [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Say hello.' },
      { role: 'assistant', content: THINK_ANSWER },
      { role: 'user', content: 'Again, in French.' },
    ],
    { addGenerationPrompt: true },
  ],
  [
    'final assistant turn keeps its <think>, no generation prompt',
    [{ role: 'user', content: 'Say hello.' }, { role: 'assistant', content: THINK_ANSWER }],
    { addGenerationPrompt: false },
  ],
  [
    'assistant with reasoning_content after the last query',
    [{ role: 'user', content: 'Why?' }, { role: 'assistant', content: 'Because.', reasoning_content: '\nThinking hard.\n' }],
    { addGenerationPrompt: false },
  ],
  ['enableThinking false', [{ role: 'user', content: 'Quick answer: capital of Italy?' }], { addGenerationPrompt: true, enableThinking: false }],
  ['enableThinking true', [{ role: 'user', content: 'Quick answer: capital of Italy?' }], { addGenerationPrompt: true, enableThinking: true }],
  ['enableThinking false without generation prompt', [{ role: 'user', content: 'x' }], { addGenerationPrompt: false, enableThinking: false }],
  [
    'tools with a system message',
    [{ role: 'system', content: 'You can call tools.' }, { role: 'user', content: 'Weather in Paris?' }],
    { addGenerationPrompt: true, tools: TOOLS },
  ],
  ['tools without a system message', [{ role: 'user', content: 'Search for cats.' }], { addGenerationPrompt: true, tools: TOOLS }],
  [
    'tool calls and tool responses',
    [
      { role: 'user', content: 'Weather in Paris and Tokyo?' },
      {
        role: 'assistant',
        content: '',
        tool_calls: [
          { type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris', unit: 'celsius' } } },
          { type: 'function', function: { name: 'get_weather', arguments: '{"city": "東京"}' } },
        ],
      },
      { role: 'tool', content: '{"temp": 18}' },
      { role: 'tool', content: '{"temp": 25}' },
    ],
    { addGenerationPrompt: true, tools: TOOLS },
  ],
  [
    'tool role text in content, multi-step',
    [
      { role: 'user', content: 'Look it up.' },
      { role: 'assistant', content: '<think>\nneed a tool\n</think>\n\n<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>' },
      { role: 'tool', content: 'result one' },
      { role: 'assistant', content: '<think>\nnow answer\n</think>\n\nDone.' },
    ],
    { addGenerationPrompt: false, tools: TOOLS },
  ],
  [
    'user content that is a <tool_response>',
    [{ role: 'user', content: 'Q' }, { role: 'assistant', content: '<think>\nr\n</think>\n\nA' }, { role: 'user', content: '<tool_response>\nok\n</tool_response>' }],
    { addGenerationPrompt: true },
  ],
  [
    'unicode, quotes, backslashes and template-like text',
    [{ role: 'user', content: 'Émoji 😀👨‍👩‍👧, 中文, "quotes", \\back\\slash, {{ not a var }} {% raw %} <|im_end|> end' }],
    { addGenerationPrompt: true },
  ],
  ['a system message in the middle', [{ role: 'user', content: 'a' }, { role: 'system', content: 'b' }, { role: 'user', content: 'c' }], { addGenerationPrompt: true }],
  ['no options (addGenerationPrompt defaults to false)', [{ role: 'user', content: 'Hi!' }], undefined],
];

const STRINGS = [
  'Hello, world!',
  '  leading and trailing spaces  ',
  'emoji 😀👍🏽🫠 family 👨‍👩‍👧 flag 🇫🇷',
  '中文字符测试，日本語のテキスト、한국어 문장',
  'mixed\nnewlines\r\n\ttabs   and    runs',
  '<|im_start|>user\nhi<|im_end|>\n<|endoftext|>',
  '<think>\nreasoning\n</think>',
  "don't can't I'll we're",
  '1234567890 3.14159 -42 1e-9',
  'café naïve Ångström مرحبا بالعالم Привет',
  'a'.repeat(200),
  '',
];

const DECODES = [
  [151644, 872, 198, 9707, 0, 151645, 198],
  [82912], // the first half of 龘: one replacement character
  [9284, 104, 254, 9284, 104], // 🫠 then an incomplete one
  [785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13],
  [151667, 198, 151668], // <think> \n </think>
  [],
];

let refs;
const cases = [];
test.before(async () => {
  fixtures();
  for (const [, messages, options] of CONVERSATIONS) {
    const o = options || {};
    cases.push({ mode: 'chat_template', model: M, messages, addGenerationPrompt: o.addGenerationPrompt, enableThinking: o.enableThinking, tools: o.tools });
  }
  for (const text of STRINGS) {
    cases.push({ mode: 'encode', model: M, text });
    cases.push({ mode: 'encode', model: M, text, addSpecialTokens: false });
  }
  for (const tokens of DECODES) cases.push({ mode: 'decode', model: M, tokens });
  refs = await runReference(cases);
  const failed = refs.map((r, i) => (r.error ? `${i}: ${r.error}` : null)).filter(Boolean);
  assert.deepEqual(failed, [], 'reference cases failed');
});
test.after(disposeModels);

CONVERSATIONS.forEach(([label, messages, options], i) => {
  test(`applyChatTemplate: ${label}`, async () => {
    const m = await model(M);
    const got = options === undefined ? m.applyChatTemplate(messages) : m.applyChatTemplate(messages, options);
    assert.equal(got, refs[i].text);
  });
});

test('applyChatTemplate: enableThinking unset, true and false differ as in transformers', async () => {
  const m = await model(M);
  const msgs = [{ role: 'user', content: 'hi' }];
  const unset = m.applyChatTemplate(msgs, { addGenerationPrompt: true });
  assert.equal(unset, '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n');
  assert.equal(m.applyChatTemplate(msgs, { addGenerationPrompt: true, enableThinking: true }), unset);
  assert.equal(m.applyChatTemplate(msgs, { addGenerationPrompt: true, enableThinking: false }), `${unset}<think>\n\n</think>\n\n`);
});

test('encode equals the reference tokenizer (with and without special tokens)', async () => {
  const m = await model(M);
  const base = CONVERSATIONS.length;
  STRINGS.forEach((text, j) => {
    assert.deepEqual(m.encode(text), refs[base + 2 * j].tokens, `encode(${JSON.stringify(text)})`);
    assert.deepEqual(m.encode(text, { addSpecialTokens: false }), refs[base + 2 * j + 1].tokens, `encode(${JSON.stringify(text)}, no special tokens)`);
  });
});

test('decode equals the reference tokenizer', async () => {
  const m = await model(M);
  const base = CONVERSATIONS.length + 2 * STRINGS.length;
  DECODES.forEach((tokens, j) => {
    assert.equal(m.decode(tokens), refs[base + j].text, `decode(${JSON.stringify(tokens)})`);
  });
});

test('decode(encode(s)) round-trips', async () => {
  const m = await model(M);
  for (const s of STRINGS) assert.equal(m.decode(m.encode(s)), s);
});

test('chat input to generate() uses the template with the generation prompt', async () => {
  const m = await model(M);
  const msgs = CONVERSATIONS[1][1];
  const text = m.applyChatTemplate(msgs, { addGenerationPrompt: true });
  const ids = m.encode(text, { addSpecialTokens: false });
  const a = await m.generate(msgs, { maxTokens: 8 });
  const b = await m.generate(ids, { maxTokens: 8 });
  assert.equal(a.promptTokens, ids.length);
  assert.deepEqual(a.tokens, b.tokens);
});
