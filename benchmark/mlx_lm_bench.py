"""Long-lived MLX-LM worker for benchmark/run.js.

Reads one JSON request per line on stdin and answers each with one JSON line on
stdout (anything the libraries print goes to stderr). Requests:

  {"cmd": "info"}
      -> {"mlx", "mlxLm", "blas", "python"}
  {"cmd": "load", "model": folder}
      -> {"seconds"}; as mlx_lm.load (load_model, then the tokenizer with the
      config's EOS ids). Replaces the model loaded before.
  {"cmd": "generate", "input": str | [ids], "options": {...}, "timestamps": bool}
      -> {"tokens", "text", "finishReason", "promptTokens", "generationTokens",
          "promptTps", "generationTps", "peakMemory", "wallSeconds", "tailSeconds",
          ["tokenTimes"]}
      Exactly mlx_lm.stream_generate with make_sampler / make_logits_processors
      built from the camelCase options as __test__/ref/mlx_lm_ref.py maps them.
      promptTps, generationTps and peakMemory (bytes) are MLX-LM's own figures from
      the final GenerationResponse; the peak is reset before each request, as the
      addon resets it per generation. tokenTimes: seconds from the call to each
      response, one per generated token. tailSeconds: how long the decode step
      stream_generate queues past the last token ran on after it returned
      (waited for before answering, outside every figure).

Errors answer {"error": message}; the worker keeps running.
"""

import sys
import time
from importlib.metadata import version
from pathlib import Path

import worker_protocol  # noqa: E402  (first: stdout is for answers only)

import mlx.core as mx  # noqa: E402
from mlx_lm.generate import generation_stream, stream_generate  # noqa: E402
from mlx_lm.utils import load_config, load_model, load_tokenizer  # noqa: E402

# The option mapping is the parity reference's own, so both runs mean the same thing.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "__test__" / "ref"))
from mlx_lm_ref import KNOWN_OPTIONS, build_sampling, option  # noqa: E402

state = {"model": None, "tokenizer": None}


def blas_in_use():
    if sys.platform != "linux":
        return "n/a"
    with open("/proc/self/maps") as f:
        maps = f.read()
    if "openblas" in maps:
        return "openblas"
    return "reference (libblas from the mlx-cpu wheel)" if "libblas" in maps else "unknown"


def cmd_info(_req):
    return {
        "mlx": mx.__version__,
        "mlxLm": version("mlx-lm"),
        "blas": blas_in_use(),
        "python": sys.version.split()[0],
        "device": str(mx.default_device()),
    }


def cmd_load(req):
    path = Path(req["model"]).resolve()
    t0 = time.perf_counter()
    state["model"] = state["tokenizer"] = None
    mx.clear_cache()
    model, _ = load_model(path)
    config = load_config(path)
    tokenizer = load_tokenizer(path, eos_token_ids=config.get("eos_token_id"))
    mx.eval(model.parameters())
    state["model"], state["tokenizer"] = model, tokenizer
    return {"seconds": time.perf_counter() - t0}


def cmd_generate(req):
    model, tokenizer = state["model"], state["tokenizer"]
    if model is None:
        raise RuntimeError("no model loaded")
    options = req.get("options") or {}
    unknown = set(options) - KNOWN_OPTIONS
    if unknown:
        raise ValueError(f"unknown options: {sorted(unknown)}")
    prompt = req["input"]
    sampler, processors = build_sampling(options, tokenizer)
    if options.get("seed") is not None:
        mx.random.seed(int(options["seed"]))
    want_times = bool(req.get("timestamps"))

    mx.reset_peak_memory()
    tokens, chunks, times, last = [], [], [], None
    t0 = time.perf_counter()
    for response in stream_generate(
        model,
        tokenizer,
        prompt,
        max_tokens=int(option(options, "maxTokens", 256)),
        sampler=sampler,
        logits_processors=processors,
    ):
        if want_times:
            times.append(time.perf_counter() - t0)
        chunks.append(response.text)
        last = response
        if response.finish_reason != "stop":
            tokens.append(response.token)
    wall = time.perf_counter() - t0
    # stream_generate queues one decode step past the last token (async_eval
    # before yielding) and returns while it still runs. Left running, it would
    # compete with the other side's next timed run in the interleaved
    # benchmark; it is waited for here, outside the timing.
    t_tail = time.perf_counter()
    mx.synchronize(generation_stream)
    tail = time.perf_counter() - t_tail
    out = {
        "tokens": tokens,
        "text": "".join(chunks),
        "finishReason": last.finish_reason,
        "promptTokens": last.prompt_tokens,
        "generationTokens": last.generation_tokens,
        "promptTps": last.prompt_tps,
        "generationTps": last.generation_tps,
        # GenerationResponse.peak_memory is mx.get_peak_memory() / 1e9.
        "peakMemory": round(last.peak_memory * 1e9),
        "wallSeconds": wall,
        "tailSeconds": tail,
    }
    if want_times:
        out["tokenTimes"] = times[: len(tokens)]
    return out


COMMANDS = {"info": cmd_info, "load": cmd_load, "generate": cmd_generate}


def main():
    worker_protocol.serve(COMMANDS)


if __name__ == "__main__":
    main()
