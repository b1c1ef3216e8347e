#!/usr/bin/env node
'use strict';
// `npm run bench:tts`: mlx-node's Chatterbox against mlx-audio's on the same machine, the
// same libmlx and the same BLAS, interleaved (ours, mlx-audio, ours, ...) after a warm-up,
// on the same model folders, text, options and seed. Prints markdown tables; a full
// default run also writes them into benchmark/RESULTS.md as the "Speech (Chatterbox)"
// section (the rest of that file is left as it is).
//
// Models: the shrunk test fixtures (.cache/fixtures-tts: chatterbox fp32, chatterbox-q4, -q6),
// the same fixtures built to speak as long as a real voice would (.cache/bench-models/
// fixtures-stop152, written by scripts/fixtures_tts.py --stop-at 152) and a full-size
// Chatterbox with random weights (.cache/bench-models/chatterbox-full, written by
// scripts/fixtures_tts.py --full), so the speech is noise but the work per token is the
// real model's; and a full-size Chatterbox Turbo likewise (.cache/bench-models/
// chatterbox-turbo-full, scripts/fixtures_tts_turbo.py --full), timed against mlx-audio's
// chatterbox_turbo.

const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { PythonWorker } = require('./python-worker');
const { median, sh, machineInfo, sourceInfo, loadavg, argReaders } = require('./machine');
const { benchVoices, voiceTable, CLIP, CUT_START_MS, CUT_STEP_MS, TURBO_CLIPS } = require('./tts-voices');

const ROOT = path.resolve(__dirname, '..');
const RESULTS = path.join(__dirname, 'RESULTS.md');
const RAW_DIR = path.join(ROOT, '.cache', 'bench-results');
const BENCH_MODELS = path.join(ROOT, '.cache', 'bench-models');
const FIXTURES_SCRIPT = path.join(ROOT, 'scripts', 'fixtures_tts.py');
const TURBO_SCRIPT = path.join(ROOT, 'scripts', 'fixtures_tts_turbo.py');
const SECTION = '## Speech (Chatterbox)';
const VOICE_SECTION = '## Speech: first chunk of a cloned voice';

const SEED = 42;
// stream()'s smallest and default firstChunkTokens, and the speech tokens it waits for
// past a chunk (MIN_FIRST_CHUNK, StreamSchedule::default, LOOKAHEAD_TOKENS in
// crates/tts/src/streaming.rs).
const FIRST_CHUNK_MIN = 5;
const FIRST_CHUNK_DEFAULT = 10;
const LOOKAHEAD_TOKENS = 3;
// Resemble AI's defaults (exaggeration 0.5 as their demo, not mlx-audio's 0.1).
const OPTIONS = { temperature: 0.8, cfgWeight: 0.5, exaggeration: 0.5, repetitionPenalty: 1.2, minP: 0.05, topP: 1.0 };
// Two sentences, one piece for our pipeline (under its 300-character split limit).
const FIXTURE_TEXT = 'Hello there, this is a short test of speech synthesis. The weather today is calm and clear.';
const FULL_TEXT = 'The quick brown fox jumps over the lazy dog.';

// The random T3 of every model stops itself at speech position `stopAt` (scripts/fixtures_tts.py),
// well before maxTokens. The tests' fixtures stop at 40: 1.4 s of audio, where a real voice takes
// about 6 s for FIXTURE_TEXT (92 characters at 15 a second, 25 speech tokens a second), so the
// fixtures are timed once more, built to stop at 152: about the length of this text spoken.
// Full size: a run takes minutes on 2 CPU cores, so it keeps the short length, and its rounds
// stop early when the next one would end after FULL_BUDGET_S.
const PLAN = {
  fixtures: { models: ['chatterbox', 'chatterbox-q4', 'chatterbox-q6'], text: FIXTURE_TEXT, maxTokens: 200, rounds: 3, stopAt: 40 },
  long: { models: ['chatterbox', 'chatterbox-q4'], folder: 'fixtures-stop152', text: FIXTURE_TEXT, maxTokens: 300, rounds: 3, stopAt: 152 },
  full: { models: ['chatterbox-full'], folder: 'chatterbox-full', text: FULL_TEXT, maxTokens: 100, rounds: 2, stopAt: 40 },
  // Ours only (tts-voices.js): the built-in voice and two cloned ones, on the tests' fixture;
  // then on the full-size Turbo (PLAN.turbo's folder, text and options; rounds: --full-rounds),
  // whose stream makes 4 chunks of 100 speech tokens (10, 20, 40, 30).
  voices: { models: [], text: FIXTURE_TEXT, maxTokens: 200, rounds: 3, turbo: { maxTokens: 100, rounds: 2 } },
  // Turbo's random T3 stops at GPT-2 position 430 (scripts/fixtures_tts_turbo.py), about
  // 43 speech tokens after FULL_TEXT's prompt; maxTokens bounds it where it does not.
  // Turbo's own defaults (mlx-audio's generate): it has no guidance, emotion or min-p.
  turbo: {
    models: ['chatterbox-turbo-full'],
    folder: 'chatterbox-turbo-full',
    text: FULL_TEXT,
    maxTokens: 100,
    rounds: 2,
    stopAt: null,
    options: { temperature: 0.8, repetitionPenalty: 1.2, topP: 0.95 },
  },
};
const FULL_BUDGET_S = 15 * 60;

