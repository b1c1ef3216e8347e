"""Live MLX-LM reference for the parity tests.

Reads one JSON object from stdin, {"cases": [...]}, and writes one JSON object to
stdout, {"results": [...]}, one result per case in order. A case that raises gets
{"error": message, "errorType": name} and the run goes on.

Under `mlx.launch` (a group of processes, every rank running this script) it takes two
arguments instead, `mlx_lm_ref.py REQUEST_FILE OUTPUT_FILE`: every rank reads the request,
models load as MLX-LM's distributed commands load them (`sharded_load`: tensor parallel),
every rank runs every case, and rank 0 writes the answer. With "strategy": "pipeline" in
the request, models load split into a pipeline instead (the model's `pipeline()`, as
sharded_load with a pipeline group).

Case kinds ("mode"):
  "generate" (default)
      {"model": folder, "input": str | [{role, content}...] | [ids], "options": {...}}
      -> {"tokens", "text", "finishReason", "promptTokens", "chunks", ["logprobs"]}
      Exactly mlx_lm.stream_generate: a string is encoded with MLX-LM's BOS rule, a
      message list goes through tokenizer.apply_chat_template(messages,
      add_generation_prompt=True), a list of ids is used as is. "tokens" are the
      generated ids without the EOS, "text" is the concatenation of the response
      segments, "chunks" those segments one by one (the last one is the flush).

      Options: the camelCase sampler / processor options below, "maxTokens",
      "logitBias", "seed" (mx.random.seed(seed) right before stream_generate), and
      "logprobs": bool, "topLogprobs": 0..20, which do not change generation.
      With "logprobs": true the result has "logprobs": [{"token", "logprob",
      "top": [{"token", "logprob"}...]}...], ONE ENTRY PER GenerationResponse, in
      order: when generation stopped on an EOS token the last entry is that EOS,
      so then len(logprobs) == len(tokens) + 1 (finishReason "stop"); otherwise
      len(logprobs) == len(tokens). "logprob" is response.logprobs[token]: MLX-LM's
      log-softmax of the logits after the logits processors (logitBias, penalties)
      and before the sampler (temperature, top-p... do not touch it). "top" holds
      the topLogprobs largest entries of that vector, by value descending, ties by
      lower token id first ([] when topLogprobs is 0 or absent). Values are python
      floats of the (float32 / bfloat16 / float16) values; a non-finite value would
      come as the string "-Infinity" / "Infinity" / "NaN" (JSON has no such number).

  "cached"
      {"model", "cache": {"maxKvSize"?, "kvBits"?, "kvGroupSize"? (64),
                          "quantizedKvStart"? (MLX-LM's DEFAULT_QUANTIZED_KV_START)}
                         | {"file": path, ("kvBits", "kvGroupSize", "quantizedKvStart")?},
       "prefill"?: input, "turns": [{"input": input | "extend": input, "options": {...}}...],
       "save"?: path, "saveMetadata"?: {str: str}}
      -> {"turns": [{"tokens", "text", "finishReason", "promptTokens", "chunks", "input",
                     "cachedTokens", "trimmed", "fresh", "cacheOffset", ["logprobs"]}...],
          "cacheTokens", "cacheOffset", "unknownPrefix", "classes", "nbytes"}
      One MLX-LM prompt cache (a list with one cache per layer) used for several
      generations, as mlx_lm.cache_prompt / mlx_lm.generate --prompt-cache-file /
      mlx_lm.server use it. Inputs (prefill and turns) take the same forms as in
      "generate" (a string, a message list or ids) and are turned into ids first.
      A turn with "extend" instead of "input" continues the conversation: its input
      is the known tokens the cache holds at that point (previous input + reply,
      and the EOS if the reply stopped on one) followed by "extend"'s ids. Each turn
      result has its "input" as ids.

      The cache: {"maxKvSize": n} -> make_prompt_cache(model, max_kv_size=n)
      (RotatingKVCache(max_size=n, keep=4) per layer); otherwise
      make_prompt_cache(model) (KVCache per layer). With "kvBits", kv_bits,
      kv_group_size and quantized_kv_start are passed to every generate_step call
      (prefill and turns): after a model call, each KVCache whose offset is >=
      quantizedKvStart is replaced by its QuantizedKVCache (to_quantized).
      (RotatingKVCache has no quantized form: MLX-LM raises NotImplementedError
      once it reaches quantizedKvStart. mx.quantize needs a group size of 32, 64 or
      128 dividing head_dim: the 16-wide heads of the small fixtures cannot be
      quantized at all; the "demo" fixture (head_dim 32) with kvGroupSize 32 can.)
      {"file": path} -> load_prompt_cache(path, return_metadata=True). If the
      metadata has "tokens" (a JSON list of ids, as "save" writes) the cache holds
      those tokens; otherwise it holds cache[0].offset tokens that are UNKNOWN (a
      file from mlx_lm.cache_prompt): "unknownPrefix" is that offset, the known
      list starts empty and the first turn's input simply continues the cache,
      nothing trimmed, as mlx_lm.generate --prompt-cache-file uses it.

      "prefill": run into the cache as mlx_lm.cache_prompt does,
      generate_step(ids, model, max_tokens=0, prompt_cache=cache, kv options): every
      prefill token is fed (appended to whatever the cache holds), none sampled.

      Each turn, with held = the known tokens the cache holds (after its unknown
      prefix, if any): prefix = the longest common prefix of held and the input;
      if prefix == len(input), prefix = len(input) - 1 (one token at least must be
      run to get logits); the cache is cut back to unknownPrefix + prefix
      positions with trim_prompt_cache(cache, len(held) - prefix), unless nothing
      has to go. When something has to go and can_trim_prompt_cache(cache) is
      false (a RotatingKVCache that has reached max_size), the cache is replaced by
      a fresh one of the same kind and prefix is 0 ("fresh": true; the unknown
      prefix goes too). "cachedTokens" = prefix, "trimmed" = how many positions were
      cut. Then exactly what "generate" does with input[prefix:] (seed, sampler,
      processors, logprobs), plus prompt_cache=cache and the kv options: so
      "promptTokens" counts only the uncached part, and MLX-LM's logits processors
      (penalties) see only input[prefix:] plus the generated tokens as their
      history, not the cached prefix. After the turn, held = (input + every
      generated token, a final EOS included)[:cache[0].offset - unknownPrefix]:
      derived from the cache's offset, not assumed. A RotatingKVCache past max_size
      keeps its offset counting every position fed, so held lists every token fed
      even though the cache only keeps the first 4 and the last max_size - 4.
      "cacheOffset" (per turn and at the end) is cache[0].offset (the first layer with an
      offset: an LFM2 convolution layer's ArraysCache has none).

      How the last generated token reaches the cache (generate_step): the prompt
      step feeds input[prefix:] and samples y0; then, in the loop, the step that
      feeds y_n (and computes y_{n+1}, asynchronously) is queued BEFORE y_n is
      yielded. stream_generate stops after the response for the maxTokens-th token
      or on the EOS, so every token it reports, the EOS included, has already been
      fed: offset = offset_before + len(input[prefix:]) + len(tokens) (+ 1 when it
      stopped on EOS). The step for the token after the last is computed but never
      used; it is not in the cache (only its input token is). With max_tokens=0
      (prefill) the prompt step runs and nothing else: the cache holds the prompt.

      "save": after the last turn, save_prompt_cache(path, cache, metadata) with
      metadata {"model": <model folder>, "tokens": json.dumps(held)} ("tokens" is
      left out when the cache has an unknown prefix), or "saveMetadata" as given
      (e.g. {} for a file without "tokens"). "cacheTokens" = held at the end,
      "classes" the cache's type names per layer at the end, "nbytes" the sum of
      their nbytes (MLX-LM's KVCache keeps 256-position steps, so its nbytes counts
      the whole allocated buffer).

  "cache_file"
      {"file": path}
      -> {"classes", "metadata", "offsets", "shapes", "dtypes", "rawMetadata"}
      load_prompt_cache(path, return_metadata=True): the type names and offsets
      per layer, and the user metadata; mx.load(path, return_metadata=True): every
      array's shape and dtype by key, and the raw safetensors metadata (the layout
      save_prompt_cache writes: "0.<key>" user metadata, "1.<layer>" class names,
      "2.0" "" and "2.<n>.0" / "2.<n>.1" the array key and kind of each scalar).

  "chat_template"
      {"model", "messages", "addGenerationPrompt", "enableThinking", "tools", "variables",
       "chatTemplate"}
      -> {"text"}: transformers' apply_chat_template(tokenize=False); enableThinking
      and tools are passed only when not null, variables as further keyword arguments,
      the text of the file chatTemplate (when given) as chat_template=.
  "encode"  {"model", "text", "addSpecialTokens"} -> {"tokens"}
  "decode"  {"model", "tokens", "skipSpecialTokens"} -> {"text"}

"model" is a folder path (absolute, or relative to the working directory), or the
name of a fixture under .cache/fixtures (or .cache/fixtures-families: scripts/fixtures.js).
"""

