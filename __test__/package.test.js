'use strict';
// The paths users take: pack the project and install the tarball into an empty project
// outside the repository, either building from source or together with the prebuilt
// platform package (scripts/release.js) where Rust cannot run; then use it from plain node
// via require and import, type-check a TypeScript example, and check the one clear message
// for each missing prerequisite.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync, spawnSync } = require('node:child_process');
const { ensureFixtures } = require('../scripts/fixtures');
const { ensureMlx, ensureOpenBlas } = require('../scripts/mlx');
const { ADDON_FILE, platformTriple } = require('../lib/native');
const { pack, packagePlatform, checkSelfContained, packMain } = require('../scripts/release');
const { loadModel, mlxInfo } = require('..');

const ROOT = path.resolve(__dirname, '..');
const PREBUILT = `mlx-node-${platformTriple()}`;
const mb = (n) => `${(n / 1e6).toFixed(2)} MB`;

function sh(cmd, args, opts) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', ...opts });
  return { code: r.status, out: `${r.stdout}\n${r.stderr}` };
}

function which(name) {
  const dir = process.env.PATH.split(path.delimiter).find((d) => fs.existsSync(path.join(d, name)));
  return dir ? path.join(dir, name) : null;
}

let work; // temporary folder outside the repository
let demo;
let mainTgz; // npm pack of the repository, as `npm publish` would send it (less optionalDependencies)
let want; // 8 greedy demo tokens from the repository's own addon

test.before(async () => {
  demo = path.join(ensureFixtures(), 'demo');
  work = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'mlx-node-pkg-')));
  mainTgz = pack(ROOT, work);
  console.log(`main tarball: ${mb(mainTgz.size)}`);
  const m = await loadModel(demo);
  want = (await m.generate('Hello', { maxTokens: 8 })).tokens;
  await m.dispose();
  assert.equal(want.length, 8);
});

test.after(() => fs.rmSync(work, { recursive: true, force: true }));

function newProject(name) {
  const proj = path.join(work, name);
  fs.mkdirSync(proj);
  execFileSync('npm', ['init', '-y'], { cwd: proj, stdio: 'ignore' });
  return proj;
}

// --foreground-scripts: the install script's messages go into the log the tests read.
function install(proj, tarballs, env) {
  const t0 = Date.now();
  const r = sh('npm', ['install', '--no-audit', '--no-fund', '--foreground-scripts', ...tarballs], { cwd: proj, env });
  console.log(`npm install into ${path.basename(proj)}: ${((Date.now() - t0) / 1000).toFixed(1)} s (exit ${r.code})`);
  return r;
}

// An environment where nothing points at MLX (no LD_LIBRARY_PATH, MLX_DIR or MLX_NODE_*
// variables) and PATH holds only node, npm, sh and the given tools.
function bareEnv(name, tools, dropVars) {
  const bin = path.join(work, name);
  if (!fs.existsSync(bin)) {
    fs.mkdirSync(bin);
    for (const tool of ['npm', 'sh', ...tools]) fs.symlinkSync(which(tool), path.join(bin, tool));
    fs.symlinkSync(process.execPath, path.join(bin, 'node'));
  }
  const drop = new RegExp(`^(LD_LIBRARY_PATH|MLX_DIR|MLX_NODE_\\w+${dropVars})$`);
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !drop.test(k)));
  env.PATH = bin;
  return env;
}

// Rust cannot be used: no cargo on PATH, no cargo or rustup variables.
function noRustEnv() {
  const env = bareEnv('bin', [], '|CARGO\\w*|RUSTUP\\w*|RUSTC\\w*');
  assert.equal(spawnSync('cargo', ['--version'], { env }).error?.code, 'ENOENT', 'cargo must not be reachable');
  return env;
}

// Rust is there but no Python: cargo on PATH, python3 and python not.
function noPythonEnv() {
  const env = bareEnv('bin-nopython', ['cargo'], '');
  assert.equal(spawnSync('cargo', ['--version'], { env }).status, 0, 'cargo must run');
  for (const py of ['python3', 'python']) assert.equal(spawnSync(py, ['--version'], { env }).error?.code, 'ENOENT', `${py} must not be reachable`);
  return env;
}

