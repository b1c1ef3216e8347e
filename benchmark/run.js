#!/usr/bin/env node
'use strict';
// `npm run bench`: mlx-node against MLX-LM on the same machine, the same libmlx and the
// same BLAS, interleaved (ours, MLX-LM, ours, MLX-LM, ...) after a warm-up, on the same
// model folders, prompt, options and seed. Prints markdown tables; a full default run
// also writes benchmark/RESULTS.md. See benchmark/sampling.md for what is not here yet.

const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { PythonWorker } = require('./python-worker');
const { median, machineInfo, loadavg, argReaders } = require('./machine');
const { ROOT, MODELS_DIR, fmt, logger, warnIfBusy, newReport, checkReference, machineLines, writeRaw } = require('./common');
const { cargoEnv } = require('../scripts/mlx');

const RESULTS = path.join(__dirname, 'RESULTS.md');

// ~100 tokens of plain text (91 with the Qwen3 tokenizer; no BOS for Qwen3).
const PROMPT =
  'The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined ' +
  'movable metal type, oil-based ink and a wooden screw press into a system that could produce books ' +
  'quickly and cheaply. Within fifty years, presses were running in more than two hundred cities across ' +
  'Europe, and the number of books in circulation grew from thousands to millions. Explain, in a few clear ' +
  'paragraphs, how this invention changed science, religion, education and politics, and';
const SEED = 42;
// Per-configuration warm-up (compiles that configuration's sampler): a short prompt,
// as a 91-token prefill costs up to a minute with the 4-bit model here.
const WARMUP_PROMPT = 'Hello, my name is';

const CONFIGS = {
  greedy: { label: 'greedy', options: {} },
  temp: { label: 'temp 0.7', options: { temperature: 0.7 } },
  'temp-top-p': { label: 'temp 0.7 + top-p 0.9', options: { temperature: 0.7, topP: 0.9 } },
  full: {
    label: 'full sampling',
    options: { temperature: 0.7, topP: 0.9, topK: 40, minP: 0.05, repetitionPenalty: 1.1 },
  },
};
const ALL_CONFIGS = Object.keys(CONFIGS);

// Sized so that a full run takes about 20 minutes on 2 CPU cores. The 4-bit model is
// timed on two configurations only: MLX's CPU quantized matmul makes its prefill alone
// take ~30-60 s per run here.
const PLAN = {
  'qwen3-100m-f32': { maxTokens: 128, configs: ALL_CONFIGS, perToken: true },
  'qwen3-0.6b-f32': { maxTokens: 32, configs: ALL_CONFIGS },
  'qwen3-0.6b-4bit': { maxTokens: 16, configs: ['greedy', 'full'] },
  // Other families (issue 29), only with --model: benchmark/RESULTS-families.md. MLX-LM's
  // 4-bit Gemma prefill alone takes ~40 s per run here (MLX's CPU quantized matmul).
  'gemma3-1b-f32': { maxTokens: 16, configs: ['greedy', 'full'], family: true },
  'gemma3-1b-4bit': { maxTokens: 16, configs: ['greedy', 'full'], family: true },
  'qwen3-moe-1b-f32': { maxTokens: 32, configs: ['greedy', 'full'], family: true },
  'qwen3-moe-1b-4bit': { maxTokens: 32, configs: ['greedy', 'full'], family: true },
  'lfm2-350m-f32': { maxTokens: 32, configs: ['greedy', 'full'], family: true },
  'lfm2-350m-4bit': { maxTokens: 32, configs: ['greedy', 'full'], family: true },
};
const QUICK = {
  'qwen3-100m-f32': { maxTokens: 32, configs: ALL_CONFIGS, perToken: true },
  'qwen3-0.6b-f32': { maxTokens: 8, configs: ['greedy', 'full'] },
  'qwen3-0.6b-4bit': { maxTokens: 4, configs: ['greedy'] },
  'gemma3-1b-f32': { maxTokens: 4, configs: ['greedy'], family: true },
  'gemma3-1b-4bit': { maxTokens: 4, configs: ['greedy'], family: true },
  'qwen3-moe-1b-f32': { maxTokens: 4, configs: ['greedy'], family: true },
  'qwen3-moe-1b-4bit': { maxTokens: 4, configs: ['greedy'], family: true },
  'lfm2-350m-f32': { maxTokens: 4, configs: ['greedy'], family: true },
  'lfm2-350m-4bit': { maxTokens: 4, configs: ['greedy'], family: true },
};
// A run without --model: the Qwen3 models (benchmark/RESULTS.md).
const DEFAULT_MODELS = Object.keys(PLAN).filter((n) => !PLAN[n].family);
const ROUNDS = 3;
const PER_TOKEN_AT = [10, 25, 50, 100, 500];
const PER_TOKEN_AT_QUICK = [10, 25];
// Per-token time at N: median interval between consecutive tokens N-4 .. N+5.
const WINDOW_BEFORE = 5;
const WINDOW_AFTER = 5;
const WARMUP_TOKENS = 8;