import hashlib
import json
import math
import sys
import traceback
from pathlib import Path

# Anything the libraries print goes to stderr; stdout carries only the JSON answer.
_stdout = sys.stdout
sys.stdout = sys.stderr

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
from mlx_lm.generate import DEFAULT_QUANTIZED_KV_START, generate_step, stream_generate  # noqa: E402
from mlx_lm.models import cache as cache_module  # noqa: E402
from mlx_lm.models.cache import (  # noqa: E402
    can_trim_prompt_cache,
    load_prompt_cache,
    make_prompt_cache,
    save_prompt_cache,
    trim_prompt_cache,
)
from mlx_lm.sample_utils import make_logits_processors, make_sampler  # noqa: E402
from mlx_lm.utils import load_config, load_model, load_tokenizer, sharded_load  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_DIRS = [ROOT / ".cache" / "fixtures", ROOT / ".cache" / "fixtures-families"]

_models = {}
_tokenizers = {}
_shared_tokenizers = {}
# Files that define a tokenizer folder (mlx_lm also reads *.jinja and tokenizer.model).
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                   "chat_template.json", "special_tokens_map.json", "tokenizer.model"]

# camelCase option -> (mlx_lm parameter, default). Defaults are mlx_lm's own
# (make_sampler, make_logits_processors, stream_generate).
SAMPLER_OPTIONS = {
    "temperature": ("temp", 0.0),
    "topP": ("top_p", 0.0),
    "minP": ("min_p", 0.0),
    "minTokensToKeep": ("min_tokens_to_keep", 1),
    "topK": ("top_k", 0),
    "xtcProbability": ("xtc_probability", 0.0),
    "xtcThreshold": ("xtc_threshold", 0.1),
}
PROCESSOR_OPTIONS = {
    "repetitionPenalty": ("repetition_penalty", None),
    "repetitionContextSize": ("repetition_context_size", 20),
    "presencePenalty": ("presence_penalty", None),
    "presenceContextSize": ("presence_context_size", 20),
    "frequencyPenalty": ("frequency_penalty", None),
    "frequencyContextSize": ("frequency_context_size", 20),
}
OTHER_OPTIONS = {"maxTokens", "logitBias", "seed"}
# What the reference reports besides the tokens; they do not change generation.
LOGPROB_OPTIONS = {"logprobs", "topLogprobs"}
MAX_TOP_LOGPROBS = 20
KNOWN_OPTIONS = set(SAMPLER_OPTIONS) | set(PROCESSOR_OPTIONS) | OTHER_OPTIONS | LOGPROB_OPTIONS
CACHE_OPTIONS = {"maxKvSize", "kvBits", "kvGroupSize", "quantizedKvStart"}


