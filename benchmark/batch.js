#!/usr/bin/env node
'use strict';
// `npm run bench:batch`: throughput under concurrent load (issue 27). For each model, N
// requests (8) of M tokens (128, greedy, EOS blocked) sent at once to an HTTP server, against
// one request alone, on two servers run side by side on the same machine, the same libmlx and
// the same BLAS:
//   mlx-node       `mlx-node serve --model DIR --max-batch N --precision exact` (lib/server over
//                  the library's continuous-batching scheduler, in MLX's arithmetic as
//                  mlx_lm.server; `--precision fast` measures the default of quantized models
//                  instead), in its own process;
//   mlx_lm.server  MLX-LM 0.32.2's `python -m mlx_lm server --model DIR
//                  --decode-concurrency N --prompt-concurrency N` (its BatchGenerator), in its
//                  own process, from the project venv with the same OpenBLAS preloaded.
// Both are driven the same way: POST /v1/completions with `stream: true`, read with plain
// fetch, each event timed on arrival. Optionally (default on) the library too, in this
// process: N concurrent `model.stream()` calls, to show what the HTTP layer costs.
// Rounds interleave the sides (alone, then N at once, per side, the order of the sides
// rotating from round to round) after warm-ups. Prints markdown; a default run also writes
// benchmark/RESULTS-batch.md. The issue's checks, per model: mlx-node's batched aggregate
// decode tok/s >= 4x its single-request figure, and > mlx_lm.server's batched aggregate.

const fs = require('node:fs');
const { freePort } = require('../lib/launch');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');
const { PythonWorker } = require('./python-worker');
const { median, loadavg, argReaders } = require('./machine');
const { ROOT, MODELS_DIR, fmt, logger, warnIfBusy, newReport, checkReference, machineLines, writeRaw } = require('./common');

const RESULTS = path.join(__dirname, 'RESULTS-batch.md');

// Rounds per model: mlx-node's sides, and mlx_lm.server's (the first rounds of them). The
// 4-bit model is slow on MLX-LM's side here (MLX's CPU quantized matmul, a scalar loop: one
// round of 8 x 128 tokens takes ~7 minutes, one request alone ~1), so it gets one round there;
// the load (N x M) is the same.
const PLAN = {
  'qwen3-100m-f32': { rounds: 3, mlxLmRounds: 3 },
  'qwen3-0.6b-4bit': { rounds: 2, mlxLmRounds: 1 },
};
const CONCURRENCY = 8;
const MAX_CONCURRENCY = 32;
const MAX_TOKENS = 128;
const WARMUP_TOKENS = 8;
const CHECK_SPEEDUP = 4;

