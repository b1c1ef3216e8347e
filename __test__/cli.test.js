'use strict';
// The command line (bin/mlx-node.js, docs/cli.md) run as a child process on the fixture
// models: what `generate`, `chat` and `speak` write is exactly what the library gives for
// the same input and options; figures go to stderr only; help, errors and exit codes.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');
const { loadTTS, mlxInfo } = require('..');
const { fixturePath, model, disposeModels, copyFixture } = require('./helpers');
const { ensureTtsFixtures, TTS_FIXTURES_DIR } = require('../scripts/fixtures-tts');
const { progressBar, loadDisplay, megabytes } = require('../lib/cli/progress');
const { HubServer } = require('./hub-server');

const ROOT = path.resolve(__dirname, '..');
const BIN = path.join(ROOT, 'bin', 'mlx-node.js');
const PROMPT = 'Write a haiku about the sea.';
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'mlx-node-cli-'));

let dir;
test.before(() => {
  dir = fixturePath('qwen3-f32');
});
test.after(async () => {
  await disposeModels();
  fs.rmSync(TMP, { recursive: true, force: true });
});

// Runs the command to its end; stdin is `input` (a closed pipe when absent).
function cli(args, { input = '', env } = {}) {
  const r = spawnSync(process.execPath, [BIN, ...args], { input, encoding: 'utf8', timeout: 120_000, env: { ...process.env, ...env } });
  assert.equal(r.signal, null, `mlx-node ${args.join(' ')}: killed by ${r.signal}\n${r.stderr}`);
  return r;
}

// As cli(), and it must exit 0.
function ok(args, options) {
  const r = cli(args, options);
  assert.equal(r.status, 0, `mlx-node ${args.join(' ')}: exit ${r.status}\n${r.stderr}`);
  return r;
}

