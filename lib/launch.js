'use strict';
// Starts the processes of a distributed model on this machine, as `mlx.launch --backend ring`
// starts them: a host file of 127.0.0.1 ports (MLX's ring format, one list of "ip:port" per
// rank), then one process per rank with MLX_RANK and MLX_HOSTFILE set. Each runs the same
// command; loadModel(dir, { distributed }) in it joins the others through those variables.
// Used by `mlx-node launch` and by the tests. (Several machines: mlx.launch's ssh launcher,
// docs/distributed.md.)
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');

// A port the OS says is free now (another program could still take it before the ring binds it).
function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

// Writes the ring backend's host file for `n` ranks on 127.0.0.1; returns its path.
async function writeHostfile(n, dir) {
  const hosts = [];
  for (let i = 0; i < n; i++) hosts.push([`127.0.0.1:${await freePort()}`]);
  const file = path.join(dir, 'hosts.json');
  fs.writeFileSync(file, JSON.stringify(hosts));
  return file;
}

// Runs `command` `args` as `n` ranks. `stdio(rank)` gives each rank's stdio (default: rank 0's
// stdout and everyone's stderr inherited, the other ranks' stdout ignored: they print what rank 0
// prints). Once a rank fails or rank 0 ends, the others get `graceMs` to stop on their own (they see the lost
// peer), then SIGTERM. Resolves to { codes, signals, outputs } per rank, outputs holding
// what piped stdout/stderr carried.
// `onStart(children)` is called once every rank is started.
async function launchLocal({ n, command, args = [], env = {}, stdio, graceMs = 10000, onStart }) {
  if (!(Number.isInteger(n) && n >= 1)) throw new RangeError(`n must be a positive integer, got ${n}`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mlx-node-launch-'));
  const hostfile = await writeHostfile(n, dir);
  const children = [];
  const outputs = [];
  const done = [];
  let killTimer;
  const stopOthers = () => {
    if (killTimer) return;
    killTimer = setTimeout(() => {
      for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGTERM');
    }, graceMs);
  };
  for (let rank = 0; rank < n; rank++) {
    const io = stdio ? stdio(rank) : ['inherit', rank === 0 ? 'inherit' : 'ignore', 'inherit'];
    const child = spawn(command, args, {
      env: { ...process.env, ...env, MLX_RANK: String(rank), MLX_HOSTFILE: hostfile },
      stdio: io,
    });
    const out = { stdout: [], stderr: [] };
    child.stdout?.on('data', (d) => out.stdout.push(d));
    child.stderr?.on('data', (d) => out.stderr.push(d));
    outputs.push(out);
    children.push(child);
    const first = rank === 0;
    done.push(
      new Promise((resolve) => {
        child.once('error', (e) => {
          out.stderr.push(Buffer.from(`cannot start ${command}: ${e.message}\n`));
          stopOthers();
          resolve({ code: 127, signal: null });
        });
        child.once('close', (code, signal) => {
          // Rank 0 gone: the others have nothing left to do with it.
          if (code !== 0 || first) stopOthers();
          resolve({ code, signal });
        });
      }),
    );
  }
  onStart?.(children);
  const ends = await Promise.all(done);
  clearTimeout(killTimer);
  fs.rmSync(dir, { recursive: true, force: true });
  return {
    codes: ends.map((e) => e.code),
    signals: ends.map((e) => e.signal),
    outputs: outputs.map((o) => ({ stdout: Buffer.concat(o.stdout).toString('utf8'), stderr: Buffer.concat(o.stderr).toString('utf8') })),
  };
}

module.exports = { launchLocal, writeHostfile, freePort };