const USAGE = `usage: npm run bench -- [options]
  --quick            short run: 1 round, fewer tokens, the 100M model only (unless --model)
  --model NAME       benchmark only this model (repeat or comma-separate); a name of
                     ${Object.keys(PLAN).join(', ')}, or a model folder
  --rounds N         timed rounds per configuration (default ${ROUNDS}; --quick: 1)
  --max-tokens N     generated tokens per run, for every model (default: per model)
  --config NAME      only these configurations (${ALL_CONFIGS.join(', ')})
  --out FILE         write the report there (a full default run writes benchmark/RESULTS.md)
  --no-build         use the addon as built (default: cargo build --release first)
  --sampling         sampling micro-benchmarks only (cargo run --release -p sampling-bench)
  --profile          where a decode step's time goes: forward, sampling, id read, each timed
                     alone, and the pipelined step (the 100M model unless --model; --max-tokens);
                     ours (benchmark/sampling), then MLX-LM's (benchmark/profile_ref.py)`;

const { log, fail } = logger('bench');

function parseArgs(argv) {
  const a = { quick: false, models: [], rounds: null, maxTokens: null, configs: [], out: null, build: true, profile: false, sampling: false };
  const { value, positive } = argReaders(argv, fail, USAGE);
  for (let i = 0; i < argv.length; i++) {
    const f = argv[i];
    if (f === '--quick') a.quick = true;
    else if (f === '--profile') a.profile = true;
    else if (f === '--sampling') a.sampling = true;
    else if (f === '--no-build') a.build = false;
    else if (f === '--help' || f === '-h') {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    } else if (f === '--model') a.models.push(...value(i++, f).split(',').filter(Boolean));
    else if (f === '--config') a.configs.push(...value(i++, f).split(',').filter(Boolean));
    else if (f === '--rounds') a.rounds = positive(value(i++, f), f);
    else if (f === '--max-tokens') a.maxTokens = positive(value(i++, f), f);
    else if (f === '--out') a.out = path.resolve(value(i++, f));
    else fail(`unknown argument ${f}\n${USAGE}`);
  }
  for (const c of a.configs) if (!CONFIGS[c]) fail(`unknown configuration ${c}; known: ${ALL_CONFIGS.join(', ')}`);
  return a;
}

// ---------------------------------------------------------------- helpers

const min = (xs) => Math.min(...xs);
const max = (xs) => Math.max(...xs);
const mb = (bytes) => bytes / 1e6;

function firstDiff(a, b) {
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return -1;
}

// ---------------------------------------------------------------- runs

async function runOurs(model, options, input = PROMPT) {
  const t0 = performance.now();
  const r = await model.generate(input, options);
  return { ...r, wallSeconds: (performance.now() - t0) / 1000 };
}

async function runTheirs(worker, options, input = PROMPT) {
  return worker.request({ cmd: 'generate', input, options });
}

async function streamOurs(model, options) {
  const times = [];
  const tokens = [];
  const t0 = performance.now();
  const s = model.stream(PROMPT, options);
  for await (const chunk of s) {
    times.push((performance.now() - t0) / 1000);
    tokens.push(chunk.token);
  }
  const r = await s.result;
  // One chunk per generated token, then possibly one flush chunk of held-back text.
  return { ...r, tokenTimes: times.slice(0, r.tokens.length), chunkTokens: tokens.slice(0, r.tokens.length) };
}

function perTokenMs(times, at) {
  const out = {};
  for (const n of at) {
    // times[i] is when token i+1 arrived; interval k = times[k] - times[k-1] is token k+1's.
    const lo = n - WINDOW_BEFORE;
    const hi = n + WINDOW_AFTER;
    if (lo < 1 || hi > times.length) {
      out[n] = NaN;
      continue;
    }
    const iv = [];
    for (let tok = lo; tok <= hi; tok++) iv.push((times[tok - 1] - times[tok - 2]) * 1000);
    out[n] = median(iv);
  }
  return out;
}