// A usage error: exit 2, the message on stderr, nothing on stdout.
function usageError(args, pattern) {
  const r = cli(args);
  assert.equal(r.status, 2, `mlx-node ${args.join(' ')}: exit ${r.status}, want 2\n${r.stderr}`);
  assert.match(r.stderr, pattern, `mlx-node ${args.join(' ')}`);
  assert.match(r.stderr, /--help' for usage/);
  assert.equal(r.stdout, '');
}

// The figures of a generation on stderr, as numbers.
function figures(stderr) {
  const all = (re) => [...stderr.matchAll(re)].map((m) => m.slice(1).map(Number));
  return {
    prompt: all(/Prompt: (\d+) tokens(?: \((\d+) cached\))?, [\d.]+ tokens-per-sec/g),
    generation: all(/Generation: (\d+) tokens, [\d.]+ tokens-per-sec/g),
    peak: all(/Peak memory: ([\d.]+) GB/g),
  };
}

function assertFiguresOf(r, result, label) {
  const f = figures(r.stderr);
  assert.deepEqual(f.prompt, [[result.promptTokens, NaN]], `${label}: prompt figure in ${JSON.stringify(r.stderr)}`);
  assert.deepEqual(f.generation, [[result.generationTokens]], `${label}: generation figure`);
  assert.equal(f.peak.length, 1, `${label}: peak memory figure`);
  assert.doesNotMatch(r.stdout, /Prompt:|Generation:|Peak memory|Loaded/, `${label}: figures on stdout`);
}

test('help: the main usage and each command\'s, exit 0; --version; no command is a usage error', () => {
  for (const flag of ['--help', '-h', 'help']) {
    const r = ok([flag]);
    assert.match(r.stdout, /^mlx-node \S+: /);
    for (const c of ['generate DIR', 'chat DIR', 'speak DIR TEXT -o FILE', 'serve --model DIR', 'info [DIR]']) assert.ok(r.stdout.includes(c), `${flag}: ${c}`);
  }
  const flagsOf = {
    generate: ['--max-tokens', '--temp', '--top-p', '--top-k', '--min-p', '--repetition-penalty', '--seed', '--stop', '--chat', '--raw', '--system', '--no-think', '--enable-thinking', '--dtype', '--precision', '--quiet'],
    chat: ['--max-tokens', '--temp', '--seed', '--system', '--no-think', '/reset', '/save PATH', '/load PATH', '/quit'],
    speak: ['--output', '--format', '--seed', '--temp', '--cfg-weight', '--exaggeration', '--voice', '--language', '--max-tokens'],
    serve: ['--model', '--tts', '--voices', '--host', '--port', '--max-batch', '--precision', '--api-key', 'MLX_NODE_API_KEY'],
    info: ['--quiet'],
  };
  for (const [command, flags] of Object.entries(flagsOf)) {
    for (const h of ['--help', '-h']) {
      const r = ok([command, h]);
      assert.ok(r.stdout.startsWith(`Usage: mlx-node ${command} `), `${command} ${h}: ${r.stdout.slice(0, 80)}`);
      for (const f of [...flags, '--help']) assert.ok(r.stdout.includes(f), `${command} ${h} lists ${f}`);
      assert.equal(r.stderr, '');
    }
    assert.equal(ok(['help', command]).stdout, ok([command, '--help']).stdout);
  }
  assert.equal(ok(['--version']).stdout, `${require('../package.json').version}\n`);
  const none = cli([]);
  assert.equal(none.status, 2);
  assert.match(none.stderr, /Usage: mlx-node <command>/);
});

test('generate: the chat template by default, greedy; stdout is exactly the library\'s text, figures on stderr', async () => {
  const m = await model('qwen3-f32');
  const want = await m.generate([{ role: 'user', content: PROMPT }], { maxTokens: 12 });
  assert.ok(want.text.length > 0);
  for (const extra of [[], ['--chat']]) {
    const r = ok(['generate', dir, PROMPT, '--max-tokens', '12', ...extra]);
    assert.equal(r.stdout, want.text, `generate ${extra}`);
    assertFiguresOf(r, want, `generate ${extra}`);
  }
  // --quiet: nothing on stderr.
  const q = ok(['generate', dir, PROMPT, '--max-tokens', '12', '--quiet']);
  assert.equal(q.stdout, want.text);
  assert.equal(q.stderr, '');
});

test('generate --precision fast: the library\'s fast-precision text on a quantized model', async () => {
  const { loadModel } = require('..');
  const q4 = fixturePath('qwen3-q4');
  const m = await loadModel(q4, { precision: 'fast' });
  try {
    const want = await m.generate([{ role: 'user', content: PROMPT }], { maxTokens: 12 });
    const r = ok(['generate', q4, PROMPT, '--max-tokens', '12', '--precision', 'fast', '--quiet']);
    assert.equal(r.stdout, want.text);
  } finally {
    await m.dispose();
  }
});

// GenerateOptions as the command's flags.
const FLAG_OF = { maxTokens: '--max-tokens', temperature: '--temp', topP: '--top-p', topK: '--top-k', minP: '--min-p', repetitionPenalty: '--repetition-penalty', seed: '--seed' };
const flagsOf = (opts) => Object.entries(opts).flatMap(([k, v]) => [FLAG_OF[k], String(v)]);

test('generate --raw with every sampling flag (seeded) and --stop equals the library on the raw prompt', async () => {
  const m = await model('qwen3-f32');
  // The fixture's logits are peaked: each set is chosen so that leaving out any option it
  // lists changes the text, which the loop checks first; together they cover every flag.
  const sets = [
    [{ maxTokens: 16, temperature: 3, topP: 0.95, topK: 20, minP: 0.01, repetitionPenalty: 1.5, seed: 7 }, ['temperature', 'topK', 'minP', 'seed']],
    [{ maxTokens: 24, temperature: 20, topP: 0.8, topK: 50, minP: 0.001, repetitionPenalty: 3, seed: 7 }, ['topP', 'repetitionPenalty', 'seed']],
  ];
  for (const [opts, matters] of sets) {
    const want = await m.generate(PROMPT, opts);
    for (const k of matters) {
      const without = { ...opts };
      delete without[k];
      assert.notEqual((await m.generate(PROMPT, without)).text, want.text, `${k} makes no difference to ${JSON.stringify(opts)}`);
    }
    const r = ok(['generate', dir, PROMPT, '--raw', ...flagsOf(opts)]);
    assert.equal(r.stdout, want.text, JSON.stringify(opts));
    assertFiguresOf(r, want, 'raw');
  }
  // The raw prompt is not the templated one.
  const opts = sets[0][0];
  const raw = await m.generate(PROMPT, opts);
  const templated = await m.generate([{ role: 'user', content: PROMPT }], opts);
  assert.ok(templated.promptTokens > raw.promptTokens, `${templated.promptTokens} vs ${raw.promptTokens}`);
  assert.notEqual(templated.text, raw.text);
  assert.equal(ok(['generate', dir, PROMPT, ...flagsOf(opts)]).stdout, templated.text);
  // Two stop strings, one of which occurs in the text.
  const stop = [...raw.text].slice(6, 8).join('');
  const stopped = await m.generate(PROMPT, { ...opts, stop: [stop, 'never-there'] });
  assert.ok(stopped.text.length < raw.text.length, `stop ${JSON.stringify(stop)} did not stop ${JSON.stringify(raw.text)}`);
  const s = ok(['generate', dir, PROMPT, '--raw', ...flagsOf(opts), `--stop=${stop}`, '--stop', 'never-there']);
  assert.equal(s.stdout, stopped.text);
});

test('generate: --system and --no-think through the template; the prompt from stdin ("-" or left out)', async () => {
  const m = await model('qwen3-f32');
  const messages = [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: PROMPT },
  ];
  const text = m.applyChatTemplate(messages, { addGenerationPrompt: true, enableThinking: false });
  assert.match(text, /<think>\n\n<\/think>/);
  const want = await m.generate(m.encode(text, { addSpecialTokens: false }), { maxTokens: 10 });
  for (const args of [['-'], []]) {
    const r = ok(['generate', dir, ...args, '--system', 'You are terse.', '--no-think', '--max-tokens', '10'], { input: PROMPT });
    assert.equal(r.stdout, want.text, `prompt ${args}`);
    assertFiguresOf(r, want, `prompt ${args}`);
  }
});

