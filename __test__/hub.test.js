'use strict';
// loadModel('org/name') and loadTTS('org/name') through huggingface_hub's cache layout,
// against a local hub-shaped server (hub-server.js): first download, cache hit, revisions,
// one GGUF file of a GGUF repo (`org/name:quant`),
// resume after a cut connection, abort, offline, 404/401, hash mismatches and other
// misbehaving hubs, and a cache written by Python's huggingface_hub (both ways).
// The addon reads HF_* variables from process.env at each call, so tests set them in-process;
// the HF_TOKEN test runs a child process as a user would.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { loadModel, loadTTS } = require('..');
const { loadNative } = require('../lib/native-loader');
const { fromNative } = require('../lib/errors');
const { isHubId } = require('../lib/hub');
const { ensureVenv } = require('../scripts/venv');
const { ensureTtsFixtures, TTS_FIXTURES_DIR } = require('../scripts/fixtures-tts');
const { fixturePath, expectReject } = require('./helpers');
const { ggufIndex } = require('../scripts/fixtures-gguf');
const { HubServer } = require('./hub-server');

const ROOT = path.join(__dirname, '..');
const REPO = 'test-org/qwen3';
const TTS_REPO = 'test-org/chatterbox';
const LM_FILES = ['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json'];
const WEIGHTS = 'model.safetensors';
const PROMPT = 'Hello, my name is';
const GREEDY = { maxTokens: 8, temperature: 0 };
const HF_VARS = ['HF_ENDPOINT', 'HF_HOME', 'HF_HUB_CACHE', 'HUGGINGFACE_HUB_CACHE', 'HF_TOKEN', 'HF_TOKEN_PATH', 'HF_HUB_OFFLINE', 'XDG_CACHE_HOME'];

const server = new HubServer();
const savedEnv = Object.fromEntries(HF_VARS.map((k) => [k, process.env[k]]));
const tmpDirs = [];
let commit;
let reference;
let primed; // an HF_HOME holding REPO, from the first download

function tmpDir(prefix = 'mlx-node-hub-') {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  tmpDirs.push(d);
  return d;
}

// Points the addon at the test server and at `home` as HF_HOME (no other HF_* variable).
function useHub(home, extra = {}) {
  for (const k of HF_VARS) delete process.env[k];
  Object.assign(process.env, { HF_ENDPOINT: server.url, HF_HOME: home }, extra);
}

function fresh(extra) {
  const home = tmpDir();
  useHub(home, extra);
  return home;
}

const repoDir = (home, repo = REPO) => path.join(home, 'hub', `models--${repo.replace('/', '--')}`);
const fixtureFile = (f) => fs.readFileSync(path.join(fixturePath('qwen3-f32'), f));

function listFiles(dir) {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { recursive: true }).sort();
}

// What a failed load may leave: verified blobs and partial files, never a snapshot or a ref.
function assertNoSnapshot(home, label) {
  const dir = repoDir(home);
  assert.deepEqual(listFiles(path.join(dir, 'snapshots')), [], `${label}: snapshot files were written`);
  assert.deepEqual(listFiles(path.join(dir, 'refs')), [], `${label}: refs were written`);
}

async function generate(m) {
  try {
    return (await m.generate(PROMPT, GREEDY)).tokens;
  } finally {
    await m.dispose();
  }
}

function getsOf(file) {
  return server.requests.filter((r) => r.method === 'GET' && r.url.endsWith(`/resolve/${commit}/${file}`));
}

// Runs `args` without blocking this process's event loop (the server lives in it).
function run(cmd, args, env) {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { env, cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    p.on('error', reject);
    p.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`${path.basename(cmd)} exited ${code}: ${err}`))));
  });
}

function python(code, env) {
  const { python: py, env: base } = ensureVenv();
  return run(py, ['-c', code], { ...base, HF_HUB_DISABLE_TELEMETRY: '1', ...env });
}

test.before(async () => {
  await server.start();
  commit = server.addRepo(REPO, fixturePath('qwen3-f32'), {
    extra: { 'README.md': Buffer.from('# test\n'), 'modeling_qwen3.py': Buffer.from('raise SystemExit\n'), 'pytorch_model.bin': Buffer.alloc(8) },
    tags: ['v1'],
  });
  server.addRepo('test-org/no-config', tmpDir(), { extra: { 'README.md': Buffer.from('nothing to load\n') } });
  reference = await generate(await loadModel(fixturePath('qwen3-f32')));
});

test.after(async () => {
  await server.close();
  for (const k of HF_VARS) {
    if (savedEnv[k] === undefined) delete process.env[k];
    else process.env[k] = savedEnv[k];
  }
  for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true });
});

