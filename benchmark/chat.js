#!/usr/bin/env node
'use strict';
// `npm run bench:chat`: a 10-turn chat on the 100M model, timed per turn three ways on the
// same machine, the same libmlx and the same BLAS:
//   chat      mlx-node's Chat (createChat, one turn per message): the whole conversation is
//             rendered each turn and the chat's prompt cache serves the common prefix;
//   no cache  mlx-node re-sending the whole conversation each turn (generate(ids), no
//             prompt cache): every turn processes every token again;
//   MLX-LM    MLX-LM 0.32.2 with one prompt cache kept across turns, reused by the longest
//             common prefix as mlx_lm.server does (benchmark/mlx_lm_bench.py, "chat").
// Same system prompt, user messages, greedy decoding and maxTokens. The two sides without a
// Chat get the ids the chat ran each turn (from an untimed run of the same conversation), so
// all three answer the same conversation with the same replies. Turns are interleaved (turn k of the
// three, then turn k+1), the order of the three rotating from round to round. Prints
// markdown; a default run also writes benchmark/RESULTS-chat.md. The check: with
// the chat, turn 10's prompt time is at most 1.2x turn 2's.

const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { PythonWorker } = require('./python-worker');
const { commonPrefix } = require('../lib/prompt-cache');
const { median, loadavg, argReaders } = require('./machine');
const { ROOT, MODELS_DIR, fmt, logger, warnIfBusy, newReport, checkReference, machineLines, writeRaw } = require('./common');

const MODEL = 'qwen3-100m-f32';
const RESULTS = path.join(__dirname, 'RESULTS-chat.md');

const SYSTEM = 'You are a helpful travel assistant. Answer clearly and concisely.';
// Ten user turns of one conversation, 1-3 sentences each (18 to 32 tokens with the Qwen3
// tokenizer). Turns 2 and 10, the two the check compares, are 32 tokens each, so that the
// check compares the same new text at two context lengths.
const TURNS = [
  "Hi! I'm planning a week-long trip to Japan in April and I've never been there before. Could you help me put together a rough plan?",
  "I'll land in Tokyo and fly out of Osaka ten days later. Which cities would you visit in between, and how many nights should I spend in each?",
  'That sounds good. Is the Japan Rail Pass still worth buying for a route like that, or are individual tickets cheaper now?',
  'What should I book in advance, since April is cherry blossom season and everything is probably busy?',
  "I'm vegetarian. Will it be hard to find food, and are there dishes or kinds of restaurants I should look for?",
  "How much cash should I carry each day? I've heard that many small shops and temples still don't take cards.",
  'Can you suggest a relaxed one-day itinerary for Kyoto that avoids the worst of the crowds?',
  'Are there etiquette mistakes that tourists often make on trains or in temples that I should avoid?',
  "My phone plan doesn't cover Japan. Is it better to rent a pocket Wi-Fi router or to buy an eSIM, and where do I get one?",
  'Finally, could you sum up the whole plan as a short list, day by day, so that I can send it to my travel partner before we book?',
];
const MAX_TOKENS = 32;
const ROUNDS = 3;
const CHECK = { from: 2, to: 10, max: 1.2 };
// Warm-up, untimed: two short turns on each side (pages the weights in, grows the
// allocators' caches, compiles the sampler).
const WARMUP_TURNS = ['Hello there!', 'What time is it in Tokyo?'];
const WARMUP_TOKENS = 4;

const SIDES = {
  chat: 'mlx-node Chat',
  nocache: 'mlx-node, whole conversation re-sent',
  mlxlm: 'MLX-LM + prompt cache',
};
const SIDE_KEYS = Object.keys(SIDES);

const USAGE = `usage: npm run bench:chat -- [options]
  --rounds N         timed conversations per side (default ${ROUNDS}); each cell is the median over rounds
  --max-tokens N     tokens generated per turn (default ${MAX_TOKENS}, greedy)
  --model NAME       a folder in .cache/bench-models instead of ${MODEL}, for instance
                     smollm2-135m-q4_1 (a trained model, made by npm run bench:llama); such a run
                     writes only with --out
  --out FILE         write the report there (a default run writes benchmark/RESULTS-chat.md)
  --no-build         use the addon as built (default: build it first if stale, as npm run bench)`;