test('generate: a model without a chat template gets the raw prompt; --chat then fails with UNSUPPORTED_MODEL', async () => {
  const m = await model('qwen3-f32');
  const copy = copyFixture('qwen3-f32');
  try {
    const cfgPath = path.join(copy, 'tokenizer_config.json');
    const cfg = JSON.parse(fs.readFileSync(cfgPath, 'utf8'));
    delete cfg.chat_template;
    fs.writeFileSync(cfgPath, JSON.stringify(cfg));
    const want = await m.generate(PROMPT, { maxTokens: 8 });
    const r = ok(['generate', copy, PROMPT, '--max-tokens', '8']);
    assert.equal(r.stdout, want.text);
    assert.match(r.stderr, /no chat template/);
    const c = cli(['generate', copy, PROMPT, '--chat', '--max-tokens', '8']);
    assert.equal(c.status, 1);
    assert.match(c.stderr, /UNSUPPORTED_MODEL/);
    assert.equal(c.stdout, '');
  } finally {
    fs.rmSync(copy, { recursive: true, force: true });
  }
});

test('chat: piped lines with /reset and /save give the library Chat\'s replies; the file loads and /load continues it', async () => {
  const m = await model('qwen3-f32');
  const system = 'You are terse.';
  const file = path.join(TMP, 'chat.safetensors');
  const r = ok(['chat', dir, '--system', system, '--max-tokens', '8'], { input: `Hello\nHow are you?\n/reset\nTell me more\n/save ${file}\n` });

  const chat = m.createChat({ system, maxTokens: 8 });
  const replies = [await chat.send('Hello'), await chat.send('How are you?')];
  chat.reset();
  replies.push(await chat.send('Tell me more'));
  assert.equal(r.stdout, replies.map((x) => `${x.text}\n`).join(''));
  // Figures per reply, with the tokens the cache served.
  const f = figures(r.stderr);
  assert.deepEqual(f.prompt, replies.map((x) => [x.promptTokens, x.cachedTokens]));
  assert.deepEqual(f.generation, replies.map((x) => [x.generationTokens]));
  assert.ok(replies[1].cachedTokens > 0 && replies[2].cachedTokens > 0, 'the cache served later turns');
  assert.match(r.stderr, /saved 3 message\(s\)/);

  const loaded = await m.loadChat(file);
  assert.deepEqual(loaded.messages, chat.messages);
  const next = await loaded.send('And then?');
  loaded.dispose();
  chat.dispose();
  // The saved chat keeps its options (8 tokens), so no flag is needed here.
  const again = ok(['chat', dir], { input: `/load ${file}\nAnd then?\n` });
  assert.equal(again.stdout, `${next.text}\n`);
  assert.deepEqual(figures(again.stderr).prompt, [[next.promptTokens, next.cachedTokens]]);
});

