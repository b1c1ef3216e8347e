"""MLX-LM's own sampling functions, timed as reference rows for `npm run bench -- --sampling`.

Usage: sampling_ref.py CHECK_DIR

The inputs are those of benchmark/sampling (the Rust micro-benchmarks): the same MLX
random keys give the same rows here. Before anything is timed, each MLX-LM function's
output is checked against the baseline output the Rust benchmark wrote into CHECK_DIR
(bit for bit for logits and masks, the same token for the samplers); a mismatch stops
the run. Timing follows the Rust side: warm-up, then the mean and standard deviation of
RUNS calls, each ending with a host sync (`item()` or `eval`).
"""

import json
import statistics
import sys
import time
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm.sample_utils import apply_top_p, make_logits_processors, make_sampler

VOCAB = 151936
RUNS = 30
WARMUP = 5


def stats(name, f):
    for _ in range(WARMUP):
        f()
    t = []
    for _ in range(RUNS):
        s = time.perf_counter()
        f()
        t.append((time.perf_counter() - s) * 1e6)
    print(f"| {name} | {statistics.mean(t):.1f} | {statistics.stdev(t):.1f} |")


def logits(scale=2.0):
    x = mx.random.normal((1, VOCAB), scale=scale, key=mx.random.key(7))
    mx.eval(x)
    return x


def logprobs(scale=2.0):
    x = logits(scale)
    lp = x - mx.logsumexp(x, keepdims=True)
    mx.eval(lp)
    return lp


def same_bits(a, file):
    want = np.fromfile(file, dtype="<f4").view(np.uint32)
    got = np.array(a.astype(mx.float32)).reshape(-1).view(np.uint32)
    if not np.array_equal(got, want):
        raise SystemExit(f"MLX-LM's output differs from the Rust baseline in {file.name}")


def repetition_penalty(check):
    print("\n### Repetition penalty 1.1 over a 20-token context (MLX-LM)\n\n| method | mean us | sd us |\n|---|---|---|")
    x = logits()
    ctx = mx.array([(i * 7919 + 13) % VOCAB for i in range(20)])
    (proc,) = make_logits_processors(repetition_penalty=1.1, repetition_context_size=20)
    same_bits(proc(ctx, x), check / "repetition-penalty.f32")
    stats("make_repetition_penalty processor", lambda: mx.eval(proc(ctx, x)))


def top_p(check):
    for label, file, scale in [("flat row", "top-p-flat.f32", 2.0), ("peaked row", "top-p-peaked.f32", 20.0)]:
        lp = logprobs(scale)
        print(f"\n### Top-p 0.9 mask, {label} (MLX-LM)\n\n| method | mean us | sd us |\n|---|---|---|")
        same_bits(apply_top_p(lp, 0.9), check / file)
        stats("apply_top_p (compiled)", lambda: mx.eval(apply_top_p(lp, 0.9)))
        mx.disable_compile()
        stats("apply_top_p, not compiled", lambda: mx.eval(apply_top_p(lp, 0.9)))
        mx.enable_compile()


CHAINS = [
    ("greedy (argmax)", dict(temp=0.0)),
    ("temperature 0.7 (categorical only)", dict(temp=0.7)),
    ("+ top-p 0.9", dict(temp=0.7, top_p=0.9)),
    ("+ min-p 0.05", dict(temp=0.7, min_p=0.05)),
    ("+ top-k 40", dict(temp=0.7, top_k=40)),
    ("full: top-p 0.9, min-p 0.05, top-k 40", dict(temp=0.7, top_p=0.9, min_p=0.05, top_k=40)),
]


def chains(check):
    print("\n### Sampler chains on the flat row (MLX-LM's make_sampler)\n\n| method | mean us | sd us |\n|---|---|---|")
    want = json.loads((check / "chain-tokens.json").read_text())
    lp = logprobs()
    for name, kw in CHAINS:
        sampler = make_sampler(**kw)

        def draw():
            mx.random.seed(3)
            return sampler(lp).item()

        if draw() != want[name]:
            raise SystemExit(f"{name}: MLX-LM draws {draw()}, the Rust baseline {want[name]}")
        stats(f"{name}: compiled", draw)
        if kw["temp"] != 0.0:
            mx.disable_compile()
            if draw() != want[name]:
                raise SystemExit(f"{name}: MLX-LM uncompiled draws another token")
            stats(f"{name}: not compiled", draw)
            mx.enable_compile()


def main():
    check = Path(sys.argv[1])
    print(f"MLX-LM's functions on MLX {mx.__version__}, {mx.default_device()}; {RUNS} runs after {WARMUP} warm-up")
    repetition_penalty(check)
    top_p(check)
    chains(check)
    lp = logprobs()
    print("\n### Greedy pick (MLX-LM)\n\n| method | mean us | sd us |\n|---|---|---|")
    stats("mx.argmax + item", lambda: mx.argmax(lp, axis=-1).item())


if __name__ == "__main__":
    main()
