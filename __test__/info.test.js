'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { mlxInfo } = require('..');

test('mlxInfo reports the pinned MLX, the backend and the BLAS actually in use', () => {
  const info = mlxInfo();
  assert.equal(info.mlxVersion, '0.32.4');
  if (process.platform === 'linux' && process.env.MLX_NODE_BACKEND !== 'cuda') {
    assert.equal(info.backend, 'cpu');
    assert.match(info.device, /^cpu/);
    if (process.env.MLX_NODE_OPENBLAS !== 'none') {
      assert.equal(info.blas, 'openblas');
      assert.match(info.blasPath, /openblas/);
    }
  }
  assert.ok(['cpu', 'metal', 'cuda'].includes(info.backend));
});