test('chat: a failing command is reported and the chat goes on; the exit code is then 1', async () => {
  const m = await model('qwen3-f32');
  const r = cli(['chat', dir, '--max-tokens', '6'], { input: `/load ${path.join(TMP, 'nothing-here.safetensors')}\n/nonsense\n/save\nHello\n` });
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /error: [A-Z_]+: /);
  assert.match(r.stderr, /unknown command \/nonsense/);
  assert.match(r.stderr, /\/save needs a file path/);
  const want = await m.createChat({ maxTokens: 6 }).send('Hello');
  assert.equal(r.stdout, `${want.text}\n`);
});

// Starts the command; resolves when it exits with { code, signal, stdout, stderr }.
// Runs the command without blocking this process (a test's hub server lives in it); an
// `env` value of undefined leaves that variable out.
function start(args, { env, cwd } = {}) {
  const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, ...env }, cwd });
  const out = { stdout: '', stderr: '' };
  child.stdout.setEncoding('utf8').on('data', (d) => (out.stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d) => (out.stderr += d));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal, ...out })));
  const waitFor = (stream, re) =>
    new Promise((resolve, reject) => {
      const check = () => {
        const m = re.exec(out[stream]);
        if (m) {
          child[stream].off('data', check);
          resolve(m);
        }
      };
      child[stream].on('data', check);
      exited.then(() => reject(new Error(`exited before ${re} on ${stream}:\n${out.stderr}`)));
      check();
    });
  return { child, exited, waitFor };
}

test('Ctrl-C: stops a chat reply (not kept) and the chat goes on; stops generate with its figures, exit 130', { timeout: 120_000 }, async () => {
  const file = path.join(TMP, 'interrupted.safetensors');
  const c = start(['chat', dir, '--system', 'S', '--max-tokens', '100000']);
  c.child.stdin.write('Hello\n');
  await c.waitFor('stdout', /\S/);
  c.child.kill('SIGINT');
  await c.waitFor('stderr', /interrupted/);
  c.child.stdin.end(`/save ${file}\n/quit\n`);
  const r = await c.exited;
  assert.equal(r.code, 0, r.stderr);
  assert.ok(r.stdout.endsWith('\n'));
  const m = await model('qwen3-f32');
  const saved = await m.loadChat(file);
  assert.deepEqual(saved.messages, [{ role: 'system', content: 'S' }]);
  saved.dispose();

  const g = start(['generate', dir, PROMPT, '--max-tokens', '100000']);
  await g.waitFor('stdout', /\S/);
  g.child.kill('SIGINT');
  const gr = await g.exited;
  assert.equal(gr.code, 130, gr.stderr);
  const f = figures(gr.stderr);
  assert.equal(f.generation.length, 1);
  assert.ok(f.generation[0][0] < 100000);
});

