'use strict';
// A process that exits with models it never disposed, or in the middle of a generation
// and a synthesis, must exit cleanly: every engine thread stops and frees its model
// before MLX's static destructors run (node/src/worker.rs, the 'exit' hook in index.js).
// Before, the speech tests aborted at exit with glibc heap corruption about one run in
// ten, after dispose() had resolved but while the model was still being freed.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { fixturePath } = require('./helpers');
const { ensureTtsFixtures, TTS_FIXTURES_DIR } = require('../scripts/fixtures-tts');

const ROOT = path.resolve(__dirname, '..');
const RUNS = 3;

function runChild(body) {
  const demo = fixturePath('demo');
  const speech = path.join(TTS_FIXTURES_DIR, 'chatterbox');
  const src = `const { loadModel, loadTTS } = require(${JSON.stringify(ROOT)});
(async () => {
  const [model, tts] = await Promise.all([loadModel(${JSON.stringify(demo)}), loadTTS(${JSON.stringify(speech)})]);
  ${body}
})();`;
  const t0 = Date.now();
  const r = spawnSync(process.execPath, ['-e', src], { encoding: 'utf8', timeout: 120_000 });
  return { ...r, seconds: (Date.now() - t0) / 1000 };
}

function assertCleanExit(r, what) {
  assert.equal(r.signal, null, `${what}: killed by ${r.signal}\n${r.stderr}`);
  assert.equal(r.status, 0, `${what}: exit ${r.status}\n${r.stderr}`);
  assert.doesNotMatch(r.stderr, /corrupted|double free|Aborted|panicked/, what);
}

test.before(() => ensureTtsFixtures({ refs: false }));

test('a process that ends without dispose() exits cleanly', { timeout: 600_000 }, () => {
  for (let i = 0; i < RUNS; i++) {
    const r = runChild(`await model.generate('Hello', { maxTokens: 4 });
  await tts.synthesize('Hello there.', { maxTokens: 20, seed: 1 });
  console.log('done');`);
    assertCleanExit(r, `run ${i}`);
    assert.match(r.stdout, /done/);
  }
});

test('process.exit() during a generation and a synthesis stops both and exits cleanly', { timeout: 600_000 }, () => {
  for (let i = 0; i < RUNS; i++) {
    // Exit while both are running: once the generation has given its first token (100000 take
    // minutes), however long a loaded machine takes to get there, and the synthesis has started.
    const r = runChild(`let tokens = 0, chunks = 0, started;
  const first = new Promise((r) => { started = r; });
  (async () => { for await (const c of model.stream('Once upon a time', { maxTokens: 100000 })) { tokens++; started(); } })();
  (async () => { for await (const c of tts.stream('Hello there. How are you today? Fine, thanks.', { seed: 1 })) chunks++; })();
  await Promise.race([first, new Promise((r) => setTimeout(r, 30000))]);
  console.log(JSON.stringify({ tokens }));
  process.exit(0);`);
    assertCleanExit(r, `run ${i}`);
    const { tokens } = JSON.parse(r.stdout.trim().split('\n').pop());
    assert.ok(tokens > 0, `run ${i}: the generation had not started within 30 s`);
    // The hook stops the running jobs: exit takes seconds, not the whole 100000 tokens.
    assert.ok(r.seconds < 60, `run ${i}: exit took ${r.seconds} s`);
  }
});
