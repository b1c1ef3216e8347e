'use strict';
// Runs the live MLX-LM reference (mlx_lm_ref.py) in the project venv.
// One Python process per call; all cases of a call share it (models load once).

const path = require('node:path');
const { spawn } = require('node:child_process');
const { ensureVenv } = require('../../scripts/venv');

const SCRIPT = path.join(__dirname, 'mlx_lm_ref.py');

// cases: see mlx_lm_ref.py. Resolves to one result per case, in order; a case that
// failed in Python resolves to { error, errorType }. Rejects if the run itself fails.
function runReference(cases, { timeoutMs = 10 * 60 * 1000 } = {}) {
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
