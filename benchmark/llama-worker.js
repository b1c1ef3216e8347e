'use strict';
// One peer of `npm run bench:llama` in a process of its own, so that each peer's memory can
// be told apart: node-llama-cpp (from benchmark/node_modules) or mlx-node (one process per
// precision, exact or fast). Started by
// benchmark/python-worker.js's PythonWorker with this Node as the interpreter; the line
// protocol of benchmark/worker_protocol.py: one JSON request per stdin line, one JSON answer
// per stdout line ({ error } on failure). Requests:
//
//   { cmd: 'info', peer: 'node-llama-cpp' | 'mlx-node', threads }  -> what runs (versions, build)
//   { cmd: 'load', model, contextSize, batchSize, precision }       -> { seconds, ... }
//       node-llama-cpp: model = a GGUF file; mlx-node: an MLX folder, loaded with
//       `{ precision }` ('exact' or 'fast') where given, else with loadModel's default (fast for
//       quantized models on the CPU); the answer says which applies
//   { cmd: 'tokenize', text }                                        -> { ids } (no BOS/EOS added)
//   { cmd: 'generate', ids, maxTokens, bias: { id: logit } }         -> see generate()
//       Greedy on a fresh context from the ids given, `bias` added to those logits every step.
//       promptTps = prompt ids / time to the first token; decodeTps = (tokens - 1) / time from
//       the first token to the last.

const readline = require('node:readline');

// stdout carries answers only.
const answer = process.stdout.write.bind(process.stdout);
console.log = console.info = console.warn = console.debug = (...a) => process.stderr.write(`${a.join(' ')}\n`);

const state = { peer: null, threads: 2, llama: null, model: null, context: null, sequence: null, lib: null, ours: null };

// ---------------------------------------------------------------- node-llama-cpp

async function llamaInfo() {
  const lib = await import('node-llama-cpp');
  state.lib = lib;
  state.llama = await lib.getLlama({
    gpu: false,
    build: 'never',
    maxThreads: state.threads,
    logLevel: lib.LlamaLogLevel.warn,
    logger: (level, message) => process.stderr.write(`[llama.cpp ${level}] ${message}\n`),
  });
  const l = state.llama;
  const pkg = require('node:path').join(__dirname, 'node_modules', 'node-llama-cpp', 'package.json');
  const version = JSON.parse(require('node:fs').readFileSync(pkg, 'utf8')).version;
  return {
    version,
    buildType: l.buildType,
    gpu: l.gpu,
    release: l.llamaCppRelease,
    systemInfo: l.systemInfo.trim(),
    cpuMathCores: l.cpuMathCores,
    maxThreads: l.maxThreads,
    // Which of the prebuilt CPU-variant libraries ggml picked for this CPU.
    cpuBackend: loadedLibraries().filter((f) => /libggml-cpu/.test(f)),
  };
}

function loadedLibraries() {
  try {
    const maps = require('node:fs').readFileSync('/proc/self/maps', 'utf8');
    return [...new Set(maps.split('\n').map((l) => l.split(/\s+/)[5]).filter((f) => f && f.endsWith('.so')))].map((f) => f.split('/').pop());
  } catch {
    return [];
  }
}

async function llamaLoad(req) {
  const t0 = performance.now();
  state.model = await state.llama.loadModel({ modelPath: req.model });
  const loaded = (performance.now() - t0) / 1000;
  state.context = await state.model.createContext({
    contextSize: req.contextSize,
    batchSize: req.batchSize,
    threads: state.threads,
    sequences: 1,
  });
  state.sequence = state.context.getSequence();
  const c = state.context;
  const m = state.model;
  return {
    seconds: loaded,
    contextSeconds: (performance.now() - t0) / 1000 - loaded,
    threads: c.currentThreads,
    idealThreads: c.idealThreads,
    contextSize: c.contextSize,
    batchSize: c.batchSize,
    flashAttention: c.flashAttention,
    kvCacheKeyType: state.lib.GgmlType[c.kvCacheKeyType] ?? c.kvCacheKeyType,
    kvCacheValueType: state.lib.GgmlType[c.kvCacheValueType] ?? c.kvCacheValueType,
    useMmap: m.useMmap,
    gpuLayers: m.gpuLayers,
    modelBytes: m.size,
    // node-llama-cpp's own estimates (GgufInsights), not measurements.
    estimatedModelRam: m.memoryUsage.ram,
    estimatedContextRam: c.memoryUsage.ram,
    eos: m.tokens.eos,
    eot: m.tokens.eot,
    addsBos: m.tokens.shouldPrependBosToken,
    cpuBackend: loadedLibraries().filter((f) => /libggml-cpu/.test(f)),
  };
}