function summarize(rounds) {
  const pick = (side, key) => rounds.map((r) => r[side][key]);
  const ratio = (key) => rounds.map((r) => r.ours[key] / r.theirs[key]);
  const row = {};
  for (const key of ['promptTps', 'generationTps', 'peakMemory', 'wallSeconds']) {
    const rs = ratio(key);
    row[key] = {
      ours: median(pick('ours', key)),
      theirs: median(pick('theirs', key)),
      ratio: median(rs),
      ratioMin: min(rs),
      ratioMax: max(rs),
      // Paired, as the ratio is: the medians of each side can come from different rounds.
      diff: median(rounds.map((r) => r.ours[key] - r.theirs[key])),
    };
  }
  const base = rounds[0];
  const cross = rounds.map((r) => firstDiff(r.ours.tokens, r.theirs.tokens));
  row.identical = cross.every((d) => d === -1);
  row.firstDiff = cross.filter((d) => d !== -1);
  row.oursStable = rounds.every((r) => firstDiff(r.ours.tokens, base.ours.tokens) === -1);
  row.theirsStable = rounds.every((r) => firstDiff(r.theirs.tokens, base.theirs.tokens) === -1);
  row.promptTokens = [base.ours.promptTokens, base.theirs.promptTokens];
  row.generationTokens = [median(pick('ours', 'generationTokens')), median(pick('theirs', 'generationTokens'))];
  row.finish = [base.ours.finishReason, base.theirs.finishReason];
  return row;
}

function describeIdentical(row) {
  if (row.identical) return 'yes';
  const at = row.firstDiff.length ? ` (from token ${min(row.firstDiff)})` : '';
  return `**no**${at}`;
}

// Reads every file of a model folder once, so that both sides' timed loads find it in the page
// cache (the first to load would otherwise also time the disk).
function pageIn(dir) {
  const buf = Buffer.allocUnsafe(64 * 2 ** 20);
  for (const f of fs.readdirSync(dir)) {
    const file = path.join(dir, f);
    if (!fs.statSync(file).isFile()) continue;
    const fd = fs.openSync(file, 'r');
    try {
      while (fs.readSync(fd, buf, 0, buf.length, null) > 0);
    } finally {
      fs.closeSync(fd);
    }
  }
}

async function benchModel(name, dir, plan, args, worker, loadModel, report) {
  const maxTokens = args.maxTokens ?? plan.maxTokens;
  const rounds = args.rounds ?? (args.quick ? 1 : ROUNDS);
  const configs = args.configs.length ? plan.configs.filter((c) => args.configs.includes(c)) : plan.configs;
  log(`${name}: loading (${path.relative(ROOT, dir)})`);
  pageIn(dir);
  const tl = performance.now();
  // Exact precision (quantized models default to fast): "same tokens" compares with MLX-LM.
  const model = await loadModel(dir, { precision: 'exact' });
  const oursLoad = (performance.now() - tl) / 1000;
  const theirsLoad = (await worker.request({ cmd: 'load', model: dir })).seconds;
  const entry = { name, dir, info: model.info, maxTokens, rounds, oursLoad, theirsLoad, configs: {}, perToken: null };
  report.models.push(entry);
  try {
    // Warm-up: page the weights in, grow both allocators' caches, compile the samplers.
    const warm = { maxTokens: Math.min(WARMUP_TOKENS, maxTokens), seed: SEED };
    log(`${name}: warm-up`);
    await runOurs(model, warm);
    await runTheirs(worker, warm);
    for (const c of configs) {
      const options = { ...CONFIGS[c].options, maxTokens, seed: SEED };
      const short = { ...CONFIGS[c].options, maxTokens: 2, seed: SEED };
      await runOurs(model, short, WARMUP_PROMPT);
      await runTheirs(worker, short, WARMUP_PROMPT);
      const results = [];
      for (let r = 0; r < rounds; r++) {
        const ours = await runOurs(model, options);
        const theirs = await runTheirs(worker, options);
        results.push({ ours, theirs });
        log(
          `${name} | ${CONFIGS[c].label} | round ${r + 1}/${rounds}: decode ${fmt(ours.generationTps)} vs ${fmt(
            theirs.generationTps,
          )} tok/s, prompt ${fmt(ours.promptTps)} vs ${fmt(theirs.promptTps)} tok/s, tokens ${
            firstDiff(ours.tokens, theirs.tokens) === -1 ? 'identical' : `differ at ${firstDiff(ours.tokens, theirs.tokens)}`
          } (load ${loadavg()})`,
        );
      }
      entry.configs[c] = { options, rounds: results, summary: summarize(results) };
    }
    if (plan.perToken && (!args.configs.length || args.configs.includes('greedy'))) {
      const at = args.quick ? PER_TOKEN_AT_QUICK : PER_TOKEN_AT;
      const n = max(at) + WINDOW_AFTER;
      const options = { maxTokens: n, seed: SEED };
      log(`${name}: per-token time, greedy, ${n} tokens`);
      const ours = await streamOurs(model, options);
      const theirs = await worker.request({ cmd: 'generate', input: PROMPT, options, timestamps: true });
      entry.perToken = {
        at,
        maxTokens: n,
        ours: { ms: perTokenMs(ours.tokenTimes, at), generated: ours.tokens.length, finishReason: ours.finishReason,
                generationTps: ours.generationTps, tokenTimes: ours.tokenTimes },
        theirs: { ms: perTokenMs(theirs.tokenTimes, at), generated: theirs.tokens.length, finishReason: theirs.finishReason,
                  generationTps: theirs.generationTps, tokenTimes: theirs.tokenTimes },
        identical: firstDiff(ours.tokens, theirs.tokens) === -1,
        chunkTokensMatch: firstDiff(ours.chunkTokens, ours.tokens) === -1,
      };
    }
  } finally {
    await model.dispose();
  }
}