const { log, fail } = logger('bench:chat');

function parseArgs(argv) {
  const a = { rounds: null, maxTokens: null, out: null, build: true, model: null };
  const { value, positive } = argReaders(argv, fail, USAGE);
  for (let i = 0; i < argv.length; i++) {
    const f = argv[i];
    if (f === '--no-build') a.build = false;
    else if (f === '--help' || f === '-h') {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    } else if (f === '--rounds') a.rounds = positive(value(i++, f), f);
    else if (f === '--max-tokens') a.maxTokens = positive(value(i++, f), f);
    else if (f === '--out') a.out = path.resolve(value(i++, f));
    else if (f === '--model') a.model = value(i++, f);
    else fail(`unknown argument ${f}\n${USAGE}`);
  }
  return a;
}

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

// ---------------------------------------------------------------- one turn per side

// Time to the first token as the caller sees it: from the call (the conversation rendered
// with the chat template and encoded, the cache's prefix found, the rest prefilled) to the
// first streamed token. chat.stream() is chat.send()'s own path (send resolves to the same
// stream's result); streaming is only how the first token's time is read.
async function timedStream(start) {
  const t0 = performance.now();
  let first = null;
  const s = start();
  for await (const _chunk of s) {
    if (first === null) first = (performance.now() - t0) / 1000;
  }
  const r = await s.result;
  const wall = (performance.now() - t0) / 1000;
  return { r, first: first ?? wall, wall };
}

function ourTurn(r, first, wall) {
  const processed = r.promptTokens - r.cachedTokens;
  return {
    tokens: r.tokens,
    text: r.text,
    finishReason: r.finishReason,
    promptTokens: r.promptTokens,
    processed,
    firstTokenSeconds: first,
    // The addon's own figure, as MLX-LM's: processed tokens / time to the first token
    // inside the generation loop (prefill and the first token).
    promptSeconds: r.promptTps > 0 ? processed / r.promptTps : NaN,
    generationTokens: r.generationTokens,
    generationTps: r.generationTps,
    wallSeconds: wall,
  };
}

class ChatSide {
  constructor(model, maxTokens) {
    this.model = model;
    this.chat = model.createChat({ system: SYSTEM, maxTokens });
  }

  async turn(message) {
    const { r, first, wall } = await timedStream(() => this.chat.stream(message));
    // The ids the turn ran (outside the timing): the start of what the cache holds.
    const input = this.chat.promptCache.tokens.slice(0, r.promptTokens);
    return { ...ourTurn(r, first, wall), cacheLength: this.chat.promptCache.length, input };
  }

  dispose() {
    this.chat.dispose();
  }
}

class NoCacheSide {
  constructor(model, maxTokens, script) {
    this.model = model;
    this.maxTokens = maxTokens;
    this.script = script;
  }

  async turn(_message, t) {
    const { r, first, wall } = await timedStream(() => this.model.stream(this.script.inputs[t], { maxTokens: this.maxTokens }));
    return ourTurn(r, first, wall);
  }

  dispose() {}
}

class MlxLmSide {
  constructor(worker, maxTokens, script) {
    this.worker = worker;
    this.maxTokens = maxTokens;
    this.script = script;
    this.reset = true;
  }

  async turn(_message, t) {
    const t0 = performance.now();
    const r = await this.worker.request({ cmd: 'chat', ids: this.script.inputs[t], options: { maxTokens: this.maxTokens }, reset: this.reset });
    const roundTrip = (performance.now() - t0) / 1000;
    this.reset = false;
    return {
      tokens: r.tokens,
      text: r.text,
      finishReason: r.finishReason,
      promptTokens: r.promptTokens,
      processed: r.processedTokens,
      firstTokenSeconds: r.firstTokenSeconds,
      promptSeconds: r.promptSeconds,
      generationTokens: r.generationTokens,
      generationTps: r.generationTps,
      wallSeconds: r.wallSeconds,
      roundTripSeconds: roundTrip,
      cacheLength: r.cacheLength,
    };
  }

