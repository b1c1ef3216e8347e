'use strict';
// `npm run release`: the napi-rs style prebuilt package for this platform, and the main package.
// Builds the addon and lays out npm/<triple>/: the addon, libmlx and the libraries the MLX
// wheel ships beside it, in the wheel's own relative places (the addon finds mlx/lib through
// its $ORIGIN / @loader_path rpath, libmlx finds ../../mlx_cpu.libs through its own), so it
// loads with no Rust, no MLX download and no LD_LIBRARY_PATH. Then packs both packages.
// The main package gets its optionalDependencies on the platform packages only in the packed
// copy (as `napi prepublish` adds them at publish time): in the committed package.json an
// unpublished optional dependency would send every install of the repository to the registry.
//   --publish       npm publish this platform's package
//   --publish-main  npm publish the main package (once, after every target's platform package)
const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { build } = require('./build');
const { ensureMlx, ROOT, log } = require('./mlx');
const { platformTriple, ADDON_FILE } = require('../lib/native');

const PKG = require('../package.json');
const OUT = path.join(ROOT, 'npm');

// napi.targets holds Rust target triples; the packages are named by Node's platform-arch[-abi].
function nodeTriple(rustTarget) {
  const [arch, , os, abi] = rustTarget.split('-');
  const cpu = { x86_64: 'x64', aarch64: 'arm64' }[arch];
  const platform = { darwin: 'darwin', linux: 'linux', windows: 'win32' }[os];
  if (!cpu || !platform) throw new Error(`unsupported napi target ${rustTarget}`);
  return [platform, cpu, abi].filter(Boolean).join('-');
}

// npm pack of a folder into dest; returns the tarball's path and size in bytes.
function pack(dir, dest) {
  const out = execFileSync('npm', ['pack', '--json', '--pack-destination', dest], {
    cwd: dir,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const [info] = JSON.parse(out);
  const file = path.join(dest, info.filename);
  return { file, size: fs.statSync(file).size };
}

function copyFiles(from, to) {
  fs.mkdirSync(to, { recursive: true });
  for (const f of fs.readdirSync(from)) {
    // Files only (libmlx, mlx.metallib on macOS); links are followed, folders (cmake) skipped.
    if (fs.statSync(path.join(from, f)).isFile()) fs.copyFileSync(path.join(from, f), path.join(to, f));
  }
}

// Linux: with no LD_LIBRARY_PATH, no library may come from the folders the package was
// filled from (the absolute rpath of a local build still names them) and none may be missing.
function checkSelfContained(dir, sources) {
  if (process.platform !== 'linux') return;
  const env = { ...process.env };
  delete env.LD_LIBRARY_PATH;
  const ldd = execFileSync('ldd', [path.join(dir, ADDON_FILE)], { encoding: 'utf8', env });
  for (const [, name, where] of ldd.matchAll(/^\s*(\S+) => (.+?)(?: \(0x[0-9a-f]+\))?$/gm)) {
    if (where === 'not found' || sources.some((s) => path.resolve(where).startsWith(s + path.sep))) {
      throw new Error(`the packaged addon would load ${name} from ${where === 'not found' ? 'nowhere' : where}, not from ${dir}`);
    }
  }
}

// Writes the platform package for this machine into outDir (replacing it) and returns outDir.
function packagePlatform({ outDir = path.join(OUT, platformTriple()) } = {}) {
  const triple = platformTriple();
  const addon = build({ quiet: true });
  const prefix = ensureMlx();
  const wheelRoot = path.dirname(prefix);
  fs.rmSync(outDir, { recursive: true, force: true });
  copyFiles(path.join(prefix, 'lib'), path.join(outDir, 'mlx', 'lib'));
  fs.copyFileSync(addon, path.join(outDir, ADDON_FILE));
  fs.copyFileSync(path.join(ROOT, 'LICENSE'), path.join(outDir, 'LICENSE'));
  const files = [ADDON_FILE, 'mlx/', 'LICENSE'];
  const sources = [path.join(prefix, 'lib')];
  for (const d of fs.readdirSync(wheelRoot)) {
    // auditwheel's vendored libraries (mlx_cpu.libs: LAPACK, BLAS, gfortran) and MLX's licence.
    if (d.endsWith('.libs')) {
      copyFiles(path.join(wheelRoot, d), path.join(outDir, d));
      files.push(`${d}/`);
      sources.push(path.join(wheelRoot, d));
    } else if (d.endsWith('.dist-info') && fs.existsSync(path.join(wheelRoot, d, 'licenses'))) {
      copyFiles(path.join(wheelRoot, d, 'licenses'), path.join(outDir, 'mlx', 'licenses'));
    }
  }
  const [os, cpu, abi] = triple.split('-');
  const manifest = {
    name: `mlx-node-${triple}`,
    version: PKG.version,
    description: `The ${triple} native addon of mlx-node, with the MLX library it links`,
    license: PKG.license,
    os: [os],
    cpu: [cpu],
    ...(abi && os === 'linux' ? { libc: [abi === 'gnu' ? 'glibc' : abi] } : {}),
    main: ADDON_FILE,
    files,
    engines: PKG.engines,
  };
  fs.writeFileSync(path.join(outDir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  checkSelfContained(outDir, sources);
  return outDir;
}

// Packs the main package into dest with optionalDependencies on every napi target's platform
// package; returns the tarball and the unpacked folder it was made from.
function packMain(dest) {
  const dir = path.join(dest, PKG.name);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  const plain = pack(ROOT, dest);
  execFileSync('tar', ['xzf', plain.file, '-C', dir, '--strip-components=1']);
  fs.rmSync(plain.file);
  const manifestPath = path.join(dir, 'package.json');
  const manifest = JSON.parse(fs.readFileSync(manifestPath, 'utf8'));
  manifest.optionalDependencies = Object.fromEntries(
    PKG.napi.targets.map((t) => [`${PKG.name}-${nodeTriple(t)}`, PKG.version])
  );
  fs.writeFileSync(manifestPath, `${JSON.stringify(manifest, null, 2)}\n`);
  return { dir, ...pack(dir, dest) };
}

function main(args) {
  const platform = packagePlatform();
  const platformTgz = pack(platform, OUT);
  const mainTgz = packMain(OUT);
  const mb = (n) => `${(n / 1e6).toFixed(1)} MB`;
  log(`platform package ${path.relative(ROOT, platform)}: ${path.relative(ROOT, platformTgz.file)} (${mb(platformTgz.size)})`);
  log(`main package: ${path.relative(ROOT, mainTgz.file)} (${mb(mainTgz.size)}), optionalDependencies on ${PKG.napi.targets.map(nodeTriple).join(', ')}`);
  if (args.includes('--publish')) execFileSync('npm', ['publish', platformTgz.file], { stdio: 'inherit' });
  if (args.includes('--publish-main')) execFileSync('npm', ['publish', mainTgz.file], { stdio: 'inherit' });
  if (!args.includes('--publish') && !args.includes('--publish-main')) {
    log('to publish: on each napi target (package.json napi.targets) run `npm run release -- --publish`,');
    log('then, once, on any of them: `npm run release -- --publish-main`');
  }
}

module.exports = { nodeTriple, pack, packagePlatform, checkSelfContained, packMain };

if (require.main === module) {
  try {
    main(process.argv.slice(2));
  } catch (e) {
    console.error(`[mlx-node] release failed: ${e.message}`);
    process.exit(1);
  }
}