// Eight different prompts, 20-40 tokens each with the Qwen3 tokenizer. Each request puts a
// word of its own in front (LEADS), so that no two requests of a run share a first token and
// neither server's prompt cache can serve any of it: every request prefills its whole prompt.
const PROMPTS = [
  'explain, in a few short paragraphs, why the sky looks blue during the day and turns red and orange at sunset.',
  'write a short story about a lighthouse keeper who finds a message in a bottle that seems to be addressed to him.',
  'list the main differences between a compiled and an interpreted programming language, with one example of each.',
  'describe how a bill becomes a law in a parliamentary democracy, step by step, as if to a curious twelve-year-old.',
  'summarize the causes and the consequences of the French Revolution for the rest of Europe in the nineteenth century.',
  'give me a simple weekly plan for learning to cook healthy meals on a small budget, with a shopping list.',
  'what are the advantages and the risks of building cities along rivers and coasts, and how have engineers dealt with floods?',
  'compose a polite email to a neighbour asking them to keep their dog from barking late at night.',
];
// Capitalized words with distinct first tokens: 9 per round (one alone, N at once) and per warm-up.
const LEADS = [
  'Please', 'Now', 'Today', 'Kindly', 'Quickly', 'Briefly', 'Honestly', 'Simply', 'Yesterday',
  'Friend', 'Teacher', 'Doctor', 'Captain', 'Professor', 'Neighbor', 'Student', 'Writer', 'Engineer',
  'Alice', 'Bob', 'Carol', 'David', 'Emma', 'Frank', 'George', 'Helen', 'Isaac',
  'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday', 'Sunday', 'January', 'February',
  'London', 'Paris', 'Berlin', 'Madrid', 'Rome', 'Vienna', 'Prague', 'Dublin', 'Oslo',
  'Red', 'Green', 'Blue', 'Yellow', 'Purple', 'Orange', 'Black', 'White', 'Silver',
  'One', 'Two', 'Three', 'Four', 'Five', 'Six', 'Seven', 'Eight', 'Nine',
  // More for loads above 8 at once (a GPU): 32 at once for 3 rounds need 4 x 33. Each is its own
  // first Qwen3 token, shared with no other lead.
  'Apple', 'Wolf', 'Bear', 'Fox', 'Mountain', 'River', 'Forest', 'Ocean', 'Lake',
  'Spring', 'Summer', 'Winter', 'Morning', 'Night', 'Music', 'History', 'Science', 'Math',
  'Art', 'Coffee', 'Sugar', 'Salt', 'Toronto', 'Chicago', 'Boston', 'Denver', 'March',
  'April', 'May', 'June', 'July', 'August', 'September', 'October', 'November', 'Ten',
  'Twenty', 'Thirty', 'Zero', 'Gold', 'Iron', 'Stone', 'Glass', 'Paper', 'Wood',
  'Steel', 'Water', 'Fire', 'Earth', 'Air', 'Light', 'Dark', 'Sun', 'Moon',
  'Star', 'Planet', 'Table', 'Chair', 'Door', 'Window', 'House', 'Home', 'School',
  'Office', 'Market', 'Bank', 'Street', 'Road', 'Bridge', 'City', 'Town', 'Country',
  'World', 'King', 'Queen', 'Prince', 'Royal', 'Master', 'Father', 'Mother', 'Child',
];

const USAGE = `usage: npm run bench:batch -- [options]
  --model NAME       only this model (repeat or comma-separate): ${Object.keys(PLAN).join(', ')}
  --rounds N         timed rounds per model (default: ${Object.entries(PLAN).map(([k, v]) => `${k} ${v.rounds}`).join(', ')})
  --mlx-lm-rounds N  of those, how many include mlx_lm.server (default: ${Object.entries(PLAN).map(([k, v]) => `${k} ${v.mlxLmRounds}`).join(', ')}; at most --rounds;
                     0: mlx-node alone, mlx_lm.server not started and its check not run)
  --concurrency N    requests sent at once, and both servers' batch size (default ${CONCURRENCY}, at most ${MAX_CONCURRENCY};
                     above ${PROMPTS.length} the prompts repeat, each behind a word of its own)
  --max-tokens N     tokens per request (default ${MAX_TOKENS}; EOS is blocked, so every request makes exactly N)
  --precision P      mlx-node's arithmetic: exact (default: MLX's, as mlx_lm.server) or fast (quantized
                     models' default on the CPU: integer dot products, docs/kernels.md)
  --no-library       skip the library rows (model.stream() in this process)
  --out FILE         write the report there (a default run writes benchmark/RESULTS-batch.md)
  --no-build         use the addon as built (default: build it first if stale, as npm run bench)`;

const { log, fail } = logger('bench:batch');