  dispose() {}
}

function makeSides(model, worker, maxTokens, script) {
  return { chat: new ChatSide(model, maxTokens), nocache: new NoCacheSide(model, maxTokens, script), mlxlm: new MlxLmSide(worker, maxTokens, script) };
}

// The conversation the sides answer, run once untimed with a Chat: per turn the ids it ran
// and its messages afterwards; and what encoding the conversation again from its text each
// turn (generate(messages) on a kept cache, or mlx_lm.server) would process instead: from
// the first id where the plain encoding parts from what the cache held.
async function script(model, turns, maxTokens) {
  const chat = model.createChat({ system: SYSTEM, maxTokens });
  const out = { inputs: [], replies: [], held: [], conversations: [], plainProcessed: [], plainMatches: [] };
  try {
    for (const message of turns) {
      const held = chat.promptCache.tokens;
      const r = await chat.send(message);
      const input = chat.promptCache.tokens.slice(0, r.promptTokens);
      const plain = model.encode(model.applyChatTemplate(chat.messages.slice(0, -1), { addGenerationPrompt: true }), { addSpecialTokens: false });
      const shared = Math.min(plain.length - 1, commonPrefix(plain, held));
      out.inputs.push(input);
      out.replies.push(r.tokens);
      out.held.push(held);
      out.conversations.push(chat.messages.slice(0, -1));
      out.plainProcessed.push(plain.length - shared);
      out.plainMatches.push(same(plain, input));
    }
  } finally {
    chat.dispose();
  }
  return out;
}

// ---------------------------------------------------------------- summary

function summarize(rounds, turns) {
  const rows = [];
  for (let t = 0; t < turns; t++) {
    const row = { turn: t + 1 };
    for (const k of SIDE_KEYS) {
      const runs = rounds.map((r) => r[k][t]);
      row[k] = {
        promptTokens: runs.map((x) => x.promptTokens),
        processed: median(runs.map((x) => x.processed)),
        processedAll: runs.map((x) => x.processed),
        firstTokenSeconds: median(runs.map((x) => x.firstTokenSeconds)),
        promptSeconds: median(runs.map((x) => x.promptSeconds)),
        generated: median(runs.map((x) => x.tokens.length)),
        finish: [...new Set(runs.map((x) => x.finishReason))].join('/'),
      };
    }
    // Reply tokens: every round of every side against round 1 of the chat.
    const ref = rounds[0].chat[t].tokens;
    row.sameReply = Object.fromEntries(SIDE_KEYS.map((k) => [k, rounds.every((r) => same(r[k][t].tokens, ref))]));
    row.sameReplyAll = SIDE_KEYS.every((k) => row.sameReply[k]);
    // The chat ran the script's ids in every round (the ids the other sides were given).
    row.sameInput = rounds.every((r) => r.inputMatch[t]);
    row.promptTokens = rounds[0].chat[t].promptTokens;
    rows.push(row);
  }
  return rows;
}

// The check's two turns taken apart, on both cached sides, outside the conversation: the
// first-token time of `n` new tokens on a cache holding `c` ids of turn 10's prompt (a new
// cache prefilled to c, then a 1-token generation), for turn 2's and turn 10's c and n.
// Interleaved, PROBE_REPS times; each library's own prompt time.
const PROBE_REPS = 5;

function probeCases(report) {
  const r2 = report.summary[CHECK.from - 1];
  const r10 = report.summary[CHECK.to - 1];
  const c = (row) => row.promptTokens - row.chat.processed;
  return [
    { label: `turn ${CHECK.from}: ${c(r2)} cached + ${r2.chat.processed} new`, cached: c(r2), fresh: r2.chat.processed },
    { label: `turn ${CHECK.to}'s context, turn ${CHECK.from}'s new tokens: ${c(r10)} cached + ${r2.chat.processed} new`, cached: c(r10), fresh: r2.chat.processed },
    { label: `turn ${CHECK.to}: ${c(r10)} cached + ${r10.chat.processed} new`, cached: c(r10), fresh: r10.chat.processed },
    { label: `turn ${CHECK.to}'s new tokens, turn ${CHECK.from}'s context: ${c(r2)} cached + ${r10.chat.processed} new`, cached: c(r2), fresh: r10.chat.processed },
    { label: `one new token (a forward's fixed cost): ${c(r2)} cached + 1 new`, cached: c(r2), fresh: 1 },
  ];
}