// ---------------------------------------------------------------- report

function mainTable(report) {
  const lines = [
    '| model | configuration | prompt tok/s ours | MLX-LM | ratio (min-max) | decode tok/s ours | MLX-LM | ratio (min-max) | peak MB ours | MLX-LM | ratio (min-max) | same tokens |',
    '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|',
  ];
  for (const m of report.models) {
    for (const [c, { summary: s }] of Object.entries(m.configs)) {
      const r = (k) => `${fmt(s[k].ratio, 2)} (${fmt(s[k].ratioMin, 2)}-${fmt(s[k].ratioMax, 2)})`;
      lines.push(
        `| ${m.name} | ${CONFIGS[c].label} | ${fmt(s.promptTps.ours)} | ${fmt(s.promptTps.theirs)} | ${r('promptTps')} | ${fmt(
          s.generationTps.ours, 2,
        )} | ${fmt(s.generationTps.theirs, 2)} | ${r('generationTps')} | ${fmt(mb(s.peakMemory.ours), 0)} | ${fmt(
          mb(s.peakMemory.theirs), 0,
        )} | ${r('peakMemory')} | ${describeIdentical(s)} |`,
      );
    }
  }
  return lines.join('\n');
}

// As the caller sees it: from the call to the resolved result, prompt and all tokens.
// Independent of how each side splits its time into prompt and decode.
function wallTable(report) {
  const lines = [
    '| model | configuration | tokens | total s ours | MLX-LM | MLX-LM / ours (min-max) |',
    '|---|---|--:|--:|--:|--:|',
  ];
  for (const m of report.models) {
    for (const [c, { summary: s }] of Object.entries(m.configs)) {
      const w = s.wallSeconds;
      lines.push(`| ${m.name} | ${CONFIGS[c].label} | ${s.promptTokens[0]} + ${s.generationTokens[0]} | ${fmt(w.ours, 2)} | ${fmt(w.theirs, 2)} | ` +
        `${fmt(1 / w.ratio, 2)} (${fmt(1 / w.ratioMax, 2)}-${fmt(1 / w.ratioMin, 2)}) |`);
    }
  }
  return lines.join('\n');
}

// One load of each model a side, from the call to a model ready to generate: ours
// `loadModel(dir, { precision: 'exact' })` in JS; MLX-LM's worker `load_model`, `load_tokenizer`
// and `mx.eval(model.parameters())`. Ours runs first; `pageIn` has read the files before either.
function loadTable(report) {
  const lines = ['| model | load s ours | MLX-LM | MLX-LM / ours |', '|---|--:|--:|--:|'];
  for (const m of report.models) {
    lines.push(`| ${m.name} | ${fmt(m.oursLoad, 2)} | ${fmt(m.theirsLoad, 2)} | ${fmt(m.theirsLoad / m.oursLoad, 2)} |`);
  }
  return lines.join('\n');
}

