'use strict';
// Hugging Face Hub names for loadModel and loadTTS. A string that is no file or folder
// here and reads `org/name[:quant][@revision]` is resolved by the addon
// (node/src/hub.rs over crates/hub) to a snapshot folder in huggingface_hub's cache (or,
// for a GGUF repo, the one GGUF file `:quant` names), downloading the files that are
// missing. Anything else is a local path, as before.
const fs = require('node:fs');
const { MlxNodeError, fromNative } = require('./errors');

// Repo names and revision segments (a branch may hold '/') never start with '.', '-' or '~'.
const NAME = '[A-Za-z0-9_][A-Za-z0-9_.-]*';
const SEGMENT = '[A-Za-z0-9_][A-Za-z0-9_.-]*';
const HUB_ID = new RegExp(`^${NAME}/${NAME}(?::${NAME})?(?:@${SEGMENT}(?:/${SEGMENT})*)?$`);

// A missing `dir/model.gguf` stays a path, for the GGUF loader to name (a `:quant` may end
// in .gguf: it names the file of the repo).
function isHubId(path) {
  return HUB_ID.test(path) && (path.includes(':') || !/\.gguf$/i.test(path)) && !fs.existsSync(path);
}

// The folder to load `path` from: `path` itself, or the hub model's snapshot folder.
// `progress` is lib/load-progress.js's; an abort stops the download (its partial file
// stays for the next try) and rejects with `signal.reason`.
async function resolveModelPath(native, path, kind, signal, progress) {
  if (!isHubId(path)) return path;
  const abort = new native.HubAbort();
  const stop = () => abort.abort();
  signal?.addEventListener('abort', stop, { once: true });
  progress.startDownload(stop);
  let dir;
  try {
    dir = await native.resolveModelNative(path, kind, abort, progress.onDownload);
  } catch (e) {
    if (signal?.aborted) throw signal.reason;
    const failure = progress.failure();
    if (failure) throw failure;
    const err = fromNative(e);
    if (err.code === 'MODEL_NOT_FOUND') {
      throw new MlxNodeError(err.code, `${err.message} (nor is there a file or folder "${path}" here)`);
    }
    throw err;
  } finally {
    signal?.removeEventListener('abort', stop);
    progress.endDownload();
  }
  signal?.throwIfAborted();
  const failure = progress.failure();
  if (failure) throw failure;
  return dir;
}

module.exports = { isHubId, resolveModelPath };