async function probe(model, worker, ids, cases) {
  const ours = cases.map(() => []);
  const theirs = cases.map(() => []);
  for (let rep = 0; rep < PROBE_REPS; rep++) {
    for (const [i, c] of cases.entries()) {
      const input = ids.slice(0, c.cached + c.fresh);
      const cache = model.createPromptCache();
      try {
        if (c.cached) await cache.prefill(input.slice(0, c.cached));
        const r = await model.generate(input, { promptCache: cache, maxTokens: 1 });
        if (r.cachedTokens !== c.cached) throw new Error(`probe: ${r.cachedTokens} cached ids, expected ${c.cached}`);
        ours[i].push(c.fresh / r.promptTps);
      } finally {
        cache.dispose();
      }
      const t = await worker.request({ cmd: 'probe', ids: input, cached: c.cached });
      theirs[i].push(t.promptSeconds);
    }
  }
  return cases.map((c, i) => ({ ...c, ours: median(ours[i]), theirs: median(theirs[i]) }));
}

function checkRatio(report) {
  const { from, to, max } = CHECK;
  const at = (round, side, t, key) => round[side][t - 1][key];
  const out = {};
  for (const side of SIDE_KEYS) {
    const per = (key) => report.rounds.map((r) => at(r, side, to, key) / at(r, side, from, key));
    const perToken = report.rounds.map(
      (r) => (at(r, side, to, 'firstTokenSeconds') / at(r, side, to, 'processed')) / (at(r, side, from, 'firstTokenSeconds') / at(r, side, from, 'processed')),
    );
    const rowFrom = report.summary[from - 1][side];
    const rowTo = report.summary[to - 1][side];
    out[side] = {
      // Ratio of the medians (the table's cells) and the per-round ratios.
      ratio: rowTo.firstTokenSeconds / rowFrom.firstTokenSeconds,
      rounds: per('firstTokenSeconds'),
      ownRatio: rowTo.promptSeconds / rowFrom.promptSeconds,
      ownRounds: per('promptSeconds'),
      perTokenRatio: median(perToken),
    };
  }
  out.pass = out.chat.ratio <= max;
  return out;
}

// ---------------------------------------------------------------- report

function ms(s) {
  return fmt(s * 1000, 1);
}

function turnTable(report) {
  const lines = [
    '| turn | prompt tokens | processed: chat / no cache / MLX-LM | time to first token, ms: chat | no cache | MLX-LM + cache | own prompt time, ms: chat | no cache | MLX-LM + cache | same reply tokens |',
    '|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|',
  ];
  for (const row of report.summary) {
    const p = SIDE_KEYS.map((k) => fmt(row[k].processed, 0)).join(' / ');
    const ttft = SIDE_KEYS.map((k) => ms(row[k].firstTokenSeconds)).join(' | ');
    const own = SIDE_KEYS.map((k) => ms(row[k].promptSeconds)).join(' | ');
    const sr = row.sameReplyAll ? 'yes' : `**no** (${SIDE_KEYS.filter((k) => !row.sameReply[k]).map((k) => SIDES[k]).join(', ')} differ)`;
    lines.push(`| ${row.turn} | ${row.promptTokens} | ${p} | ${ttft} | ${own} | ${sr} |`);
  }
  const total = (k, key) => report.summary.reduce((a, row) => a + row[k][key], 0);
  lines.push(
    `| all | | ${SIDE_KEYS.map((k) => fmt(total(k, 'processed'), 0)).join(' / ')} | ${SIDE_KEYS.map((k) => ms(total(k, 'firstTokenSeconds'))).join(' | ')} | ` +
      `${SIDE_KEYS.map((k) => ms(total(k, 'promptSeconds'))).join(' | ')} | |`,
  );
  return lines.join('\n');
}

