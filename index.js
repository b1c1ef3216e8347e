'use strict';
// Public entry point. Loads the native addon and adds the JS-side API surface.
const { loadNative } = require('./lib/native-loader');

const native = loadNative();

function mlxInfo() {
  return native.mlxInfo();
}

module.exports = { mlxInfo };
