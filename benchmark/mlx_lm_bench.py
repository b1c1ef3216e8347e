"""Long-lived MLX-LM worker for benchmark/run.js and benchmark/chat.js.

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

  {"cmd": "chat", "ids": [ids], "options": {...}, "reset": bool}
      -> {"tokens", "text", "finishReason", "promptTokens",
          "cachedTokens", "processedTokens", "promptTps", "promptSeconds",
          "firstTokenSeconds", "generationTokens", "generationTps",
          "wallSeconds", "tailSeconds", "cacheLength"}
      One turn of a chat kept in one prompt cache, reused as mlx_lm.server
      reuses its caches: "ids" is the whole conversation (benchmark/chat.js
      sends the ids mlx-node's Chat ran, so that both sides answer the same
      conversation), the cache (make_prompt_cache, kept between requests;
      "reset" starts a new one) is cut back to the longest common prefix with
      the ids it holds (at most all but the last prompt id, trim_prompt_cache,
      as LRUPromptCache.fetch_nearest_cache), and stream_generate runs the
      rest on it. Afterwards the cache holds the prompt and every generated id
      (EOS included), as the server's cache key. promptSeconds = processed /
      MLX-LM's promptTps (its own time to the first token, for the processed
      ids); firstTokenSeconds: from the request (prefix and trim included) to
      the first token. Unlike the server it keeps one cache and does not
      deep-copy it per request (benchmark/chat.js).

  {"cmd": "probe", "ids": [ids], "cached": n}
      -> {"promptSeconds", "promptTps", "processedTokens"}
      A new make_prompt_cache cache holding ids[:n] (one forward pass), then
      stream_generate of the rest on it, one token; promptSeconds = processed /
      MLX-LM's own promptTps (benchmark/chat.js times the check's two turns
      apart with it).

Errors answer {"error": message}; the worker keeps running.
"""

import sys
import time
from pathlib import Path

import worker_protocol  # noqa: E402  (first: stdout is for answers only)

import mlx.core as mx  # noqa: E402
from mlx_lm.generate import generation_stream, stream_generate  # noqa: E402
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache  # noqa: E402
from mlx_lm.utils import load_config, load_model, load_tokenizer  # noqa: E402

# The option mapping is the parity reference's own, so both runs mean the same thing.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "__test__" / "ref"))
from mlx_lm_ref import KNOWN_OPTIONS, build_sampling, common_prefix, option  # noqa: E402

state = {"model": None, "tokenizer": None, "chat": None}


def cmd_info(_req):
    return worker_protocol.info("mlxLm", "mlx-lm")


def cmd_load(req):
    path = Path(req["model"]).resolve()
    t0 = time.perf_counter()
    state["model"] = state["tokenizer"] = state["chat"] = None
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


def cmd_chat(req):
    model, tokenizer = state["model"], state["tokenizer"]
    if model is None:
        raise RuntimeError("no model loaded")
    options = req.get("options") or {}
    unknown = set(options) - KNOWN_OPTIONS
    if unknown:
        raise ValueError(f"unknown options: {sorted(unknown)}")
    if req.get("reset") or state["chat"] is None:
        state["chat"] = None
        mx.clear_cache()
        state["chat"] = {"cache": make_prompt_cache(model), "tokens": []}
    chat = state["chat"]
    sampler, processors = build_sampling(options, tokenizer)
    if options.get("seed") is not None:
        mx.random.seed(int(options["seed"]))

    mx.reset_peak_memory()
    tokens, chunks, last, first = [], [], None, None
    t0 = time.perf_counter()
    prompt = [int(x) for x in req["ids"]]
    cache, held = chat["cache"], chat["tokens"]
    # LRUPromptCache.fetch_nearest_cache: keep the common prefix, but at least
    # one prompt id is processed (the logits of the first new token need it).
    prefix = min(len(prompt) - 1, common_prefix(held, prompt))
    if len(held) > prefix:
        trimmed = trim_prompt_cache(cache, len(held) - prefix)
        if trimmed != len(held) - prefix:
            raise RuntimeError(f"trimmed {trimmed} of {len(held) - prefix} positions")
    key = list(prompt)
    rest = prompt[prefix:]
    for response in stream_generate(
        model,
        tokenizer,
        rest,
        max_tokens=int(option(options, "maxTokens", 256)),
        sampler=sampler,
        logits_processors=processors,
        prompt_cache=cache,
    ):
        if first is None:
            first = time.perf_counter() - t0
        chunks.append(response.text)
        last = response
        # As the server's cache key: every id stream_generate fed, EOS included.
        key.append(response.token)
        if response.finish_reason != "stop":
            tokens.append(response.token)
    wall = time.perf_counter() - t0
    # Outside the timing, as cmd_generate: the queued step past the last token.
    t_tail = time.perf_counter()
    mx.synchronize(generation_stream)
    tail = time.perf_counter() - t_tail
    chat["tokens"] = key
    length = cache[0].offset
    if length != len(key):
        raise RuntimeError(f"the cache holds {length} positions, its key {len(key)} ids")
    return {
        "tokens": tokens,
        "text": "".join(chunks),
        "finishReason": last.finish_reason,
        "promptTokens": len(prompt),
        "cachedTokens": prefix,
        "processedTokens": last.prompt_tokens,
        "promptTps": last.prompt_tps,
        "promptSeconds": last.prompt_tokens / last.prompt_tps,
        "firstTokenSeconds": first,
        "generationTokens": last.generation_tokens,
        "generationTps": last.generation_tps,
        "peakMemory": round(last.peak_memory * 1e9),
        "wallSeconds": wall,
        "tailSeconds": tail,
        "cacheLength": length,
    }


def cmd_probe(req):
    model, tokenizer = state["model"], state["tokenizer"]
    if model is None:
        raise RuntimeError("no model loaded")
    ids, n = req["ids"], int(req["cached"])
    if not 0 <= n < len(ids):
        raise ValueError(f"cached must be in [0, {len(ids)}), got {n}")
    cache = make_prompt_cache(model)
    if n:
        model(mx.array(ids[:n])[None], cache=cache)
        mx.eval([c.state for c in cache])
    last = None
    for response in stream_generate(model, tokenizer, ids[n:], max_tokens=1, prompt_cache=cache):
        last = response
    mx.synchronize(generation_stream)
    return {
        "promptSeconds": last.prompt_tokens / last.prompt_tps,
        "promptTps": last.prompt_tps,
        "processedTokens": last.prompt_tokens,
    }


COMMANDS = {"info": cmd_info, "load": cmd_load, "generate": cmd_generate, "chat": cmd_chat, "probe": cmd_probe}


def main():
    worker_protocol.serve(COMMANDS)


if __name__ == "__main__":
    main()