function parseArgs(argv) {
  const a = { models: [], rounds: null, mlxLmRounds: null, concurrency: CONCURRENCY, maxTokens: MAX_TOKENS, library: true, precision: 'exact', out: null, build: true, defaults: true };
  const { value, positive } = argReaders(argv, fail, USAGE);
  for (let i = 0; i < argv.length; i++) {
    const f = argv[i];
    if (f === '--no-build') a.build = false;
    else if (f === '--no-library') (a.library = false), (a.defaults = false);
    else if (f === '--help' || f === '-h') {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    } else if (f === '--model') (a.models.push(...value(i++, f).split(',').filter(Boolean)), (a.defaults = false));
    else if (f === '--rounds') (a.rounds = positive(value(i++, f), f)), (a.defaults = false);
    else if (f === '--mlx-lm-rounds') {
      const v = value(i++, f);
      a.mlxLmRounds = v === '0' ? 0 : positive(v, f);
      a.defaults = false;
    }
    else if (f === '--concurrency') (a.concurrency = positive(value(i++, f), f)), (a.defaults = false);
    else if (f === '--max-tokens') (a.maxTokens = positive(value(i++, f), f)), (a.defaults = false);
    else if (f === '--precision') {
      a.precision = value(i++, f);
      if (a.precision !== 'exact' && a.precision !== 'fast') fail(`--precision is exact or fast, not ${a.precision}`);
      a.defaults = false;
    }
    else if (f === '--out') a.out = path.resolve(value(i++, f));
    else fail(`unknown argument ${f}\n${USAGE}`);
  }
  for (const m of a.models) if (!PLAN[m]) fail(`unknown model ${m}; known: ${Object.keys(PLAN).join(', ')}`);
  if (a.concurrency > MAX_CONCURRENCY) fail(`--concurrency is at most ${MAX_CONCURRENCY}`);
  return a;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const now = () => performance.now() / 1000;

// ---------------------------------------------------------------- servers


async function waitHealthy(url, child, label, timeoutMs = 300_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`${label} exited (${child.exitCode}) before answering:\n${child.stderrTail}`);
    try {
      const r = await fetch(`${url}/health`);
      if (r.ok) return;
    } catch {}
    await sleep(250);
  }
  throw new Error(`${label} did not answer /health within ${timeoutMs / 1000} s:\n${child.stderrTail}`);
}

function spawnServer(cmd, argv, env, label) {
  const child = spawn(cmd, argv, { cwd: ROOT, env, stdio: ['ignore', 'ignore', 'pipe'] });
  child.stderrTail = '';
  child.stderr.on('data', (d) => {
    child.stderrTail = (child.stderrTail + d.toString('utf8')).slice(-8000);
  });
  child.label = label;
  return child;
}

