'use strict';
// The chat templates of model families whose fixtures carry another family's tokenizer (Gemma 4,
// GPT-OSS's harmony format, Phi-3.5, SmolLM3, Ministral 3, Qwen3.5, LFM2.5, Llama 3.1 and 3.2), as
// the models publish them: llama.cpp keeps copies of them for its tests, and the sdist of
// llama-cpp-python 0.3.36 on PyPI vendors llama.cpp. Fetched once with the system Python: the
// sdist (76 MB) streamed from files.pythonhosted.org through gunzip and tar, only the template
// members kept, the whole download checked against its pinned sha256 and each template against
// its own before anything lands in .cache/chat-templates. Nothing of the sdist stays on disk.
// MLX_NODE_LLAMA_CPP_SDIST may name a local copy of the same file (still checked).
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ROOT, log } = require('./mlx');
const { findSystemPython, withLock } = require('./venv');

const SDIST_URL =
  'https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz';
const SDIST_SHA256 = '832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e';
const MEMBER_DIR = 'llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/';
// file name -> sha256
const TEMPLATES = {
  'google-gemma-4-31B-it.jinja': '85a08664d16d8f3be4416c92427b3ac10df1024ac566cc0b4bc3bab409393f98',
  'google-gemma-4-31B-it-interleaved.jinja': '65f93a25708c952457106a30e185ba7beffddd726121c8d7e3f3e08b23c16c67',
  'openai-gpt-oss-120b.jinja': 'a4c9919cbbd4acdd51ccffe22da049264b1b73e59055fa58811a99efbd7c8146',
  'microsoft-Phi-3.5-mini-instruct.jinja': '78d976a442bcde2f0be15aafbb8e3050e1104f86732266f68403251b89982a90',
  'HuggingFaceTB-SmolLM3-3B.jinja': '19eacf64569032f07644ea92c8e2a87af06ee7008147557302c31e474912ca97',
  'mistralai-Ministral-3-14B-Reasoning-2512.jinja': '39f03c383413f531fd302c06c7e982ad98c83f0657a8339ae25478ccb81fdcda',
  'Qwen3.5-4B.jinja': 'a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715',
  'LFM2.5-Instruct.jinja': 'f05bf4b967dc993bdc7a2fe6e43759ee218eb0eb340d68b063e1c4f8ad148176',
  'meta-llama-Llama-3.1-8B-Instruct.jinja': 'e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65',
  'meta-llama-Llama-3.2-3B-Instruct.jinja': '5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4',
};
const DIR = path.join(ROOT, '.cache', 'chat-templates');
const STAMP = path.join(DIR, '.stamp');

// Streams the sdist (argv[1]: URL or file) and writes the wanted members (argv[4:]) under argv[3]
// when the download's sha256 is argv[2] and each member's its own (name=sha256 pairs).
const EXTRACT = `
import hashlib, os, sys, tarfile, urllib.request
src, want_sha, out = sys.argv[1], sys.argv[2], sys.argv[3]
members = dict(a.split("=", 1) for a in sys.argv[4:])
prefix = ${JSON.stringify(MEMBER_DIR)}

class Hashing:
    def __init__(self, raw):
        self.raw, self.h = raw, hashlib.sha256()
    def read(self, n=-1):
        b = self.raw.read(n)
        self.h.update(b)
        return b

raw = open(src, "rb") if os.path.exists(src) else urllib.request.urlopen(src, timeout=120)
stream = Hashing(raw)
found = {}
with tarfile.open(fileobj=stream, mode="r|gz") as tar:
    for m in tar:
        name = m.name[len(prefix):] if m.name.startswith(prefix) else None
        if name in members and m.isfile():
            found[name] = tar.extractfile(m).read()
while stream.read(1 << 20):
    pass
if stream.h.hexdigest() != want_sha:
    sys.exit(f"the download has sha256 {stream.h.hexdigest()}, expected {want_sha}")
for name, sha in members.items():
    if name not in found:
        sys.exit(f"{prefix}{name} is not in the sdist")
    got = hashlib.sha256(found[name]).hexdigest()
    if got != sha:
        sys.exit(f"{name} has sha256 {got}, expected {sha}")
    with open(os.path.join(out, name), "wb") as f:
        f.write(found[name])
`;

function isFresh() {
  try {
    return fs.readFileSync(STAMP, 'utf8') === SDIST_SHA256 && Object.keys(TEMPLATES).every((f) => fs.existsSync(path.join(DIR, f)));
  } catch {
    return false;
  }
}

function fetchTemplates() {
  const python = findSystemPython();
  const src = process.env.MLX_NODE_LLAMA_CPP_SDIST || SDIST_URL;
  const tmp = `${DIR}.partial`;
  fs.rmSync(tmp, { recursive: true, force: true });
  fs.mkdirSync(tmp, { recursive: true });
  log(`extracting ${Object.keys(TEMPLATES).length} chat templates from ${src === SDIST_URL ? 'llama-cpp-python 0.3.36 on PyPI (about 76 MB)' : src}`);
  const args = ['-c', EXTRACT, src, SDIST_SHA256, tmp, ...Object.entries(TEMPLATES).map(([f, sha]) => `${f}=${sha}`)];
  const r = spawnSync(python, args, { stdio: ['ignore', 2, 'pipe'], encoding: 'utf8' });
  if (r.error || r.status !== 0) {
    fs.rmSync(tmp, { recursive: true, force: true });
    const why = (r.stderr || r.error?.message || '').trim().split('\n').pop();
    throw new Error(`could not get the chat templates from ${src} (${why}); is PyPI (files.pythonhosted.org) reachable?`);
  }
  fs.writeFileSync(path.join(tmp, '.stamp'), SDIST_SHA256);
  fs.rmSync(DIR, { recursive: true, force: true });
  fs.renameSync(tmp, DIR);
}

// Returns .cache/chat-templates (file names as in TEMPLATES), fetching the templates first if needed.
function ensureChatTemplates() {
  if (isFresh()) return DIR;
  fs.mkdirSync(path.dirname(DIR), { recursive: true });
  withLock(path.join(ROOT, '.cache', 'chat-templates.lock'), 'the chat-template download', () => {
    if (!isFresh()) fetchTemplates();
  });
  return DIR;
}

module.exports = { ensureChatTemplates, CHAT_TEMPLATES_DIR: DIR, TEMPLATES };

if (require.main === module) {
  try {
    process.stdout.write(`${ensureChatTemplates()}\n`);
  } catch (err) {
    process.stderr.write(`[chat-templates] error: ${err.message}\n`);
    process.exit(1);
  }
}
