'use strict';
// `npm run check:targets` (CI runs it after the lint): type-check every Rust crate for
// Linux arm64 (`cargo check --target aarch64-unknown-linux-gnu`, warnings as errors), so
// that an x86-only intrinsic or a kernel without its portable fallback cannot land. This
// machine has no arm64 MLX or C++ toolchain for the shim, so mlx-sys runs in check-only
// mode (MLX_NODE_CHECK_ONLY: nothing compiled or linked for the target); `ring` (TLS of the
// Hub downloads) compiles C even when checked, hence Debian's gcc-aarch64-linux-gnu.
// macOS arm64 shares the aarch64 code paths; its SDK is not installable here.
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ROOT, aptInstall, log } = require('./mlx');

const TARGET = 'aarch64-unknown-linux-gnu';

function ok(cmd, args) {
  return spawnSync(cmd, args, { stdio: 'ignore' }).status === 0;
}

function fail(msg) {
  console.error(`[mlx-node] ${msg}`);
  process.exit(1);
}

// What the check needs but this machine cannot get (no rustup, no network to rustup's
// server, no apt-get) says so loudly and ends the check without failing CI: the code was
// not found wrong, the machine could not look. A check that runs and fails exits 1.
function cannotCheck(msg) {
  console.error(`[mlx-node] NOT CHECKED for ${TARGET}: ${msg}`);
  process.exit(0);
}

function ensureTarget() {
  const r = spawnSync('rustup', ['target', 'list', '--installed'], { encoding: 'utf8' });
  if (r.status === 0 && r.stdout.split('\n').includes(TARGET)) return;
  log(`installing the Rust standard library for ${TARGET} (rustup target add)`);
  if (!ok('rustup', ['target', 'add', TARGET])) cannotCheck(`rustup could not add the target's standard library`);
}

function ensureCrossGcc() {
  if (ok('aarch64-linux-gnu-gcc', ['--version'])) return;
  let installed = false;
  try {
    installed = aptInstall('gcc-aarch64-linux-gnu', 'the arm64 C compiler');
  } catch (e) {
    cannotCheck(`apt-get could not install gcc-aarch64-linux-gnu (${e.message})`);
  }
  if (!installed) cannotCheck('aarch64-linux-gnu-gcc is missing and apt-get is not available to install it');
}

function main() {
  const t0 = Date.now();
  ensureTarget();
  ensureCrossGcc();
  const args = ['check', '--workspace', '--all-targets', '--target', TARGET];
  log(`$ cargo ${args.join(' ')}`);
  const r = spawnSync('cargo', args, {
    cwd: ROOT,
    stdio: 'inherit',
    env: {
      ...process.env,
      MLX_NODE_CHECK_ONLY: '1',
      RUSTFLAGS: '-D warnings',
      // Its own directory: other RUSTFLAGS would rebuild the host build's dependencies.
      CARGO_TARGET_DIR: path.join(ROOT, 'target', 'check-targets'),
    },
  });
  if (r.status !== 0) fail(`cargo check for ${TARGET} failed (exit ${r.status})`);
  log(`${TARGET} checked in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
}

main();
