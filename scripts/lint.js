'use strict';
// `npm run lint`: the Rust tree formatted as rustfmt.toml says and free of clippy
// warnings (workspace lints in Cargo.toml say which are allowed, and why). CI runs it.
const { spawnSync } = require('node:child_process');
const { ROOT, cargoEnv, log } = require('./mlx');

function run(args) {
  log(`$ cargo ${args.join(' ')}`);
  const r = spawnSync('cargo', args, { cwd: ROOT, stdio: 'inherit', env: cargoEnv() });
  if (r.status !== 0) {
    console.error(`[mlx-node] cargo ${args[0]} failed (exit ${r.status})`);
    process.exit(r.status || 1);
  }
}

run(['fmt', '--all', '--check']);
run(['clippy', '--release', '--workspace', '--all-targets', '--', '-D', 'warnings']);