function perTokenTable(report) {
  const m = report.models.find((x) => x.perToken);
  if (!m) return null;
  const p = m.perToken;
  const lines = [
    `| ${m.name}, greedy, ${p.maxTokens} tokens | ${p.at.map((n) => `token ${n}`).join(' | ')} | generated | decode tok/s |`,
    `|---|${p.at.map(() => '--:').join('|')}|--:|--:|`,
  ];
  for (const [label, side] of [['ours (ms/token)', p.ours], ['MLX-LM (ms/token)', p.theirs]]) {
    lines.push(`| ${label} | ${p.at.map((n) => fmt(side.ms[n], 1)).join(' | ')} | ${side.generated} (${side.finishReason}) | ${fmt(side.generationTps, 2)} |`);
  }
  lines.push(`| ours / MLX-LM | ${p.at.map((n) => fmt(p.ours.ms[n] / p.theirs.ms[n], 2)).join(' | ')} | | |`);
  return lines.join('\n');
}

// The issue's targets, checked against the medians above.
function targets(report) {
  const out = [];
  const get = (model, config) => report.models.find((m) => m.name === model)?.configs[config]?.summary;
  const check = (what, ok, detail) => out.push(`| ${what} | ${detail} | ${ok ? 'met' : '**missed**'} |`);
  const g100 = get('qwen3-100m-f32', 'greedy');
  const f100 = get('qwen3-100m-f32', 'full');
  if (f100) check('100M f32, full sampling: decode >= 1.3x MLX-LM', f100.generationTps.ratio >= 1.3, `${fmt(f100.generationTps.ratio, 2)}x`);
  if (f100 && g100) {
    const r = f100.generationTps.ours / g100.generationTps.ours;
    check('100M f32, full sampling: within 10% of our greedy decode', r >= 0.9, `${fmt(r * 100, 0)}% of greedy`);
  }
  if (g100) {
    check('100M f32 greedy: decode >= 1.05x MLX-LM', g100.generationTps.ratio >= 1.05, `${fmt(g100.generationTps.ratio, 2)}x`);
  }
  for (const m of report.models) {
    for (const [c, { summary: s }] of Object.entries(m.configs)) {
      check(`${m.name}, ${CONFIGS[c].label}: prompt tok/s >= MLX-LM`, s.promptTps.ratio >= 1, `${fmt(s.promptTps.ratio, 2)}x`);
      const d = mb(s.peakMemory.diff);
      check(`${m.name}, ${CONFIGS[c].label}: peak memory <= MLX-LM`, s.peakMemory.ratio <= 1,
        `${d >= 0 ? '+' : ''}${fmt(d, 1)} MB (${fmt(s.peakMemory.ratio, 4)}x)`);
    }
  }
  const f06 = get('qwen3-0.6b-f32', 'full');
  if (f06) check('0.6B f32, full sampling: decode >= 1.1x MLX-LM', f06.generationTps.ratio >= 1.1, `${fmt(f06.generationTps.ratio, 2)}x`);
  const q4 = report.models.find((m) => m.name === 'qwen3-0.6b-4bit');
  if (q4) {
    for (const [c, { summary: s }] of Object.entries(q4.configs)) {
      check(`0.6B 4-bit, ${CONFIGS[c].label}: decode >= MLX-LM`, s.generationTps.ratio >= 1, `${fmt(s.generationTps.ratio, 2)}x`);
    }
  }
  if (!out.length) return null;
  return ['| target | measured (median) | |', '|---|--:|---|', ...out].join('\n');
}