const USAGE = `usage: npm run bench:tts -- [options]
  --quick            smoke run: the tests' fixtures only, 1 round (about 2 minutes)
  --only WHAT        fixtures | long (the fixtures stopping at ${PLAN.long.stopAt}) | full | turbo (full-size Turbo)
                     | voices (first chunk of cloned voices, fixture and full-size Turbo; its own section of RESULTS.md)
  --rounds N         timed rounds per fixture model, both lengths (default ${PLAN.fixtures.rounds}; --quick: 1)
  --full-rounds N    timed rounds for the full-size model, however long they take (default:
                     ${PLAN.full.rounds}, fewer if they would end after ${FULL_BUDGET_S / 60} minutes of full-size work);
                     voices: the later streams of each full-size Turbo voice (default ${PLAN.voices.turbo.rounds})
  --write            write the section into benchmark/RESULTS.md even if this is not a full default run
  --no-build         use the addon as built (default: npm run build first)`;

function log(msg) {
  process.stderr.write(`[bench:tts] ${msg}\n`);
}

function fail(msg, code = 1) {
  log(msg);
  process.exit(code);
}

function parseArgs(argv) {
  const a = { quick: false, only: null, rounds: null, fullRounds: null, write: false, build: true };
  const { value, positive } = argReaders(argv, fail, USAGE);
  for (let i = 0; i < argv.length; i++) {
    const f = argv[i];
    if (f === '--quick') a.quick = true;
    else if (f === '--write') a.write = true;
    else if (f === '--no-build') a.build = false;
    else if (f === '--help' || f === '-h') {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    } else if (f === '--only') {
      a.only = value(i++, f);
      if (!PLAN[a.only]) fail(`--only takes ${Object.keys(PLAN).join(' or ')}, got ${a.only}`);
    } else if (f === '--rounds') a.rounds = positive(value(i++, f), f);
    else if (f === '--full-rounds') a.fullRounds = positive(value(i++, f), f);
    else fail(`unknown argument ${f}\n${USAGE}`);
  }
  if (a.quick && a.only && a.only !== 'fixtures') fail("--quick runs the tests' fixtures only");
  return a;
}

// ---------------------------------------------------------------- helpers

const fmt = (x, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '-');
const spread = (xs, d = 2) => (xs.length > 1 ? `${fmt(median(xs), d)} (${fmt(Math.min(...xs), d)}-${fmt(Math.max(...xs), d)})` : fmt(xs[0], d));
const sameTokens = (a, b) => a.length === b.length && a.every((t, i) => t === b[i]);

// ---------------------------------------------------------------- model folders

// A folder of .cache/bench-models written by `script` (scripts/fixtures_tts.py or
// fixtures_tts_turbo.py) `args` (the output folder last), rewritten whenever that script
// (or the venv) changes.
function ensureBenchModels(folder, args, what, python, env, script = FIXTURES_SCRIPT) {
  const { withLock, VENV_SPEC } = require('../scripts/venv');
  const dir = path.join(BENCH_MODELS, folder);
  const h = crypto.createHash('sha256');
  for (const f of new Set([FIXTURES_SCRIPT, script])) h.update(fs.readFileSync(f));
  const stamp = h.update(VENV_SPEC).update(args.join(' ')).digest('hex');
  const stampFile = path.join(dir, '.stamp');
  const fresh = () => {
    try {
      return fs.readFileSync(stampFile, 'utf8') === stamp;
    } catch {
      return false;
    }
  };
  if (fresh()) return dir;
  fs.mkdirSync(BENCH_MODELS, { recursive: true });
  withLock(`${dir}.lock`, what, () => {
    if (fresh()) return;
    const tmp = `${dir}.partial`;
    fs.rmSync(tmp, { recursive: true, force: true });
    log(`writing ${what} to ${path.relative(ROOT, dir)}`);
    const r = spawnSync(python, [script, ...args, tmp], { env, cwd: ROOT, stdio: ['ignore', 2, 2] });
    if (r.status !== 0) throw new Error(`${path.relative(ROOT, script)} ${args.join(' ')} failed (exit ${r.status}${r.signal ? `, ${r.signal}` : ''})`);
    fs.writeFileSync(path.join(tmp, '.stamp'), stamp);
    fs.rmSync(dir, { recursive: true, force: true });
    fs.renameSync(tmp, dir);
  });
  return dir;
}

// ---------------------------------------------------------------- runs

async function synthesizeOurs(tts, text, options) {
  const t0 = performance.now();
  const a = await tts.synthesize(text, options);
  const seconds = (performance.now() - t0) / 1000;
  // T3's own seconds from the Audio's figures: its prompt (with the first speech token),
  // then one decode step per later token.
  const t3Prompt = a.promptTokens / a.promptTps;
  const t3Decode = a.generationTokens / a.generationTps;
  const t3Step = a.generationTokens > 1 ? t3Decode / (a.generationTokens - 1) : 0;
  return { seconds, samples: a.audio.length, sampleRate: a.sampleRate, speechTokens: a.speechTokens, t3Tokens: a.generationTokens, t3Seconds: t3Prompt + t3Decode, t3Prompt, t3Step };
}