test('isHubId: org/name[@revision] when no such file or folder exists here', () => {
  for (const yes of ['mlx-community/Qwen3-0.6B-4bit', 'a/b', 'a_b/c.d@main', `a/b@${'0'.repeat(40)}`, 'a/b@refs/pr/1', 'A1/B2@v1.0', 'a/b-GGUF:Q4_K_M', 'a/b:Q8_0@v1', 'a/b:m-Q8_0.gguf']) {
    assert.equal(isHubId(yes), true, yes);
  }
  for (const no of ['model', './a/b', '/a/b', '~/a/b', '.a/b', 'a/.b', 'a/b/c', 'a/b@', 'a/b@x@y', 'a b/c', 'a/b@../x', '-a/b', 'models/x.gguf', 'a/B.GGUF', '', 'a/b:', 'a/b:x y', 'a/b:Q4:Q8', 'a:b/c']) {
    assert.equal(isHubId(no), false, no);
  }
  const cwd = process.cwd();
  const d = tmpDir();
  fs.mkdirSync(path.join(d, 'org', 'name'), { recursive: true });
  try {
    process.chdir(d);
    assert.equal(isHubId('org/name'), false, 'an existing folder is a path');
    assert.equal(isHubId('org/other'), true);
  } finally {
    process.chdir(cwd);
  }
});

test('first download: progress per file, huggingface_hub layout, same tokens as the folder', async () => {
  primed = fresh();
  server.reset();
  const seen = [];
  const m = await loadModel(REPO, { onLoadProgress: (f, d) => seen.push({ f, ...d }) });
  assert.deepEqual(await generate(m), reference, 'tokens differ from the fixture folder');

  // One API request, then HEAD and GET per wanted file; README, *.py and *.bin are not fetched.
  assert.equal(server.requests.filter((r) => r.url.startsWith('/api/')).length, 1);
  assert.match(server.requests[0].url, /^\/api\/models\/test-org\/qwen3\/revision\/main\?blobs=true$/);
  const fetched = server.fileRequests().map((r) => `${r.method} ${r.url.split('/').pop()}`);
  assert.deepEqual(fetched.sort(), LM_FILES.flatMap((f) => [`GET ${f}`, `HEAD ${f}`]).sort());

  // Progress: download reports (fraction 0) per file ending at its size, then the load's.
  const downloads = seen.filter((s) => s.stage === 'download');
  const loads = seen.filter((s) => s.stage === 'load');
  assert.equal(downloads.length + loads.length, seen.length, `unknown stages: ${JSON.stringify(seen)}`);
  assert.deepEqual([...new Set(downloads.map((d) => d.file))].sort(), LM_FILES);
  for (const f of LM_FILES) {
    const mine = downloads.filter((d) => d.file === f);
    const size = fixtureFile(f).length;
    for (let i = 0; i < mine.length; i++) {
      assert.equal(mine[i].f, 0);
      assert.equal(mine[i].bytesTotal, size, `${f}: bytesTotal`);
      assert.ok(mine[i].bytesDone <= size && (i === 0 || mine[i].bytesDone >= mine[i - 1].bytesDone), `${f}: bytesDone out of order`);
    }
    assert.equal(mine.at(-1).bytesDone, size, `${f}: the last report is not the whole file`);
  }
  assert.ok(seen.findLastIndex((s) => s.stage === 'download') < seen.findIndex((s) => s.stage === 'load'), 'a download report came after the load began');
  for (let i = 1; i < loads.length; i++) assert.ok(loads[i].f > loads[i - 1].f, 'load fractions not increasing');
  assert.equal(loads.at(-1).f, 1);

  // The cache: refs/main, relative symlinks into blobs named by etag (sha256 for LFS files,
  // the git blob sha1 otherwise), the bytes of the fixture, nothing partial.
  const dir = repoDir(primed);
  assert.equal(fs.readFileSync(path.join(dir, 'refs', 'main'), 'utf8'), commit);
  const snap = path.join(dir, 'snapshots', commit);
  assert.deepEqual(fs.readdirSync(snap).sort(), LM_FILES);
  const repo = server.repos.get(REPO);
  for (const f of LM_FILES) {
    assert.equal(fs.readlinkSync(path.join(snap, f)), `../../blobs/${repo.files.get(f).etag}`, `${f}: link`);
    assert.ok(fixtureFile(f).equals(fs.readFileSync(path.join(snap, f))), `${f}: bytes differ`);
  }
  assert.equal(repo.files.get(WEIGHTS).etag, repo.files.get(WEIGHTS).sha256);
  assert.deepEqual(
    fs.readdirSync(path.join(dir, 'blobs')).filter((b) => b.endsWith('.incomplete')),
    [],
    'a partial file was left'
  );
  assert.ok(fs.existsSync(path.join(primed, 'hub', '.locks', `models--test-org--qwen3`)), 'no .locks folder as huggingface_hub keeps');
});

