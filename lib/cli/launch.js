'use strict';
// `mlx-node launch -n N -- COMMAND...`: runs a command as N processes of one distributed
// model on this machine (lib/launch.js), as `mlx.launch --backend ring -n N` does.
const path = require('node:path');
const { UsageError, parse, helpText } = require('./args');
const { launchLocal } = require('../launch');

const FLAGS = {
  n: { type: 'string', short: 'n', kind: 'int', min: 1, max: 64, value: 'N', help: 'processes to start (default 2)' },
  pipeline: { type: 'boolean', help: "split 'generate's model into a pipeline of layers (default: tensor parallel)" },
  'all-output': { type: 'boolean', help: "every rank's stdout (default: rank 0's only; the others print the same)" },
};

// Subcommands that run unchanged on every rank: the same prompt in, the same tokens out; and
// 'serve' and 'chat', whose rank 0 serves (or reads stdin) and whose other ranks follow it
// (loadModel's distributed.leader; lib/cli/follow.js).
const SUBCOMMANDS = new Set(['generate', 'info', 'serve', 'chat']);

const HELP = helpText({
  usage: 'mlx-node launch [-n N] -- (SCRIPT.js [ARGS...] | generate DIR [PROMPT] [options] | chat DIR [options] | serve --model DIR [options])',
  description: [
    'Splits a model across N processes on this machine with MLX\'s ring backend over',
    '127.0.0.1 (tensor parallelism, as MLX-LM\'s sharded_load): writes the ring\'s host file,',
    'then starts every process with MLX_RANK and MLX_HOSTFILE set, as mlx.launch does. A',
    "script loads its model with loadModel(dir, { distributed: {} }); 'generate' does that",
    'by itself. Every rank runs the same command and gets the same tokens; rank 0 prints.',
    "'serve': rank 0 serves HTTP and the other ranks follow its every step; Ctrl-C or",
    'SIGTERM to this command stops rank 0, and the others end with it. \'chat\': rank 0',
    'reads stdin and chats, the other ranks follow it.',
    'Across several machines, start the same script with mlx.launch --backend ring',
    '--hosts ... (docs/distributed.md).',
    '',
    'Examples:',
    '  mlx-node launch -n 2 -- generate ./Qwen3-0.6B "Hello!" --max-tokens 50',
    '  mlx-node launch -n 2 -- serve --model ./Qwen3-8B --port 8080',
    '  mlx-node launch -n 2 -- chat ./Qwen3-8B',
    '  mlx-node launch -n 2 -- my-script.js',
  ],
  flags: FLAGS,
});

async function run(argv) {
  const dash = argv.indexOf('--');
  const own = dash < 0 ? argv : argv.slice(0, dash);
  const { values, positionals } = parse(own, FLAGS);
  if (values.help) return process.stdout.write(HELP);
  const command = dash < 0 ? positionals : [...positionals, ...argv.slice(dash + 1)];
  if (command.length === 0) throw new UsageError('missing the command to run (after --)');
  const [first, ...rest] = command;
  let args;
  if (/\.(c|m)?js$/.test(first)) {
    args = [first, ...rest];
  } else if (SUBCOMMANDS.has(first)) {
    args = [path.join(__dirname, '..', '..', 'bin', 'mlx-node.js'), first, ...rest];
  } else if (first === 'speak') {
    throw new UsageError(`'${first}' cannot run split across processes yet; 'generate' and scripts can`);
  } else {
    throw new UsageError(`the command must be a .js script, 'generate', 'chat', 'serve' or 'info', got ${JSON.stringify(first)}`);
  }
  const n = values.n ?? 2;
  const all = Boolean(values['all-output']);
  // Ctrl-C or SIGTERM goes to rank 0 alone: a server closes and disposes its model, which
  // ends the other ranks' follow(); they then exit by themselves. A chat on a terminal gets
  // Ctrl-C from the terminal itself (one per key press, to stop a reply or leave).
  const chat = first === 'chat';
  let stop;
  const onSignal = (signal) => {
    if (!(chat && signal === 'SIGINT' && process.stdin.isTTY)) stop?.(signal);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const { codes, signals } = await launchLocal({
    n,
    command: process.execPath,
    args,
    // Read by the CLI's loadLanguageModel and serve: load split across the ranks.
    env: { MLX_NODE_DISTRIBUTED: 'ring', MLX_NODE_DISTRIBUTED_STRATEGY: values.pipeline ? 'pipeline' : 'tensor' },
    // A chat's stdin is rank 0's.
    stdio: (rank) => [chat && rank === 0 ? 'inherit' : 'ignore', rank === 0 || all ? 'inherit' : 'ignore', 'inherit'],
    onStart: (children) => {
      stop = (signal) => children[0].kill(signal);
    },
  });
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  const failed = codes.findIndex((c, i) => c !== 0 || signals[i]);
  process.exitCode = failed < 0 ? 0 : (codes[failed] ?? 1);
}

module.exports = { name: 'launch', run, HELP, synopsis: 'launch [-n N] -- COMMAND', summary: 'run a command as N processes of one split model' };
