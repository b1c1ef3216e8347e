'use strict';
// Names the native addon file the napi-rs way, mlx-node.<platform>-<arch>[-gnu].node,
// for the loader and the build and release scripts alike.
const path = require('node:path');

function platformTriple() {
  const { platform, arch } = process;
  if (platform === 'linux') {
    const glibc = process.report?.getReport?.().header?.glibcVersionRuntime;
    return `linux-${arch}-${glibc ? 'gnu' : 'musl'}`;
  }
  return `${platform}-${arch}`;
}

const ADDON_FILE = `mlx-node.${platformTriple()}.node`;
const ADDON_PATH = path.join(__dirname, '..', ADDON_FILE);

module.exports = { platformTriple, ADDON_FILE, ADDON_PATH };