test('speak: a seeded run writes the WAV bytes of tts.synthesize(text, same options).toWav()', { timeout: 120_000 }, async () => {
  ensureTtsFixtures({ refs: false });
  const ttsDir = path.join(TTS_FIXTURES_DIR, 'chatterbox');
  const text = 'Hi there.';
  const out = path.join(TMP, 'hi.wav');
  const r = ok(['speak', ttsDir, '-', '-o', out, '--seed', '3', '--temp', '0.7', '--cfg-weight', '0.4', '--exaggeration', '0.9', '--max-tokens', '20'], { input: text });
  const tts = await loadTTS(ttsDir);
  let audio;
  try {
    audio = await tts.synthesize(text, { seed: 3, temperature: 0.7, cfgWeight: 0.4, exaggeration: 0.9, maxTokens: 20 });
  } finally {
    await tts.dispose();
  }
  const wav = fs.readFileSync(out);
  assert.equal(wav.toString('ascii', 0, 4), 'RIFF');
  assert.equal(wav.toString('ascii', 8, 12), 'WAVE');
  assert.equal(wav.readUInt16LE(20), 1, 'PCM');
  assert.equal(wav.readUInt16LE(22), 1, 'mono');
  assert.equal(wav.readUInt32LE(24), 24000, 'sample rate');
  assert.ok(audio.audio.length > 0);
  assert.ok(wav.equals(audio.toWav()), 'the WAV bytes differ from the library\'s');
  assert.match(r.stderr, new RegExp(`Audio: ${audio.duration.toFixed(3)} s at 24000 Hz, ${audio.speechTokens.length} speech tokens`));
  assert.match(r.stderr, /real-time factor [\d.]+/);
  assert.match(r.stderr, /Peak memory: [\d.]+ GB/);
  assert.equal(r.stdout, '');
});

test('speak --language: a multilingual model speaks the language as the library does; the English one refuses it', { timeout: 120_000 }, async () => {
  ensureTtsFixtures({ refs: false });
  const mtl = path.join(TTS_FIXTURES_DIR, 'chatterbox-mtl');
  const out = path.join(TMP, 'fr.wav');
  ok(['speak', mtl, 'Bonjour.', '-o', out, '--language', 'fr', '--seed', '2', '--max-tokens', '12', '-q']);
  const tts = await loadTTS(mtl);
  let audio;
  try {
    audio = await tts.synthesize('Bonjour.', { language: 'fr', seed: 2, maxTokens: 12 });
  } finally {
    await tts.dispose();
  }
  assert.ok(fs.readFileSync(out).equals(audio.toWav()), 'the WAV bytes differ from the library\'s');
  const r = cli(['speak', path.join(TTS_FIXTURES_DIR, 'chatterbox'), 'Bonjour.', '-o', path.join(TMP, 'x.wav'), '--language', 'fr']);
  assert.equal(r.status, 1);
  assert.match(r.stderr, /INVALID_ARGUMENT.*English/);
});

test('info: mlxInfo() as JSON; with DIR the model\'s info too', async () => {
  const info = JSON.parse(ok(['info']).stdout);
  assert.deepEqual({ ...info, mlxNodeVersion: undefined }, { ...mlxInfo(), mlxNodeVersion: undefined });
  assert.equal(info.mlxNodeVersion, require('../package.json').version);
  const m = await model('qwen3-f32');
  const withModel = JSON.parse(ok(['info', dir]).stdout);
  assert.equal(withModel.mlxVersion, info.mlxVersion);
  assert.deepEqual(withModel.model, { path: dir, kind: 'text', ...m.info });
});

