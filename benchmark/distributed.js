#!/usr/bin/env node
'use strict';
// `npm run bench:distributed [-- MODEL...]`: one model split across 2 processes on this
// machine (MLX's ring backend over 127.0.0.1, tensor parallel) against the same model in one
// process, for mlx-node (loadModel's `distributed` option, started by lib/launch.js) and for
// MLX-LM 0.32.2 (sharded_load under `mlx.launch --backend ring -n 2`), side by side on the same
// libmlx and OpenBLAS. Per side: decode and prompt tok/s (each library's own figures, median
// of the runs), MLX's peak memory and the resident set of rank 0 (each rank holds half of
// every attention and MLP weight; embeddings, norms and the head stay whole). Every process
// gets OPENBLAS_NUM_THREADS = CPUs / processes, so no side runs more threads than cores.
// Rounds rotate the order of the sides. Writes benchmark/RESULTS-distributed.md.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');
const { launchLocal } = require('../lib/launch');
const { median, loadavg } = require('./machine');
const { ROOT, MODELS_DIR, fmt, logger, warnIfBusy, newReport, machineLines, writeRaw } = require('./common');

const RESULTS = path.join(__dirname, 'RESULTS-distributed.md');
const DEFAULT_MODELS = ['qwen3-0.6b-f32', 'qwen3-100m-f32'];
const ROUNDS = 2;
const REQUEST = { maxTokens: 128, reps: 2, block: [151643, 151645] };
// 64 prompt ids (the same on every side).
const PROMPT = Array.from({ length: 64 }, (_, i) => 1000 + ((i * 7919) % 50000));

const { log, fail } = logger('bench:distributed');

function threads(n) {
  return { OPENBLAS_NUM_THREADS: String(Math.max(1, Math.floor(os.cpus().length / n))) };
}

function parseLine(text, who) {
  const line = text.trim().split('\n').filter((l) => l.startsWith('{')).at(-1);
  if (!line) fail(`${who} printed no result`);
  return JSON.parse(line);
}

// mlx-node: the rank script alone (n = 1) or as n ranks.
async function ours(dir, n) {
  const args = [path.join(__dirname, 'distributed-rank.js'), dir, JSON.stringify({ ...REQUEST, prompt: PROMPT })];
  if (n === 1) {
    const r = spawnSync(process.execPath, args, { encoding: 'utf8', env: { ...process.env, ...threads(1) } });
    if (r.status !== 0) fail(`mlx-node alone failed:\n${r.stderr}`);
    return parseLine(r.stdout, 'mlx-node');
  }
  const { codes, outputs } = await launchLocal({ n, command: process.execPath, args, env: threads(n), stdio: () => ['ignore', 'pipe', 'pipe'] });
  if (codes.some((c) => c !== 0)) fail(`mlx-node ranks failed (${codes}):\n${outputs.map((o) => o.stderr).join('\n')}`);
  return parseLine(outputs[0].stdout, 'mlx-node rank 0');
}

// MLX-LM: distributed_rank.py alone, or under mlx.launch.
function theirs(dir, n, { python, env }) {
  const script = path.join(__dirname, 'distributed_rank.py');
  const request = JSON.stringify({ ...REQUEST, prompt: PROMPT });
  const [cmd, args] =
    n === 1
      ? [python, [script, dir, request]]
      : [path.join(path.dirname(python), 'mlx.launch'), ['--backend', 'ring', '-n', String(n), '--starting-port', '45100', python, script, dir, request]];
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { env: { ...env, ...threads(n) }, stdio: ['ignore', 'pipe', 'pipe'] });
    const out = [];
    const err = [];
    child.stdout.on('data', (d) => out.push(d));
    child.stderr.on('data', (d) => err.push(d));
    child.on('close', (code) => {
      if (code !== 0) fail(`MLX-LM (${n} process(es)) failed:\n${Buffer.concat(err)}`);
      // mlx.launch prefixes nothing on rank 0's lines; the JSON line is the last one.
      resolve(parseLine(Buffer.concat(out).toString('utf8'), 'MLX-LM'));
    });
  });
}

function summarize(results) {
  const runs = results.flatMap((r) => r.runs);
  return {
    decode: median(runs.map((r) => r.generationTps)),
    prompt: median(runs.map((r) => r.promptTps)),
    peakMemory: Math.max(...runs.map((r) => r.peakMemory)),
    maxRss: Math.max(...results.map((r) => r.maxRss)),
  };
}