// From the project, with require and with import: the demo's 8 tokens equal the repository's,
// mlxInfo() equals the repository's; returns the MLX library files the process mapped (Linux).
function checkUse(proj, env) {
  const body = (api) =>
    `const m = await ${api}.loadModel(${JSON.stringify(demo)});` +
    `const r = await m.generate('Hello', { maxTokens: 8 }); await m.dispose();` +
    `const maps = process.platform === 'linux' ? (await import('node:fs')).readFileSync('/proc/self/maps', 'utf8') : '';` +
    `const libs = [...new Set(maps.match(/\\/\\S*(libmlx\\.|\\.libs\\/)\\S*/g))];` +
    `const server = typeof (await import('mlx-node/server')).createServer;` +
    `console.log(JSON.stringify({ tokens: r.tokens, info: ${api}.mlxInfo(), libs, server }));`;
  fs.writeFileSync(path.join(proj, 'cjs.cjs'), `const api = require('mlx-node');\n(async () => { ${body('api')} })();\n`);
  fs.writeFileSync(path.join(proj, 'esm.mjs'), `import * as api from 'mlx-node';\n${body('api')}\n`);
  let libs;
  for (const f of ['cjs.cjs', 'esm.mjs']) {
    const r = sh(process.execPath, [f], { cwd: proj, env });
    assert.equal(r.code, 0, r.out);
    const got = JSON.parse(r.out.trim().split('\n')[0]);
    assert.deepEqual(got.tokens, want, f);
    assert.deepEqual(got.info, mlxInfo(), f);
    assert.equal(got.server, 'function', `${f}: mlx-node/server resolves`);
    libs = got.libs;
  }
  return libs;
}

// Runs argv in a private mount namespace with each of dirs hidden under an empty tmpfs, so
// a library this machine has is missing for that one process. Needs root and unshare.
function runHiding(dirs, argv, opts) {
  const mount = which('mount');
  const script = `${dirs.map((d) => `${mount} -t tmpfs none '${d}' && `).join('')}exec "$@"`;
  return sh(which('unshare'), ['-m', which('sh'), '-c', script, 'sh', ...argv], opts);
}
const canHide =
  process.platform === 'linux' && process.getuid?.() === 0 && !!which('unshare') && !!which('mount') &&
  spawnSync(which('unshare'), ['-m', 'true']).status === 0 && !!ensureOpenBlas();

test('the prebuilt platform package installs and runs without Rust, MLX_DIR or LD_LIBRARY_PATH', { timeout: 300_000 }, async (t) => {
  // scripts/release.js's packaging; build() inside it is a no-op when the addon is current.
  const plat = packagePlatform({ outDir: path.join(work, 'npm', platformTriple()) });
  const platTgz = pack(plat, work);
  console.log(`platform tarball ${path.basename(platTgz.file)}: ${mb(platTgz.size)}`);
  const listing = execFileSync('tar', ['tzf', platTgz.file], { encoding: 'utf8' }).split('\n');
  for (const f of [`package/${ADDON_FILE}`, 'package/package.json', 'package/LICENSE']) assert.ok(listing.includes(f), f);
  assert.ok(listing.some((f) => /^package\/mlx\/lib\/libmlx\.(so|dylib)$/.test(f)), listing.join('\n'));
  if (process.platform === 'linux') assert.ok(listing.some((f) => /^package\/mlx_cpu\.libs\/liblapack/.test(f)), listing.join('\n'));

  // The release check refuses a package whose addon would still load the build tree's libmlx...
  const broken = path.join(work, 'broken');
  fs.cpSync(plat, broken, { recursive: true });
  const libmlx = fs.readdirSync(path.join(broken, 'mlx', 'lib')).find((f) => f.startsWith('libmlx.'));
  fs.rmSync(path.join(broken, 'mlx', 'lib', libmlx));
  if (process.platform === 'linux') {
    const mlxLib = path.join(ensureMlx(), 'lib');
    assert.throws(() => checkSelfContained(broken, [mlxLib]), {
      message: `the packaged addon would load ${libmlx} from ${mlxLib}/${libmlx}, not from ${broken}`,
    });
    // ...and one where a library libmlx needs is missing.
    fs.cpSync(path.join(plat, 'mlx'), path.join(broken, 'mlx'), { recursive: true });
    fs.rmSync(path.join(broken, 'mlx_cpu.libs'), { recursive: true });
    const lapack = fs.readdirSync(path.join(plat, 'mlx_cpu.libs')).find((f) => f.startsWith('liblapack'));
    assert.throws(() => checkSelfContained(broken, [mlxLib]), {
      message: `the packaged addon would load ${lapack} from nowhere, not from ${broken}`,
    });
  }

  const env = noRustEnv();
  const proj = newProject('prebuilt');
  const inst = install(proj, [platTgz.file, mainTgz.file], env);
  assert.equal(inst.code, 0, inst.out);
  assert.doesNotMatch(inst.out, /building from source/);
  const installed = path.join(proj, 'node_modules', 'mlx-node');
  for (const f of ['target', '.cache', ADDON_FILE]) assert.ok(!fs.existsSync(path.join(installed, f)), `${f} in the installed package`);

  const libs = checkUse(proj, env);
  const pkgDir = path.join(proj, 'node_modules', PREBUILT);
  if (process.platform === 'linux') {
    // MLX comes from the package through the $ORIGIN rpath, not from the build tree the absolute one names.
    assert.ok(libs.some((l) => l.includes('libmlx.')), libs.join('\n'));
    for (const l of libs) assert.ok(l.startsWith(pkgDir + path.sep), `${l} loaded from outside ${pkgDir}`);
  }

  await t.test('a missing library is named with its remedy', { skip: !canHide && 'needs root, unshare and OpenBLAS to hide a library' }, () => {
    const addon = path.join(pkgDir, ADDON_FILE);
    const loadError = (mod) => `try { require(${JSON.stringify(mod)}) } catch (e) { console.log(JSON.stringify([e.code, e.message])) }`;
    const fromSource =
      'from source with `npm rebuild mlx-node` (`npm run build` in a clone of the repository; needs Rust and Python 3 with pip)';
    const openblasDir = path.dirname(fs.realpathSync(ensureOpenBlas()));
    const mlxLib = path.join(ensureMlx(), 'lib');
    const cases = [
      [[openblasDir], proj, 'mlx-node', `the native addon ${addon} needs libopenblas.so.0, which the system loader cannot find. Install OpenBLAS: \`sudo apt-get install libopenblas0-pthread\` (Debian, Ubuntu).`],
      [[path.join(pkgDir, 'mlx', 'lib'), mlxLib], proj, 'mlx-node', `the native addon ${addon} needs libmlx.so, which the system loader cannot find. Reinstall ${PREBUILT}.`],
      [[mlxLib], ROOT, ROOT, `the native addon ${path.join(ROOT, ADDON_FILE)} needs libmlx.so, which the system loader cannot find. Rebuild it ${fromSource}.`],
      [[pkgDir], proj, 'mlx-node', `no native addon for ${platformTriple()}: install the prebuilt package ${PREBUILT}, or build it ${fromSource}.`],
    ];
    for (const [hide, cwd, mod, message] of cases) {
      const r = runHiding(hide, [process.execPath, '-e', loadError(mod)], { cwd, env });
      assert.equal(r.code, 0, r.out);
      assert.deepEqual(JSON.parse(r.out.trim().split('\n')[0]), ['MODULE_NOT_FOUND', `mlx-node: ${message}`]);
    }
    // The install step says the same rather than building from source, which would need OpenBLAS too.
    const r = runHiding([openblasDir], [process.execPath, path.join(installed, 'scripts', 'install.js')], { cwd: proj, env });
    assert.equal(r.code, 1, r.out);
    assert.equal(r.out.trim(), `[mlx-node] install failed: mlx-node: ${cases[0][3]}`);
  });
});