test('cache hit: a second load makes no file request', async () => {
  useHub(primed);
  server.reset();
  assert.deepEqual(await generate(await loadModel(REPO)), reference);
  assert.deepEqual(server.fileRequests(), []);
  assert.equal(server.requests.length, 1, 'only the revision lookup');
});

test('org/name@commit, @tag and a missing revision', async () => {
  useHub(primed);
  server.reset();
  assert.deepEqual(await generate(await loadModel(`${REPO}@${commit}`)), reference);
  assert.deepEqual(await generate(await loadModel(`${REPO}@v1`)), reference);
  assert.deepEqual(server.fileRequests(), [], 'the same commit is cached');
  const refs = path.join(repoDir(primed), 'refs');
  assert.deepEqual(fs.readdirSync(refs).sort(), ['main', 'v1'], 'a commit sha gets no ref, a tag does');
  assert.equal(fs.readFileSync(path.join(refs, 'v1'), 'utf8'), commit);
  await expectReject(() => loadModel(`${REPO}@nope`), 'MODEL_NOT_FOUND', /test-org\/qwen3@nope.*RevisionNotFound/, 'missing revision');
});

test('a cut connection is resumed with a Range request, byte for byte', async () => {
  const home = fresh();
  server.reset();
  const cutAt = 1 << 20;
  server.knobs.cut = { file: WEIGHTS, bytes: cutAt, times: 1 };
  assert.deepEqual(await generate(await loadModel(REPO)), reference);
  const gets = getsOf(WEIGHTS);
  assert.equal(gets.length, 2, 'one GET cut, one resumed');
  assert.equal(gets[0].range, undefined);
  assert.equal(gets[1].range, `bytes=${cutAt}-`);
  assert.ok(fixtureFile(WEIGHTS).equals(fs.readFileSync(path.join(repoDir(home), 'snapshots', commit, WEIGHTS))));
});

test('LFS files through a CDN redirect: the token stays on the hub host, a resume goes through it', async () => {
  const home = fresh({ HF_TOKEN: 'hf_secret' });
  server.reset();
  Object.assign(server.knobs, { token: 'hf_secret', cdn: true, cut: { file: WEIGHTS, bytes: 1 << 20, times: 1 } });
  assert.deepEqual(await generate(await loadModel(REPO)), reference);
  const cdn = server.requests.filter((r) => r.url.startsWith('/cdn/'));
  assert.deepEqual(
    cdn.map((r) => [r.method, r.range, r.authorization]),
    [
      ['GET', undefined, undefined],
      ['GET', `bytes=${1 << 20}-`, undefined],
    ],
    'HEAD reads the 302 itself; the CDN never sees the token'
  );
  assert.ok(server.fileRequests().every((r) => r.authorization === 'Bearer hf_secret'));
  assert.ok(fixtureFile(WEIGHTS).equals(fs.readFileSync(path.join(repoDir(home), 'snapshots', commit, WEIGHTS))));
});

test('a connection that keeps breaking: DOWNLOAD_FAILED, the partial file kept, the next load resumes it', async () => {
  const home = fresh();
  server.reset();
  const step = 256 << 10;
  server.knobs.cut = { file: WEIGHTS, bytes: step, times: 1000 };
  await expectReject(() => loadModel(REPO), 'DOWNLOAD_FAILED', /test-org\/qwen3@main, file model\.safetensors.*gave up.*resumes/, 'keeps breaking');
  assertNoSnapshot(home, 'after the failure');
  const sha = server.repos.get(REPO).files.get(WEIGHTS).sha256;
  const partial = path.join(repoDir(home), 'blobs', `${sha}.incomplete`);
  const kept = fs.statSync(partial).size;
  assert.equal(kept, 4 * step, 'the first try and three resumes');
  assert.equal(getsOf(WEIGHTS).at(-1).range, `bytes=${3 * step}-`);

  server.reset();
  assert.deepEqual(await generate(await loadModel(REPO)), reference);
  assert.deepEqual(getsOf(WEIGHTS).map((r) => r.range), [`bytes=${kept}-`]);
  assert.equal(fs.existsSync(partial), false);
  assert.ok(fixtureFile(WEIGHTS).equals(fs.readFileSync(path.join(repoDir(home), 'blobs', sha))));
});

