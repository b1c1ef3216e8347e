"""Live MLX-LM reference for the parity tests.

Reads one JSON object from stdin, {"cases": [...]}, and writes one JSON object to
stdout, {"results": [...]}, one result per case in order. A case that raises gets
{"error": message, "errorType": name} and the run goes on.

Case kinds ("mode"):
  "generate" (default)
      {"model": folder, "input": str | [{role, content}...] | [ids], "options": {...}}
      -> {"tokens", "text", "finishReason", "promptTokens", "chunks"}
      Exactly mlx_lm.stream_generate: a string is encoded with MLX-LM's BOS rule, a
      message list goes through tokenizer.apply_chat_template(messages,
      add_generation_prompt=True), a list of ids is used as is. "tokens" are the
      generated ids without the EOS, "text" is the concatenation of the response
      segments, "chunks" those segments one by one (the last one is the flush).
  "chat_template"
      {"model", "messages", "addGenerationPrompt", "enableThinking", "tools"}
      -> {"text"}: transformers' apply_chat_template(tokenize=False); enableThinking
      and tools are passed only when not null.
  "encode"  {"model", "text", "addSpecialTokens"} -> {"tokens"}
  "decode"  {"model", "tokens", "skipSpecialTokens"} -> {"text"}

"model" is a folder path (absolute, or relative to the working directory), or the
name of a fixture under .cache/fixtures.
"""

import hashlib
import json
import sys
import traceback
from pathlib import Path

# Anything the libraries print goes to stderr; stdout carries only the JSON answer.
_stdout = sys.stdout
sys.stdout = sys.stderr

import mlx.core as mx  # noqa: E402
from mlx_lm.generate import stream_generate  # noqa: E402
from mlx_lm.sample_utils import make_logits_processors, make_sampler  # noqa: E402
from mlx_lm.utils import load_config, load_model, load_tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / ".cache" / "fixtures"

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
KNOWN_OPTIONS = set(SAMPLER_OPTIONS) | set(PROCESSOR_OPTIONS) | OTHER_OPTIONS


def model_path(name):
    if not name:
        raise ValueError("case has no 'model'")
    p = Path(name)
    if p.is_dir():
        return p.resolve()
    if (FIXTURES / name).is_dir():
        return (FIXTURES / name).resolve()
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
    if path not in _models:
        _models[path], _ = load_model(path)
    return _models[path], get_tokenizer(path)


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


def run_generate(case):
    path = model_path(case.get("model"))
    model, tokenizer = get_model(path)
    options = case.get("options") or {}
    unknown = set(options) - KNOWN_OPTIONS
    if unknown:
        raise ValueError(f"unknown options: {sorted(unknown)}")

    prompt = case.get("input")
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) for m in prompt):
        prompt = tokenizer.apply_chat_template(prompt, add_generation_prompt=True)
    elif isinstance(prompt, list):
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise ValueError("input list must hold only messages or only token ids")
    elif not isinstance(prompt, str):
        raise ValueError("input must be a string, a list of messages or a list of token ids")

    sampler, processors = build_sampling(options, tokenizer)

    if options.get("seed") is not None:
        mx.random.seed(int(options["seed"]))

    tokens, chunks, last = [], [], None
    for response in stream_generate(
        model,
        tokenizer,
        prompt,
        max_tokens=int(option(options, "maxTokens", 256)),
        sampler=sampler,
        logits_processors=processors,
    ):
        chunks.append(response.text)
        last = response
        # The final response carries the EOS token when generation stopped on one.
        if response.finish_reason != "stop":
            tokens.append(response.token)
    return {
        "tokens": tokens,
        "text": "".join(chunks),
        "finishReason": last.finish_reason,
        "promptTokens": last.prompt_tokens,
        "chunks": chunks,
    }


def run_chat_template(case):
    tokenizer = get_tokenizer(model_path(case.get("model")))
    kwargs = {"add_generation_prompt": bool(case.get("addGenerationPrompt", False))}
    if case.get("enableThinking") is not None:
        kwargs["enable_thinking"] = bool(case["enableThinking"])
    if case.get("tools") is not None:
        kwargs["tools"] = case["tools"]
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
    request = json.load(sys.stdin)
    cases = request["cases"] if isinstance(request, dict) else request
    results = [run_case(c) for c in cases]
    _stdout.write(json.dumps({"results": results}))
    _stdout.write("\n")
    _stdout.flush()


if __name__ == "__main__":
    main()
