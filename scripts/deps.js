'use strict';
// Installs the npm dev dependencies (tokenizer for fixtures, TypeScript) when missing.
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ROOT, log, aptInstall } = require('./mlx');

function ensureNpmDeps() {
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
  const missing = Object.keys(pkg.devDependencies || {}).filter(
    (d) => !fs.existsSync(path.join(ROOT, 'node_modules', d, 'package.json'))
  );
  if (missing.length === 0) return;
  log(`installing npm dependencies (${missing.join(', ')})`);
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const r = spawnSync(npm, ['install', '--no-audit', '--no-fund'], { cwd: ROOT, stdio: 'inherit' });
  if (r.status !== 0) throw new Error('npm install failed');
}

function hasSox() {
  return spawnSync('sox', ['--version'], { stdio: 'ignore' }).status === 0;
}

// The speech tests check that our WAV files are readable by sox.
function ensureSox() {
  if (hasSox()) return;
  if (aptInstall('sox', 'sox') && hasSox()) return;
  throw new Error('sox is missing: the speech tests read WAV files with it. Install it (`sudo apt-get install sox`, macOS: `brew install sox`).');
}

module.exports = { ensureNpmDeps, ensureSox };
