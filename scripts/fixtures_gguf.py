"""Write the GGUF test fixtures: GGUF files made from the seeded random text fixtures, as
llama.cpp's converter writes them, and for each the MLX folder converted back from the GGUF
(scripts/gguf_to_mlx.py, with MLX's own `mx.load`), which MLX-LM runs as the reference.
Also the real SmolLM2-135M-Instruct Q4_1 GGUF's folder, and small malformed files.

Usage: fixtures_gguf.py FIXTURES_DIR OUT_DIR SMOLLM2_GGUF GEMMA3_TOKENIZER_DIR

The GGUF side follows convert_hf_to_gguf.py: `<arch>.*` hyperparameters, the byte-level BPE
vocabulary as tokenizer.ggml.* (ids the tokenizer lacks become "[PAD<id>]" of type unused, added
special tokens control, other added tokens user-defined), q/k rows permuted for llama-architecture
models (Mistral is written as llama, as llama.cpp does), 1-D tensors in F32, the rest in the
variant's type (gguf-py's own quantizers).
"""

import json
import shutil
import sys
from pathlib import Path

import gguf
import mlx.core as mx
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import gguf_to_mlx  # noqa: E402

T = gguf.GGMLQuantizationType
# (name, source fixture, GGUF architecture, type of 2-D tensors, type of the token embedding)
VARIANTS = [
    ("qwen3-f32", "qwen3-f32", "qwen3", T.F32, T.F32),
    ("qwen3-q4_0", "qwen3-f32", "qwen3", T.Q4_0, T.Q8_0),
    ("qwen3-bf16", "qwen3-f32", "qwen3", T.BF16, T.BF16),
    ("llama-q4_1", "llama-linear", "llama", T.Q4_1, T.Q4_1),
    ("llama-f16", "llama-linear", "llama", T.F16, T.F16),
    ("mistral-q8_0", "mistral-f32", "llama", T.Q8_0, T.Q8_0),
    ("qwen2-q4_0", "qwen2-f32", "qwen2", T.Q4_0, T.Q8_0),
    # Llama 3.1 rotary scaling, which the converter writes as rope_freqs.weight.
    ("llama3-f32", "llama-f32", "llama", T.F32, T.F32),
]
NAMES = {v: k for k, v in gguf_to_mlx.NAMES.items()}
# Token types (llama.cpp).
NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5


def log(msg):
    print(f"[fixtures-gguf] {msg}", file=sys.stderr, flush=True)


def gguf_name(name, arch=None):
    if name.startswith("model.layers."):
        _, _, layer, *rest = name.split(".")
        module, field = ".".join(rest[:-1]), rest[-1]
        if module == "self_attn" and field == "sinks":
            return f"blk.{layer}.attn_sinks.weight"  # GptOssModel.filter_tensors adds the ".weight"
        extra = {"gemma3": gguf_to_mlx.GEMMA3_NORMS, "phi3": gguf_to_mlx.PHI3_NAMES, "gpt-oss": gguf_to_mlx.GPT_OSS_NAMES}.get(arch, {})
        names = dict(NAMES, **{v: k for k, v in extra.items()})
        return f"blk.{layer}.{names[module]}.{field}"
    module, field = name.rsplit(".", 1)
    return {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}[module] + "." + field