// T3's time to the last token a first chunk of `first` tokens waits for: a floor under
// the stream's first audio that no S3Gen or vocoder work can lower.
function t3Floor(run, first) {
  return run.t3Prompt + (first + LOOKAHEAD_TOKENS - 1) * run.t3Step;
}

// Time to the first chunk and to the end of the iteration, and the stalls of a player that
// starts with the first chunk and plays each one as soon as it has both it and the end of
// the one before: the seconds it waits on a chunk not there yet. No speech tokens in chunks.
async function streamOurs(tts, text, options) {
  const t0 = performance.now();
  let first = null;
  let samples = 0;
  let chunks = 0;
  let sampleRate = 0;
  let playedTo = 0;
  let stalls = 0;
  for await (const c of tts.stream(text, options)) {
    const now = (performance.now() - t0) / 1000;
    if (first === null) first = playedTo = now;
    else if (now > playedTo) {
      stalls += now - playedTo;
      playedTo = now;
    }
    playedTo += c.audio.length / c.sampleRate;
    samples += c.audio.length;
    sampleRate = c.sampleRate;
    chunks += 1;
  }
  return { seconds: (performance.now() - t0) / 1000, firstChunk: first, chunks, samples, sampleRate, stalls };
}

function synthesizeTheirs(worker, text, options) {
  return worker.request({ cmd: 'synthesize', text, options });
}

async function loadOurs(dir) {
  const { loadTTS } = require('..');
  const t0 = performance.now();
  const tts = await loadTTS(dir);
  return { tts, seconds: (performance.now() - t0) / 1000 };
}

// One model: warm-up on both sides, then rounds of ours / mlx-audio / ours streaming.
// Ours total from synthesize(), first chunk from a separate stream() run (streaming redoes
// part of S3Gen per chunk, so its total is not synthesize()'s). Full size (streamOnce): the
// stream() run is made once, after the rounds, to keep each round to two runs of minutes.
async function benchModel(name, dir, plan, { rounds, budgetS, streamOnce }, worker, entry) {
  const options = { ...(plan.options ?? OPTIONS), maxTokens: plan.maxTokens, seed: SEED };
  // The smallest first chunk stream() allows: the least time to first audio.
  const options5 = { ...options, firstChunkTokens: FIRST_CHUNK_MIN };
  log(`${name}: loading (${path.relative(ROOT, dir)})`);
  entry.theirsLoad = (await worker.request({ cmd: 'load', model: dir })).seconds;
  let ours = null;
  try {
    ours = await loadOurs(dir);
    entry.oursLoad = ours.seconds;
  } catch (e) {
    entry.oursError = `${e.code ? `${e.code}: ` : ''}${e.message.split('\n')[0]}`;
    log(`${name}: our loadTTS failed, timing mlx-audio alone (${entry.oursError})`);
  }
  const started = performance.now();
  try {
    log(`${name}: warm-up`);
    if (ours) entry.warmOurs = await synthesizeOurs(ours.tts, plan.text, options);
    entry.warmTheirs = await synthesizeTheirs(worker, plan.text, options);
    log(`${name}: warm-up ours ${fmt(entry.warmOurs?.seconds)} s, mlx-audio ${fmt(entry.warmTheirs.seconds)} s`);
    // The first stream() of a voice also makes the voice's prompt cache (one flow pass
    // over the prompt); later ones, as the rounds' are, start from it. Timed apart.
    if (ours) {
      entry.coldStream = await streamOurs(ours.tts, plan.text, options);
      log(`${name}: first stream of the voice: first chunk ${fmt(entry.coldStream.firstChunk)} s of ${fmt(entry.coldStream.seconds)} s`);
    }
    for (let r = 0; r < rounds; r++) {
      const roundStart = performance.now();
      const row = {};
      if (ours) row.ours = await synthesizeOurs(ours.tts, plan.text, options);
      row.theirs = await synthesizeTheirs(worker, plan.text, options);
      if (ours && !streamOnce) row.oursStream = await streamOurs(ours.tts, plan.text, options);
      if (ours && !streamOnce) row.oursStream5 = await streamOurs(ours.tts, plan.text, options5);
      entry.rounds.push(row);
      log(
        `${name} | round ${r + 1}/${rounds}: ours ${fmt(row.ours?.seconds)} s` +
          `${row.oursStream ? ` (stream: first chunk ${fmt(row.oursStream.firstChunk)} s of ${fmt(row.oursStream.seconds)} s; ` +
            `firstChunkTokens ${FIRST_CHUNK_MIN}: ${fmt(row.oursStream5.firstChunk)} s)` : ''}, ` +
          `mlx-audio ${fmt(row.theirs.seconds)} s (T3 ${fmt(row.theirs.t3Seconds)} s) (load ${loadavg()})`,
      );
      const elapsed = (performance.now() - started) / 1000;
      const roundS = (performance.now() - roundStart) / 1000;
      // The two stream() runs still to come cost about a synthesize() each at full size.
      const reserve = streamOnce && row.ours ? 2 * row.ours.seconds : 0;
      if (budgetS && r + 1 < rounds && elapsed + roundS + reserve > budgetS) {
        log(`${name}: stopping after ${r + 1} round(s): another would end after the ${fmt(budgetS / 60, 0)}-minute budget`);
        entry.budgetStop = true;
        break;
      }
    }
    if (ours && streamOnce) {
      entry.streamRun = await streamOurs(ours.tts, plan.text, options);
      log(`${name} | stream: first chunk ${fmt(entry.streamRun.firstChunk)} s of ${fmt(entry.streamRun.seconds)} s (load ${loadavg()})`);
      entry.streamRun5 = await streamOurs(ours.tts, plan.text, options5);
      log(`${name} | stream, firstChunkTokens ${FIRST_CHUNK_MIN}: first chunk ${fmt(entry.streamRun5.firstChunk)} s of ${fmt(entry.streamRun5.seconds)} s`);
    }
  } finally {
    if (ours) await ours.tts.dispose();
  }
}

