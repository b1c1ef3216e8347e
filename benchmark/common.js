'use strict';
// What the side-by-side benchmarks (run.js, chat.js, batch.js, llama.js) share: their log
// lines, the report's record of the machine and builds and its "Machine and builds" lines,
// the load-average warning, and the raw-results file.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { machineInfo, sourceInfo, loadavg } = require('./machine');

const ROOT = path.resolve(__dirname, '..');
const MODELS_DIR = path.join(ROOT, '.cache', 'bench-models');
const RAW_DIR = path.join(ROOT, '.cache', 'bench-results');

const fmt = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : '-');

// `[tag] message` on stderr; fail exits.
function logger(tag) {
  const log = (msg) => process.stderr.write(`[${tag}] ${msg}\n`);
  const fail = (msg, code = 1) => {
    log(msg);
    process.exit(code);
  };
  return { log, fail };
}

function warnIfBusy(log, what = 'every side') {
  if (os.loadavg()[0] > os.cpus().length * 0.5) {
    log(`warning: load average is ${loadavg()} on ${os.cpus().length} CPUs; other work will slow ${what}`);
  }
}

// The start of every report: how it was made and what it ran on. `script`: the npm script's
// name (bench, bench:chat, ...); `env`: the reference environment (scripts/venv.js).
function newReport(script, env, ours) {
  return {
    command: `npm run ${script}${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`,
    date: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    machine: machineInfo(),
    source: sourceInfo(),
    ours,
    theirs: null,
    ldPreload: env.LD_PRELOAD || '',
    openblasTimeout: env.OPENBLAS_THREAD_TIMEOUT,
    openblasTimeoutOurs: process.env.OPENBLAS_THREAD_TIMEOUT,
    loadBefore: loadavg(),
    loadAfter: null,
  };
}

// Warns where MLX-LM's worker (`info` answer in report.theirs) runs another MLX or BLAS.
function checkReference(report, log) {
  const { ours, theirs } = report;
  if (theirs.mlx !== ours.mlxVersion) log(`warning: MLX versions differ (ours ${ours.mlxVersion}, MLX-LM's ${theirs.mlx})`);
  if (theirs.blas !== ours.blas) log(`warning: BLAS differs (ours ${ours.blas}, MLX-LM's ${theirs.blas})`);
}

// The "Machine and builds" list; `reference` names the MLX-LM process in the OpenBLAS line.
function machineLines(report, reference = 'the reference worker') {
  const { machine: mc, ours, theirs } = report;
  return [
    `- CPU: ${mc.cpu}, ${mc.cpus} CPUs (${mc.coresPerSocket} cores per socket, ${mc.threadsPerCore} thread(s) per core), ${fmt(mc.memoryGB, 0)} GiB memory; ${mc.kernel}; Node ${mc.node}`,
    `- Load average (1, 5, 15 min) before the run: ${report.loadBefore}; after: ${report.loadAfter}`,
    `- mlx-node at commit ${report.source.commit}${report.source.dirty ? ` with ${report.source.dirty} uncommitted file(s) in crates/, node/, lib/, index.js` : ''}; addon ${report.source.addon}`,
    `- mlx-node: \`mlxInfo()\` = \`${JSON.stringify(ours)}\``,
    `- MLX-LM ${theirs.mlxLm} on MLX ${theirs.mlx} (Python ${theirs.python}, ${theirs.device}), BLAS: ${theirs.blas} (LD_PRELOAD=${report.ldPreload || 'none'})`,
    `- OpenBLAS idle threads: OPENBLAS_THREAD_TIMEOUT=${report.openblasTimeoutOurs ?? 'unset'} for mlx-node (set by its loader unless given), ${report.openblasTimeout ?? 'unset'} for ${reference}`,
    ours.backend === 'cpu'
      ? `- Both sides load the same libmlx build (${ours.mlxVersion} CPU wheel) and call the same OpenBLAS for \`cblas_sgemm\`.`
      : `- Both sides load the same libmlx build (${ours.mlxVersion} ${ours.backend} wheel) and run on ${ours.device}.`,
  ];
}

// The whole record as JSON in .cache/bench-results; `prefix` names the benchmark ('' for run.js).
function writeRaw(report, prefix, log) {
  fs.mkdirSync(RAW_DIR, { recursive: true });
  const raw = path.join(RAW_DIR, `${prefix}${report.date.replace(/[:]/g, '-')}.json`);
  fs.writeFileSync(raw, JSON.stringify(report, null, 1));
  log(`raw results: ${path.relative(ROOT, raw)}`);
  return raw;
}

module.exports = { ROOT, MODELS_DIR, RAW_DIR, fmt, logger, warnIfBusy, newReport, checkReference, machineLines, writeRaw };
