'use strict';
// `mlx-node serve --model DIR`: the HTTP server of lib/server, until SIGINT or SIGTERM.
const path = require('node:path');
const { UsageError, parse, positionals, helpText } = require('./args');
const { loadDisplay, displayName } = require('./progress');
const { LOAD_FLAGS, loadOptions } = require('./sampling');
const { launched, isFollower, follow } = require('./follow');

const FLAGS = {
  model: { value: 'DIR', help: 'the text model folder to serve; required' },
  tts: { value: 'DIR', help: 'a Chatterbox folder to serve speech from as well' },
  voices: { value: 'DIR', help: 'with --tts: NAME.wav clips and NAME.safetensors saved voices, spoken as voice NAME' },
  host: { value: 'HOST', help: 'address to listen on (default 127.0.0.1)' },
  port: { kind: 'int', min: 0, max: 65535, help: 'port to listen on (default 8080; 0: any free port)' },
  'max-batch': { kind: 'int', min: 1, help: 'the most requests generated together (default 8)' },
  precision: LOAD_FLAGS.precision,
  'api-key': { value: 'KEY', help: 'require "Authorization: Bearer KEY" (default: $MLX_NODE_API_KEY; none: no key)' },
  quiet: { type: 'boolean', short: 'q', help: 'log nothing but errors and the address' },
};

const HELP = helpText({
  usage: 'mlx-node serve --model DIR [options]',
  description: [
    'Loads the models and serves them over HTTP until Ctrl-C (SIGINT) or SIGTERM.',
    'The address goes to stderr as "listening on URL" once the server is ready.',
    '',
    'Examples:',
    '  mlx-node serve --model ./Qwen3-0.6B-4bit',
    '  MLX_NODE_API_KEY=secret mlx-node serve --model ./qwen3 --tts ./chatterbox --port 9000',
    '  mlx-node serve --model ./qwen3 --tts ./chatterbox --voices ./voices',
  ],
  flags: FLAGS,
});

// lib/server, or a clear error when this copy has none.
function loadServer() {
  const where = path.join(__dirname, '..', 'server');
  try {
    return require(where);
  } catch (e) {
    if (e.code === 'MODULE_NOT_FOUND' && String(e.message).includes(where)) throw new Error('this copy of mlx-node has no HTTP server (lib/server)');
    throw e;
  }
}

async function run(argv) {
  const { values, positionals: pos } = parse(argv, FLAGS);
  if (values.help) return process.stdout.write(HELP);
  positionals(pos, []);
  if (values.model === undefined || values.model === '') throw new UsageError('missing --model DIR');
  if (values.voices !== undefined && values.tts === undefined) throw new UsageError('--voices needs --tts DIR (the speech model that speaks them)');
  const { precision } = loadOptions(values);
  const apiKey = values['api-key'] ?? (process.env.MLX_NODE_API_KEY || undefined);
  const quiet = Boolean(values.quiet);
  const log = quiet ? () => {} : (...args) => console.error(...args);
  const { serve } = loadServer();
  // Under `mlx-node launch`: rank 0 serves, the others follow its every step.
  const distributed = launched({ leader: true });
  if (isFollower(distributed)) return follow(values.model, distributed, { precision }, log);
  const shown = quiet ? null : loadDisplay(displayName(values.model));
  const running = await serve({
    modelPath: values.model,
    ttsPath: values.tts,
    voicesPath: values.voices,
    host: values.host ?? '127.0.0.1',
    port: values.port ?? 8080,
    maxBatch: values['max-batch'] ?? 8,
    precision,
    distributed,
    apiKey,
    log,
    onLoadProgress: shown?.onLoadProgress,
  }).finally(() => shown?.clear());
  process.stderr.write(`listening on ${running.url}\n`);
  // Ctrl-C or SIGTERM: close (a second one leaves at once), then exit 0.
  await new Promise((resolve, reject) => {
    let stopping = false;
    const stop = (signal) => {
      if (stopping) process.exit(130);
      stopping = true;
      log(`${signal}: closing`);
      Promise.resolve(running.close()).then(resolve, reject);
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
  process.exit(0);
}

module.exports = { name: 'serve', summary: 'serve the models over HTTP', synopsis: 'serve --model DIR', run, HELP };