function summarize(entry) {
  const rs = entry.rounds;
  const theirs = rs.map((r) => r.theirs);
  const ours = rs.map((r) => r.ours).filter(Boolean);
  const streams = [...rs.map((r) => r.oursStream), entry.streamRun].filter(Boolean);
  const streams5 = [...rs.map((r) => r.oursStream5), entry.streamRun5].filter(Boolean);
  const s = {
    theirs: {
      seconds: theirs.map((x) => x.seconds),
      t3Seconds: theirs.map((x) => x.t3Seconds),
      audioSeconds: theirs[0].samples / theirs[0].sampleRate,
      speechTokens: theirs[0].speechTokens.length,
      t3Tokens: theirs[0].t3Tokens,
      peakMemory: median(theirs.map((x) => x.peakMemory)),
      stable: theirs.every((x) => sameTokens(x.speechTokens, theirs[0].speechTokens)),
    },
    ours: null,
  };
  if (ours.length) {
    const tokensRun = ours[0];
    s.ours = {
      seconds: ours.map((x) => x.seconds),
      firstChunk: streams.map((x) => x.firstChunk),
      streamSeconds: streams.map((x) => x.seconds),
      stalls: streams.map((x) => x.stalls),
      chunks: streams.length ? streams[0].chunks : null,
      chunksStable: streams.every((x) => x.chunks === streams[0].chunks),
      firstChunk5: streams5.map((x) => x.firstChunk),
      streamSeconds5: streams5.map((x) => x.seconds),
      stalls5: streams5.map((x) => x.stalls),
      chunks5: streams5.length ? streams5[0].chunks : null,
      coldStream: entry.coldStream ?? null,
      audioSeconds: ours[0].samples / ours[0].sampleRate,
      t3Seconds: ours.map((x) => x.t3Seconds),
      t3Tokens: tokensRun.t3Tokens,
      speechTokens: tokensRun.speechTokens.length,
      stable: ours.every((x) => sameTokens(x.speechTokens, tokensRun.speechTokens)),
    };
    s.sameTokens = sameTokens(tokensRun.speechTokens, theirs[0].speechTokens);
    s.ratio = rs.filter((r) => r.ours).map((r) => r.ours.seconds / r.theirs.seconds);
    // Time to first audio against waiting for synthesize(): per round where both ran in it,
    // else (the full-size model's single stream run) against the median synthesize().
    const share = (key, all) =>
      rs.some((r) => r[key])
        ? rs.filter((r) => r.ours && r[key]).map((r) => r[key].firstChunk / r.ours.seconds)
        : all.map((x) => x.firstChunk / median(s.ours.seconds));
    s.firstShare = share('oursStream', streams);
    s.firstShare5 = share('oursStream5', streams5);
    s.floorShare = ours.map((x) => t3Floor(x, FIRST_CHUNK_DEFAULT) / x.seconds);
    s.floorShare5 = ours.map((x) => t3Floor(x, FIRST_CHUNK_MIN) / x.seconds);
  }
  return s;
}

// ---------------------------------------------------------------- report

function sideTable(report) {
  const lines = [
    `| model | side | total s, median (min-max) | audio s | real-time factor | speech tokens | T3 s | stream: first audio s of total s, stalls s | stream, firstChunkTokens ${FIRST_CHUNK_MIN}: the same | first stream of the voice (makes its prompt cache) |`,
    '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const m of report.models) {
    const s = m.summary;
    if (!s) continue;
    if (s.ours) {
      const rtf = s.ours.seconds.map((x) => x / s.ours.audioSeconds);
      const stream = (firsts, totals, chunks, stalls) =>
        firsts.length ? `${spread(firsts)} of ${spread(totals)}, ${chunks} chunk${chunks > 1 ? 's' : ''}, stalls ${spread(stalls)}` : '-';
      const first = stream(s.ours.firstChunk, s.ours.streamSeconds, s.ours.chunks, s.ours.stalls);
      const first5 = stream(s.ours.firstChunk5, s.ours.streamSeconds5, s.ours.chunks5, s.ours.stalls5);
      const cold = s.ours.coldStream ? `${fmt(s.ours.coldStream.firstChunk)} of ${fmt(s.ours.coldStream.seconds)}` : '-';
      lines.push(`| ${m.name} | mlx-node | ${spread(s.ours.seconds)} | ${fmt(s.ours.audioSeconds)} | ${spread(rtf, 1)} | ${s.ours.speechTokens} | ${spread(s.ours.t3Seconds)} | ${first} | ${first5} | ${cold} |`);
    } else {
      lines.push(`| ${m.name} | mlx-node | not run: ${m.oursError} | | | | | | | |`);
    }
    const t = s.theirs;
    const rtf = t.seconds.map((x) => x / t.audioSeconds);
    lines.push(`| ${m.name} | mlx-audio | ${spread(t.seconds)} | ${fmt(t.audioSeconds)} | ${spread(rtf, 1)} | ${t.speechTokens} | ${spread(t.t3Seconds)} | = total (no streaming) | | |`);
  }
  return lines.join('\n');
}

