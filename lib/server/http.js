'use strict';
// HTTP plumbing for the server: JSON bodies with a size limit, OpenAI error
// objects, server-sent events.

// An error answered as OpenAI does: `{ error: { message, type, param, code } }`.
class HttpError extends Error {
  constructor(status, message, { type, param = null, code = null } = {}) {
    super(message);
    this.status = status;
    this.type = type ?? (status === 401 ? 'authentication_error' : status === 404 ? 'not_found_error' : status >= 500 ? 'server_error' : 'invalid_request_error');
    this.param = param;
    this.code = code;
  }
}

const badRequest = (message, param = null, code = null) => new HttpError(400, message, { param, code });

function readJson(req, limit) {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > limit) {
      reject(new HttpError(413, `request body of ${declared} bytes is over the limit of ${limit}`, { code: 'request_too_large' }));
      req.resume();
      return;
    }
    const parts = [];
    let size = 0;
    let failed = false;
    req.on('data', (d) => {
      if (failed) return;
      size += d.length;
      if (size > limit) {
        failed = true;
        reject(new HttpError(413, `request body is over the limit of ${limit} bytes`, { code: 'request_too_large' }));
        return;
      }
      parts.push(d);
    });
    req.on('error', (e) => {
      if (!failed) reject(new HttpError(400, `could not read the request body: ${e.message}`));
      failed = true;
    });
    req.on('end', () => {
      if (failed) return;
      const text = Buffer.concat(parts).toString('utf8');
      let body;
      try {
        body = JSON.parse(text);
      } catch (e) {
        reject(badRequest(`the request body is not valid JSON: ${e.message}`));
        return;
      }
      if (body === null || typeof body !== 'object' || Array.isArray(body)) {
        reject(badRequest('the request body must be a JSON object'));
        return;
      }
      resolve(body);
    });
  });
}

function sendJson(res, status, value) {
  if (res.headersSent) {
    res.end();
    return;
  }
  const body = JSON.stringify(value);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function errorBody(err) {
  return { error: { message: err.message, type: err.type, param: err.param ?? null, code: err.code ?? null } };
}

function sendError(res, err) {
  sendJson(res, err.status, errorBody(err));
}

// A server-sent event stream; `send` writes one `data:` event, `done` the final `[DONE]`.
function eventStream(res) {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  return {
    send: (value) => res.write(`data: ${JSON.stringify(value)}\n\n`),
    error: (err) => res.write(`data: ${JSON.stringify(errorBody(err))}\n\n`),
    done: () => res.end('data: [DONE]\n\n'),
  };
}

module.exports = { HttpError, badRequest, readJson, sendJson, sendError, eventStream };
