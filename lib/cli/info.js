'use strict';
// `mlx-node info [DIR]`: mlxInfo() as JSON on stdout, with a model's info when DIR is given.
const fs = require('node:fs');
const path = require('node:path');
const { parse, positionals, helpText } = require('./args');
const { loadLanguageModel, loadSpeechModel } = require('./progress');
const { isHubId } = require('../hub');

const FLAGS = {
  quiet: { type: 'boolean', short: 'q', help: 'no progress on stderr while a model loads' },
};

const HELP = helpText({
  usage: 'mlx-node info [DIR] [options]',
  description: [
    "Prints MLX's version, backend, device, BLAS library and custom CPU kernels as JSON",
    '(mlxInfo()). With DIR it also loads the model in that folder and adds its info under',
    '"model": a text model\'s type, layers, vocabulary, dtype and quantization, or a',
    "Chatterbox model's sample rate.",
    '',
    'Examples:',
    '  mlx-node info',
    '  mlx-node info ./Qwen3-0.6B-4bit | jq .model',
  ],
  flags: FLAGS,
});

// config.json's model_type, if it can be read (loading reports any other problem).
function modelType(dir) {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8')).model_type;
  } catch {
    return undefined;
  }
}

async function run(argv) {
  const { values, positionals: pos } = parse(argv, FLAGS);
  if (values.help) return process.stdout.write(HELP);
  const [dir] = positionals(pos, ['DIR?']);
  const { mlxInfo } = require('../..');
  const out = { mlxNodeVersion: require('../../package.json').version, ...mlxInfo() };
  if (dir !== undefined) {
    const quiet = Boolean(values.quiet);
    const speech = async () => {
      const tts = await loadSpeechModel(dir, { quiet });
      out.model = { path: dir, kind: 'speech', modelType: 'chatterbox', sampleRate: tts.sampleRate };
      await tts.dispose();
    };
    if (modelType(dir) === 'chatterbox') {
      await speech();
    } else {
      let model;
      try {
        model = await loadLanguageModel(dir, { quiet });
      } catch (e) {
        // A Hugging Face name: its config.json is read only once downloaded.
        if (!(isHubId(dir) && e.code === 'UNSUPPORTED_MODEL' && /model_type "chatterbox"/.test(e.message))) throw e;
      }
      if (model) {
        out.model = { path: dir, kind: 'text', ...model.info };
        await model.dispose();
      } else {
        await speech();
      }
    }
  }
  process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
}

module.exports = { name: 'info', summary: "print MLX's build and device (and a model's info) as JSON", synopsis: 'info [DIR]', run, HELP };