function targetTable(report) {
  const lines = [
    `| model | mlx-node / mlx-audio total, median (min-max) | target <= 0.80 | ours: stream first chunk / synthesize total | target < 0.25 | T3 alone to that chunk's tokens / synthesize total | the same, firstChunkTokens ${FIRST_CHUNK_MIN} | target < 0.25 | T3 alone, firstChunkTokens ${FIRST_CHUNK_MIN} | same speech tokens |`,
    '|---|--:|:-:|--:|:-:|--:|--:|:-:|--:|:-:|',
  ];
  let any = false;
  for (const m of report.models) {
    const s = m.summary;
    if (!s?.ours) continue;
    any = true;
    const r = median(s.ratio);
    const f = median(s.firstShare);
    const f5 = s.firstShare5.length ? median(s.firstShare5) : null;
    const share5 = f5 === null ? '- | -' : `${spread(s.firstShare5)} | ${f5 < 0.25 ? 'met' : '**missed**'}`;
    lines.push(
      `| ${m.name} | ${spread(s.ratio)} | ${r <= 0.8 ? 'met' : '**missed**'} | ${spread(s.firstShare)} | ${f < 0.25 ? 'met' : '**missed**'} | ` +
        `${spread(s.floorShare)} | ${share5} | ${spread(s.floorShare5)} | ${s.sameTokens ? 'yes' : '**no**'} |`
    );
  }
  return any ? lines.join('\n') : null;
}

// Under the targets, for each row that misses the first-chunk target: how much of it T3 alone
// takes (the floor column) and what that leaves for the chunk's S3Gen and vocoder work.
function floorNotes(report) {
  const lines = [];
  for (const m of report.models) {
    const s = m.summary;
    if (!s?.ours || median(s.firstShare) < 0.25) continue;
    const floor = median(s.floorShare);
    lines.push(
      `- ${m.name} (${fmt(s.ours.audioSeconds, 1)} s of audio): its first chunk waits for ${FIRST_CHUNK_DEFAULT + LOOKAHEAD_TOKENS} of T3's ${s.ours.t3Tokens} steps, ` +
        `which with T3's prompt take ${fmt(floor)} of the total before any S3Gen or vocoder work, ` +
        `leaving ${fmt(Math.max(0, 0.25 - floor))} for that chunk's encoder pass, solver steps and vocoder.`
    );
  }
  return lines.length ? ['', ...lines] : [];
}