def model_path(name):
    if not name:
        raise ValueError("case has no 'model'")
    p = Path(name)
    if p.is_dir():
        return p.resolve()
    for fixtures in FIXTURE_DIRS:
        if (fixtures / name).is_dir():
            return (fixtures / name).resolve()
    raise FileNotFoundError(f"model folder not found: {name}")


def get_tokenizer(path):
    """What mlx_lm.load builds for this folder's tokenizer, shared between folders
    whose tokenizer files, EOS ids and model type are the same (loading one takes a
    second; every fixture has the same Qwen3 tokenizer)."""
    if path not in _tokenizers:
        config = load_config(path)
        eos = config.get("eos_token_id")
        h = hashlib.sha256()
        for name in TOKENIZER_FILES:
            f = path / name
            h.update(name.encode() + b"\0" + (f.read_bytes() if f.exists() else b"-") + b"\0")
        key = (h.hexdigest(), json.dumps(eos), config.get("model_type"))
        if key not in _shared_tokenizers:
            _shared_tokenizers[key] = load_tokenizer(path, eos_token_ids=eos)
        _tokenizers[path] = _shared_tokenizers[key]
    return _tokenizers[path]


def get_model(path):
    # As mlx_lm.load(path): load_model, then the tokenizer with the config's EOS ids
    # (config.json's eos_token_id, replaced by generation_config.json's when present).
    # In a group of processes (run under mlx.launch), as mlx_lm.chat / mlx_lm.benchmark load
    # there: sharded_load, tensor-parallel (the model's shard()).
    if path not in _models:
        if _group().size() > 1 and _strategy == "pipeline":
            # sharded_load(pipeline_group=...) without its download step (which needs a
            # model.safetensors.index.json): load lazily, keep this rank's layers, read them.
            model, _ = load_model(path, lazy=True, strict=False)
            model.model.pipeline(_group())
            mx.eval(model.parameters())
            _models[path] = model
        elif _group().size() > 1:
            _models[path] = sharded_load(str(path))[0]
        else:
            _models[path], _ = load_model(path)
    return _models[path], get_tokenizer(path)


