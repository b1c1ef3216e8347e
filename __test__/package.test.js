'use strict';
// The path users take: pack the project, install the tarball into an empty project
// outside the repository (building from source), then use it from plain node via
// require and import, and type-check a TypeScript example against index.d.ts.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync, spawnSync } = require('node:child_process');
const { ensureFixtures } = require('../scripts/fixtures');
const { loadModel } = require('..');

const ROOT = path.resolve(__dirname, '..');

function sh(cmd, args, opts) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', ...opts });
  return { code: r.status, out: `${r.stdout}\n${r.stderr}` };
}

test('npm pack, install into an empty project, require/import/tsc work', { timeout: 900_000 }, async () => {
  const demo = path.join(ensureFixtures(), 'demo');
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'mlx-node-pkg-'));
  try {
    const tgzName = execFileSync('npm', ['pack', '--silent', '--pack-destination', work], { cwd: ROOT, encoding: 'utf8' }).trim();
    const tgz = path.join(work, tgzName.split('\n').pop());
    const listing = execFileSync('tar', ['tzf', tgz], { encoding: 'utf8' }).split('\n');
    // Only what a user needs: no caches, fixtures, build outputs or tests.
    // benchmark/sampling is a cargo workspace member, so its sources ship; the rest of benchmark/ does not.
    for (const bad of ['.cache', 'target/', '__test__', 'node_modules', '.node', 'benchmark/run.js', 'RESULTS.md', 'fixtures']) {
      assert.ok(!listing.some((f) => f.includes(bad)), `tarball contains ${bad}`);
    }
    assert.ok(listing.includes('package/index.d.ts') && listing.includes('package/crates/mlx-sys/shim/shim.cpp'));

    const proj = path.join(work, 'app');
    fs.mkdirSync(proj);
    execFileSync('npm', ['init', '-y'], { cwd: proj, stdio: 'ignore' });
    // Share the repository's cargo target directory so dependencies are not rebuilt, and
    // its MLX so the shared build outputs never point into this temporary project.
    const env = { ...process.env, CARGO_TARGET_DIR: path.join(ROOT, 'target'), MLX_DIR: require('../scripts/mlx').ensureMlx() };
    const inst = sh('npm', ['install', '--no-audit', '--no-fund', tgz], { cwd: proj, env });
    assert.equal(inst.code, 0, inst.out);

    const want = await (async () => {
      const m = await loadModel(demo);
      const r = await m.generate('Hello', { maxTokens: 8 });
      await m.dispose();
      return r.tokens;
    })();
    assert.equal(want.length, 8);
    const snippet = (mod) =>
      `const m = await ${mod}.loadModel(${JSON.stringify(demo)});` +
      `const r = await m.generate('Hello', { maxTokens: 8 }); console.log(JSON.stringify(r.tokens));`;
    fs.writeFileSync(path.join(proj, 'cjs.cjs'), `const api = require('mlx-node');\n(async () => { ${snippet('api')} })();\n`);
    fs.writeFileSync(path.join(proj, 'esm.mjs'), `import * as api from 'mlx-node';\n${snippet('api')}\n`);
    for (const f of ['cjs.cjs', 'esm.mjs']) {
      const r = sh(process.execPath, [f], { cwd: proj });
      assert.equal(r.code, 0, r.out);
      assert.deepEqual(JSON.parse(r.out.trim().split('\n')[0]), want, f);
    }

    const tsc = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
    const tsOpts = ['--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--lib', 'es2022,esnext.disposable,dom'];
    fs.writeFileSync(
      path.join(proj, 'ok.mts'),
      `import { loadModel, loadTTS, mlxInfo, type Audio, type GenerationResult, type MlxNodeError } from 'mlx-node';
const info: 'cpu' | 'metal' | 'cuda' = mlxInfo().backend;
const model = await loadModel('x', { dtype: 'bfloat16', onLoadProgress: (f: number) => void f });
const r: GenerationResult = await model.generate([{ role: 'user', content: 'hi' }], { maxTokens: 8, temperature: 0.7, topP: 0.9, stop: ['\\n'], logitBias: { 1: -5 } });
const s = model.stream('hi', { seed: 1, signal: AbortSignal.timeout(1000), onTextChunk: (t: string) => void t });
for await (const c of s) { const t: string = c.text; const id: number = c.token; void t; void id; }
const fr: 'stop' | 'length' | 'abort' = (await s.result).finishReason;
const q = model.info.quantization?.bits;
void info; void r; void fr; void q; void (null as unknown as MlxNodeError).code;
await model.dispose();
const tts = await loadTTS('y', { signal: AbortSignal.timeout(1000) });
const a: Audio = await tts.synthesize('Hello.', { temperature: 0.8, cfgWeight: 0.5, exaggeration: 0.5, seed: 1, voice: 'v.safetensors' });
const wav: Buffer = a.toWav({ format: 'float32' }); const sr: number = a.sampleRate; const st: number[] = a.speechTokens;
for await (const c of tts.stream('Hi.', { maxTokens: 100 })) { const x: Float32Array = c.audio; const i: number = c.index; void x; void i; }
async function* words() { yield 'Hello '; yield 'there.'; }
for await (const c of tts.stream(words())) void c.audio;
void wav; void sr; void st;
await tts.dispose();
`
    );
    const ok = sh(process.execPath, [tsc, ...tsOpts, 'ok.mts'], { cwd: proj });
    assert.equal(ok.code, 0, ok.out);
    fs.writeFileSync(
      path.join(proj, 'bad.mts'),
      `import { loadModel, loadTTS } from 'mlx-node';\nconst m = await loadModel('x');\nawait m.generate('hi', { temprature: 0.5 });\n` +
        `const t = await loadTTS('y');\nawait t.synthesize('hi', { exageration: 0.5 });\n`
    );
    const bad = sh(process.execPath, [tsc, ...tsOpts, 'bad.mts'], { cwd: proj });
    assert.notEqual(bad.code, 0, 'a misspelled option must fail to type-check');
    assert.match(bad.out, /temprature/);
    assert.match(bad.out, /exageration/);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
});
