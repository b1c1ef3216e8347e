"""Write the GGUF test fixtures: GGUF files made from the seeded random text fixtures, as
llama.cpp's converter writes them, and for each the MLX folder converted back from the GGUF
(scripts/gguf_to_mlx.py, with MLX's own `mx.load`), which MLX-LM runs as the reference.
Also the real SmolLM2-135M-Instruct Q4_1 GGUF's folder, and small malformed files.

Usage: fixtures_gguf.py FIXTURES_DIR OUT_DIR SMOLLM2_GGUF

The GGUF side follows convert_hf_to_gguf.py: `<arch>.*` hyperparameters, the byte-level BPE
vocabulary as tokenizer.ggml.* (ids the tokenizer lacks become "[PAD<id>]" of type unused, added
special tokens control, other added tokens user-defined), q/k rows permuted for llama-architecture
models (Mistral is written as llama, as llama.cpp does), 1-D tensors in F32, the rest in the
variant's type (gguf-py's own quantizers).
"""

import json
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
]
NAMES = {v: k for k, v in gguf_to_mlx.NAMES.items()}
# Token types (llama.cpp).
NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5


def log(msg):
    print(f"[fixtures-gguf] {msg}", file=sys.stderr, flush=True)


def gguf_name(name):
    if name.startswith("model.layers."):
        _, _, layer, *rest = name.split(".")
        module, field = ".".join(rest[:-1]), rest[-1]
        return f"blk.{layer}.{NAMES[module]}.{field}"
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
    scaling = config.get("rope_scaling")
    if scaling:
        assert scaling["type"] == "linear", scaling
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
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    for name in sorted(weights):
        a = weights[name]
        if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight", "q_proj.bias", "k_proj.bias")):
            a = permute(a, heads if ".q_proj." in name else kv_heads)
        t = T.F32 if a.ndim == 1 else embed_qtype if name == "model.embed_tokens.weight" else qtype
        data = a if t == T.F32 else gguf.quants.quantize(a, t)
        w.add_tensor(gguf_name(name), data, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# A ChatML-like template written with SentencePiece's control tokens.
SPM_TEMPLATE = ("{% for m in messages %}{{ '<s>' if loop.first else '' }}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n"
                "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
SPM_TEXT = ["naïve café — 海と空 🌊 émoji, tabs\tand  double  spaces", "Numbers 3.14159 and 1,000,000.", "<|user|> hi </s>"]


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
    sp = spm.SentencePieceProcessor(model_file=str(work / "spm.model"))
    n = sp.vocab_size()
    tokens, scores, types = [], [], []
    for i in range(n):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        types.append(2 if sp.is_unknown(i) else CONTROL if sp.is_control(i) else 6 if sp.is_byte(i)
                     else USER_DEFINED if sp.id_to_piece(i) in ("<|user|>", "<|assistant|>") else UNUSED if sp.is_unused(i) else NORMAL)
    config = dict(fixtures.LLAMA_LINEAR, vocab_size=n, tie_word_embeddings=False)
    del config["rope_scaling"]
    model = fixtures.build_model(config, 11)
    weights = {k: np.array(v.astype(mx.float32)) for k, v in tree_flatten(model.parameters())}
    w = gguf.GGUFWriter(str(out), "llama")
    add_hparams(w, config)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.add_chat_template(SPM_TEMPLATE)
    write_tensors(w, config, weights, "llama", T.Q8_0, T.Q8_0)
    return config


def check_config(name, source, converted):
    """The config converted back from the GGUF must say what the source folder says."""
    keys = ["hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "num_key_value_heads",
            "rms_norm_eps", "rope_theta", "vocab_size", "tie_word_embeddings", "max_position_embeddings"]
    for k in keys:
        if k in source and source[k] != converted.get(k):
            raise SystemExit(f"{name}: {k} is {converted.get(k)} after the round trip, {source[k]} in the source")
    if source.get("rope_scaling") != converted.get("rope_scaling"):
        raise SystemExit(f"{name}: rope_scaling {converted.get('rope_scaling')} != {source.get('rope_scaling')}")


def tiny(out, arch="qwen3", pre="default", hidden=64, meta_hidden=None, bad_type=None):
    """A small GGUF (byte vocabulary, 2 layers, F16) for the malformed-file tests."""
    rng = np.random.default_rng(0)
    vocab, layers, ff, heads, kv = 256, 2, 128, 4, 2
    hd = hidden // heads
    w = gguf.GGUFWriter(str(out), arch)
    cfg = dict(max_position_embeddings=512, hidden_size=meta_hidden or hidden, num_hidden_layers=layers,
               intermediate_size=ff, num_attention_heads=heads, num_key_value_heads=kv, rms_norm_eps=1e-6,
               rope_theta=10000.0)
    add_hparams(w, cfg)
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    tokens = [bytes_to_unicode()[b] for b in range(256)]
    add_tokenizer(w, tokens, [NORMAL] * vocab, [], pre, {"eos": 0}, False, None)
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
        t = T.F32 if len(shape) == 1 else (bad_type if bad_type and name == "blk.1.ffn_up.weight" else T.F16)
        w.add_tensor(name, a if t == T.F32 else gguf.quants.quantize(a, t), raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    fixtures, out, smollm2 = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    index = {}
    for name, source, arch, qtype, embed_qtype in VARIANTS:
        log(f"{name}: from {source}")
        src = fixtures / source
        path = out / f"{name}.gguf"
        config = write_variant(src, path, arch, qtype, embed_qtype)
        converted = gguf_to_mlx.convert(path, out / name, tokenizer_from=src)
        check_config(name, config, converted)
        index[name] = {"gguf": path.name, "ref": name, "source": source, "arch": arch, "type": qtype.name, "embed": embed_qtype.name}
    log("llama-spm: a SentencePiece vocabulary (tokenizer by transformers)")
    work = out / ".spm"
    work.mkdir()
    config = write_spm(out / "llama-spm.gguf", work)
    check_config("llama-spm", config, gguf_to_mlx.convert(out / "llama-spm.gguf", out / "llama-spm"))
    index["llama-spm"] = {"gguf": "llama-spm.gguf", "ref": "llama-spm", "arch": "llama", "type": "Q8_0", "embed": "Q8_0"}
    log("smollm2: converting the real SmolLM2-135M-Instruct Q4_1 GGUF (tokenizer by transformers)")
    gguf_to_mlx.convert(smollm2, out / "smollm2")
    index["smollm2"] = {"gguf": str(smollm2), "ref": "smollm2", "arch": "llama", "type": "Q4_1", "embed": "Q8_0"}
    # What loadModel(file, { dtype: 'float32' }) runs: the scales widened to float32.
    gguf_to_mlx.convert(smollm2, out / "smollm2-f32", float32_scales=True)
    index["smollm2-f32"] = {"gguf": str(smollm2), "ref": "smollm2-f32", "arch": "llama", "type": "Q4_1", "embed": "Q8_0", "dtype": "float32"}
    bad = {}
    for file, kwargs in {
        "tiny.gguf": {},
        "arch-gemma3.gguf": {"arch": "gemma3"},
        "pre-jais.gguf": {"pre": "jais"},
        "type-q5_0.gguf": {"bad_type": T.Q5_0},
        "shapes.gguf": {"meta_hidden": 96},
    }.items():
        tiny(out / file, **kwargs)
        bad[file] = kwargs and {k: (v.name if isinstance(v, T) else v) for k, v in kwargs.items()}
    (out / "index.json").write_text(json.dumps({"fixtures": index, "small": bad}, indent=2))


if __name__ == "__main__":
    main()
