"""Long-lived mlx-audio (Chatterbox, Chatterbox Turbo) worker for benchmark/tts.js.

Reads one JSON request per line on stdin and answers each with one JSON line on
stdout (anything the libraries print goes to stderr). Requests:

  {"cmd": "info"}
      -> {"mlx", "mlxAudio", "blas", "python", "device"}
  {"cmd": "load", "model": folder}
      -> {"seconds"}; loads the folder as the parity reference does
      (__test__/ref/chatterbox_ref.py load_fixture: mlx-audio's loading steps with
      fixtures_tts.build_model, which honours the shrink keys and is plain mlx-audio
      without them; a Turbo folder, model_type "chatterbox_turbo", as
      scripts/fixtures_tts_turbo.py load_folder does). Replaces the model loaded before.
  {"cmd": "synthesize", "text": str, "options": {...}}
      -> {"seconds", "t3Seconds", "samples", "sampleRate", "speechTokens", "t3Tokens",
          "peakMemory"}
      One Model.generate call with the camelCase options mapped onto its keyword
      arguments, after mx.random.seed(seed). The clock runs from the call to the
      evaluated waveform (generate returns it unevaluated). t3Seconds: until T3
      returned its tokens (it evaluates every step); speechTokens: the cleaned ids
      S3Gen was given, as a list; t3Tokens: what T3 returned, start/stop included.
      Turbo: ChatterboxTurboTTS.generate, whose max_tokens counts the tokens after the
      first (maxTokens - 1); cfgWeight, exaggeration and minP are passed and ignored by it.

Errors answer {"error": message}; the worker keeps running.
"""

import json
import sys
import time
from pathlib import Path

import worker_protocol  # noqa: E402  (first: stdout is for answers only)

import mlx.core as mx  # noqa: E402

# Loading is the parity reference's own, so both benchmarks and tests load the same model.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "__test__" / "ref"))
from chatterbox_ref import load_fixture  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import fixtures_tts_turbo  # noqa: E402

# camelCase option of SynthesizeOptions -> Model.generate keyword argument.
OPTION_NAMES = {
    "temperature": "temperature",
    "cfgWeight": "cfg_weight",
    "exaggeration": "exaggeration",
    "repetitionPenalty": "repetition_penalty",
    "minP": "min_p",
    "topP": "top_p",
    "maxTokens": "max_new_tokens",
}

state = {"model": None, "turbo": False}


def cmd_info(_req):
    return worker_protocol.info("mlxAudio", "mlx-audio")


def cmd_load(req):
    path = Path(req["model"]).resolve()
    state["model"] = None
    mx.clear_cache()
    t0 = time.perf_counter()
    config = json.loads((path / "config.json").read_text())
    state["turbo"] = config.get("model_type") == "chatterbox_turbo"
    state["model"] = fixtures_tts_turbo.load_folder(path) if state["turbo"] else load_fixture(path)
    return {"seconds": time.perf_counter() - t0}


def cmd_synthesize(req):
    model = state["model"]
    if model is None:
        raise RuntimeError("no model loaded")
    options = dict(req.get("options") or {})
    seed = options.pop("seed", None)
    unknown = set(options) - set(OPTION_NAMES)
    if unknown:
        raise ValueError(f"unknown options: {sorted(unknown)}")
    kwargs = {OPTION_NAMES[k]: v for k, v in options.items()}
    if state["turbo"]:
        return synthesize_turbo(model, req["text"], kwargs, seed)

    # Observe T3's end and S3Gen's input through instance attributes (removed afterwards);
    # the wrappers only read what passes by.
    seen = {}
    t3_timed = t3_timer(model.t3.inference, seen)
    flow_inference = model.s3gen.flow.inference

    def flow_seen(*args, **kw):
        seen["tokens"] = kw["token"]
        return flow_inference(*args, **kw)

    model.t3.inference = t3_timed
    model.s3gen.flow.inference = flow_seen
    mx.reset_peak_memory()
    try:
        if seed is not None:
            mx.random.seed(int(seed))
        t0 = time.perf_counter()
        result = next(model.generate(req["text"], verbose=False, **kwargs))
        mx.eval(result.audio)
        seconds = time.perf_counter() - t0
    finally:
        del model.t3.inference
        del model.s3gen.flow.inference
    tokens = seen["tokens"].reshape(-1).tolist() if "tokens" in seen else []
    return timed_result(model, result, seen, t0, seconds, tokens)


def t3_timer(inference, seen):
    """T3's `inference` wrapped to note in `seen` when it ended and how many tokens it made."""
    def timed(*args, **kw):
        out = inference(*args, **kw)
        mx.eval(out)
        seen["t3_end"] = time.perf_counter()
        seen["t3_tokens"] = out.shape[1]
        return out
    return timed


def timed_result(model, result, seen, t0, seconds, tokens):
    """The answer of cmd_synthesize: the times and what the wrappers saw pass by."""
    return {
        "seconds": seconds,
        "t3Seconds": seen["t3_end"] - t0,
        "samples": int(result.audio.shape[0]),
        "sampleRate": model.sample_rate,
        "speechTokens": tokens,
        "t3Tokens": seen["t3_tokens"],
        "peakMemory": mx.get_peak_memory(),
    }


def synthesize_turbo(model, text, kwargs, seed):
    """cmd_synthesize for ChatterboxTurboTTS: its generate's keywords, T3 observed through
    inference_turbo, S3Gen's input through the S3Gen call."""
    if "max_new_tokens" in kwargs:
        kwargs["max_tokens"] = kwargs.pop("max_new_tokens") - 1
    seen = {}
    t3_timed = t3_timer(model.t3.inference_turbo, seen)
    s3_call = type(model.s3gen).__call__

    def s3_seen(self, speech_tokens, *args, **kw):
        seen["tokens"] = speech_tokens
        return s3_call(self, speech_tokens, *args, **kw)

    model.t3.inference_turbo = t3_timed
    type(model.s3gen).__call__ = s3_seen
    mx.reset_peak_memory()
    try:
        if seed is not None:
            mx.random.seed(int(seed))
        t0 = time.perf_counter()
        result = next(model.generate(text, **kwargs))
        mx.eval(result.audio)
        seconds = time.perf_counter() - t0
    finally:
        del model.t3.inference_turbo
        type(model.s3gen).__call__ = s3_call
    # S3Gen's input ends with the three silence tokens generate appends.
    tokens = seen["tokens"].reshape(-1).tolist()[:-3] if "tokens" in seen else []
    return timed_result(model, result, seen, t0, seconds, tokens)


COMMANDS = {"info": cmd_info, "load": cmd_load, "synthesize": cmd_synthesize}


def main():
    worker_protocol.serve(COMMANDS)


if __name__ == "__main__":
    main()