test('abort during a download rejects with the reason at once; a throwing onLoadProgress gives ABORTED; both resume', async () => {
  const home = fresh();
  server.reset();
  server.knobs.slow = { file: WEIGHTS, chunk: 64 << 10, ms: 20 };
  const sha = server.repos.get(REPO).files.get(WEIGHTS).sha256;
  const partial = path.join(repoDir(home), 'blobs', `${sha}.incomplete`);
  const ac = new AbortController();
  const reason = new Error('stop it');
  const started = Date.now();
  const onLoadProgress = (f, d) => {
    if (d.stage === 'download' && d.file === WEIGHTS && d.bytesDone > 0) ac.abort(reason);
  };
  await assert.rejects(loadModel(REPO, { signal: ac.signal, onLoadProgress }), (e) => e === reason);
  assert.ok(Date.now() - started < 5000, `took ${Date.now() - started} ms (the whole file takes ~12 s)`);
  assertNoSnapshot(home, 'after the abort');
  const afterAbort = fs.statSync(partial).size;
  assert.ok(afterAbort > 0 && afterAbort < fixtureFile(WEIGHTS).length, `partial size ${afterAbort}`);

  const boom = new Error('boom');
  const thrower = (f, d) => {
    if (d.stage === 'download' && d.file === WEIGHTS && d.bytesDone > afterAbort) throw boom;
  };
  const e = await expectReject(() => loadModel(REPO, { onLoadProgress: thrower }), 'ABORTED', /onLoadProgress threw: boom/, 'throwing callback');
  assert.equal(e.cause, boom);
  assertNoSnapshot(home, 'after the throw');
  const afterThrow = fs.statSync(partial).size;
  assert.ok(afterThrow > afterAbort, 'the second load did not resume');

  server.reset();
  assert.deepEqual(await generate(await loadModel(REPO)), reference);
  assert.deepEqual(getsOf(WEIGHTS).map((r) => r.range), [`bytes=${afterThrow}-`]);

  const aborted = AbortSignal.abort(reason);
  server.reset();
  await assert.rejects(loadModel('test-org/other', { signal: aborted }), (x) => x === reason);
  assert.deepEqual(server.requests, [], 'an aborted signal sends nothing');
});

test('HF_HUB_OFFLINE=1 and an unreachable hub: the cache answers; uncached is MODEL_NOT_FOUND or DOWNLOAD_FAILED', async () => {
  const dead = new HubServer();
  const deadUrl = await dead.start();
  await dead.close();
  for (const offline of ['1', 'TRUE']) {
    useHub(primed, { HF_ENDPOINT: deadUrl, HF_HUB_OFFLINE: offline });
    assert.deepEqual(await generate(await loadModel(REPO)), reference);
    assert.deepEqual(await generate(await loadModel(`${REPO}@v1`)), reference);
    await expectReject(() => loadModel('test-org/other'), 'MODEL_NOT_FOUND', /test-org\/other@main is not in the Hugging Face cache.*HF_HUB_OFFLINE/, 'offline, uncached');
    await expectReject(() => loadModel(`${REPO}@v2`), 'MODEL_NOT_FOUND', /@v2/, 'offline, unknown tag');
  }
  // Online but the hub is down: the cached snapshot stands in, as in huggingface_hub.
  useHub(primed, { HF_ENDPOINT: deadUrl });
  assert.deepEqual(await generate(await loadModel(REPO)), reference);
  await expectReject(() => loadModel('test-org/other'), 'DOWNLOAD_FAILED', /test-org\/other@main: could not reach/, 'hub down, uncached');
});

test('404s: repo, file, and a repo without config.json are MODEL_NOT_FOUND; the cache stays as it was', async () => {
  const home = fresh();
  server.reset();
  await expectReject(() => loadModel('test-org/nope'), 'MODEL_NOT_FOUND', /test-org\/nope@main: not found on http:\/\/127\.0\.0\.1:\d+ \(HTTP 404, RepoNotFound\).*nor is there a file or folder "test-org\/nope" here/, 'repo');
  await expectReject(() => loadTTS('test-org/nope'), 'MODEL_NOT_FOUND', /test-org\/nope@main/, 'loadTTS repo');
  server.knobs.missing.add('tokenizer.json');
  await expectReject(() => loadModel(REPO), 'MODEL_NOT_FOUND', /test-org\/qwen3@main, file tokenizer\.json: not found.*EntryNotFound/, 'file');
  assertNoSnapshot(home, 'after a missing file');
  await expectReject(() => loadModel('test-org/no-config'), 'MODEL_NOT_FOUND', /test-org\/no-config@main \(commit [0-9a-f]{40}\) has no config\.json and no GGUF file/, 'no config.json');
});

