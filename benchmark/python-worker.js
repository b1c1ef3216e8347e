'use strict';
// A reference-side benchmark worker: a Python script in the project venv that
// answers one JSON request per line with one JSON line (`{ error }` on failure).
const path = require('node:path');
const readline = require('node:readline');
const { spawn } = require('node:child_process');

const ROOT = path.resolve(__dirname, '..');

class PythonWorker {
  // `script`: a file in benchmark/; `label` names the worker in errors.
  constructor(python, env, script, label) {
    this.label = label;
    this.child = spawn(python, [path.join(__dirname, script)], { env, cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'] });
    this.pending = [];
    this.stderr = '';
    this.exited = null;
    this.child.stderr.on('data', (d) => {
      this.stderr = (this.stderr + d.toString('utf8')).slice(-20000);
    });
    readline.createInterface({ input: this.child.stdout }).on('line', (line) => {
      const p = this.pending.shift();
      if (!p) return;
      let msg;
      try {
        msg = JSON.parse(line);
      } catch {
        p.reject(new Error(`${label} worker sent unreadable output: ${line.slice(0, 200)}`));
        return;
      }
      if (msg.error) p.reject(new Error(`${label} worker: ${msg.error}\n${this.stderr.slice(-4000)}`));
      else p.resolve(msg);
    });
    this.child.on('exit', (code, signal) => {
      this.exited = `exit ${code}${signal ? `, ${signal}` : ''}`;
      for (const p of this.pending.splice(0)) p.reject(this.#stopped());
    });
    this.child.on('error', (e) => {
      for (const p of this.pending.splice(0)) p.reject(new Error(`could not start the ${label} worker: ${e.message}`));
    });
    this.child.stdin.on('error', () => {});
  }

  #stopped() {
    return new Error(`${this.label} worker stopped (${this.exited})\n${this.stderr.slice(-4000)}`);
  }

  request(req) {
    if (this.exited) return Promise.reject(this.#stopped());
    return new Promise((resolve, reject) => {
      this.pending.push({ resolve, reject });
      this.child.stdin.write(`${JSON.stringify(req)}\n`);
    });
  }

  close() {
    this.child.stdin.end();
  }
}

module.exports = { PythonWorker };