function renderSection(report) {
  const { machine: mc, ours, theirs } = report;
  const plan = report.models
    .map((m) => `${m.name}: ${m.rounds.length} round(s)${m.budgetStop ? ' (stopped by the time budget)' : ''}, maxTokens ${m.maxTokens}, text "${m.text}"`)
    .join('\n- ');
  const parts = [
    SECTION,
    '',
    `Made by \`${report.command}\` on ${report.date}, in ${fmt(report.seconds / 60, 1)} minutes.`,
    '',
    '### Machine and builds',
    '',
    `- CPU: ${mc.cpu}, ${mc.cpus} CPUs, ${fmt(mc.memoryGB, 0)} GiB memory; ${mc.kernel}; Node ${mc.node}`,
    `- Load average (1, 5, 15 min) before the run: ${report.loadBefore}; after: ${report.loadAfter}`,
    `- mlx-node at commit ${report.source.commit}${report.source.dirty ? ` with ${report.source.dirty} uncommitted file(s) in crates/, node/, lib/, index.js` : ''}; addon ${report.source.addon}`,
    `- mlx-node: \`mlxInfo()\` = \`${JSON.stringify(ours)}\``,
    `- mlx-audio ${theirs.mlxAudio} on MLX ${theirs.mlx} (Python ${theirs.python}, ${theirs.device}), BLAS: ${theirs.blas} (LD_PRELOAD=${report.ldPreload || 'none'})`,
    `- OpenBLAS idle threads: OPENBLAS_THREAD_TIMEOUT=${report.openblasTimeoutOurs ?? 'unset'} for mlx-node (set by its loader unless given), ${report.openblasTimeout ?? 'unset'} for the reference worker`,
    '',
    '### Method',
    '',
    `- Same model folder, text, options and seed on both sides: ${Object.entries(OPTIONS).map(([k, v]) => `${k} ${v}`).join(', ')}, seed ${SEED}.`,
    '- Models: the shrunk test fixtures (`.cache/fixtures-tts/chatterbox`, float32, `chatterbox-q4` and `chatterbox-q6`, T3 4- and 6-bit; 2 T3 layers, small S3Gen/HiFT, 20-token voice prompt); ' +
      `the same fixtures built to stop at speech position ${PLAN.long.stopAt} instead of ${PLAN.fixtures.stopAt} (the "stop ${PLAN.long.stopAt}" rows, \`.cache/bench-models/${PLAN.long.folder}\`, \`scripts/fixtures_tts.py --stop-at ${PLAN.long.stopAt}\`); ` +
      'and `.cache/bench-models/chatterbox-full`, the real architecture in float32 with seeded random weights ' +
      '(`scripts/fixtures_tts.py --full`: T3 30 layers, full S3Gen with 10 Euler steps, HiFT 512 channels, a 250-token (10 s) S3Gen voice prompt). ' +
      '`chatterbox-turbo-full`: Chatterbox Turbo likewise (`scripts/fixtures_tts_turbo.py --full`: GPT-2 medium T3 of 24 layers with a 375-token reference clip, ' +
      'the meanflow S3Gen with 2 Euler steps, full HiFT, a 250-token S3Gen voice prompt), against mlx-audio\'s `ChatterboxTurboTTS.generate` ' +
      '(its `max_tokens` = maxTokens - 1; options temperature 0.8, repetitionPenalty 1.2, topP 0.95, top-k 1000: Turbo\'s defaults; our Turbo `stream()` streams in chunks as Chatterbox\'s does, from the voice\'s prompt cache). ' +
      'The random speech head is built to emit the stop token at one speech position, so T3 ends there on every model: ' +
      `${PLAN.fixtures.stopAt} for the tests' fixtures and the full size, 1.4 s of audio, where a real voice says the fixtures' text in about 6 s ` +
      `(92 characters at 15 a second, 25 speech tokens a second): the stop ${PLAN.long.stopAt} rows come close (the random head also samples special ids, ` +
      'which S3Gen never gets, so their audio is about 5.2 s). ' +
      'A first chunk waits for the same 13 tokens at any length, so its share of the total is large for a 1.4 s utterance and small for a 5 s one.',
    '- Per model: one warm-up run on each side with the timed text and options, then our first `stream()` of the voice (timed apart: it also makes the voice\'s prompt cache), ' +
      `then interleaved rounds: ours, mlx-audio, ours streaming (default chunks), ours streaming with firstChunkTokens ${FIRST_CHUNK_MIN} (the smallest first chunk), ... ` +
      '(full size: ours, mlx-audio, ..., and our two streaming runs after the rounds).',
    `- ${plan}`,
    '- mlx-audio: one `Model.generate(text, max_new_tokens=, temperature=, cfg_weight=, exaggeration=, repetition_penalty=, min_p=, top_p=)` after `mx.random.seed(seed)`, ' +
      'timed in its worker from the call to the evaluated waveform (`mx.eval(result.audio)`); T3 s: until `t3.inference` returned. It has no streaming, so its first audio is its total. ' +
      'Loaded as the parity tests load it (`__test__/ref/chatterbox_ref.py`).',
    '- mlx-node: total = `await tts.synthesize(text, options)` in JS (call to resolved promise). Streaming: a separate `for await (const c of tts.stream(text, options))` run; ' +
      'first audio = time to its first chunk, shown with that run\'s own total (every chunk runs S3Gen over its new tokens and 50 earlier ones, after the voice prompt\'s cached frames); ' +
      'stalls = the seconds a player that starts at the first chunk and plays each chunk once it has it would wait for audio (0: no gap after the first chunk). ' +
      'In the targets, first chunk / total divides it by our `synthesize()` total of the same round (full size: by the median).',
    '- mlx-node T3 s: from the `Audio` of each `synthesize()`, `promptTokens / promptTps + generationTokens / generationTps` (T3\'s prompt with its first speech token, then its decode steps). ' +
      `"T3 alone to that chunk's tokens": T3's prompt seconds plus (firstChunkTokens + ${LOOKAHEAD_TOKENS} - 1) decode steps, the tokens a first chunk waits for (its own and the ${LOOKAHEAD_TOKENS} S3Gen looks ahead), ` +
      'divided by the same `synthesize()` total: a floor under the first-chunk share that no S3Gen or vocoder work can lower (streaming runs the same T3 steps).',
    '- audio s = samples / 24000; real-time factor = total s / audio s (below 1 is faster than real time); speech tokens: the ids S3Gen gets (start/stop and specials removed).',
    '- Ratios are per round, then median (min-max). "same speech tokens": our tokens equal mlx-audio\'s for the same seed.',
    '',
    '### Side by side',
    '',
    sideTable(report),
  ];
  const tt = targetTable(report);
  if (tt) parts.push('', '### Targets', '', tt, ...floorNotes(report));
  const notes = [];
  for (const m of report.models) {
    const s = m.summary;
    if (!s) continue;
    if (!s.theirs.stable) notes.push(`${m.name}: mlx-audio's speech tokens changed between rounds.`);
    if (s.ours && !s.ours.stable) notes.push(`${m.name}: our speech tokens changed between rounds.`);
    if (s.ours && !s.ours.chunksStable) notes.push(`${m.name}: our stream gave a different number of chunks between rounds.`);
    if (s.theirs.t3Tokens >= m.maxTokens) notes.push(`${m.name}: mlx-audio's T3 ran to maxTokens (${m.maxTokens}) without stopping.`);
    // T3's ids: start-speech, one per position up to stopAt, then the stop token.
    if (m.stopAt !== null && s.theirs.t3Tokens < m.stopAt + 2) notes.push(`${m.name}: T3 stopped after ${s.theirs.t3Tokens - 2} tokens, before the position it is built to stop at (${m.stopAt}).`);
  }
  if (notes.length) parts.push('', '### Anomalies', '', ...notes.map((n) => `- ${n}`));
  parts.push('');
  return parts.join('\n');
}

