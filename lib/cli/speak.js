'use strict';
// `mlx-node speak DIR TEXT -o out.wav`: Chatterbox speech written as a WAV file.
const fs = require('node:fs/promises');
const { UsageError, parse, positionals, helpText } = require('./args');
const { loadSpeechModel, note } = require('./progress');
const { speechFigures } = require('./figures');
const { textArgument } = require('./io');

const FLAGS = {
  output: { short: 'o', value: 'FILE', help: 'the WAV file to write ("-": stdout); required' },
  format: { value: 'FORMAT', help: 'pcm16 (16-bit PCM, the default) or float32' },
  seed: { kind: 'int', help: 'random seed: the same seed and flags give the same audio' },
  temp: { kind: 'number', min: 0, help: 'sampling temperature of the speech tokens (default 0.8; 0: greedy)' },
  'cfg-weight': { kind: 'number', help: 'classifier-free guidance weight (default 0.5; 0: off)' },
  exaggeration: { kind: 'number', help: 'emotion exaggeration (default 0.5)' },
  voice: { value: 'PATH', help: "a WAV clip to clone, or another voice's conds.safetensors (default: the built-in voice)" },
  language: { value: 'CODE', help: "the text's language for a multilingual model, an ISO code such as fr (default en)" },
  'max-tokens': { kind: 'int', min: 1, help: 'the most speech tokens per piece of text, 25 a second (default 1000)' },
  'repetition-penalty': { kind: 'number', help: 'default 1.2' },
  'min-p': { kind: 'number', help: 'default 0.05' },
  'top-p': { kind: 'number', help: 'default 1 (off)' },
  quiet: { type: 'boolean', short: 'q', help: 'nothing on stderr but errors: no progress, no figures' },
};

const OPTION_OF = {
  seed: 'seed',
  temp: 'temperature',
  'cfg-weight': 'cfgWeight',
  exaggeration: 'exaggeration',
  voice: 'voice',
  language: 'language',
  'max-tokens': 'maxTokens',
  'repetition-penalty': 'repetitionPenalty',
  'min-p': 'minP',
  'top-p': 'topP',
};

const HELP = helpText({
  usage: 'mlx-node speak DIR TEXT -o FILE [options]',
  description: [
    'Speaks TEXT with the Chatterbox model in folder DIR and writes a mono 24 kHz WAV file.',
    'TEXT is read from stdin when it is "-" or left out. The figures (audio length, real-time',
    'factor, peak memory) go to stderr.',
    '',
    'Examples:',
    '  mlx-node speak ./chatterbox "Hello there, how are you today?" -o hello.wav',
    '  mlx-node speak ./chatterbox - -o - --seed 1 < text.txt | aplay',
  ],
  flags: FLAGS,
});

async function run(argv) {
  const { values, positionals: pos } = parse(argv, FLAGS);
  if (values.help) return process.stdout.write(HELP);
  const [dir, textArg] = positionals(pos, ['DIR', 'TEXT?']);
  const out = values.output;
  if (out === undefined || out === '') throw new UsageError('missing -o FILE: the WAV file to write ("-" for stdout)');
  if (out === '-' && process.stdout.isTTY) throw new UsageError('-o - would write the WAV file to a terminal: redirect stdout, or give a file name');
  const format = values.format ?? 'pcm16';
  if (format !== 'pcm16' && format !== 'float32') throw new UsageError(`--format must be pcm16 or float32, got ${JSON.stringify(format)}`);
  const options = {};
  for (const [flag, option] of Object.entries(OPTION_OF)) if (values[flag] !== undefined) options[option] = values[flag];
  const quiet = Boolean(values.quiet);
  const text = await textArgument(textArg, 'TEXT');

  const tts = await loadSpeechModel(dir, { quiet });
  try {
    const audio = await tts.synthesize(text, options);
    const wav = audio.toWav({ format });
    if (out === '-') process.stdout.write(wav);
    else await fs.writeFile(out, wav);
    if (!quiet) process.stderr.write(`${speechFigures(audio).join('\n')}\n`);
    if (out !== '-') note(quiet, `Wrote ${out} (${format}, ${wav.length} bytes)`);
  } finally {
    await tts.dispose();
  }
}

module.exports = { name: 'speak', summary: 'speak text with a Chatterbox model into a WAV file', synopsis: 'speak DIR TEXT -o FILE', run, HELP };
