"""Convert a Llama- or Qwen3-architecture GGUF file into an MLX-LM model folder, keeping its
quantized tensors as they are, so MLX-LM, mlx-node and llama.cpp run the very same weights.

Usage: gguf_to_mlx.py MODEL.gguf OUT_DIR

- Tensors come from MLX's own GGUF reader (`mx.load`): Q4_0/Q4_1/Q8_0 arrive as MLX affine
  (weight, scales, biases) triples with group 32; their float16 scales and biases are widened to
  float32 (exact), so activations stay float32 as in llama.cpp's CPU path.
- llama.cpp stores a llama model's q and k projection rows permuted for its rotary layout
  (convert_hf_to_gguf.py's `permute`); they are put back per head. Qwen3 is stored unpermuted
  (its converter derives from TextModel, not LlamaModel, and llama.cpp runs it with NeoX rotary).
- The tokenizer is rebuilt from the GGUF vocabulary with the `tokenizers` library (byte-level BPE;
  the `smollm` pre-tokenizer splits digits one by one, then GPT-2's byte-level regex; `qwen2` is
  Qwen2's split regex after NFC), control tokens as special added tokens, user-defined ones (Qwen3's
  <think>, <tool_call>, ...) as plain added tokens; the chat template and EOS come from the GGUF metadata.
"""

import json
import sys
from pathlib import Path

import mlx.core as mx
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

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
}
# llama.cpp's pre-tokenizer regexes (llama-vocab.cpp) as `tokenizers` Split patterns.
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def scalar(meta, key, default=None):
    if key not in meta:
        if default is None:
            raise SystemExit(f"the GGUF metadata has no {key}")
        return default
    v = meta[key].item()
    # float32 metadata (1e-5 reads as 9.99999974e-06): written back as its shortest float32 form.
    return float(f"{v:.7g}") if isinstance(v, float) else v


def unpermute(a, heads):
    """Inverse of llama.cpp's rotary row permutation, for a weight or its scales/biases."""
    rows, cols = a.shape
    return a.reshape(heads, rows // heads // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def convert(gguf, out):
    tensors, meta = mx.load(str(gguf), return_metadata=True)
    arch = meta["general.architecture"]
    if arch not in ("llama", "qwen3"):
        raise SystemExit(f"only llama and qwen3 GGUF files are converted here, not {arch}")
    hp = lambda key, default=None: scalar(meta, f"{arch}.{key}", default)  # noqa: E731
    heads, kv_heads = hp("attention.head_count"), hp("attention.head_count_kv")
    weights, quant = {}, {}
    for name, a in tensors.items():
        parts = name.split(".")
        if parts[0] == "blk":
            layer, kind, field = parts[1], parts[2], parts[3]
            module = f"model.layers.{layer}.{NAMES[kind]}"
            if arch == "llama" and kind in ("attn_q", "attn_k"):
                a = unpermute(a, heads if kind == "attn_q" else kv_heads)
        elif parts[0] == "token_embd":
            module, field = "model.embed_tokens", parts[1]
        elif parts[0] == "output_norm":
            module, field = "model.norm", parts[1]
        elif parts[0] == "output":
            module, field = "lm_head", parts[1]
        else:
            raise SystemExit(f"unexpected tensor {name}")
        if a.dtype == mx.float16:
            a = a.astype(mx.float32)
        weights[f"{module}.{field}"] = a
        if field == "scales":
            bits = 32 * tensors[name.replace("scales", "weight")].shape[1] // (a.shape[1] * 32)
            quant[module] = {"group_size": 32, "bits": bits}
    bits = sorted({q["bits"] for q in quant.values()})
    main_bits = max(bits, key=lambda b: sum(q["bits"] == b for q in quant.values()))
    quantization = {"group_size": 32, "bits": main_bits}
    quantization.update({m: q for m, q in quant.items() if q["bits"] != main_bits})
    hidden = hp("embedding_length")
    config = {
        "model_type": arch,
        "architectures": ["LlamaForCausalLM" if arch == "llama" else "Qwen3ForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": hp("feed_forward_length"),
        "num_hidden_layers": hp("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": hp("attention.key_length", hidden // heads),
        "rms_norm_eps": hp("attention.layer_norm_rms_epsilon"),
        "rope_theta": hp("rope.freq_base"),
        "vocab_size": tensors["token_embd.weight"].shape[0],
        "max_position_embeddings": hp("context_length"),
        "tie_word_embeddings": "lm_head.weight" not in weights,
        "hidden_act": "silu",
        "bos_token_id": scalar(meta, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": scalar(meta, "tokenizer.ggml.eos_token_id"),
        "torch_dtype": "float32",
        "quantization": quantization,
        "quantization_config": quantization,
    }
    if arch == "qwen3":
        config.update(attention_bias=False, rope_scaling=None, use_sliding_window=False, max_window_layers=config["num_hidden_layers"])
    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    write_tokenizer(meta, out, config["max_position_embeddings"])


def write_tokenizer(meta, out, max_length):
    if meta["tokenizer.ggml.model"] != "gpt2":
        raise SystemExit(f"only byte-level BPE vocabularies are converted, not {meta['tokenizer.ggml.model']}")
    tokens = meta["tokenizer.ggml.tokens"]
    types = meta["tokenizer.ggml.token_type"].tolist()
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False))
    pre = meta.get("tokenizer.ggml.pre")
    if pre == "qwen2":
        tok.normalizer = normalizers.NFC()
        splits = [pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    elif pre in ("smollm", "gpt2", None):
        splits = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        if pre == "smollm":
            splits.insert(0, pre_tokenizers.Digits(individual_digits=True))
    else:
        raise SystemExit(f"unknown pre-tokenizer {pre}")
    tok.pre_tokenizer = pre_tokenizers.Sequence(splits)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    # Token types (llama.cpp): 3 control (special), 4 user-defined (added, not special).
    tok.add_special_tokens([tokens[i] for i, t in enumerate(types) if t == 3])
    tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False) for i, t in enumerate(types) if t == 4])
    tok.save(str(out / "tokenizer.json"))
    name = lambda key: tokens[scalar(meta, key)] if key in meta else None  # noqa: E731
    cfg = {
        "tokenizer_class": "GPT2Tokenizer" if pre != "qwen2" else "Qwen2Tokenizer",
        "bos_token": name("tokenizer.ggml.bos_token_id"),
        "eos_token": name("tokenizer.ggml.eos_token_id"),
        "unk_token": name("tokenizer.ggml.unknown_token_id"),
        "pad_token": name("tokenizer.ggml.padding_token_id"),
        "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", mx.array(False)).item()),
        "chat_template": meta.get("tokenizer.chat_template"),
        "model_max_length": max_length,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