def _group():
    return mx.distributed.init()


# How a group splits its models: "tensor" (sharded_load's default) or "pipeline" (the
# request's "strategy").
_strategy = "tensor"


def option(options, key, default):
    value = options.get(key)
    return default if value is None else value


def build_sampling(options, tokenizer):
    """The sampler and logits processors MLX-LM builds for these camelCase options."""
    sampler = make_sampler(
        **{name: option(options, key, default) for key, (name, default) in SAMPLER_OPTIONS.items()},
        # As mlx_lm's generate CLI and server build them.
        xtc_special_tokens=tokenizer.encode("\n") + list(tokenizer.eos_token_ids),
    )
    logit_bias = options.get("logitBias")
    if logit_bias:
        logit_bias = {int(k): float(v) for k, v in logit_bias.items()}
    processors = make_logits_processors(
        logit_bias=logit_bias or None,
        **{name: option(options, key, default) for key, (name, default) in PROCESSOR_OPTIONS.items()},
    )
    return sampler, processors


def check_options(options):
    unknown = set(options) - KNOWN_OPTIONS
    if unknown:
        raise ValueError(f"unknown options: {sorted(unknown)}")
    top = options.get("topLogprobs")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int)
                            or not 0 <= top <= MAX_TOP_LOGPROBS):
        raise ValueError(f"topLogprobs must be an integer in 0..{MAX_TOP_LOGPROBS}, got {top!r}")


def prompt_input(prompt, tokenizer):
    """A case's input as stream_generate takes it: a string (encoded there), or ids."""
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) for m in prompt):
        return tokenizer.apply_chat_template(prompt, add_generation_prompt=True)
    if isinstance(prompt, list):
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise ValueError("input list must hold only messages or only token ids")
        return prompt
    if not isinstance(prompt, str):
        raise ValueError("input must be a string, a list of messages or a list of token ids")
    return prompt


