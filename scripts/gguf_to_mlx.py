"""Convert a GGUF file into an MLX-LM model folder: the reference side of the GGUF tests
(MLX-LM runs the folder, mlx-node the GGUF itself) and of `npm run bench:llama`.

Usage: gguf_to_mlx.py MODEL.gguf OUT_DIR [--tokenizer-from DIR] [--float32-scales]

- Tensors come from MLX's own GGUF reader (`mx.load`): Q4_0/Q4_1/Q8_0 arrive as MLX affine
  (weight, scales, biases) triples with group 32 and float16 scales, kept as they are
  (`--float32-scales` widens them, exactly, so activations stay float32 as in llama.cpp's CPU
  path: the benchmark's choice). MLX reads BF16 as float16; BF16 tensors are taken from the file
  with gguf-py's reader instead, so they stay bfloat16.
- llama.cpp stores a llama-architecture model's q and k projection rows permuted for its rotary
  layout (convert_hf_to_gguf.py's `permute`); they are put back per head. qwen2 and qwen3 are
  stored unpermuted.
- config.json comes from the `<arch>.*` metadata; eos_token_id lists the end-of-generation ids
  (tokenizer.ggml.eos_token_id, eot_token_id, eom_token_id).
- The tokenizer is copied from --tokenizer-from (the folder the GGUF was written from), or built
  by transformers' own GGUF tokenizer converter (`convert_gguf_tokenizer`), fed the metadata read
  by gguf-py (transformers' GGUF reader itself needs PyTorch).
"""

import json
import shutil
import sys
from pathlib import Path

import gguf
import mlx.core as mx
import numpy as np

NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_exps": "mlp.switch_mlp.gate_proj",
    "ffn_up_exps": "mlp.switch_mlp.up_proj",
    "ffn_down_exps": "mlp.switch_mlp.down_proj",
}
# Gemma 3's four norms a layer: ffn_norm is the one before the MLP (Llama's second).
GEMMA3_NORMS = {
    "ffn_norm": "pre_feedforward_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
# Phi-3's fused projections.
PHI3_NAMES = {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}
# GPT-OSS's router, experts and pre-MLP norm (its per-head sinks are `self_attn.sinks`, no field).
GPT_OSS_NAMES = {"ffn_gate_inp": "mlp.router", "ffn_gate_exps": "mlp.experts.gate_proj", "ffn_up_exps": "mlp.experts.up_proj",
                 "ffn_down_exps": "mlp.experts.down_proj", "post_attention_norm": "post_attention_layernorm"}
ARCHS = {"phi3": "Phi3ForCausalLM", "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
         "qwen3moe": "Qwen3MoeForCausalLM", "gemma3": "Gemma3ForCausalLM", "smollm3": "SmolLM3ForCausalLM",
         "gpt-oss": "GptOssForCausalLM", "mistral3": "Ministral3ForCausalLM"}
MODEL_TYPES = {"qwen3moe": "qwen3_moe", "gemma3": "gemma3_text", "gpt-oss": "gpt_oss", "mistral3": "ministral3"}
# Tokens llama.cpp ends generation on wherever the vocabulary has them (llama-vocab.cpp).
END_TEXTS = ["<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
             "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>"]
PERMUTED = ("llama", "mistral", "smollm3", "mistral3")
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]
# tokenizer.ggml.pre names whose models' own tokenizers normalize to NFC.
NFC_PRE = ("qwen2", "deepseek-r1-qwen")


def read_metadata(path):
    reader = gguf.GGUFReader(str(path))
    meta = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    return reader, meta


def number(v):
    # float32 metadata (1e-5 reads as 9.99999974e-06): written back as its shortest float32 form.
    return float(f"{v:.7g}") if isinstance(v, float) else v


