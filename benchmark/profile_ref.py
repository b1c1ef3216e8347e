"""MLX-LM's side of `npm run bench -- --profile`: the decode step of
benchmark/sampling/src/profile.rs, timed the same way with MLX-LM's own model,
cache, sampler and logits processors.

Usage: profile_ref.py MODEL_DIR [TOKENS]

Same prompt ids (91, (i * 7919 + 13) % vocab), options and seed as the Rust rows.
Serialized: each stage evaluated on its own (building the forward graph, running
it, building the sampling graph, running it). Pipelined: as MLX-LM's
generate_step, the next step queued (`mx.async_eval`) before the current id is
read; the time per token and the part of it spent blocked in `async_eval`.
"""

import sys
import time
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.sample_utils import make_logits_processors, make_sampler
from mlx_lm.utils import load_model

PROMPT_TOKENS = 91
SEED = 42


def configurations():
    greedy = (lambda lp: mx.argmax(lp, axis=-1), [])
    full = (
        make_sampler(temp=0.7, top_p=0.9, min_p=0.05, top_k=40),
        make_logits_processors(repetition_penalty=1.1),
    )
    return [("greedy", greedy), ("full sampling", full)]


def run(model, prompt, sampler, processors, tokens):
    def ms(t):
        return (time.perf_counter() - t) * 1e3

    def sample(logits, history):
        for p in processors:
            logits = p(history, logits)
        return sampler(logits - mx.logsumexp(logits, axis=-1, keepdims=True))

    def start():
        mx.random.seed(SEED)
        cache = make_prompt_cache(model)
        model(prompt[None, :-1], cache=cache)
        mx.eval([c.state for c in cache])
        history = prompt
        y = sample(model(prompt[None, -1:], cache=cache)[:, -1, :], history)
        y.item()
        return cache, history, y

    cache, history, y = start()
    t = [0.0] * 4
    for _ in range(tokens):
        s = time.perf_counter()
        logits = model(y[:, None], cache=cache)[:, -1, :]
        t[0] += ms(s)
        s = time.perf_counter()
        mx.eval(logits)
        t[1] += ms(s)
        s = time.perf_counter()
        history = mx.concatenate([history, y]) if processors else history
        nxt = sample(logits, history)
        t[2] += ms(s)
        s = time.perf_counter()
        mx.eval(nxt)
        t[3] += ms(s)
        nxt.item()
        y = nxt

    cache, history, y = start()
    queue, t0 = 0.0, time.perf_counter()
    for _ in range(tokens):
        logits = model(y[:, None], cache=cache)[:, -1, :]
        history = mx.concatenate([history, y]) if processors else history
        nxt = sample(logits, history)
        s = time.perf_counter()
        mx.async_eval(nxt)
        queue += ms(s)
        y.item()
        y = nxt
    y.item()
    total = ms(t0)
    return [x / tokens for x in t] + [total / tokens, queue / tokens]


def main():
    path = Path(sys.argv[1])
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    model, _ = load_model(path)
    vocab = model.args.vocab_size
    prompt = mx.array([(i * 7919 + 13) % vocab for i in range(PROMPT_TOKENS)])
    print(f"\nMLX-LM's side (benchmark/profile_ref.py, {mx.default_device()}):\n")
    print("| configuration | sampling | forward graph | forward run | sampling graph | sampling run | serialized sum | pipelined per token | of it blocked queuing |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|")
    for name, (sampler, processors) in configurations():
        run(model, prompt, sampler, processors, 2)  # warm-up: compiles, and on a GPU JIT-builds kernels
        r = run(model, prompt, sampler, processors, tokens)
        cells = " | ".join(f"{x:.2f}" for x in r[:4] + [sum(r[:4])] + r[4:])
        print(f"| {name} | MLX-LM | {cells} |", flush=True)


if __name__ == "__main__":
    main()