def prompt_ids(prompt, tokenizer):
    """A case's input as token ids, as stream_generate would encode it."""
    prompt = prompt_input(prompt, tokenizer)
    if isinstance(prompt, str):
        # stream_generate's BOS rule.
        add = tokenizer.bos_token is None or not prompt.startswith(tokenizer.bos_token)
        prompt = tokenizer.encode(prompt, add_special_tokens=add)
    return list(prompt)


def json_float(x):
    x = float(x)
    if math.isfinite(x):
        return x
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def logprob_entry(response, k):
    """{"token", "logprob", "top"} of one GenerationResponse (see the top of the file)."""
    values = np.array(response.logprobs.astype(mx.float32))
    entry = {"token": response.token, "logprob": json_float(values[response.token]), "top": []}
    if k > 0:
        k = min(k, values.size)
        # Everything at least as large as the k-th largest (ties included), then by
        # value descending and token id ascending.
        kth = np.partition(values, values.size - k)[values.size - k]
        ids = np.nonzero(values >= kth)[0]
        order = np.lexsort((ids, -values[ids]))[:k]
        entry["top"] = [{"token": int(ids[i]), "logprob": json_float(values[ids[i]])} for i in order]
    return entry


def run_stream(model, tokenizer, prompt, options, **kwargs):
    """One mlx_lm.stream_generate run with the sampler and processors the options
    ask for (kwargs go to generate_step: prompt_cache, kv_bits...). Returns the
    result and every generated token, a final EOS included."""
    sampler, processors = build_sampling(options, tokenizer)
    want_logprobs = bool(options.get("logprobs"))
    top = int(option(options, "topLogprobs", 0))

    if options.get("seed") is not None:
        mx.random.seed(int(options["seed"]))

    tokens, all_tokens, chunks, logprobs, last = [], [], [], [], None
    for response in stream_generate(
        model,
        tokenizer,
        prompt,
        max_tokens=int(option(options, "maxTokens", 256)),
        sampler=sampler,
        logits_processors=processors,
        **kwargs,
    ):
        chunks.append(response.text)
        last = response
        all_tokens.append(response.token)
        if want_logprobs:
            logprobs.append(logprob_entry(response, top))
        # The final response carries the EOS token when generation stopped on one.
        if response.finish_reason != "stop":
            tokens.append(response.token)
    result = {
        "tokens": tokens,
        "text": "".join(chunks),
        "finishReason": last.finish_reason,
        "promptTokens": last.prompt_tokens,
        "chunks": chunks,
    }
    if want_logprobs:
        result["logprobs"] = logprobs
    return result, all_tokens


def run_generate(case):
    path = model_path(case.get("model"))
    model, tokenizer = get_model(path)
    options = case.get("options") or {}
    check_options(options)
    prompt = prompt_input(case.get("input"), tokenizer)
    result, _ = run_stream(model, tokenizer, prompt, options)
    return result


def cache_offset(cache):
    """Positions the prompt cache holds: the offset of its first layer that counts them (an
    LFM2 convolution layer's ArraysCache has none; its attention layers' caches do)."""
    return next(c.offset for c in cache if hasattr(c, "offset"))


def kv_options(spec):
    """generate_step's KV-quantization arguments for a "cache" spec (none without kvBits)."""
    if spec.get("kvBits") is None:
        for key in ("kvGroupSize", "quantizedKvStart"):
            if spec.get(key) is not None:
                raise ValueError(f"cache.{key} without cache.kvBits")
        return {}
    return {
        "kv_bits": int(spec["kvBits"]),
        "kv_group_size": int(option(spec, "kvGroupSize", 64)),
        "quantized_kv_start": int(option(spec, "quantizedKvStart", DEFAULT_QUANTIZED_KV_START)),
    }


