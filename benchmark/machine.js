'use strict';
// What both benchmarks (run.js for text, tts.js for speech) record about the
// machine and the source they ran on, and the median they report.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const ROOT = path.join(__dirname, '..');

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

function sh(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : '';
}

function machineInfo() {
  const lscpu = sh('lscpu', []);
  const field = (name) => (lscpu.match(new RegExp(`^${name}:\\s*(.+)$`, 'm')) || [])[1] || '';
  return {
    cpu: field('Model name') || os.cpus()[0]?.model || 'unknown',
    cpus: Number(field('CPU\\(s\\)')) || os.cpus().length,
    coresPerSocket: field('Core\\(s\\) per socket'),
    threadsPerCore: field('Thread\\(s\\) per core'),
    memoryGB: os.totalmem() / 2 ** 30,
    kernel: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
  };
}

function sourceInfo() {
  const commit = sh('git', ['-C', ROOT, 'rev-parse', '--short', 'HEAD']);
  const dirty = sh('git', ['-C', ROOT, 'status', '--porcelain', '--', 'crates', 'node', 'lib', 'index.js']);
  let addon = '';
  try {
    const f = fs.readdirSync(ROOT).find((x) => x.endsWith('.node'));
    if (f) addon = `${f}, built ${fs.statSync(path.join(ROOT, f)).mtime.toISOString().replace(/\.\d+Z$/, 'Z')}`;
  } catch {}
  return { commit, dirty: dirty ? dirty.split('\n').length : 0, addon };
}

const loadavg = () => os.loadavg().map((x) => x.toFixed(2)).join(' ');

// The value and positive-integer readers of a benchmark's parseArgs; `fail` prints and exits.
function argReaders(argv, fail, usage) {
  return {
    value(i, flag) {
      if (i + 1 >= argv.length || argv[i + 1].startsWith('--')) fail(`${flag} needs a value\n${usage}`);
      return argv[i + 1];
    },
    positive(s, flag) {
      const n = Number(s);
      if (!Number.isInteger(n) || n < 1) fail(`${flag} must be a positive integer, got ${s}`);
      return n;
    },
  };
}

module.exports = { median, sh, machineInfo, sourceInfo, loadavg, argReaders };