test('the packed main package lists every target\'s platform package as optional; package.json does not', () => {
  const { version, napi } = require('../package.json');
  const main = packMain(path.join(work, 'release'));
  const manifest = JSON.parse(execFileSync('tar', ['xzfO', main.file, 'package/package.json'], { encoding: 'utf8' }));
  assert.equal(napi.targets.length, 2);
  assert.deepEqual(manifest.optionalDependencies, { 'mlx-node-darwin-arm64': version, 'mlx-node-linux-x64-gnu': version });
  assert.equal(require('../package.json').optionalDependencies, undefined);
});

test('without a prebuilt addon and without Rust, the install fails at once naming Rust', { timeout: 120_000 }, () => {
  const proj = newProject('norust');
  const inst = install(proj, [mainTgz.file], noRustEnv());
  assert.notEqual(inst.code, 0, inst.out);
  assert.match(inst.out, /\[mlx-node\] install failed: mlx-node builds from source and needs Rust: install it from https:\/\/rustup\.rs/);
  // The cheap checks come before the MLX wheel download.
  assert.doesNotMatch(inst.out, /fetching/);
});

test('without a prebuilt addon and without Python, the install fails before any download naming Python with pip', { timeout: 120_000 }, () => {
  const proj = newProject('nopython');
  const inst = install(proj, [mainTgz.file], noPythonEnv());
  assert.notEqual(inst.code, 0, inst.out);
  assert.match(inst.out, /\[mlx-node\] install failed: mlx-node needs Python 3 with pip to fetch the MLX wheel/);
  assert.doesNotMatch(inst.out, /fetching|Compiling/);
});