def unpermute(a, heads):
    """Inverse of llama.cpp's rotary row permutation, for a weight, its scales/biases or a bias."""
    rows = a.shape[0]
    return a.reshape(heads, rows // heads // 2, 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)


T = gguf.GGMLQuantizationType
K_QUANTS = (T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K)
# 32-weight block types: (bytes per block, bits as MLX holds them).
BLOCK32 = {T.Q4_0: (18, 4), T.Q4_1: (20, 4), T.Q5_0: (22, 8), T.Q5_1: (24, 8), T.Q8_0: (34, 8)}
IQ4 = (T.IQ4_NL, T.IQ4_XS)
# What MLX's reader cannot load as stored: files with any of these are read here instead.
READ_HERE = K_QUANTS + IQ4 + (T.Q5_0, T.Q5_1, T.MXFP4)


def read_kquant_file(reader):
    """A file with K-quants, which MLX's reader does not keep quantized (Q4_K and Q6_K become
    float16, the others fail): floats as stored; Q3_K, Q4_K and Q5_K as MLX affine triples in
    groups of 32 decoded from the blocks here (Q4_K/Q5_K: scale d * sc, bias -(dmin * m), Q5_K
    packed at 8 bits; Q3_K: 8-bit s * q + 124, scale d, bias -124 d), checked equal to gguf-py's
    own dequantization; Q2_K and Q6_K (sub-blocks of 16 with no common 8-bit grid) as gguf-py
    dequantizes them, quantized again by mx.quantize at 8 bits in groups of 32."""
    tensors = {}
    for t in reader.tensors:
        shape = [int(d) for d in reversed(t.shape.tolist())]
        raw = np.asarray(t.data)
        if t.tensor_type == T.F32:
            tensors[t.name] = mx.array(raw.reshape(shape).astype(np.float32))
        elif t.tensor_type == T.F16:
            tensors[t.name] = mx.array(raw.reshape(shape).astype(np.float16))
        elif t.tensor_type == T.BF16:
            continue  # taken below
        elif t.tensor_type in K_QUANTS or t.tensor_type in IQ4:
            base = t.name[: -len(".weight")]
            deq = gguf.quants.dequantize(raw, t.tensor_type).reshape(shape).astype(np.float32)
            if t.tensor_type in (T.Q2_K, T.Q6_K):
                w, scales, biases = mx.quantize(mx.array(deq), group_size=32, bits=8)
            else:
                decode = decode_q3_k if t.tensor_type == T.Q3_K else decode_iq4 if t.tensor_type in IQ4 else decode_q45_k
                # Stacked experts ([experts, out, in]) decode as one matrix of all their rows.
                flat = [int(np.prod(shape[:-1])), shape[-1]]
                w, scales, biases, bits = decode(raw.reshape(-1, raw.shape[-1]), flat, t.tensor_type)
                w, scales, biases = (a.reshape(*shape[:-1], a.shape[-1]) for a in (w, scales, biases))
                back = np.array(mx.dequantize(w, scales, biases, group_size=32, bits=bits))
                if not np.array_equal(back, deq):
                    raise SystemExit(f"{t.name}: the affine form of {t.tensor_type.name} differs from gguf-py's dequantization")
            tensors.update({f"{base}.weight": w, f"{base}.scales": scales, f"{base}.biases": biases})
        elif t.tensor_type == T.MXFP4:
            base = t.name[: -len(".weight")]
            w, scales = decode_mxfp4(raw.reshape(-1, 17), shape)
            deq = gguf.quants.dequantize(raw, t.tensor_type).reshape(shape).astype(np.float32)
            if not np.array_equal(np.array(mx.dequantize(w, scales, group_size=32, bits=4, mode="mxfp4").astype(mx.float32)), deq):
                raise SystemExit(f"{t.name}: MLX's mxfp4 form differs from gguf-py's dequantization")
            tensors.update({f"{base}.weight": w, f"{base}.scales": scales})
        elif t.tensor_type in BLOCK32:
            base = t.name[: -len(".weight")]
            w, scales, biases, bits = decode_block32(raw.reshape(-1, raw.shape[-1]), shape, t.tensor_type)
            deq = gguf.quants.dequantize(raw, t.tensor_type).reshape(shape).astype(np.float32)
            back = np.array(mx.dequantize(w, scales.astype(mx.float32), biases.astype(mx.float32), group_size=32, bits=bits))
            if not np.array_equal(back, deq):
                raise SystemExit(f"{t.name}: the affine form of {t.tensor_type.name} differs from gguf-py's dequantization")
            tensors.update({f"{base}.weight": w, f"{base}.scales": scales, f"{base}.biases": biases})
        else:
            raise SystemExit(f"{t.name}: {t.tensor_type.name} is not converted here")
    return tensors


def llama3_scaling(factors, base, dim):
    """The Llama 3.1 rope_scaling behind a file's rope_freqs.weight: Meta's parameters (low 1,
    high 4, context 8192, factor the largest), checked against the factors convert_hf_to_gguf.py
    computes from them."""
    factor, low, high, context = float(factors.max()), 1.0, 4.0, 8192
    freqs = 1.0 / (base ** (np.arange(0, dim, 2) / dim))
    wavelen = 2 * np.pi / freqs
    smooth = (context / wavelen - low) / (high - low)
    want = np.where(wavelen < context / high, 1.0, np.where(wavelen > context / low, factor, 1 / ((1 - smooth) / factor + smooth)))
    if not np.allclose(want, factors, rtol=1e-5, atol=0):
        raise SystemExit(f"rope_freqs.weight {factors} is not Llama 3.1 scaling with low 1, high 4, context 8192")
    return {"rope_type": "llama3", "factor": factor, "low_freq_factor": low, "high_freq_factor": high,
            "original_max_position_embeddings": context}


def decode_block32(raw, shape, qtype):
    """Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 blocks as MLX's (packed weights, float16 scales, float16 biases,
    bits), the form MLX's reader gives Q4_0, Q4_1 and Q8_0 (check_block32_like_mlx): per block
    scale d, bias -8d (Q4_0), m (Q4_1, Q5_1), -16d (Q5_0) or -128d (Q8_0, its values + 128)."""
    size, bits = BLOCK32[qtype]
    blocks = raw.reshape(-1, size)
    d = blocks[:, 0:2].copy().view(np.float16)[:, 0]
    if qtype == T.Q8_0:
        q = (blocks[:, 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
        bias = (d.astype(np.float32) * -128).astype(np.float16)
    else:
        has_m = qtype in (T.Q4_1, T.Q5_1)
        at = 4 if has_m else 2
        qh = None
        if qtype in (T.Q5_0, T.Q5_1):
            qh = blocks[:, at:at + 4].copy().view("<u4")[:, 0]
            at += 4
        qs = blocks[:, at:at + 16]
        q = np.concatenate([qs & 15, qs >> 4], axis=1)
        if qh is not None:
            q = q | ((((qh[:, None] >> np.arange(32, dtype=np.uint32)[None, :]) & 1) << 4).astype(np.uint8))
        if has_m:
            bias = blocks[:, 2:4].copy().view(np.float16)[:, 0]
        else:
            bias = (d.astype(np.float32) * (-8 if qtype == T.Q4_0 else -16)).astype(np.float16)
    rows, cols = shape
    q = q.reshape(rows, cols).astype(np.uint8)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)) if bits == 4 else q
    return (mx.array(packed.copy().view(np.uint32)), mx.array(d.reshape(rows, cols // 32)),
            mx.array(bias.reshape(rows, cols // 32)), bits)


def check_block32_like_mlx(path):
    """decode_block32 gives Q4_0, Q4_1 and Q8_0 tensors exactly the arrays MLX's own reader gives
    them (so files read here and files MLX reads hold their weights in one form)."""
    reader = gguf.GGUFReader(str(path))
    loaded = mx.load(str(path))
    for t in reader.tensors:
        if t.tensor_type in (T.Q4_0, T.Q4_1, T.Q8_0):
            shape = [int(d) for d in reversed(t.shape.tolist())]
            raw = np.asarray(t.data)
            ours = decode_block32(raw.reshape(-1, raw.shape[-1]), shape, t.tensor_type)[:3]
            base = t.name[: -len(".weight")]
            for field, a in zip(("weight", "scales", "biases"), ours):
                b = loaded[f"{base}.{field}"]
                if a.dtype != b.dtype or a.shape != b.shape or not np.array_equal(np.array(a), np.array(b)):
                    raise SystemExit(f"{path.name}: {base}.{field} ({t.tensor_type.name}) differs from MLX's reader")


def decode_mxfp4(blocks, shape):
    """MXFP4 blocks (an E8M0 scale byte, then values 0-15 in the low nibbles of 16 bytes and
    16-31 in the high ones) as MLX's mxfp4 (the values packed in order, uint8 scales)."""
    q = np.concatenate([blocks[:, 1:] & 15, blocks[:, 1:] >> 4], axis=1)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    return (mx.array(packed.reshape(*shape[:-1], shape[-1] // 2).copy().view(np.uint32)),
            mx.array(blocks[:, 0].reshape(*shape[:-1], shape[-1] // 32).copy()))


def decode_q3_k(raw, shape, qtype):
    """Q3_K blocks (rows of bytes) as MLX's (8-bit values s * q + 124, scales d, biases -124 d,
    bits): s the sub-block's 6-bit scale less 32, q its 3-bit value less 4 (the high bit in
    hmask clear subtracts 4)."""
    blocks = raw.reshape(-1, 110)
    hmask, qs, sb = blocks[:, 0:32], blocks[:, 32:96], blocks[:, 96:108]
    d = blocks[:, 108:110].copy().view(np.float16)[:, 0].astype(np.float32)
    low = np.concatenate([sb[:, 0:8] & 15, sb[:, 0:8] >> 4], axis=1)  # sub-blocks 0-7, 8-15
    high = np.concatenate([(sb[:, 8:12] >> (2 * g)) & 3 for g in range(4)], axis=1)  # j = 4 g + j % 4
    s = (low | (high << 4)).astype(np.int32) - 32
    i = np.arange(256)
    h, k, l = i // 128, i % 128 // 32, i % 32
    q = ((qs[:, 32 * h + l] >> (2 * k)) & 3).astype(np.int32) - 4 * (1 - ((hmask[:, l] >> (i // 32)) & 1))
    values = (s[:, i // 16] * q + 124).astype(np.uint8)
    rows, cols = shape
    scales = np.repeat(d, 8).reshape(rows, cols // 32)
    return (mx.array(values.reshape(rows, cols).copy().view(np.uint32)), mx.array(scales),
            mx.array(-124 * scales), 8)


def decode_iq4(raw, shape, qtype):
    """IQ4_NL / IQ4_XS blocks as MLX's (8-bit table values + 127, scales d, biases -127 d,
    bits), d per group of 32: IQ4_NL's float16 d, IQ4_XS's d * (ls - 32)."""
    f32 = np.float32
    kv = np.array(gguf.quants.IQ4_NL.kvalues, np.int32) + 127
    if qtype == T.IQ4_NL:
        blocks = raw.reshape(-1, 18)
        d = blocks[:, 0:2].copy().view(np.float16)[:, 0].astype(f32)
        qs = blocks[:, 2:18]
    else:
        blocks = raw.reshape(-1, 136)
        d0 = blocks[:, 0:2].copy().view(np.float16)[:, 0].astype(f32)
        high = blocks[:, 2:4].copy().view(np.uint16)[:, 0]
        low = np.stack([blocks[:, 4:8] & 15, blocks[:, 4:8] >> 4], axis=2).reshape(-1, 8)
        ls = low.astype(np.int32) | (((high[:, None] >> (2 * np.arange(8, dtype=np.uint16))) & 3).astype(np.int32) << 4)
        d = (d0[:, None] * (ls - 32).astype(f32)).reshape(-1)
        qs = blocks[:, 8:].reshape(-1, 16)
    values = kv[np.concatenate([qs & 15, qs >> 4], axis=1)].astype(np.uint8)
    rows, cols = shape
    scales = d.reshape(rows, cols // 32)
    return (mx.array(values.reshape(rows, cols).copy().view(np.uint32)), mx.array(scales), mx.array(-127 * scales), 8)


def decode_q45_k(raw, shape, qtype):
    """Q4_K / Q5_K blocks (rows of bytes) as MLX's (packed weights, scales, biases, bits)."""
    f32 = np.float32
    blocks = raw.reshape(-1, 144 if qtype == T.Q4_K else 176)
    d = blocks[:, 0:2].copy().view(np.float16)[:, 0].astype(f32)
    dmin = blocks[:, 2:4].copy().view(np.float16)[:, 0].astype(f32)
    b = blocks[:, 4:16]
    sc = np.concatenate([b[:, 0:4] & 63, (b[:, 8:12] & 15) | ((b[:, 0:4] >> 6) << 4)], axis=1)
    m = np.concatenate([b[:, 4:8] & 63, (b[:, 8:12] >> 4) | ((b[:, 4:8] >> 6) << 4)], axis=1)
    qs = blocks[:, -128:].reshape(-1, 4, 32)
    q = np.stack([qs & 15, qs >> 4], axis=2).reshape(-1, 8, 32)  # sub-block 2c: low nibbles
    if qtype == T.Q5_K:
        qh = blocks[:, 16:48]
        q = q + (((qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1) << 4)
    rows, cols = shape
    scales = (d[:, None] * sc.astype(f32)).reshape(rows, cols // 32)
    biases = (-(dmin[:, None] * m.astype(f32))).reshape(rows, cols // 32)
    q = q.reshape(rows, cols).astype(np.uint8)
    if qtype == T.Q4_K:
        packed = (q[:, 0::2] | (q[:, 1::2] << 4)).copy().view(np.uint32)
        bits = 4
    else:
        packed = q.copy().view(np.uint32)
        bits = 8
    return mx.array(packed), mx.array(scales), mx.array(biases), bits


def convert(path, out, tokenizer_from=None, float32_scales=False):
    reader, meta = read_metadata(path)
    arch = meta["general.architecture"]
    if arch not in ARCHS:
        raise SystemExit(f"GGUF architecture {arch} is not converted here")

    def hp(key, default=KeyError):
        k = f"{arch}.{key}"
        if k not in meta:
            if default is KeyError:
                raise SystemExit(f"the GGUF metadata has no {k}")
            return default
        return number(meta[k])

    heads = hp("attention.head_count")
    kv_heads = hp("attention.head_count_kv", heads)
    if any(t.tensor_type in READ_HERE for t in reader.tensors):
        tensors = read_kquant_file(reader)
    else:
        tensors = mx.load(str(path))
    for t in reader.tensors:
        if t.tensor_type == gguf.GGMLQuantizationType.BF16:
            raw = np.asarray(t.data).view(np.uint16).reshape([int(d) for d in reversed(t.shape.tolist())])
            tensors[t.name] = mx.array(raw).view(mx.bfloat16)
    rope_freqs = tensors.pop("rope_freqs.weight", None)
    long_factors, short_factors = tensors.pop("rope_factors_long.weight", None), tensors.pop("rope_factors_short.weight", None)
    names = dict(NAMES, **{"gemma3": GEMMA3_NORMS, "phi3": PHI3_NAMES, "gpt-oss": GPT_OSS_NAMES}.get(arch, {}))
    weights, quant = {}, {}
    for name, a in tensors.items():
        parts = name.split(".")
        if parts[0] == "blk":
            layer, kind, field = parts[1], parts[2], parts[3]
            if kind == "attn_sinks":
                weights[f"model.layers.{layer}.self_attn.sinks"] = a
                continue
            module = f"model.layers.{layer}.{names[kind]}"
            if arch in PERMUTED and kind in ("attn_q", "attn_k"):
                a = unpermute(a, heads if kind == "attn_q" else kv_heads)
        elif parts[0] in ("token_embd", "output_norm", "output"):
            module = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}[parts[0]]
            field = parts[1]
        else:
            raise SystemExit(f"unexpected tensor {name}")
        if arch == "gemma3" and name.endswith("norm.weight"):
            # llama.cpp's converter stores Gemma's norms plus 1 (its RMSNorm scales by the weight alone).
            a = a.astype(mx.float32) - 1
        if float32_scales and field in ("scales", "biases") and a.dtype == mx.float16:
            a = a.astype(mx.float32)
        weights[f"{module}.{field}"] = a
        if field == "scales":
            bits = tensors[name.replace("scales", "weight")].shape[-1] // a.shape[-1]
            quant[module] = {"group_size": 32, "bits": bits}
            if a.dtype == mx.uint8:
                quant[module]["mode"] = "mxfp4"
    hidden = hp("embedding_length")
    eos = []
    for key in ("eos_token_id", "eot_token_id", "eom_token_id"):
        v = meta.get(f"tokenizer.ggml.{key}")
        if v is not None and int(v) not in eos:
            eos.append(int(v))
    eos += [i for i, t in enumerate(meta["tokenizer.ggml.tokens"]) if t in END_TEXTS and i not in eos]
    config = {
        "model_type": MODEL_TYPES.get(arch, arch),
        "architectures": [ARCHS[arch]],
        "hidden_size": hidden,
        "intermediate_size": hp("feed_forward_length"),
        "num_hidden_layers": hp("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": hp("attention.key_length", hidden // heads),
        "rms_norm_eps": hp("attention.layer_norm_rms_epsilon"),
        "rope_theta": hp("rope.freq_base", 1000000.0 if arch in ("qwen3", "gemma3") else 10000.0),
        "vocab_size": tensors["token_embd.weight"].shape[0],
        "tie_word_embeddings": "lm_head.weight" not in weights,
        "hidden_act": "silu",
    }
    rot = hp("rope.dimension_count", config["head_dim"])
    if rot != config["head_dim"]:
        config["partial_rotary_factor"] = rot / config["head_dim"]
    if long_factors is not None:
        # Phi-3's LongRoPE, which the converter writes as two tensors.
        config.update(original_max_position_embeddings=hp("rope.scaling.original_context_length"),
                      rope_scaling={"type": "longrope", "long_factor": np.array(long_factors).tolist(),
                                    "short_factor": np.array(short_factors).tolist()})
    if arch == "gemma3":
        # What llama.cpp's gemma3 takes as given: with a sliding window every 6th layer global,
        # the others on RoPE base 10000; queries scaled by head_dim (27B, 62 layers: hidden / heads).
        del config["hidden_act"]
        window = meta.get("gemma3.attention.sliding_window")
        layers = config["num_hidden_layers"]
        config.update(query_pre_attn_scalar=hidden // heads if layers == 62 else config["head_dim"],
                      sliding_window=int(window) if window is not None else 2**31 - 1,
                      sliding_window_pattern=6 if window is not None else 1, rope_local_base_freq=10000.0)
    if f"{arch}.context_length" in meta:
        config["max_position_embeddings"] = hp("context_length")
    if arch == "gpt-oss":
        # The experts are its MLP; sliding and full layers alternate (MLX-LM's default layer_types).
        config.update(num_local_experts=hp("expert_count"), num_experts_per_tok=hp("expert_used_count"),
                      intermediate_size=hp("expert_feed_forward_length"), sliding_window=hp("attention.sliding_window"))
    if arch == "qwen3moe":
        # llama.cpp's qwen3moe: layers with a router are sparse, their top-k weights renormalized.
        config.update(num_experts=hp("expert_count"), num_experts_per_tok=hp("expert_used_count"),
                      moe_intermediate_size=hp("expert_feed_forward_length"), decoder_sparse_step=1, norm_topk_prob=True,
                      mlp_only_layers=[i for i in range(config["num_hidden_layers"]) if f"blk.{i}.ffn_gate_inp.weight" not in tensors])
    if eos:
        config["eos_token_id"] = eos[0] if len(eos) == 1 else eos
    scaling = meta.get(f"{arch}.rope.scaling.type")
    if scaling == "linear":
        config["rope_scaling"] = {"type": "linear", "factor": hp("rope.scaling.factor")}
    elif scaling == "yarn":
        config["rope_scaling"] = {"rope_type": "yarn", "factor": hp("rope.scaling.factor"),
                                  "original_max_position_embeddings": hp("rope.scaling.original_context_length")}
        for key in ("beta_fast", "beta_slow"):
            if f"{arch}.rope.scaling.yarn_{key}" in meta:
                config["rope_scaling"][key] = hp(f"rope.scaling.yarn_{key}")
    elif scaling not in (None, "none"):
        raise SystemExit(f"rope scaling {scaling} is not converted here")
    if arch == "mistral3":
        # Ministral 3 (Ministral3Model): MLX-LM reads every rotary parameter from rope_parameters; the
        # converter writes mscale_all_dim as yarn_log_multiplier and Llama 4's beta as temperature_scale.
        params = config.pop("rope_scaling", None) or {"rope_type": "default"}
        if f"{arch}.rope.scaling.yarn_log_multiplier" in meta:
            params["mscale_all_dim"] = hp("rope.scaling.yarn_log_multiplier")
        config["rope_parameters"] = dict(params, rope_theta=config["rope_theta"], llama_4_scaling_beta=hp("attention.temperature_scale"),
                                         original_max_position_embeddings=hp("rope.scaling.original_context_length"))
    if rope_freqs is not None:
        config["rope_scaling"] = llama3_scaling(np.array(rope_freqs), config["rope_theta"], config["head_dim"])
    if arch in PERMUTED:
        config.update(attention_bias="model.layers.0.self_attn.q_proj.bias" in weights,
                      mlp_bias="model.layers.0.mlp.up_proj.bias" in weights)
    if quant:
        main_bits = max(sorted({q["bits"] for q in quant.values()}), key=lambda b: sum(q["bits"] == b for q in quant.values()))
        quantization = {"group_size": 32, "bits": main_bits}
        quantization.update({m: q for m, q in quant.items() if q != quantization})
        config["quantization"] = quantization
    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    if tokenizer_from is not None:
        for f in TOKENIZER_FILES:
            if (tokenizer_from / f).exists():
                shutil.copy(tokenizer_from / f, out / f)
    else:
        write_tokenizer(arch, meta, out)
    return config


def write_tokenizer(arch, meta, out):
    """transformers' GGUF tokenizer, from the metadata as its `get_gguf_tokenizer` groups it."""
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer

    def plain(v):
        return v.tolist() if isinstance(v, np.ndarray) else v

    grouped = {
        group: {name: plain(meta[f"tokenizer.{key}"]) for key, name in renames.items() if f"tokenizer.{key}" in meta}
        for group, renames in GGUF_TOKENIZER_MAPPING.items()
    }
    tokens = grouped["tokenizer"]["tokens"]
    config = grouped["tokenizer_config"]
    if grouped["tokenizer"].get("tokenizer_type") == "llama":
        # As get_gguf_tokenizer: llama.cpp adds BOS to a sentencepiece vocabulary that does not say otherwise.
        config.setdefault("add_bos_token", True)
    backend, _ = convert_gguf_tokenizer(arch, grouped["tokenizer"])
    if meta.get("tokenizer.ggml.pre") in NFC_PRE and backend.normalizer is None:
        # Qwen2's own tokenizer.json (Qwen2TokenizerFast) composes text to NFC first; a GGUF does
        # not carry the normalizer and transformers' converter leaves it out ("e" + a combining
        # accent then tokenizes apart). mlx-node's GGUF loader adds it for the same names
        # (crates/lm/src/gguf/tokenizer.rs).
        from tokenizers import normalizers
        backend.normalizer = normalizers.NFC()
    for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"), ("unk_token", "unknown_token_id"), ("pad_token", "padding_token_id")):
        v = meta.get(f"tokenizer.ggml.{key}")
        if v is not None:
            config[name] = tokens[int(v)]
    template = config.pop("chat_template", None)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, **config)
    if template is not None:
        tok.chat_template = template
    tok.save_pretrained(str(out))


if __name__ == "__main__":
    args = sys.argv[1:]
    float32_scales = "--float32-scales" in args
    args = [a for a in args if a != "--float32-scales"]
    tokenizer_from = None
    if "--tokenizer-from" in args:
        i = args.index("--tokenizer-from")
        tokenizer_from = Path(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        raise SystemExit(__doc__)
    convert(Path(args[0]), Path(args[1]), tokenizer_from, float32_scales)
