'use strict';
// A local stand-in for the Hugging Face Hub's file API (what huggingface_hub and
// crates/hub call), serving fixture folders as model repos, for __test__/hub.test.js:
//
//   GET /api/models/{org}/{name}[/revision/{rev}][?blobs=true]   sha + siblings
//   GET /api/models/{org}/{name}/tree/{rev}                      the file list
//   HEAD|GET /{org}/{name}/resolve/{rev}/{path}                  with X-Repo-Commit, ETag,
//     and for *.safetensors and *.gguf (LFS) X-Linked-Etag (sha256) and X-Linked-Size; Range support
//   GET /cdn/{org}/{name}/{path}                                 where LFS files redirect
//     (knob cdn), on another host name (localhost) as the hub's CDN is, with no token
//
// Knobs (server.knobs, reset by reset()) make it misbehave for one test: cut a transfer,
// ask for a token, corrupt bytes, lie about sizes, go slow, fail with a status.
const http = require('node:http');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');

const isLfs = (name) => name.endsWith('.safetensors') || name.endsWith('.gguf');

function gitBlobSha1(buf) {
  return crypto.createHash('sha1').update(`blob ${buf.length}\0`).update(buf).digest('hex');
}

function sha256(buf) {
  return crypto.createHash('sha256').update(buf).digest('hex');
}

function defaultKnobs() {
  return {
    // { file, bytes, times }: the next `times` GETs of `file` stop after `bytes` bytes.
    cut: null,
    // Authorization must be `Bearer <token>` (401 otherwise); errorCode is sent as X-Error-Code.
    token: null,
    authErrorCode: null,
    // Files whose served bytes have one byte flipped (the hashes stay the true ones).
    corrupt: new Set(),
    // Files that GET sends with one byte too many.
    extraByte: new Set(),
    // Files whose HEAD reports one byte more than the API does.
    sizeLie: new Set(),
    // Files the API lists but resolve answers 404 for.
    missing: new Set(),
    // { file, chunk, ms }: GET of `file` sends `chunk` bytes every `ms` ms.
    slow: null,
    // Extra siblings the API lists (for unsafe names).
    extraSiblings: [],
    // API reply without `sha`; with a body that is not JSON; HEAD without ETag / with this ETag.
    noSha: false,
    notJson: false,
    noEtag: false,
    etag: null,
    // Status for every request (e.g. 500).
    status: null,
    // LFS files answer 302 to /cdn/ on http://localhost:<port>, with the X-Linked-* headers.
    cdn: false,
  };
}

class HubServer {
  constructor() {
    this.repos = new Map();
    this.requests = [];
    this.knobs = defaultKnobs();
    this.server = http.createServer((req, res) => this.handle(req, res));
  }