// What the other families' benchmark models are (benchmark/models.py), when the run has any.
function familyNotes(report) {
  const has = (prefix) => report.models.some((m) => PLAN[m.name]?.family && m.name.startsWith(prefix));
  const lines = [];
  if (has('gemma3-')) {
    lines.push('- gemma3-1b-*: Gemma 3 1B\'s shape (`gemma3_text`: hidden 1152, 26 layers, 4 heads, 1 KV head of 256, MLP 6912, ' +
      'sliding window 512 on 5 of every 6 layers, query_pre_attn_scalar 256, RoPE bases 1e6 global / 1e4 local, vocabulary 262,144, tied), ' +
      'seeded random weights from MLX-LM\'s own class, the real Gemma 3 tokenizer (its BOS included in the prompt count); 4-bit: `mlx_lm convert`, 4 bits, group 64. ' +
      'With this prompt and these lengths no sliding window fills (the rotating caches never wrap), as for any prompt under 512 tokens.');
  }
  if (has('qwen3-moe-')) {
    lines.push('- qwen3-moe-1b-*: Qwen3-30B-A3B\'s layout (`qwen3_moe`: every layer sparse, top 8 of the experts, renormalized, 4 KV heads of 128, ' +
      'untied head, vocabulary 151,936) scaled down: hidden 1024, 12 layers, 16 heads, 64 experts of 384 (~1.3B parameters, ~0.33B used per token ' +
      'with the head), seeded random weights, the real Qwen3 tokenizer; 4-bit: `mlx_lm convert`, 4 bits, group 64, routers at 8 bits (the model\'s quant_predicate). ' +
      'Both sides run the experts with MLX\'s `gather_mm` / `gather_qmm`.');
  }
  if (has('lfm2-')) {
    lines.push('- lfm2-350m-*: LFM2-350M\'s shape (`lfm2`: hidden 1024, 16 layers: 10 gated short convolutions of 3 taps and 6 attention layers ' +
      'of 16 heads with 8 KV heads, feed-forward 4608, tied head) with the Qwen3 vocabulary (151,936) and tokenizer, seeded random weights from ' +
      'MLX-LM\'s own class; 4-bit: `mlx_lm convert`, 4 bits, group 64 (the convolutions stay float).');
  }
  if (!lines.length) return [];
  return [
    '## Models',
    '',
    ...lines,
    '- No bf16 rows: MLX\'s CPU bfloat16 matmuls are very slow on both sides, so on the CPU backend they would time those kernels rather than mlx-node against MLX-LM.',
    '',
  ];
}

function renderReport(report) {
  const { ours } = report;
  const plan = report.models
    .map((m) => `${m.name}: ${Object.keys(m.configs).map((c) => CONFIGS[c].label).join(', ')}; ${m.maxTokens} tokens, ${m.rounds} rounds`)
    .join('\n- ');
  // The prompt's length in tokens depends on the tokenizer (Gemma 3's adds a BOS, Qwen3's none).
  const promptTokens = report.models.map((m) => [m.name, Object.values(m.configs)[0]?.summary.promptTokens[0]]);
  const promptWhat = new Set(promptTokens.map(([, n]) => n)).size > 1
    ? `prompt (${promptTokens.map(([name, n]) => `${n} tokens for ${name}`).join(', ')})`
    : `${report.promptTokens}-token prompt`;
  const parts = [
    '# Benchmark results',
    '',
    `Made by \`${report.command}\` on ${report.date}, in ${fmt(report.seconds / 60, 1)} minutes. ` +
      'Refresh this file whenever performance changes.',
    '',
    '## Machine and builds',
    '',
    ...machineLines(report),
    '',
    '## Method',
    '',
    `- Same model folder, same ${promptWhat} (plain text, no chat template), same options, seed ${SEED} on both sides.`,
    "- mlx-node loads every model with `precision: 'exact'` (MLX's arithmetic, MLX-LM's tokens; quantized models on the CPU default to fast precision, which benchmark/RESULTS-llama.md measures).",
    `- Per model: one warm-up generation on each side (${WARMUP_TOKENS} tokens), then per configuration a 2-token warm-up on each side with a short prompt and the timed rounds, interleaved: ours, MLX-LM, ours, MLX-LM, ...`,
    `- ${plan}`,
    '- prompt tok/s, decode tok/s and peak memory are each side\'s own figures: MLX-LM\'s from its final `GenerationResponse` ' +
      '(prompt tokens / time to the first token; generated tokens / time since the first token; `mx.get_peak_memory()`), ours from `GenerationResult` (same definitions). ' +
      'The peak is reset before every generation on both sides (MLX-LM\'s worker calls `mx.reset_peak_memory()`). MB = 10^6 bytes.',
    '- MLX-LM\'s `stream_generate` returns with one more decode step queued past the last token (tens of ms on the CPU); its worker waits for that step ' +
      'before answering, outside every figure, so it does not run into our next timed generation.',
    '- Each cell is the median over the rounds; a ratio is ours / MLX-LM, median over rounds with min-max (for memory lower is better).',
    '- "same tokens": every round\'s generated ids equal, ours against MLX-LM\'s.',
    '',
    ...familyNotes(report),
    '## Side by side',
    '',
    mainTable(report),
    '',
    '## End-to-end time per generation',
    '',
    'Wall time from the call to the result (ours: `await model.generate()` in JS; MLX-LM: the whole `stream_generate` loop in the worker). ' +
      'Above 1 in the last column means we are faster.',
    '',
    wallTable(report),
    '',
    '## Load',
    '',
    'One load of each model a side, from the call to a model ready to generate (ours: `loadModel()` resolved; MLX-LM: its worker\'s ' +
      '`load_model`, `load_tokenizer` and `mx.eval(model.parameters())`), ours first. The folder\'s files are read once before either ' +
      '(so both find them in the page cache). Above 1 in the last column means we are faster.',
    '',
    loadTable(report),
  ];
  const pt = perTokenTable(report);
  if (pt) {
    parts.push(
      '',
      '## Per-token decode time',
      '',
      `Median interval between consecutive streamed tokens, over tokens N-${WINDOW_BEFORE} to N+${WINDOW_AFTER} for token N ` +
        '(ours: `model.stream()` chunk arrival in JS; MLX-LM: `stream_generate` response times in Python).',
      '',
      pt,
    );
  }
  const tg = targets(report);
  if (tg) parts.push('', '## Targets (issue 6)', '', tg);
  if (tg && /peak memory <= MLX-LM \|[^\n]*\*\*missed\*\*/.test(tg)) {
    parts.push('', 'Peak memory: where the peak is, what was changed and what is left is in `benchmark/peak-memory.md`.');
  }
  if (tg && /within 10% of our greedy decode \|[^\n]*\*\*missed\*\*/.test(tg)) {
    parts.push('', 'Full sampling against greedy: where the difference goes, measured runs and what was tried are in `benchmark/sampling.md`.');
  }
  const notes = [];
  for (const m of report.models) {
    for (const [c, { summary: s }] of Object.entries(m.configs)) {
      if (!s.oursStable || !s.theirsStable) notes.push(`${m.name}, ${CONFIGS[c].label}: tokens changed between rounds (ours stable: ${s.oursStable}, MLX-LM stable: ${s.theirsStable}).`);
      if (s.promptTokens[0] !== s.promptTokens[1]) notes.push(`${m.name}: prompt tokens differ (ours ${s.promptTokens[0]}, MLX-LM ${s.promptTokens[1]}).`);
      if (s.finish[0] !== 'length' || s.finish[1] !== 'length') notes.push(`${m.name}, ${CONFIGS[c].label}: finished by ${s.finish.join(' / ')} before ${m.maxTokens} tokens.`);
    }
    if (m.perToken && !m.perToken.identical) notes.push(`${m.name}: the ${m.perToken.maxTokens}-token greedy runs gave different tokens.`);
  }
  if (notes.length) parts.push('', '## Anomalies', '', ...notes.map((n) => `- ${n}`));
  parts.push(
    '',
    '## Not measured yet',
    '',
    '- Sampling micro-benchmarks are a separate command, `npm run bench -- --sampling`; what they cover and what is missing is in `benchmark/sampling.md`.',
    ours.backend === 'cuda' ? '- The CPU rows: see benchmark/RESULTS.md.' : '- CUDA rows: not in this run; see benchmark/RESULTS-cuda.md.',
    '',
  );
  return parts.join('\n');
}

