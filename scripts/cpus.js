'use strict';
// OpenBLAS core types: which ones this CPU can run, and what mlx-node does on each.
// OpenBLAS (DYNAMIC_ARCH) picks its kernels per CPU; OPENBLAS_CORETYPE=<name> forces
// another, which is how one machine tries the paths other machines take. MLX-LM in the
// reference venv inherits the variable, so both sides of a parity test use the same one.
const fs = require('node:fs');
const { spawnSync } = require('node:child_process');
const { ROOT, log } = require('./mlx');

// What each core type's kernels execute (OpenBLAS's own checks, kernel/x86_64 and
// driver/others/dynamic.c, ask for these), strongest last.
const CORE_TYPES = [
  { name: 'Prescott', flags: ['sse3'] },
  { name: 'Sandybridge', flags: ['avx'] },
  { name: 'Haswell', flags: ['avx2', 'fma'] },
  { name: 'Zen', flags: ['avx2', 'fma'] },
  { name: 'SkylakeX', flags: ['avx512f', 'avx512cd', 'avx512bw', 'avx512dq', 'avx512vl'] },
  { name: 'Cooperlake', flags: ['avx512f', 'avx512cd', 'avx512bw', 'avx512dq', 'avx512vl', 'avx512_bf16'] },
  { name: 'SapphireRapids', flags: ['avx512f', 'avx512cd', 'avx512bw', 'avx512dq', 'avx512vl', 'avx512_bf16', 'avx512_fp16'] },
];

function cpuFlags() {
  try {
    const info = fs.readFileSync('/proc/cpuinfo', 'utf8');
    const line = info.split('\n').find((l) => l.startsWith('flags'));
    // /proc/cpuinfo calls SSE3 "pni".
    const flags = new Set(line ? line.split(':')[1].trim().split(/\s+/) : []);
    if (flags.has('pni')) flags.add('sse3');
    return flags;
  } catch {
    return new Set();
  }
}

// The core types whose kernels this CPU can execute.
function runnableCoreTypes() {
  const flags = cpuFlags();
  return CORE_TYPES.filter((c) => c.flags.every((f) => flags.has(f))).map((c) => c.name);
}

// mlxInfo() in a child process with OPENBLAS_CORETYPE=core (and `env`): the core type
// OpenBLAS really took (0.3.21 takes Cooperlake for SapphireRapids) and the kernels in use.
// No core: OpenBLAS's own choice for this CPU (an empty or unknown name is not that: 0.3.21
// then takes its newest x86 core type).
function infoFor(core, env = {}) {
  const childEnv = { ...process.env, ...env, OPENBLAS_CORETYPE: core };
  if (!core) delete childEnv.OPENBLAS_CORETYPE;
  const r = spawnSync(process.execPath, ['-e', "process.stdout.write(JSON.stringify(require('.').mlxInfo()))"], {
    cwd: ROOT,
    env: childEnv,
    encoding: 'utf8',
  });
  if (r.status !== 0) throw new Error(`mlxInfo() with OPENBLAS_CORETYPE=${core} failed (exit ${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout);
}

// Runnable core types with the one OpenBLAS reports for each, without repeats. Named core
// types this CPU cannot run (SkylakeX's AVX-512 kernels on an AVX2-only CPU die of SIGILL) are
// left out, as the default list leaves them out.
function distinctCoreTypes(names = runnableCoreTypes()) {
  const runnable = runnableCoreTypes();
  const lacking = names.filter((n) => !runnable.includes(n));
  if (lacking.length) log(`not run, this CPU lacks their instructions: ${lacking.join(', ')}`);
  const seen = new Set();
  const out = [];
  for (const name of names.filter((n) => runnable.includes(n))) {
    const info = infoFor(name);
    if (seen.has(info.openblasCore)) continue;
    seen.add(info.openblasCore);
    out.push({ name, info });
  }
  return out;
}

module.exports = { CORE_TYPES, runnableCoreTypes, infoFor, distinctCoreTypes };
