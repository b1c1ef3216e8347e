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

test('loading the addon sets OPENBLAS_THREAD_TIMEOUT unless the user has set it', () => {
  const { spawnSync } = require('node:child_process');
  const { OPENBLAS_THREAD_TIMEOUT } = require('../lib/native-loader');
  const read = (value) => {
    const env = { ...process.env };
    delete env.OPENBLAS_THREAD_TIMEOUT;
    if (value !== undefined) env.OPENBLAS_THREAD_TIMEOUT = value;
    const r = spawnSync(process.execPath, ['-e', "require('.'); process.stdout.write(process.env.OPENBLAS_THREAD_TIMEOUT)"], {
      cwd: require('node:path').join(__dirname, '..'),
      env,
      encoding: 'utf8',
    });
    assert.equal(r.status, 0, r.stderr);
    return r.stdout;
  };
  assert.equal(OPENBLAS_THREAD_TIMEOUT, '16');
  assert.equal(read(undefined), '16');
  assert.equal(read('24'), '24');
});