function checkTable(report) {
  const c = report.check;
  const { from, to, max } = CHECK;
  const range = (xs) => `${fmt(Math.min(...xs), 2)}-${fmt(Math.max(...xs), 2)}`;
  const lines = [
    `| side | turn ${to} / turn ${from}, time to first token (rounds) | own prompt time (rounds) | per processed token |`,
    '|---|--:|--:|--:|',
  ];
  for (const k of SIDE_KEYS) {
    const s = c[k];
    lines.push(`| ${SIDES[k]} | ${fmt(s.ratio, 2)} (${range(s.rounds)}) | ${fmt(s.ownRatio, 2)} (${range(s.ownRounds)}) | ${fmt(s.perTokenRatio, 2)} |`);
  }
  const verdict =
    `**${c.pass ? 'PASS' : 'FAIL'}**: with the chat, turn ${to}'s time to first token is ${fmt(c.chat.ratio, 2)}x turn ${from}'s ` +
    `(${ms(report.summary[to - 1].chat.firstTokenSeconds)} ms against ${ms(report.summary[from - 1].chat.firstTokenSeconds)} ms, medians; ` +
    `per round ${range(c.chat.rounds)}); the limit is ${max}x.`;
  return { table: lines.join('\n'), verdict };
}

function anomalies(report) {
  const notes = [];
  // Other work on the machine shows as a slower decode: a turn whose decode rate is under
  // 80% of its side's fastest turn in the run was most likely disturbed.
  // (Only with replies long enough for a steady decode rate.)
  const slow = [];
  for (const k of report.maxTokens >= 16 ? SIDE_KEYS : []) {
    const all = report.rounds.flatMap((r) => r[k].map((x) => x.generationTps));
    const best = Math.max(...all);
    report.rounds.forEach((r, i) => r[k].forEach((x, t) => {
      if (x.generationTps < 0.8 * best) slow.push(`${SIDES[k]} round ${i + 1} turn ${t + 1} (${fmt(x.generationTps, 1)} against ${fmt(best, 1)} tok/s at best)`);
    }));
  }
  if (slow.length) notes.push(`decode under 80% of its side's fastest turn, most likely other work on the machine during the turn: ${slow.join('; ')}.`);
  for (const row of report.summary) {
    if (!row.sameReplyAll) notes.push(`turn ${row.turn}: reply tokens differ (${SIDE_KEYS.filter((k) => !row.sameReply[k]).map((k) => SIDES[k]).join(', ')} against the chat's round 1).`);
    if (!row.sameInput) notes.push(`turn ${row.turn}: the chat ran other ids than in the untimed run the other sides were given.`);
    for (const k of SIDE_KEYS) {
      if (new Set(row[k].promptTokens).size !== 1 || row[k].promptTokens[0] !== row.promptTokens) {
        notes.push(`turn ${row.turn}: prompt tokens of ${SIDES[k]} ${row[k].promptTokens.join(', ')} (chat: ${row.promptTokens}).`);
      }
      if (new Set(row[k].processedAll).size !== 1) notes.push(`turn ${row.turn}: ${SIDES[k]} processed ${row[k].processedAll.join(', ')} tokens in the rounds.`);
    }
  }
  return notes;
}

