'use strict';
// Conversations that chat-template tests render with our applyChatTemplate and with transformers'
// apply_chat_template: OpenAI-style tools, and per template family the messages and options that
// reach each branch of the family's own template.

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Get the current weather in a city (°C) — e.g. 東京',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', description: 'City name' },
          unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
        },
        required: ['city'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'search',
      description: 'Search the web for "quoted" text and \\ backslashes',
      parameters: { type: 'object', properties: { query: { type: 'string' }, limit: { type: 'integer', minimum: 1 } }, required: ['query'] },
    },
  },
];

// Parameter schemas past flat strings: arrays of strings and of objects, nested objects,
// nullable values, defaults, a union.
const PLAN_TRIP = {
  type: 'function',
  function: {
    name: 'plan_trip',
    description: 'Plan a trip',
    parameters: {
      type: 'object',
      properties: {
        stops: { type: 'array', items: { type: 'string' }, description: 'Cities in order' },
        legs: {
          type: 'array',
          items: { type: 'object', properties: { from: { type: 'string' }, days: { type: 'integer' } }, required: ['from'] },
        },
        budget: { type: 'number', nullable: true, default: 100 },
        mode: { type: 'string', enum: ['train', 'car'], default: 'train' },
        options: { type: 'object', properties: { pets: { type: 'boolean' } }, required: ['pets'] },
        when: { oneOf: [{ type: 'string', description: 'a date' }, { type: 'integer' }] },
      },
      required: ['stops'],
    },
  },
};
const ALL_TOOLS = [...TOOLS, PLAN_TRIP];

const SYSTEM_CHAT = [
  { role: 'system', content: 'You are a terse assistant.' },
  { role: 'user', content: 'Write a haiku about the sea. 海と空 🌊' },
  { role: 'assistant', content: 'Waves fold into foam.' },
  { role: 'user', content: 'Another, please.' },
];
const CALLS = [
  { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris', unit: 'celsius' } } },
  { id: 'call_2', type: 'function', function: { name: 'search', arguments: '{"query": "Lyon"}' } },
];
const TRIP_CALL = {
  id: 'call_3',
  type: 'function',
  function: { name: 'plan_trip', arguments: { stops: ['Paris', 'Lyon'], legs: [{ from: 'Paris', days: 2 }], budget: 120.5, options: { pets: true } } },
};

// [label, messages, options] for Gemma 4's templates (google-gemma-4-31B-it.jinja and its
// interleaved variant).
const GEMMA4 = [
  ['system, multi-turn, generation prompt', SYSTEM_CHAT, { addGenerationPrompt: true }],
  [
    "the model's thought channel stripped from its content, no generation prompt",
    [{ role: 'user', content: '  Capital of France?  ' }, { role: 'assistant', content: '<|channel>thought\nEasy.<channel|>Paris.' }],
    { addGenerationPrompt: false },
  ],
  ['enableThinking true', [{ role: 'user', content: 'Why is the sky blue?' }], { addGenerationPrompt: true, enableThinking: true }],
  ['enableThinking false', [{ role: 'user', content: 'Why is the sky blue?' }], { addGenerationPrompt: true, enableThinking: false }],
  [
    'tools with a system message, thinking',
    [{ role: 'system', content: 'Use tools.' }, { role: 'user', content: 'Plan a trip.' }],
    { addGenerationPrompt: true, tools: ALL_TOOLS, enableThinking: true },
  ],
  [
    'tool calls with reasoning, tool results by id, then the answer',
    [
      { role: 'user', content: 'Weather in Paris, and search Lyon.' },
      { role: 'assistant', content: '', reasoning_content: 'Two tools.', tool_calls: CALLS },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 18}' },
      { role: 'tool', tool_call_id: 'call_2', content: [{ type: 'text', text: 'Lyon is ' }, { type: 'text', text: 'nice.' }] },
      { role: 'assistant', content: 'It is 18 °C; Lyon is nice.' },
    ],
    { addGenerationPrompt: false, tools: TOOLS },
  ],
  [
    'generation prompt right after a tool result',
    [
      { role: 'user', content: 'Plan Paris to Lyon.' },
      { role: 'assistant', content: '', tool_calls: [TRIP_CALL] },
      { role: 'tool', tool_call_id: 'call_3', name: 'plan_trip', content: 'planned' },
    ],
    { addGenerationPrompt: true, tools: ALL_TOOLS },
  ],
  [
    "Gemma's tool_responses on the assistant message",
    [
      { role: 'user', content: 'Weather?' },
      {
        role: 'assistant',
        content: '',
        tool_calls: [CALLS[0]],
        tool_responses: [{ name: 'get_weather', response: { temp: 18, sky: 'clear', windy: false, hours: [1, 2] } }],
      },
    ],
    { addGenerationPrompt: true, tools: TOOLS },
  ],
  ['content parts with an image', [{ role: 'user', content: [{ type: 'text', text: ' Describe this: ' }, { type: 'image' }] }], { addGenerationPrompt: true }],
];

