'use strict';
// The suites with a command of their own (CI runs them after `npm test`, which sets
// everything up), so that `npm test` stays well inside CI's time on 2 cores:
// - `npm run test:distributed`: models split across processes over MLX's ring backend on
//   127.0.0.1, against one process and against MLX-LM's sharded generation under mlx.launch
//   (__test__/distributed.test.js);
// - `npm run test:families`: every model family beyond the shared decoder against MLX-LM
//   (__test__/families.test.js), Gemma 4's and GPT-OSS's own chat templates among them (fetched
//   once from PyPI by scripts/chat-templates.js), on the families' fixtures (written here, not by
//   `npm test`), and the lm crate's greedy check of those fixtures;
// - `npm run test:speech`: Chatterbox against mlx-audio (__test__/tts*.test.js: the models,
//   their options and errors, Multilingual, Turbo) and voice cloning (__test__/voice.test.js).
//   It also runs the speech crate's cargo tests (`cargo test -p tts`: S3Gen, HiFT, T3, the
//   voice front ends, Turbo's streaming), which read the same fixtures. The speech parts of
//   the CLI, the server and the package stay in `npm test`.
// - `npm run test:package`: the paths users install by (__test__/package.test.js): `npm pack`
//   installed into an empty project and built from source there (minutes of cargo on 2 cores),
//   the prebuilt platform package, require/import/tsc and the missing-prerequisite messages.
// `node scripts/test-suite.js NAME` runs the suite's files after the setup it needs.
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ROOT, log, cargoEnv, TEST_LIMITS } = require('./mlx');

const SPEECH = (f) => /^tts.*\.test\.js$/.test(f) || f === 'voice.test.js';

// name -> the test files (in __test__) it runs, its setup beyond the addon, the venv and the
// shared decoder's text fixtures, whether it needs the other families' fixtures too, the crates
// whose cargo tests it runs (`npm test` leaves those out) and a cargo run of its own.
const SUITES = {
  distributed: { files: (f) => f === 'distributed.test.js', setup: () => {}, familyFixtures: true },
  package: { files: (f) => f === 'package.test.js', setup: () => {} },
  families: {
    files: (f) => f === 'families.test.js',
    setup: () => require('./chat-templates').ensureChatTemplates(),
    familyFixtures: true,
    // The families' half of the lm crate's greedy check of every fixture against MLX-LM (`npm
    // test` runs the shared decoder's half). The same selection of packages as `npm test`'s
    // cargo run, so its test binary is reused rather than built again.
    cargo: {
      args: () => ['--workspace', ...SEPARATE_CRATES.flatMap((c) => ['--exclude', c]), '--test', 'integration', '--', 'fixture_greedy::'],
      env: { MLX_NODE_FIXTURE_GREEDY: 'families' },
    },
  },
  speech: {
    files: SPEECH,
    setup: () => {
      require('./deps').ensureSox();
      require('./fixtures-tts').ensureTtsFixtures();
      require('./fixtures-tts').ensureTurboFixture();
      require('./fixtures-voice').ensureVoiceFixtures();
    },
    crates: ['tts'],
  },
};

// The crates `npm test` leaves to these suites (`cargo test --workspace --exclude ...`).
const SEPARATE_CRATES = Object.values(SUITES).flatMap((s) => s.crates || []);

// The files `npm test` leaves to these suites.
function separate(file) {
  return Object.values(SUITES).some((s) => s.files(file));
}

function main() {
  const name = process.argv[2];
  const suite = SUITES[name];
  if (!suite) {
    console.error(`usage: node scripts/test-suite.js (${Object.keys(SUITES).join(' | ')})`);
    process.exit(2);
  }
  const t0 = Date.now();
  require('./build').build({ quiet: true });
  const { env } = require('./venv').ensureVenv();
  require('./fixtures').ensureFixtures({ families: !!suite.familyFixtures });
  suite.setup();
  const cargoRuns = (suite.crates || []).map((crate) => ({ args: ['-p', crate, '--tests'], env: {} }));
  if (suite.cargo) cargoRuns.push({ args: suite.cargo.args(), env: suite.cargo.env });
  for (const { args, env: extra } of cargoRuns) {
    const cargo = { ...cargoEnv(), MLX_NODE_VENV_PYTHON: env.MLX_NODE_VENV_PYTHON || '', ...extra };
    const r = spawnSync('cargo', ['test', '--release', ...args], { cwd: ROOT, stdio: 'inherit', env: cargo });
    if (r.status !== 0) {
      console.error(`[mlx-node] cargo test --release ${args.join(' ')} failed`);
      process.exit(1);
    }
  }
  const files = fs
    .readdirSync(path.join(ROOT, '__test__'))
    .filter((f) => f.endsWith('.test.js') && suite.files(f))
    .map((f) => path.join('__test__', f));
  const r = spawnSync(process.execPath, ['--test', '--test-concurrency=1', ...TEST_LIMITS, ...files], {
    cwd: ROOT,
    stdio: 'inherit',
  });
  if (r.status !== 0) {
    console.error(`[mlx-node] ${name} tests failed`);
    process.exit(1);
  }
  log(`${name} tests passed in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
}

if (require.main === module) main();

module.exports = { separate, SEPARATE_CRATES };