async function stopServer(child) {
  if (!child || child.exitCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const t = setTimeout(() => child.kill('SIGKILL'), 15_000);
  await exited;
  clearTimeout(t);
}

async function startOurs(dir, concurrency, precision) {
  const port = await freePort();
  // Exact precision by default (quantized models default to fast): the arithmetic mlx_lm.server runs.
  const argv = [path.join(ROOT, 'bin', 'mlx-node.js'), 'serve', '--model', dir, '--port', String(port), '--max-batch', String(concurrency), '--precision', precision, '--quiet'];
  const child = spawnServer(process.execPath, argv, process.env, 'mlx-node serve');
  const url = `http://127.0.0.1:${port}`;
  await waitHealthy(url, child, 'mlx-node serve');
  return { child, url, command: `node bin/mlx-node.js serve --model DIR --port PORT --max-batch ${concurrency} --precision ${precision} --quiet` };
}

async function startTheirs(python, env, dir, concurrency) {
  const port = await freePort();
  const flags = ['--decode-concurrency', String(concurrency), '--prompt-concurrency', String(concurrency), '--log-level', 'WARNING'];
  const argv = ['-m', 'mlx_lm', 'server', '--model', dir, '--port', String(port), ...flags];
  const child = spawnServer(python, argv, env, 'mlx_lm.server');
  const url = `http://127.0.0.1:${port}`;
  await waitHealthy(url, child, 'mlx_lm.server');
  return { child, url, command: `.cache/venv/bin/python -m mlx_lm server --model DIR --port PORT ${flags.join(' ')}` };
}

// ---------------------------------------------------------------- one request

// One streamed completion over HTTP. Times (seconds, from this process's clock): sent, each
// data event carrying text, the event with finish_reason. The token count is the server's own
// (usage.completion_tokens, stream_options.include_usage). mlx_lm.server sends an event only
// when the detokenizer has text, mlx-node one per token: so on both sides the first token is
// timed at the first event with non-empty text (the same token on both sides, greedy).
async function httpRequest(url, prompt, maxTokens, logitBias, t0) {
  const body = {
    prompt,
    max_tokens: maxTokens,
    temperature: 0,
    logit_bias: logitBias,
    stream: true,
    stream_options: { include_usage: true },
  };
  const sent = now();
  const res = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status}: ${await res.text()}`);
  const dec = new TextDecoder();
  let buf = '';
  let first = null;
  let last = null;
  let lastText = null;
  let events = 0;
  let text = '';
  let usage = null;
  let finishReason = null;
  let done = false;
  for await (const part of res.body) {
    const at = now();
    buf += dec.decode(part, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of block.split('\n')) {
        if (!line.startsWith('data:')) continue; // ": keepalive ..." comments and the like
        const data = line.slice(5).trim();
        if (data === '[DONE]') {
          done = true;
          continue;
        }
        const ev = JSON.parse(data);
        if (ev.error) throw new Error(`${url}: ${JSON.stringify(ev.error)}`);
        if (ev.usage) usage = ev.usage;
        const c = ev.choices && ev.choices[0];
        if (!c) continue;
        events++;
        if (c.text) {
          text += c.text;
          if (first === null) first = at;
          lastText = at;
        }
        if (c.finish_reason) {
          finishReason = c.finish_reason;
          last = at;
        }
      }
    }
  }
  if (!done) throw new Error(`${url}: the stream ended without [DONE]`);
  if (!usage) throw new Error(`${url}: no usage chunk`);
  last ??= lastText;
  return {
    sent: sent - t0,
    first: first - t0,
    last: last - t0,
    tokens: usage.completion_tokens,
    promptTokens: usage.prompt_tokens,
    cachedTokens: usage.prompt_tokens_details?.cached_tokens ?? 0,
    finishReason,
    events,
    text,
  };
}

// The same through the library in this process: model.stream(), first chunk with text.
async function libraryRequest(model, prompt, maxTokens, logitBias, t0) {
  const sent = now();
  let first = null;
  let last = null;
  let text = '';
  let events = 0;
  const s = model.stream(prompt, { maxTokens, temperature: 0, logitBias });
  for await (const chunk of s) {
    const at = now();
    events++;
    if (chunk.text) {
      text += chunk.text;
      if (first === null) first = at;
    }
    last = at;
  }
  const r = await s.result;
  return {
    sent: sent - t0,
    first: first - t0,
    last: last - t0,
    tokens: r.generationTokens,
    promptTokens: r.promptTokens,
    cachedTokens: r.cachedTokens ?? 0,
    finishReason: r.finishReason,
    events,
    text,
  };
}

// n requests started together; the figures of the whole.
async function runLoad(send, prompts) {
  const t0 = now();
  const reqs = await Promise.all(prompts.map((p) => send(p, t0)));
  const firstFirst = Math.min(...reqs.map((r) => r.first));
  const lastLast = Math.max(...reqs.map((r) => r.last));
  const total = reqs.reduce((s, r) => s + r.tokens, 0);
  for (const r of reqs) {
    r.ttft = r.first - r.sent;
    r.decodeTps = (r.tokens - 1) / (r.last - r.first);
  }
  return {
    requests: reqs,
    totalTokens: total,
    wall: lastLast,
    decodeSpan: lastLast - firstFirst,
    aggregateDecodeTps: total / (lastLast - firstFirst),
    aggregateWallTps: total / lastLast,
  };
}

// ---------------------------------------------------------------- one model

function eosIds(dir) {
  const ids = new Set();
  for (const f of ['config.json', 'generation_config.json']) {
    try {
      const e = JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')).eos_token_id;
      for (const x of [e].flat()) if (Number.isInteger(x)) ids.add(x);
    } catch {}
  }
  // Qwen3's <|im_end|> and <|endoftext|>, whatever the folder says.
  ids.add(151645);
  ids.add(151643);
  return [...ids];
}

function promptsFor(leadStart, n) {
  return Array.from({ length: n }, (_, i) => `${LEADS[leadStart + i]}, ${PROMPTS[i % PROMPTS.length]}`);
}

async function benchModel(name, args, ctx, report) {
  const dir = path.join(MODELS_DIR, name);
  const rounds = args.rounds ?? PLAN[name].rounds;
  const theirRounds = Math.min(rounds, args.mlxLmRounds ?? (args.rounds ? rounds : PLAN[name].mlxLmRounds));
  const n = args.concurrency;
  const maxTokens = args.maxTokens;
  const logitBias = Object.fromEntries(eosIds(dir).map((id) => [String(id), -100]));
  const entry = { name, dir, rounds: [], logitBias, commands: {} };
  report.models.push(entry);
  const need = (rounds + 1) * (n + 1);
  if (need > LEADS.length) fail(`${rounds} rounds need ${need} distinct lead words; there are ${LEADS.length}`);

  log(`${name}: starting both servers`);
  const ours = await startOurs(dir, n, args.precision);
  let theirs = null;
  let model = null;
  try {
    if (theirRounds > 0) theirs = await startTheirs(ctx.python, ctx.env, dir, n);
    entry.commands = { ours: ours.command, theirs: theirs?.command ?? null };
    if (args.library) model = await ctx.loadModel(dir, { maxBatch: n, precision: args.precision });
    const sides = {
      ours: (p, t0, m = maxTokens) => httpRequest(ours.url, p, m, logitBias, t0),
    };
    if (theirs) sides.theirs = (p, t0, m = maxTokens) => httpRequest(theirs.url, p, m, logitBias, t0);
    if (model) sides.library = (p, t0, m = maxTokens) => libraryRequest(model, p, m, logitBias, t0);
    const keys = Object.keys(sides);

    // Warm-up, untimed: one short request alone, then n short ones at once, on each side.
    log(`${name}: warm-up`);
    const warm = promptsFor(0, n + 1);
    for (const k of keys) {
      await runLoad((p, t0) => sides[k](p, t0, WARMUP_TOKENS), [warm[n]]);
      await runLoad((p, t0) => sides[k](p, t0, WARMUP_TOKENS), warm.slice(0, n));
    }

    for (let r = 0; r < rounds; r++) {
      const base = (r + 1) * (n + 1);
      const batchPrompts = promptsFor(base, n);
      const alonePrompt = `${LEADS[base + n]}, ${PROMPTS[0]}`;
      const here = keys.filter((k) => k !== 'theirs' || r < theirRounds);
      const order = here.map((_, i) => here[(i + r) % here.length]);
      const round = { order, alone: {}, batch: {} };
      for (const k of order) {
        round.alone[k] = await runLoad(sides[k], [alonePrompt]);
        log(`${name} | round ${r + 1}/${rounds} | ${k} alone: ${fmt(round.alone[k].aggregateDecodeTps, 2)} tok/s, ttft ${fmt(round.alone[k].requests[0].ttft * 1000, 0)} ms (load ${loadavg()})`);
      }
      for (const k of order) {
        const b = await runLoad(sides[k], batchPrompts);
        round.batch[k] = b;
        log(`${name} | round ${r + 1}/${rounds} | ${k} ${n} at once: aggregate ${fmt(b.aggregateDecodeTps, 2)} tok/s (${b.totalTokens} tokens, wall ${fmt(b.wall, 1)} s), ` +
          `ttft median ${fmt(median(b.requests.map((q) => q.ttft)) * 1000, 0)} ms (load ${loadavg()})`);
      }
      entry.rounds.push(round);
    }
  } finally {
    await model?.dispose();
    await stopServer(theirs?.child);
    await stopServer(ours.child);
  }
  summarize(entry, Object.keys(entry.rounds[0].alone), maxTokens);
}

// ---------------------------------------------------------------- summary

function range(xs) {
  return { median: median(xs), min: Math.min(...xs), max: Math.max(...xs) };
}

function summarize(entry, sideKeys, maxTokens) {
  entry.summary = {};
  for (const k of sideKeys) {
    const s = {};
    for (const mode of ['alone', 'batch']) {
      const loads = entry.rounds.map((r) => r[mode][k]).filter(Boolean);
      const reqs = loads.flatMap((l) => l.requests);
      s[mode] = {
        n: loads[0].requests.length,
        rounds: loads.length,
        ttft: range(reqs.map((q) => q.ttft)),
        decodeTps: range(reqs.map((q) => q.decodeTps)),
        aggregateDecodeTps: range(loads.map((l) => l.aggregateDecodeTps)),
        aggregateWallTps: range(loads.map((l) => l.aggregateWallTps)),
        wall: range(loads.map((l) => l.wall)),
        tokens: range(reqs.map((q) => q.tokens)),
        promptTokens: range(reqs.map((q) => q.promptTokens)),
        cachedTokens: Math.max(...reqs.map((q) => q.cachedTokens)),
        allLength: reqs.every((q) => q.tokens === maxTokens && q.finishReason === 'length'),
      };
    }
    s.speedup = range(entry.rounds.filter((r) => r.batch[k]).map((r) => r.batch[k].aggregateDecodeTps / r.alone[k].aggregateDecodeTps));
    entry.summary[k] = s;
  }
  // Same text: each request of a batch against the same prompt on the other sides (round 1).
  const r0 = entry.rounds[0];
  entry.sameText = {};
  for (const k of sideKeys) {
    if (k === 'ours') continue;
    const a = r0.batch.ours.requests;
    const b = r0.batch[k].requests;
    entry.sameText[k] = { batch: a.filter((q, i) => q.text === b[i].text).length, of: a.length, alone: r0.alone.ours.requests[0].text === r0.alone[k].requests[0].text };
  }
}

function checks(report) {
  const out = [];
  for (const m of report.models) {
    const o = m.summary.ours;
    const t = m.summary.theirs;
    const vsDetail = t ? `${fmt(o.batch.aggregateDecodeTps.median, 2)} vs ${fmt(t.batch.aggregateDecodeTps.median, 2)} tok/s: ${fmt(o.batch.aggregateDecodeTps.median / t.batch.aggregateDecodeTps.median, 2)}x` : 'not run (--mlx-lm-rounds 0)';
    const ratio = o.batch.aggregateDecodeTps.median / o.alone.aggregateDecodeTps.median;
    out.push({
      model: m.name,
      what: `mlx-node batched aggregate >= ${CHECK_SPEEDUP}x mlx-node alone`,
      ok: ratio >= CHECK_SPEEDUP,
      detail: `${fmt(o.batch.aggregateDecodeTps.median, 2)} vs ${fmt(o.alone.aggregateDecodeTps.median, 2)} tok/s: ${fmt(ratio, 2)}x (per round ${fmt(o.speedup.min, 2)}-${fmt(o.speedup.max, 2)}x)`,
    });
    out.push({
      model: m.name,
      what: 'mlx-node batched aggregate > mlx_lm.server batched aggregate',
      ok: t ? o.batch.aggregateDecodeTps.median > t.batch.aggregateDecodeTps.median : null,
      detail: vsDetail,
    });
  }
  return out;
}

// A check's result: true, false, or null where it was not run.
const verdict = (ok, fail) => (ok === null ? 'not run' : ok ? 'PASS' : fail);

const LABELS = { ours: 'mlx-node serve (HTTP)', theirs: 'mlx_lm.server (HTTP)', library: 'mlx-node library (in process)' };

function table(m) {
  const lines = [
    '| side | requests at once | rounds | TTFT ms, median (min-max) | per-request decode tok/s, median (min-max) | aggregate decode tok/s, median (min-max) | tokens / wall time, tok/s | wall s | batched / alone |',
    '|---|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const [k, s] of Object.entries(m.summary)) {
    for (const mode of ['alone', 'batch']) {
      const x = s[mode];
      const r = (v, d) => `${fmt(v.median, d)} (${fmt(v.min, d)}-${fmt(v.max, d)})`;
      lines.push(
        `| ${LABELS[k]} | ${x.n} | ${x.rounds} | ${r({ median: x.ttft.median * 1000, min: x.ttft.min * 1000, max: x.ttft.max * 1000 }, 0)} | ${r(x.decodeTps, 2)} | ${r(x.aggregateDecodeTps, 2)} | ` +
          `${fmt(x.aggregateWallTps.median, 2)} | ${fmt(x.wall.median, 1)} | ${mode === 'batch' ? `${fmt(x.aggregateDecodeTps.median / s.alone.aggregateDecodeTps.median, 2)}x` : ''} |`,
      );
    }
  }
  return lines.join('\n');
}

function renderReport(report) {
  const cks = checks(report);
  const parts = [
    '# Batch throughput results',
    '',
    `Made by \`${report.command}\` on ${report.date}, in ${fmt(report.seconds / 60, 1)} minutes. Refresh this file whenever the scheduler, the server or decoding changes.`,
    '',
    '## Machine and builds',
    '',
    ...machineLines(report, 'mlx_lm.server'),
    '',
    '## Method',
    '',
    `- Models: ${report.models.map((m) => `\`.cache/bench-models/${m.name}\` (${m.rounds.length} round${m.rounds.length === 1 ? '' : 's'}, mlx_lm.server in ${m.summary.theirs?.batch.rounds ?? 0} of them)`).join(', ')}; benchmark/models.py: MLX-LM's Qwen3 class, seeded random weights, the real Qwen3 tokenizer. Their text is noise, but the work per token is a real model's. ` +
      'mlx_lm.server gets fewer rounds on the 4-bit model only because of time: MLX\'s CPU quantized matmul (a scalar loop) makes one of its 8 x 128-token loads take about 7 minutes here.',
    `- Load: ${report.concurrency} different prompts (${report.promptTokens} tokens each, plain text, no chat template), ${report.maxTokens} tokens each, greedy (\`temperature: 0\`), ` +
      `EOS blocked with \`logit_bias\` (${Object.keys(report.models[0].logitBias).join(', ')}: -100) so that every request generates exactly ${report.maxTokens} tokens (checked: \`usage.completion_tokens\` and \`finish_reason: "length"\`). No seed (mlx_lm.server keeps seeded requests out of its batches).`,
    '- "alone": one request (the first prompt); "at once": all the requests sent together (`Promise.all` of `fetch`es).',
    `- Servers, each in its own process, both up for the whole of a model's run (idle while the other is measured):`,
    `  - mlx-node: \`${report.models[0].commands.ours}\` (lib/server over the library's continuous-batching scheduler, \`maxBatch\` ${report.concurrency}).`,
    `  - mlx_lm.server: ${report.models.every((m) => !m.commands.theirs) ? 'not started (`--mlx-lm-rounds 0`); otherwise ' : ''}\`${report.models.find((m) => m.commands.theirs)?.commands.theirs ?? '.cache/venv/bin/python -m mlx_lm server --model DIR --port PORT ...'}\`, with the project venv's environment (OpenBLAS preloaded, as the other benchmarks). ` +
      `\`--decode-concurrency\` (default 32) is how many sequences its BatchGenerator decodes together, \`--prompt-concurrency\` (default 8) how many prompts it prefills together; ` +
      `both set to ${report.concurrency}, the load's size, as mlx-node's \`--max-batch\`. Batching is on by default in 0.32.2 for requests without a seed (\`_is_batchable\`).`,
    '- Client: this process, plain `fetch` to `POST /v1/completions` with `stream: true` and `stream_options: { include_usage: true }`; every server-sent event is timed on arrival.',
    `- Library rows (mlx-node only): the same loads as \`model.stream()\` calls in this process (\`loadModel(dir, { maxBatch: ${report.concurrency}, precision: '${report.precision}' })\`), to show what HTTP adds.`,
    '- Per request: **TTFT** from sending the request to the first event carrying text (mlx_lm.server sends an event only when its detokenizer has text, mlx-node one per token; ' +
      'with greedy decoding both generate the same first tokens, so this is the same token on both sides); **decode tok/s** = (tokens - 1) / (time of the last token - time of the first). ' +
      '**tokens**: the server\'s `usage.completion_tokens`.',
    '- Per load: **aggregate decode tok/s** = all generated tokens / (from the first request\'s first token to the last request\'s last token); ' +
      '**tokens / wall time** = all generated tokens / (from sending to the last request\'s last token).',
    `- Each prompt starts with a word of its own (a different one per request, round and warm-up), so no request shares a first token with an earlier one and neither server's prompt cache serves any of it ` +
      '(checked: `cached_tokens` is 0 everywhere).',
    `- Warm-up per side, untimed: one ${WARMUP_TOKENS}-token request alone, then ${report.concurrency} at once. Then per round: each side alone, then each side's load at once, the order of the sides rotating from round to round.`,
    '- TTFT and per-request decode: median and range over every request of every round; aggregates: median and range over rounds. "batched / alone" is the ratio of the median aggregates.',
    '',
  ];
  for (const m of report.models) {
    parts.push(`## ${m.name}`, '', table(m), '');
    const st = Object.entries(m.sameText)
      .map(([k, v]) => `${LABELS[k]}: ${v.batch}/${v.of} requests of the load${v.alone ? ', and the single request,' : ' (the single request differs)'} with mlx-node serve's text`)
      .join('; ');
    parts.push(`- Same text (round 1): ${st}.`, '');
  }
  parts.push('## Checks (issue 27)', '', '| model | check | figures | result |', '|---|---|---|:-:|');
  for (const c of cks) parts.push(`| ${c.model} | ${c.what} | ${c.detail} | ${verdict(c.ok, '**FAIL**')} |`);
  parts.push('');
  const notes = [];
  for (const m of report.models) {
    for (const [k, s] of Object.entries(m.summary)) {
      for (const mode of ['alone', 'batch']) {
        if (!s[mode].allLength) notes.push(`${m.name}, ${LABELS[k]}, ${mode}: not every request generated exactly ${report.maxTokens} tokens (${s[mode].tokens.min}-${s[mode].tokens.max}).`);
        if (s[mode].cachedTokens) notes.push(`${m.name}, ${LABELS[k]}, ${mode}: up to ${s[mode].cachedTokens} prompt tokens came from a cache.`);
      }
    }
  }
  if (notes.length) parts.push('## Anomalies', '', ...notes.map((x) => `- ${x}`), '');
  return { md: parts.join('\n'), checks: cks };
}

