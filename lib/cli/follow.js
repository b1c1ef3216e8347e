'use strict';
// Under `mlx-node launch`, commands whose calls reach rank 0 alone (serve's HTTP requests, chat's
// stdin) load their model led by rank 0 (loadModel's distributed.leader); every other rank loads
// its part and follows rank 0's every step (docs/distributed.md).

// The distributed option `mlx-node launch` asks for through the environment, or undefined.
function launched({ leader = false } = {}) {
  const backend = process.env.MLX_NODE_DISTRIBUTED;
  if (!backend) return undefined;
  return { backend, strategy: process.env.MLX_NODE_DISTRIBUTED_STRATEGY || 'tensor', ...(leader ? { leader: true } : {}) };
}

// Whether this process is a rank other than 0 of a command led by rank 0.
function isFollower(distributed) {
  return Boolean(distributed?.leader) && process.env.MLX_RANK !== '0';
}

// A rank other than 0: loads its part and follows rank 0 until rank 0's model is disposed, then
// exits. A first of `signals` waits for that (rank 0 gets one too); a second leaves. Others
// are ignored (a chat's Ctrl-C, which the terminal sends every rank, is rank 0's to act on).
async function follow(dir, distributed, options, log, signals = ['SIGINT', 'SIGTERM']) {
  const { loadModel } = require('../..');
  let waiting = false;
  const onSignal = () => {
    if (waiting) process.exit(130);
    waiting = true;
  };
  for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, signals.includes(signal) ? onSignal : () => {});
  const model = await loadModel(dir, { ...options, distributed });
  log(`rank ${model.info.distributed.rank}: following rank 0`);
  await model.follow();
  await model.dispose();
  process.exit(0);
}

module.exports = { launched, isFollower, follow };