function renderReport(report) {
  const { table, verdict } = checkTable(report);
  const sc = report.script;
  const merged = sc.plainMatches.map((m, i) => (m ? null : i + 1)).filter((x) => x !== null);
  const parts = [
    '# Chat benchmark results',
    '',
    `Made by \`${report.command}\` on ${report.date}, in ${fmt(report.seconds / 60, 1)} minutes. Refresh this file whenever prompt caching or prefill changes.`,
    '',
    '## Machine and builds',
    '',
    ...machineLines(report),
    '',
    '## Method',
    '',
    report.modelName === MODEL
      ? `- Model: \`.cache/bench-models/${MODEL}\` (benchmark/models.py: MLX-LM's Qwen3 class, seeded random weights, the real Qwen3 tokenizer and chat template). Its replies are noise, but the work per token is a real 100M model's.`
      : `- Model: \`.cache/bench-models/${report.modelName}\` (prepared by \`npm run bench:llama\`: see benchmark/RESULTS-llama.md), with its own chat template.`,
    "- mlx-node loads the model with `precision: 'exact'` (MLX's arithmetic, as MLX-LM; quantized models on the CPU default to fast precision).",
    `- One conversation of ${report.turns} user turns (1-3 sentences each, in \`benchmark/chat.js\`) after a system prompt; greedy, ${report.maxTokens} tokens per reply at most.`,
    `- **chat**: \`model.createChat({ system, maxTokens })\`, one \`chat.stream(message)\` per turn (the path of \`chat.send\`): the whole conversation is rendered with the chat template; the ids the cache holds (the last turn's input and the reply as generated) stay where the text starts with what they stand for (that input's text, the reply's \`result.text\`, its EOS), the rest is encoded, and the cache serves the common prefix.`,
    '- The conversation is run once untimed with a chat first; the two other sides get, each turn, the ids the chat ran in it, so that all three answer the same conversation (every timed turn of the chat ran those ids again, checked).',
    '- **no cache**: `model.stream(ids, { maxTokens })` with the whole conversation each turn and no prompt cache.',
    '- **MLX-LM + cache**: the worker (`benchmark/mlx_lm_bench.py`, command `chat`) gets the whole conversation\'s ids each turn, ' +
      'keeps one `make_prompt_cache` cache between turns, cuts it back to the longest common prefix with `trim_prompt_cache` (at most all but the last prompt id, as `LRUPromptCache.fetch_nearest_cache`) and runs `stream_generate` on the rest with `prompt_cache`. ' +
      'Unlike the server it keeps one cache and does not deep-copy it per request, which would only add to MLX-LM\'s times; and mlx_lm.server encodes the conversation again from its text, which costs more wherever a reply does not encode back to its own ids (below).',
    `- One untimed warm-up conversation (${WARMUP_TURNS.length} short turns, ${WARMUP_TOKENS} tokens) per side, then ${report.roundCount} rounds; in a round turn k runs on all three sides before turn k+1, the order of the sides rotating from round to round. Each round starts new conversations (a new chat, a new MLX-LM cache).`,
    '- processed: prompt tokens run through the model this turn (prompt tokens - cached tokens); the rest came from the cache.',
    '- time to first token: as the caller sees it, from the call (the chat: rendering and encoding the conversation; finding the prefix, trimming, prefill) to the first generated token (ours: the first chunk of the stream in JS; MLX-LM: the first response of `stream_generate` in the worker, from the start of the request).',
    '- own prompt time: each library\'s own figure, processed tokens / `promptTps` (the time from the start of the generation loop to the first token; MLX-LM\'s from its `GenerationResponse`).',
    '- Each cell is the median over the rounds. "same reply tokens": every round of every side generated the ids of the chat\'s first round.',
    '',
    '## Per turn',
    '',
    turnTable(report),
    '',
    `## Check: turn ${CHECK.to} against turn ${CHECK.from}`,
    '',
    verdict,
    '',
    table,
    '',
    `- The chat ran ${report.summary.every((r) => r.sameInput) ? 'the same ids as the untimed run on every turn and round' : '**other ids than the untimed run on some turns** (anomalies)'}.`,
    `- Encoding the conversation again from its text each turn (as \`generate(messages)\` on a kept cache or mlx_lm.server would) gives the chat's ids on ${sc.plainMatches.filter(Boolean).length} of ${sc.plainMatches.length} turns; ` +
      (merged.length
        ? `on turns ${merged.join(', ')} an earlier reply does not encode back to the ids it was generated as (random-weight text often does not), and that way would process ${sc.plainProcessed.join(', ')} tokens on turns 1-${sc.plainProcessed.length} (${sc.plainProcessed.reduce((x, y) => x + y, 0)} in all) where the chat processes ${report.summary.map((r) => fmt(r.chat.processed, 0)).join(', ')}.`
        : 'every reply encodes back to its own ids.'),
  ];
  const r2 = report.summary[CHECK.from - 1];
  const r10 = report.summary[CHECK.to - 1];
  const pr = report.probe;
  parts.push(
    '',
    `### Where the time goes`,
    '',
    `Turn ${CHECK.to} processes ${fmt(r10.chat.processed, 0)} new tokens on top of ${r10.promptTokens - r10.chat.processed} cached ones; turn ${CHECK.from}, ${fmt(r2.chat.processed, 0)} on top of ${r2.promptTokens - r2.chat.processed}. ` +
      'The user messages of both turns are 32 tokens, with the same template markers around them' +
      (r10.chat.processed !== r2.chat.processed ? ` (turn ${CHECK.to}'s input also ends the previous reply differently). ` : '. ') +
      `Per processed token, turn ${CHECK.to} costs ${fmt(report.check.chat.perTokenRatio, 2)}x turn ${CHECK.from} with the chat.`,
    '',
    `The same amounts timed apart, on a fresh cache prefilled with the first ids of turn ${CHECK.to}'s prompt, then a 1-token generation; each library's own prompt time, ` +
      `median of ${PROBE_REPS}, interleaved:`,
    '',
    `| case | mlx-node ms | / first row | MLX-LM ms | / first row |`,
    '|---|--:|--:|--:|--:|',
    ...pr.map((c) => `| ${c.label} | ${ms(c.ours)} | ${fmt(c.ours / pr[0].ours, 2)} | ${ms(c.theirs)} | ${fmt(c.theirs / pr[0].theirs, 2)} |`),
    '',
    `Rendering, encoding and decoding the conversation (\`applyChatTemplate\`, \`encode\` of the whole text and \`decode\` of the held ids: at most the chat's own work in its first-token time) takes ${fmt(report.render.from * 1000, 2)} ms at turn ${CHECK.from} and ${fmt(report.render.to * 1000, 2)} ms at turn ${CHECK.to}.`,
  );
  const notes = anomalies(report);
  if (notes.length) parts.push('', '## Anomalies', '', ...notes.map((n) => `- ${n}`));
  parts.push('');
  return parts.join('\n');
}