def fresh_like(model, cache, max_kv_size):
    """A new empty cache of the kind `cache` is (for one that cannot be trimmed)."""
    if max_kv_size is not None:
        return make_prompt_cache(model, max_kv_size=max_kv_size)
    fresh = []
    for c in cache:
        if isinstance(c, cache_module.RotatingKVCache):
            fresh.append(cache_module.RotatingKVCache(max_size=c.max_size, keep=c.keep))
        elif isinstance(c, cache_module.QuantizedKVCache):
            fresh.append(cache_module.QuantizedKVCache(group_size=c.group_size, bits=c.bits))
        else:
            fresh.append(type(c)())
    return fresh


def common_prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def run_cached(case):
    path = model_path(case.get("model"))
    model, tokenizer = get_model(path)
    spec = case.get("cache") or {}
    unknown_keys = set(spec) - CACHE_OPTIONS - {"file"}
    if unknown_keys:
        raise ValueError(f"unknown cache options: {sorted(unknown_keys)}")
    kv = kv_options(spec)
    max_kv_size = spec.get("maxKvSize")

    if spec.get("file") is not None:
        if max_kv_size is not None:
            raise ValueError("cache.maxKvSize does not apply to a cache file")
        cache, metadata = load_prompt_cache(spec["file"], return_metadata=True)
        offset = cache_offset(cache)
        if "tokens" in metadata:
            held = json.loads(metadata["tokens"])
            if len(held) != offset:
                raise ValueError(f"the file's tokens ({len(held)}) do not match its offset ({offset})")
            unknown = 0
        else:
            held, unknown = [], offset
    else:
        cache = make_prompt_cache(model, max_kv_size=None if max_kv_size is None else int(max_kv_size))
        held, unknown = [], 0

    def sync_held(fed):
        # What the cache really holds, from its offset.
        n = cache_offset(cache) - unknown
        if n > len(fed):
            raise RuntimeError(f"cache offset {cache_offset(cache)} is past the {unknown} + {len(fed)} tokens fed")
        return list(fed[:n])

    if case.get("prefill") is not None:
        ids = prompt_ids(case["prefill"], tokenizer)
        if not ids:
            raise ValueError("prefill is empty")
        for _ in generate_step(mx.array(ids), model, max_tokens=0, prompt_cache=cache, **kv):
            pass
        held = sync_held(held + ids)

    turns = []
    for turn in case.get("turns") or []:
        options = turn.get("options") or {}
        check_options(options)
        if turn.get("extend") is not None:
            if turn.get("input") is not None:
                raise ValueError("a turn has either 'input' or 'extend'")
            ids = held + prompt_ids(turn["extend"], tokenizer)
        else:
            ids = prompt_ids(turn.get("input"), tokenizer)
        if not ids:
            raise ValueError("turn input is empty")
        prefix = common_prefix(held, ids)
        if prefix == len(ids):
            prefix -= 1
        drop = len(held) - prefix
        trimmed, fresh = 0, False
        if drop > 0:
            if can_trim_prompt_cache(cache):
                trimmed = trim_prompt_cache(cache, drop)
                if trimmed != drop:
                    raise RuntimeError(f"trim_prompt_cache trimmed {trimmed} of {drop}")
            else:
                cache[:] = fresh_like(model, cache, max_kv_size)
                prefix, unknown, fresh = 0, 0, True
        result, generated = run_stream(model, tokenizer, ids[prefix:], options, prompt_cache=cache, **kv)
        held = sync_held(ids + generated)
        result.update(input=ids, cachedTokens=prefix, trimmed=trimmed, fresh=fresh, cacheOffset=cache_offset(cache))
        turns.append(result)

    if case.get("save") is not None:
        metadata = case.get("saveMetadata")
        if metadata is None:
            metadata = {"model": str(path)}
            if unknown == 0:
                metadata["tokens"] = json.dumps(held)
        save_prompt_cache(case["save"], cache, {str(k): str(v) for k, v in metadata.items()})

    return {
        "turns": turns,
        "cacheTokens": held,
        "cacheOffset": cache_offset(cache),
        "unknownPrefix": unknown,
        "classes": [type(c).__name__ for c in cache],
        "nbytes": sum(c.nbytes for c in cache),
    }


