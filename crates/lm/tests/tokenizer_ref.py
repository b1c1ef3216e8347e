"""Reference answers for crates/lm/tests/integration/tokenizer_parity.rs.

Reads one JSON request on stdin and writes one JSON answer on stdout, using
transformers' AutoTokenizer and MLX-LM's TokenizerWrapper on the same
folders the Rust test loads.
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from mlx_lm import tokenizer_utils  # noqa: E402
from mlx_lm.utils import load_config  # noqa: E402


def stream(wrapper, ids):
    # stream_generate: add_token, then read last_segment; finalize at the end.
    detok = wrapper.detokenizer
    chunks = []
    for i in ids:
        detok.add_token(i)
        chunks.append(detok.last_segment)
    detok.finalize()
    chunks.append(detok.last_segment)
    return chunks


def chat(tok, case):
    kwargs = {}
    if case.get("enable_thinking") is not None:
        kwargs["enable_thinking"] = case["enable_thinking"]
    try:
        return {
            "text": tok.apply_chat_template(
                case["messages"],
                tools=case.get("tools"),
                add_generation_prompt=case["add_generation_prompt"],
                tokenize=False,
                **kwargs,
            )
        }
    except Exception as e:  # the Rust side must fail too
        return {"error": f"{type(e).__name__}: {e}"}


def tokenizer_answers(req):
    folder = req["dir"]
    # MLX-LM's loader calls AutoTokenizer.from_pretrained(folder) and wraps
    # it, so one load serves both references.
    wrapper = tokenizer_utils.load(Path(folder))
    tok = wrapper._tokenizer
    out = {
        "info": {
            "len": len(tok),
            "vocab_size": tok.vocab_size,
            "bos_token": tok.bos_token,
            "bos_token_id": tok.bos_token_id,
            "eos_token": tok.eos_token,
            "eos_token_id": tok.eos_token_id,
            "special_tokens_map": tok.special_tokens_map,
            "detokenizer": type(wrapper.detokenizer).__name__,
        },
        "encode": [tok.encode(c["text"], add_special_tokens=c["add_special_tokens"]) for c in req.get("encode", [])],
        "decode": [tok.decode(ids) for ids in req.get("decode", [])],
        "chat": [chat(tok, c) for c in req.get("chat", [])],
        "stream": [stream(wrapper, ids) for ids in req.get("stream", [])],
    }
    # stream_generate's rule for raw string prompts.
    prompts = []
    for p in req.get("prompts", []):
        add = tok.bos_token is None or not p.startswith(tok.bos_token)
        prompts.append(tok.encode(p, add_special_tokens=add))
    out["prompts"] = prompts
    return out


def model_eos(folder):
    # mlx_lm.utils.load: eos ids from config (+ generation_config), then the
    # tokenizer's own eos inside TokenizerWrapper.
    config = load_config(Path(folder))
    wrapper = tokenizer_utils.load(Path(folder), eos_token_ids=config.get("eos_token_id", None))
    return sorted(wrapper.eos_token_ids)


def main():
    req = json.load(sys.stdin)
    answer = {
        "tokenizers": [tokenizer_answers(r) for r in req.get("tokenizers", [])],
        "model_eos": [model_eos(d) for d in req.get("model_eos", [])],
    }
    json.dump(answer, sys.stdout, ensure_ascii=True)


if __name__ == "__main__":
    main()
