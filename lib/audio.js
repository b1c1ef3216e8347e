'use strict';
// Synthesised audio and its WAV encoding (RIFF, 16-bit PCM or 32-bit float, mono).
const fs = require('node:fs/promises');
const { invalid } = require('./errors');

function wavHeader(dataBytes, sampleRate, format) {
  const float = format === 'float32';
  const bytesPerSample = float ? 4 : 2;
  // Non-PCM formats carry an 18-byte fmt chunk and a fact chunk, as the spec asks.
  const fmtSize = float ? 18 : 16;
  const factSize = float ? 12 : 0;
  const header = Buffer.alloc(12 + 8 + fmtSize + factSize + 8);
  let o = 0;
  const str = (s) => {
    header.write(s, o, 'ascii');
    o += 4;
  };
  const u32 = (v) => {
    header.writeUInt32LE(v, o);
    o += 4;
  };
  const u16 = (v) => {
    header.writeUInt16LE(v, o);
    o += 2;
  };
  str('RIFF');
  u32(header.length - 8 + dataBytes);
  str('WAVE');
  str('fmt ');
  u32(fmtSize);
  u16(float ? 3 : 1);
  u16(1);
  u32(sampleRate);
  u32(sampleRate * bytesPerSample);
  u16(bytesPerSample);
  u16(bytesPerSample * 8);
  if (float) {
    u16(0);
    str('fact');
    u32(4);
    u32(dataBytes / bytesPerSample);
  }
  str('data');
  u32(dataBytes);
  return header;
}

function encodeWav(samples, sampleRate, format = 'pcm16') {
  if (format !== 'pcm16' && format !== 'float32') {
    throw invalid(`option format must be 'pcm16' or 'float32', got ${JSON.stringify(format)}`);
  }
  if (format === 'float32') {
    const data = Buffer.from(Float32Array.from(samples).buffer);
    return Buffer.concat([wavHeader(data.length, sampleRate, format), data]);
  }
  const data = pcm16(samples);
  return Buffer.concat([wavHeader(data.length, sampleRate, format), data]);
}

// Samples as 16-bit signed little-endian PCM (a WAV's data; OpenAI's 'pcm' format).
function pcm16(samples) {
  const data = Buffer.alloc(samples.length * 2);
  for (let i = 0; i < samples.length; i++) {
    const s = Math.max(-1, Math.min(1, samples[i] || 0));
    data.writeInt16LE(Math.round(s * 32767), i * 2);
  }
  return data;
}

// The native result's figures an Audio carries (0 where it was not synthesised,
// e.g. the demo's streamed chunks put together).
const STATS = ['promptTokens', 'promptTps', 'generationTokens', 'generationTps', 'processingTime', 'realTimeFactor', 'peakMemory'];

class Audio {
  constructor(audio, sampleRate, speechTokens, stats = {}) {
    this.audio = audio;
    this.sampleRate = sampleRate;
    this.speechTokens = speechTokens;
    for (const k of STATS) this[k] = stats[k] ?? 0;
  }

  get duration() {
    return this.audio.length / this.sampleRate;
  }

  toWav(options = {}) {
    if (options === null || typeof options !== 'object') throw invalid('options must be an object');
    return encodeWav(this.audio, this.sampleRate, options.format ?? 'pcm16');
  }

  async save(path, options) {
    if (typeof path !== 'string' || path.length === 0) throw invalid('path must be a non-empty string');
    await fs.writeFile(path, this.toWav(options));
  }
}

function concatAudio(chunks) {
  const out = new Float32Array(chunks.reduce((n, c) => n + c.length, 0));
  let o = 0;
  for (const c of chunks) {
    out.set(c, o);
    o += c.length;
  }
  return out;
}

module.exports = { Audio, encodeWav, pcm16, concatAudio };