test('errors: a wrong command line exits 2 with the reason; a library error exits 1 with its code', () => {
  usageError(['generate', dir, PROMPT, '--bogus'], /unknown option --bogus/);
  usageError(['frobnicate'], /unknown command "frobnicate"/);
  usageError(['--bogus'], /unknown option "--bogus"/);
  usageError(['generate'], /missing DIR/);
  usageError(['chat'], /missing DIR/);
  usageError(['speak'], /missing DIR/);
  usageError(['generate', dir, PROMPT, 'extra'], /unexpected argument "extra"/);
  usageError(['generate', dir, PROMPT, '--temp', 'abc'], /--temp needs a number, got "abc"/);
  usageError(['generate', dir, PROMPT, '--max-tokens', '1.5'], /--max-tokens needs a whole number/);
  usageError(['chat', dir, '--seed', '1e'], /--seed needs a number/);
  usageError(['generate', dir, PROMPT, '--temp'], /--temp/);
  usageError(['generate', dir, PROMPT, '--raw', '--chat'], /contradict/);
  usageError(['generate', dir, PROMPT, '--raw', '--system', 'x'], /drop --raw/);
  usageError(['generate', dir, PROMPT, '--no-think', '--enable-thinking'], /contradict/);
  usageError(['generate', dir, PROMPT, '--dtype', 'int8'], /--dtype must be/);
  usageError(['generate', dir, PROMPT, '--precision', 'int8'], /--precision must be exact or fast/);
  usageError(['serve', '--model', dir, '--precision', 'approx'], /--precision must be exact or fast/);
  usageError(['speak', dir, 'hello'], /missing -o FILE/);
  usageError(['speak', dir, 'hello', '-o', 'x.wav', '--format', 'mp3'], /--format must be/);
  usageError(['serve'], /missing --model DIR/);
  usageError(['serve', '--model', dir, '--port', '70000'], /--port must be at most 65535/);
  usageError(['serve', '--model', dir, '--max-batch', '0'], /--max-batch must be at least 1/);
  usageError(['serve', '--model', dir, '--voices', TMP], /--voices needs --tts DIR/);
  for (const args of [['generate', path.join(TMP, 'no-such-model'), PROMPT], ['chat', path.join(TMP, 'no-such-model')], ['info', path.join(TMP, 'no-such-model')]]) {
    const r = cli(args);
    assert.equal(r.status, 1, `${args.join(' ')}: exit ${r.status}\n${r.stderr}`);
    assert.match(r.stderr, /error: MODEL_NOT_FOUND: /);
  }
  // The library's own check of a value, after the command line's.
  const r = cli(['generate', dir, PROMPT, '--top-p', '7']);
  assert.equal(r.status, 1);
  assert.match(r.stderr, /error: INVALID_ARGUMENT: /);
});

const HAS_SERVER = fs.existsSync(path.join(ROOT, 'lib', 'server', 'index.js'));
test('serve: listens, announces its URL on stderr, takes the API key from MLX_NODE_API_KEY, exits 0 on SIGTERM', { skip: !HAS_SERVER && 'no lib/server', timeout: 120_000 }, async () => {
  const s = start(['serve', '--model', dir, '--port', '0'], { env: { MLX_NODE_API_KEY: 'sesame' } });
  try {
    const [, url] = await s.waitFor('stderr', /listening on (http:\/\/\S+)/);
    assert.equal((await fetch(`${url}/v1/models`)).status, 401);
    const models = await fetch(`${url}/v1/models`, { headers: { authorization: 'Bearer sesame' } });
    assert.equal(models.status, 200);
    assert.equal((await models.json()).data[0].id, 'qwen3-f32');
  } finally {
    s.child.kill('SIGTERM');
  }
  const r = await s.exited;
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, '');
  const bad = cli(['serve', '--model', path.join(TMP, 'no-such-model'), '--port', '0']);
  assert.equal(bad.status, 1);
  assert.match(bad.stderr, /MODEL_NOT_FOUND/);
  // A mistyped voices folder fails before anything loads.
  const noVoices = cli(['serve', '--model', dir, '--tts', dir, '--voices', path.join(TMP, 'no-such-voices'), '--port', '0']);
  assert.equal(noVoices.status, 1);
  assert.match(noVoices.stderr, /voices folder .*no-such-voices does not exist/);
});

