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

// Messages each template refuses with raise_exception.
const HARMONY_REJECTED = [
  { role: 'user', content: 'Hi' },
  { role: 'assistant', content: '<|channel|>analysis<|message|>oops' },
];

module.exports = { TOOLS, GEMMA4, HARMONY, HARMONY_REJECTED };