function renderVoiceSection(report) {
  const p = PLAN.voices;
  const t = PLAN.turbo;
  return [
    VOICE_SECTION,
    '',
    `Made by \`${report.command}\` on ${report.date}; load average (1, 5, 15 min) before: ${report.loadBefore}. Machine and builds: as in the Speech (Chatterbox) section's list.`,
    '',
    `- Time to the first chunk of \`tts.stream(text, { ...options, voice })\`, seed ${SEED}, on two models. The tests' Chatterbox fixture (\`.cache/fixtures-tts/chatterbox\`): maxTokens ${p.maxTokens}, text "${p.text}", the other options as in that section. ` +
      `The full-size random-weight Chatterbox Turbo (\`.cache/bench-models/${t.folder}\`, \`scripts/fixtures_tts_turbo.py --full\`): maxTokens ${p.turbo.maxTokens}, text "${t.text}", Turbo's defaults (${Object.entries(t.options).map(([k, v]) => `${k} ${v}`).join(', ')}); its test fixture stops after about 9 speech tokens, before a first chunk.`,
    `- The cloned Chatterbox voices: \`createVoice({ samples, sampleRate })\` of the fixture recording ${CLIP} (.cache/fixtures-voice) cut at ${CUT_START_MS} ms and on in ${CUT_STEP_MS} ms steps until one cut leaves an even prompt mel and one an odd one (one frame more than two per prompt token, as mlx-audio's embed_ref leaves about half of all clips).`,
    `- The cloned Turbo voices: \`createVoice({ samples, sampleRate })\` of the Turbo test fixture's 16 s recording (${TURBO_CLIPS[0].file}, T3's whole 375-token prompt, as long as the built-in voice's) and of the 11.2 s ${CLIP} whole (fewer T3 prompt tokens), through the seeded S3 tokenizer of .cache/fixtures-voice. "cloned in s": the \`createVoice\` call.`,
    '- Per model, after one warm-up `synthesize()` of 5 tokens with the built-in voice (no prompt cache): per voice, its first stream (which makes the voice\'s S3Gen prompt cache); then rounds of one stream per voice, interleaved (each round starting one voice further on), each after an untimed \`prepare({ voice })\`, so that it starts from that voice\'s cache as its later streams do while the load of other work falls on every voice alike. "its prompt": the voice\'s T3 prompt tokens and S3Gen prompt (tokens and mel frames). ' +
      '"their T3 prompt s": SpeechResult\'s promptTokens / promptTps, T3\'s prompt pass with its first speech token, which every first chunk waits for.',
    '',
    voiceTable(report.voices),
    '',
  ].join('\n');
}

// Replaces the section (from its heading to the next "## " heading or the end) or appends it.
function writeSection(file, section, heading = SECTION) {
  const text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
  const start = text.indexOf(`\n${heading}\n`);
  let out;
  if (start === -1) {
    out = `${text.replace(/\s*$/, '')}\n\n${section}`;
  } else {
    const next = text.indexOf('\n## ', start + heading.length + 1);
    const tail = next === -1 ? '' : `\n${text.slice(next + 1)}`;
    out = `${text.slice(0, start)}\n${section}${tail}`;
  }
  fs.writeFileSync(file, out.endsWith('\n') ? out : `${out}\n`);
}

