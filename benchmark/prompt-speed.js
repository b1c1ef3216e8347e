'use strict';
// Prompt speed of precision: 'fast' against 'exact' (issue 28): both loads of each model in one
// process, the same prompt ids (benchmark/llama.js's ~380-token PROMPT, no template) run as one
// prompt with one token generated, alternating exact and fast round by round so that the
// machine's other work falls on both alike. Prints per model the median (min-max) prompt tok/s
// of each mode, their per-round ratio, and the load average before and after.
//
// node benchmark/prompt-speed.js [--rounds N] MODEL_DIR...
const os = require('node:os');
const { loadModel } = require('..');
const { PROMPT } = require('./llama');

const median = (v) => {
  const s = [...v].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const range = (v) => `${median(v).toFixed(1)} (${Math.min(...v).toFixed(1)}-${Math.max(...v).toFixed(1)})`;
const load = () => os.loadavg().map((l) => l.toFixed(2)).join(' ');

async function main() {
  const args = process.argv.slice(2);
  const at = args.indexOf('--rounds');
  const rounds = at >= 0 ? Number(args.splice(at, 2)[1]) : 7;
  for (const dir of args) {
    const models = { exact: await loadModel(dir, { precision: 'exact' }), fast: await loadModel(dir, { precision: 'fast' }) };
    const ids = models.exact.encode(PROMPT, { addSpecialTokens: false });
    const tps = { exact: [], fast: [] };
    const before = load();
    // One warm-up each, then the rounds.
    for (let round = -1; round < rounds; round++) {
      for (const mode of ['exact', 'fast']) {
        const r = await models[mode].generate(ids, { maxTokens: 1 });
        if (r.cachedTokens !== 0) throw new Error(`${mode}: ${r.cachedTokens} prompt tokens came from a cache`);
        if (round >= 0) tps[mode].push(r.promptTps);
      }
    }
    const ratio = tps.fast.map((f, i) => f / tps.exact[i]);
    console.log(
      `${dir}: ${ids.length} prompt tokens, ${rounds} rounds; prompt tok/s exact ${range(tps.exact)}, fast ${range(tps.fast)}, ` +
        `fast / exact ${median(ratio).toFixed(2)} (${Math.min(...ratio).toFixed(2)}-${Math.max(...ratio).toFixed(2)}); load average ${before} -> ${load()}`,
    );
    await models.exact.dispose();
    await models.fast.dispose();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