// [label, messages, options] for GPT-OSS's harmony template (openai-gpt-oss-120b.jinja).
const HARMONY = [
  ['system (as the developer message), multi-turn, generation prompt', SYSTEM_CHAT, { addGenerationPrompt: true }],
  [
    'a developer message, reasoning_effort and model_identity',
    [{ role: 'developer', content: 'Answer in French.' }, { role: 'user', content: 'Hello?' }],
    { addGenerationPrompt: true, variables: { reasoning_effort: 'high', model_identity: 'You are a test model.' } },
  ],
  [
    'tools and builtin_tools',
    [{ role: 'user', content: 'Plan a trip.' }],
    { addGenerationPrompt: true, tools: ALL_TOOLS, variables: { reasoning_effort: 'low', builtin_tools: ['browser', 'python'] } },
  ],
  [
    'a tool call with its analysis kept (no final answer yet)',
    [
      { role: 'user', content: 'Plan Paris to Lyon.' },
      { role: 'assistant', content: '', thinking: 'I should plan.', tool_calls: [TRIP_CALL] },
      { role: 'tool', content: '{"ok": true, "note": "planned \\"fast\\""}' },
    ],
    { addGenerationPrompt: true, tools: ALL_TOOLS },
  ],
  [
    'tool calls then a final answer with its reasoning, no generation prompt',
    [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: 'Calling the tool.', tool_calls: [CALLS[1]] },
      { role: 'tool', content: 'results' },
      { role: 'assistant', content: 'Sunny.', reasoning_content: 'The tool said sunny.' },
    ],
    { addGenerationPrompt: false, tools: TOOLS },
  ],
  [
    'an earlier answer without its reasoning',
    [
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello!', thinking: 'dropped' },
      { role: 'user', content: 'Bye' },
    ],
    { addGenerationPrompt: true },
  ],
];