def permute(w, heads):
    """convert_hf_to_gguf.py's LlamaModel.permute: llama.cpp's rotary row order."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def vocab_metadata(tok_dir, vocab_size):
    tj = json.loads((tok_dir / "tokenizer.json").read_text())
    tc = json.loads((tok_dir / "tokenizer_config.json").read_text())
    tokens = [None] * vocab_size
    types = [NORMAL] * vocab_size
    for t, i in tj["model"]["vocab"].items():
        tokens[i] = t
    for a in tj["added_tokens"]:
        tokens[a["id"]] = a["content"]
        types[a["id"]] = CONTROL if a["special"] else USER_DEFINED
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i], types[i] = f"[PAD{i}]", UNUSED
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    ids = {t: i for i, t in enumerate(tokens)}
    return tokens, types, merges, ids, tc


def add_tokenizer(w, tokens, types, merges, pre, special, add_bos, template):
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    for key, tid in special.items():
        getattr(w, f"add_{key}_token_id")(tid)
    w.add_add_bos_token(add_bos)
    if template:
        w.add_chat_template(template)


def add_hparams(w, config, arch_override=None):
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(config["num_key_value_heads"])
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_rope_freq_base(config["rope_theta"])
    w.add_rope_dimension_count(head_dim)
    if config.get("head_dim") and config["head_dim"] != config["hidden_size"] // heads:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if config.get("num_experts"):
        w.add_expert_count(config["num_experts"])
        w.add_expert_used_count(config["num_experts_per_tok"])
        w.add_expert_feed_forward_length(config["moe_intermediate_size"])
    if config.get("num_local_experts"):  # GPT-OSS (GptOssModel): its MLP is the experts
        w.add_expert_count(config["num_local_experts"])
        w.add_expert_used_count(config["num_experts_per_tok"])
        w.add_expert_feed_forward_length(config["intermediate_size"])
        w.add_sliding_window(config["sliding_window"])
    scaling = config.get("rope_scaling")
    kind = scaling and (scaling.get("rope_type") or scaling.get("type"))
    if kind == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(scaling["factor"])
        w.add_rope_scaling_orig_ctx_len(scaling["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_beta_fast(scaling["beta_fast"])
        w.add_rope_scaling_yarn_beta_slow(scaling["beta_slow"])
    elif scaling and kind != "llama3":  # llama3: rope_freqs.weight (write_typed)
        assert kind == "linear", scaling
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(scaling["factor"])


def write_variant(src, out, arch, qtype, embed_qtype):
    config = json.loads((src / "config.json").read_text())
    weights = {k: np.array(v.astype(mx.float32)) for k, v in mx.load(str(src / "model.safetensors")).items()}
    tokens, types, merges, ids, tc = vocab_metadata(src, config["vocab_size"])
    w = gguf.GGUFWriter(str(out), arch)
    add_hparams(w, config)
    special = {"eos": ids[tc["eos_token"]]}
    if tc.get("pad_token"):
        special["pad"] = ids[tc["pad_token"]]
    add_tokenizer(w, tokens, types, merges, "qwen2", special, False, tc.get("chat_template"))
    write_tensors(w, config, weights, arch, qtype, embed_qtype)
    return config


def write_tensors(w, config, weights, arch, qtype, embed_qtype):
    def type_of(name, a):
        return T.F32 if a.ndim == 1 else embed_qtype if name == "model.embed_tokens.weight" else qtype
    write_typed(w, config, weights, arch, type_of)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_typed(w, config, weights, arch, type_of):
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    for name in sorted(weights):
        a = weights[name]
        if arch in gguf_to_mlx.PERMUTED and name.endswith(("q_proj.weight", "k_proj.weight", "q_proj.bias", "k_proj.bias")):
            a = permute(a, heads if ".q_proj." in name else kv_heads)
        if arch == "gemma3" and name.endswith("norm.weight"):
            a = a + np.float32(1)  # Gemma3Model.norm_shift: llama.cpp's RMSNorm scales by the weight alone
        t = type_of(name, a)
        data = a if t == T.F32 else quantize(a, t)
        w.add_tensor(gguf_name(name, arch), data, raw_dtype=t)
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type") == "llama3":
        w.add_tensor("rope_freqs.weight", llama3_factors(config), raw_dtype=T.F32)


def llama3_factors(config):
    """convert_hf_to_gguf.py's rope_freqs.weight for Llama 3.1 scaling: per rotary frequency 1
    (wavelength under context / high_freq_factor), factor (over context / low_freq_factor) or the
    smooth blend between, in float32."""
    import math
    s = config["rope_scaling"]
    dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    freqs = 1.0 / (np.float32(config["rope_theta"]) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    factor, low, high, context = s["factor"], s["low_freq_factor"], s["high_freq_factor"], s["original_max_position_embeddings"]
    out = []
    for freq in freqs.astype(np.float64):
        wavelen = 2 * math.pi / freq
        if wavelen < context / high:
            out.append(1.0)
        elif wavelen > context / low:
            out.append(factor)
        else:
            smooth = (context / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def quantize(a, t):
    """gguf-py's quantizers, and K-quant encoders of our own where it has none (gguf-py 0.19
    raises NotImplementedError for them). Any valid blocks do: the reference folder is converted
    from the file's bytes and checked against gguf-py's own dequantization (gguf_to_mlx.py)."""
    if t in (T.Q4_K, T.Q5_K):
        data = encode_q45_k(a, 15 if t == T.Q4_K else 31)
    elif t == T.Q6_K:
        data = encode_q6_k(a)
    elif t == T.Q3_K:
        data = encode_q3_k(a)
    elif t == T.Q2_K:
        data = encode_q2_k(a)
    elif t in (T.IQ4_NL, T.IQ4_XS):
        data = encode_iq4(a, t)
    else:
        return gguf.quants.quantize(a, t)
    err = np.abs(gguf.quants.dequantize(data, t) - a).max()
    if not err <= np.abs(a).max() / {T.Q2_K: 2, T.Q3_K: 3, T.Q4_K: 4, T.IQ4_NL: 4, T.IQ4_XS: 4}.get(t, 8):
        raise SystemExit(f"{t.name} encoder: max error {err} against max |a| {np.abs(a).max()}")
    return data


def encode_q45_k(a, levels):
    """Q4_K (levels 15) or Q5_K (31) blocks: per sub-block of 32 the affine range [min(x, 0),
    max(x, 0)], its step and offset as 6-bit multiples of the super-block's float16 d and dmin."""
    f32 = np.float32
    x = a.reshape(-1, 8, 32).astype(f32)
    lo, hi = np.minimum(x.min(-1), 0), np.maximum(x.max(-1), 0)
    step, off = (hi - lo) / levels, -lo
    d, dmin = (step.max(-1) / 63).astype(np.float16), (off.max(-1) / 63).astype(np.float16)
    df, dminf = d.astype(f32)[:, None], dmin.astype(f32)[:, None]
    sc = np.clip(np.round(step / np.where(df > 0, df, 1)), 0, 63).astype(np.uint8)
    m = np.clip(np.round(off / np.where(dminf > 0, dminf, 1)), 0, 63).astype(np.uint8)
    s_eff, m_eff = (df * sc)[..., None], (dminf * m)[..., None]
    q = np.clip(np.round((x + m_eff) / np.where(s_eff > 0, s_eff, 1)), 0, levels).astype(np.uint8)
    packed = np.zeros((x.shape[0], 12), np.uint8)
    packed[:, 0:4] = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    packed[:, 4:8] = m[:, :4] | ((m[:, 4:] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:] & 15) | ((m[:, 4:] & 15) << 4)
    low = q & 15
    qs = (low[:, 0::2] | (low[:, 1::2] << 4)).reshape(-1, 128)
    parts = [d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2), packed]
    if levels == 31:
        qh = np.zeros((x.shape[0], 32), np.uint8)
        for j in range(8):
            qh |= ((q[:, j] >> 4) & 1) << j
        parts.append(qh)
    parts.append(qs)
    return np.concatenate(parts, axis=1).reshape(*a.shape[:-1], -1)


def encode_q6_k(a):
    """Q6_K blocks: per sub-block of 16 a step max|x| / 31 as an int8 multiple of the
    super-block's float16 d; q - 32 in -32..31."""
    f32 = np.float32
    x = a.reshape(-1, 16, 16).astype(f32)
    step = np.abs(x).max(-1) / 31
    d = (step.max(-1) / 127).astype(np.float16)
    df = d.astype(f32)[:, None]
    sc = np.clip(np.round(step / np.where(df > 0, df, 1)), -128, 127).astype(np.int8)
    s_eff = (df * sc)[..., None]
    q = (np.clip(np.round(x / np.where(s_eff != 0, s_eff, 1)), -32, 31) + 32).astype(np.uint8)
    q = q.reshape(-1, 2, 4, 32)  # weight 128 n + 32 k + l
    ql = np.concatenate([(q[:, :, 0] & 15) | ((q[:, :, 2] & 15) << 4), (q[:, :, 1] & 15) | ((q[:, :, 3] & 15) << 4)], axis=2)
    qh = (q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) | ((q[:, :, 3] >> 4) << 6)
    parts = [ql.reshape(-1, 128), qh.reshape(-1, 64), sc.view(np.uint8).reshape(-1, 16), d.view(np.uint8).reshape(-1, 2)]
    return np.concatenate(parts, axis=1).reshape(*a.shape[:-1], -1)