async function llamaGenerate(req) {
  const { ids, maxTokens } = req;
  await state.sequence.clearHistory();
  // TokenBias.set() skips EOS/EOT ("never" has no effect on them); the sampler applies whatever
  // is in the map, so the ids go in directly.
  const bias = state.lib.TokenBias.for(state.model);
  for (const [id, logit] of Object.entries(req.bias || {})) bias._biases.set(Number(id), logit);
  const tokens = [];
  let first = null;
  let last = null;
  const t0 = performance.now();
  for await (const token of state.sequence.evaluate(ids, { temperature: 0, tokenBias: bias })) {
    last = performance.now();
    if (first === null) first = last;
    tokens.push(token);
    if (tokens.length >= maxTokens) break;
  }
  const wall = (performance.now() - t0) / 1000;
  const ttft = (first - t0) / 1000;
  return {
    tokens,
    text: state.model.detokenize(tokens),
    finishReason: tokens.length >= maxTokens ? 'length' : 'stop',
    promptTokens: ids.length,
    generationTokens: tokens.length,
    firstTokenSeconds: ttft,
    promptTps: ids.length / ttft,
    decodeTps: tokens.length > 1 ? (tokens.length - 1) / ((last - first) / 1000) : NaN,
    peakMemory: null,
    wallSeconds: wall,
  };
}

// ---------------------------------------------------------------- mlx-node

function oursInfo() {
  state.lib = require('..');
  return state.lib.mlxInfo();
}

async function oursLoad(req) {
  const t0 = performance.now();
  state.ours = await state.lib.loadModel(req.model, req.precision ? { precision: req.precision } : {});
  return { seconds: (performance.now() - t0) / 1000, info: state.ours.info, precision: state.ours.precision };
}

async function oursGenerate(req) {
  const t0 = performance.now();
  const r = await state.ours.generate(req.ids, { maxTokens: req.maxTokens, logitBias: req.bias || {} });
  const wall = (performance.now() - t0) / 1000;
  const g = r.generationTokens;
  return {
    tokens: r.tokens,
    text: r.text,
    finishReason: r.finishReason,
    promptTokens: r.promptTokens,
    generationTokens: g,
    firstTokenSeconds: r.promptTps > 0 ? r.promptTokens / r.promptTps : NaN,
    promptTps: r.promptTps,
    // generationTps counts the first token over the time after it (as MLX-LM's): g / t.
    decodeTps: g > 1 ? (r.generationTps * (g - 1)) / g : NaN,
    ownGenerationTps: r.generationTps,
    peakMemory: r.peakMemory,
    wallSeconds: wall,
  };
}

// ---------------------------------------------------------------- serve

const COMMANDS = {
  async info(req) {
    state.peer = req.peer;
    state.threads = req.threads || state.threads;
    if (state.peer === 'node-llama-cpp') return llamaInfo();
    if (state.peer === 'mlx-node') return oursInfo();
    throw new Error(`unknown peer ${req.peer}`);
  },
  load: (req) => (state.peer === 'node-llama-cpp' ? llamaLoad(req) : oursLoad(req)),
  tokenize(req) {
    if (state.peer === 'node-llama-cpp') return { ids: Array.from(state.model.tokenize(req.text)) };
    return { ids: state.ours.encode(req.text, { addSpecialTokens: false }) };
  },
  generate: (req) => (state.peer === 'node-llama-cpp' ? llamaGenerate(req) : oursGenerate(req)),
};

async function serve() {
  // One request at a time, in order.
  for await (const line of readline.createInterface({ input: process.stdin })) {
    if (!line.trim()) continue;
    let out;
    try {
      const req = JSON.parse(line);
      if (!COMMANDS[req.cmd]) throw new Error(`unknown cmd: ${req.cmd}`);
      out = await COMMANDS[req.cmd](req);
    } catch (e) {
      process.stderr.write(`${e.stack || e}\n`);
      out = { error: e.message || String(e) };
    }
    answer(`${JSON.stringify(out)}\n`);
  }
  if (state.context) await state.context.dispose();
  if (state.model) await state.model.dispose();
  if (state.ours) await state.ours.dispose();
  process.exit(0);
}

serve();