// [label, messages, options] for Phi-3.5's template (microsoft-Phi-3.5-mini-instruct.jinja).
const PHI3 = [
  ['system, multi-turn, generation prompt', SYSTEM_CHAT, { addGenerationPrompt: true }],
  [
    'an empty system message left out, no generation prompt (the eos token instead)',
    [{ role: 'system', content: '' }, { role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello!' }],
    { addGenerationPrompt: false },
  ],
];

// [label, messages, options] for SmolLM3's template (HuggingFaceTB-SmolLM3-3B.jinja, Unsloth's
// edit: no tools; thinking on unless enable_thinking is false or the system message says /no_think).
const SMOLLM3 = [
  ['system, multi-turn, generation prompt (thinking by default)', SYSTEM_CHAT, { addGenerationPrompt: true }],
  [
    'enableThinking false: an empty think block on every answer',
    [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: '\nHello!' }, { role: 'user', content: 'Bye' }],
    { addGenerationPrompt: true, enableThinking: false },
  ],
  [
    '/no_think in the system message over enableThinking true',
    [{ role: 'system', content: 'Be brief. /no_think' }, { role: 'user', content: 'Hi' }],
    { addGenerationPrompt: true, enableThinking: true },
  ],
  [
    '/think with enableThinking false, a tool result as a user turn, content parts dropped, no generation prompt',
    [
      { role: 'system', content: '/think' },
      { role: 'user', content: [{ type: 'text', text: 'parts' }] },
      { role: 'assistant', content: 'Calling.' },
      { role: 'tool', content: '{"temp": 18}' },
    ],
    { addGenerationPrompt: false, enableThinking: false },
  ],
];

// [label, messages, options] for Ministral 3's template (mistralai-Ministral-3-14B-Reasoning-2512.jinja:
// no generation prompt of its own; its default system prompt when there is none).
const MINISTRAL3 = [
  ['the default system prompt', [{ role: 'user', content: 'Hi' }], { addGenerationPrompt: true }],
  ['system, multi-turn', SYSTEM_CHAT, { addGenerationPrompt: false }],
  [
    'a thinking chunk in the system message, tools, tool calls and results, an answer with its thinking',
    [
      { role: 'system', content: [{ type: 'text', text: 'Use tools.' }, { type: 'thinking', thinking: 'Be careful.' }] },
      { role: 'user', content: 'Weather in Paris, and search Lyon.' },
      { role: 'assistant', content: '', tool_calls: [...CALLS, { ...TRIP_CALL, function: { name: 'plan_trip', arguments: '' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 18}' },
      { role: 'tool', tool_call_id: 'call_2', content: 'Lyon is nice.' },
      { role: 'assistant', content: [{ type: 'thinking', thinking: 'Both done.' }, { type: 'text', text: '18 °C; Lyon is nice.' }] },
    ],
    { addGenerationPrompt: false, tools: ALL_TOOLS },
  ],
  [
    'user content parts: text and an image (sorted by type)',
    [{ role: 'user', content: [{ type: 'text', text: 'Describe this: ' }, { type: 'image' }] }],
    { addGenerationPrompt: true },
  ],
];
// Messages it refuses: roles that do not alternate.
const MINISTRAL3_REJECTED = [
  { role: 'user', content: 'Hi' },
  { role: 'user', content: 'Hello?' },
];

// [label, messages, options] for Qwen3.5's template (Qwen3.5-4B.jinja).
const QWEN3_5 = [
  ['system, multi-turn, generation prompt', SYSTEM_CHAT, { addGenerationPrompt: true }],
  ['enableThinking false', [{ role: 'user', content: 'Why is the sky blue?' }], { addGenerationPrompt: true, enableThinking: false }],
  [
    'tools with a system message',
    [{ role: 'system', content: 'Use tools.' }, { role: 'user', content: 'Plan a trip.' }],
    { addGenerationPrompt: true, tools: ALL_TOOLS },
  ],
  [
    'tool calls with reasoning, tool results, then the answer with its thinking',
    [
      { role: 'user', content: 'Weather in Paris, and plan a trip.' },
      { role: 'assistant', content: '', reasoning_content: 'Two tools.', tool_calls: [CALLS[0], TRIP_CALL] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 18}' },
      { role: 'tool', tool_call_id: 'call_3', content: 'planned' },
      { role: 'assistant', content: '<think>\nDone.\n</think>\n\nIt is 18 °C.' },
    ],
    { addGenerationPrompt: false, tools: TOOLS },
  ],
  [
    "an earlier answer's thinking dropped, images numbered (add_vision_id)",
    [
      { role: 'user', content: [{ type: 'image' }, { type: 'text', text: 'What is this?' }] },
      { role: 'assistant', content: '<think>hmm</think>A cat.' },
      { role: 'user', content: [{ type: 'text', text: 'And this? ' }, { type: 'image' }] },
    ],
    { addGenerationPrompt: true, variables: { add_vision_id: true } },
  ],
];
// Messages it refuses: no user message.
const QWEN3_5_REJECTED = [{ role: 'system', content: 'Only a system message.' }];

// [label, messages, options] for LFM2's template (LFM2.5-Instruct.jinja, the dense lfm2 models').
const LFM2_TURNS = [
  { role: 'user', content: 'Hi' },
  { role: 'assistant', content: '<think>greet</think>\n Hello!' },
  { role: 'user', content: 'Weather?' },
  { role: 'assistant', content: '<think>use the tool</think>Calling.' },
  { role: 'tool', content: '{"temp": 18}' },
];
const LFM2 = [
  ['system, multi-turn, generation prompt', SYSTEM_CHAT, { addGenerationPrompt: true }],
  [
    'tools with a system message',
    [{ role: 'system', content: 'Use tools.' }, { role: 'user', content: 'Plan a trip.' }],
    { addGenerationPrompt: true, tools: ALL_TOOLS },
  ],
  ['thinking dropped from earlier answers, a tool result, no generation prompt', LFM2_TURNS, { addGenerationPrompt: false }],
  ['keep_past_thinking', LFM2_TURNS, { addGenerationPrompt: true, variables: { keep_past_thinking: true } }],
];

// [label, messages, options] for Llama 3.1's template (meta-llama-Llama-3.1-8B-Instruct.jinja).
const LLAMA_TOOL_TURNS = [
  { role: 'system', content: ' Be brief. ' },
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: '', tool_calls: [CALLS[0]] },
  { role: 'tool', content: '{"temp": 18}' },
  { role: 'assistant', content: 'It is 18 °C.' },
];
const LLAMA3_1 = [
  ['system, multi-turn, generation prompt', SYSTEM_CHAT, { addGenerationPrompt: true }],
  ['tools in the first user message, a tool call and its result', LLAMA_TOOL_TURNS, { addGenerationPrompt: false, tools: TOOLS }],
  [
    'tools in the system message (tools_in_user_message false), date_string',
    [{ role: 'user', content: 'Plan a trip.' }],
    { addGenerationPrompt: true, tools: ALL_TOOLS, variables: { tools_in_user_message: false, date_string: '1 Jan 2025' } },
  ],
  [
    'builtin_tools: a python_tag call, an ipython result',
    [
      { role: 'user', content: 'Search Lyon.' },
      { role: 'assistant', content: '', tool_calls: [{ type: 'function', function: { name: 'brave_search', arguments: { query: 'Lyon' } } }] },
      { role: 'ipython', content: 'results' },
    ],
    { addGenerationPrompt: true, variables: { builtin_tools: ['brave_search', 'code_interpreter'] } },
  ],
];
// Llama 3.2's (meta-llama-Llama-3.2-3B-Instruct.jinja): today's date from strftime_now unless
// date_string is given; no builtin tools.
const LLAMA3_2 = [
  ["system, multi-turn, generation prompt (today's date)", SYSTEM_CHAT, { addGenerationPrompt: true }],
  [
    'tools in the first user message, a tool call and its result, date_string',
    LLAMA_TOOL_TURNS,
    { addGenerationPrompt: false, tools: TOOLS, variables: { date_string: '1 Jan 2025' } },
  ],
];

// Messages the harmony template refuses with raise_exception.
const HARMONY_REJECTED = [
  { role: 'user', content: 'Hi' },
  { role: 'assistant', content: '<|channel|>analysis<|message|>oops' },
];

module.exports = {
  TOOLS,
  GEMMA4,
  HARMONY,
  HARMONY_REJECTED,
  PHI3,
  SMOLLM3,
  MINISTRAL3,
  MINISTRAL3_REJECTED,
  QWEN3_5,
  QWEN3_5_REJECTED,
  LFM2,
  LLAMA3_1,
  LLAMA3_2,
};
