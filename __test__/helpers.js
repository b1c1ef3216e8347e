'use strict';
// Shared pieces of the JS tests: fixture paths, model loading (once per file),
// error-code assertions and comparison with MLX-LM reference results.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { fixtureIndex } = require('../scripts/fixtures');
const { ensureVenv } = require('../scripts/venv');

const IM_END = 151645;
const ENDOFTEXT = 151643;
const EOS_IDS = [IM_END, ENDOFTEXT];
// logitBias that keeps EOS from ever being chosen (long generations that must not stop early).
const NO_EOS = { [IM_END]: -1e9, [ENDOFTEXT]: -1e9 };

let index;
// `npm test` writes only the shared decoder's fixtures; the files that use the other families'
// (families, distributed) call useFamilyFixtures() first (scripts/fixtures.js).
let families = false;
function useFamilyFixtures() {
  families = true;
  index = undefined;
}

function fixtures() {
  // fixtureIndex writes the fixtures first where they are missing or stale.
  if (!index) index = fixtureIndex({ families });
  return index;
}

function fixturePath(name) {
  const entry = fixtures().fixtures[name];
  if (!entry) throw new Error(`no fixture named ${name}${families ? '' : " (another family's? call useFamilyFixtures() first)"}`);
  return entry.path;
}

// One LanguageModel per fixture name per test file; disposeModels() in after(). In exact
// precision: the tests compare them with MLX-LM (quantized models default to fast).
const loaded = new Map();
function model(name) {
  if (!loaded.has(name)) {
    const { loadModel } = require('..');
    loaded.set(name, loadModel(fixturePath(name), { precision: 'exact' }));
  }
  return loaded.get(name);
}

async function disposeModels() {
  const all = [...loaded.values()];
  loaded.clear();
  for (const p of all) {
    try {
      await (await p).dispose();
    } catch {}
  }
}

function describeError(e) {
  if (!(e instanceof Error)) return `non-Error ${typeof e}: ${String(e)}`;
  return `${e.name} code=${e.code} message=${JSON.stringify(e.message)}`;
}

function checkError(e, code, messagePattern, label) {
  assert.ok(e instanceof Error, `${label}: expected an Error with code ${code}, got ${describeError(e)}`);
  assert.equal(e.code, code, `${label}: expected code ${code}, got ${describeError(e)}`);
  if (messagePattern) {
    assert.match(e.message, messagePattern, `${label}: message should match ${messagePattern}`);
  }
}

// `fn` must return a promise that rejects (not throw synchronously) with `code`.
async function expectReject(fn, code, messagePattern, label = 'call') {
  let p;
  try {
    p = fn();
  } catch (e) {
    assert.fail(`${label}: threw synchronously (${describeError(e)}) instead of returning a rejected promise`);
  }
  assert.ok(p && typeof p.then === 'function', `${label}: did not return a promise`);
  let value;
  try {
    value = await p;
  } catch (e) {
    checkError(e, code, messagePattern, label);
    return e;
  }
  assert.fail(`${label}: resolved (${JSON.stringify(value && value.finishReason !== undefined ? { finishReason: value.finishReason, text: value.text } : value)}) instead of rejecting with ${code}`);
}

// `fn` must throw synchronously with `code`.
function expectThrow(fn, code, messagePattern, label = 'call') {
  try {
    fn();
  } catch (e) {
    checkError(e, code, messagePattern, label);
    return e;
  }
  assert.fail(`${label}: did not throw (expected ${code})`);
}

// stream() may report a bad call by throwing at once or through the iterator; either
// way `.result` (when there is one) must reject with the same code.
async function expectStreamError(fn, code, messagePattern, label = 'stream') {
  let s;
  try {
    s = fn();
  } catch (e) {
    checkError(e, code, messagePattern, `${label} (sync throw)`);
    return;
  }
  let iterError = null;
  let chunks = 0;
  try {
    for await (const _ of s) chunks++; // eslint-disable-line no-unused-vars
  } catch (e) {
    iterError = e;
  }
  assert.ok(iterError, `${label}: iteration ended without an error after ${chunks} chunks (expected ${code})`);
  checkError(iterError, code, messagePattern, `${label} (iterator)`);
  assert.equal(chunks, 0, `${label}: ${chunks} chunks came before the error`);
  await expectReject(() => s.result, code, messagePattern, `${label} (.result)`);
}

// Our GenerationResult against MLX-LM's (mlx_lm_ref.py): same tokens (EOS excluded),
// text, finish reason and prompt length.
function assertSameGeneration(got, ref, label) {
  assert.ok(!ref.error, `${label}: the reference failed: ${ref.error}`);
  assert.deepEqual(got.tokens, ref.tokens, `${label}: tokens differ (first difference at ${firstDiff(got.tokens, ref.tokens)})`);
  assert.equal(got.text, ref.text, `${label}: text differs`);
  assert.equal(got.finishReason, ref.finishReason, `${label}: finishReason`);
  assert.equal(got.promptTokens, ref.promptTokens, `${label}: promptTokens`);
}

function firstDiff(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return `index ${i}: got ${a[i]}, want ${b[i]}`;
  return a.length === b.length ? 'none' : `length: got ${a.length}, want ${b.length}`;
}

// A copy of a fixture folder in a temp dir. Plain copies, never hard links: tests
// rewrite files of the copy, which must not reach the fixture.
function copyFixture(name) {
  const src = fixturePath(name);
  const dst = fs.mkdtempSync(path.join(os.tmpdir(), `mlx-node-test-${name}-`));
  for (const f of fs.readdirSync(src)) fs.copyFileSync(path.join(src, f), path.join(dst, f));
  return dst;
}

// Runs Python code in the reference venv (mlx available); throws with its stderr on failure.
function venvPython(code, args = []) {
  const { python, env } = ensureVenv();
  const r = spawnSync(python, ['-c', code, ...args], { env, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`python failed (exit ${r.status}): ${r.stderr}`);
  return r.stdout;
}

// Resolves to `value` after `ms` without keeping the process alive (for Promise.race).
function unrefDelay(ms, value = null) {
  return new Promise((resolve) => setTimeout(() => resolve(value), ms).unref());
}

function hasReplacementChar(s) {
  return s.includes('\uFFFD');
}

module.exports = {
  EOS_IDS,
  IM_END,
  ENDOFTEXT,
  NO_EOS,
  fixtures,
  fixturePath,
  useFamilyFixtures,
  model,
  disposeModels,
  expectReject,
  expectThrow,
  expectStreamError,
  assertSameGeneration,
  firstDiff,
  copyFixture,
  venvPython,
  hasReplacementChar,
  describeError,
  unrefDelay,
};