// ---------------------------------------------------------------- main

async function warmUp(model, worker) {
  const sides = makeSides(model, worker, WARMUP_TOKENS, await script(model, WARMUP_TURNS, WARMUP_TOKENS));
  try {
    for (const [t, m] of WARMUP_TURNS.entries()) for (const k of SIDE_KEYS) await sides[k].turn(m, t);
  } finally {
    for (const k of SIDE_KEYS) sides[k].dispose();
  }
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const rounds = args.rounds ?? ROUNDS;
  const maxTokens = args.maxTokens ?? MAX_TOKENS;
  const started = Date.now();
  warnIfBusy(log);
  if (args.build) require('../scripts/build').build({ quiet: true });
  const { python, env } = require('../scripts/venv').ensureVenv();
  const name = args.model ?? MODEL;
  if (name === MODEL) {
    const made = spawnSync(python, [path.join(__dirname, 'models.py'), MODELS_DIR, '--only', MODEL], { env, cwd: ROOT, stdio: ['ignore', 2, 2] });
    if (made.status !== 0) fail(`benchmark/models.py failed (exit ${made.status})`);
  }
  const dir = path.join(MODELS_DIR, name);
  if (!fs.existsSync(path.join(dir, 'config.json'))) fail(`${path.relative(ROOT, dir)} does not exist (npm run bench:llama makes smollm2-135m-q4_1)`);

  const { loadModel, mlxInfo } = require('..');
  const worker = new PythonWorker(python, env, 'mlx_lm_bench.py', 'MLX-LM');
  const report = {
    ...newReport('bench:chat', env, mlxInfo()),
    model: dir,
    modelName: name,
    turns: TURNS.length,
    maxTokens,
    roundCount: rounds,
    rounds: [],
  };
  let model = null;
  try {
    report.theirs = await worker.request({ cmd: 'info' });
    checkReference(report, log);
    log(`loading ${path.relative(ROOT, dir)}`);
    // Exact precision (quantized models default to fast), the arithmetic MLX-LM's side runs.
    model = await loadModel(dir, { precision: 'exact' });
    await worker.request({ cmd: 'load', model: dir });
    log('warm-up');
    await warmUp(model, worker);
    log('the conversation, untimed');
    const sc = await script(model, TURNS, maxTokens);
    report.script = { plainProcessed: sc.plainProcessed, plainMatches: sc.plainMatches };
    const probeIds = sc.inputs[CHECK.to - 1];
    for (let r = 0; r < rounds; r++) {
      const sides = makeSides(model, worker, maxTokens, sc);
      const order = SIDE_KEYS.map((_, i) => SIDE_KEYS[(i + r) % SIDE_KEYS.length]);
      const round = { order, chat: [], nocache: [], mlxlm: [], inputMatch: [] };
      try {
        for (let t = 0; t < TURNS.length; t++) {
          for (const k of order) round[k].push(await sides[k].turn(TURNS[t], t));
          round.inputMatch.push(same(round.chat[t].input, sc.inputs[t]));
          delete round.chat[t].input;
          // Outside the timing: how much of the chat's first-token time its own work on the
          // growing conversation takes (rendering it, decoding the held ids, encoding; the
          // whole text encoded, an upper bound of encoding the rest).
          const tr = performance.now();
          model.encode(model.applyChatTemplate(sc.conversations[t], { addGenerationPrompt: true }), { addSpecialTokens: false });
          model.decode(sc.held[t]);
          round.chat[t].renderSeconds = (performance.now() - tr) / 1000;
          const c = round.chat[t];
          const n = round.nocache[t];
          const m = round.mlxlm[t];
          log(
            `round ${r + 1}/${rounds} turn ${t + 1}: prompt ${c.promptTokens} tokens; processed ${c.processed} / ${n.processed} / ${m.processed}; ` +
              `first token ${ms(c.firstTokenSeconds)} / ${ms(n.firstTokenSeconds)} / ${ms(m.firstTokenSeconds)} ms (chat / no cache / MLX-LM); ` +
              `replies ${same(c.tokens, n.tokens) && same(c.tokens, m.tokens) ? 'identical' : 'DIFFER'} (load ${loadavg()})`,
          );
        }
      } finally {
        for (const k of SIDE_KEYS) sides[k].dispose();
      }
      report.rounds.push(round);
    }
    report.summary = summarize(report.rounds, TURNS.length);
    report.check = checkRatio(report);
    const render = (t) => median(report.rounds.map((r) => r.chat[t - 1].renderSeconds));
    report.render = { from: render(CHECK.from), to: render(CHECK.to) };
    log('probe: the check\'s two turns taken apart');
    report.probe = await probe(model, worker, probeIds, probeCases(report));
  } finally {
    worker.close();
    if (model) await model.dispose();
  }
  report.loadAfter = loadavg();
  report.seconds = (Date.now() - started) / 1000;

  const md = renderReport(report);
  process.stdout.write(`${md}\n`);
  writeRaw(report, 'chat-', log);
  const isDefault = args.rounds === null && args.maxTokens === null && args.model === null;
  const out = args.out ?? (isDefault ? RESULTS : null);
  if (out) {
    fs.writeFileSync(out, md);
    log(`wrote ${path.relative(ROOT, out)}`);
  } else {
    log('not a default run: RESULTS-chat.md left as it is (use --out FILE to write this report)');
  }
  log(`${report.check.pass ? 'PASS' : 'FAIL'}: chat turn ${CHECK.to} / turn ${CHECK.from} time to first token = ${fmt(report.check.chat.ratio, 3)} (limit ${CHECK.max})`);
}

if (require.main === module) {
  main().catch((e) => {
    process.stderr.write(`[bench:chat] ${e.stack || e}\n`);
    process.exit(1);
  });
}

module.exports = { renderReport, TURNS, SYSTEM };
