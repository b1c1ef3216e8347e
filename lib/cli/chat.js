'use strict';
// `mlx-node chat DIR`: a conversation read line by line from stdin (a terminal or a
// pipe), each reply streamed to stdout, on one Chat that keeps its KV cache between
// turns. Commands: /reset, /save PATH, /load PATH, /help, /quit.
const readline = require('node:readline');
const { parse, positionals, helpText } = require('./args');
const { GENERATION_FLAGS, TEMPLATE_FLAGS, LOAD_FLAGS, generationOptions, templateOptions, loadOptions } = require('./sampling');
const { loadLanguageModel, note } = require('./progress');
const { generationFigures } = require('./figures');
const { describe } = require('./errors');
const { launched, isFollower, follow } = require('./follow');

const FLAGS = {
  ...GENERATION_FLAGS,
  ...TEMPLATE_FLAGS,
  ...LOAD_FLAGS,
  quiet: { type: 'boolean', short: 'q', help: 'nothing on stderr but errors: no progress, no figures, no notes' },
};

const COMMANDS = [
  ['/reset', 'start the conversation again (from --system, or the loaded chat\'s start)'],
  ['/save PATH', 'save the conversation and its cache to a file'],
  ['/load PATH', 'continue a conversation saved with /save (or Chat.save)'],
  ['/help', 'list these commands'],
  ['/quit', 'leave (also /exit, Ctrl-D, or Ctrl-C at the prompt)'],
];

const commandList = () => COMMANDS.map(([c, h]) => `  ${c.padEnd(12)}${h}`).join('\n');

const HELP = helpText({
  usage: 'mlx-node chat DIR [options]',
  description: [
    'Chats with the model in folder DIR. Each line read from stdin is a user message; the',
    'reply streams to stdout, followed by a newline. The conversation keeps its KV cache, so',
    'a turn computes only what it adds. Figures, with the prompt tokens served from the',
    'cache, go to stderr after each reply. Ctrl-C stops a reply (which is then not kept).',
    'stdin may be a pipe: `printf "Hi\\n/save chat.safetensors\\n" | mlx-node chat DIR`.',
    'Under `mlx-node launch`, rank 0 chats and the other ranks follow it; /load and /save',
    'before the first reply are then refused (docs/distributed.md).',
    '',
    'Commands:',
    commandList(),
  ],
  flags: FLAGS,
});

async function run(argv) {
  const { values, positionals: pos } = parse(argv, FLAGS);
  if (values.help) return process.stdout.write(HELP);
  const [dir] = positionals(pos, ['DIR']);
  const template = templateOptions(values);
  const options = generationOptions(values);
  const load = loadOptions(values);
  const quiet = Boolean(values.quiet);
  // Under `mlx-node launch`: rank 0 reads stdin and chats, the others follow its every step.
  if (isFollower(launched({ leader: true }))) {
    const log = quiet ? () => {} : (line) => process.stderr.write(`${line}\n`);
    return follow(dir, launched({ leader: true }), load, log, ['SIGTERM']);
  }

  const model = await loadLanguageModel(dir, { ...load, quiet, leader: true });
  try {
    // A model without a chat template fails here, not at the first message.
    model.applyChatTemplate([{ role: 'user', content: '.' }], { addGenerationPrompt: true, ...template });
    const chat = model.createChat({ ...(values.system !== undefined ? { system: values.system } : {}), templateOptions: template, ...options });
    await repl(model, chat, options, quiet);
  } finally {
    await model.dispose();
  }
}

async function repl(model, first, options, quiet) {
  let chat = first;
  let failed = false;
  // A person typing gets a prompt and line editing: on stdout, or on stderr when stdout
  // is redirected (which then holds only the replies).
  const interactive = Boolean(process.stdin.isTTY);
  const screen = process.stdout.isTTY ? process.stdout : process.stderr;
  const rl = readline.createInterface({
    input: process.stdin,
    output: interactive ? screen : undefined,
    terminal: interactive && Boolean(screen.isTTY),
    prompt: '>>> ',
  });
  // Ctrl-C: stops the reply being generated, or leaves at the prompt. A terminal
  // delivers it to readline; with a pipe on stdin it comes as SIGINT.
  let turn = null;
  const interrupt = () => {
    if (turn) turn.abort();
    else rl.close();
  };
  rl.on('SIGINT', interrupt);
  process.on('SIGINT', interrupt);
  const fail = (e) => {
    failed = true;
    process.stderr.write(`${describe(e)}\n`);
  };

  async function reply(message) {
    const controller = new AbortController();
    turn = controller;
    let wrote = false;
    try {
      const s = chat.stream(message, { ...options, signal: controller.signal, stopOnAbortSignal: true });
      for await (const c of s) {
        if (!c.text) continue;
        process.stdout.write(c.text);
        wrote = true;
      }
      const r = await s.result;
      process.stdout.write('\n');
      wrote = false;
      if (r.finishReason === 'abort') note(quiet, '[interrupted: this turn is not kept]');
      else if (!quiet) process.stderr.write(`${dim(generationFigures(r, { cached: true }).join(' | '))}\n`);
    } catch (e) {
      if (wrote) process.stdout.write('\n');
      fail(e);
    } finally {
      turn = null;
    }
  }

  // Runs a /command; false for /quit.
  async function command(line) {
    const [name] = line.split(/\s/, 1);
    const arg = line.slice(name.length).trim();
    const needPath = () => {
      if (!arg) throw new Error(`${name} needs a file path: ${name} PATH`);
      return arg;
    };
    switch (name) {
      case '/quit':
      case '/exit':
        return false;
      case '/help':
        process.stderr.write(`${commandList()}\n`);
        break;
      case '/reset':
        chat.reset();
        note(quiet, `[the conversation is back to its start: ${chat.messages.length} message(s)]`);
        break;
      case '/save': {
        const file = needPath();
        await chat.save(file);
        note(quiet, `[saved ${chat.messages.length} message(s) and ${chat.promptCache.length} cached tokens to ${file}]`);
        break;
      }
      case '/load': {
        const file = needPath();
        const loaded = await model.loadChat(file);
        chat.dispose();
        chat = loaded;
        note(quiet, `[loaded ${chat.messages.length} message(s) and ${chat.promptCache.length} cached tokens from ${file}]`);
        break;
      }
      default:
        throw new Error(`unknown command ${name}; /help lists the commands`);
    }
    return true;
  }

  if (interactive) {
    note(quiet, 'Type a message, or /help for the commands. Ctrl-C stops a reply; Ctrl-D or /quit leaves.');
    rl.prompt();
  }
  try {
    for await (const raw of rl) {
      const line = raw.replace(/\r$/, '');
      if (line.trim() !== '') {
        if (line.startsWith('/')) {
          let more = true;
          try {
            more = await command(line.trim());
          } catch (e) {
            fail(e);
          }
          if (!more) break;
        } else {
          await reply(line);
        }
      }
      if (interactive) rl.prompt();
    }
  } finally {
    process.off('SIGINT', interrupt);
    rl.close();
    if (interactive) screen.write('\n');
    // A pipe left open must not keep the process waiting.
    process.stdin.destroy();
    chat.dispose();
  }
  if (failed) process.exitCode = 1;
}

function dim(text) {
  return process.stderr.isTTY ? `\x1b[2m${text}\x1b[0m` : text;
}

module.exports = { name: 'chat', summary: 'chat interactively; the conversation keeps its cache', synopsis: 'chat DIR', run, HELP };