// A GGUF repo as bartowski's and others' are laid out: one file per quantization, a vision
// projector, a README. `org/name:quant` downloads the one file whose name holds the tag.
const GGUF_REPO = 'test-org/qwen3-GGUF';
test('org/name:quant downloads the one GGUF file named and loads it as the file does; no tag is Q4_K_M', async () => {
  const g = ggufIndex().fixtures;
  const bytes = (name) => fs.readFileSync(g[name].gguf);
  const ggufCommit = server.addRepo(GGUF_REPO, tmpDir(), {
    extra: {
      'Qwen3-Q4_0.gguf': bytes('qwen3-q4_0'),
      'Qwen3-Q4_K_M.gguf': bytes('qwen3-q4_k_m'),
      'Qwen3-Q3_K_M.gguf': bytes('qwen3-q3_k_m'),
      'mmproj-Qwen3-F16.gguf': Buffer.alloc(64),
      'README.md': Buffer.from('# quants\n'),
    },
  });
  const local = async (name) => generate(await loadModel(g[name].gguf));
  const home = fresh();
  server.reset();
  assert.deepEqual(await generate(await loadModel(`${GGUF_REPO}:q4_0`)), await local('qwen3-q4_0'));
  const gets = server.fileRequests().filter((r) => r.method === 'GET').map((r) => r.url.split('/').pop());
  assert.deepEqual(gets, ['Qwen3-Q4_0.gguf'], 'only the named file is downloaded');
  const snap = path.join(repoDir(home, GGUF_REPO), 'snapshots', ggufCommit);
  assert.deepEqual(fs.readdirSync(snap), ['Qwen3-Q4_0.gguf']);
  assert.equal(fs.readFileSync(path.join(repoDir(home, GGUF_REPO), 'refs', 'main'), 'utf8'), ggufCommit);

  // No tag: llama.cpp's default, Q4_K_M; a second load of it is a cache hit.
  assert.deepEqual(await generate(await loadModel(GGUF_REPO)), await local('qwen3-q4_k_m'));
  server.reset();
  assert.deepEqual(await generate(await loadModel(`${GGUF_REPO}:Q4_K_M@main`)), await local('qwen3-q4_k_m'));
  assert.deepEqual(server.fileRequests(), [], 'cached');
  // Offline, a cached file loads; one never downloaded is MODEL_NOT_FOUND naming what is cached.
  useHub(home, { HF_HUB_OFFLINE: '1' });
  assert.deepEqual(await generate(await loadModel(`${GGUF_REPO}:Q4_0`)), await local('qwen3-q4_0'));
  await expectReject(() => loadModel(`${GGUF_REPO}:Q3_K_M`), 'MODEL_NOT_FOUND', /no GGUF file .* "Q3_K_M".*Qwen3-Q4_0\.gguf, Qwen3-Q4_K_M\.gguf/, 'offline, not cached');
  useHub(home);
  assert.deepEqual(await generate(await loadModel(`${GGUF_REPO}:Q3_K_M`)), await local('qwen3-q3_k_m'));
  // A GGUF repo with a config.json beside its one file (as some publish them) is still a GGUF repo.
  server.addRepo('test-org/with-config-GGUF', tmpDir(), { extra: { 'config.json': Buffer.from('{"model_type": "qwen3"}'), 'm-Q4_0.gguf': bytes('qwen3-q4_0') } });
  assert.deepEqual(await generate(await loadModel('test-org/with-config-GGUF')), await local('qwen3-q4_0'));
});

