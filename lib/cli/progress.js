'use strict';
// Loading a model from the command line: a one-line progress bar on stderr while
// the weights are read (only when stderr is a terminal), then one line saying
// what was loaded and how long it took (left out with --quiet).
const path = require('node:path');

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

// A line on stderr unless quiet.
function note(quiet, line) {
  if (!quiet) process.stderr.write(`${line}\n`);
}

function seconds(t0) {
  return ((performance.now() - t0) / 1000).toFixed(2);
}

async function loadLanguageModel(dir, { dtype, precision, quiet }) {
  const { loadModel } = require('../..');
  const bar = quiet ? null : progressBar(`Loading ${path.basename(path.resolve(dir))}`);
  const t0 = performance.now();
  let model;
  try {
    model = await loadModel(dir, { dtype, precision, onLoadProgress: bar ? (f) => bar.update(f) : undefined });
  } finally {
    bar?.clear();
  }
  const i = model.info;
  const q = i.quantization ? `, ${i.quantization.bits}-bit` : '';
  note(quiet, `Loaded ${dir} (${i.modelType}, ${i.numLayers} layers, ${i.dtype}${q}) in ${seconds(t0)} s`);
  return model;
}

// loadTTS reports no progress: a line while it loads, on a terminal only.
async function loadSpeechModel(dir, { quiet }) {
  const { loadTTS } = require('../..');
  const tty = !quiet && process.stderr.isTTY;
  if (tty) process.stderr.write(`Loading ${path.basename(path.resolve(dir))} ...`);
  const t0 = performance.now();
  let tts;
  try {
    tts = await loadTTS(dir);
  } finally {
    if (tty) process.stderr.write('\r\x1b[K');
  }
  note(quiet, `Loaded ${dir} (chatterbox, ${tts.sampleRate} Hz) in ${seconds(t0)} s`);
  return tts;
}

module.exports = { progressBar, note, loadLanguageModel, loadSpeechModel };