// ---------------------------------------------------------------- main

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const names = args.models.length ? args.models : Object.keys(PLAN);
  const started = Date.now();
  warnIfBusy(log);
  if (args.build) require('../scripts/build').build({ quiet: true });
  const { python, env } = require('../scripts/venv').ensureVenv();
  const made = spawnSync(python, [path.join(__dirname, 'models.py'), MODELS_DIR, '--only', names.join(',')], { env, cwd: ROOT, stdio: ['ignore', 2, 2] });
  if (made.status !== 0) fail(`benchmark/models.py failed (exit ${made.status})`);

  const { loadModel, mlxInfo } = require('..');
  const worker = new PythonWorker(python, env, 'mlx_lm_bench.py', 'MLX-LM');
  const report = {
    ...newReport('bench:batch', env, mlxInfo()),
    concurrency: args.concurrency,
    precision: args.precision,
    maxTokens: args.maxTokens,
    promptTokens: null,
    models: [],
  };
  try {
    report.theirs = await worker.request({ cmd: 'info' });
  } finally {
    worker.close();
  }
  checkReference(report, log);

  for (const name of names) {
    await benchModel(name, args, { python, env, loadModel }, report);
    const pt = report.models.at(-1).summary.ours.batch.promptTokens;
    report.promptTokens = `${pt.min}-${pt.max}`;
  }
  report.loadAfter = loadavg();
  report.seconds = (Date.now() - started) / 1000;

  const { md, checks: cks } = renderReport(report);
  process.stdout.write(`${md}\n`);
  for (const c of cks) process.stdout.write(`${verdict(c.ok, 'FAIL')}: ${c.model}: ${c.what}: ${c.detail}\n`);
  writeRaw(report, 'batch-', log);
  const out = args.out ?? (args.defaults ? RESULTS : null);
  if (out) {
    // A hand-written analysis section, if the file has one, is kept below the new figures.
    let keep = '';
    if (out === RESULTS && fs.existsSync(RESULTS)) {
      const prev = fs.readFileSync(RESULTS, 'utf8');
      const at = prev.indexOf('\n## Analysis');
      if (at >= 0) keep = prev.slice(at);
    }
    fs.writeFileSync(out, md.trimEnd() + '\n' + keep);
    log(`wrote ${path.relative(ROOT, out)}`);
  } else {
    log('not a default run: RESULTS-batch.md left as it is (use --out FILE to write this report)');
  }
  process.exit(0);
}

if (require.main === module) {
  main().catch((e) => {
    process.stderr.write(`[bench:batch] ${e.stack || e}\n`);
    process.exit(1);
  });
}

module.exports = { renderReport, summarize };