// A file split in parts (llama-gguf-split's names), in a folder of its own as the larger quants
// are published: every part is downloaded beside the others and the first is loaded.
test('org/name:quant of a split GGUF file downloads every part and loads them as the whole file', async () => {
  const g = ggufIndex().fixtures;
  const split = g['qwen3-q4_0-split'];
  const extra = { 'Qwen3-Q4_K_M.gguf': fs.readFileSync(g['qwen3-q4_k_m'].gguf) };
  // Listed last part first: the order the repo lists them in does not matter.
  for (const p of [...split.parts].reverse()) extra[`Q4_0/Qwen3-${path.basename(p).replace('qwen3-q4_0-split', 'Q4_0')}`] = fs.readFileSync(p);
  const commit = server.addRepo('test-org/split-GGUF', tmpDir(), { extra });
  const whole = await generate(await loadModel(g['qwen3-q4_0'].gguf));
  const home = fresh();
  server.reset();
  assert.deepEqual(await generate(await loadModel('test-org/split-GGUF:Q4_0')), whole);
  const gets = server.fileRequests().filter((r) => r.method === 'GET').map((r) => decodeURIComponent(r.url).split('/').slice(-2).join('/'));
  const names = ['00001-of-00003', '00002-of-00003', '00003-of-00003'].map((n) => `Q4_0/Qwen3-Q4_0-${n}.gguf`);
  assert.deepEqual(gets.sort(), names, 'the three parts and nothing else');
  const snap = path.join(repoDir(home, 'test-org/split-GGUF'), 'snapshots', commit);
  assert.deepEqual(listFiles(snap), ['Q4_0', ...names]);
  // Offline from the cache; with a part gone from it, MODEL_NOT_FOUND says which are there.
  useHub(home, { HF_HUB_OFFLINE: '1' });
  assert.deepEqual(await generate(await loadModel('test-org/split-GGUF:Q4_0')), whole);
  fs.rmSync(path.join(snap, names[1]));
  await expectReject(() => loadModel('test-org/split-GGUF:Q4_0'), 'MODEL_NOT_FOUND', /Qwen3-Q4_0\.gguf is split in 3 parts, but in the cache there are 2 of them \(Qwen3-Q4_0-00001-of-00003\.gguf, Qwen3-Q4_0-00003-of-00003\.gguf\)/, 'a part gone');
  // A repo listing a part short: nothing is downloaded.
  delete extra[`Q4_0/Qwen3-Q4_0-00002-of-00003.gguf`];
  server.addRepo('test-org/short-GGUF', tmpDir(), { extra });
  useHub(home);
  server.reset();
  await expectReject(() => loadModel('test-org/short-GGUF:Q4_0'), 'MODEL_NOT_FOUND', /short-GGUF:Q4_0@main: Q4_0\/Qwen3-Q4_0\.gguf is split in 3 parts, but in the repo there are 2 of them/, 'a part short');
  assert.deepEqual(server.fileRequests(), [], 'nothing downloaded');
});

test('GGUF repo errors: a tag no file has, a tag several have, loadTTS with a tag', async () => {
  const home = fresh();
  server.addRepo('test-org/quants-GGUF', tmpDir(), {
    extra: { 'm-Q8_0.gguf': Buffer.alloc(8), 'm-Q4_K_S.gguf': Buffer.alloc(8), 'm-Q4_K_M.gguf': Buffer.alloc(8), 'm-F16-00001-of-00002.gguf': Buffer.alloc(8), 'm-F16-00002-of-00002.gguf': Buffer.alloc(8) },
  });
  server.reset();
  const files = 'm-F16-00001-of-00002\\.gguf, m-F16-00002-of-00002\\.gguf, m-Q4_K_M\\.gguf, m-Q4_K_S\\.gguf, m-Q8_0\\.gguf';
  await expectReject(() => loadModel('test-org/quants-GGUF:Q2_K'), 'MODEL_NOT_FOUND', new RegExp(`test-org/quants-GGUF:Q2_K@main: no GGUF file in the repo has "Q2_K" in its name \\(GGUF files: ${files}\\)`), 'no match');
  await expectReject(() => loadModel('test-org/quants-GGUF:Q4_K'), 'INVALID_ARGUMENT', /several GGUF files have "Q4_K" in their names/, 'several');
  await expectReject(() => loadTTS('test-org/quants-GGUF:Q8_0'), 'INVALID_ARGUMENT', /a :quant tag names a GGUF file, which only text models load/, 'loadTTS');
  assert.deepEqual(server.fileRequests(), [], 'nothing downloaded');
  assert.deepEqual(listFiles(path.join(repoDir(home, 'test-org/quants-GGUF'), 'snapshots')), []);
});

