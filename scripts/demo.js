'use strict';
// `npm run demo [-- --model <folder>] [--prompt <text>] [--max-tokens N] [--temperature T]
//                [--tts <folder>] [--say <text>] [--wav <file>] [--no-speech]`
// Streams a chat completion with live tokens per second, then streams speech.
// Without --model it uses the embedded demo model: a small Qwen3 with seeded
// random weights and the real Qwen3 tokenizer, so its text is noise; point
// --model at a real MLX model folder (e.g. an mlx-community Qwen3-0.6B-4bit
// download) for real text. Likewise the embedded speech model is a shrunk
// Chatterbox with random weights (its audio is noise); --tts takes a real
// MLX-community Chatterbox folder. The embedded models are written by
// scripts/demo-models.js in a few seconds, with no Python and no test fixtures.
const path = require('node:path');
const { ROOT, log } = require('./mlx');

function parseArgs(argv) {
  const args = {
    model: null,
    prompt: 'Write a haiku about the sea.',
    maxTokens: 64,
    temperature: 0.7,
    tts: null,
    say: 'Hello from mlx-node. This sentence is spoken while it is still being generated.',
    wav: path.join(ROOT, '.cache', 'demo-speech.wav'),
    speech: true,
  };
  for (let i = 0; i < argv.length; i++) {
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${argv[i]} needs a value`);
      return argv[++i];
    };
    if (argv[i] === '--model') args.model = path.resolve(next());
    else if (argv[i] === '--prompt') args.prompt = next();
    else if (argv[i] === '--max-tokens') args.maxTokens = Number(next());
    else if (argv[i] === '--temperature') args.temperature = Number(next());
    else if (argv[i] === '--tts') args.tts = path.resolve(next());
    else if (argv[i] === '--say') args.say = next();
    else if (argv[i] === '--wav') args.wav = path.resolve(next());
    else if (argv[i] === '--no-speech') args.speech = false;
    else throw new Error(`unknown argument ${argv[i]}`);
  }
  return args;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  require('./deps').ensureNpmDeps();
  require('./build').build({ quiet: true });
  if (!args.model) {
    args.model = require('./demo-models').ensureDemoModel('qwen3');
    log('using the embedded demo model (random weights: its text is noise; use --model <folder> for a real one)');
  }
  const { mlxInfo, loadModel } = require(ROOT);
  const info = mlxInfo();
  console.log(`MLX ${info.mlxVersion} on ${info.backend} (${info.device}), BLAS: ${info.blas}`);
  const t0 = performance.now();
  const model = await loadModel(args.model);
  console.log(`loaded ${args.model} (${model.info.modelType}, ${model.info.numLayers} layers, ${model.info.dtype}) in ${((performance.now() - t0) / 1000).toFixed(2)} s`);
  console.log(`> ${args.prompt}\n`);
  const stream = model.stream([{ role: 'user', content: args.prompt }], {
    maxTokens: args.maxTokens,
    temperature: args.temperature,
    topP: 0.9,
    seed: 0,
  });
  let n = 0;
  let first = 0;
  for await (const chunk of stream) {
    if (n === 0) first = performance.now();
    n++;
    process.stdout.write(chunk.text);
    if (process.stderr.isTTY && n % 8 === 0) {
      const tps = (n - 1) / ((performance.now() - first) / 1000 || 1);
      process.stderr.write(`\x1b7\x1b[999;1H[${n} tokens, ${tps.toFixed(1)} tok/s]\x1b8`);
    }
  }
  const r = await stream.result;
  console.log(
    `\n\n${r.generationTokens} tokens (${r.finishReason}); prompt ${r.promptTokens} tokens at ${r.promptTps.toFixed(1)} tok/s, ` +
      `generation ${r.generationTps.toFixed(1)} tok/s, peak memory ${(r.peakMemory / 1e6).toFixed(0)} MB`
  );
  await model.dispose();
  if (args.speech) await speak(args);
}

// Streams speech, reporting when the first audio arrived and the real-time factor.
async function speak(args) {
  const { loadTTS, Audio } = require(ROOT);
  const embedded = !args.tts;
  if (embedded) {
    args.tts = require('./demo-models').ensureDemoModel('chatterbox');
    log('speech: the embedded demo Chatterbox (random weights: its audio is noise; use --tts <folder> for a real one)');
  }
  const tts = await loadTTS(args.tts);
  console.log(`\n> say: ${args.say}`);
  const t0 = performance.now();
  let first = 0;
  const chunks = [];
  // The embedded model is rigged to stop by itself at speech position 40; the cap only
  // keeps the demo short should that ever fail (25 tokens = 1 s of audio).
  const stream = tts.stream(args.say, { seed: 0, ...(embedded ? { maxTokens: 100 } : {}) });
  for await (const chunk of stream) {
    if (chunks.length === 0) first = performance.now() - t0;
    chunks.push(chunk.audio);
    console.log(`  audio chunk ${chunk.index}: ${(chunk.audio.length / chunk.sampleRate).toFixed(2)} s at ${((performance.now() - t0) / 1000).toFixed(2)} s`);
  }
  const total = (performance.now() - t0) / 1000;
  const samples = Float32Array.from(chunks.flatMap((c) => Array.from(c)));
  const seconds = samples.length / tts.sampleRate;
  const r = await stream.result;
  const audio = new Audio(samples, tts.sampleRate, r.speechTokens, r);
  await audio.save(args.wav);
  console.log(
    `${seconds.toFixed(2)} s of audio in ${total.toFixed(2)} s (real-time factor ${(total / seconds).toFixed(2)}), ` +
      `first audio after ${(first / 1000).toFixed(2)} s; written to ${path.relative(process.cwd(), args.wav)}`
  );
  console.log(
    `${r.speechTokens.length} speech tokens; T3 prompt ${r.promptTokens} positions at ${r.promptTps.toFixed(1)}/s, ` +
      `${r.generationTokens} steps at ${r.generationTps.toFixed(1)}/s (with the chunks vocoded between them), peak memory ${(r.peakMemory / 1e6).toFixed(0)} MB`
  );
  await tts.dispose();
}

main().catch((e) => {
  console.error(`[mlx-node] ${e.code ? `${e.code}: ` : ''}${e.message}`);
  process.exit(1);
});
