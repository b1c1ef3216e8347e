'use strict';
// One process of benchmark/distributed.js's mlx-node side: alone, or as a rank (MLX_RANK set:
// the model loads split across the ranks). argv: MODEL REQUEST_JSON, the request as in
// distributed_rank.py. One warm-up, then `reps` greedy generations; rank 0 prints one JSON
// line with the addon's own tok/s figures, MLX's peak memory and the process's resident set.
const { loadModel } = require('..');

async function main() {
  const [dir, request] = [process.argv[2], JSON.parse(process.argv[3])];
  const split = process.env.MLX_RANK !== undefined;
  // Exact precision (quantized models default to fast): MLX-LM's arithmetic, as its side runs.
  const model = await loadModel(dir, { precision: 'exact', ...(split ? { distributed: { backend: 'ring' } } : {}) });
  const logitBias = Object.fromEntries(request.block.map((t) => [t, -1e9]));
  const runs = [];
  for (let i = 0; i <= request.reps; i++) {
    const r = await model.generate(request.prompt, { maxTokens: i ? request.maxTokens : 8, logitBias });
    if (i) runs.push({ generationTps: r.generationTps, promptTps: r.promptTps, peakMemory: r.peakMemory, tokens: r.tokens.length });
  }
  const maxRss = process.resourceUsage().maxRSS * 1024;
  const { rank, size } = model.info.distributed ?? { rank: 0, size: 1 };
  await model.dispose();
  if (rank === 0) {
    process.stdout.write(`${JSON.stringify({ runs, maxRss, size })}\n`);
  }
}

main().catch((e) => {
  process.stderr.write(`${e.stack}\n`);
  process.exitCode = 1;
});