  async start() {
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${this.server.address().port}`;
    return this.url;
  }

  async close() {
    this.server.closeAllConnections?.();
    await new Promise((resolve) => this.server.close(() => resolve()));
  }

  reset() {
    this.knobs = defaultKnobs();
    this.requests = [];
  }

  // Serves the top-level files of `dir` (plus `extra`: name -> Buffer) as repo `id`, with
  // branch main and the given tags. Returns the commit sha.
  addRepo(id, dir, { extra = {}, tags = [] } = {}) {
    const files = new Map();
    const add = (name, read, size) => {
      const bytes = read();
      const sha = sha256(bytes);
      files.set(name, { name, read, size, sha256: sha, blobId: gitBlobSha1(bytes), etag: isLfs(name) ? sha : gitBlobSha1(bytes) });
    };
    for (const f of fs.readdirSync(dir).sort()) {
      const p = path.join(dir, f);
      if (f.startsWith('.') || !fs.statSync(p).isFile()) continue;
      add(f, () => fs.readFileSync(p), fs.statSync(p).size);
    }
    for (const [name, buf] of Object.entries(extra)) add(name, () => buf, buf.length);
    const commit = crypto
      .createHash('sha1')
      .update(id)
      .update([...files.values()].map((f) => `${f.name}:${f.sha256}`).join('\n'))
      .digest('hex');
    const refs = new Map([['main', commit], [commit, commit]]);
    for (const t of tags) refs.set(t, commit);
    this.repos.set(id, { id, files, commit, refs });
    return commit;
  }

  log(req) {
    const entry = { method: req.method, url: req.url, range: req.headers.range, authorization: req.headers.authorization };
    this.requests.push(entry);
    return entry;
  }

  // Requests for files (resolve), as opposed to the API.
  fileRequests() {
    return this.requests.filter((r) => r.url.includes('/resolve/'));
  }

  fail(res, status, errorCode, message) {
    const headers = { 'Content-Type': 'application/json' };
    if (errorCode) headers['X-Error-Code'] = errorCode;
    res.writeHead(status, headers);
    res.end(JSON.stringify({ error: message }));
  }

  handle(req, res) {
    this.log(req);
    const k = this.knobs;
    if (k.status) return this.fail(res, k.status, null, `status ${k.status}`);
    const url = new URL(req.url, 'http://x');
    const parts = url.pathname.split('/').map(decodeURIComponent);
    let m;
    if (parts[1] === 'api' && parts[2] === 'models') {
      // /api/models/org/name[/revision/rev | /tree/rev]
      const repo = this.repos.get(`${parts[3]}/${parts[4]}`);
      if (!this.authorized(req, res)) return;
      if (!repo) return this.fail(res, 404, 'RepoNotFound', 'Repository not found');
      const kind = parts[5];
      const rev = kind ? parts.slice(6).join('/') : 'main';
      const commit = repo.refs.get(rev);
      if (!commit) return this.fail(res, 404, 'RevisionNotFound', `Invalid rev id: ${rev}`);
      const files = [...repo.files.values()];
      if (kind === 'tree') {
        const tree = files.map((f) => ({
          type: 'file',
          oid: f.blobId,
          size: f.size,
          path: f.name,
          ...(isLfs(f.name) ? { lfs: { oid: f.sha256, size: f.size, pointerSize: 134 } } : {}),
        }));
        return this.json(res, tree);
      }
      if (k.notJson) {
        res.writeHead(200, { 'Content-Type': 'text/html' });
        return res.end('<html>not the hub</html>');
      }
      const blobs = url.searchParams.get('blobs') === 'true';
      const siblings = files.map((f) =>
        blobs
          ? { rfilename: f.name, size: f.size, blobId: f.blobId, ...(isLfs(f.name) ? { lfs: { sha256: f.sha256, size: f.size, pointerSize: 134 } } : {}) }
          : { rfilename: f.name }
      );
      for (const s of k.extraSiblings) siblings.push({ rfilename: s });
      const info = { _id: repo.id, id: repo.id, modelId: repo.id, private: false, disabled: false, gated: false, tags: [], siblings };
      if (!k.noSha) info.sha = commit;
      return this.json(res, info);
    }
    if ((m = /^\/cdn\/([^/]+)\/([^/]+)\/(.+)$/.exec(url.pathname))) {
      const repo = this.repos.get(`${decodeURIComponent(m[1])}/${decodeURIComponent(m[2])}`);
      const f = repo?.files.get(decodeURIComponent(m[3]));
      if (!f) return this.fail(res, 404, null, 'no such object');
      return this.serveFile(req, res, repo, f);
    }
    if ((m = /^\/([^/]+)\/([^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname))) {
      const [, org, name, rev, file] = m.slice(0, 5).map((s) => (s ? decodeURIComponent(s) : s));
      const repo = this.repos.get(`${org}/${name}`);
      if (!this.authorized(req, res)) return;
      if (!repo) return this.fail(res, 404, 'RepoNotFound', 'Repository not found');
      const commit = repo.refs.get(rev);
      if (!commit) return this.fail(res, 404, 'RevisionNotFound', 'Revision not found');
      const f = repo.files.get(file);
      if (!f || k.missing.has(file)) return this.fail(res, 404, 'EntryNotFound', 'Entry not found');
      if (k.cdn && isLfs(file)) {
        const port = this.server.address().port;
        res.writeHead(302, {
          Location: `http://localhost:${port}/cdn/${org}/${name}/${encodeURIComponent(file)}`,
          'X-Repo-Commit': repo.commit,
          ETag: `"${f.sha256}"`,
          'X-Linked-Etag': `"${f.sha256}"`,
          'X-Linked-Size': String(f.size),
          'Content-Length': 0,
        });
        return res.end();
      }
      return this.serveFile(req, res, repo, f);
    }
    return this.fail(res, 404, null, `no route ${url.pathname}`);
  }

  authorized(req, res) {
    const { token, authErrorCode } = this.knobs;
    if (!token || req.headers.authorization === `Bearer ${token}`) return true;
    this.fail(res, 401, authErrorCode, 'Invalid credentials in Authorization header');
    return false;
  }

  json(res, value) {
    const body = Buffer.from(JSON.stringify(value));
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': body.length });
    res.end(body);
  }

  serveFile(req, res, repo, f) {
    const k = this.knobs;
    const headers = { 'X-Repo-Commit': repo.commit, 'Accept-Ranges': 'bytes', 'Content-Type': 'application/octet-stream' };
    if (!k.noEtag) headers.ETag = `"${k.etag ?? f.etag}"`;
    const reported = f.size + (k.sizeLie.has(f.name) ? 1 : 0);
    if (isLfs(f.name)) {
      if (!k.noEtag) headers['X-Linked-Etag'] = `"${k.etag ?? f.sha256}"`;
      headers['X-Linked-Size'] = String(reported);
    }
    if (req.method === 'HEAD') {
      res.writeHead(200, { ...headers, 'Content-Length': reported });
      return res.end();
    }
    let body = f.read();
    if (k.corrupt.has(f.name)) {
      body = Buffer.from(body);
      body[body.length >> 1] ^= 0xff;
    }
    if (k.extraByte.has(f.name)) body = Buffer.concat([body, Buffer.from([0])]);
    let start = 0;
    let status = 200;
    const range = /^bytes=(\d+)-$/.exec(req.headers.range || '');
    if (range) {
      start = Number(range[1]);
      if (start >= body.length) {
        res.writeHead(416, { 'Content-Range': `bytes */${body.length}` });
        return res.end();
      }
      status = 206;
      headers['Content-Range'] = `bytes ${start}-${body.length - 1}/${body.length}`;
    }
    const part = body.subarray(start);
    res.writeHead(status, { ...headers, 'Content-Length': part.length });
    if (k.cut && k.cut.file === f.name && k.cut.times > 0 && k.cut.bytes < part.length) {
      k.cut.times--;
      res.write(part.subarray(0, k.cut.bytes), () => res.socket.destroy());
      return;
    }
    if (k.slow && k.slow.file === f.name) {
      let at = 0;
      const timer = setInterval(() => {
        if (res.destroyed || at >= part.length) {
          clearInterval(timer);
          if (!res.destroyed) res.end();
          return;
        }
        res.write(part.subarray(at, at + k.slow.chunk));
        at += k.slow.chunk;
      }, k.slow.ms);
      res.on('close', () => clearInterval(timer));
      return;
    }
    res.end(part);
  }
}

module.exports = { HubServer, gitBlobSha1, sha256 };
