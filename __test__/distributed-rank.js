'use strict';
// One process of the distributed tests (distributed.test.js starts it, alone or as a rank
// with MLX_RANK and MLX_HOSTFILE set). argv[2] is a JSON request:
//   { cases: [{ model, input, options }], strategy?, timeout?, dieAfterLoad?: rank, split?: bool }
// Each case loads `model` (once per path; split across the ranks when MLX_RANK is set, unless
// `split` is false), runs generate(input, options) and reports { tokens, text, finishReason,
// distributed } or { error: code, message }. The results go to stdout as one JSON line.
// `dieAfterLoad`: that rank exits right after loading the first model, before generating.
const { loadModel } = require('..');

async function main() {
  const request = JSON.parse(process.argv[2]);
  const rank = process.env.MLX_RANK;
  const split = rank !== undefined && request.split !== false;
  const models = new Map();
  const results = [];
  for (const c of request.cases) {
    try {
      if (!models.has(c.model)) {
        const distributed = { backend: 'ring', strategy: request.strategy ?? 'tensor', timeout: request.timeout ?? 60000 };
        // Exact precision: compared with MLX-LM (quantized models default to fast).
        const options = split ? { distributed, precision: 'exact' } : { precision: 'exact' };
        models.set(c.model, await loadModel(c.model, options));
        if (request.dieAfterLoad !== undefined && String(request.dieAfterLoad) === rank) process.exit(0);
      }
      const m = models.get(c.model);
      const r = await m.generate(c.input, c.options ?? {});
      results.push({ tokens: r.tokens, text: r.text, finishReason: r.finishReason, distributed: m.info.distributed });
    } catch (e) {
      results.push({ error: e.code, message: e.message });
    }
  }
  for (const m of models.values()) await m.dispose();
  process.stdout.write(`${JSON.stringify(results)}\n`);
}

main().catch((e) => {
  process.stderr.write(`${e.stack}\n`);
  process.exitCode = 1;
});