test('401: AUTH_REQUIRED without a token or with a wrong one; the token file and HF_TOKEN work', async () => {
  const home = fresh();
  server.reset();
  server.knobs.token = 'hf_secret';
  await expectReject(() => loadModel(REPO), 'AUTH_REQUIRED', /test-org\/qwen3@main: .* needs authentication \(HTTP 401\): set HF_TOKEN/, 'no token');
  process.env.HF_TOKEN = 'hf_wrong';
  await expectReject(() => loadModel(REPO), 'AUTH_REQUIRED', /HTTP 401\): the token in use \(HF_TOKEN, else the token file\) may not read it/, 'wrong token');
  assert.ok(server.requests.every((r) => r.authorization === undefined || r.authorization === 'Bearer hf_wrong'));
  server.knobs.authErrorCode = 'RepoNotFound';
  await expectReject(() => loadModel(REPO), 'MODEL_NOT_FOUND', /HTTP 401\); if it is private, the token/, '401 RepoNotFound');
  server.knobs.authErrorCode = null;
  assertNoSnapshot(home, 'after the 401s');

  // The token file `hf auth login` writes, read by hf-hub.
  delete process.env.HF_TOKEN;
  fs.writeFileSync(path.join(home, 'token'), 'hf_secret\n');
  server.reset();
  server.knobs.token = 'hf_secret';
  assert.deepEqual(await generate(await loadModel(REPO)), reference);
  assert.ok(server.requests.length > 1 && server.requests.every((r) => r.authorization === 'Bearer hf_secret'));

  // HF_TOKEN in a process's own environment.
  const home2 = tmpDir();
  server.reset();
  server.knobs.token = 'hf_secret';
  const code = `require(${JSON.stringify(ROOT)}).loadModel(${JSON.stringify(REPO)}).then(async (m) => { console.log(m.info.numLayers); await m.dispose(); })`;
  const env = { ...process.env, HF_HOME: home2, HF_TOKEN: 'hf_secret' };
  assert.equal((await run(process.execPath, ['-e', code], env)).trim(), '2');
  assert.ok(server.requests.every((r) => r.authorization === 'Bearer hf_secret'));
});