// ---------------------------------------------------------------- main

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const groups = args.quick ? ['fixtures'] : args.only ? [args.only] : ['fixtures', 'long', 'full', 'turbo', 'voices'];
  const started = Date.now();
  const loadBefore = loadavg();
  if (os.loadavg()[0] > os.cpus().length * 0.5) {
    log(`warning: load average is ${loadBefore} on ${os.cpus().length} CPUs; other work will slow both sides`);
  }
  if (args.build) require('../scripts/build').build({ quiet: true });
  const { ensureVenv } = require('../scripts/venv');
  const { python, env } = ensureVenv();
  const targets = [];
  const rounds = args.rounds ?? (args.quick ? 1 : PLAN.fixtures.rounds);
  if (groups.includes('fixtures')) {
    const dir = require('../scripts/fixtures-tts').ensureTtsFixtures();
    for (const name of PLAN.fixtures.models) targets.push({ name, dir: path.join(dir, name), plan: PLAN.fixtures, run: { rounds } });
  }
  if (groups.includes('long')) {
    const p = PLAN.long;
    const dir = ensureBenchModels(p.folder, ['--stop-at', String(p.stopAt)], `the fixtures stopping at speech position ${p.stopAt}`, python, env);
    for (const name of p.models) targets.push({ name: `${name}, stop ${p.stopAt}`, dir: path.join(dir, name), plan: p, run: { rounds } });
  }
  if (groups.includes('full')) {
    const p = PLAN.full;
    const dir = ensureBenchModels(p.folder, ['--full'], 'the full-size random-weight Chatterbox (~2.6 GB)', python, env);
    targets.push({ name: 'chatterbox-full', dir, plan: p, run: { rounds: args.fullRounds ?? p.rounds, budgetS: args.fullRounds ? null : FULL_BUDGET_S, streamOnce: true } });
  }
  const turboDir =
    groups.includes('turbo') || groups.includes('voices')
      ? ensureBenchModels(PLAN.turbo.folder, ['--full'], 'the full-size random-weight Chatterbox Turbo (~3 GB)', python, env, TURBO_SCRIPT)
      : null;
  if (groups.includes('turbo')) {
    const p = PLAN.turbo;
    const dir = turboDir;
    targets.push({ name: 'chatterbox-turbo-full', dir, plan: p, run: { rounds: args.fullRounds ?? p.rounds, budgetS: args.fullRounds ? null : FULL_BUDGET_S, streamOnce: true } });
  }

  const { mlxInfo } = require('..');
  const worker = new PythonWorker(python, env, 'mlx_audio_bench.py', 'mlx-audio');
  const report = {
    command: `npm run bench:tts${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`,
    date: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    machine: machineInfo(),
    source: sourceInfo(),
    ours: mlxInfo(),
    theirs: null,
    ldPreload: env.LD_PRELOAD || '',
    openblasTimeout: env.OPENBLAS_THREAD_TIMEOUT,
    openblasTimeoutOurs: process.env.OPENBLAS_THREAD_TIMEOUT,
    loadBefore,
    loadAfter: null,
    models: [],
  };
  try {
    if (groups.includes('voices')) {
      const p = PLAN.voices;
      const t = PLAN.turbo;
      report.voices = await benchVoices({
        chatterbox: { text: p.text, options: { ...OPTIONS, maxTokens: p.maxTokens, seed: SEED }, rounds: args.rounds ?? p.rounds },
        turbo: { dir: turboDir, text: t.text, options: { ...t.options, maxTokens: p.turbo.maxTokens, seed: SEED }, rounds: args.fullRounds ?? p.turbo.rounds },
        log,
      });
    }
    if (targets.length === 0) return finish(report, args, started);
    report.theirs = await worker.request({ cmd: 'info' });
    if (report.theirs.mlx !== report.ours.mlxVersion) log(`warning: MLX versions differ (ours ${report.ours.mlxVersion}, mlx-audio's ${report.theirs.mlx})`);
    if (report.theirs.blas !== report.ours.blas) log(`warning: BLAS differs (ours ${report.ours.blas}, mlx-audio's ${report.theirs.blas})`);
    for (const t of targets) {
      const entry = { name: t.name, dir: t.dir, text: t.plan.text, maxTokens: t.plan.maxTokens, stopAt: t.plan.stopAt, rounds: [] };
      report.models.push(entry);
      await benchModel(t.name, t.dir, t.plan, t.run, worker, entry);
      if (entry.rounds.length) entry.summary = summarize(entry);
    }
  } finally {
    worker.close();
  }
  finish(report, args, started);
}

// Prints the sections, keeps the raw figures, and writes RESULTS.md as main() says.
function finish(report, args, started) {
  report.loadAfter = loadavg();
  report.seconds = (Date.now() - started) / 1000;
  if (report.voices) {
    const md = renderVoiceSection(report);
    process.stdout.write(`${md}\n`);
    if (args.write || args.only === 'voices' || !args.only) {
      writeSection(RESULTS, md, VOICE_SECTION);
      log(`wrote the "${VOICE_SECTION.slice(3)}" section of ${path.relative(ROOT, RESULTS)}`);
    }
  }
  fs.mkdirSync(RAW_DIR, { recursive: true });
  const raw = path.join(RAW_DIR, `tts-${report.date.replace(/[:]/g, '-')}.json`);
  fs.writeFileSync(raw, JSON.stringify(report, null, 1));
  log(`raw results: ${path.relative(ROOT, raw)}`);
  if (report.models.length === 0) return;
  const md = renderSection(report);
  process.stdout.write(`${md}\n`);
  const complete = report.models.every((m) => m.summary?.ours);
  const isDefault = !args.quick && !args.only && args.rounds === null && args.fullRounds === null;
  if (args.write || (isDefault && complete)) {
    writeSection(RESULTS, md);
    log(`wrote the "${SECTION.slice(3)}" section of ${path.relative(ROOT, RESULTS)}`);
  } else {
    log(`not a full default run${complete ? '' : ' with both sides'}: RESULTS.md left as it is (--write writes the section anyway)`);
  }
}

if (require.main === module) {
  main().catch((e) => {
    process.stderr.write(`[bench:tts] ${e.stack || e}\n`);
    process.exit(1);
  });
}

module.exports = { renderSection, writeSection };
