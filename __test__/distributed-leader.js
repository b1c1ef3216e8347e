'use strict';
// One process of a model split with distributed.leader (distributed.test.js starts two). argv[2]:
//   { model, mode: 'work' | 'roles' | 'die' | 'solo' }
// Rank 0 makes the calls; rank 1 runs follow(). Every rank writes one JSON line to stdout.
// 'work': rank 0 runs concurrent, cached, trimmed, seeded and aborted generations (maxBatch 4)
//   around an idle spell whose bounds it reports; rank 1 reports its CPU time, sampled, so the
//   test can see what following costs while rank 0 is idle.
// 'roles': each rank tries the calls its role rules out and reports the errors.
// 'die': rank 0 is killed right after loading; rank 1 reports how follow() ended.
// 'solo': one process, not split, runs what rank 0 runs in 'work' (the expected tokens).
const { loadModel } = require('..');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const err = (e) => ({ code: e.code, message: e.message });

async function attempt(f) {
  try {
    await f();
    return { ok: true };
  } catch (e) {
    return err(e);
  }
}

async function leaderWork(m) {
  const out = {};
  out.concurrent = (
    await Promise.all([
      m.generate([1, 2, 3, 4], { maxTokens: 16 }),
      m.generate('Hello there', { maxTokens: 12, temperature: 0.8, topP: 0.9, seed: 3 }),
      m.generate([5, 6, 7], { maxTokens: 20 }),
      m.generate([{ role: 'user', content: 'Name a river.' }], { maxTokens: 10 }),
      m.generate([8, 9], { maxTokens: 6 }),
    ])
  ).map((r) => r.tokens);
  out.idle = [Date.now()];
  await sleep(3000);
  out.idle.push(Date.now());
  const cache = m.createPromptCache();
  const first = await m.generate([9, 8, 7, 6, 5, 4], { maxTokens: 8, promptCache: cache });
  const next = [9, 8, 7, 6, 5, 4, ...first.tokens, 11, 12];
  const second = await m.generate(next, { maxTokens: 8, promptCache: cache });
  const trimmed = cache.trim(5);
  const third = await m.generate(next, { maxTokens: 8, promptCache: cache });
  cache.dispose();
  out.cached = { first: first.tokens, second: [second.tokens, second.cachedTokens], trimmed, third: [third.tokens, third.cachedTokens] };
  const ac = new AbortController();
  const s = m.stream([1, 2, 3], { maxTokens: 200, signal: ac.signal, stopOnAbortSignal: true });
  let n = 0;
  for await (const _ of s) if (++n === 3) ac.abort();
  const aborted = await s.result;
  out.aborted = { finishReason: aborted.finishReason, tokens: aborted.tokens.length };
  out.after = (await m.generate([1, 2, 3, 4], { maxTokens: 16 })).tokens;
  return out;
}

async function main() {
  const { model, mode } = JSON.parse(process.argv[2]);
  if (mode === 'solo') {
    const alone = await loadModel(model, { maxBatch: 4 });
    process.stdout.write(`${JSON.stringify(await leaderWork(alone))}\n`);
    return alone.dispose();
  }
  const m = await loadModel(model, { distributed: { backend: 'ring', leader: true, timeout: 60000 }, maxBatch: 4 });
  const { rank } = m.info.distributed;
  const out = { rank, info: m.info.distributed };
  // Killed, not exited: an exit would dispose the model, which ends the followers cleanly.
  if (mode === 'die' && rank === 0) process.kill(process.pid, 'SIGKILL');
  if (rank === 0) {
    if (mode === 'work') Object.assign(out, await leaderWork(m));
    if (mode === 'roles') {
      out.follow = await attempt(() => m.follow());
      out.prefill = await attempt(() => m.createPromptCache().prefill([1, 2, 3]));
      out.loadPromptCache = await attempt(() => m.loadPromptCache(__filename));
      out.generate = (await m.generate([1, 2, 3], { maxTokens: 3 })).tokens.length;
    }
    await m.dispose();
  } else {
    if (mode === 'roles') {
      out.generate = await attempt(() => m.generate([1, 2, 3], { maxTokens: 3 }));
      out.createPromptCache = await attempt(() => m.createPromptCache());
    }
    const cpu = [];
    const timer = setInterval(() => {
      const u = process.cpuUsage();
      cpu.push([Date.now(), (u.user + u.system) / 1000]);
    }, 100);
    out.follow = await attempt(() => m.follow());
    clearInterval(timer);
    out.cpu = cpu;
    await m.dispose();
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

main().catch((e) => {
  process.stderr.write(`${e.stack}\n`);
  process.exitCode = 1;
});
