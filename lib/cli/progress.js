'use strict';
// Loading a model from the command line: for a Hugging Face name, the download of each
// file on stderr; a one-line progress bar on stderr while the weights are read (only when
// stderr is a terminal); then one line saying what was loaded and how long it took (all
// left out with --quiet).
const path = require('node:path');
const { launched } = require('./follow');
const { isHubId } = require('../hub');

const BAR_WIDTH = 30;

// A bar redrawn in place on stderr; does nothing when stderr is not a terminal.
function progressBar(label, stream = process.stderr) {
  const tty = Boolean(stream.isTTY);
  let drawn = -1;
  return {
    update(fraction) {
      if (!tty) return;
      const pct = Math.floor(Math.min(1, Math.max(0, fraction)) * 100);
      if (pct === drawn) return;
      drawn = pct;
      const width = Math.max(10, Math.min(BAR_WIDTH, (stream.columns || 80) - label.length - 10));
      const full = Math.round((pct / 100) * width);
      stream.write(`\r${label} [${'#'.repeat(full)}${'.'.repeat(width - full)}] ${String(pct).padStart(3)}%\x1b[K`);
    },
    // Clears the bar, if one was drawn.
    clear() {
      if (tty && drawn >= 0) stream.write('\r\x1b[K');
      drawn = -1;
    },
  };
}

const MB = 1e6;
const LOG_EVERY_MS = 10_000;

// `done / total MB`: one decimal, three for files under 1 MB so that they do not read 0.0.
function megabytes(done, total) {
  const digits = total < MB ? 3 : 1;
  return `${(done / MB).toFixed(digits)} / ${(total / MB).toFixed(digits)} MB`;
}

// What a command calls the model: a Hugging Face name as given, else the folder's name.
function displayName(dir) {
  return isHubId(dir) ? dir : path.basename(path.resolve(dir));
}

// onLoadProgress for a command, on `stream`: (0, { stage: 'download', file, bytesDone,
// bytesTotal }) while a Hugging Face model downloads, then the load's fractions.
// - Downloads: on a terminal the file's line is redrawn in place, and stays once the file
//   is whole; elsewhere (a pipe, a log) a line when a file is whole, and one every 10 s
//   while a file is still coming.
// - The load: the progress bar (`bar`: loadModel reports fractions), or else a
//   `Loading NAME ...` line, both on a terminal only.
// `clear()` removes what is drawn in place.
function loadDisplay(name, { bar = true, stream = process.stderr, logEveryMs = LOG_EVERY_MS } = {}) {
  const tty = Boolean(stream.isTTY);
  const loadBar = bar ? progressBar(`Loading ${name}`, stream) : null;
  const waiting = bar || !tty ? null : `Loading ${name} ...`;
  let inPlace = false; // a download line or the waiting line is drawn
  const whole = new Set();
  let current = null;
  let lastLine = 0;
  const draw = (text) => {
    stream.write(`\r${text.slice(0, Math.max(10, (stream.columns || 80) - 1))}\x1b[K`);
    inPlace = true;
  };
  const clear = () => {
    if (inPlace) stream.write('\r\x1b[K');
    inPlace = false;
    loadBar?.clear();
  };
  const download = ({ file, bytesDone, bytesTotal }) => {
    if (whole.has(file)) return;
    const line = `Downloading ${name}: ${file} ${megabytes(bytesDone, bytesTotal)}`;
    const done = bytesDone >= bytesTotal;
    if (done) whole.add(file);
    if (tty) {
      if (!done) return draw(line);
      stream.write(`\r${line}\x1b[K\n`);
      inPlace = false;
      if (waiting) draw(waiting);
      return;
    }
    const now = performance.now();
    if (file !== current) {
      current = file;
      lastLine = now;
    }
    if (done || now - lastLine >= logEveryMs) {
      stream.write(`${line}\n`);
      lastLine = now;
    }
  };
  if (waiting) draw(waiting);
  return {
    onLoadProgress(fraction, detail) {
      if (detail?.stage === 'download') return download(detail);
      if (!loadBar) return;
      if (inPlace) {
        stream.write('\r\x1b[K');
        inPlace = false;
      }
      if (fraction < 1) loadBar.update(fraction);
      else loadBar.clear();
    },
    clear,
  };
}

// A line on stderr unless quiet.
function note(quiet, line) {
  if (!quiet) process.stderr.write(`${line}\n`);
}

function seconds(t0) {
  return ((performance.now() - t0) / 1000).toFixed(2);
}

// `leader`: under `mlx-node launch`, rank 0 takes the calls and the other ranks follow it.
async function loadLanguageModel(dir, { dtype, precision, quiet, leader = false }) {
  const { loadModel } = require('../..');
  const shown = quiet ? null : loadDisplay(displayName(dir));
  const t0 = performance.now();
  let model;
  try {
    // Under `mlx-node launch`: split across its processes.
    const distributed = launched({ leader });
    model = await loadModel(dir, { dtype, precision, onLoadProgress: shown?.onLoadProgress, distributed });
  } finally {
    shown?.clear();
  }
  const i = model.info;
  const q = i.quantization ? `, ${i.quantization.bits}-bit${i.quantization.mode === 'affine' ? '' : ` ${i.quantization.mode}`}` : '';
  note(quiet, `Loaded ${dir} (${i.modelType}, ${i.numLayers} layers, ${i.dtype}${q}) in ${seconds(t0)} s`);
  return model;
}

// loadTTS reports downloads but no load fractions: a line while it loads, on a terminal only.
async function loadSpeechModel(dir, { quiet }) {
  const { loadTTS } = require('../..');
  const shown = quiet ? null : loadDisplay(displayName(dir), { bar: false });
  const t0 = performance.now();
  let tts;
  try {
    tts = await loadTTS(dir, { onLoadProgress: shown?.onLoadProgress });
  } finally {
    shown?.clear();
  }
  note(quiet, `Loaded ${dir} (chatterbox, ${tts.sampleRate} Hz) in ${seconds(t0)} s`);
  return tts;
}

module.exports = { progressBar, loadDisplay, displayName, megabytes, note, loadLanguageModel, loadSpeechModel };
