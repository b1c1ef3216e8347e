'use strict';
// The `mlx-node` command (bin/mlx-node.js): picks the subcommand, prints help and the
// version, and turns failures into exit codes: 2 for a wrong command line, 1 for an
// error from the library (with its code) or the system.
const { UsageError } = require('./args');
const { describe } = require('./errors');

const COMMANDS = Object.fromEntries(['generate', 'chat', 'speak', 'serve', 'info', 'launch'].map((name) => [name, () => require(`./${name}`)]));

function version() {
  return require('../../package.json').version;
}

function mainHelp() {
  const rows = Object.values(COMMANDS).map((load) => load());
  const width = Math.max(...rows.map((c) => c.synopsis.length)) + 2;
  return [
    `mlx-node ${version()}: local LLM text generation and text-to-speech on MLX`,
    '',
    'Usage: mlx-node <command> [options]',
    '',
    'Commands:',
    ...rows.map((c) => `  ${c.synopsis.padEnd(width)}${c.summary}`),
    `  ${'help [COMMAND]'.padEnd(width)}this help, or a command's`,
    '',
    'Options:',
    '  -h, --help     this help',
    '  -v, --version  the version of mlx-node',
    '',
    'DIR is a model folder, a .gguf file (text models), or a Hugging Face name such as',
    'mlx-community/Qwen3-0.6B-4bit[@revision] (org/name-GGUF:Q4_K_M for one file of a',
    'GGUF repo), taken from (or downloaded into) the huggingface_hub cache (HF_HOME,',
    'HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE apply).',
    '',
    "Run 'mlx-node <command> --help' for a command's options. Progress and figures go to",
    'stderr, so stdout carries only the output.',
    '',
  ].join('\n');
}

async function main(argv) {
  const [first, ...rest] = argv;
  let name = first;
  try {
    if (first === undefined) {
      process.stderr.write(mainHelp());
      process.exitCode = 2;
      return;
    }
    if (first === '-h' || first === '--help') return void process.stdout.write(mainHelp());
    if (first === '-v' || first === '--version') {
      process.stdout.write(`${version()}\n`);
      return;
    }
    if (first === 'help') {
      if (rest[0] === undefined) return void process.stdout.write(mainHelp());
      name = rest[0];
      if (!Object.hasOwn(COMMANDS, name)) throw new UsageError(`unknown command ${JSON.stringify(name)}`);
      return void process.stdout.write(COMMANDS[name]().HELP);
    }
    if (!Object.hasOwn(COMMANDS, first)) {
      name = undefined;
      throw new UsageError(first.startsWith('-') ? `unknown option ${JSON.stringify(first)}` : `unknown command ${JSON.stringify(first)}`);
    }
    await COMMANDS[first]().run(rest);
  } catch (e) {
    if (e instanceof UsageError) {
      const who = name && Object.hasOwn(COMMANDS, name) ? `mlx-node ${name}` : 'mlx-node';
      process.stderr.write(`${who}: ${e.message}\nRun '${who} --help' for usage.\n`);
      process.exitCode = 2;
    } else {
      process.stderr.write(`${describe(e)}\n`);
      process.exitCode = 1;
    }
  }
}

module.exports = { main };