// Last: its install compiles the packed sources (the workspace crates only: the target
// directory and MLX_DIR are shared, scripts/mlx.js cargoEnv) into the shared target/release;
// the release packaging above runs first and packs the repository's own build.
test('npm pack, install into an empty project (building from source), require/import/tsc work', { timeout: 900_000 }, () => {
  const listing = execFileSync('tar', ['tzf', mainTgz.file], { encoding: 'utf8' }).split('\n');
  // Only what a user needs: no caches, fixtures, build outputs or tests.
  // benchmark/sampling is a cargo workspace member, so its sources ship; the rest of benchmark/ does not.
  for (const bad of ['.cache', 'target/', '__test__', 'node_modules', '.node', 'benchmark/run.js', 'RESULTS.md', 'fixtures', 'npm/']) {
    assert.ok(!listing.some((f) => f.includes(bad)), `tarball contains ${bad}`);
  }
  assert.ok(listing.includes('package/index.d.ts') && listing.includes('package/crates/mlx-sys/shim/shim.cpp'));

  const proj = newProject('app');
  // Share the repository's cargo target directory so dependencies are not rebuilt, and
  // its MLX so the shared build outputs never point into this temporary project.
  const env = { ...process.env, CARGO_TARGET_DIR: path.join(ROOT, 'target'), MLX_DIR: ensureMlx() };
  const inst = install(proj, [mainTgz.file], env);
  assert.equal(inst.code, 0, inst.out);
  assert.match(inst.out, /building from source/);
  checkUse(proj, process.env);

  const tsc = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  const tsOpts = ['--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--lib', 'es2022,esnext.disposable,dom'];
  fs.writeFileSync(
    path.join(proj, 'ok.mts'),
    `import { loadModel, loadTTS, mlxInfo, type Audio, type GenerationResult, type MlxNodeError, type SpeechResult } from 'mlx-node';
import { createServer, serve } from 'mlx-node/server';
const info: 'cpu' | 'metal' | 'cuda' = mlxInfo().backend;
const model = await loadModel('x', { dtype: 'bfloat16', onLoadProgress: (f: number) => void f });
const r: GenerationResult = await model.generate([{ role: 'user', content: 'hi' }], { maxTokens: 8, temperature: 0.7, topP: 0.9, stop: ['\\n'], logitBias: { 1: -5 } });
const s = model.stream('hi', { seed: 1, signal: AbortSignal.timeout(1000), onTextChunk: (t: string) => void t });
for await (const c of s) { const t: string = c.text; const id: number = c.token; void t; void id; }
const fr: 'stop' | 'length' | 'abort' = (await s.result).finishReason;
const q = model.info.quantization?.bits;
const precision: 'exact' | 'fast' = model.precision;
void info; void r; void fr; void q; void precision; void (null as unknown as MlxNodeError).code;
const pcache = model.createPromptCache({ maxKvSize: 512 });
await pcache.prefill('hi', { signal: AbortSignal.timeout(1000) });
const held: number = pcache.length + pcache.nbytes + pcache.trim(1) + pcache.tokens.length;
await pcache.save('c.safetensors', { note: 'x' });
const rc = await model.generate('hi', { promptCache: pcache, logprobs: true, topLogprobs: 2 });
const lp: number | undefined = rc.logprobs?.[0]?.top[0]?.logprob;
const chat = model.createChat({ system: 'Be brief.', maxTokens: 8, templateOptions: { enableThinking: false } });
const cr: GenerationResult = await chat.send('hi');
for await (const c of chat.stream({ role: 'user', content: 'more' })) { const l: number | undefined = c.logprob; void l; }
await chat.save('chat.safetensors');
const chat2 = await model.loadChat('chat.safetensors');
const cached: number = rc.cachedTokens + cr.cachedTokens + chat2.messages.length;
void held; void lp; void cached;
chat.dispose(); chat2.dispose(); pcache.dispose();
const server = createServer({ model, modelId: 'm', apiKey: 'k', maxBodyBytes: 1 << 20 });
server.listen(0); await server.shutdown(1000); const running: number = server.stats().running; void running;
const served = await serve({ modelPath: 'x', ttsPath: 't', voicesPath: 'v', port: 0 }); const url: string = served.url; await served.close(); void url;
await model.dispose();
const tts = await loadTTS('y', { signal: AbortSignal.timeout(1000) });
const a: Audio = await tts.synthesize('Hello.', { temperature: 0.8, cfgWeight: 0.5, exaggeration: 0.5, seed: 1, voice: 'v.safetensors' });
const wav: Buffer = a.toWav({ format: 'float32' }); const sr: number = a.sampleRate; const st: number[] = a.speechTokens;
for await (const c of tts.stream('Hi.', { maxTokens: 100 })) { const x: Float32Array = c.audio; const i: number = c.index; void x; void i; }
async function* words() { yield 'Hello '; yield 'there.'; }
for await (const c of tts.stream(words())) void c.audio;
const cost: number = a.realTimeFactor + a.processingTime + a.promptTokens + a.promptTps + a.generationTokens + a.generationTps + a.peakMemory;
const made: 'made' | 'kept' | 'none' = await tts.prepare({ voice: 'v.safetensors', signal: AbortSignal.timeout(1000) });
const sp = tts.stream('Hi.');
for await (const c of sp) void c;
const res: SpeechResult = await sp.result;
const pc: 'made' | 'kept' | 'none' = res.promptCache; const ab: boolean = res.aborted;
void wav; void sr; void st; void cost; void made; void pc; void ab;
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
});