// ---------------------------------------------------------------- main

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (args.sampling) {
    // benchmark/sampling: a Rust binary over the lm crate, timed without N-API in between.
    // Then MLX-LM's own functions on the same inputs (benchmark/sampling_ref.py), each first
    // checked against the baseline outputs the Rust run wrote into checkDir.
    require('../scripts/mlx').ensureOpenBlas();
    const checkDir = path.join(ROOT, '.cache', 'sampling-check');
    fs.rmSync(checkDir, { recursive: true, force: true });
    const run = (cmd, argv, env, what) => {
      const r = spawnSync(cmd, argv, { cwd: ROOT, env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 1 << 26 });
      process.stdout.write(r.stdout || '');
      if (r.status !== 0) fail(`${what} failed (exit ${r.status})`);
      return r.stdout;
    };
    const ours = run('cargo', ['run', '--release', '--quiet', '-p', 'sampling-bench', '--', '--check-dir', checkDir], cargoEnv(), 'benchmark/sampling');
    const { python, env } = require('../scripts/venv').ensureVenv();
    const ref = run(python, [path.join(__dirname, 'sampling_ref.py'), checkDir], env, 'benchmark/sampling_ref.py');
    const mc = machineInfo();
    const md = [
      '# Sampling micro-benchmarks',
      '',
      `Made by \`npm run bench -- --sampling\` on ${new Date().toISOString().replace(/\.\d+Z$/, 'Z')}: ${mc.cpu}, ${mc.cpus} CPUs, ` +
        `load average ${loadavg()}. What each row measures and the rules: benchmark/sampling.md.`,
      '',
      '## mlx-node (benchmark/sampling, Rust over the lm crate)',
      '',
      ours.trim(),
      '',
      '## MLX-LM reference rows (benchmark/sampling_ref.py, same inputs, outputs checked equal first)',
      '',
      ref.trim(),
      '',
    ].join('\n');
    fs.writeFileSync(path.join(__dirname, 'RESULTS-sampling.md'), md);
    log('wrote benchmark/RESULTS-sampling.md');
    process.exit(0);
  }
  const quick = args.quick;
  const plans = quick ? QUICK : PLAN;
  let names = args.models.length ? args.models : quick || args.profile ? ['qwen3-100m-f32'] : DEFAULT_MODELS;
  const targetsOf = names.map((n) => {
    if (plans[n]) return { name: n, dir: path.join(MODELS_DIR, n), plan: plans[n], bench: true };
    const dir = path.resolve(n);
    if (fs.existsSync(path.join(dir, 'config.json'))) {
      return { name: path.basename(dir), dir, plan: { maxTokens: quick ? 32 : 64, configs: ALL_CONFIGS }, bench: false };
    }
    return fail(`unknown model ${n}: not one of ${Object.keys(PLAN).join(', ')} nor a model folder`);
  });

  const started = Date.now();
  warnIfBusy(log, 'both sides');
  if (args.build) require('../scripts/build').build({ quiet: true });
  const { ensureVenv } = require('../scripts/venv');
  const { python, env } = ensureVenv();
  const wanted = targetsOf.filter((t) => t.bench).map((t) => t.name);
  if (wanted.length) {
    const r = spawnSync(python, [path.join(__dirname, 'models.py'), MODELS_DIR, '--only', wanted.join(',')], {
      env,
      cwd: ROOT,
      stdio: ['ignore', 2, 2],
    });
    if (r.status !== 0) fail(`benchmark/models.py failed (exit ${r.status})`);
  }
  if (args.profile) {
    // benchmark/sampling/src/profile.rs: each stage of a decode step timed on its own.
    for (const t of targetsOf) {
      const tokens = String(args.maxTokens || 32);
      const r = spawnSync('cargo', ['run', '--release', '--quiet', '-p', 'sampling-bench', '--', '--profile', t.dir, tokens], {
        cwd: ROOT,
        env: cargoEnv(),
        stdio: 'inherit',
      });
      if (r.status !== 0) process.exit(r.status ?? 1);
      const ref = spawnSync(python, [path.join(__dirname, 'profile_ref.py'), t.dir, tokens], { cwd: ROOT, env, stdio: 'inherit' });
      if (ref.status !== 0) process.exit(ref.status ?? 1);
    }
    process.exit(0);
  }

  const { loadModel, mlxInfo } = require('..');
  const worker = new PythonWorker(python, env, 'mlx_lm_bench.py', 'MLX-LM');
  const report = { ...newReport('bench', env, mlxInfo()), promptTokens: null, models: [] };
  try {
    report.theirs = await worker.request({ cmd: 'info' });
    checkReference(report, log);
    for (const t of targetsOf) {
      await benchModel(t.name, t.dir, t.plan, args, worker, loadModel, report);
      const s = Object.values(report.models.at(-1).configs)[0]?.summary;
      if (s) report.promptTokens ??= s.promptTokens[0];
    }
  } finally {
    worker.close();
  }
  report.loadAfter = loadavg();
  report.seconds = (Date.now() - started) / 1000;

  const md = renderReport(report);
  process.stdout.write(`${md}\n`);
  writeRaw(report, '', log);
  const isDefault = !quick && !args.models.length && !args.configs.length && args.rounds === null && args.maxTokens === null;
  const out = args.out ?? (isDefault ? RESULTS : null);
  if (out) {
    // The speech section belongs to `npm run bench:tts`: keep it.
    let speech = '';
    if (out === RESULTS && fs.existsSync(RESULTS)) {
      const prev = fs.readFileSync(RESULTS, 'utf8');
      const at = prev.indexOf('\n## Speech (Chatterbox)');
      if (at >= 0) speech = prev.slice(at);
    }
    fs.writeFileSync(out, md.trimEnd() + '\n' + speech);
    log(`wrote ${path.relative(ROOT, out)}`);
  } else {
    log('not a full default run: RESULTS.md left as it is (use --out FILE to write this report)');
  }
}

if (require.main === module) {
  main().catch((e) => {
    process.stderr.write(`[bench] ${e.stack || e}\n`);
    process.exit(1);
  });
}

module.exports = { renderReport };
