'use strict';
// The server's voice folder (`--voices DIR`): every NAME.wav (a reference clip) and
// NAME.safetensors (a saved conds file) in it is a voice NAME. The folder is read at each
// request, so voices added or replaced while the server runs are seen. A clip is cloned at
// its first use, not at startup: startup stays quick however many clips the folder holds,
// and a bad clip fails only the requests that name it. Its Voice is kept, per name, while
// the file is unchanged, so that requests alternating between voices clone each clip once.
const fs = require('node:fs');
const path = require('node:path');
const { HttpError, badRequest } = require('./http');

const KINDS = { '.wav': 'clip', '.safetensors': 'conds' };

class VoiceFolder {
  #dir;
  #real;
  #tts;
  // name -> { stamp, voice: Promise<Voice> } for the clips cloned so far.
  #cloned = new Map();

  // `dir` must be a folder (checked at startup: a mistyped --voices fails at once).
  static check(dir) {
    if (typeof dir !== 'string' || dir.length === 0) throw new TypeError('voices must be a folder path');
    let stat;
    try {
      stat = fs.statSync(dir);
    } catch {
      throw new Error(`voices folder ${dir} does not exist`);
    }
    if (!stat.isDirectory()) throw new Error(`voices folder ${dir} is not a folder`);
  }

  constructor(dir, tts) {
    VoiceFolder.check(dir);
    this.#dir = path.resolve(dir);
    this.#real = fs.realpathSync(dir);
    this.#tts = tts;
  }

  // name -> file path, sorted by name. A name with both files is its saved conds (cloned already).
  list() {
    const found = new Map();
    for (const entry of fs.readdirSync(this.#dir, { withFileTypes: true })) {
      const ext = path.extname(entry.name).toLowerCase();
      const kind = KINDS[ext];
      if (!kind || !(entry.isFile() || entry.isSymbolicLink())) continue;
      const name = entry.name.slice(0, -ext.length);
      if (name.length === 0 || (found.has(name) && found.get(name).kind === 'conds')) continue;
      found.set(name, { kind, file: path.join(this.#dir, entry.name) });
    }
    return new Map([...found].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  }

  names() {
    return [...this.list().keys()];
  }

  // The name of the voice whose file `ref` is (mlx-audio's ref_audio: a server-side path,
  // here absolute or relative to the folder), or a 400: a server reads no other path on a
  // client's say-so, so `ref` must name one of the folder's own voice files.
  nameOf(ref) {
    if (typeof ref !== 'string' || ref.length === 0) throw badRequest("'ref_audio' must name a file of the server's voices folder", 'ref_audio');
    const file = path.resolve(this.#dir, ref);
    const ext = path.extname(file).toLowerCase();
    const name = path.basename(file).slice(0, -ext.length || undefined);
    const inside = [this.#dir, this.#real].includes(path.dirname(file));
    if (inside && KINDS[ext] && this.list().has(name)) return name;
    throw badRequest(`'ref_audio' ${JSON.stringify(ref)} is not a voice file of this server's voices folder (voices: ${this.names().join(', ') || 'none'}); the server reads no other path`, 'ref_audio');
  }

  // The `voice` option for voice `name` (listed), or null when there is none.
  async voiceOf(name) {
    const v = this.list().get(name);
    if (!v) return null;
    if (v.kind === 'conds') return v.file;
    const st = fs.statSync(v.file);
    const stamp = `${st.mtimeMs}:${st.size}`;
    let kept = this.#cloned.get(name);
    if (kept && kept.stamp !== stamp) {
      this.#cloned.delete(name);
      kept.voice.then((old) => old.dispose(), () => {});
      kept = undefined;
    }
    if (!kept) {
      kept = { stamp, voice: this.#tts.createVoice(v.file) };
      this.#cloned.set(name, kept);
      // A clip that fails is tried again at its next use (it may have been fixed).
      kept.voice.catch(() => {
        if (this.#cloned.get(name) === kept) this.#cloned.delete(name);
      });
    }
    try {
      return await kept.voice;
    } catch (e) {
      throw new HttpError(500, `voice ${JSON.stringify(name)} (${path.basename(v.file)} in the server's voices folder) could not be cloned: ${e.message}`, {
        param: 'voice',
        code: e.code ? String(e.code).toLowerCase() : null,
      });
    }
  }
}

module.exports = { VoiceFolder };
