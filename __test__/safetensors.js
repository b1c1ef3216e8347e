'use strict';
// Reads reference dumps (.safetensors) in tests: header JSON, then raw tensors.
const fs = require('node:fs');

const TYPES = {
  F32: Float32Array,
  I32: Int32Array,
  I64: BigInt64Array,
  U32: Uint32Array,
};

function readSafetensors(file) {
  const buf = fs.readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  const base = 8 + n;
  const out = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const Type = TYPES[t.dtype];
    if (!Type) throw new Error(`${file}: tensor ${name} has dtype ${t.dtype}, which the test reader does not handle`);
    const [a, b] = t.data_offsets;
    const bytes = buf.subarray(base + a, base + b);
    const data = new Type(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
    out[name] = { shape: t.shape, data: Type === BigInt64Array ? Array.from(data, Number) : data };
  }
  return out;
}

function maxAbsDiff(a, b) {
  if (a.length !== b.length) throw new Error(`lengths differ: ${a.length} vs ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

module.exports = { readSafetensors, maxAbsDiff };