// The HF_* variables the addon reads; a hub test's child process gets only HF_ENDPOINT and HF_HOME.
const HF_VARS = ['HF_ENDPOINT', 'HF_HOME', 'HF_HUB_CACHE', 'HUGGINGFACE_HUB_CACHE', 'HF_TOKEN', 'HF_TOKEN_PATH', 'HF_HUB_OFFLINE', 'XDG_CACHE_HOME'];

test('a Hugging Face name: passed through as given, download progress per file on stderr, then the text of the fixture folder; info finds a speech model', { timeout: 300_000 }, async () => {
  const hub = new HubServer();
  const url = await hub.start();
  try {
    const repo = 'test-org/qwen3';
    hub.addRepo(repo, dir);
    const home = path.join(TMP, 'hf-home');
    const env = { ...Object.fromEntries(HF_VARS.map((k) => [k, undefined])), HF_ENDPOINT: url, HF_HOME: home };
    const m = await model('qwen3-f32');
    const want = await m.generate([{ role: 'user', content: PROMPT }], { maxTokens: 12 });
    // Run from TMP: the name is no path there, nor may the command make it one.
    const args = ['generate', repo, PROMPT, '--max-tokens', '12'];
    const first = await start(args, { env, cwd: TMP }).exited;
    assert.equal(first.code, 0, first.stderr);
    assert.equal(first.stdout, want.text);
    assertFiguresOf(first, want, 'generate org/name');
    const files = ['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json'];
    for (const f of files) {
      const size = fs.statSync(path.join(dir, f)).size;
      assert.ok(first.stderr.includes(`Downloading ${repo}: ${f} ${megabytes(size, size)}\n`), `no download line for ${f} in ${JSON.stringify(first.stderr)}`);
    }
    assert.match(first.stderr, /Downloading test-org\/qwen3: model\.safetensors 39\.\d \/ 39\.\d MB\n/);
    const loaded = first.stderr.indexOf(`Loaded ${repo} (qwen3, `);
    assert.ok(loaded > first.stderr.lastIndexOf('Downloading '), `no "Loaded ${repo}" line after the downloads: ${first.stderr}`);
    assert.ok(fs.existsSync(path.join(home, 'hub', 'models--test-org--qwen3', 'refs', 'main')), 'not in HF_HOME');
    // The cache answers: no download line, the same text; --quiet: nothing on stderr.
    const again = await start(args, { env, cwd: TMP }).exited;
    assert.equal(again.code, 0, again.stderr);
    assert.equal(again.stdout, want.text);
    assert.doesNotMatch(again.stderr, /Downloading/);
    const quiet = await start([...args, '--quiet'], { env: { ...env, HF_HOME: path.join(TMP, 'hf-home-quiet') }, cwd: TMP }).exited;
    assert.equal(quiet.code, 0, quiet.stderr);
    assert.equal(quiet.stdout, want.text);
    assert.equal(quiet.stderr, '');
    // A name the hub does not have: MODEL_NOT_FOUND naming it.
    const missing = await start(['generate', 'test-org/nope', PROMPT], { env, cwd: TMP }).exited;
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /error: MODEL_NOT_FOUND: .*test-org\/nope/);
    // info: a hub name's kind is known only from its config.json, once downloaded.
    ensureTtsFixtures({ refs: false });
    hub.addRepo('test-org/chatterbox', path.join(TTS_FIXTURES_DIR, 'chatterbox'));
    const info = await start(['info', 'test-org/chatterbox'], { env, cwd: TMP }).exited;
    assert.equal(info.code, 0, info.stderr);
    assert.deepEqual(JSON.parse(info.stdout).model, { path: 'test-org/chatterbox', kind: 'speech', modelType: 'chatterbox', sampleRate: 24000 });
    assert.match(info.stderr, /Downloading test-org\/chatterbox: conds\.safetensors [\d.]+ \/ [\d.]+ MB\n/);
  } finally {
    await hub.close();
  }
});