def encode_q3_k(a):
    """Q3_K blocks: per sub-block of 16 a signed step (the value of largest magnitude / -4, as
    llama.cpp's make_q3_quants, so scales of both signs occur) as a 6-bit signed multiple of the
    super-block's float16 d; q in -4..3."""
    f32 = np.float32
    x = a.reshape(-1, 16, 16).astype(f32)
    big = np.take_along_axis(x, np.abs(x).argmax(-1)[..., None], -1)[..., 0]
    step = big / -4
    d = (np.abs(step).max(-1) / 31).astype(np.float16)
    df = d.astype(f32)[:, None]
    sc = np.clip(np.round(step / np.where(df > 0, df, 1)), -32, 31).astype(np.int8)
    s_eff = (df * sc)[..., None]
    u = (np.clip(np.round(x / np.where(s_eff != 0, s_eff, 1)), -4, 3) + 4).astype(np.uint8).reshape(-1, 256)
    us = (sc.astype(np.int16) + 32).astype(np.uint8)  # 16 six-bit scales
    packed = np.zeros((x.shape[0], 12), np.uint8)
    packed[:, 0:8] = (us[:, 0:8] & 15) | ((us[:, 8:16] & 15) << 4)
    for j in range(16):
        packed[:, 8 + j % 4] |= (us[:, j] >> 4) << (2 * (j // 4))
    hmask = np.zeros((x.shape[0], 32), np.uint8)
    qs = np.zeros((x.shape[0], 64), np.uint8)
    for i in range(256):  # weight 128 h + 32 k + l
        h, k, l = i // 128, i % 128 // 32, i % 32
        qs[:, 32 * h + l] |= (u[:, i] & 3) << (2 * k)
        hmask[:, l] |= (u[:, i] >> 2) << (i // 32)
    parts = [hmask, qs, packed, d.view(np.uint8).reshape(-1, 2)]
    return np.concatenate(parts, axis=1).reshape(*a.shape[:-1], -1)


def encode_q2_k(a):
    """Q2_K blocks: per sub-block of 16 the affine range [min(x, 0), max(x, 0)] in 3 steps, step
    and offset as 4-bit multiples of the super-block's float16 d and dmin."""
    f32 = np.float32
    x = a.reshape(-1, 16, 16).astype(f32)
    lo, hi = np.minimum(x.min(-1), 0), np.maximum(x.max(-1), 0)
    step, off = (hi - lo) / 3, -lo
    d, dmin = (step.max(-1) / 15).astype(np.float16), (off.max(-1) / 15).astype(np.float16)
    df, dminf = d.astype(f32)[:, None], dmin.astype(f32)[:, None]
    sc = np.clip(np.round(step / np.where(df > 0, df, 1)), 0, 15).astype(np.uint8)
    m = np.clip(np.round(off / np.where(dminf > 0, dminf, 1)), 0, 15).astype(np.uint8)
    s_eff, m_eff = (df * sc)[..., None], (dminf * m)[..., None]
    q = np.clip(np.round((x + m_eff) / np.where(s_eff > 0, s_eff, 1)), 0, 3).astype(np.uint8).reshape(-1, 256)
    qs = np.zeros((x.shape[0], 64), np.uint8)
    for i in range(256):  # weight 128 h + 32 k + l
        qs[:, 32 * (i // 128) + i % 32] |= q[:, i] << (2 * (i % 128 // 32))
    parts = [sc | (m << 4), qs, d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2)]
    return np.concatenate(parts, axis=1).reshape(*a.shape[:-1], -1)


IQ4_KV = np.array(gguf.quants.IQ4_NL.kvalues, np.float32)


def encode_iq4(a, t):
    """IQ4_NL (float16 d per 32) or IQ4_XS (float16 d per 256, a 6-bit scale ls - 32 per 32)
    blocks: the scale maps each group's value of largest magnitude onto the table's end of its
    sign (-127 or 113), each weight takes the nearest table value."""
    f32 = np.float32
    x = a.reshape(-1, 32).astype(f32)
    big = np.take_along_axis(x, np.abs(x).argmax(-1)[..., None], -1)[..., 0]
    step = np.where(big < 0, big / -127, big / 113)
    if t == T.IQ4_NL:
        d = step.astype(np.float16)
        s_eff = d.astype(f32)
    else:
        steps = step.reshape(-1, 8)
        d = (np.abs(steps).max(-1) / 31).astype(np.float16)
        df = d.astype(f32)[:, None]
        ls = (np.clip(np.round(steps / np.where(df > 0, df, 1)), -32, 31) + 32).astype(np.uint8)
        s_eff = (df * (ls.astype(f32) - 32)).reshape(-1)
    q = np.abs(x[..., None] / np.where(s_eff != 0, s_eff, 1)[:, None, None] - IQ4_KV).argmin(-1).astype(np.uint8)
    qs = q[:, :16] | (q[:, 16:] << 4)  # (groups, 16)
    if t == T.IQ4_NL:
        return np.concatenate([d.view(np.uint8).reshape(-1, 2), qs], axis=1).reshape(*a.shape[:-1], -1)
    high = np.zeros(ls.shape[0], np.uint16)
    for g in range(8):
        high |= ((ls[:, g] >> 4) & 3).astype(np.uint16) << (2 * g)
    low = (ls[:, 0::2] & 15) | ((ls[:, 1::2] & 15) << 4)
    parts = [d.view(np.uint8).reshape(-1, 2), high.view(np.uint8).reshape(-1, 2), low, qs.reshape(-1, 128)]
    return np.concatenate(parts, axis=1).reshape(*a.shape[:-1], -1)


# Qwen3 at widths K-quants take (rows of whole 256-weight blocks), its tokenizer from qwen3-f32.
QWEN3_K = dict(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2, head_dim=64)


def q4_k_m_layout(name):
    """As llama.cpp's Q4_K_M lays a model out: Q4_K for most matrices, Q6_K for the token
    embedding and (here) layer 0's attn_v and ffn_down, Q5_K for layer 1's (a Q5_K_M file's), and
    layer 1's other matrices in the 32-weight block types: llama-quantize's fallbacks for rows that
    are not whole 256-weight blocks (Q5_0, Q5_1, Q8_0), and Q4_0/Q4_1, all read here too."""
    block32 = {"q_proj": T.Q8_0, "k_proj": T.Q5_0, "o_proj": T.Q5_1, "gate_proj": T.Q4_0, "up_proj": T.Q4_1}
    if name == "model.embed_tokens.weight":
        return T.Q6_K
    if name.endswith(("v_proj.weight", "down_proj.weight")):
        return T.Q6_K if ".layers.0." in name else T.Q5_K
    if ".layers.1." in name:
        return block32[name.split(".")[-2]]
    return T.Q4_K


def q3_k_m_layout(name):
    """As llama.cpp's Q3_K_M (layer 0) and Q2_K (layer 1) files lay a model out: Q3_K or Q2_K for
    most matrices, attn_v and ffn_down a type up (Q4_K, Q3_K), the token embedding Q2_K."""
    if name == "model.embed_tokens.weight":
        return T.Q2_K
    up = name.endswith(("v_proj.weight", "down_proj.weight"))
    if ".layers.0." in name:
        return T.Q4_K if up else T.Q3_K
    return T.Q3_K if up else T.Q2_K


def iq4_xs_layout(name):
    """As an IQ4_XS file lays a model out: IQ4_XS, with IQ4_NL (its fallback for rows that are
    not whole 256-weight blocks) for layer 1."""
    return T.IQ4_NL if ".layers.1." in name else T.IQ4_XS


def moe_layout(name):
    """As llama.cpp's Q4_K_M lays out Qwen3-30B-A3B: the router in F32, the stacked experts'
    gate and up in Q4_K and down in Q6_K, attention in Q4_K, embedding and output in Q6_K."""
    if name.endswith("mlp.gate.weight"):
        return T.F32
    if name.endswith(("down_proj.weight", "embed_tokens.weight", "lm_head.weight")):
        return T.Q6_K
    return T.Q4_K


# Qwen3-MoE as llama.cpp's qwen3moe holds it: every layer sparse (8 experts, top 2, renormalized).
QWEN3_MOE_K = dict(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], num_experts=8, num_experts_per_tok=2,
                   moe_intermediate_size=256, decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True,
                   tie_word_embeddings=False)

# SmolLM3 as llama.cpp runs it: RoPE off in every 4th layer (its fixed step; MLX-LM's default); Q8_0
# needs no K-quant widths, so the text fixtures' small ones.
SMOLLM3_GGUF = dict(model_type="smollm3", architectures=["SmolLM3ForCausalLM"], num_hidden_layers=4, hidden_size=64,
                    intermediate_size=128, head_dim=16)

# Models at widths K-quants take (hidden 256): (name, layout of the 2-D and 3-D tensors, seed of
# the weights, GGUF architecture, config).
KQUANT_VARIANTS = [
    ("qwen3-q4_k_m", q4_k_m_layout, 31, "qwen3", {}),
    ("qwen3-q3_k_m", q3_k_m_layout, 37, "qwen3", {}),
    ("qwen3-iq4_xs", iq4_xs_layout, 41, "qwen3", {}),
    ("qwen3moe-q4_k_m", moe_layout, 43, "qwen3moe", QWEN3_MOE_K),
    ("smollm3-q8_0", lambda name: T.Q8_0, 47, "smollm3", SMOLLM3_GGUF),
]


def write_gpt_oss(fixtures_dir, out):
    """GPT-OSS (the text fixtures' config: YaRN, a sliding window of 8 so the rotating caches
    wrap, 8 experts) as llama.cpp's GptOssModel writes it: the experts MXFP4 (gate and up apart)
    with F32 biases, the sinks, router and norms F32, the rest Q8_0."""
    import fixtures as text_fixtures
    from mlx.utils import tree_flatten

    src = fixtures_dir / "qwen3-f32"
    config = dict(text_fixtures.GPT_OSS, max_position_embeddings=131072)
    model = text_fixtures.build_model(config, 53)
    weights = {k: np.array(v.astype(mx.float32)) for k, v in tree_flatten(model.parameters())}
    tokens, types, merges, ids, tc = vocab_metadata(src, config["vocab_size"])
    w = gguf.GGUFWriter(str(out), "gpt-oss")
    add_hparams(w, config)
    add_tokenizer(w, tokens, types, merges, "qwen2", {"eos": ids[tc["eos_token"]]}, False, tc.get("chat_template"))

    def type_of(name, a):
        if a.ndim == 1 or name.endswith((".bias", "sinks")) or ".router." in name:
            return T.F32
        return T.MXFP4 if ".experts." in name else T.Q8_0
    write_typed(w, config, weights, "gpt-oss", type_of)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return config


def write_ministral3(fixtures_dir, out):
    """Ministral 3 (the text fixtures' config, every layer full as in the released models) as
    llama.cpp's Ministral3Model writes it: the mistral3 architecture, q/k rows permuted, YaRN
    with mscale_all_dim as yarn_log_multiplier and llama_4_scaling_beta as the attention
    temperature scale, Q8_0. Its original context of 16 puts Llama 4's query scaling to work
    within the tests' prompts."""
    import fixtures as text_fixtures
    from mlx.utils import tree_flatten

    src = fixtures_dir / "qwen3-f32"
    config = dict(text_fixtures.MINISTRAL3, layer_types=["full_attention"] * text_fixtures.MINISTRAL3["num_hidden_layers"])
    del config["sliding_window"]
    params = config["rope_parameters"]
    model = text_fixtures.build_model(config, 59)
    weights = {k: np.array(v.astype(mx.float32)) for k, v in tree_flatten(model.parameters())}
    tokens, types, merges, ids, tc = vocab_metadata(src, config["vocab_size"])
    w = gguf.GGUFWriter(str(out), "mistral3")
    add_hparams(w, dict(config, rope_theta=params["rope_theta"]))
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(params["factor"])
    w.add_rope_scaling_orig_ctx_len(params["original_max_position_embeddings"])
    w.add_rope_scaling_yarn_beta_fast(params["beta_fast"])
    w.add_rope_scaling_yarn_beta_slow(params["beta_slow"])
    w.add_rope_scaling_yarn_log_mul(params["mscale_all_dim"])
    w.add_attn_temperature_scale(params["llama_4_scaling_beta"])
    add_tokenizer(w, tokens, types, merges, "qwen2", {"eos": ids[tc["eos_token"]]}, False, tc.get("chat_template"))
    write_typed(w, config, weights, "mistral3", lambda name, a: T.F32 if a.ndim == 1 else T.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return config


def write_kquant_variant(fixtures_dir, out, layout, seed, arch, extra):
    """Qwen3 (with `extra` in its config) at widths K-quants take, its 2-D and 3-D tensors typed
    by `layout`."""
    import fixtures as text_fixtures
    from mlx.utils import tree_flatten

    src = fixtures_dir / "qwen3-f32"
    config = {**json.loads((src / "config.json").read_text()), **QWEN3_K, **extra}
    model = text_fixtures.build_model(config, seed)
    weights = {k: np.array(v.astype(mx.float32)) for k, v in tree_flatten(model.parameters())}
    tokens, types, merges, ids, tc = vocab_metadata(src, config["vocab_size"])
    w = gguf.GGUFWriter(str(out), arch)
    add_hparams(w, config)
    special = {"eos": ids[tc["eos_token"]]}
    if tc.get("pad_token"):
        special["pad"] = ids[tc["pad_token"]]
    add_tokenizer(w, tokens, types, merges, "qwen2", special, False, tc.get("chat_template"))
    write_typed(w, config, weights, arch, lambda name, a: T.F32 if a.ndim == 1 else layout(name))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return config


# A ChatML-like template written with SentencePiece's control tokens.
SPM_TEMPLATE = ("{% for m in messages %}{{ '<s>' if loop.first else '' }}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n"
                "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
SPM_TEXT = ["naïve café — 海と空 🌊 émoji, tabs\tand  double  spaces", "Numbers 3.14159 and 1,000,000.", "<|user|> hi </s>"]


def spm_pieces(work):
    """The pieces, scores and llama.cpp token types of the SentencePiece model trained in `work`
    (`write_spm`), as `_set_vocab_sentencepiece` reads them."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(work / "spm.model"))
    n = sp.vocab_size()
    tokens = [sp.id_to_piece(i) for i in range(n)]
    scores = [sp.get_score(i) for i in range(n)]
    types = [2 if sp.is_unknown(i) else CONTROL if sp.is_control(i) else 6 if sp.is_byte(i)
             else USER_DEFINED if tokens[i] in ("<|user|>", "<|assistant|>") else UNUSED if sp.is_unused(i) else NORMAL
             for i in range(n)]
    return tokens, scores, types


def add_spm_tokenizer(w, tokens, scores, types, ids, add_bos, template, space_prefix=None):
    """A SentencePiece vocabulary's metadata; `ids`: bos, eos, unk and pad (None: not written)."""
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    for key, tid in zip(("bos", "eos", "unk", "pad"), ids):
        if tid is not None:
            getattr(w, f"add_{key}_token_id")(tid)
    w.add_add_bos_token(add_bos)
    w.add_add_eos_token(False)
    if space_prefix is not None:
        w.add_add_space_prefix(space_prefix)
    w.add_chat_template(template)


def write_spm(out, work):
    """A llama-architecture model with a SentencePiece BPE vocabulary (byte fallback, two
    user-defined tokens), trained here on MLX-LM's own sources (pinned, so the same everywhere),
    written as llama.cpp's `_set_vocab_sentencepiece` writes one."""
    import sentencepiece as spm
    import mlx_lm
    import fixtures
    from mlx.utils import tree_flatten

    corpus = work / "corpus.txt"
    files = sorted(Path(mlx_lm.__file__).parent.rglob("*.py"))
    corpus.write_text("\n".join([f.read_text() for f in files] + SPM_TEXT * 20))
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(work / "spm"), vocab_size=1000, model_type="bpe",
                                   byte_fallback=True, character_coverage=0.9995, num_threads=1, unk_id=0, bos_id=1, eos_id=2,
                                   pad_id=-1, user_defined_symbols=["<|user|>", "<|assistant|>"], max_sentence_length=100000,
                                   minloglevel=2)
    tokens, scores, types = spm_pieces(work)
    config = dict(fixtures.LLAMA_LINEAR, vocab_size=len(tokens), tie_word_embeddings=False)
    del config["rope_scaling"]
    model = fixtures.build_model(config, 11)
    weights = {k: np.array(v.astype(mx.float32)) for k, v in tree_flatten(model.parameters())}
    w = gguf.GGUFWriter(str(out), "llama")
    add_hparams(w, config)
    add_spm_tokenizer(w, tokens, scores, types, (1, 2, 0, None), True, SPM_TEMPLATE, space_prefix=True)
    write_tensors(w, config, weights, "llama", T.Q8_0, T.Q8_0)
    return config


# Gemma 3 as llama.cpp's gemma3 runs it, which takes from the metadata only the sliding window:
# every 6th layer global (six layers, so one is), queries scaled by head_dim, RoPE base 10000 on
# the sliding layers; window 8, shorter than the test prompts, so the rotating caches wrap; the
# 4B+ models' linear scaling on the global RoPE; Gemma 3's real 262,144-piece vocabulary.
GEMMA3_GGUF = dict(model_type="gemma3_text", hidden_size=64, num_hidden_layers=6, intermediate_size=128,
                   num_attention_heads=4, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16, sliding_window=8,
                   sliding_window_pattern=6, rope_theta=1000000.0, rope_local_base_freq=10000.0,
                   rope_scaling={"type": "linear", "factor": 8.0}, rms_norm_eps=1e-6, max_position_embeddings=32768,
                   vocab_size=262144, tie_word_embeddings=True)
BYTE = 6


def gemma_vocab(tok_dir):
    """Gemma 3's vocabulary as llama.cpp's converter writes it (`_set_vocab_sentencepiece`), from
    the tokenizer.json/tokenizer_config.json pair (the tokenizer.model it reads is not in the npm
    package): pieces in id order, <unk> unknown, <0xNN> bytes; then each added token control when
    special or special-looking (<mask>, <unused*>), else user-defined with its \u2581 written as
    spaces, score -1000. The other pieces' scores are not in tokenizer.json; they are written as 0
    (the loaders rank Gemma's merges by position, not score)."""
    tj = json.loads((tok_dir / "tokenizer.json").read_text())
    n = len(tj["model"]["vocab"])
    tokens, types, scores = [None] * n, [NORMAL] * n, [0.0] * n
    for t, i in tj["model"]["vocab"].items():
        tokens[i] = t
        types[i] = BYTE if len(t) == 6 and t.startswith("<0x") and t.endswith(">") else NORMAL
    types[3] = 2  # <unk>
    for a in tj["added_tokens"]:
        t, i = a["content"], a["id"]
        if i >= n:  # as the converter: past the sentencepiece model (<image_soft_token>)
            continue
        looks_special = t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or t.startswith("<unused") and t.endswith(">")
        if a["special"] or looks_special:
            types[i] = CONTROL
        else:
            t, types[i] = t.replace("\u2581", " "), USER_DEFINED
        tokens[i], scores[i] = t, -1000.0
    return tokens, types, scores


def write_gemma3(out, tok_dir, qtype, embed_qtype):
    """Gemma 3 written as convert_hf_to_gguf.py's Gemma3Model writes it: its hyperparameters (no
    sliding-window pattern or query scale: llama.cpp fixes those), the SentencePiece vocabulary
    without a space prefix, norm weights plus 1."""
    import fixtures as text_fixtures
    from mlx.utils import tree_flatten

    config = dict(GEMMA3_GGUF)
    model = text_fixtures.build_model(config, 13)
    # Tied, as every Gemma 3 (MLX-LM's model holds an lm_head until its checkpoint lacks one).
    weights = {k: np.array(v.astype(mx.float32)) for k, v in tree_flatten(model.parameters()) if k != "lm_head.weight"}
    tokens, types, scores = gemma_vocab(tok_dir)
    tc = json.loads((tok_dir / "tokenizer_config.json").read_text())
    w = gguf.GGUFWriter(str(out), "gemma3")
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(config["num_attention_heads"])
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_key_length(config["head_dim"])
    w.add_value_length(config["head_dim"])
    w.add_rope_freq_base(config["rope_theta"])
    w.add_sliding_window(config["sliding_window"])
    w.add_head_count_kv(config["num_key_value_heads"])
    w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    w.add_rope_scaling_factor(config["rope_scaling"]["factor"])
    # The base model's special tokens: EOS is <eos>; a chat turn ends at <end_of_turn> only by
    # llama.cpp's end-of-generation texts.
    add_spm_tokenizer(w, tokens, scores, types, (2, 1, 3, 0), True, tc["chat_template"], space_prefix=False)
    write_tensors(w, config, weights, "gemma3", qtype, embed_qtype)
    return config


# Phi-3's own chat template (Phi-3-mini-4k-instruct), ending turns with <|end|>.
PHI3_TEMPLATE = ("{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + "
                 "'<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
                 "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}")


def write_phi3(out, work):
    """Phi-3 (LongRoPE, 12 of 16 dimensions rotated, as Phi-4-mini's 96 of 128) written as
    convert_hf_to_gguf.py's Phi3MiniModel writes it: fused attn_qkv and ffn_up (gate and up),
    the context and the original context, the rotated dimensions, the LongRoPE factors as
    rope_factors_long/short tensors; the SentencePiece vocabulary trained for llama-spm with
    Phi-3's <|end|> (control) after it."""
    import fixtures as text_fixtures
    from mlx.utils import tree_flatten

    tokens, scores, types = (a + [b] for a, b in zip(spm_pieces(work), ("<|end|>", -1000.0, CONTROL)))
    config = dict(text_fixtures.PHI3, vocab_size=len(tokens))
    model = text_fixtures.build_model(config, 19)
    weights = {k: np.array(v.astype(mx.float32)) for k, v in tree_flatten(model.parameters())}
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    rot = int(config["partial_rotary_factor"] * config["hidden_size"]) // config["num_attention_heads"]
    scale = config["max_position_embeddings"] / config["original_max_position_embeddings"]
    w = gguf.GGUFWriter(str(out), "phi3")
    w.add_context_length(config["max_position_embeddings"])
    w.add_rope_scaling_orig_ctx_len(config["original_max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_head_count(config["num_attention_heads"])
    w.add_head_count_kv(config["num_key_value_heads"])
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_rope_dimension_count(rot)
    w.add_rope_freq_base(config["rope_theta"])
    w.add_sliding_window(0)
    w.add_rope_scaling_attn_factors(float(np.sqrt(1 + np.log(scale) / np.log(config["original_max_position_embeddings"]))))
    add_spm_tokenizer(w, tokens, scores, types, (1, 2, 0, None), False, PHI3_TEMPLATE)
    assert len(config["rope_scaling"]["long_factor"]) == rot // 2 and head_dim == 16
    write_typed(w, config, weights, "phi3", lambda name, a: T.F32 if a.ndim == 1 else T.Q8_0)
    for kind in ("long", "short"):
        w.add_tensor(f"rope_factors_{kind}.weight", np.array(config["rope_scaling"][f"{kind}_factor"], np.float32), raw_dtype=T.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return config


def check_config(name, source, converted):
    """The config converted back from the GGUF must say what the source folder says."""
    keys = ["hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "num_key_value_heads",
            "rms_norm_eps", "rope_theta", "vocab_size", "tie_word_embeddings", "max_position_embeddings",
            "num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size", "mlp_only_layers", "norm_topk_prob",
            "head_dim", "query_pre_attn_scalar", "sliding_window", "sliding_window_pattern", "rope_local_base_freq",
            "partial_rotary_factor", "original_max_position_embeddings"]
    for k in keys:
        if k in source and source[k] != converted.get(k):
            raise SystemExit(f"{name}: {k} is {converted.get(k)} after the round trip, {source[k]} in the source")
    def rounded(scaling):
        # LongRoPE factors come back as the float32 tensors the converter wrote; YaRN's `truncate`
        # (transformers' alone: llama.cpp and MLX-LM do not read it) has no GGUF key.
        return scaling and {k: (np.float32(v).tolist() if k.endswith("_factor") and isinstance(v, list) else v)
                            for k, v in scaling.items() if k != "truncate"}
    if rounded(source.get("rope_scaling")) != rounded(converted.get("rope_scaling")):
        raise SystemExit(f"{name}: rope_scaling {converted.get('rope_scaling')} != {source.get('rope_scaling')}")
    # Ministral 3's: all but `mscale` (no GGUF key holds it; 1, MLX-LM's default, in the models).
    params = {k: v for k, v in (source.get("rope_parameters") or {}).items() if k != "mscale"}
    if params and {k: converted["rope_parameters"].get(k) for k in params} != params:
        raise SystemExit(f"{name}: rope_parameters {converted['rope_parameters']} != {params}")


def tiny(out, arch="qwen3", pre="default", hidden=64, meta_hidden=None, bad_type=None, kquants=False, k_norm=False,
         rope_freqs=False, vocab_dir=None, yarn_attn_factor=None):
    """A small GGUF (byte vocabulary, 2 layers, F16; with `kquants`, 256 wide and Q4_K) for the
    malformed-file tests; with `vocab_dir`, that folder's byte-level vocabulary and merges under
    the pre-tokenizer `pre` instead (for the pre-tokenizer tests); with `yarn_attn_factor`, YaRN
    rotary scaling with that llama.cpp attention factor."""
    rng = np.random.default_rng(0)
    vocab, layers, ff, heads, kv = 256, 2, 256 if kquants else 128, 4, 2
    if vocab_dir is not None:
        vocab = json.loads((vocab_dir / "config.json").read_text())["vocab_size"]
    hd = hidden // heads
    w = gguf.GGUFWriter(str(out), arch)
    cfg = dict(max_position_embeddings=512, hidden_size=meta_hidden or hidden, num_hidden_layers=layers,
               intermediate_size=ff, num_attention_heads=heads, num_key_value_heads=kv, rms_norm_eps=1e-6,
               rope_theta=10000.0)
    add_hparams(w, cfg)
    if yarn_attn_factor is not None:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(4.0)
        w.add_rope_scaling_orig_ctx_len(128)
        w.add_rope_scaling_yarn_attn_factor(yarn_attn_factor)
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    if vocab_dir is None:
        add_tokenizer(w, [bytes_to_unicode()[b] for b in range(256)], [NORMAL] * vocab, [], pre, {"eos": 0}, False, None)
    else:
        tokens, types, merges, ids, tc = vocab_metadata(vocab_dir, vocab)
        add_tokenizer(w, tokens, types, merges, pre, {"eos": ids[tc["eos_token"]]}, False, None)
    shapes = {"token_embd.weight": (vocab, hidden), "output_norm.weight": (hidden,)}
    for i in range(layers):
        shapes.update({f"blk.{i}.attn_norm.weight": (hidden,), f"blk.{i}.ffn_norm.weight": (hidden,),
                       f"blk.{i}.attn_q.weight": (heads * hd, hidden), f"blk.{i}.attn_k.weight": (kv * hd, hidden),
                       f"blk.{i}.attn_v.weight": (kv * hd, hidden), f"blk.{i}.attn_output.weight": (hidden, heads * hd),
                       f"blk.{i}.attn_q_norm.weight": (hd,), f"blk.{i}.attn_k_norm.weight": (hd,),
                       f"blk.{i}.ffn_gate.weight": (ff, hidden), f"blk.{i}.ffn_up.weight": (ff, hidden),
                       f"blk.{i}.ffn_down.weight": (hidden, ff)})
    for name, shape in shapes.items():
        a = rng.standard_normal(shape).astype(np.float32) * 0.1
        t = T.F32 if len(shape) == 1 else (bad_type if bad_type and name == "blk.1.ffn_up.weight" else T.Q4_K if kquants else T.F16)
        if k_norm and name == "output_norm.weight":
            t = T.Q4_K
        if t == T.IQ3_XXS:
            # A type mlx-node refuses; only its size matters (gguf-py has no encoder for it).
            block, size = gguf.GGML_QUANT_SIZES[t]
            data = rng.integers(0, 256, size=(shape[0], shape[1] // block * size), dtype=np.uint8)
        else:
            data = a if t == T.F32 else quantize(a, t)
        w.add_tensor(name, data, raw_dtype=t)
    if rope_freqs:
        # Factors no Llama 3 scaling gives (rising and falling).
        w.add_tensor("rope_freqs.weight", np.array([1, 3, 1.5, 7, 2, 9, 1, 4][: hd // 2], np.float32), raw_dtype=T.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_split(whole, out, **split):
    """The GGUF file `whole` in parts, as llama-gguf-split splits a file: its metadata and tensors
    copied as they are by gguf-py's writer, which names the parts and writes the split keys
    (`split`: its split_max_tensors / small_first_shard options)."""
    r = gguf.GGUFReader(whole)
    w = gguf.GGUFWriter(str(out), r.fields["general.architecture"].contents(), **split)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        t = f.types[0]
        w.add_key_value(f.name, f.contents(), t, sub_type=f.types[-1] if t == gguf.GGUFValueType.ARRAY else None)
    for t in r.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def split_entry(out, name, whole):
    """The index entry of split file `name`, whose reference is the `whole` file's: the tests load
    it against the whole file's folder (a metadata entry or tensor lost on the way would show)."""
    parts = sorted(out.glob(f"{name}-*-of-*.gguf"))
    assert len(parts) > 1, parts
    return dict(whole, gguf=parts[0].name, parts=[p.name for p in parts])


def main():
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    fixtures, out, smollm2, gemma_tok = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    out.mkdir(parents=True, exist_ok=True)
    index = {}
    for name, source, arch, qtype, embed_qtype in VARIANTS:
        log(f"{name}: from {source}")
        src = fixtures / source
        path = out / f"{name}.gguf"
        config = write_variant(src, path, arch, qtype, embed_qtype)
        converted = gguf_to_mlx.convert(path, out / name, tokenizer_from=src)
        check_config(name, config, converted)
        gguf_to_mlx.check_block32_like_mlx(path)
        index[name] = {"gguf": path.name, "ref": name, "source": source, "arch": arch, "type": qtype.name, "embed": embed_qtype.name}
    for name, layout, seed, arch, extra in KQUANT_VARIANTS:
        log(f"{name}: K-quants")
        path = out / f"{name}.gguf"
        config = write_kquant_variant(fixtures, path, layout, seed, arch, extra)
        check_config(name, config, gguf_to_mlx.convert(path, out / name, tokenizer_from=fixtures / "qwen3-f32"))
        embed = layout("model.embed_tokens.weight").name
        index[name] = {"gguf": path.name, "ref": name, "arch": arch, "type": layout("model.layers.0.self_attn.q_proj.weight").name, "embed": embed}
    # Split files (as llama-gguf-split lays them out; gguf-py's writer splits them) of two of the
    # files above: their references are the whole files' folders.
    log("qwen3-q4_0-split: qwen3-q4_0.gguf in parts, the first holding the metadata alone")
    write_split(out / "qwen3-q4_0.gguf", out / "qwen3-q4_0-split.gguf", split_max_tensors=12, small_first_shard=True)
    index["qwen3-q4_0-split"] = split_entry(out, "qwen3-q4_0-split", index["qwen3-q4_0"])
    log("qwen3-q4_k_m-split: qwen3-q4_k_m.gguf in parts")
    write_split(out / "qwen3-q4_k_m.gguf", out / "qwen3-q4_k_m-split.gguf", split_max_tensors=14)
    index["qwen3-q4_k_m-split"] = split_entry(out, "qwen3-q4_k_m-split", index["qwen3-q4_k_m"])
    log("gpt-oss-mxfp4: GPT-OSS with MXFP4 experts")
    config = write_gpt_oss(fixtures, out / "gpt-oss-mxfp4.gguf")
    check_config("gpt-oss-mxfp4", config, gguf_to_mlx.convert(out / "gpt-oss-mxfp4.gguf", out / "gpt-oss-mxfp4", tokenizer_from=fixtures / "qwen3-f32"))
    index["gpt-oss-mxfp4"] = {"gguf": "gpt-oss-mxfp4.gguf", "ref": "gpt-oss-mxfp4", "arch": "gpt-oss", "type": "MXFP4", "embed": "Q8_0"}
    log("ministral3-q8_0: Ministral 3 (YaRN, Llama 4 query scaling)")
    config = write_ministral3(fixtures, out / "ministral3-q8_0.gguf")
    check_config("ministral3-q8_0", config, gguf_to_mlx.convert(out / "ministral3-q8_0.gguf", out / "ministral3-q8_0", tokenizer_from=fixtures / "qwen3-f32"))
    index["ministral3-q8_0"] = {"gguf": "ministral3-q8_0.gguf", "ref": "ministral3-q8_0", "arch": "mistral3", "type": "Q8_0", "embed": "Q8_0"}
    log("llama-spm: a SentencePiece vocabulary (tokenizer by transformers)")
    work = out / ".spm"
    work.mkdir()
    config = write_spm(out / "llama-spm.gguf", work)
    check_config("llama-spm", config, gguf_to_mlx.convert(out / "llama-spm.gguf", out / "llama-spm"))
    index["llama-spm"] = {"gguf": "llama-spm.gguf", "ref": "llama-spm", "arch": "llama", "type": "Q8_0", "embed": "Q8_0"}
    log("phi3-q8_0: Phi-3 with LongRoPE (tokenizer by transformers)")
    config = write_phi3(out / "phi3-q8_0.gguf", work)
    check_config("phi3-q8_0", config, gguf_to_mlx.convert(out / "phi3-q8_0.gguf", out / "phi3-q8_0"))
    index["phi3-q8_0"] = {"gguf": "phi3-q8_0.gguf", "ref": "phi3-q8_0", "arch": "phi3", "type": "Q8_0", "embed": "Q8_0"}
    log("gemma3-q4_0: Gemma 3's own vocabulary (tokenizer by transformers)")
    config = write_gemma3(out / "gemma3-q4_0.gguf", gemma_tok, T.Q4_0, T.Q8_0)
    # float32 scales: the file runs in float32 (Gemma's activations outgrow float16).
    check_config("gemma3-q4_0", config, gguf_to_mlx.convert(out / "gemma3-q4_0.gguf", out / "gemma3-q4_0", float32_scales=True))
    # Gemma 3's own tokenizer files beside the converted config: what the GGUF's tokenizer must
    # encode as (the reference reads no weights to encode).
    (out / "gemma3-own").mkdir()
    shutil.copy(out / "gemma3-q4_0" / "config.json", out / "gemma3-own")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(gemma_tok / f, out / "gemma3-own")
    index["gemma3-q4_0"] = {"gguf": "gemma3-q4_0.gguf", "ref": "gemma3-q4_0", "arch": "gemma3", "type": "Q4_0", "embed": "Q8_0",
                            "own": "gemma3-own"}
    log("smollm2: converting the real SmolLM2-135M-Instruct Q4_1 GGUF (tokenizer by transformers)")
    gguf_to_mlx.convert(smollm2, out / "smollm2")
    index["smollm2"] = {"gguf": str(smollm2), "ref": "smollm2", "arch": "llama", "type": "Q4_1", "embed": "Q8_0"}
    # What loadModel(file, { dtype: 'float32' }) runs: the scales widened to float32.
    gguf_to_mlx.convert(smollm2, out / "smollm2-f32", float32_scales=True)
    index["smollm2-f32"] = {"gguf": str(smollm2), "ref": "smollm2-f32", "arch": "llama", "type": "Q4_1", "embed": "Q8_0", "dtype": "float32"}
    # Pre-tokenizers of byte-level vocabularies (Mistral Nemo's tekken, Phi-4-mini's gpt-4o) over
    # Qwen3's vocabulary and merges: encoded as transformers' GGUF converter encodes.
    for pre in ("tekken", "gpt-4o"):
        name = f"pre-{pre}"
        log(f"{name}: a small model with the {pre} pre-tokenizer (tokenizer by transformers)")
        tiny(out / f"{name}.gguf", pre=pre, hidden=32, vocab_dir=fixtures / "qwen3-f32")
        gguf_to_mlx.convert(out / f"{name}.gguf", out / name)
        index[name] = {"gguf": f"{name}.gguf", "ref": name, "arch": "qwen3", "type": "F16", "embed": "F16"}
    bad = {}
    for file, kwargs in {
        "tiny.gguf": {},
        "arch-falcon.gguf": {"arch": "falcon"},
        "pre-jais.gguf": {"pre": "jais"},
        "type-q5_0.gguf": {"bad_type": T.Q5_0},
        "shapes.gguf": {"meta_hidden": 96},
        "type-iq3_xxs.gguf": {"hidden": 256, "kquants": True, "bad_type": T.IQ3_XXS},
        "kquants-norm.gguf": {"hidden": 256, "kquants": True, "k_norm": True},
        "rope-freqs.gguf": {"rope_freqs": True},
        "yarn-attn-factor.gguf": {"yarn_attn_factor": 2.0},
    }.items():
        tiny(out / file, **kwargs)
        bad[file] = kwargs and {k: (v.name if isinstance(v, T) else v) for k, v in kwargs.items()}
    (out / "index.json").write_text(json.dumps({"fixtures": index, "small": bad}, indent=2))


if __name__ == "__main__":
    main()
