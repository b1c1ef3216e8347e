'use strict';
// How the command line reports a failure: library errors with their code.
const { MlxNodeError } = require('../errors');

function describe(e) {
  if (e instanceof MlxNodeError) return `error: ${e.code}: ${e.message}`;
  if (e instanceof Error) return `error: ${e.message}`;
  return `error: ${String(e)}`;
}

module.exports = { describe };