function render(report) {
  const gb = (b) => fmt(b / 1e9, 2);
  const lines = [
    '# Split across processes: 1 and 2 ranks on one machine (tensor parallel, ring over 127.0.0.1)',
    '',
    `Command: \`${report.command}\` (${report.date}, ${fmt(report.seconds, 0)} s). Greedy, ${REQUEST.maxTokens} tokens after a ${PROMPT.length}-token prompt, EOS blocked; medians of ${ROUNDS} rounds x ${REQUEST.reps} runs; each process with OPENBLAS_NUM_THREADS = CPUs / processes. Peak: MLX's peak memory of rank 0; RSS: its resident set (the OS's).`,
    '',
    '| model | side | processes | decode tok/s | prompt tok/s | peak GB (rank 0) | RSS GB (rank 0) |',
    '|---|---|--:|--:|--:|--:|--:|',
  ];
  for (const m of report.models) {
    for (const [side, key] of [
      ['mlx-node', 'ours'],
      ['MLX-LM', 'theirs'],
    ]) {
      for (const n of [1, 2]) {
        const s = m[key][n];
        lines.push(`| ${m.name} | ${side} | ${n} | ${fmt(s.decode)} | ${fmt(s.prompt)} | ${gb(s.peakMemory)} | ${gb(s.maxRss)} |`);
      }
    }
  }
  lines.push('', '## Machine and builds', '', ...machineLines(report, 'MLX-LM'), '');
  lines.push(
    'On one machine the ranks share its cores and memory bus and talk over loopback TCP, so two',
    'ranks are not expected to decode faster than one process using both cores: what the split',
    'buys is memory per process (a model too large for one machine), and what it costs is two',
    'all-reduces per layer per token. docs/distributed.md works out the link a real cluster needs.',
  );
  return lines.join('\n');
}

async function main() {
  const names = process.argv.slice(2).filter((a) => !a.startsWith('-'));
  const models = names.length ? names : DEFAULT_MODELS;
  const started = Date.now();
  warnIfBusy(log);
  require('../scripts/build').build({ quiet: true });
  const venv = require('../scripts/venv').ensureVenv();
  const made = spawnSync(venv.python, [path.join(__dirname, 'models.py'), MODELS_DIR, '--only', models.join(',')], { env: venv.env, cwd: ROOT, stdio: ['ignore', 2, 2] });
  if (made.status !== 0) fail(`benchmark/models.py failed (exit ${made.status})`);
  const { mlxInfo } = require('..');
  const info = spawnSync(venv.python, ['-c', 'import json,mlx.core as mx,mlx_lm,sys,platform; print(json.dumps({"mlx": mx.__version__, "mlxLm": mlx_lm.__version__, "python": platform.python_version(), "device": str(mx.default_device()), "blas": "OpenBLAS (LD_PRELOAD)"}))'], { env: venv.env, encoding: 'utf8' });
  const report = { ...newReport('bench:distributed', venv.env, mlxInfo()), models: [] };
  report.theirs = JSON.parse(info.stdout);
  for (const name of models) {
    const dir = path.join(MODELS_DIR, name);
    const got = { ours: { 1: [], 2: [] }, theirs: { 1: [], 2: [] } };
    const sides = [
      ['ours', 1],
      ['ours', 2],
      ['theirs', 1],
      ['theirs', 2],
    ];
    for (let round = 0; round < ROUNDS; round++) {
      for (let i = 0; i < sides.length; i++) {
        const [who, n] = sides[(i + round) % sides.length];
        log(`${name}: round ${round + 1}, ${who === 'ours' ? 'mlx-node' : 'MLX-LM'} with ${n} process(es)`);
        got[who][n].push(who === 'ours' ? await ours(dir, n) : await theirs(dir, n, venv));
      }
    }
    report.models.push({ name, ours: { 1: summarize(got.ours[1]), 2: summarize(got.ours[2]) }, theirs: { 1: summarize(got.theirs[1]), 2: summarize(got.theirs[2]) }, raw: got });
  }
  report.loadAfter = loadavg();
  report.seconds = (Date.now() - started) / 1000;
  const md = render(report);
  process.stdout.write(`${md}\n`);
  writeRaw(report, 'distributed-', log);
  fs.writeFileSync(RESULTS, `${md}\n`);
  log(`wrote ${path.relative(ROOT, RESULTS)}`);
}

main().catch((e) => fail(e.stack));
