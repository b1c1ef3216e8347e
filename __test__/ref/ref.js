'use strict';
// Runs the live MLX-LM reference (mlx_lm_ref.py) in the project venv.
// A call's cases run in one Python process (models load once per process), or, where
// every case stands alone, dealt over two processes at once: most of a reference run is
// one-threaded Python and MLX work, and the suites spend minutes of CI's 2 cores in it.

const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { ensureVenv } = require('../../scripts/venv');

const SCRIPT = path.join(__dirname, 'mlx_lm_ref.py');

// A "cached" case with "save" writes a file that a later case of the same call may read
// ("cache_file", or a cache loaded from a file), so a call with one stays in one process;
// every other case's result depends on that case alone.
const writesFile = (c) => c.save !== undefined && c.save !== null;

// How many processes a call may use: MLX_NODE_REF_PROCESSES, else 2 where there are two
// cores or more.
function processCount() {
  const asked = Number.parseInt(process.env.MLX_NODE_REF_PROCESSES || '', 10);
  if (asked >= 1) return asked;
  return Math.min(2, os.availableParallelism());
}

// The cases' indices in `parts` groups, sorted by model and dealt in turn, so that each
// group gets a share of every model's (slow and fast) cases; one group where they cannot
// be split.
function deal(cases, parts) {
  const n = cases.some(writesFile) ? 1 : Math.min(parts, cases.length);
  const order = cases.map((_, i) => i);
  if (n <= 1) return [order];
  order.sort((a, b) => String(cases[a].model).localeCompare(String(cases[b].model)) || a - b);
  const groups = Array.from({ length: n }, () => []);
  order.forEach((i, k) => groups[k % n].push(i));
  return groups.map((g) => g.sort((a, b) => a - b));
}

// cases: see mlx_lm_ref.py. Resolves to one result per case, in order; a case that
// failed in Python resolves to { error, errorType }. Rejects if the run itself fails.
async function runReference(cases, options = {}) {
  const groups = deal(cases, processCount());
  const parts = await Promise.all(groups.map((g) => runProcess(g.map((i) => cases[i]), options)));
  const results = new Array(cases.length);
  groups.forEach((g, j) => g.forEach((i, k) => (results[i] = parts[j][k])));
  return results;
}

// One Python process for `cases`.
function runProcess(cases, { timeoutMs = 10 * 60 * 1000 } = {}) {
  return new Promise((resolve, reject) => {
    let venv;
    try {
      venv = ensureVenv();
    } catch (err) {
      reject(err);
      return;
    }
    const child = spawn(venv.python, [SCRIPT], { env: venv.env, stdio: ['pipe', 'pipe', 'pipe'] });
    const out = [];
    const err = [];
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.stdout.on('data', (d) => out.push(d));
    child.stderr.on('data', (d) => err.push(d));
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(new Error(`could not start the MLX-LM reference: ${e.message}`));
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const stderr = Buffer.concat(err).toString('utf8');
      if (timedOut) {
        reject(new Error(`MLX-LM reference timed out after ${timeoutMs} ms\n${stderr}`));
        return;
      }
      if (code !== 0) {
        reject(new Error(`MLX-LM reference failed (exit ${code}${signal ? `, ${signal}` : ''})\n${stderr}`));
        return;
      }
      try {
        const { results } = JSON.parse(Buffer.concat(out).toString('utf8'));
        if (!Array.isArray(results) || results.length !== cases.length) {
          throw new Error(`expected ${cases.length} results, got ${results && results.length}`);
        }
        resolve(results);
      } catch (e) {
        reject(new Error(`MLX-LM reference gave unreadable output: ${e.message}\n${stderr}`));
      }
    });
    child.stdin.on('error', () => {}); // an early exit is reported by 'close'
    child.stdin.end(JSON.stringify({ cases }));
  });
}

module.exports = { runReference };