test('hash and size mismatches are DOWNLOAD_FAILED and keep nothing of the file', async () => {
  const sha = server.repos.get(REPO).files.get(WEIGHTS).sha256;
  const cases = [
    ['corrupt weights', (k) => k.corrupt.add(WEIGHTS), /file model\.safetensors: the download's sha256 is [0-9a-f]{64}, the hub says [0-9a-f]{64}; nothing was kept/],
    ['corrupt config', (k) => k.corrupt.add('config.json'), /file config\.json: the download's git blob sha1 is [0-9a-f]{40}/],
    ['one byte too many', (k) => k.extraByte.add(WEIGHTS), /file model\.safetensors: the server sent more than the \d+ bytes/],
    ['two sizes', (k) => k.sizeLie.add(WEIGHTS), /file model\.safetensors: the hub reports two sizes/],
  ];
  for (const [label, set, message] of cases) {
    const home = fresh();
    server.reset();
    set(server.knobs);
    await expectReject(() => loadModel(REPO), 'DOWNLOAD_FAILED', message, label);
    assertNoSnapshot(home, label);
    const blobs = listFiles(path.join(repoDir(home), 'blobs'));
    assert.ok(!blobs.some((b) => b.startsWith(sha)), `${label}: ${blobs}`);
    if (label === 'corrupt config') assert.deepEqual(blobs.filter((b) => b.endsWith('.incomplete')), [], label);
  }
});

test('misbehaving hubs: DOWNLOAD_FAILED naming what was wrong, never a crash, the cache untouched', async () => {
  const cases = [
    ['no commit sha', (k) => (k.noSha = true), /test-org\/qwen3@main: http:\S+ sent no commit sha/],
    ['not JSON', (k) => (k.notJson = true), /test-org\/qwen3@main: http:\S+ sent a reply that is not the hub's JSON/],
    ['no ETag', (k) => (k.noEtag = true), /file config\.json: http:\S+ sent no ETag/],
    ['ETag with a path', (k) => (k.etag = '../../../evil'), /file config\.json: .*ETag that cannot name a file/],
    ['unsafe file name', (k) => k.extraSiblings.push('../../evil.json'), /listed a file name that is not a safe relative path: "\.\.\/\.\.\/evil\.json"/],
    ['HTTP 500', (k) => (k.status = 500), /test-org\/qwen3@main: http:\S+ answered HTTP 500/],
  ];
  for (const [label, set, message] of cases) {
    const home = fresh();
    server.reset();
    set(server.knobs);
    await expectReject(() => loadModel(REPO), 'DOWNLOAD_FAILED', message, label);
    assertNoSnapshot(home, label);
    assert.ok(!fs.existsSync(path.join(home, 'evil.json')) && !fs.existsSync(path.join(home, 'hub', 'evil.json')), `${label}: wrote outside the repo`);
  }
});

test('bad input to the native resolver: INVALID_ARGUMENT, and no cache folder at all', async () => {
  const native = loadNative();
  const call = (id, kind) => native.resolveModelNative(id, kind, new native.HubAbort()).catch((e) => Promise.reject(fromNative(e)));
  await expectReject(() => call('no-slash', 'lm'), 'INVALID_ARGUMENT', /'no-slash' is not a Hugging Face model id/);
  await expectReject(() => call('a/b@x/../y', 'lm'), 'INVALID_ARGUMENT', /not a Hugging Face model id/);
  await expectReject(() => call(REPO, 'gguf'), 'INVALID_ARGUMENT', /model kind must be 'lm' or 'tts', got 'gguf'/);
  await expectReject(() => loadTTS(REPO, { onLoadProgress: 1 }), 'INVALID_ARGUMENT', /onLoadProgress must be a function/);
  const home = process.env.HOME;
  useHub(primed);
  delete process.env.HF_HOME;
  delete process.env.HOME;
  try {
    await expectReject(() => loadModel(REPO), 'INVALID_ARGUMENT', /no Hugging Face cache folder: set HF_HOME or HF_HUB_CACHE/);
  } finally {
    process.env.HOME = home;
  }
});

test("Python huggingface_hub's cache loads with no file request, and reads ours", async () => {
  const pyHome = tmpDir();
  const cache = path.join(pyHome, 'hub');
  server.reset();
  const patterns = ['*.json', 'model*.safetensors', 'tokenizer.model', '*.tiktoken', 'tiktoken.model', '*.txt', '*.jsonl', '*.jinja'];
  const out = await python(`from huggingface_hub import snapshot_download\nprint(snapshot_download(${JSON.stringify(REPO)}, allow_patterns=${JSON.stringify(patterns)}))`, {
    HF_ENDPOINT: server.url,
    HF_HUB_CACHE: cache,
    HF_HUB_OFFLINE: '0',
  });
  assert.equal(out.trim(), path.join(repoDir(pyHome), 'snapshots', commit));
  // HF_HUB_CACHE wins over HF_HOME (an empty folder here).
  useHub(tmpDir(), { HF_HUB_CACHE: cache });
  server.reset();
  assert.deepEqual(await generate(await loadModel(REPO)), reference);
  assert.deepEqual(server.fileRequests(), []);

  // The other way: Python offline finds the snapshot we downloaded, and its cache scan is clean.
  const ours = path.join(primed, 'hub');
  const scan = await python(
    `import json
from huggingface_hub import snapshot_download, scan_cache_dir
p = snapshot_download(${JSON.stringify(REPO)}, allow_patterns=${JSON.stringify(patterns)})
info = scan_cache_dir(${JSON.stringify(ours)})
repo = next(r for r in info.repos if r.repo_id == ${JSON.stringify(REPO)})
print(json.dumps({"path": p, "warnings": [str(w) for w in info.warnings], "files": sorted(f.file_name for r in repo.revisions for f in r.files), "refs": sorted(x for r in repo.revisions for x in r.refs)}))`,
    { HF_HUB_CACHE: ours, HF_HUB_OFFLINE: '1' }
  );
  const got = JSON.parse(scan);
  assert.equal(got.path, path.join(repoDir(primed), 'snapshots', commit));
  assert.deepEqual(got.warnings, []);
  assert.deepEqual(got.files, LM_FILES);
  assert.deepEqual(got.refs, ['main', 'v1']);
});

test('loadTTS(org/name) downloads the Chatterbox files and speaks as the folder does', async () => {
  ensureTtsFixtures({ refs: false });
  const dir = path.join(TTS_FIXTURES_DIR, 'chatterbox-bf16');
  server.addRepo(TTS_REPO, dir);
  const home = fresh();
  server.reset();
  const seen = [];
  const opts = { temperature: 0, maxTokens: 8, seed: 0 };
  const fromHub = await loadTTS(TTS_REPO, { onLoadProgress: (f, d) => seen.push({ f, ...d }) });
  let hubTokens;
  try {
    hubTokens = (await fromHub.synthesize('Hello there.', opts)).speechTokens;
  } finally {
    await fromHub.dispose();
  }
  const fromDir = await loadTTS(dir);
  let dirTokens;
  try {
    dirTokens = (await fromDir.synthesize('Hello there.', opts)).speechTokens;
  } finally {
    await fromDir.dispose();
  }
  assert.ok(hubTokens.length > 0);
  assert.deepEqual(hubTokens, dirTokens);
  const files = fs.readdirSync(dir).filter((f) => fs.statSync(path.join(dir, f)).isFile()).sort();
  const ttsCommit = server.repos.get(TTS_REPO).commit;
  assert.deepEqual(fs.readdirSync(path.join(repoDir(home, TTS_REPO), 'snapshots', ttsCommit)).sort(), files);
  assert.deepEqual([...new Set(seen.filter((s) => s.stage === 'download').map((s) => s.file))].sort(), files);
  assert.deepEqual(seen.at(-1), { f: 1, stage: 'load' });
});