test('download progress: redrawn in place on a terminal, a line per whole file otherwise', () => {
  const writes = [];
  const tty = { isTTY: true, columns: 80, write: (s) => writes.push(s) };
  const shown = loadDisplay('org/name', { stream: tty });
  const d = (file, bytesDone, bytesTotal) => ({ stage: 'download', file, bytesDone, bytesTotal });
  shown.onLoadProgress(0, d('model.safetensors', 0, 25_000_000));
  shown.onLoadProgress(0, d('model.safetensors', 12_500_000, 25_000_000));
  shown.onLoadProgress(0, d('model.safetensors', 25_000_000, 25_000_000));
  shown.onLoadProgress(0, d('config.json', 700, 700));
  shown.onLoadProgress(0.5, { stage: 'load' });
  shown.onLoadProgress(1, { stage: 'load' });
  shown.clear();
  assert.deepEqual(writes.slice(0, 4), [
    '\rDownloading org/name: model.safetensors 0.0 / 25.0 MB\x1b[K',
    '\rDownloading org/name: model.safetensors 12.5 / 25.0 MB\x1b[K',
    '\rDownloading org/name: model.safetensors 25.0 / 25.0 MB\x1b[K\n',
    '\rDownloading org/name: config.json 0.001 / 0.001 MB\x1b[K\n',
  ]);
  assert.match(writes[4], /^\rLoading org\/name \[#+\.+\]  50%/);
  assert.equal(writes[5], '\r\x1b[K');
  assert.equal(writes.length, 6);

  // Piped: whole files only, unless a file takes longer than logEveryMs between reports.
  const piped = [];
  const log = loadDisplay('org/name', { stream: { isTTY: false, write: (s) => piped.push(s) }, logEveryMs: 0 });
  log.onLoadProgress(0, d('a.safetensors', 0, 2_000_000));
  log.onLoadProgress(0, d('a.safetensors', 1_000_000, 2_000_000));
  log.onLoadProgress(0, d('a.safetensors', 2_000_000, 2_000_000));
  log.onLoadProgress(0, d('a.safetensors', 2_000_000, 2_000_000));
  log.onLoadProgress(0.5, { stage: 'load' });
  log.clear();
  assert.deepEqual(piped, [
    'Downloading org/name: a.safetensors 0.0 / 2.0 MB\n',
    'Downloading org/name: a.safetensors 1.0 / 2.0 MB\n',
    'Downloading org/name: a.safetensors 2.0 / 2.0 MB\n',
  ]);
  const slow = [];
  const quietLog = loadDisplay('org/name', { stream: { isTTY: false, write: (s) => slow.push(s) } });
  quietLog.onLoadProgress(0, d('a.safetensors', 0, 2_000_000));
  quietLog.onLoadProgress(0, d('a.safetensors', 1_000_000, 2_000_000));
  quietLog.onLoadProgress(0, d('a.safetensors', 2_000_000, 2_000_000));
  assert.deepEqual(slow, ['Downloading org/name: a.safetensors 2.0 / 2.0 MB\n']);
});

test('the load progress bar: drawn in place on a terminal, nothing otherwise', () => {
  const writes = [];
  const tty = { isTTY: true, columns: 80, write: (s) => writes.push(s) };
  const bar = progressBar('Loading x', tty);
  bar.update(0.5);
  bar.update(0.501); // same percent: not redrawn
  bar.update(1);
  bar.clear();
  assert.equal(writes.length, 3);
  assert.match(writes[0], /^\rLoading x \[#{15}\.{15}\]  50%/);
  assert.match(writes[1], /\[#{30}\] 100%/);
  assert.equal(writes[2], '\r\x1b[K');
  const piped = [];
  const quietBar = progressBar('Loading x', { isTTY: false, write: (s) => piped.push(s) });
  quietBar.update(0.5);
  quietBar.clear();
  assert.deepEqual(piped, []);
});