def run_cache_file(case):
    file = case.get("file")
    if not file:
        raise ValueError("case has no 'file'")
    cache, metadata = load_prompt_cache(file, return_metadata=True)
    arrays, raw = mx.load(file, return_metadata=True)
    return {
        "classes": [type(c).__name__ for c in cache],
        "metadata": metadata,
        "offsets": [c.offset for c in cache],
        "shapes": {k: list(v.shape) for k, v in arrays.items()},
        "dtypes": {k: str(v.dtype).replace("mlx.core.", "") for k, v in arrays.items()},
        "rawMetadata": raw,
    }


def run_chat_template(case):
    tokenizer = get_tokenizer(model_path(case.get("model")))
    kwargs = {"add_generation_prompt": bool(case.get("addGenerationPrompt", False))}
    if case.get("enableThinking") is not None:
        kwargs["enable_thinking"] = bool(case["enableThinking"])
    if case.get("tools") is not None:
        kwargs["tools"] = case["tools"]
    kwargs.update(case.get("variables") or {})
    if case.get("chatTemplate") is not None:
        kwargs["chat_template"] = Path(case["chatTemplate"]).read_text(encoding="utf-8")
    # The transformers tokenizer itself (the wrapper would add enable_thinking).
    hf = tokenizer._tokenizer
    return {"text": hf.apply_chat_template(case["messages"], tokenize=False, **kwargs)}


def run_encode(case):
    tokenizer = get_tokenizer(model_path(case.get("model")))
    add = case.get("addSpecialTokens")
    return {"tokens": tokenizer.encode(case["text"], add_special_tokens=True if add is None else bool(add))}


def run_decode(case):
    tokenizer = get_tokenizer(model_path(case.get("model")))
    skip = bool(case.get("skipSpecialTokens", False))
    return {"text": tokenizer.decode(case["tokens"], skip_special_tokens=skip)}


MODES = {
    "generate": run_generate,
    "cached": run_cached,
    "cache_file": run_cache_file,
    "chat_template": run_chat_template,
    "encode": run_encode,
    "decode": run_decode,
}


def run_case(case):
    try:
        mode = case.get("mode", "generate")
        if mode not in MODES:
            raise ValueError(f"unknown mode: {mode}")
        return MODES[mode](case)
    except Exception as e:  # one bad case must not end the run
        traceback.print_exc(file=sys.stderr)
        return {"error": str(e) or type(e).__name__, "errorType": type(e).__name__}


def main():
    # Under mlx.launch (every rank runs this script): `mlx_lm_ref.py REQUEST OUTPUT`, the
    # request read from a file by every rank, the answer written by rank 0.
    if len(sys.argv) == 3:
        request = json.loads(Path(sys.argv[1]).read_text())
    else:
        request = json.load(sys.stdin)
    cases = request["cases"] if isinstance(request, dict) else request
    global _strategy
    _strategy = request.get("strategy", "tensor") if isinstance(request, dict) else "tensor"
    results = [run_case(c) for c in cases]
    answer = json.dumps({"results": results})
    if len(sys.argv) == 3:
        if _group().rank() == 0:
            Path(sys.argv[2]).write_text(answer)
        # No rank leaves before the others are done: stream_generate leaves one step queued
        # after the last token, whose send a rank that exits at once may never make (then its
        # peer fails with "[ring] connection to a peer was lost").
        mx.eval(mx.distributed.all_sum(mx.array(1.0), stream=mx.cpu))
        return
    _stdout.write(answer)
    _stdout.write("\n")
    _stdout.flush()


if __name__ == "__main__":
    main()
